"""Encoder (BERT-style) and encoder-decoder models of the zoo."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hwsim.bridge.zoo import (
    FFN,
    HEADS,
    LAYERS,
    POSITIONS,
    VOCAB,
    WIDTH,
    ZooModel,
    config_of,
    floats,
    padding_mask,
    register,
    standard_sizes,
    token_ids,
)


def _encoder_inputs() -> dict[str, Any]:
    """Batch 2 x 12 tokens, the second row left-padded by 3 (a real padding mask)."""
    return {"input_ids": token_ids(2, 12), "attention_mask": padding_mask(2, 12, 3)}


def _model(
    name: str,
    title: str,
    config: str,
    model: str,
    inputs: Callable[[], dict[str, Any]],
    output: str,
    family: str,
    **kw: Any,
) -> None:
    register(ZooModel(name, title, family, config_of(config, **kw), model, inputs, output))


def _encoder(name: str, title: str, config: str, model: str, **kw: Any) -> None:
    _model(name, title, config, model, _encoder_inputs, "last_hidden_state", "encoder", **kw)


_encoder("bert", "BERT", "BertConfig", "BertModel", **standard_sizes())
_encoder("roberta", "RoBERTa", "RobertaConfig", "RobertaModel", **standard_sizes())
_encoder("xlm_roberta", "XLM-RoBERTa", "XLMRobertaConfig", "XLMRobertaModel", **standard_sizes())
_encoder("electra", "ELECTRA", "ElectraConfig", "ElectraModel", **standard_sizes(embedding_size=32))
_encoder("albert", "ALBERT", "AlbertConfig", "AlbertModel", **standard_sizes(embedding_size=32))
_encoder("mpnet", "MPNet", "MPNetConfig", "MPNetModel", **standard_sizes())
_encoder(
    "deberta_v2",
    "DeBERTa-v2",
    "DebertaV2Config",
    "DebertaV2Model",
    **standard_sizes(relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=16),
)
_encoder(
    "modernbert",
    "ModernBERT",
    "ModernBertConfig",
    "ModernBertModel",
    **standard_sizes(local_attention=8, global_attn_every_n_layers=2),
)
_encoder(
    "distilbert",
    "DistilBERT",
    "DistilBertConfig",
    "DistilBertModel",
    dim=WIDTH,
    n_layers=LAYERS,
    n_heads=HEADS,
    hidden_dim=FFN,
    vocab_size=VOCAB,
    max_position_embeddings=POSITIONS,
)


def _seq2seq_inputs() -> dict[str, Any]:
    return {
        "input_ids": token_ids(2, 12),
        "attention_mask": padding_mask(2, 12, 3),
        "decoder_input_ids": token_ids(2, 6, seed=4),
        "use_cache": False,
    }


#: What BART- and Whisper-shaped encoder-decoder configs share.
ENCODER_DECODER = {
    "d_model": WIDTH,
    "encoder_layers": LAYERS,
    "decoder_layers": LAYERS,
    "encoder_attention_heads": HEADS,
    "decoder_attention_heads": HEADS,
    "encoder_ffn_dim": FFN,
    "decoder_ffn_dim": FFN,
    "vocab_size": VOCAB,
}

_model(
    "t5",
    "T5",
    "T5Config",
    "T5ForConditionalGeneration",
    _seq2seq_inputs,
    "logits",
    "seq2seq",
    d_model=WIDTH,
    d_ff=FFN,
    num_layers=LAYERS,
    num_heads=HEADS,
    d_kv=WIDTH // HEADS,
    vocab_size=VOCAB,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
)
_model(
    "bart",
    "BART",
    "BartConfig",
    "BartForConditionalGeneration",
    _seq2seq_inputs,
    "logits",
    "seq2seq",
    **ENCODER_DECODER,
    max_position_embeddings=POSITIONS,
)

#: Whisper's log-mel input: mel bins x (2 x max_source_positions) frames (the conv stem halves).
MELS, AUDIO_POSITIONS = 16, 16


def _whisper_inputs() -> dict[str, Any]:
    return {
        "input_features": floats(2, MELS, 2 * AUDIO_POSITIONS),
        "decoder_input_ids": token_ids(2, 6, seed=4),
        "use_cache": False,
    }


_model(
    "whisper",
    "Whisper",
    "WhisperConfig",
    "WhisperForConditionalGeneration",
    _whisper_inputs,
    "logits",
    "audio",
    **ENCODER_DECODER,
    num_mel_bins=MELS,
    max_source_positions=AUDIO_POSITIONS,
    max_target_positions=POSITIONS,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    decoder_start_token_id=1,
)

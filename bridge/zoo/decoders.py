"""Decoder-only language models of the zoo: dense, mixture-of-experts and state-space."""

from __future__ import annotations

from typing import Any

from hwsim.bridge.zoo import (
    FFN,
    HEADS,
    KV_HEADS,
    LAYERS,
    POSITIONS,
    VOCAB,
    WIDTH,
    ZooModel,
    config_of,
    register,
    standard_sizes,
    token_ids,
)


def _causal_inputs() -> dict[str, Any]:
    return {"input_ids": token_ids(2, 8), "use_cache": False}


def _llama_like(**extra: Any) -> dict[str, Any]:
    """The keyword arguments Llama-shaped configs share: grouped-query attention."""
    return standard_sizes(**{"num_key_value_heads": KV_HEADS, **extra})


def _decoder(name: str, title: str, config: str, model: str, family: str = "decoder", **kw: Any):
    register(
        ZooModel(name, title, family, config_of(config, **kw), model, _causal_inputs, "logits")
    )


_decoder(
    "gpt2",
    "GPT-2",
    "GPT2Config",
    "GPT2LMHeadModel",
    n_layer=LAYERS,
    n_embd=WIDTH,
    n_head=HEADS,
    vocab_size=VOCAB,
    n_positions=POSITIONS,
)
_decoder("llama", "Llama", "LlamaConfig", "LlamaForCausalLM", **_llama_like())
_decoder("mistral", "Mistral", "MistralConfig", "MistralForCausalLM", **_llama_like())
_decoder("qwen2", "Qwen2", "Qwen2Config", "Qwen2ForCausalLM", **_llama_like())
_decoder("qwen3", "Qwen3", "Qwen3Config", "Qwen3ForCausalLM", **_llama_like(head_dim=16))
_decoder("phi3", "Phi-3", "Phi3Config", "Phi3ForCausalLM", **_llama_like())
_decoder("gemma", "Gemma", "GemmaConfig", "GemmaForCausalLM", **_llama_like(head_dim=16))
_decoder(
    "gemma2",
    "Gemma 2",
    "Gemma2Config",
    "Gemma2ForCausalLM",
    **_llama_like(head_dim=16, sliding_window=4),
)
_decoder(
    "gemma3",
    "Gemma 3",
    "Gemma3TextConfig",
    "Gemma3ForCausalLM",
    **_llama_like(head_dim=16, sliding_window=4),
)
_decoder(
    "phi",
    "Phi (1.5, 2)",
    "PhiConfig",
    "PhiForCausalLM",
    **_llama_like(num_key_value_heads=HEADS),
)
_decoder(
    "bloom",
    "BLOOM",
    "BloomConfig",
    "BloomForCausalLM",
    hidden_size=WIDTH,
    n_layer=LAYERS,
    n_head=HEADS,
    vocab_size=VOCAB,
)
_decoder(
    "opt",
    "OPT",
    "OPTConfig",
    "OPTForCausalLM",
    hidden_size=WIDTH,
    num_hidden_layers=LAYERS,
    ffn_dim=FFN,
    num_attention_heads=HEADS,
    vocab_size=VOCAB,
    max_position_embeddings=POSITIONS,
    word_embed_proj_dim=WIDTH,
)
_decoder(
    "falcon",
    "Falcon",
    "FalconConfig",
    "FalconForCausalLM",
    hidden_size=WIDTH,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    vocab_size=VOCAB,
    max_position_embeddings=POSITIONS,
)
_decoder(
    "gpt_neox",
    "GPT-NeoX (Pythia)",
    "GPTNeoXConfig",
    "GPTNeoXForCausalLM",
    hidden_size=WIDTH,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=FFN,
    vocab_size=VOCAB,
    max_position_embeddings=POSITIONS,
)
_decoder(
    "gptj",
    "GPT-J",
    "GPTJConfig",
    "GPTJForCausalLM",
    n_embd=WIDTH,
    n_layer=LAYERS,
    n_head=HEADS,
    rotary_dim=8,
    vocab_size=VOCAB,
    n_positions=POSITIONS,
)
_decoder(
    "mixtral",
    "Mixtral",
    "MixtralConfig",
    "MixtralForCausalLM",
    family="moe",
    **_llama_like(num_local_experts=4, num_experts_per_tok=2),
)
_decoder(
    "qwen2_moe",
    "Qwen2-MoE",
    "Qwen2MoeConfig",
    "Qwen2MoeForCausalLM",
    family="moe",
    **_llama_like(
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=FFN // 2,
        shared_expert_intermediate_size=FFN,
    ),
)
_decoder(
    "qwen3_moe",
    "Qwen3-MoE",
    "Qwen3MoeConfig",
    "Qwen3MoeForCausalLM",
    family="moe",
    **_llama_like(
        head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=FFN // 2
    ),
)
_decoder(
    "mamba",
    "Mamba",
    "MambaConfig",
    "MambaForCausalLM",
    family="ssm",
    hidden_size=WIDTH,
    state_size=8,
    num_hidden_layers=LAYERS,
    vocab_size=VOCAB,
    expand=2,
    conv_kernel=4,
)

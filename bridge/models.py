"""The tiny built-in models the demo, ``hwsim export``, the benchmarks and the tests share.

Built from ``transformers`` configs with random weights (seeded; nothing is downloaded): 2 layers,
128 wide, 4 heads, vocabulary ``VOCAB``, at most ``POSITIONS`` tokens. ``attention`` picks the
``transformers`` attention implementation ('sdpa' or 'eager').
"""

from __future__ import annotations

import os
from typing import Any

import torch

VOCAB = 512
POSITIONS = 64


def _transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: never touch the network
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def tiny_gpt2(attention: str = "sdpa") -> torch.nn.Module:
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=VOCAB, n_positions=POSITIONS
    )
    config._attn_implementation = attention
    return transformers.GPT2LMHeadModel(config).eval()


def tiny_llama(attention: str = "sdpa", kv_heads: int = 2) -> torch.nn.Module:
    """Llama with grouped-query attention (4 query heads over ``kv_heads`` KV heads)."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        vocab_size=VOCAB,
        max_position_embeddings=POSITIONS,
    )
    config._attn_implementation = attention
    return transformers.LlamaForCausalLM(config).eval()


def tokens(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    """Random token ids of shape [batch, seq]."""
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))

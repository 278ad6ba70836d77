"""The model zoo: popular Hugging Face architectures at toy size, built from ``transformers``
configs with seeded random weights (nothing is downloaded), each with example inputs.

``ZOO`` maps a name (``"gpt2"``, ``"whisper"``, ...) to a ``ZooModel``: ``build()`` makes the
module in eval mode, ``inputs()`` its keyword inputs, ``output`` names the output field compared
with eager. ``docs/models.md`` lists them with what each exercises; the tests run them through
``torch.compile(backend="hwsim")`` with ``fallback="error"`` (``tests/bridge/test_model_zoo.py``).

Sizes are small enough to compile in seconds: 2 layers, width 64, 4 heads (2 key/value heads
where the architecture has grouped-query attention), vocabulary ``VOCAB``, 8-16 tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from hwsim.registry import add_unique

#: Vocabulary of the language models (as ``bridge.models``).
VOCAB = 512
#: Width, heads and layers shared by the transformer configs.
WIDTH, HEADS, KV_HEADS, FFN, LAYERS, POSITIONS = 64, 4, 2, 128, 2, 64


def standard_sizes(**extra: Any) -> dict[str, Any]:
    """The config keywords BERT- and Llama-shaped configs share (sizes above), plus ``extra``."""
    return {
        "hidden_size": WIDTH,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": POSITIONS,
        "pad_token_id": 0,
        **extra,
    }


@dataclass(frozen=True)
class ZooModel:
    """One architecture: its config, its model class, and what to feed it.

    family: 'decoder', 'moe', 'encoder', 'seq2seq', 'vision', 'audio' or 'ssm'.
    config: makes the ``transformers`` config (small sizes, see the module docstring).
    model_class: the ``transformers`` class ``build`` makes from it.
    output: the output field whose value is compared ('logits', 'last_hidden_state', ...).
    """

    name: str
    title: str
    family: str
    config: Callable[[], Any]
    model_class: str
    inputs: Callable[[], dict[str, Any]]
    output: str

    def build(self) -> torch.nn.Module:
        """The model with seeded random weights, in eval mode."""
        return self.build_as(self.model_class)

    def build_as(self, model_class: str, **overrides: Any) -> torch.nn.Module:
        """Another head on the same config (``BertForMaskedLM`` for training), with config
        fields overridden (``hidden_dropout_prob=0.0``), seeded, in eval mode."""
        config = self.config()
        for key, value in overrides.items():
            if not hasattr(config, key):
                raise AttributeError(f"{self.name}: {type(config).__name__} has no {key!r}")
            setattr(config, key, value)
        model_type = getattr(transformers_module(), model_class)
        return seeded(lambda: model_type(config))

    def pick(self, outputs: Any) -> torch.Tensor:
        """The compared tensor of a model's outputs."""
        value = outputs[self.output] if isinstance(outputs, dict) else getattr(outputs, self.output)
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{self.name}: output {self.output!r} is {type(value).__name__}")
        return value


def config_of(name: str, **kwargs: Any) -> Callable[[], Any]:
    """A factory of the ``transformers`` config class ``name`` with ``kwargs``."""
    return lambda: getattr(transformers_module(), name)(**kwargs)


def transformers_module() -> Any:
    """``transformers`` with offline hub access and quiet logging (configs only)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def seeded(build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """``build()`` with torch's RNG seeded, in eval mode (dropout off)."""
    torch.manual_seed(0)
    return build().eval()


def token_ids(batch: int = 2, seq: int = 8, seed: int = 1, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def padding_mask(batch: int = 2, seq: int = 8, pad: int = 3) -> torch.Tensor:
    """Ones, with the last row's first ``pad`` positions masked (left padding)."""
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[-1, :pad] = 0
    return mask


def floats(*shape: int, seed: int = 2) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


ZOO: dict[str, ZooModel] = {}


def register(model: ZooModel) -> None:
    add_unique(ZOO, model.name, model, "zoo model")


def _load() -> None:
    from hwsim.bridge.zoo import decoders, encoders, vision_audio  # noqa: F401


_load()

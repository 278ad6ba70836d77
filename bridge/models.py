"""The tiny built-in models the demo, ``hwsim export``, the benchmarks and the tests share.

The language models are built from ``transformers`` configs with random weights (seeded; nothing
is downloaded): 2 layers, 128 wide, 4 heads, vocabulary ``VOCAB``, at most ``POSITIONS`` tokens.
``attention`` picks the ``transformers`` attention implementation ('sdpa' or 'eager'). The ResNet
is written here (torchvision-style basic blocks; torchvision is not a dependency).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 512
POSITIONS = 64


def _transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: never touch the network
    try:
        import transformers
    except ModuleNotFoundError:
        from hwsim.errors import HwsimError

        raise HwsimError(
            "the built-in language models are built with Hugging Face transformers, which is not "
            "installed: pip install 'hwsim[models]'"
        ) from None

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
    torch.manual_seed(0)
    config = _language_config("LlamaConfig", num_key_value_heads=kv_heads)
    config._attn_implementation = attention
    return _transformers().LlamaForCausalLM(config).eval()


def tokens(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    """Random token ids of shape [batch, seq]."""
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


class BasicBlock(nn.Module):
    """torchvision's BasicBlock, written out (torchvision is not a dependency)."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + identity)


class TinyResNet(nn.Module):
    """Stem conv + BN + ReLU + max pool, an identity block, a stride-2 block (40 channels: more
    than tiny's 32 partitions), adaptive average pool, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.block1 = BasicBlock(16, 16, 1)
        self.block2 = BasicBlock(16, 40, 2)
        self.head = nn.Linear(40, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn(self.stem(x))))
        x = self.block2(self.block1(x))
        return self.head(F.adaptive_avg_pool2d(x, (1, 1)).flatten(1))


def tiny_resnet() -> nn.Module:
    torch.manual_seed(0)
    return _trained_statistics(TinyResNet()).eval()


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand + BN + ReLU6, 3x3 depthwise + BN + ReLU6, 1x1 project +
    BN, with the identity added when stride is 1 and the widths match."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = c_in * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(c_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, c_out, 1, bias=False),
            nn.BatchNorm2d(c_out),
        ]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return x + y if self.residual else y


class TinyMobileNetV2(nn.Module):
    """MobileNetV2's shape at toy width (torchvision is not a dependency): stem conv/BN/ReLU6,
    inverted residuals (expansion 1 and 6, strides 1 and 2, one residual), 1x1 head conv,
    adaptive average pool, dropout, Linear."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU6(),
            InvertedResidual(8, 8, 1, 1),
            InvertedResidual(8, 12, 2, 6),
            InvertedResidual(12, 12, 1, 6),
            nn.Conv2d(12, 48, 1, bias=False),
            nn.BatchNorm2d(48),
            nn.ReLU6(),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(48, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1)).flatten(1)
        return self.classifier(x)


def tiny_mobilenet_v2() -> nn.Module:
    torch.manual_seed(0)
    return _trained_statistics(TinyMobileNetV2()).eval()


def _trained_statistics(model: nn.Module) -> nn.Module:
    """Batch-norm statistics and affine parameters a trained model would have, not 0 and 1."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            assert module.running_mean is not None and module.running_var is not None
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.5, 0.5)
    return model


def _language_config(name: str, **extra: Any) -> Any:
    """``transformers.<name>`` at the sizes the tiny language models share, plus ``extra``."""
    return getattr(_transformers(), name)(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=VOCAB,
        max_position_embeddings=POSITIONS,
        **extra,
    )


def tiny_bert() -> nn.Module:
    torch.manual_seed(0)
    return _transformers().BertModel(_language_config("BertConfig")).eval()


def tiny_roberta() -> nn.Module:
    torch.manual_seed(0)
    return _transformers().RobertaModel(_language_config("RobertaConfig")).eval()


def tiny_t5() -> nn.Module:
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.T5Config(
        d_model=128, d_ff=256, num_layers=2, num_heads=4, d_kv=32, vocab_size=VOCAB
    )
    return transformers.T5Model(config).eval()


def tiny_mixtral() -> nn.Module:
    """Mixtral with 4 experts, 2 per token (transformers' default grouped-mm experts)."""
    torch.manual_seed(0)
    config = _language_config(
        "MixtralConfig", num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2
    )
    return _transformers().MixtralForCausalLM(config).eval()

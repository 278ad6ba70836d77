"""Vision and speech models of the zoo: ViT-style, hierarchical and convolutional image
encoders, the CLIP/SigLIP image-text pairs, and wav2vec 2.0."""

from __future__ import annotations

from typing import Any

from hwsim.bridge.zoo import (
    FFN,
    HEADS,
    LAYERS,
    VOCAB,
    WIDTH,
    ZooModel,
    config_of,
    floats,
    register,
    token_ids,
    transformers_module,
)

#: Images: batch 2, 3 channels, 32 x 32 pixels, 8 x 8 patches (16 patches).
IMAGE, PATCH = 32, 8


def _image_inputs() -> dict[str, Any]:
    return {"pixel_values": floats(2, 3, IMAGE, IMAGE)}


def _vision(name: str, title: str, config: str, model: str, output: str, **kw: Any) -> None:
    register(ZooModel(name, title, "vision", config_of(config, **kw), model, _image_inputs, output))


_VIT = {
    "hidden_size": WIDTH,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "intermediate_size": FFN,
    "image_size": IMAGE,
    "patch_size": PATCH,
}

_vision("vit", "ViT", "ViTConfig", "ViTModel", "last_hidden_state", **_VIT)
_vision("deit", "DeiT", "DeiTConfig", "DeiTModel", "last_hidden_state", **_VIT)
_vision(
    "dinov2",
    "DINOv2",
    "Dinov2Config",
    "Dinov2Model",
    "last_hidden_state",
    **{k: v for k, v in _VIT.items() if k != "intermediate_size"},
    mlp_ratio=2,
)
_vision(
    "swin",
    "Swin Transformer",
    "SwinConfig",
    "SwinModel",
    "last_hidden_state",
    image_size=IMAGE,
    patch_size=4,
    embed_dim=16,
    depths=[2, 2],
    num_heads=[2, 4],
    window_size=4,
)
_vision(
    "convnext",
    "ConvNeXt",
    "ConvNextConfig",
    "ConvNextModel",
    "pooler_output",
    hidden_sizes=[16, 32],
    depths=[1, 1],
    num_stages=2,
)
_vision(
    "resnet",
    "ResNet",
    "ResNetConfig",
    "ResNetModel",
    "pooler_output",
    embedding_size=16,
    hidden_sizes=[16, 32],
    depths=[1, 1],
    layer_type="bottleneck",
)
_vision(
    "segformer",
    "SegFormer",
    "SegformerConfig",
    "SegformerModel",
    "last_hidden_state",
    num_encoder_blocks=2,
    depths=[1, 1],
    sr_ratios=[2, 1],
    hidden_sizes=[16, 32],
    patch_sizes=[7, 3],
    strides=[4, 2],
    num_attention_heads=[1, 2],
    mlp_ratios=[2, 2],
)


def _pair_inputs() -> dict[str, Any]:
    return {"input_ids": token_ids(2, 8), "pixel_values": floats(2, 3, IMAGE, IMAGE)}


def _pair_config(prefix: str):
    """CLIP / SigLIP: a text tower and a vision tower of the zoo's size."""

    def config() -> Any:
        t = transformers_module()
        tower = {
            "hidden_size": WIDTH,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "intermediate_size": FFN,
        }
        text = getattr(t, f"{prefix}TextConfig")(
            **tower, vocab_size=VOCAB, max_position_embeddings=16
        )
        vision = getattr(t, f"{prefix}VisionConfig")(**tower, image_size=IMAGE, patch_size=PATCH)
        return getattr(t, f"{prefix}Config")(
            text_config=text.to_dict(), vision_config=vision.to_dict()
        )

    return config


for _name, _title, _prefix in (("clip", "CLIP", "CLIP"), ("siglip", "SigLIP", "Siglip")):
    register(
        ZooModel(
            _name,
            _title,
            "vision",
            _pair_config(_prefix),
            f"{_prefix}Model",
            _pair_inputs,
            "logits_per_image",  # the image-text similarity logits
        )
    )


def _speech_inputs() -> dict[str, Any]:
    """Two clips of 800 raw samples (the conv stem reduces them to 39 frames)."""
    return {"input_values": floats(2, 800)}


register(
    ZooModel(
        "wav2vec2",
        "wav2vec 2.0",
        "audio",
        config_of(
            "Wav2Vec2Config",
            hidden_size=WIDTH,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            intermediate_size=FFN,
            conv_dim=(32, 32),
            conv_stride=(5, 4),
            conv_kernel=(10, 4),
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4,
        ),
        "Wav2Vec2Model",
        _speech_inputs,
        "last_hidden_state",
    )
)

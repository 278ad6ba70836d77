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
    floats,
    register,
    seeded,
    token_ids,
    transformers_module,
)

#: Images: batch 2, 3 channels, 32 x 32 pixels, 8 x 8 patches (16 patches).
IMAGE, PATCH = 32, 8


def _image_inputs() -> dict[str, Any]:
    return {"pixel_values": floats(2, 3, IMAGE, IMAGE)}


def _vision(name: str, title: str, config: str, model: str, output: str, **kw: Any) -> None:
    def build():
        t = transformers_module()
        return seeded(lambda: getattr(t, model)(getattr(t, config)(**kw)))

    register(ZooModel(name, title, "vision", build, _image_inputs, output))


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


def _image_text(name: str, title: str, prefix: str) -> None:
    """CLIP / SigLIP: a text tower and a vision tower; compared on the image-text logits."""

    def build():
        t = transformers_module()
        tower = {"hidden_size": WIDTH, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS}
        text = getattr(t, f"{prefix}TextConfig")(
            **tower, intermediate_size=FFN, vocab_size=VOCAB, max_position_embeddings=16
        )
        vision = getattr(t, f"{prefix}VisionConfig")(
            **tower, intermediate_size=FFN, image_size=IMAGE, patch_size=PATCH
        )
        config = getattr(t, f"{prefix}Config")(
            text_config=text.to_dict(), vision_config=vision.to_dict()
        )
        return seeded(lambda: getattr(t, f"{prefix}Model")(config))

    register(ZooModel(name, title, "vision", build, _pair_inputs, "logits_per_image"))


_image_text("clip", "CLIP", "CLIP")
_image_text("siglip", "SigLIP", "Siglip")


def _speech_inputs() -> dict[str, Any]:
    """Two clips of 800 raw samples (the conv stem reduces them to 39 frames)."""
    return {"input_values": floats(2, 800)}


def _wav2vec2():
    t = transformers_module()
    config = t.Wav2Vec2Config(
        hidden_size=WIDTH,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        conv_dim=(32, 32),
        conv_stride=(5, 4),
        conv_kernel=(10, 4),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
    )
    return seeded(lambda: t.Wav2Vec2Model(config))


register(
    ZooModel("wav2vec2", "wav2vec 2.0", "audio", _wav2vec2, _speech_inputs, "last_hidden_state")
)

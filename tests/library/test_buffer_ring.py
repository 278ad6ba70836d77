"""``BufferRing`` hands out its tiles in rotation, the same view object for the same slot and
shape each time round (so a ``lang.repeat`` body that captures it compares equal at once), and a
new one once the slot's tile is re-allocated."""

from __future__ import annotations

from hwsim import lang
from hwsim.lang import TensorSpec
from hwsim.lang import isa as nisa
from hwsim.library.common import BufferRing


def test_a_ring_hands_out_its_views_in_rotation_and_again_as_the_same_objects() -> None:
    seen: dict[str, list[object]] = {}

    @lang.kernel
    def k(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm, name="out")
        ring = BufferRing(2)
        fp32 = [ring((128, 64), lang.float32, lang.sbuf) for _ in range(4)]  # slots 0 1 0 1
        narrow = ring((128, 32), lang.float32, lang.sbuf)  # slot 0, a shape that fits
        bf16 = ring((128, 64), lang.bfloat16, lang.sbuf)  # slot 1, re-allocated in bf16
        again = [ring((128, 64), lang.float32, lang.sbuf) for _ in range(2)]  # slots 0 1
        made = [*fp32, narrow, bf16, *again]
        for view in made:
            nisa.memset(view, 0.0)
        nisa.dma_copy(dst=out, src=x)
        seen["views"] = made
        return out

    k.build(TensorSpec((128, 64), "fp32"), config="trn2")
    first, second, third, fourth, narrow, bf16, fifth, sixth = seen["views"]
    assert first.tile is not second.tile  # two slots
    assert third is first and fourth is second  # the same slot and shape: the same view
    assert narrow.tile is first.tile and narrow.shape == (128, 32)
    assert bf16.tile is not second.tile and bf16.dtype.name == "bf16"
    assert fifth is first  # slot 0 kept its tile
    assert sixth.tile is not bf16.tile and sixth is not second  # slot 1 re-allocated again

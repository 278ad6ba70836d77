from hwsim import lang
from hwsim.lang import TensorSpec


@lang.kernel
def copy(x=TensorSpec((32, 16), "fp32")):  # noqa: B008
    out = lang.ndarray((32, 16), lang.float32, buffer=lang.hbm, name="out")
    tile = lang.load(x)
    while True:  # a loop that never ends: tracing is stopped by the watchdog
        lang.isa.tensor_copy(tile, tile)
    return out

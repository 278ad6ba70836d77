from hwsim import lang
from hwsim.lang import TensorSpec


@lang.kernel
def copy(x=TensorSpec((128, 16), "fp32")):  # noqa: B008
    out = lang.ndarray((256, 16), lang.float32, buffer=lang.hbm, name="out")
    lang.store(out, lang.load(x[0:256]))  # rows 128..255 do not exist
    return out

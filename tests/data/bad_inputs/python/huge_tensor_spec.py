from hwsim import lang
from hwsim.lang import TensorSpec


@lang.kernel
def copy(x=TensorSpec((1_000_000_000, 1_000_000_000), "fp32")):  # noqa: B008  (4 EB)
    out = lang.ndarray((32, 16), lang.float32, buffer=lang.hbm, name="out")
    lang.store(out, lang.load(x[0:32, 0:16]))
    return out

from hwsim import lang
from hwsim.lang import TensorSpec


@lang.kernel
def copy(x=TensorSpec((32, 16), "fp32")):  # noqa: B008
    steps = 0
    while True:  # no instruction is ever made: only the watchdog's clock stops it
        steps += 1

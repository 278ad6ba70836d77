import nki
import nki.language as nl
import numpy as np


@nki.jit
def copy(x):
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for _ in nl.affine_range(10**9):  # a typo of a trip count: stopped by the watchdog
        nl.store(out, value=nl.load(x))
    return out


def copy_inputs():
    return (np.zeros((32, 64), np.float32),)

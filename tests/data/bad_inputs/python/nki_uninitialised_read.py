import nki
import nki.language as nl
import numpy as np


@nki.jit
def copy(x):
    out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    never_written = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
    nl.store(out, value=never_written)
    return out


def copy_inputs():
    return (np.zeros((32, 64), np.float32),)

"""``neuronxcc.nki.compiler.backends.neuron.*`` and ``neuronxcc.nki.language.constants``: the
names nki-samples' reference kernels import from the compiler's internals (``TileIndex``,
``local_tile`` for annotations; ``sizeinbytes``)."""

from hwsim.nki.index import IndexExpr, IndexSum
from hwsim.nki.tensor import NkiTensor

#: An index expression (``nl.arange`` / ``nl.mgrid`` arithmetic).
TileIndex = IndexExpr | IndexSum
#: An on-chip tile.
local_tile = NkiTensor


def sizeinbytes(dtype: object) -> int:
    """``nki.language.constants.sizeinbytes(dtype)``: bytes of one element."""
    from hwsim.nki.dtypes import hw_dtype

    return hw_dtype(dtype).itemsize

"""Source tags name the kernel author's line: the first frame outside hwsim, or a library
kernel's own line when it is built on its own (``hwsim.lang.kernel.source_location``)."""

from __future__ import annotations

import inspect

from hwsim import lang
from hwsim.lang import TensorSpec
from hwsim.library import matmul_optimized
from hwsim.library.common import DmaQueues, Evacuator

THIS_FILE = __file__.rsplit("/", 1)[-1]


@lang.kernel
def copy_through_helpers(x):
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
    queues = DmaQueues()
    tile = lang.ndarray(x.shape, x.dtype)
    queues.load(tile, x)  # LOAD: a library helper (common.py) emits the DMA
    copied = lang.ndarray(x.shape, x.dtype)
    Evacuator()(copied, tile)  # EVACUATE: a library helper emits the copy
    queues.store(out, copied)  # STORE
    return out


def _line_of(marker: str) -> int:
    lines, first = inspect.getsourcelines(copy_through_helpers.fn)
    return first + next(i for i, line in enumerate(lines) if marker in line)


def test_tags_of_a_kernel_in_a_test_file_name_its_lines_not_the_helpers():
    built = copy_through_helpers.build(TensorSpec((32, 64), "bf16"), config="tiny")
    tags = [i.tag for core in built.program.cores for _, _, i in core.instructions()]
    expected = {
        f"copy_through_helpers:{THIS_FILE}:{_line_of(marker)}"
        for marker in ("# LOAD", "# EVACUATE", "# STORE")
    }
    assert set(tags) == expected


def test_tags_of_a_library_kernel_name_library_kernel_lines_not_common_py():
    built = matmul_optimized.build(
        TensorSpec((256, 128), "bf16"), TensorSpec((256, 512), "bf16"), config="tiny"
    )
    tags = {i.tag for core in built.program.cores for _, _, i in core.instructions()}
    files = {tag.split(":")[1] for tag in tags}
    assert "common.py" not in files, tags
    assert files <= {"matmul.py", "optimized_matmul.py"}, tags
    assert len(tags) > 3  # the lines of the kernel's code, not one shared line


def test_library_kernel_called_from_an_author_kernel_names_the_author_line():
    @lang.kernel
    def wraps_library(lhsT, rhs):
        return matmul_optimized.fn(lhsT, rhs)  # CALL

    built = wraps_library.build(
        TensorSpec((256, 128), "bf16"), TensorSpec((256, 512), "bf16"), config="tiny"
    )
    tags = {i.tag for core in built.program.cores for _, _, i in core.instructions()}
    lines, first = inspect.getsourcelines(wraps_library.fn)
    call = first + next(i for i, line in enumerate(lines) if "# CALL" in line)
    assert tags == {f"wraps_library:{THIS_FILE}:{call}"}

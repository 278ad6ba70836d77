"""Bounds on workload sizes: dimensions spelled in ASCII digits of bounded length, and the HBM a
workload needs checked against the config's capacity before anything is allocated."""

from __future__ import annotations

from hwsim.config.schema import HardwareConfig
from hwsim.errors import WorkloadError, shorten
from hwsim.program import Program
from hwsim.report.peaks import hbm_capacity_bytes_per_chip

#: Digits a dimension may have. A dimension of 10^12 elements does not fit any chip's HBM even at
#: one byte per element; the cap keeps ``int()`` from converting thousands of digits.
MAX_DIM_DIGITS = 12
#: One dimension: ASCII digits only (``str.isdigit`` and regex ``\d`` also accept fullwidth and
#: other Unicode digits, which no workload string should contain).
DIM = r"[0-9]+"


def parse_dims(groups: tuple[str, ...], names: str, text: str) -> tuple[int, ...]:
    """Integers of ``groups`` (each matched by ``DIM``), named by the letters of ``names`` in
    errors about ``text``: each at most ``MAX_DIM_DIGITS`` digits and at least 1."""
    dims = []
    for name, digits in zip(names, groups, strict=True):
        if len(digits) > MAX_DIM_DIGITS:
            raise WorkloadError(
                f"'{shorten(text)}': {name} has {len(digits)} digits; a dimension has at most "
                f"{MAX_DIM_DIGITS} (below 10^{MAX_DIM_DIGITS} elements)"
            )
        value = int(digits)
        if value < 1:
            raise WorkloadError(f"'{shorten(text)}': {name} must be at least 1, got {value}")
        dims.append(value)
    return tuple(dims)


def check_hbm_fits(need_bytes: int, config: HardwareConfig, workload: str) -> None:
    """Raise ``WorkloadError`` if ``need_bytes`` of HBM tensors exceed the chip's HBM."""
    have_bytes = hbm_capacity_bytes_per_chip(config)
    if need_bytes > have_bytes:
        raise WorkloadError(
            f"{shorten(workload)}: needs {need_bytes:,} B of HBM ({human_bytes(need_bytes)}: "
            f"inputs, outputs and scratch), {config.chip.name} has {have_bytes:,} B "
            f"({config.hbm.stacks} x {human_bytes(config.hbm.capacity_bytes_per_stack)} stacks): "
            "use smaller shapes or a config with more HBM (hbm.capacity_bytes_per_stack)"
        )


def program_hbm_bytes(program: Program) -> int:
    """HBM a built program's tensors occupy when it runs: tensors with bytes of their own plus
    the planned scratch arena (tensors placed in it share bytes)."""
    own = sum(d.nbytes for d in program.hbm.values() if d.address_bytes is None)
    return own + program.scratch_arena_bytes


def human_bytes(n: int) -> str:
    """``n`` bytes with a binary unit, e.g. ``3.47 EiB``."""
    for unit, shift in (("EiB", 60), ("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.2f} {unit}"
    return f"{n / 1024:.2f} KiB" if n >= 1024 else f"{n} B"

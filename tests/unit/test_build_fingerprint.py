"""The program builder's output is pinned: speed work on it (hazard lookup, memoised access
patterns, cached source tags) must give the very same programs, so the very same ticks.

``tests/data/build_fingerprints.json`` holds, per program of ``fingerprint_programs``, the
SHA-256 of every instruction (its semaphore waits and signals included), HBM tensor and
allocation, generated from main before the builder's speed work. Regenerate it only for a change
that means to alter programs: ``python tests/unit/test_build_fingerprint.py --write``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fingerprint_programs import fingerprint, programs

STORED = Path(__file__).resolve().parents[1] / "data" / "build_fingerprints.json"
NAMES = sorted(json.loads(STORED.read_text())) if STORED.exists() else []


@pytest.fixture(scope="module")
def builders(tmp_path_factory: pytest.TempPathFactory):
    return programs(tmp_path_factory.mktemp("fingerprints"))


def test_every_pinned_program_is_still_built() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        assert sorted(programs(Path(tmp))) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_program_is_unchanged(builders, name: str) -> None:
    expected = json.loads(STORED.read_text())[name]
    program = builders[name]()
    assert (program.instruction_count, fingerprint(program)) == tuple(expected)


def main() -> None:
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/unit/test_build_fingerprint.py --write")
    with tempfile.TemporaryDirectory() as tmp:
        found = {}
        for name, build in programs(Path(tmp)).items():
            program = build()
            found[name] = [program.instruction_count, fingerprint(program)]
            print(name, *found[name], flush=True)
    STORED.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

"""No false positives: every library kernel reads only memory it wrote (initcheck on, explicitly,
whatever HWSIM_INITCHECK says), and still passes its numerics check."""

from __future__ import annotations

import pytest

from hwsim.config import load_config
from hwsim.library.workloads import WORKLOADS
from hwsim.machine.initcheck import InitChecker
from hwsim.machine.simulator import run


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.name)
def test_library_kernel_reads_no_uninitialised_memory(workload, monkeypatch):
    checked = []
    execute = InitChecker.execute

    def counting(self, state, pc, instruction):
        checked.append(instruction)
        execute(self, state, pc, instruction)

    monkeypatch.setattr(InitChecker, "execute", counting)
    config = load_config("trn2")
    program = workload.build(config)
    result = run(program, config, initcheck=True, summarize=False)
    assert len(checked) == program.instruction_count  # every instruction went through the check
    ok = workload.check(result.outputs).ok
    assert ok

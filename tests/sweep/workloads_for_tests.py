"""Workloads the sweep tests name as ``workloads_for_tests.py:NAME``: a small gemm whose builds are
logged (one per run: the build reads the whole config, so no two configs share a lowering) and
can be held at a gate, and ones that fail or kill their worker on configs with two DMA engines."""

from __future__ import annotations

import os
import signal
import time

from hwsim.config import HardwareConfig, config_hash
from hwsim.program import Program
from hwsim.workloads.gemm import GemmSpec, build_gemm

GEMM = GemmSpec.parse("gemm:32x64x64:bf16")
#: Where ``counted`` appends the hash of each config it builds for (set by the test).
LOG_ENV = "HWSIM_SWEEP_TEST_LOG"
#: Seconds each ``counted`` build sleeps, so a test can interrupt a sweep mid-way.
SLEEP_ENV = "HWSIM_SWEEP_TEST_SLEEP_S"
#: A file each ``counted`` build waits for (after logging itself), so a test can hold runners.
GATE_ENV = "HWSIM_SWEEP_TEST_GATE"
GATE_TIMEOUT_S = 60.0


def counted(config: HardwareConfig) -> Program:
    digest = config_hash(config)  # reads every field: the lowering is keyed on the whole config
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a") as file:
            file.write(digest + "\n")
    gate = os.environ.get(GATE_ENV)
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while gate and not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never opened the gate {gate}")
        time.sleep(0.01)
    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    return build_gemm(GEMM, config)


def fails_on_two_engines(config: HardwareConfig) -> Program:
    if config.dma.engines == 2:
        raise ValueError("this test workload refuses configs with 2 DMA engines")
    return build_gemm(GEMM, config)


def kills_worker_on_two_engines(config: HardwareConfig) -> Program:
    if config.dma.engines == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return build_gemm(GEMM, config)

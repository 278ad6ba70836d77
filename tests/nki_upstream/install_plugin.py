"""The pytest plugin that runs nki-samples' own unit tests on the simulator (``-p``):
``import neuronxcc.nki`` / ``import nki`` resolve to hwsim.nki, and the device the tests ask
about is the simulated one.

    cd third_party/nki-samples/test/unit
    PYTHONPATH=../../src:<checkout> pytest -p tests.nki_upstream.install_plugin --simulation-only

``test_double_row_matmul.py`` runs its kernel only on a trn2 instance, which it finds by
reading ``/sys/devices/virtual/dmi/id/product_name`` (and fails with a NameError where that
file is missing: it calls ``warnings`` without importing it). The device here is a simulated
trn2 (hwsim.nki's default config), so the plugin answers "trn2" to that question: the test
then runs its kernel, instead of returning before it.

With ``HWSIM_NKI_REASONS=<file>`` set, each failed test's reason (``failure_reason``) is
appended to that file as one JSON line (``unit_tests.py`` reads it: pytest's short summary
cuts the message to the terminal's width, and an assertion's first line is often empty).
"""

import json
import os

import pytest

import hwsim.nki

hwsim.nki.install()

#: The instance type the tests see: the simulated NeuronCore's (hwsim.nki runs trn2).
TARGET = "trn2"


def pytest_configure(config):
    # a mark nki-samples' CI defines outside test/unit (test_flash_attn_bwd.py's perf test)
    config.addinivalue_line("markers", "arch_specific_xfail: expected to fail on some targets")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and hasattr(module, "get_target_string"):
            module.get_target_string = lambda: TARGET


#: Lines of a failure message kept as its reason (numpy's assert_allclose: the tolerance,
#: the mismatch count and the largest differences).
REASON_LINES = 4


def failure_reason(message: str) -> str:
    """The first non-empty lines of a failure's message, joined into one line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return "; ".join(lines[:REASON_LINES])[:400]


def pytest_runtest_logreport(report):
    target = os.environ.get("HWSIM_NKI_REASONS")
    if not target or not report.failed:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr).splitlines()[-1]
    entry = {"test": report.nodeid, "when": report.when, "reason": failure_reason(message)}
    line = json.dumps(entry)
    with open(target, "a") as out:  # one short line per write: xdist workers may share the file
        out.write(line + "\n")

"""Runs one page's code blocks in order in the current folder (called by test_doc_blocks.py).

Usage: python run_blocks.py PAGE VENV_BIN [--slow]. Python blocks share one namespace; commands
run in a shell with the checkout's ``.venv/bin/`` mapped to VENV_BIN. Files the page shows
(``# NAME.py`` blocks) are saved first. Stops at the first block that fails, naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.docs.blocks import ROOT, Block, blocks_of

#: How long one documented command may take before the walk calls it hung.
COMMAND_TIMEOUT_S = 900


def main(page: str, venv_bin: str, slow: bool) -> int:
    sys.path.insert(0, os.getcwd())  # as `python` started in the page's folder: its files import
    namespace: dict[str, object] = {"__name__": "__main__"}
    blocks = blocks_of(ROOT / page)
    for block in blocks:  # the page's files first, as a reader has them saved before running
        if block.kind == "save":
            Path(block.save_as).parent.mkdir(parents=True, exist_ok=True)
            Path(block.save_as).write_text(block.text, encoding="utf-8")
    for block in blocks:
        if block.kind == "save" or block.mode == "skip" or (block.mode == "slow" and not slow):
            continue
        print(f"--- {block.where} ({block.kind})", flush=True)
        if block.kind == "python":
            try:
                exec(compile(block.text, block.where, "exec"), namespace)
            except Exception:
                traceback.print_exc()
                print(f"FAILED: the python block at {block.where}", flush=True)
                return 1
        elif not _commands(block, venv_bin):
            return 1
    return 0


def _commands(block: Block, venv_bin: str) -> bool:
    env = dict(os.environ, PATH=f"{venv_bin}{os.pathsep}{os.environ['PATH']}")
    for command, expected in block.expected:
        command = command.replace(".venv/bin/", venv_bin + "/")
        print(f"$ {command}", flush=True)
        done = subprocess.run(
            command, shell=True, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
        )
        output = done.stdout + done.stderr
        print(output[-4000:], flush=True)
        errors = [line for line in expected if line.startswith("hwsim: error:")]
        if errors:
            missing = [line for line in errors if line.strip() not in output]
            if done.returncode == 0 or missing:
                print(f"FAILED: {block.where}: `{command}` should fail with {errors}", flush=True)
                return False
        elif done.returncode != 0:
            print(f"FAILED: {block.where}: `{command}` exited {done.returncode}", flush=True)
            return False
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], "--slow" in sys.argv[3:]))

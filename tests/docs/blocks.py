"""The code blocks of the README and docs/, as the doc-walking test runs them.

A fenced block's language says what it is:

- ``python``: run, in order with the page's other blocks, in one namespace per page;
- ``python`` or ``yaml`` whose first line is a comment naming a file (``# my_kernel.py``,
  ``# mine.yaml``): that file, saved into the page's working folder instead of run;
- ``console``: commands after ``$ `` are run, the lines after them are their expected output; an
  expected ``hwsim: error: ...`` line means the command must fail with that message;
- a block with no language: every line is a command (``\\`` continues a line);
- ``text``, ``yaml`` and any other language: shown, not run.

An HTML comment on the line before the fence changes that: ``<!-- docs-test: slow -->`` runs the
block only in the slow run (``make test-all``), ``<!-- docs-test: skip: REASON -->`` never (the
reason is required, and shown in the test's output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Pages generated from the code (a test of their own keeps each one current): not walked.
GENERATED = {"op-support.md", "nki-support.md"}
_FENCE = re.compile(r"^```(\S*)\s*$")
_MARK = re.compile(r"^<!--\s*docs-test:\s*(slow|skip)(?::\s*(.+?))?\s*-->\s*$")
_SAVE_AS = re.compile(r"^#\s*([\w./-]+\.(?:py|yaml))\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # path relative to the checkout
    line: int  # 1-based line of the opening fence
    kind: str  # "python", "save", "commands" or "shown"
    text: str
    mode: str = "run"  # "run", "slow" or "skip"
    reason: str = ""
    save_as: str = ""
    expected: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (command, expected output lines)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in GENERATED)
    return [ROOT / "README.md", *docs]


def blocks_of(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").split("\n")
    rel = str(page.relative_to(ROOT))
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if end == len(lines):
            raise ValueError(f"{rel}:{i + 1}: a code block is never closed")
        body = lines[i + 1 : end]
        mark = _MARK.match(lines[i - 1]) if i > 0 else None
        mode, reason = (mark.group(1), mark.group(2) or "") if mark else ("run", "")
        if mode == "skip" and not reason:
            raise ValueError(f"{rel}:{i}: 'docs-test: skip' needs a reason")
        found.append(_block(rel, i + 1, fence.group(1), body, mode, reason))
        i = end + 1
    return found


def _block(page: str, line: int, lang: str, body: list[str], mode: str, reason: str) -> Block:
    text = "\n".join(body) + "\n"
    if lang == "python":
        save = _SAVE_AS.match(body[0]) if body else None
        if save:
            return Block(page, line, "save", text, mode, reason, save_as=save.group(1))
        return Block(page, line, "python", text, mode, reason)
    if lang == "yaml":
        save = _SAVE_AS.match(body[0]) if body else None
        if save:
            return Block(page, line, "save", text, mode, reason, save_as=save.group(1))
    if lang == "console":
        return Block(page, line, "commands", text, mode, reason, expected=_console(body))
    if lang == "":
        return Block(page, line, "commands", text, mode, reason, expected=_plain(body))
    return Block(page, line, "shown", text, "skip", "shown, not run")


def _plain(body: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    commands: list[tuple[str, tuple[str, ...]]] = []
    pending = ""
    for raw in body:
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        command = (pending + raw).strip()
        pending = ""
        if command:
            commands.append((command, ()))
    return tuple(commands)


def _console(body: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    commands: list[tuple[str, list[str]]] = []
    pending = ""
    for raw in body:
        if pending or raw.startswith("$ "):
            line = pending + (raw[2:] if raw.startswith("$ ") and not pending else raw)
            if line.rstrip().endswith("\\"):
                pending = line.rstrip()[:-1] + " "
                continue
            pending = ""
            commands.append((line.strip(), []))
        elif commands:
            commands[-1][1].append(raw)
    return tuple((command, tuple(out)) for command, out in commands)

"""The sweep's progress display: a rich bar with ETA and a live failure count on a terminal, a line
per tenth of the sweep otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class SweepProgress:
    """``with SweepProgress(total, title) as bar: bar.advance(ok)`` once per finished run."""

    def __init__(
        self,
        total: int,
        title: str,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.total, self.title, self.enabled = total, title, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.done = self.failed = 0
        self._start = time.perf_counter()
        self._live: Any = None
        self._task: Any = None
        self._next_line = 0.1

    def __enter__(self) -> SweepProgress:
        self._start = time.perf_counter()
        if self.enabled and self.total and self.stream.isatty():
            self._live = _rich_progress(self.stream)
            self._task = self._live.add_task(self.title, total=self.total, failed=0)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def advance(self, ok: bool) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        if self._live is not None:
            self._live.update(self._task, advance=1, failed=self.failed)
        elif self.enabled and self.done >= self._next_line * self.total:
            while self._next_line * self.total <= self.done:
                self._next_line += 0.1
            print(self.line(), file=self.stream, flush=True)

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self._start

    def line(self) -> str:
        """'sweep NAME: 30/54 runs, 2 failed, 12.1 s elapsed, ETA 9.7 s'."""
        eta = ""
        if 0 < self.done < self.total:
            eta = f", ETA {self.elapsed_s / self.done * (self.total - self.done):.1f} s"
        return (
            f"{self.title}: {self.done}/{self.total} runs, {self.failed} failed, "
            f"{self.elapsed_s:.1f} s elapsed{eta}"
        )


def _rich_progress(stream: TextIO) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[red]{task.fields[failed]} failed"),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(file=stream),
        transient=False,
    )

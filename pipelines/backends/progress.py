"""A rich progress bar for backend batches: rate, ETA, failures and cache hits.

Several batches may run at once (a trainer scores groups while it generates the next ones), and
rich allows one live display per console, so every bar shares one ``Progress`` that starts with
the first open bar and stops with the last.
"""

from __future__ import annotations

import sys
import threading

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Items per second over rich's sliding window."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-/s" if speed is None else f"{speed:,.1f}/s", style="progress.data.speed")


class _Shared:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.progress: Progress | None = None
        self.open = 0

    def acquire(self) -> Progress:
        with self.lock:
            if self.progress is None:
                self.progress = Progress(
                    TextColumn("[bold]{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    RateColumn(),
                    TimeElapsedColumn(),
                    TextColumn("eta"),
                    TimeRemainingColumn(),
                    TextColumn("[red]failed {task.fields[failed]}[/] · cached {task.fields[hits]}"),
                    console=Console(stderr=True),
                    transient=False,
                )
                self.progress.start()
            self.open += 1
            return self.progress

    def release(self) -> None:
        with self.lock:
            self.open -= 1
            if self.open == 0 and self.progress is not None:
                self.progress.stop()
                self.progress = None


_SHARED = _Shared()


class Bar:
    """One batch's bar; a no-op when disabled."""

    def __init__(self, label: str, total: int, *, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.failed = 0
        self.hits = 0
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if self.enabled:
            self._progress = _SHARED.acquire()
            self._task = self._progress.add_task(label, total=total, failed=0, hits=0)

    def advance(self, n: int = 1, *, hits: int = 0, failed: int = 0) -> None:
        self.hits += hits
        self.failed += failed
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=n, failed=self.failed, hits=self.hits)

    def close(self) -> None:
        if self._progress is not None:
            self._progress = None
            _SHARED.release()

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

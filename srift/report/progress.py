"""A progress bar for long searches: rich, on stderr, only on a terminal, and only once a search
has run longer than DELAY_S (a quick search prints nothing extra)."""

from __future__ import annotations

import sys
import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

DELAY_S = 1.0


class SearchProgress:
    """Call it with (simulations done, most there could be); use it as a context manager so the bar
    is removed when the search ends."""

    def __init__(self, delay_s: float = DELAY_S) -> None:
        self.delay_s = delay_s
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.tty:
            return
        if self._bar is None:
            if time.perf_counter() - self.start < self.delay_s:
                return
            self._bar = Progress(TextColumn("searching"), BarColumn(), TextColumn("{task.completed:,} simulations"),
                                 TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("search", total=max(total, 1))
        assert self._task is not None
        self._bar.update(self._task, completed=done, total=max(total, done, 1))

    def __enter__(self) -> "SearchProgress":
        self.start = time.perf_counter()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

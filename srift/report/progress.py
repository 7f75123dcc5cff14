"""Progress of long searches on standard error, once a search has run longer than DELAY_S (a quick
search prints nothing extra): a rich bar on a terminal, and elsewhere (a CI log, ``2> file``) one
plain line every LINE_EVERY_S, so a long search is never silent. ``--quiet`` turns both off."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

DELAY_S = 1.0
LINE_EVERY_S = 5.0  # a plain line at most this often when standard error is not a terminal


class SearchProgress:
    """Call it with (simulations done, most there could be); use it as a context manager so the bar
    is removed when the search ends.

    Args:
        quiet: Show nothing (``--quiet``).
        delay_s: Show nothing before the search has run this long.
        stream: Where plain lines go (default: standard error at the time of the call).
        clock: Seconds, monotonic (tests pass their own).
    """

    def __init__(self, quiet: bool = False, delay_s: float = DELAY_S, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.quiet = quiet
        self.delay_s = delay_s
        self.stream = stream
        self.clock = clock
        self.start = clock()
        self.tty = stream is None and sys.stderr is not None and sys.stderr.isatty()
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._next_line = self.start + delay_s

    def __call__(self, done: int, total: int) -> None:
        if self.quiet:
            return
        now = self.clock()
        if not self.tty:
            if now >= self._next_line:
                out = self.stream or sys.stderr
                if out is not None:
                    print(f"Searching: {done:,} simulations of at most {max(total, done):,}, {now - self.start:,.0f} s "
                          "(--quiet: no progress lines).", file=out, flush=True)
                self._next_line = now + LINE_EVERY_S
            return
        if self._bar is None:
            if now - self.start < self.delay_s:
                return
            self._bar = Progress(TextColumn("searching"), BarColumn(), TextColumn("{task.completed:,} simulations"),
                                 TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("search", total=max(total, 1))
        assert self._task is not None
        self._bar.update(self._task, completed=done, total=max(total, done, 1))

    def __enter__(self) -> "SearchProgress":
        self.start = self.clock()
        self._next_line = self.start + self.delay_s
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

"""`srift profile`'s progress where standard error is not a terminal (a CI log, ``2> file``): one
plain line when a phase begins (warm-up, measured steps, srift's hook-cost pairs) and at most every
LINE_EVERY_S within one, so a profile that takes minutes is never silent. On a terminal the runner
shows a rich bar instead. Under torchrun only rank 0 speaks.

It offers the few methods of ``rich.progress.Progress`` the runner calls (start, add_task, update,
stop), so the runner drives either the same way.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

LINE_EVERY_S = 10.0


class StepLines:
    """Plain progress lines of a profile of ``warmup`` + ``iters`` steps (then srift's pairs)."""

    def __init__(self, warmup: int, iters: int, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.warmup, self.iters = warmup, iters
        self.stream = stream
        self.clock = clock
        self.start_s = clock()
        self._phase = ""
        self._next_line = 0.0
        self.quiet = os.environ.get("RANK", "0") != "0"

    def start(self) -> None:
        self.start_s = self.clock()

    def add_task(self, description: str, total: int) -> int:
        return 0

    def phase(self, steps: int) -> str:
        """What the script's ``steps``-th optimizer step belongs to."""
        if steps <= self.warmup:
            return "warm-up"
        if steps <= self.warmup + self.iters:
            return "measured steps"
        return "srift's hook-cost pairs: steps without and with its hooks"

    def update(self, task: int, completed: int | None = None, total: int | None = None) -> None:
        if completed is None or self.quiet:
            return
        phase, now = self.phase(completed), self.clock()
        if phase == self._phase and now < self._next_line:
            return
        self._phase, self._next_line = phase, now + LINE_EVERY_S
        out = self.stream or sys.stderr
        if out is not None:
            print(f"srift profile: step {completed:,} of {max(total or 0, completed):,} ({phase}), "
                  f"{now - self.start_s:,.0f} s", file=out, flush=True)

    def stop(self) -> None:
        return None

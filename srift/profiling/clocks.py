"""The profiler's clocks (srift/profiling/hooks.py marks time with them): on CPU ``time.perf_counter``
less the training thread's wait for a core (``WallClock``, reading ``RunQueue``: other processes' load
left out, docs/profiling.md); on CUDA ``torch.cuda.Event`` marks on the model's device (``CudaClock``:
from a pool, reused, without any per-layer synchronisation).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

import torch

from srift.profile import CUDA_EVENTS, WALL, WALL_LESS_RUN_QUEUE, Clock


class RunQueue:
    """Seconds one thread has spent runnable but waiting for a core (Linux's per-task schedstat,
    its second field, in ns): the time other processes took from it. Read through a file kept
    open (``pread``, about 1 us). Where the file cannot be read (not Linux, no schedstats) the
    wait reads 0 and ``available`` is False.

    Args:
        tid: The thread's native id (default: the calling thread).
    """

    available = False

    def __init__(self, tid: int | None = None) -> None:
        tid = threading.get_native_id() if tid is None else tid
        self._fd: int | None = None
        self._last_s = 0.0
        try:
            self._fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
        except OSError:
            return
        weakref.finalize(self, os.close, self._fd)
        self._last_s = self._read()
        self.available = True

    def _read(self) -> float:
        assert self._fd is not None
        try:
            return int(os.pread(self._fd, 96, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):  # the thread ended, or an unexpected format
            return self._last_s  # keep the last value: later intervals stay consistent

    def waited_s(self) -> float:
        """The thread's run-queue wait so far (never decreasing)."""
        if self._fd is not None:
            self._last_s = self._read()
        return self._last_s


MARK_READ_S = 20e-6  # a mark's two reads take about 1 us; a slower read may hold a preemption
MARK_TRIES = 4


class WallClock:
    """CPU clock: marks are ``perf_counter`` seconds less the training thread's run-queue wait
    (``RunQueue``): the wall time the step would take without other processes competing for the
    cores. Sleeps and blocking waits (a DataLoader queue, a gloo collective) stay in, as they
    would be on an idle machine. Marks taken on other threads (gloo's callbacks) subtract the same
    training thread's wait, so every interval is on one time line. ``correct=False``: plain wall
    time."""

    kind = "cpu"
    device: torch.device = torch.device("cpu")

    def __init__(self, correct: bool = True) -> None:
        self.run_queue = RunQueue() if correct else None

    @property
    def name(self) -> Clock:
        """The clock as the profile records it (a srift.profile Clock)."""
        return WALL_LESS_RUN_QUEUE if self.run_queue is not None and self.run_queue.available else WALL

    def waited_s(self) -> float:
        """The training thread's run-queue wait so far (0 when not read)."""
        return self.run_queue.waited_s() if self.run_queue is not None else 0.0

    def mark(self) -> Any:
        queue = self.run_queue
        if queue is None:
            return time.perf_counter()
        # A wait booked between reading the clock and reading the wait (the thread preempted in
        # between) would come off an interval it did not fall in, which can then read below 0: a
        # read slower than MARK_READ_S may hold one and is taken again (the error stays below it).
        for _ in range(MARK_TRIES):
            start = time.perf_counter()
            waited = queue.waited_s()
            if time.perf_counter() - start <= MARK_READ_S:
                break
        return start - waited

    def sync(self) -> None:
        pass

    def wait(self, mark: Any) -> None:
        pass

    def take_issued(self) -> list[Any]:
        return []

    def release(self, marks: list[Any]) -> None:
        pass

    @staticmethod
    def elapsed_s(a: Any, b: Any) -> float:
        return b - a


class CudaClock:
    """CUDA clock on one device: marks are events recorded on that device's current stream
    (in backward: the stream autograd runs the node on), taken from a pool and given back once
    read (``take_issued`` / ``release``)."""

    kind = "cuda"
    name: Clock = CUDA_EVENTS

    def __init__(self, device: torch.device | int | None = None) -> None:
        self.device = torch.device("cuda", torch.cuda.current_device() if device is None else
                                   (device if isinstance(device, int) else (device.index or 0)))
        self._free: list[Any] = []
        self._issued: list[Any] = []

    def mark(self) -> Any:
        ev = self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)
        ev.record(torch.cuda.current_stream(self.device))
        self._issued.append(ev)
        return ev

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def wait(self, mark: Any) -> None:
        """Block until ``mark`` (and so everything queued before it on its stream) has run."""
        mark.synchronize()

    def take_issued(self) -> list[Any]:
        """The events marked since the last call (to give back once they are read)."""
        issued, self._issued = self._issued, []
        return issued

    def release(self, marks: list[Any]) -> None:
        self._free += marks

    @staticmethod
    def elapsed_s(a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1000.0

"""Measure DDP's real all-reduce buckets through a communication hook.

The hook does what DDP's default does (divide the bucket by the world size, all-reduce it
asynchronously) and marks each bucket at the call and at the completion of its future: on CPU
(gloo) with ``time.perf_counter`` in the future's callback, on CUDA with events recorded on the
stream before the all-reduce and in the callback (which runs once the collective's work is
ordered on the stream). A bucket's time is its own: from when it was ready, or when the one
before it finished if it queued behind it (``own_times``: only a bucket that finished first can
have held it up); the raw ready-to-done time is kept as ``ready_to_done_s``. Times are averaged per bucket index over the measured iterations.

The hook is registered after the first iteration, when the profiler has found the model (DDP
allows that: a comm hook may be registered once, at any time). A script that registers its own
comm hook keeps it; the profile then says that all-reduce was not measured.

Each rank measures its own buckets; ``gather`` collects them on rank 0, which writes the profile
(other ranks write nothing).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import torch
import torch.distributed as dist

from srift.profile import AllReduceBucket


class BucketTimer:
    """Installs the timing comm hook on a DistributedDataParallel module."""

    def __init__(self, ddp_model: Any) -> None:
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.process_group = getattr(ddp_model, "process_group", None)
        self._current: list[tuple[int, int, Any, Any]] = []  # (index, bytes, start, end)
        self._sizes: dict[int, int] = {}
        self._times: dict[int, list[float]] = defaultdict(list)  # own times (queueing left out)
        self._raw: dict[int, list[float]] = defaultdict(list)  # ready to done
        self.installed = True
        try:
            ddp_model.register_comm_hook(None, self._hook)
        except RuntimeError:  # the script registered its own hook already
            self.installed = False

    def _hook(self, state, bucket):  # no annotations: DDP checks them, and they are strings here
        buf = bucket.buffer()
        cuda = buf.is_cuda
        start = cuda_mark() if cuda else time.perf_counter()
        buf.div_(self.world_size)
        fut = dist.all_reduce(buf, group=self.process_group, async_op=True).get_future()
        entry = [bucket.index(), buf.numel() * buf.element_size(), start, None]

        def done(f: torch.futures.Future) -> torch.Tensor:
            entry[3] = cuda_mark() if cuda else time.perf_counter()
            return f.value()[0]

        self._current.append(entry)  # type: ignore[arg-type]
        return fut.then(done)

    def end_iteration(self, measured: bool) -> None:
        """Close an iteration (call after its optimizer step, after any CUDA sync)."""
        current, self._current = self._current, []
        if not measured:
            return
        done = [(index, size, start, end) for index, size, start, end in current if end is not None]
        if not done:
            return
        ref = done[0][2]

        def since(mark: Any) -> float:  # seconds from the iteration's first bucket's ready mark
            return ref.elapsed_time(mark) / 1000.0 if hasattr(ref, "elapsed_time") else mark - ref

        ready = [since(start) for _, _, start, _ in done]
        ends = [since(end) for _, _, _, end in done]
        for (index, size, _, _), own, raw in zip(done, own_times(ready, ends), (e - r for r, e in zip(ready, ends))):
            self._sizes[index] = size
            self._times[index].append(own)
            self._raw[index].append(raw)

    def buckets(self) -> list[AllReduceBucket]:
        """This rank's buckets, mean times over the measured iterations."""
        return [AllReduceBucket(self.rank, i, self._sizes[i], sum(t) / len(t), sum(self._raw[i]) / len(self._raw[i]))
                for i, t in sorted(self._times.items())]

    def gather(self) -> list[AllReduceBucket]:
        """All ranks' buckets (a collective: every rank must call it); meaningful on rank 0."""
        mine = [(b.rank, b.index, b.size_bytes, b.time_s, b.ready_to_done_s) for b in self.buckets()]
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, mine, group=self.process_group)
        return [AllReduceBucket(*row) for rows in everyone for row in (rows or [])]


def own_times(ready_s: list[float], done_s: list[float]) -> list[float]:
    """Each bucket's own all-reduce time, in launch order (review item M12): from when it was
    ready, or when a bucket launched before it finished if that is later (it queued behind it),
    to its completion: ``done_k - max(ready_k, done_j for j < k with done_j <= done_k)``.

    Only a bucket that finished before this one can have held it up. On one CUDA stream they
    finish in launch order; gloo runs collectives on several threads, so a small bucket overtakes
    a large one launched before it, and a completion callback on a preempted thread marks late:
    taking the latest earlier completion, as if every bucket queued, gave a bucket that finished
    first an own time of 0 (tests/test_profiler_script.py's DDP run on a loaded machine).
    """
    out = []
    for k, (ready, done) in enumerate(zip(ready_s, done_s)):
        held = [d for d in done_s[:k] if d <= done]
        out.append(max(done - max([ready, *held]), 0.0))
    return out


def cuda_mark() -> Any:
    """A timing event recorded on the current stream now."""
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev


def is_ddp(module: Any) -> bool:
    """True for a DistributedDataParallel wrapper."""
    return isinstance(module, torch.nn.parallel.DistributedDataParallel)

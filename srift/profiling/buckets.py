"""Measure DDP's real all-reduce buckets through a communication hook.

The hook does what DDP's default does (divide the bucket by the world size, all-reduce it
asynchronously) and times each bucket from the call to the completion of its future: on CPU
(gloo) with ``time.perf_counter`` in the future's callback, on CUDA with events recorded on the
stream before the all-reduce and in the callback (which runs once the collective's work is
ordered on the stream). Times are averaged per bucket index over the measured iterations.

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
        self._times: dict[int, list[float]] = defaultdict(list)
        self.installed = True
        try:
            ddp_model.register_comm_hook(None, self._hook)
        except RuntimeError:  # the script registered its own hook already
            self.installed = False

    def _hook(self, state, bucket):  # no annotations: DDP checks them, and they are strings here
        buf = bucket.buffer()
        cuda = buf.is_cuda
        start = _cuda_mark() if cuda else time.perf_counter()
        buf.div_(self.world_size)
        fut = dist.all_reduce(buf, group=self.process_group, async_op=True).get_future()
        entry = [bucket.index(), buf.numel() * buf.element_size(), start, None]

        def done(f: torch.futures.Future) -> torch.Tensor:
            entry[3] = _cuda_mark() if cuda else time.perf_counter()
            return f.value()[0]

        self._current.append(entry)  # type: ignore[arg-type]
        return fut.then(done)

    def end_iteration(self, measured: bool) -> None:
        """Close an iteration (call after its optimizer step, after any CUDA sync)."""
        current, self._current = self._current, []
        if not measured:
            return
        for index, size, start, end in current:
            if end is None:
                continue
            secs = start.elapsed_time(end) / 1000.0 if hasattr(start, "elapsed_time") else end - start
            self._sizes[index] = size
            self._times[index].append(secs)

    def buckets(self) -> list[AllReduceBucket]:
        """This rank's buckets, mean time over the measured iterations."""
        return [AllReduceBucket(self.rank, i, self._sizes[i], sum(t) / len(t)) for i, t in sorted(self._times.items())]

    def gather(self) -> list[AllReduceBucket]:
        """All ranks' buckets (a collective: every rank must call it); meaningful on rank 0."""
        mine = [(b.rank, b.index, b.size_bytes, b.time_s) for b in self.buckets()]
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, mine, group=self.process_group)
        return [AllReduceBucket(*row) for rows in everyone for row in (rows or [])]


def _cuda_mark() -> Any:
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev


def is_ddp(module: Any) -> bool:
    """True for a DistributedDataParallel wrapper."""
    return isinstance(module, torch.nn.parallel.DistributedDataParallel)

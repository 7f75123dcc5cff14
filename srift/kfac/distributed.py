"""Collectives of distributed K-FAC: factor all-reduce (packed, fused, asynchronous) and inverse
broadcasts, on a process group of their own so they never interleave with DDP's gradient
all-reduces. Everything degrades to local no-ops in a single process."""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist


@functools.lru_cache(maxsize=64)
def _triu(dim: int, device: torch.device) -> torch.Tensor:
    # Built once per (dimension, device): 16 bytes per packed element, every factor every step.
    return torch.triu_indices(dim, dim, device=device)


def pack_upper(mat: torch.Tensor) -> torch.Tensor:
    """Upper triangle (diagonal included) of a symmetric matrix, as a flat tensor."""
    rows, cols = _triu(mat.shape[0], mat.device)
    return mat[rows, cols]


def unpack_upper(vec: torch.Tensor, dim: int) -> torch.Tensor:
    """Rebuild the symmetric ``dim x dim`` matrix from ``pack_upper``'s output."""
    rows, cols = _triu(dim, vec.device)
    out = vec.new_zeros(dim, dim)
    out[rows, cols] = vec
    out[cols, rows] = vec
    return out


class Comm:
    """The process group K-FAC talks on (a new group over all ranks), or a single process.

    Args:
        device: Where its own tensors (broadcast decisions, calibration buffers) live: the
            gradients' device. NCCL groups have no CPU side, so CPU tensors there fail; None: the
            current CUDA device on an NCCL group, else the CPU.
    """

    def __init__(self, device: torch.device | None = None) -> None:
        self.distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if self.distributed:
            self.world_size = dist.get_world_size()
            self.rank = dist.get_rank()
            # A group of our own: K-FAC collectives issued from hooks must not share a sequence
            # of tags with DDP's gradient buckets.
            self.group = dist.new_group(list(range(self.world_size)))
        else:
            self.world_size, self.rank, self.group = 1, 0, None
        if device is None:
            nccl = self.distributed and "nccl" in str(dist.get_backend()).lower()
            device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        self.device = device

    def _sync(self) -> None:
        # CUDA collectives return when enqueued: wait for them to be timed.
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def allreduce_mean(self, t: torch.Tensor) -> torch.Tensor:
        """All-reduce in place and divide by the world size (synchronous)."""
        if self.distributed:
            dist.all_reduce(t, group=self.group)
            t.div_(self.world_size)
        return t

    def allreduce_async(self, t: torch.Tensor) -> Any:
        return dist.all_reduce(t, group=self.group, async_op=True) if self.distributed else None

    def broadcast(self, t: torch.Tensor, src: int, async_op: bool = False) -> Any:
        if not self.distributed:
            return None
        return dist.broadcast(t, src=src, group=self.group, async_op=async_op)

    def broadcast_floats(self, values: list[float], src: int = 0) -> list[float]:
        """Rank ``src``'s list of floats on every rank (so every rank takes identical decisions)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.broadcast(t, src=src, group=self.group)
        return t.tolist()

    def calibrate_allreduce(self, small_elems: int = 1, large_elems: int = 1 << 18, repeats: int = 7) -> tuple[float, float]:
        """Measured ``(alpha_s, beta_s_per_byte)`` of a float32 all-reduce on this group (rank 0's
        medians, broadcast to all): typical costs, as srift's prediction plans with them, not the
        best case, which on a busy host is a fraction of what the all-reduces then take."""
        if not self.distributed:
            return 0.0, 0.0
        times = []
        for n in (small_elems, large_elems):
            buf = torch.zeros(n, device=self.device)
            dist.all_reduce(buf, group=self.group)  # warm-up (connection set-up)
            self._sync()
            samples = []
            for _ in range(repeats):
                dist.barrier(group=self.group)
                self._sync()
                t0 = time.perf_counter()
                dist.all_reduce(buf, group=self.group)
                self._sync()
                samples.append(time.perf_counter() - t0)
            times.append(statistics.median(samples))
        beta = max((times[1] - times[0]) / (4 * (large_elems - small_elems)), 0.0)
        alpha = max(times[0] - beta * 4 * small_elems, 0.0)
        alpha, beta = self.broadcast_floats([alpha, beta])
        return alpha, beta


@dataclass
class _Group:
    keys: list[str]
    parts: dict[str, torch.Tensor] = field(default_factory=dict)
    buffer: torch.Tensor | None = None
    handle: Any = None


class FusedAllReducer:
    """Asynchronous, fused all-reduce of tensors that become ready one by one (SPD-KFAC).

    ``groups`` (from ``schedule.plan_fusion``) lists the keys fused together; a group's
    all-reduce starts as soon as its last tensor is added. Keys not in any group are sent alone.
    Every rank must add the same keys in the same order.
    """

    def __init__(self, comm: Comm, groups: list[list[str]] | None = None) -> None:
        self.comm = comm
        self.set_groups(groups or [])

    def set_groups(self, groups: list[list[str]]) -> None:
        self._plan = [list(g) for g in groups]
        self._group_of = {k: i for i, g in enumerate(self._plan) for k in g}
        self._open: dict[int, _Group] = {}
        self._launched: list[_Group] = []

    @property
    def groups(self) -> list[list[str]]:
        return [list(g) for g in self._plan]

    def add(self, key: str, flat: torch.Tensor) -> None:
        """Add a flat tensor; start its group's all-reduce if the group is now complete."""
        gid = self._group_of.get(key)
        if gid is None:
            grp = _Group([key], {key: flat})
            self._launch(grp)
            return
        grp = self._open.setdefault(gid, _Group(self._plan[gid]))
        grp.parts[key] = flat
        if len(grp.parts) == len(grp.keys):
            del self._open[gid]
            self._launch(grp)

    def _launch(self, grp: _Group) -> None:
        grp.buffer = torch.cat([grp.parts[k].reshape(-1) for k in grp.keys])
        grp.handle = self.comm.allreduce_async(grp.buffer)
        self._launched.append(grp)

    def synchronize(self) -> dict[str, torch.Tensor]:
        """Wait for every started all-reduce; return each key's flat tensor summed over the world
        (a view into its group's buffer: the caller divides by the world size as it unpacks, so
        that pass is timed as factor work, where srift's model prices it).

        Raises:
            RuntimeError: if a group is incomplete (a layer's factor was never added).
        """
        if self._open:
            missing = [k for g in self._open.values() for k in g.keys if k not in g.parts]
            raise RuntimeError(f"K-FAC factors never computed this step for: {', '.join(missing[:5])}")
        out: dict[str, torch.Tensor] = {}
        for grp in self._launched:
            if grp.handle is not None:
                grp.handle.wait()
            assert grp.buffer is not None  # set by _launch
            buf = grp.buffer
            offset = 0
            for k in grp.keys:
                n = grp.parts[k].numel()
                out[k] = buf[offset : offset + n]
                offset += n
        self._launched = []
        return out

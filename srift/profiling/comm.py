"""`srift calibrate comm`: measure all-reduce and broadcast time vs message size on this machine,
write a cluster file.

Spawns ``nproc`` processes with torch.distributed (gloo on CPU, or nccl with one GPU each), times
``all_reduce`` and ``broadcast`` of float32 tensors of each size (warm-up, then repetitions;
the slowest rank's time per repetition; their trimmed mean and p90), and writes a srift cluster YAML whose
``comm_calibration`` curves the communication model interpolates instead of its own model (the
broadcast curve serves K-FAC's inverse broadcasts).
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any

DEFAULT_SIZES = [2**k for k in range(10, 27, 2)]  # 1 KiB .. 64 MiB


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def time_collectives(sizes: list[int], reps: int, warmup: int, device: Any = "cpu") -> dict[str, list[list[float]]]:
    """Time ``all_reduce`` and ``broadcast`` (from rank 0) of float32 tensors of each size in the
    current process group: per size, the slowest rank's seconds of each measured repetition.

    Every rank must call it with the same arguments (it runs collectives).
    """
    import torch
    import torch.distributed as dist

    cuda = torch.device(device).type == "cuda"
    out: dict[str, list[list[float]]] = {"all_reduce": [], "broadcast": []}
    ops = {"all_reduce": lambda x: dist.all_reduce(x), "broadcast": lambda x: dist.broadcast(x, 0)}
    for size in sizes:
        x = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        for name, op in ops.items():
            times = []
            for i in range(warmup + reps):
                dist.barrier()
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                op(x)
                if cuda:
                    torch.cuda.synchronize()
                t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank sets the time
                if i >= warmup:
                    times.append(float(t.item()))
            out[name].append(times)
    return out


def calibration_from_times(backend: str, world: int, sizes: list[int], times: dict[str, list[list[float]]]) -> dict[str, Any]:
    """The ``comm_calibration`` mapping of measured times per size: ``times_s`` is the mean of the
    repetitions without the slowest tenth (a training iteration pays the average collective, and
    gloo's times are bimodal on a busy host, so a median jumps between the modes), ``p90_times_s``
    the 90th percentile."""

    def typical(ts: list[list[float]]) -> list[float]:
        out = []
        for t in ts:
            kept = sorted(t)[: max(1, len(t) - len(t) // 10)]
            out.append(statistics.fmean(kept))
        return out

    def p90(ts: list[list[float]]) -> list[float]:
        return [max(sorted(t)[min(len(t) - 1, int(round(0.9 * (len(t) - 1))))], m) for t, m in zip(ts, typical(ts))]

    ar, bc = times["all_reduce"], times.get("broadcast")
    out = {"backend": backend, "world_size": world, "sizes_bytes": [int(s) for s in sizes],
           "times_s": typical(ar), "p90_times_s": p90(ar)}
    if bc:
        out.update(broadcast_times_s=typical(bc), broadcast_p90_times_s=p90(bc))
    out.update(repetitions=len(ar[0]) if ar else 0, measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               host=socket.gethostname())
    return out


def _worker(rank: int, world: int, backend: str, port: int, sizes: list[int], reps: int, warmup: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        times = time_collectives(sizes, reps, warmup, device)
        if rank == 0:
            out.put(times)
    finally:
        dist.destroy_process_group()


def measure_collectives(backend: str, nproc: int, sizes: list[int] | None = None, reps: int = 10, warmup: int = 3) -> dict[str, Any]:
    """Measure the all-reduce and broadcast curves; returns a ``comm_calibration`` mapping.

    Raises:
        SriftError: for a bad backend or process count, or nccl without enough GPUs.
    """
    import torch
    import torch.multiprocessing as mp

    from srift.errors import SriftError

    if backend not in ("gloo", "nccl"):
        raise SriftError(f"unknown backend '{backend}'.", "use --backend gloo (CPU) or --backend nccl (GPUs).")
    if nproc < 2:
        raise SriftError("--nproc must be at least 2 to measure an all-reduce.", "pass --nproc 2 or more.")
    if backend == "nccl" and (not torch.cuda.is_available() or torch.cuda.device_count() < nproc):
        raise SriftError(f"nccl needs {nproc} GPUs; this machine has {torch.cuda.device_count() if torch.cuda.is_available() else 0}.",
                         "use --backend gloo, or a smaller --nproc.")
    sizes = sorted(sizes or DEFAULT_SIZES)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = _free_port()
    mp.start_processes(_worker, args=(nproc, backend, port, sizes, reps, warmup, queue), nprocs=nproc, join=True,
                       start_method="spawn")
    return calibration_from_times(backend, nproc, sizes, queue.get())


def calibration_cluster(calib: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """A cluster YAML document describing this machine, with the measured curve."""
    import torch

    nproc = calib["world_size"]
    if calib["backend"] == "nccl":
        from srift.hardware import find_gpu

        dev = torch.cuda.get_device_name(0)
        gpu = find_gpu(dev) or dev
        intra = "nvlink"
    else:
        gpu, intra = "cpu", "shared-memory"
    return {
        "name": name or f"local-{calib['backend']}-{nproc}",
        "description": f"this machine ({calib['host']}), {nproc} {calib['backend']} workers, measured by srift calibrate comm",
        "node_groups": [{"count": 1, "gpus_per_node": nproc, "gpu": gpu, "intra_node": intra, "network_gbps": 0}],
        "comm_calibration": calib,
    }


def calibrate(backend: str, nproc: int, output: str | Path, sizes: list[int] | None = None, reps: int = 10) -> dict[str, Any]:
    """Measure and write the cluster file atomically; returns the document written."""
    from srift.fileio import write_yaml

    doc = calibration_cluster(measure_collectives(backend, nproc, sizes, reps))
    write_yaml(output, doc)
    return doc

"""`srift calibrate comm`: measure all-reduce time vs message size on this machine, write a cluster file.

Spawns ``nproc`` processes with torch.distributed (gloo on CPU, or nccl with one GPU each), times
``all_reduce`` of float32 tensors of each size (warm-up, then repetitions; median and p90 of the
slowest rank per repetition), and writes a srift cluster YAML whose ``comm_calibration`` curve the
communication model interpolates instead of its own model.
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
        results = []
        for size in sizes:
            x = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
            times = []
            for i in range(warmup + reps):
                dist.barrier()
                if backend == "nccl":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                if backend == "nccl":
                    torch.cuda.synchronize()
                t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank sets the time
                if i >= warmup:
                    times.append(float(t.item()))
            results.append(times)
        if rank == 0:
            out.put(results)
    finally:
        dist.destroy_process_group()


def measure_allreduce(backend: str, nproc: int, sizes: list[int] | None = None, reps: int = 10, warmup: int = 3) -> dict[str, Any]:
    """Measure the all-reduce curve; returns a ``comm_calibration`` mapping.

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
    results = queue.get()
    p50 = [statistics.median(t) for t in results]
    p90 = [sorted(t)[min(len(t) - 1, int(round(0.9 * (len(t) - 1))))] for t in results]
    return {"backend": backend, "world_size": nproc, "sizes_bytes": [int(s) for s in sizes],
            "times_s": p50, "p90_times_s": [max(a, b) for a, b in zip(p90, p50)], "repetitions": reps,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": socket.gethostname()}


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

    doc = calibration_cluster(measure_allreduce(backend, nproc, sizes, reps))
    write_yaml(output, doc)
    return doc

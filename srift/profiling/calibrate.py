"""`srift calibrate comm`: measure all-reduce, broadcast, all-gather and reduce-scatter time vs
message size on this machine, or on several under torchrun, and write a cluster file.

Spawns ``nproc`` processes with torch.distributed (gloo on CPU, or nccl with one GPU each), times
``all_reduce``, ``broadcast``, ``all_gather`` (into one tensor) and ``reduce_scatter`` (from one
tensor) of float32 tensors of each size (warm-up, then repetitions; the slowest rank's time per
repetition; their trimmed mean and p90), and writes a srift cluster YAML whose
``comm_calibration`` curves the communication model interpolates instead of its own model (the
broadcast curve serves K-FAC's inverse broadcasts, the all-gather and reduce-scatter curves FSDP's
collectives). An all-gather's or reduce-scatter's size is the gathered (unsharded) tensor's, as in
the communication model; each rank holds ``1/nproc`` of it. Launched by torchrun (``torchrun --nnodes N
--nproc_per_node G -m srift.cli calibrate comm``), it measures in that group instead, across
machines, and describes N nodes of G workers.
"""

from __future__ import annotations

import os
import re
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from srift.bounds import MAX_GPUS, parse_number, require
from srift.cluster import cluster_from_dict
from srift.errors import SriftError
from srift.files import write_yaml
from srift.hardware import find_gpu, gpu as gpu_spec

DEFAULT_SIZES = [2**k for k in range(10, 27, 2)]  # 1 KiB .. 64 MiB


# The collectives measured, in the order of the calibration's curves.
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter")


def _collective_ops(size: int, world: int, device: Any) -> dict[str, Any]:
    """One call of each collective on float32 tensors of ``size`` bytes (the gathered size for
    all-gather and reduce-scatter: each rank contributes or keeps ``size / world``)."""
    x = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
    shard = torch.ones(max(1, size // 4 // world), dtype=torch.float32, device=device)
    full = torch.empty(shard.numel() * world, dtype=torch.float32, device=device)
    # torch >= 2.12 names them *_single; older releases *_into_tensor / *_tensor.
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return {"all_reduce": lambda: dist.all_reduce(x), "broadcast": lambda: dist.broadcast(x, 0),
            "all_gather": lambda: all_gather(full, shard), "reduce_scatter": lambda: reduce_scatter(shard, full)}


def time_collectives(sizes: list[int], reps: int, warmup: int, device: Any = "cpu") -> dict[str, list[list[float]]]:
    """Time ``all_reduce``, ``broadcast`` (from rank 0), ``all_gather`` and ``reduce_scatter`` of
    float32 tensors of each size in the current process group: per collective and size, the
    slowest rank's seconds of each measured repetition.

    Every rank must call it with the same arguments (it runs collectives).
    """

    cuda = torch.device(device).type == "cuda"
    out: dict[str, list[list[float]]] = {name: [] for name in COLLECTIVES}
    for size in sizes:
        ops = _collective_ops(size, dist.get_world_size(), device)
        for name, op in ops.items():
            times = []
            for i in range(warmup + reps):
                dist.barrier()
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                op()
                if cuda:
                    torch.cuda.synchronize()
                t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank sets the time
                if i >= warmup:
                    times.append(float(t.item()))
            out[name].append(times)
    return out


def calibration_from_times(backend: str, world: int, sizes: list[int], times: dict[str, list[list[float]]]) -> dict[str, Any]:
    """The ``comm_calibration`` mapping of measured times per size: ``times_s`` (all-reduce) is the
    mean of the repetitions without the slowest tenth (a training iteration pays the average
    collective, and gloo's times are bimodal on a busy host, so a median jumps between the modes),
    ``p90_times_s`` the 90th percentile; the other collectives' curves, when measured, likewise
    (``broadcast_times_s``, ``all_gather_times_s``, ``reduce_scatter_times_s`` and their p90s)."""

    def typical(ts: list[list[float]]) -> list[float]:
        out = []
        for t in ts:
            kept = sorted(t)[: max(1, len(t) - len(t) // 10)]
            out.append(statistics.fmean(kept))
        return out

    def p90(ts: list[list[float]]) -> list[float]:
        return [max(sorted(t)[min(len(t) - 1, int(round(0.9 * (len(t) - 1))))], m) for t, m in zip(ts, typical(ts))]

    ar = times["all_reduce"]
    out = {"backend": backend, "world_size": world, "sizes_bytes": [int(s) for s in sizes],
           "times_s": typical(ar), "p90_times_s": p90(ar)}
    for name in COLLECTIVES[1:]:
        ts = times.get(name)
        if ts:
            out.update({f"{name}_times_s": typical(ts), f"{name}_p90_times_s": p90(ts)})
    out.update(repetitions=len(ar[0]) if ar else 0, measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               host=socket.gethostname())
    return out


def _worker(rank: int, world: int, backend: str, rendezvous: str, sizes: list[int], reps: int, warmup: int, out: Any) -> None:
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        times = time_collectives(sizes, reps, warmup, device)
        if rank == 0:
            out.put(times)
    finally:
        dist.destroy_process_group()


def measure_collectives(backend: str, nproc: int, sizes: list[int] | None = None, reps: int = 10, warmup: int = 3) -> dict[str, Any]:
    """Measure the collectives' curves (COLLECTIVES); returns a ``comm_calibration`` mapping.

    Raises:
        SriftError: for a bad backend or process count, or nccl without enough GPUs.
    """


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
    # The workers meet through a file, not a port picked free beforehand: any process on a busy
    # host may take such a port while the workers start (seconds), and rank 0 then fails (EADDRINUSE).
    with tempfile.TemporaryDirectory(prefix="srift-calibrate-") as rdzv_dir:
        mp.start_processes(_worker, args=(nproc, backend, os.path.join(rdzv_dir, "rendezvous"), sizes, reps, warmup, queue),
                           nprocs=nproc, join=True, start_method="spawn")
    return calibration_from_times(backend, nproc, sizes, queue.get())


def launched_by_torchrun() -> bool:
    """True when torchrun (or another env:// launcher) started this process as one of several."""
    return launcher_int("WORLD_SIZE", 1) > 1 and "RANK" in os.environ


def launcher_int(name: str, default: int, low: int = 1) -> int:
    """The launcher's variable ``name`` (torchrun's WORLD_SIZE, RANK, LOCAL_WORLD_SIZE, LOCAL_RANK),
    ``default`` when unset.

    Raises:
        SriftError: for a value that is not a whole number (digits 0-9) of at least ``low``.
    """
    text = os.environ.get(name)
    if text is None:
        return default
    hint = f"unset {name}, or launch with torchrun (which sets it)."
    return int(require(parse_number(text, name, hint=hint, integer=True), name, low, MAX_GPUS, integer=True, hint=hint))


def measure_launched(backend: str, sizes: list[int] | None = None, reps: int = 10, warmup: int = 3) -> dict[str, Any] | None:
    """Measure in the process group torchrun launched, possibly across machines
    (``torchrun --nnodes N --nproc_per_node G -m srift.cli calibrate comm ...``).

    Returns the ``comm_calibration`` mapping on rank 0 (with ``nodes`` and ``gpus_per_node`` from
    torchrun's WORLD_SIZE and LOCAL_WORLD_SIZE), None on the other ranks.
    """


    if backend not in ("gloo", "nccl"):
        raise SriftError(f"unknown backend '{backend}'.", "use --backend gloo (CPU) or --backend nccl (GPUs).")
    world, rank = launcher_int("WORLD_SIZE", 1), launcher_int("RANK", 0, low=0)
    local_world = launcher_int("LOCAL_WORLD_SIZE", world)
    if world % local_world:
        raise SriftError(f"WORLD_SIZE {world} is not a multiple of LOCAL_WORLD_SIZE {local_world}.",
                         "launch the same --nproc_per_node on every machine.")
    device = torch.device("cpu")
    if backend == "nccl":
        local_rank = launcher_int("LOCAL_RANK", 0, low=0)
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    sizes = sorted(sizes or DEFAULT_SIZES)
    dist.init_process_group(backend)
    try:
        times = time_collectives(sizes, reps, warmup, device)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    calib = calibration_from_times(backend, world, sizes, times)
    calib.update(nodes=world // local_world, gpus_per_node=local_world)
    return calib


def intra_node_from_topo(topo: str, gpu_arch: str | None = None, pcie_gen: int | None = None) -> str | None:
    """The srift intra-node link of a machine from ``nvidia-smi topo -m`` output.

    Every GPU pair on bonded NVLinks of one width (4 or more GPUs): NVSwitch (``nvswitch4`` on
    Hopper and later); some pairs on NVLink: ``nvlink``; none: PCIe of ``pcie_gen`` (4 when
    unknown). None when the text holds no GPU matrix.
    """
    lines = [l.split() for l in topo.splitlines() if l.strip()]
    header = next((l for l in lines if l and l[0] == "GPU0"), None)
    if header is None:
        return None
    gpu_cols = [i for i, h in enumerate(header) if re.fullmatch(r"GPU\d+", h)]
    rows = [l for l in lines if l and re.fullmatch(r"GPU\d+", l[0]) and l is not header]
    links = [r[i + 1] for r in rows for i in gpu_cols if i + 1 < len(r) and r[i + 1] != "X"]
    if not links or len(gpu_cols) < 2:
        return None
    nv = [x for x in links if x.startswith("NV")]
    if nv and len(nv) == len(links) and len(set(nv)) == 1 and len(gpu_cols) >= 4:
        return "nvswitch4" if gpu_arch in ("hopper", "blackwell") else "nvswitch"
    if nv:
        return "nvlink"
    return f"pcie{pcie_gen}" if pcie_gen in (3, 4, 5) else "pcie4"


def _detect_intra_node(gpu: str) -> str:
    """Ask nvidia-smi how this machine's GPUs connect; ``nvlink`` when it cannot tell."""

    try:
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20).stdout
        gen_out = subprocess.run(["nvidia-smi", "--query-gpu=pcie.link.gen.max", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "nvlink"
    gens = [int(x) for x in re.findall(r"\d+", gen_out)]
    key = find_gpu(gpu)
    arch = gpu_spec(key).architecture if key else None
    return intra_node_from_topo(topo, arch, min(gens) if gens else None) or "nvlink"


def calibration_cluster(calib: dict[str, Any], name: str | None = None, network: str = "ethernet") -> dict[str, Any]:
    """A cluster YAML document describing the measured machine(s), with the measured curves.

    Across machines the network's Gb/s is what the largest measured all-reduce achieved (its bus
    bandwidth, a lower bound of the nominal figure); the curve, not that number, sets predictions.
    """
    world = calib["world_size"]
    nodes = int(calib.get("nodes", 1))
    per_node = int(calib.get("gpus_per_node", world))
    if calib["backend"] == "nccl":
        dev = torch.cuda.get_device_name(0)
        gpu = find_gpu(dev) or dev
        intra = _detect_intra_node(gpu)
    else:
        gpu, intra = "cpu", "shared-memory"
    gbps = 0.0
    if nodes > 1:
        size, t = calib["sizes_bytes"][-1], calib["times_s"][-1]
        gbps = round(2.0 * (world - 1) / world * size / t * 8 / 1e9, 2)
    where = f"{nodes} machines" if nodes > 1 else f"this machine ({calib['host']})"
    return {
        "name": name or (f"measured-{calib['backend']}-{nodes}x{per_node}" if nodes > 1 else f"local-{calib['backend']}-{world}"),
        "description": f"{where}, {world} {calib['backend']} workers, measured by srift calibrate comm"
                       + ("; network_gbps is the bus bandwidth of the largest all-reduce" if nodes > 1 else ""),
        "node_groups": [{"count": nodes, "gpus_per_node": per_node, "gpu": gpu, "intra_node": intra,
                         "network_gbps": gbps, "network": network}],
        "comm_calibration": calib,
    }


def calibrate(backend: str, nproc: int, output: str | Path, sizes: list[int] | None = None, reps: int = 10,
              network: str = "ethernet") -> dict[str, Any] | None:
    """Measure (spawning ``nproc`` local workers, or in the group torchrun launched) and write the
    cluster file atomically; returns the document written, None on torchrun ranks other than 0."""
    calib = measure_launched(backend, sizes, reps) if launched_by_torchrun() else measure_collectives(backend, nproc, sizes, reps)
    if calib is None:
        return None
    doc = calibration_cluster(calib, network=network)
    try:  # what srift will read back: a file it would refuse is not written
        cluster_from_dict(doc, source=str(output))
    except SriftError as exc:
        raise SriftError(f"the measurement cannot be written as a cluster file srift reads ({exc.message})",
                         "run it again (more --reps steadies the times); if it persists, report it.") from None
    write_yaml(output, doc)
    return doc

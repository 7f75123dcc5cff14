"""`srift calibrate comm`: measure this machine's all-reduce, broadcast, all-gather and reduce-scatter and write a cluster file."""

from __future__ import annotations

from typing import Optional

import typer

from srift import api
from srift.cluster import NETWORKS
from srift.errors import SriftError, one_of
from srift.report import profiling_view


def _sizes(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SriftError(f"--sizes '{text}' is not a comma-separated list of byte counts.", "e.g. --sizes 1024,1048576.") from None
    if len(sizes) < 2 or min(sizes) < 4:
        raise SriftError("--sizes needs at least two sizes of 4 bytes or more.", "e.g. --sizes 1024,1048576.")
    return sizes


def comm(
    backend: str = typer.Option("gloo", "--backend", help="gloo (CPU processes) or nccl (one GPU per process)."),
    nproc: int = typer.Option(2, "--nproc", help="Worker processes."),
    output: str = typer.Option("local.yaml", "-o", "--output", help="Cluster file to write."),
    sizes: Optional[str] = typer.Option(None, "--sizes", help="Comma-separated message sizes in bytes (default 1 KiB..64 MiB)."),
    reps: int = typer.Option(10, "--reps", help="Timed repetitions per size."),
    network: str = typer.Option("ethernet", "--network", help=f"Network between machines under torchrun: {one_of(NETWORKS)}."),
) -> None:
    """Measure all-reduce, broadcast, all-gather and reduce-scatter time vs message size and write a cluster YAML usable with --cluster.

    Several machines: run it under torchrun on each (``torchrun --nnodes N --node_rank R
    --nproc_per_node G --master_addr HOST --master_port PORT -m srift.cli calibrate comm
    --backend nccl``); --nproc is then ignored.
    """
    api.require_torch("srift calibrate comm")
    size_list = _sizes(sizes)
    if reps < 1:
        raise SriftError("--reps must be at least 1.", "pass --reps 5 or more.")
    if network not in NETWORKS:
        raise SriftError(f"unknown network '{network}'.", f"use --network {one_of(NETWORKS)}.")
    profiling_view.show_calibration(api.calibrate_comm(backend, nproc, output, size_list, reps, network), output)

"""`srift calibrate comm`: measure this machine's all-reduce, broadcast, all-gather and reduce-scatter and write a cluster file."""

from __future__ import annotations

from typing import Optional

import typer

from srift import api
from srift.cluster import NETWORKS
from srift.bounds import MAX_CALIBRATION_BYTES, MAX_CALIBRATION_NPROC, MAX_CALIBRATION_REPS, MAX_CALIBRATION_SIZES, parse_number, require, shown
from srift.errors import SriftError, one_of
from srift.report import profiling_view


def _sizes(text: str | None) -> list[int] | None:
    """The distinct sizes of ``--sizes``, ascending, each checked against the bounds."""
    if not text:
        return None
    hint = f"e.g. --sizes 1024,1048576: 2 to {MAX_CALIBRATION_SIZES:,} sizes from 4 to {MAX_CALIBRATION_BYTES:,} bytes."
    if len(text) > MAX_CALIBRATION_SIZES * 12:
        raise SriftError(f"--sizes lists more than {MAX_CALIBRATION_SIZES:,} sizes.", hint)
    sizes = sorted({int(parse_number(s, f"--sizes entry {shown(s.strip(), 24)}", hint=hint, integer=True))
                    for s in text.split(",") if s.strip()})
    if not 2 <= len(sizes) <= MAX_CALIBRATION_SIZES or sizes[0] < 4 or sizes[-1] > MAX_CALIBRATION_BYTES:
        raise SriftError(f"--sizes needs 2 to {MAX_CALIBRATION_SIZES:,} distinct sizes from 4 to {MAX_CALIBRATION_BYTES:,} bytes.", hint)
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
    size_list = _sizes(sizes)
    require(reps, "--reps", 1, MAX_CALIBRATION_REPS, integer=True, hint=f"pass --reps from 5 to {MAX_CALIBRATION_REPS:,}.")
    require(nproc, "--nproc", 2, MAX_CALIBRATION_NPROC, integer=True,
            hint=f"pass --nproc from 2 (a collective needs two workers) to {MAX_CALIBRATION_NPROC}.")
    api.check_outputs({"-o": output})
    api.require_torch("srift calibrate comm")
    if network not in NETWORKS:
        raise SriftError(f"unknown network '{network}'.", f"use --network {one_of(NETWORKS)}.")
    profiling_view.show_calibration(api.calibrate_comm(backend, nproc, output, size_list, reps, network), output)

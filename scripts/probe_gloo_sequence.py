"""Why bench_kfac's inverse broadcasts are under-predicted: a run of gloo broadcasts back to back
against the same broadcasts timed one at a time, as the calibration times them.

Two gloo processes (one thread each, pinned to a core each, as ``scripts/bench_kfac.py`` runs
them) broadcast the packed inverses of bench_kfac's CNN (``--width``) one after another, owners
alternating as MPD-KFAC places them, after some compute (as the inversions precede them). The
same processes then calibrate broadcasts as ``srift calibrate comm`` does (a barrier, then one
broadcast, per repetition) and the script prints the sequence's measured seconds next to the sum
of the calibrated ones. Usage:

    python scripts/probe_gloo_sequence.py [--width 2] [--repeats 25]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from srift.kfac import schedule  # noqa: E402
from srift.profiling.calibrate import calibration_from_times, time_collectives  # noqa: E402


def factor_dims(width: int) -> list[int]:
    """bench_kfac's factors (A_0, G_0, A_1, ...) at a channel multiplier."""
    w = width
    return [28, 32 * w, 288 * w + 1, 64 * w, 576 * w + 1, 128 * w, 512 * w + 1, 10]


def worker(rank: int, rendezvous: str, args: argparse.Namespace, out: str) -> None:
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)  # not a port: see bench_kfac
    dims = factor_dims(args.width)
    sizes = [schedule.inverse_message_bytes(d) for d in dims]
    a = torch.randn(256, 256)
    seq = []
    for _ in range(args.repeats + 3):
        for _ in range(100):  # compute first, as the inversions come before the broadcasts
            a @ a
        dist.barrier()
        t0 = time.perf_counter()
        for i, nbytes in enumerate(sizes):
            dist.broadcast(torch.zeros(nbytes // 4), src=i % 2)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        seq.append(float(t))
    unique = sorted(set(sizes))
    cal = calibration_from_times("gloo", 2, unique, time_collectives(unique, args.repeats, warmup=1))
    one = dict(zip(unique, cal["broadcast_times_s"]))
    if rank == 0:
        Path(out).write_text(json.dumps({"sequence_s": seq[3:], "calibrated_sum_s": sum(one[s] for s in sizes)}))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=25)
    args = ap.parse_args()
    if args.width < 1 or args.repeats < 1:
        ap.error("--width and --repeats must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        mp.spawn(worker, args=(os.path.join(tmp, "rendezvous"), args, out), nprocs=2, join=True)
        r = json.loads(Path(out).read_text())
    seq = r["sequence_s"]
    print(f"{len(factor_dims(args.width))} broadcasts of bench_kfac's packed inverses (--width {args.width}), owners alternating:")
    print(f"  back to back: median {1e3 * statistics.median(seq):.2f} ms, fastest {1e3 * min(seq):.2f} ms "
          f"over {len(seq)} repetitions")
    print(f"  the calibration's one-at-a-time times, summed: {1e3 * r['calibrated_sum_s']:.2f} ms")


if __name__ == "__main__":
    main()

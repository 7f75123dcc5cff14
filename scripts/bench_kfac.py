"""Measured vs predicted distributed K-FAC on this machine (gloo, CPU processes).

Runs a small CNN (CIFAR-sized input) data-parallel with N gloo processes, one thread each:

1. gloo all-reduce and broadcast times at sizes from 256 B to 8 MB (the cluster's
   ``comm_calibration``, measured by the code behind ``srift calibrate comm``);
2. first-order DDP + SGD, timing every Linear/Conv2d layer's forward and backward with hooks
   (that is the "compute model" of this CPU for the prediction) and the iteration;
3. K-FAC with each strategy (naive, mpd, spd): per-phase seconds from the preconditioner's
   timers, and the iteration time.

(2) and (3) run in interleaved rounds, in a rotating order, and each figure is the median over
rounds; each worker is pinned to a core of its own (``--no-pin`` to let the scheduler place them).

The prediction is ``srift.simulate.kfac.plan_kfac`` (what ``srift predict --optimizer kfac``
adds) fed with srift.perf's ``layer_times`` of a profile carrying (2) and srift.perf's
``CommModel`` of a CPU cluster carrying (1); the predicted K-FAC iteration is the measured
first-order iteration plus the predicted K-FAC phases. Two predictions are printed: from the K-FAC
kernel model of this CPU at one thread (srift.perf.kfac_kernels, fitted to
data/measurements/kfac-kernels-cpu.csv: a profile without K-FAC kernel times), and from the K-FAC
kernels timed in each process by ``srift.profiling.kfac_timing.measure_kfac`` (what
``srift profile --kfac`` records). The load average is printed before and after: the per-phase
comparison means something on a quiet machine only. Usage:

    python scripts/bench_kfac.py [--nproc 2 4] [--rounds 5] [--iters 5] [--batch 32] [--width 2]

Each phase is marked ``ok`` (within 15 %), ``~`` (outside, but inside the range the rounds
measured) or ``x``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from srift.cluster import cluster_from_dict  # noqa: E402
from srift.job import KFAC_STRATEGIES, Job  # noqa: E402
from srift.perf.comm import CommModel  # noqa: E402
from srift.perf.compute import layer_times  # noqa: E402
from srift.perf.kfac_kernels import device_kernels  # noqa: E402
from srift.kfac import KFACPreconditioner  # noqa: E402
from srift.profile import DeviceInfo, LayerProfile, Profile  # noqa: E402
from srift.simulate.kfac import plan_kfac  # noqa: E402
from srift.profiling.calibrate import calibration_from_times, time_collectives  # noqa: E402
from srift.profiling.kfac_timing import measure_kfac  # noqa: E402

STRATEGIES = KFAC_STRATEGIES
COMM_SIZES_ELEMS = [64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 2097152]
PHASES = ("factor_compute", "factor_comm", "inversion", "inverse_broadcast", "preconditioning")
THREADS = 1  # torch threads per worker process
TIMER_FLOOR_S = 50e-6  # below this, a phase's timers measure Python's overhead, not the phase


def make_model(width: int = 1, seed: int = 0) -> nn.Module:
    """3x32x32 -> 10: convs with factor dims 28/32w, 289w/64w, 577w/128w and a Linear 513w/10
    (``w`` = ``width``, the channel multiplier)."""
    torch.manual_seed(seed)
    w = width
    return nn.Sequential(
        nn.Conv2d(3, 32 * w, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32 * w, 64 * w, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(64 * w, 128 * w, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(),
        nn.Linear(512 * w, 10),
    )


def kfac_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


# ---- measurements inside each worker ---------------------------------------------------------
def _time_layers(model: nn.Module) -> tuple[dict, list]:
    """Hooks that record forward and backward seconds of every K-FAC layer."""
    times: dict[str, dict[str, list[float]]] = {}
    handles, start = [], {}
    for name, m in kfac_modules(model):
        times[name] = {"fwd": [], "bwd": []}

        def fpre(mod, inp, name=name):
            start[("f", name)] = time.perf_counter()

        def fpost(mod, inp, out, name=name):
            times[name]["fwd"].append(time.perf_counter() - start[("f", name)])

        def bpre(mod, gout, name=name):
            start[("b", name)] = time.perf_counter()

        def bpost(mod, gin, gout, name=name):
            times[name]["bwd"].append(time.perf_counter() - start[("b", name)])

        handles += [m.register_forward_pre_hook(fpre), m.register_forward_hook(fpost),
                    m.register_full_backward_pre_hook(bpre), m.register_full_backward_hook(bpost)]
    return times, handles


def _calibrate_comm(repeats: int = 25) -> dict:
    """All-reduce and broadcast time vs size, measured as ``srift calibrate comm`` does."""
    sizes = [4 * n for n in COMM_SIZES_ELEMS]
    times = time_collectives(sizes, repeats, warmup=1)
    return calibration_from_times("gloo", dist.get_world_size(), sizes, times)


def _run(model, pre, batches, opt) -> tuple[list[float], dict]:
    """Train on ``batches``; the seconds of each iteration and, with K-FAC, the seconds each phase
    took over the batches."""
    iters = []
    snap = dict(pre.timings) if pre is not None else {}
    for x, y in batches:
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        if pre is not None:
            pre.step()
        opt.step()
        iters.append(time.perf_counter() - t0)
    phases = {p: pre.timings.get(p, 0.0) - snap.get(p, 0.0) for p in PHASES} if pre is not None else {}
    return iters, phases


def _max_over_ranks(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _gather(values: list[float]) -> list[list[float]]:
    t = torch.tensor(values, dtype=torch.float64)
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [o.tolist() for o in out]


def worker(rank: int, world: int, rendezvous: str, args: argparse.Namespace, out: str) -> None:
    # The timing hooks on the first conv (whose input needs no gradient) are expected to fire.
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    torch.set_num_threads(THREADS)
    if args.pin and hasattr(os, "sched_setaffinity"):
        # One core per worker: gloo's threads then share their worker's core, as the model has it
        # (a hidden collective costs its worker's compute), and the scheduler cannot move a worker
        # onto its peer's core mid-phase.
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    # Through a file, not a port picked free beforehand (another process may take it while the workers start).
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(100 + rank)
    n = args.warmup + args.iters
    data = [(torch.randn(args.batch, 3, 32, 32, generator=g), torch.randint(0, 10, (args.batch,), generator=g)) for _ in range(n)]
    result: dict = {"world": world, "width": args.width}

    result["comm"] = _calibrate_comm()

    # First-order baseline (per-layer timing hooks on the plain model, DDP wraps it after) and
    # the three strategies, run in interleaved rounds in a rotating order: a drift of the shared
    # machine (another process, a frequency change) then spreads over every strategy instead of
    # landing on whichever ran last. Each figure is the median over rounds of the round's mean.
    base = make_model(args.width)
    times, handles = _time_layers(base)
    runs: dict = {"sgd": (DDP(base), None)}
    for strategy in STRATEGIES:
        model = DDP(make_model(args.width))
        runs[strategy] = (model, KFACPreconditioner(model, strategy=strategy, lr=0.01,
                                                    factor_update_steps=args.factor_steps, inv_update_steps=args.inv_steps))
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for k, (m, _) in runs.items()}
    names = list(times)
    for k, (m, pre) in runs.items():  # warm-up (SPD plans its fusion groups here)
        _run(m, pre, data[: args.warmup], opts[k])
    for samples in times.values():
        samples["fwd"].clear()
        samples["bwd"].clear()
    keys = list(runs)
    per_round: dict[str, list[tuple[float, dict]]] = {k: [] for k in keys}
    for r in range(args.rounds):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            m, pre = runs[k]
            its, ph = _run(m, pre, data[args.warmup:], opts[k])
            per_round[k].append((statistics.fmean(its), {p: v / len(its) for p, v in ph.items()}))
    for h in handles:
        h.remove()

    def slowest_per_round(k: str) -> list[list[float]]:
        """Per round: the iteration and each phase on the slowest rank; the broadcast phase is
        when the last inverse arrives after the slowest rank's inversions (the model's makespan
        plus exposed broadcast)."""
        rows = []
        for it, ph in per_round[k]:
            vals = _max_over_ranks([it] + [ph.get(p, 0.0) for p in PHASES]
                                   + [ph.get("inversion", 0.0) + ph.get("inverse_broadcast", 0.0)])
            row = vals[:-1]
            row[1 + PHASES.index("inverse_broadcast")] = max(vals[-1] - row[1 + PHASES.index("inversion")], 0.0)
            rows.append(row)
        return rows

    result["sgd_iter_s"] = statistics.median(r[0] for r in slowest_per_round("sgd"))
    fwd = _max_over_ranks([statistics.median(times[k]["fwd"]) for k in names])
    bwd = _max_over_ranks([statistics.median(times[k]["bwd"]) for k in names])
    result["layers"] = {k: {"fwd_s": f, "bwd_s": b} for k, f, b in zip(names, fwd, bwd)}
    for strategy in STRATEGIES:
        pre = runs[strategy][1]
        rows = slowest_per_round(strategy)
        cols = list(zip(*rows))  # iteration, then the phases; one value per round
        measured = {p: statistics.median(cols[1 + i]) for i, p in enumerate(PHASES)}
        spread = {p: (min(cols[1 + i]), max(cols[1 + i])) for i, p in enumerate(PHASES)}
        per_rank = _gather([statistics.median(ph[p] for _, ph in per_round[strategy]) for p in PHASES])
        result[strategy] = {"iter_s": statistics.median(cols[0]), **measured, "spread": spread, "per_rank": per_rank,
                            "owners": pre.owners, "groups": pre.fusion_groups}
        pre.remove_hooks()

    # K-FAC kernels on one batch, as `srift profile --kfac` times them (slowest rank).
    probe = make_model(args.width)
    x0, y0 = data[0]
    kt = measure_kfac(probe, lambda: nn.functional.cross_entropy(probe(x0), y0))
    fields = ("factor_a_s", "factor_g_s", "inverse_a_s", "inverse_g_s", "precondition_s")
    flat = _max_over_ranks([getattr(kt[k], f) for k in names for f in fields])
    result["kfac_kernels"] = {k: dict(zip(fields, flat[i * len(fields):(i + 1) * len(fields)])) for i, k in enumerate(names)}
    if rank == 0:
        Path(out).write_text(json.dumps(result))
    dist.barrier()  # no rank tears its connections down while another is still in a collective
    dist.destroy_process_group()


# ---- prediction ------------------------------------------------------------------------------
def measured_profile(result: dict, batch: int, kernels: bool) -> Profile:
    """The bench CNN's K-FAC layers: FLOPs (2 per multiply-add), factor dimensions, and the
    forward/backward seconds measured on this CPU (so srift's compute model returns them); with
    ``kernels``, also the measured K-FAC kernel times."""
    model = make_model(result["width"])
    shapes = {}
    hooks = [m.register_forward_hook(lambda mod, i, o, n=n: shapes.__setitem__(n, o.shape)) for n, m in kfac_modules(model)]
    model(torch.zeros(1, 3, 32, 32))
    for h in hooks:
        h.remove()
    layers = []
    for name, m in kfac_modules(model):
        bias = 1 if m.bias is not None else 0
        if isinstance(m, nn.Conv2d):
            spatial = shapes[name][2] * shapes[name][3]
            a_dim = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
        else:
            spatial, a_dim = 1, m.in_features
        macs = batch * spatial * a_dim * m.weight.shape[0]
        params = sum(p.numel() for p in m.parameters())
        k = result["kfac_kernels"][name] if kernels else {}
        layers.append(LayerProfile(name, type(m).__name__, params=params, grad_bytes=4 * params,
                                   fwd_flops=2.0 * macs, bwd_flops=4.0 * macs,
                                   fwd_s=result["layers"][name]["fwd_s"], bwd_s=result["layers"][name]["bwd_s"],
                                   kfac_a_dim=a_dim + bias, kfac_g_dim=m.weight.shape[0], kfac_spatial=spatial,
                                   **{f"kfac_{f}": v for f, v in k.items()}))
    return Profile("bench-cnn", batch_size=batch, precision="fp32", layers=layers, iterations=1,
                   device=DeviceInfo("cpu", "cpu"))


def predict(result: dict, args: argparse.Namespace, kernels: bool) -> dict:
    """srift's K-FAC plan per strategy: srift.perf's compute model on the CPU-measured profile,
    srift.perf's CommModel on a CPU cluster carrying the measured all-reduce calibration."""
    profile = measured_profile(result, args.batch, kernels)
    cluster = cluster_from_dict({
        "name": f"local-gloo-{result['world']}",
        "node_groups": [{"count": 1, "gpus_per_node": result["world"], "gpu": "cpu",
                         "intra_node": "shared-memory", "network_gbps": 10}],
        "comm_calibration": result["comm"],
    })
    times = layer_times(profile, "cpu", "fp32")
    comm = CommModel(cluster)
    # The kernel model of this CPU at the workers' one thread each (data/measurements/kfac-kernels-cpu.csv).
    model = device_kernels("cpu", threads=THREADS)
    out = {}
    for s in STRATEGIES:
        job = Job(optimizer="kfac", kfac_strategy=s, kfac_factor_steps=args.factor_steps, kfac_inv_steps=args.inv_steps)
        out[s] = plan_kfac(profile, cluster, job, times, comm, kernels=model)
    return out


def predicted_phases(plan) -> dict[str, float]:
    """The plan's phases under the runtime's timer names. On CPU workers a collective hidden
    behind computation slows that computation (``kfac_comm_interference``): the runtime's timers
    see SPD's factor all-reduces in the hooks (factor computation) and its broadcasts in the
    inversion loop, so the interference is added where they see it."""
    ph = plan.phases
    factor_k, bcast_k = plan.interference_split
    return {"factor_compute": ph.factor_compute + factor_k, "factor_comm": ph.exposed_factor_comm,
            "inversion": ph.inversion + bcast_k, "inverse_broadcast": ph.inverse_broadcast,
            "preconditioning": ph.preconditioning}


def verdict(measured: float, predicted: float, spread: tuple[float, float]) -> str:
    """``ok``: within 15 % of the median over rounds (or ``TIMER_FLOOR_S``); ``~``: outside it but
    inside the range the rounds themselves measured; ``x``: outside both."""
    if abs(predicted - measured) <= max(0.15 * measured, TIMER_FLOOR_S):
        return "ok"
    return "~" if spread[0] <= predicted <= spread[1] else "x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[2])
    ap.add_argument("--iters", type=int, default=5, help="iterations per strategy per round")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over rounds)")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=1, help="channel multiplier: 2 makes factors up to 1153 wide and "
                    "collectives of megabytes, where gloo's millisecond jitter weighs less")
    ap.add_argument("--save-json", metavar="PATH", help="write the measurements (last --nproc) to PATH")
    ap.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin each worker to a core of its own")
    ap.add_argument("--factor-steps", type=int, default=1)
    ap.add_argument("--inv-steps", type=int, default=1)
    args = ap.parse_args()
    for name in ("iters", "rounds", "warmup", "batch", "width", "factor_steps", "inv_steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if any(n < 2 for n in args.nproc):
        ap.error("--nproc must be at least 2 (the bench compares distributed strategies)")
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for world in args.nproc:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result.json")
            mp.spawn(worker, args=(world, os.path.join(tmp, "rendezvous"), args, out), nprocs=world, join=True)
            result = json.loads(Path(out).read_text())
        if args.save_json:  # every measurement behind the tables, for a later look
            Path(args.save_json).write_text(json.dumps(result, indent=1))
        for kernels in (False, True):
            plans = predict(result, args, kernels)
            source = ("K-FAC kernels timed (srift profile --kfac)" if kernels
                      else f"the K-FAC kernel model ({plans['naive'].kernels.basis})")
            print(f"\n{world} gloo processes, batch {args.batch}/process, factor every {args.factor_steps}, "
                  f"inverse every {args.inv_steps} step(s); predicted from {source}; ms per iteration, measured / predicted "
                  f"(slowest rank; first-order DDP+SGD iteration measured: {1e3 * result['sgd_iter_s']:.1f} ms)")
            head = f"{'strategy':8} " + " ".join(f"{p:>20}" for p in PHASES) + f" {'K-FAC iteration':>18} {'error':>6}"
            print(head)
            for s in STRATEGIES:
                m, ph = result[s], predicted_phases(plans[s])
                cells = [f"{1e3 * m[p]:8.1f} /{1e3 * ph[p]:7.1f} {verdict(m[p], ph[p], m['spread'][p])}" for p in PHASES]
                pred_iter = result["sgd_iter_s"] + plans[s].phases.total_s
                err = 100 * (pred_iter - m["iter_s"]) / m["iter_s"]
                print(f"{s:8} " + " ".join(f"{c:>20}" for c in cells) + f" {1e3 * m['iter_s']:8.1f} /{1e3 * pred_iter:7.1f} {err:+5.0f}%")
        for s in STRATEGIES:
            print(f"  {s} per rank: " + "; ".join(" ".join(f"{1e3 * v:6.1f}" for v in r) for r in result[s]["per_rank"]))
        spd = result["spd"]
        print(f"spd runtime: owners {spd['owners']} (predicted {plans['spd'].owners}); fused groups "
              f"A {[len(g) for g in spd['groups']['A']]} G {[len(g) for g in spd['groups']['G']]} "
              f"(predicted A {[len(g) for g in plans['spd'].groups_a]} G {[len(g) for g in plans['spd'].groups_g]})")
        print("per phase: ok = within 15 % of the median over rounds; ~ = outside 15 % but inside the range the "
              "rounds measured; x = outside both. Range over rounds (ms): " + "; ".join(
                  f"{s} " + " ".join(f"{1e3 * result[s]['spread'][p][0]:.1f}-{1e3 * result[s]['spread'][p][1]:.1f}" for p in PHASES)
                  for s in STRATEGIES))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

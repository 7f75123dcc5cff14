"""Time to predict one configuration, amortized over many, as the recommender does.

    python scripts/bench_predict.py [--model resnet50] [--repeat 2000] [--profiles-dir DIR]

Prints a table: per-call time of the compute model (``layer_times``), the communication model
(``CommModel.allreduce_time_s`` on all of a model's DDP buckets), and the whole simulator
(``srift.simulate.predict``, when installed), each cold (first call: caches empty) and amortized
over ``--repeat`` configurations cycling through GPUs, precisions, batch sizes and cluster shapes.
The last line is a decoder LLM (``--llm``, default llama3-70b) with ``--parallelism auto``: the
first prediction on 1,024 GPUs, profile included, and the amortized cost over 256 cluster sizes.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from srift.cluster import Cluster, NodeGroup  # noqa: E402
from srift.perf.comm import CommModel  # noqa: E402
from srift.job import PRECISIONS  # noqa: E402
from srift.perf.compute import layer_times  # noqa: E402

GPUS = [("V100-16GB", "nvlink", 25.0, "ethernet"), ("A100-40GB", "nvswitch", 400.0, "efa"), ("A10G", "pcie4", 50.0, "ethernet"),
        ("H100", "nvswitch4", 3200.0, "efa"), ("T4", "pcie3", 50.0, "ethernet"), ("L4", "pcie4", 100.0, "ethernet")]
SHAPES = [(1, 1), (1, 4), (1, 8), (2, 8), (4, 8), (8, 4)]


def _time(fn, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--profiles-dir", default=None)
    ap.add_argument("--llm", default="llama3-70b", help="decoder LLM of the sharded line (bf16, 4096 tokens, auto)")
    args = ap.parse_args()

    from fit_models import profile_source

    source = profile_source(args.profiles_dir)
    batches = (32, 64, 128)
    seq = 384 if args.model.startswith("bert") else None
    profiles = {b: source.get(args.model, b, seq, keep_head=True) for b in batches}
    configs = list(itertools.product(GPUS, PRECISIONS, batches, SHAPES))
    clusters = {(g, s): Cluster(f"{g[0]}x{s}", (NodeGroup(s[0], s[1], g[0], g[1], g[2], g[3]),)) for g in GPUS for s in SHAPES}
    buckets = np.array([1e6] + [25e6] * int(profiles[32].grad_bytes // 25e6) + [profiles[32].grad_bytes % 25e6])

    def compute(i: int) -> None:
        g, p, b, _ = configs[i % len(configs)]
        layer_times(profiles[b], g[0], p)

    def comm(i: int) -> None:
        g, _, _, s = configs[i % len(configs)]
        CommModel.for_cluster(clusters[(g, s)]).allreduce_time_s(buckets)

    rows = []
    t0 = time.perf_counter()
    compute(0)
    rows.append(("compute: layer_times", (time.perf_counter() - t0), _time(compute, args.repeat)))
    t0 = time.perf_counter()
    comm(0)
    rows.append(("comm: all-reduce of every bucket", (time.perf_counter() - t0), _time(comm, args.repeat)))
    try:
        from srift.job import Job
        from srift.simulate import Predictor, predict

        def sim(i: int) -> None:
            g, p, b, s = configs[i % len(configs)]
            predict(profiles[b], clusters[(g, s)], Job(batch_size=b, precision=p))

        t0 = time.perf_counter()
        sim(0)
        rows.append(("simulate.predict (one-shot, no reuse)", (time.perf_counter() - t0), _time(sim, args.repeat)))

        # The recommender's path: one Predictor per (profile, job), scored on many clusters.
        predictors = {(p, b): Predictor(profiles[b], Job(batch_size=b, precision=p)) for p in PRECISIONS for b in batches}

        def rec(i: int) -> None:
            g, p, b, s = configs[i % len(configs)]
            predictors[(p, b)].predict(clusters[(g, s)])

        t0 = time.perf_counter()
        rec(0)
        rows.append(("Predictor.predict (recommender path)", (time.perf_counter() - t0), _time(rec, args.repeat)))
    except ImportError:
        rows.append(("simulate.predict (not installed)", float("nan"), float("nan")))

    rows += llm_rows(args.llm)
    print(f"model {args.model}: {len(profiles[32].layers)} layers, {len(buckets)} buckets; "
          f"{len(configs)} distinct configurations cycled, {args.repeat} calls each")
    print(f"{'what':<40}{'first call (ms)':>16}{'amortized (ms)':>16}")
    for name, cold, warm in rows:
        print(f"{name:<40}{cold * 1e3:>16.3f}{warm * 1e3:>16.4f}")


def llm_rows(model: str) -> list[tuple[str, float, float]]:
    """A decoder LLM with ``--parallelism auto`` (every parallelism and checkpointing that fits is
    simulated, the fastest kept): the first call (profile, Predictor and prediction) on 1,024 GPUs
    (128 x p5.48xlarge), and the prediction amortized over every node count up to 128 of two
    instance types, as the search calls it."""
    import functools

    from srift.catalog.spec import cluster_from_spec
    from srift.job import Job
    from srift.simulate import Predictor
    from srift.zoo import llm_arch, load_builtin_profile
    from srift.zoo.llm import model_flops_per_token

    job = Job(precision="bf16", batch_size=1, seq_len=4096)
    big = cluster_from_spec("p5.48xlarge:128")
    t0 = time.perf_counter()
    prof = load_builtin_profile(model, batch_size=1, seq_len=4096, precision="bf16")
    predictor = Predictor(prof, job, model_flops_per_token=functools.partial(model_flops_per_token, llm_arch(model)))
    pred = predictor.predict(big)
    cold = time.perf_counter() - t0
    clusters = [cluster_from_spec(f"{t}:{n}") for t in ("p5.48xlarge", "p4de.24xlarge") for n in range(1, 129)]
    t0 = time.perf_counter()
    for c in clusters:
        predictor.predict(c)
    warm = (time.perf_counter() - t0) / len(clusters)
    return [(f"{model} auto, 1,024 GPUs ({pred.plan_label})", cold, warm)]


if __name__ == "__main__":
    main()

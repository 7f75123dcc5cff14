#!/usr/bin/env python3
"""How fast is `srift recommend`? Search time and whole-command time vs --max-gpus and --mixed.

Search time: the in-process search (catalog loaded, profile loaded, Predictor built and run on every
candidate), median of 5 runs. Command time: `srift recommend ... --format json` as a fresh process
(Python start, imports, catalog and profile load, search, output), median of 3 runs.

Run: python scripts/bench_recommend.py [--model resnet50] [--budget 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift import api  # noqa: E402
from srift.job import Job  # noqa: E402
from srift.search.limits import Constraints  # noqa: E402


def search_time(model: str, budget: float, max_gpus: int, spot: bool, mixed: bool) -> tuple[float, int, int]:
    times, considered, evaluated = [], 0, 0
    for _ in range(5):
        t0 = time.perf_counter()
        res = api.recommend(Job(), Constraints(budget_usd_per_hour=budget, max_gpus=max_gpus, spot=spot, mixed=mixed),
                            model=model).search
        times.append(time.perf_counter() - t0)
        considered, evaluated = res.considered, res.evaluated
    return statistics.median(times), considered, evaluated


def command_time(model: str, budget: float, max_gpus: int, spot: bool, mixed: bool) -> float:
    args = [sys.executable, "-m", "srift.cli", "recommend", "--model", model, "--budget", str(budget),
            "--max-gpus", str(max_gpus), "--format", "json"]
    args += ["--spot"] if spot else []
    args += ["--mixed"] if mixed else []
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--budget", type=float, default=20.0)
    args = ap.parse_args()
    print(f"srift recommend --model {args.model} --budget {args.budget:g}: us-east-1 catalog")
    print(f"{'max GPUs':>8} {'spot':>5} {'mixed':>6} {'considered':>11} {'simulated':>10} {'search s':>9} {'command s':>10}")
    for spot, mixed in ((False, False), (True, False), (True, True)):
        for max_gpus in (8, 16, 32, 64):
            s, considered, evaluated = search_time(args.model, args.budget, max_gpus, spot, mixed)
            c = command_time(args.model, args.budget, max_gpus, spot, mixed)
            print(f"{max_gpus:>8} {str(spot):>5} {str(mixed):>6} {considered:>11,} {evaluated:>10,} {s:>9.3f} {c:>10.3f}")
    print("Targets: search <= 0.5 s and command <= 1.5 s at 64 GPUs with spot and mixed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

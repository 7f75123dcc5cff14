#!/usr/bin/env python3
"""How fast is `srift recommend`? Search time against the largest cluster, and across clouds.

Search time: `srift.api.recommend` in process (catalog and profile already loaded once, as a second
call in a session finds them), median of --repeats runs, wall clock and CPU. Command time: the whole
`srift recommend ... --format json` as a fresh process (Python start, imports, catalog and profile
load, search, output), median of 3.

Tables:
1. growth: --max-gpus 64 ... 4,096 with --budget 1e7 --spot --mixed over every AWS region (the
   issue's LLM-scale case), with the simulations run and the configurations considered; the last
   column is the time per 1,000 GPUs of --max-gpus (flat or falling: at most linear growth);
2. clouds: 64 GPUs with spot over one region, every AWS region, and every region of AWS, GCP and
   Lambda (budget $20/h and 1e7);
3. the bound: the largest --max-gpus srift takes, and one beyond it (refused at once).

Targets: <= 0.5 s at 64 GPUs with spot over every region of the three clouds; <= 1 s at 1,024 GPUs
with spot and mixed.

5. (``--layouts``, alone) layouts: llama3.1-405b with ``--layout auto`` (layout x instance x count),
   every AWS region and every cloud, up to 256 and 1,024 GPUs; target <= 5 s.

6. (``--speed``, alone) the LLM searches issue #45 times, each the whole command as a fresh
   process (median of --repeats; wall clock and the process's CPU, which a loaded machine inflates
   less), with the progress lines it writes to a standard error that is not a terminal and the
   simulations they report: ``recommend --model deepseek-v3 --tokens 1e11 --deadline 240`` and
   ``--budget 1e7 --max-gpus 16384 --layout auto --top 1000`` (targets <= 10 s, goal 3 s), and
   the README's ``--model resnet50 --budget 20`` and two layout searches beside them.

Run: python scripts/bench_recommend.py [--model resnet50] [--repeats 5] [--no-command] [--layouts] [--speed]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift import api  # noqa: E402
from srift.errors import SriftError  # noqa: E402
from srift.job import Job, JobLength  # noqa: E402
from srift.search.limits import MAX_SEARCH_GPUS, Constraints  # noqa: E402


def search_time(model: str, infra: str, repeats: int, job: Job | None = None,
                **limits: object) -> tuple[float, float, int, int, int, str]:
    """(median wall s, median CPU s, simulations, priced, considered, chosen) of the in-process search."""
    walls, cpus = [], []
    found = None
    job = job or Job()
    api.recommend(job, Constraints(**limits), model=model, infra=infra)  # type: ignore[arg-type]  # warm the catalog
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        found = api.recommend(job, Constraints(**limits), model=model, infra=infra).search  # type: ignore[arg-type]
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    assert found is not None
    top = found.recommendations[0] if found.recommendations else None
    chosen = "-" if top is None else top.label + (f" {top.prediction.plan_label}" if top.prediction.layout else "")
    return statistics.median(walls), statistics.median(cpus), found.simulated, found.evaluated, found.considered, chosen


def command_time(args: list[str]) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "srift.cli", "recommend", *args, "--format", "json"], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-command", action="store_true", help="skip the fresh-process command timings")
    ap.add_argument("--layouts", action="store_true", help="only the layout search table (llama3.1-405b, --layout auto)")
    ap.add_argument("--speed", action="store_true", help="only the LLM search commands of issue #45, as fresh processes")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be 1 or more")
    m = args.model
    if args.layouts:
        return layouts_table(args.repeats)
    if args.speed:
        return speed_table(args.repeats)

    print(f"1. Growth: srift recommend --model {m} --budget 1e7 --spot --mixed --max-gpus N (every AWS region)")
    print(f"{'max GPUs':>8} {'considered':>12} {'simulated':>10} {'priced':>8} {'search s':>9} {'CPU s':>7} {'s/1k GPUs':>10}  chosen")
    for n in (64, 128, 256, 512, 1024, 2048, 4096):
        wall, cpu, sims, priced, considered, chosen = search_time(m, "aws", args.repeats, budget_usd_per_hour=1e7, max_gpus=n,
                                                                   spot=True, mixed=True)
        print(f"{n:>8,} {considered:>12,} {sims:>10,} {priced:>8,} {wall:>9.3f} {cpu:>7.3f} {wall / n * 1000:>10.3f}  {chosen}")

    print(f"\n2. Clouds: srift recommend --model {m} --max-gpus 64 --spot --budget B --infra I")
    print(f"{'infra':>22} {'budget':>7} {'considered':>11} {'simulated':>10} {'priced':>8} {'search s':>9} {'CPU s':>7}  chosen")
    for infra in ("aws/us-east-1", "aws", "aws,gcp,lambda"):
        for budget in (20.0, 1e7):
            wall, cpu, sims, priced, considered, chosen = search_time(m, infra, args.repeats, budget_usd_per_hour=budget, max_gpus=64,
                                                                       spot=True)
            print(f"{infra:>22} {budget:>7g} {considered:>11,} {sims:>10,} {priced:>8,} {wall:>9.3f} {cpu:>7.3f}  {chosen}")

    print(f"\n3. The bound: --max-gpus up to {MAX_SEARCH_GPUS:,}")
    wall, cpu, sims, _, considered, chosen = search_time(m, "aws", 1, budget_usd_per_hour=1e7, max_gpus=MAX_SEARCH_GPUS, spot=True, mixed=True)
    print(f"  --max-gpus {MAX_SEARCH_GPUS:,} --spot --mixed: {wall:.2f} s ({cpu:.2f} s CPU), {sims:,} simulations of "
          f"{considered:,} configurations; chose {chosen}")
    t0 = time.perf_counter()
    try:
        Constraints(max_gpus=100_000)
    except SriftError as exc:
        print(f"  --max-gpus 100,000: refused in {time.perf_counter() - t0:.4f} s: {exc.message}")

    if not args.no_command:
        print("\n4. Whole command (fresh process, median of 3)")
        for cmd in (["--model", m, "--budget", "20"], ["--model", m, "--budget", "20", "--spot", "--infra", "aws,gcp,lambda"],
                    ["--model", m, "--budget", "1e7", "--max-gpus", "1024", "--spot", "--mixed"]):
            print(f"  srift recommend {' '.join(cmd)}: {command_time(cmd):.2f} s")
    print("\nTargets: <= 0.5 s at 64 GPUs with spot over every region of aws,gcp,lambda; <= 1 s at 1,024 GPUs with spot and mixed.")
    return 0


def layouts_table(repeats: int) -> int:
    """Recommend searching layout x instance x count: llama3.1-405b, --layout auto."""
    job = Job(precision="bf16", seq_len=8192, layout="auto", global_batch_size=512, length=JobLength.given(tokens=10**11))
    print("5. Layouts: srift recommend --model llama3.1-405b --tokens 1e11 --deadline 240 --precision bf16 --seq-len 8192 "
          "--layout auto --global-batch-size 512 --max-gpus N --infra I")
    print(f"{'infra':>22} {'max GPUs':>8} {'considered':>11} {'simulated':>10} {'priced':>8} {'search s':>9} {'CPU s':>7}  chosen")
    for infra in ("aws", "aws,gcp,lambda,azure"):
        for n in (256, 1024):
            wall, cpu, sims, priced, considered, chosen = search_time("llama3.1-405b", infra, repeats, job, deadline_hours=240.0,
                                                                       max_gpus=n)
            print(f"{infra:>22} {n:>8,} {considered:>11,} {sims:>10,} {priced:>8,} {wall:>9.3f} {cpu:>7.3f}  {chosen}")
    print("\nTarget: <= 5 s with layouts over every cloud up to 1,024 GPUs.")
    return 0


SPEED_COMMANDS = (  # (target s or None, the arguments of `srift recommend`)
    (10.0, ["--model", "deepseek-v3", "--tokens", "1e11", "--deadline", "240"]),
    (10.0, ["--model", "deepseek-v3", "--budget", "1e7", "--max-gpus", "16384", "--layout", "auto", "--top", "1000"]),
    (None, ["--model", "resnet50", "--budget", "20"]),
    (None, ["--model", "llama3-70b", "--tokens", "1e11", "--deadline", "240"]),
    (None, ["--model", "mixtral-8x7b", "--tokens", "1e10", "--deadline", "100"]),
)


def timed_command(args: list[str]) -> tuple[float, float, list[str], str]:
    """(wall s, CPU s, progress lines, first line of the output) of `srift recommend ARGS` as a
    fresh process, standard error a pipe (not a terminal)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "srift.cli", "recommend", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"srift recommend {' '.join(args)} failed ({proc.returncode}): {err.strip()[-500:]}")
    progress = [line for line in err.splitlines() if line.startswith("Searching:")]
    return wall, cpu.ru_utime + cpu.ru_stime, progress, out.splitlines()[0] if out else ""


def speed_table(repeats: int) -> int:
    """The whole `srift recommend` of issue #45's LLM searches and a few beside them."""
    print("6. Whole command, fresh process, standard error a pipe (median of", repeats, "runs)")
    print(f"{'wall s':>8} {'CPU s':>7} {'target':>12} {'progress lines':>15}  command (and its last progress line)")
    cpu_before = 0.0
    for target, args in SPEED_COMMANDS:
        walls, cpus, lines = [], [], []
        for _ in range(repeats):
            wall, cpu_total, lines, _ = timed_command(args)
            walls.append(wall)
            cpus.append(cpu_total - cpu_before)
            cpu_before = cpu_total
        verdict = "-" if target is None else (f"{target:g} s " + ("met" if statistics.median(walls) <= target else "MISSED"))
        print(f"{statistics.median(walls):>8.2f} {statistics.median(cpus):>7.2f} {verdict:>12} {len(lines):>15}  "
              f"srift recommend {' '.join(args)}")
        if lines:
            print(f"{'':>47}{lines[-1]}")
    print("\nTargets (issue #45): <= 10 s on this machine, goal 3 s; progress lines on a non-terminal standard error.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Probe srift's command line with bad input, as a careless user and an attacker would.

Each kind runs the real CLI (``python -m srift.cli``) in a fresh folder, with its own cache
folder, and is judged on what the user sees: exit code 2, exactly one ``Error:`` line and one
``To fix:`` line on stderr, no traceback, and no file written or changed (in the folder or the
cache). Prints a table (kind, exit code, first line, traceback, files written) and a summary;
exits 1 when any kind falls short.

    python scripts/probe_bad_inputs.py            # every kind
    python scripts/probe_bad_inputs.py -k profile # kinds whose name contains "profile"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "vgg16.yaml"
BILLION_LAUGHS = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
CLUSTER = "name: lab\nnode_groups:\n  - {count: 2, gpus_per_node: 4, gpu: V100-32GB, intra_node: nvlink, network_gbps: 25}\n"
JOB = "model: resnet50\nbatch_size: 32\nsteps: 1000\ninstance: p3.16xlarge:1\nlimits: {max_cost_usd: 100}\n"
HF = json.loads((ROOT / "tests" / "fixtures" / "hf_configs" / "Llama-3.2-1B.json").read_text(encoding="utf-8"))
BASELINE = {"schema": "srift.check/v1", "passed": True, "predicted_cost_usd": 10.0, "predicted_hours": 1.0,
            "cost_per_hour_usd": 10.0}


@dataclass
class Probe:
    """One kind of bad input: the command line and the files it needs in its folder."""

    kind: str
    argv: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)


def _profile_with(**changes: object) -> str:
    import yaml

    doc = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if key.startswith("layer0."):
            doc["layers"][0][key.split(".", 1)[1]] = value
        else:
            doc[key] = value
    return yaml.safe_dump(doc, sort_keys=False)


def _fifo(folder: Path) -> None:
    os.mkfifo(folder / "pipe.yaml")


def _unreadable(folder: Path) -> None:
    (folder / "secret.yaml").chmod(0)


def probes() -> list[Probe]:
    predict = ["predict", "--model", "resnet50", "--instance", "p3.2xlarge"]
    on_profile = ["predict", "--instance", "p3.16xlarge:1", "--profile"]
    out = [
        # ---- predict: values outside what srift models
        Probe("predict --batch-size 100000000", [*predict, "--batch-size", "100000000"]),
        Probe("predict --batch-size 0", [*predict, "--batch-size", "0"]),
        Probe("predict --batch-size -5", [*predict, "--batch-size", "-5"]),
        Probe("predict --batch-size abc", [*predict, "--batch-size", "abc"]),
        Probe("predict --batch-size 100000 (does not fit)", [*predict, "--batch-size", "100000"]),
        Probe("predict --seq-len 1000000 (does not fit)", ["predict", "--model", "gpt2", "--instance", "p3.2xlarge", "--seq-len", "1000000"]),
        Probe("predict --seq-len 2000000", ["predict", "--model", "gpt2", "--instance", "p3.2xlarge", "--seq-len", "2000000"]),
        Probe("predict --seq-len on an image model", [*predict, "--seq-len", "128"]),
        Probe("predict --global-batch-size 10^9", [*predict, "--global-batch-size", "1000000000"]),
        Probe("predict --instance TYPE:99999999999", ["predict", "--model", "resnet50", "--instance", "p3.2xlarge:99999999999"]),
        Probe("predict --instance TYPE:<5000 digits>", ["predict", "--model", "resnet50", "--instance", "p3.2xlarge:" + "9" * 5000]),
        Probe("predict --instance TYPE:0", ["predict", "--model", "resnet50", "--instance", "p3.2xlarge:0"]),
        Probe("predict --instance 20,000 nodes in two parts",
              ["predict", "--model", "resnet50", "--instance", "p3.16xlarge:10000+p3.16xlarge:10000"]),
        Probe("predict --instance of 100 parts", ["predict", "--model", "resnet50", "--instance", "+".join(["g5.xlarge:1"] * 100)]),
        Probe("predict --instance unknown type", ["predict", "--model", "resnet50", "--instance", "p9.mega"]),
        Probe("predict --instance empty", ["predict", "--model", "resnet50", "--instance", ""]),
        Probe("predict --instance @market typo", ["predict", "--model", "resnet50", "--instance", "p3.2xlarge@spott"]),
        Probe("predict --model unknown", ["predict", "--model", "resnet5O", "--instance", "p3.2xlarge"]),
        Probe("predict --precision fp8", [*predict, "--precision", "fp8"]),
        Probe("predict --kfac-inv-steps not a multiple", [*predict, "--optimizer", "kfac", "--kfac-factor-steps", "2", "--kfac-inv-steps", "3"]),
        Probe("predict --kfac-factor-steps 10^9", [*predict, "--optimizer", "kfac", "--kfac-factor-steps", "1000000000"]),
        Probe("predict --format xml", [*predict, "--format", "xml"]),
        Probe("predict unknown flag", [*predict, "--gpus", "8"]),
        Probe("predict --grad-accum 10^9", [*predict, "--grad-accum", "1000000000"]),
        Probe("predict --parallelism zero9", [*predict, "--parallelism", "zero9"]),
        Probe("predict --data-loading tapes", [*predict, "--data-loading", "tapes"]),
        Probe("predict --out-file into a device", [*predict, "--format", "json", "--out-file", "/dev/null/p.json"]),
        Probe("predict --skypilot into a folder", [*predict, "--skypilot", "sky"], setup=lambda d: (d / "sky").mkdir()),
        Probe("predict SRIFT_SPOT_INTERRUPTIONS_PER_HOUR=nan", [*predict, "--spot"], env={"SRIFT_SPOT_INTERRUPTIONS_PER_HOUR": "nan"}),
        # ---- predict: the profile file
        Probe("profile path is a folder", [*on_profile, "folder"], setup=lambda d: (d / "folder").mkdir()),
        Probe("profile path is /dev/null", [*on_profile, "/dev/null"]),
        Probe("profile path is a named pipe", [*on_profile, "pipe.yaml"], setup=_fifo),
        Probe("profile path does not exist", [*on_profile, "missing.yaml"]),
        Probe("profile is empty", [*on_profile, "p.yaml"], {"p.yaml": ""}),
        Probe("profile is binary", [*on_profile, "p.yaml"], {"p.yaml": bytes(range(256)) * 8}),
        Probe("profile is a billion laughs", [*on_profile, "p.yaml"], {"p.yaml": BILLION_LAUGHS}),
        Probe("profile nests 100,000 deep", [*on_profile, "p.yaml"], {"p.yaml": "[" * 100_000 + "]" * 100_000}),
        Probe("profile contains itself (alias)", [*on_profile, "p.yaml"], {"p.yaml": "a: &a [1, *a]\n"}),
        Probe("profile with a python tag", [*on_profile, "p.yaml"], {"p.yaml": "!!python/object/apply:os.system ['touch pwned']\n"}),
        Probe("profile layer FLOPs NaN", [*on_profile, "p.yaml"], {"p.yaml": _profile_with(**{"layer0.fwd_flops": float("nan")})}),
        Probe("profile layer FLOPs -1", [*on_profile, "p.yaml"], {"p.yaml": _profile_with(**{"layer0.fwd_flops": -1.0})}),
        Probe("profile layer params 10^400", [*on_profile, "p.yaml"], {"p.yaml": _profile_with(**{"layer0.params": 10**400})}),
        Probe("profile batch_size .inf", [*on_profile, "p.yaml"], {"p.yaml": _profile_with(batch_size=float("inf"))}),
        Probe("profile name with newline", [*on_profile, "p.yaml"], {"p.yaml": _profile_with(name="a\nb")}),
        Probe("profile notes are lists", [*on_profile, "p.yaml"], {"p.yaml": _profile_with(notes=[["x"] * 10])}),
        Probe("profile truncated", [*on_profile, "p.yaml"], {"p.yaml": PROFILE.read_text(encoding="utf-8")[:5000] + "\n  - {name: x"}),
        # ---- predict: the cluster file and the model config
        Probe("cluster count 10^12", ["predict", "--model", "resnet50", "--cluster", "c.yaml"],
              {"c.yaml": CLUSTER.replace("count: 2", "count: 1000000000000")}),
        Probe("cluster network_gbps .nan", ["predict", "--model", "resnet50", "--cluster", "c.yaml"],
              {"c.yaml": CLUSTER.replace("network_gbps: 25", "network_gbps: .nan")}),
        Probe("cluster usd_per_hour .inf", ["predict", "--model", "resnet50", "--cluster", "c.yaml"],
              {"c.yaml": CLUSTER.replace("network_gbps: 25}", "network_gbps: 25, usd_per_hour: .inf}")}),
        Probe("cluster intra_node is a list", ["predict", "--model", "resnet50", "--cluster", "c.yaml"],
              {"c.yaml": CLUSTER.replace("intra_node: nvlink", "intra_node: [nvlink]")}),
        Probe("cluster spot: 'no' (a string)", ["predict", "--model", "resnet50", "--cluster", "c.yaml"],
              {"c.yaml": CLUSTER.replace("network_gbps: 25}", "network_gbps: 25, spot: 'no'}")}),
        Probe("cluster calibration with NaN", ["predict", "--model", "resnet50", "--cluster", "c.yaml"],
              {"c.yaml": CLUSTER + "comm_calibration: {sizes_bytes: [1024, 1048576], times_s: [.nan, 0.001]}\n"}),
        Probe("--model-config is a folder", ["predict", "--model-config", "cfg", "--instance", "p4d.24xlarge"],
              setup=lambda d: (d / "cfg").mkdir()),
        Probe("--model-config with NaN (not JSON)", ["predict", "--model-config", "config.json", "--instance", "p4d.24xlarge"],
              {"config.json": json.dumps({**HF, "rms_norm_eps": float("nan")})}),
        Probe("--model-config hidden_size 10^30", ["predict", "--model-config", "config.json", "--instance", "p4d.24xlarge"],
              {"config.json": json.dumps({**HF, "hidden_size": 10**30})}),
        # ---- recommend
        Probe("recommend --max-gpus 100000", ["recommend", "--model", "resnet50", "--budget", "20", "--max-gpus", "100000"]),
        Probe("recommend --budget -1", ["recommend", "--model", "resnet50", "--budget", "-1"]),
        Probe("recommend --budget nan", ["recommend", "--model", "resnet50", "--budget", "nan"]),
        Probe("recommend --budget inf", ["recommend", "--model", "resnet50", "--budget", "inf"]),
        Probe("recommend --top 0", ["recommend", "--model", "resnet50", "--budget", "20", "--top", "0"]),
        Probe("recommend --deadline without a length", ["recommend", "--model", "resnet50", "--deadline", "5"]),
        Probe("recommend --steps 10^13", ["recommend", "--model", "resnet50", "--deadline", "5", "--steps", "10000000000000"]),
        Probe("recommend --tokens 10^30", ["recommend", "--model", "gpt2", "--budget", "20", "--tokens", "1" + "0" * 30]),
        Probe("recommend --samples 0", ["recommend", "--model", "resnet50", "--budget", "20", "--samples", "0"]),
        Probe("recommend --confidence 1.5", ["recommend", "--model", "resnet50", "--budget", "20", "--confidence", "1.5"]),
        Probe("recommend --epochs without --dataset-size", ["recommend", "--model", "resnet50", "--budget", "20", "--epochs", "1"]),
        Probe("recommend --plot under a device", ["recommend", "--model", "resnet50", "--budget", "20", "--max-gpus",
                                                                "1", "--gpu", "T4", "--plot", "/dev/null/x.png"]),
        # ---- check
        Probe("check /dev/null", ["check", "/dev/null"]),
        Probe("check a folder", ["check", "jobs"], setup=lambda d: (d / "jobs").mkdir()),
        Probe("check a missing file", ["check", "missing.yaml"]),
        Probe("check batch_size 1e400", ["check", "job.yaml"], {"job.yaml": JOB.replace("batch_size: 32", "batch_size: 1e400")}),
        Probe("check steps 10^400", ["check", "job.yaml"], {"job.yaml": JOB.replace("steps: 1000", "steps: 1" + "0" * 400)}),
        Probe("check max_cost_usd .nan", ["check", "job.yaml"], {"job.yaml": JOB.replace("max_cost_usd: 100", "max_cost_usd: .nan")}),
        Probe("check max_cost_usd 1e-320", ["check", "job.yaml"], {"job.yaml": JOB.replace("max_cost_usd: 100", "max_cost_usd: 1e-320")}),
        Probe("check unknown key", ["check", "job.yaml"], {"job.yaml": JOB + "colour: blue\n"}),
        Probe("check key that is a list", ["check", "job.yaml"], {"job.yaml": JOB + "? [a, b]\n: 1\n"}),
        Probe("check SRIFT_BATCH_SIZE=abc", ["check", "job.yaml"], {"job.yaml": JOB}, env={"SRIFT_BATCH_SIZE": "abc"}),
        Probe("check SRIFT_MAX_HOURS=inf", ["check", "job.yaml"], {"job.yaml": JOB}, env={"SRIFT_MAX_HOURS": "inf"}),
        Probe("check --compare-to negative cost", ["check", "job.yaml", "--compare-to", "base.json"],
              {"job.yaml": JOB, "base.json": json.dumps({**BASELINE, "predicted_cost_usd": -5})}),
        Probe("check --compare-to NaN hours", ["check", "job.yaml", "--compare-to", "base.json"],
              {"job.yaml": JOB, "base.json": json.dumps({**BASELINE, "predicted_hours": float("nan")})}),
        Probe("check --compare-to 1e309 (inf)", ["check", "job.yaml", "--compare-to", "base.json"],
              {"job.yaml": JOB, "base.json": json.dumps(BASELINE).replace("10.0", "1e309", 1)}),
        Probe("check --compare-to not JSON", ["check", "job.yaml", "--compare-to", "base.json"], {"job.yaml": JOB, "base.json": "{oops"}),
        Probe("check --compare-to nested 100,000 deep", ["check", "job.yaml", "--compare-to", "base.json"],
              {"job.yaml": JOB, "base.json": "[" * 100_000 + "]" * 100_000}),
        # ---- catalog
        Probe("catalog show unknown type", ["catalog", "show", "p9.mega"]),
        Probe("catalog list --region mars-1", ["catalog", "list", "--region", "mars-1"]),
        Probe("catalog list --format yaml", ["catalog", "list", "--format", "yaml"]),
        # ---- profile
        Probe("profile --name ../../x", ["profile", "--model", "resnet50", "--name", "../../x"]),
        Probe("profile --name /etc/passwd", ["profile", "--model", "gpt2", "--name", "/etc/passwd"]),
        Probe("profile --name ''", ["profile", "--model", "gpt2", "--name", ""]),
        Probe("profile over an existing file", ["profile", "--model", "gpt2"], {"profiles/gpt2.yaml": "keep me\n"}),
        Probe("profile -o a folder", ["profile", "--model", "gpt2", "-o", "out"], setup=lambda d: (d / "out").mkdir()),
        Probe("profile --batch-size 0", ["profile", "--model", "gpt2", "--batch-size", "0"]),
        Probe("profile --seq-len 10^7", ["profile", "--model", "gpt2", "--seq-len", "10000000"]),
        Probe("profile a script that is a folder", ["profile", "train"], setup=lambda d: (d / "train").mkdir()),
        Probe("profile a missing script", ["profile", "missing.py"]),
        Probe("profile --timeout 0", ["profile", "train.py", "--timeout", "0"], {"train.py": "print('hi')\n"}),
        Probe("profile --timeout -1", ["profile", "train.py", "--timeout", "-1"], {"train.py": "print('hi')\n"}),
        Probe("profile --warmup 0", ["profile", "train.py", "--warmup", "0"], {"train.py": "print('hi')\n"}),
        Probe("profile --iters 10^9", ["profile", "train.py", "--iters", "1000000000"], {"train.py": "print('hi')\n"}),
        Probe("profile a script and --model", ["profile", "train.py", "--model", "gpt2"], {"train.py": "print('hi')\n"}),
        # ---- calibrate
        Probe("calibrate comm --reps 0", ["calibrate", "comm", "--reps", "0"]),
        Probe("calibrate comm --sizes abc", ["calibrate", "comm", "--sizes", "abc"]),
    ]
    if os.geteuid() != 0:  # root reads any file: there is no unreadable file to probe with
        out.append(Probe("profile file unreadable", [*on_profile, "secret.yaml"], {"secret.yaml": "x: 1\n"}, setup=_unreadable))
    return out


def _snapshot(*folders: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for folder in folders:
        for p in folder.rglob("*"):
            if p.is_file() or p.is_symlink():
                st = p.lstat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


@dataclass
class Outcome:
    kind: str
    code: int
    first_line: str
    traceback: bool
    written: list[str]
    ok: bool
    seconds: float


def run(probe: Probe, timeout_s: float = 180.0) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="srift-probe-") as tmp:
        folder, cache = Path(tmp) / "work", Path(tmp) / "cache"
        folder.mkdir()
        cache.mkdir()
        for name, content in probe.files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content, encoding="utf-8")
        if probe.setup:
            probe.setup(folder)
        before = _snapshot(folder, cache)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SRIFT_")}
        env.update(SRIFT_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), **probe.env)
        t0 = time.perf_counter()
        try:
            res = subprocess.run([sys.executable, "-m", "srift.cli", *probe.argv], cwd=folder, env=env, capture_output=True,
                                 text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
            code, err = res.returncode, res.stderr
        except subprocess.TimeoutExpired:
            code, err = -1, f"(no answer within {timeout_s:g} s)"
        secs = time.perf_counter() - t0
        after = _snapshot(folder, cache)
        written = sorted(Path(p).name for p, st in after.items() if before.get(p) != st)
        lines = err.strip().splitlines()
        one_each = (sum(l.startswith("Error: ") for l in lines) == 1 and sum(l.startswith("To fix: ") for l in lines) == 1
                    and len(lines) == 2)
        tb = "Traceback" in err
        return Outcome(probe.kind, code, lines[0] if lines else "", tb, written,
                       code == 2 and one_each and not tb and not written, secs)


# ==== `srift profile` on unusual scripts (issue 26 item 5; issue 28) ===================================
# Kept apart from probes(): these scripts are not all refused. A script with nothing to measure is
# refused like any bad input (exit 2); the others must run to a profile, or end with the script's
# own exit status, with no traceback and nothing half-written.
_TRAIN = """import os, sys, torch
from torch import nn
net = nn.Linear(8, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
def step():
    net(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@dataclass
class ProfilerCase:
    """A profiled script and what srift must do with it: its exit code, and whether p.yaml is written."""

    probe: Probe
    code: int
    writes_profile: bool


def profiler_cases() -> list[ProfilerCase]:
    run_ = ["profile", "train.py", "--warmup", "2", "--iters", "3", "-o", "p.yaml", "--timeout", "60"]
    loop = "for i in range(40):\n    step()\n"

    def case(kind: str, body: str, code: int, writes: bool) -> ProfilerCase:
        return ProfilerCase(Probe(f"profile: {kind}", run_, {"train.py": _TRAIN + body}), code, writes)

    return [
        case("a script that never steps", "print('no training')\n", 2, False),
        case("steps without calling a model", "for i in range(5):\n    opt.step()\n", 2, False),
        case("fewer steps than warm-up", "step()\n", 2, False),
        case("a bare except around the loop", "while True:\n    try:\n        step()\n    except:\n        pass\n", 0, True),
        case("except BaseException, then sleeps", "try:\n    " + loop.replace("\n    ", "\n        ")
             + "except BaseException:\n    import time\n    time.sleep(600)\n", 0, True),
        case("os._exit(3) while training", "for i in range(40):\n    step()\n    if i == 3:\n        os._exit(3)\n", 3, False),
        case("os._exit(0) after training", loop + "os._exit(0)\n", 0, True),
        case("changes folder first", "os.makedirs('sub', exist_ok=True)\nos.chdir('sub')\n" + loop, 0, True),
        case("a bf16 model", "net.to(torch.bfloat16)\nfor i in range(40):\n    net(torch.randn(4, 8, dtype=torch.bfloat16))"
             ".float().sum().backward()\n    opt.step()\n    opt.zero_grad()\n", 0, True),
        case("forks a child that trains and exits", "for i in range(40):\n    step()\n    if i == 1 and os.fork() == 0:\n"
             "        step()\n        os._exit(0)\n", 0, True),
        case("trains in a thread", "import threading\nt = threading.Thread(target=lambda: [step() for _ in range(40)])\n"
             "t.start()\nt.join()\n", 0, True),
        case("a multiprocessing pool", "import multiprocessing as mp\nif __name__ == '__main__':\n"
             "    with mp.get_context('spawn').Pool(2) as pool:\n        for i in range(40):\n"
             "            pool.map(abs, [1, -2])\n            step()\n", 0, True),
    ]


def judge_profiler_case(c: ProfilerCase, o: Outcome) -> bool:
    """Exit code as expected, no traceback, p.yaml written exactly when expected (and nothing else
    but the script's own folder), refusals with one Error: and To fix: line."""
    written = [w for w in o.written if w != "train.py"]
    if c.code == 2:
        return o.ok
    return o.code == c.code and not o.traceback and (written == ["p.yaml"]) == c.writes_profile


def run_profiler_section(k: str) -> list[Outcome]:
    """Run and print the profiler cases whose kind contains ``k``; return the failing outcomes."""
    chosen = [c for c in profiler_cases() if k in c.probe.kind]
    if not chosen:
        return []
    print("\n| # | profiled script | exit (expected) | first line | traceback | files written |\n|---|---|---|---|---|---|")
    bad = []
    for i, c in enumerate(chosen, 1):
        o = run(c.probe)
        ok = judge_profiler_case(c, o)
        if not ok:
            bad.append(o)
        print(f"| {i} | {c.probe.kind}{'' if ok else ' **FAIL**'} | {o.code} ({c.code}) | {o.first_line[:100].replace('|', '/')} | "
              f"{'yes' if o.traceback else 'no'} | {', '.join(o.written) or 'no'} |", flush=True)
    print(f"\n{len(chosen)} profiled scripts: {len(chosen) - len(bad)} as expected.")
    return bad
# ==== end of the `srift profile` section ==============================================================


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="Only kinds whose name contains this text.")
    ap.add_argument("--width", type=int, default=110, help="Characters of the first line shown.")
    args = ap.parse_args()
    chosen = [p for p in probes() if args.k in p.kind]
    print(f"| # | kind | exit | first line | traceback | files written |\n|---|---|---|---|---|---|")
    outcomes = []
    for i, probe in enumerate(chosen, 1):
        o = run(probe)
        outcomes.append(o)
        line = o.first_line if len(o.first_line) <= args.width else o.first_line[: args.width - 3] + "..."
        mark = "" if o.ok else " **FAIL**"
        print(f"| {i} | {o.kind}{mark} | {o.code} | {line.replace('|', '/')} | {'yes' if o.traceback else 'no'} | "
              f"{', '.join(o.written) or 'no'} |", flush=True)
    bad = [o for o in outcomes if not o.ok]
    print(f"\n{len(outcomes)} kinds of bad input: {sum(o.code == 2 for o in outcomes)} exit 2, "
          f"{sum(o.ok for o in outcomes)} with one Error: and one To fix: line, no traceback and nothing written; "
          f"{sum(o.traceback for o in outcomes)} tracebacks; {sum(bool(o.written) for o in outcomes)} wrote files; "
          f"{sum(o.seconds for o in outcomes):.0f} s.")
    bad += run_profiler_section(args.k)
    for o in bad:
        print(f"FAIL: {o.kind}: exit {o.code}, {o.first_line!r}, written {o.written}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

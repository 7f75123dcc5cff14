"""Probe srift's command line with bad input, as a careless user and an attacker would.

Each kind runs the real CLI (``python -m srift.cli``) in a fresh folder, with its own cache
folder and an ``outside`` folder beside them, and is judged on what the user sees: exit code 2,
exactly one ``Error:`` line and one ``To fix:`` line on stderr (besides ``Warning:`` lines and srift's
progress lines, ``PROGRESS``), no traceback, and nothing written,
changed or replaced anywhere under the probe's folder (regular files, links, device nodes, named
pipes and folders are compared by type, inode, device number, size and time). A few kinds are
not refusals (a hostile name that must render inert, a closed or ASCII-only stdout): those must
exit as expected, without a traceback, and show nothing they must not.

Categories: bad values and files; output targets that are not regular files (private device
nodes made with ``os.mknod``, named pipes, sockets, folders and links to them, in the probe's own
folder, never the real /dev), or the same file as an input; a hostile price-list mirror for
``catalog refresh`` (``file://`` URLs); YAML surprises (duplicate keys, YAML 1.1 numbers and
booleans); markdown and terminal injection; full disks (a private /dev/full as stdout, and a
file-size limit for files), too-long names, closed and ASCII-only stdout, a wrong SRIFT_HOME.
Run it as root (as CI containers run) to probe the device nodes; as another user they are skipped.
Prints a table (kind, exit code, first line, traceback, files written) and a summary; exits 1
when any kind falls short.

    python scripts/probe_bad_inputs.py            # every kind
    python scripts/probe_bad_inputs.py -k profile # kinds whose name contains "profile"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from srift.testing import price_list_csv, price_list_row  # noqa: E402
PROFILE = ROOT / "profiles" / "vgg16.yaml"
BILLION_LAUGHS = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
CLUSTER = "name: lab\nnode_groups:\n  - {count: 2, gpus_per_node: 4, gpu: V100-32GB, intra_node: nvlink, network_gbps: 25}\n"
JOB = "model: resnet50\nbatch_size: 32\nsteps: 1000\ninstance: p3.16xlarge:1\nlimits: {max_cost_usd: 100}\n"
HF = json.loads((ROOT / "tests" / "fixtures" / "hf_configs" / "Llama-3.2-1B.json").read_text(encoding="utf-8"))
# srift's progress lines on a standard error that is not a terminal (srift/profiling/step_lines.py,
# srift/report/progress.py): what a long run prints before its answer, not part of a refusal.
PROGRESS = re.compile(r"srift profile: step [0-9,]+ of [0-9,]+ \([a-z' :-]+\), [0-9,]+ s"
                      r"|Searching: [0-9,]+ simulations of at most [0-9,]+, [0-9,]+ s \(--quiet: no progress lines\)\.")
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
    expect: tuple[int, ...] = (2,)  # exit codes that pass; 2 means a refusal: one Error: and one To fix: line
    stdout: str | None = None  # a file in the folder to use as stdout (a private /dev/full), or "closed"
    fsize_bytes: int | None = None  # RLIMIT_FSIZE: writes beyond it fail (EFBIG), as on a full disk
    not_shown: tuple[str, ...] = ()  # text that must not reach stdout (an escape sequence, "<!--")
    says: str = ""  # text the Error: line must hold
    cache_files: dict[str, str] = field(default_factory=dict)  # files already in the cache folder
    keeps: str = ""  # the stdout file (opened to append) must still start with this afterwards: a log not truncated


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



def _device(name: str, minor: int) -> Callable[[Path], None]:
    """A private character device in the probe's folder (1:3 is a null device, 1:7 a full one)."""

    def make(folder: Path) -> None:
        os.mknod(folder / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))

    return make


def _socket(name: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(folder / name))
        sock.close()  # the socket file stays

    return make


def _link(name: str, to: str, make_target: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """``name`` -> ``to`` (relative to the folder; ``../outside/x`` leads out of it)."""

    def make(folder: Path) -> None:
        if make_target is not None:
            make_target(folder)
        (folder / name).symlink_to(to)

    return make


def _both(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        for step in steps:
            step(folder)

    return make


def _target_kinds(name: str) -> list[tuple[str, Callable[[Path], None] | None, bool]]:
    """(what, setup, needs root) of each kind of output target that is not a regular file."""
    return [
        ("a private null device", _device(name, 3), True),
        ("a private full device", _device(name, 7), True),
        ("a named pipe", lambda d: os.mkfifo(d / name), False),
        ("a socket", _socket(name), False),
        ("a folder", lambda d: (d / name).mkdir(), False),
        ("a link to a private device", _link(name, "dev-null", _device("dev-null", 3)), True),
        ("a link to a folder outside", _link(name, "../outside"), False),
        ("a link to a named pipe", _link(name, "fifo", lambda d: os.mkfifo(d / "fifo")), False),
        ("a dangling link", _link(name, "../outside/nothing-here"), False),
    ]


def _writers() -> list[tuple[str, list[str]]]:
    """Every command that writes a file, with OUT where the target goes."""
    predict = ["predict", "--model", "resnet50", "--instance", "p3.2xlarge"]
    return [
        ("predict --out-file", [*predict, "--format", "json", "--out-file", "OUT"]),
        ("predict --skypilot", [*predict, "--skypilot", "OUT"]),
        ("recommend --plot", ["recommend", "--model", "resnet50", "--budget", "20", "--max-gpus", "1", "--gpu", "T4", "--plot", "OUT"]),
        ("recommend --out-file", ["recommend", "--model", "resnet50", "--budget", "20", "--max-gpus", "1", "--gpu", "T4",
                                  "--out-file", "OUT"]),
        ("check --out-file", ["check", "job.yaml", "--out-file", "OUT"]),
        ("catalog list --out-file", ["catalog", "list", "--out-file", "OUT"]),
        ("calibrate comm -o", ["calibrate", "comm", "-o", "OUT"]),
        ("profile --model -o", ["profile", "--model", "gpt2", "-o", "OUT"]),
        ("profile SCRIPT -o", ["profile", "train.py", "-o", "OUT"]),
    ]


def _output_probes(root: bool) -> list[Probe]:
    out = []
    for writer, argv in _writers():
        for what, setup, needs_root in _target_kinds("out"):
            if needs_root and not root:
                continue
            out.append(Probe(f"{writer} into {what}", [a if a != "OUT" else "out" for a in argv],
                             {"job.yaml": JOB, "train.py": "print('hi')\n"}, setup=setup))
    same = {"check.yaml": JOB}
    out += [
        Probe("check srift.yaml --out-file srift.yaml (its own input)", ["check", "srift.yaml", "--out-file", "srift.yaml"],
              {"srift.yaml": JOB}, says="same file as the input"),
        Probe("check --out-file over its --compare-to baseline", ["check", "check.yaml", "--compare-to", "b.json", "--out-file", "b.json"],
              {**same, "b.json": json.dumps(BASELINE)}, says="same file as the input"),
        Probe("check --out-file over the job's profile", ["check", "j.yaml", "--out-file", "p.yaml"],
              {"j.yaml": JOB.replace("model: resnet50", "profile: p.yaml"), "p.yaml": PROFILE.read_text(encoding="utf-8")},
              says="same file as the input"),
        Probe("predict --out-file over its --profile", ["predict", "--instance", "p3.2xlarge", "--profile", "p.yaml", "--out-file", "p.yaml"],
              {"p.yaml": PROFILE.read_text(encoding="utf-8")}, says="same file as the input"),
        Probe("predict --skypilot over its --cluster, through a link", ["predict", "--model", "resnet50", "--cluster", "c.yaml",
                                                                         "--skypilot", "sky.yaml"],
              {"c.yaml": CLUSTER}, setup=_link("sky.yaml", "c.yaml"), says="symbolic link"),
        Probe("profile SCRIPT -o SCRIPT", ["profile", "train.py", "-o", "train.py"], {"train.py": "print('hi')\n"},
              says="same file as the input"),
        Probe("predict --out-file and --skypilot on one file", ["predict", "--model", "resnet50", "--instance", "p3.2xlarge",
                                                                "--out-file", "x", "--skypilot", "x"], says="both write"),
        Probe("predict --out-file with a 300-character name", ["predict", "--model", "resnet50", "--instance", "p3.2xlarge",
                                                               "--out-file", "a" * 300 + ".json"], says="File name too long"),
        Probe("predict --out-file on a full disk (file size limit)", ["predict", "--model", "resnet50", "--instance", "p3.2xlarge",
                                                                      "--out-file", "p.json"], fsize_bytes=100, says="p.json"),
        Probe("predict --out-file over a file on a full disk (the old file stays)",
              ["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--out-file", "p.json"], {"p.json": "keep me\n"},
              fsize_bytes=100),
        Probe("examples on a full disk (no partial copy)", ["examples", "ex"], fsize_bytes=2000),
        Probe("examples through a link out of the folder", ["examples", "ex"], setup=_both(lambda d: (d / "ex").mkdir(),
                                                                                          _link("ex/examples", "../../outside")),
              says="leads out of"),
        Probe("examples --force over a named pipe", ["examples", "ex", "--force"],
              setup=_both(lambda d: (d / "ex" / "examples").mkdir(parents=True), lambda d: os.mkfifo(d / "ex" / "examples" / "train_ddp.py"))),
    ]
    if root:
        out += [
            Probe("examples --force over a private device", ["examples", "ex", "--force"],
                  setup=_both(lambda d: (d / "ex" / "examples").mkdir(parents=True), _device("ex/examples/train_ddp.py", 3))),
            Probe("check with stdout on a private full device", ["check", "job.yaml"], {"job.yaml": JOB}, stdout="full",
                  setup=_device("full", 7), says="No space left on device"),
            Probe("catalog list with stdout on a private full device", ["catalog", "list"], stdout="full", setup=_device("full", 7),
                  says="No space left on device"),
            Probe("check over its limit with stdout on a private full device (was exit 120)", ["check", "job.yaml"],
                  {"job.yaml": JOB.replace("max_cost_usd: 100", "max_cost_usd: 0.01").replace("steps: 1000", "steps: 100000000")},
                  stdout="full", setup=_device("full", 7), says="No space left on device"),
        ]
    return out


def _mirror(index: object | bytes, advisor: object | bytes | None = None,
            offers: dict[str, bytes] | None = None) -> tuple[Callable[[Path], None], dict[str, str]]:
    """A price-list mirror in the probe's folder (file:// URLs), and the environment that points at it."""

    def make(folder: Path) -> None:
        base = folder / "mirror" / "offers" / "v1.0" / "aws" / "AmazonEC2" / "current"
        base.mkdir(parents=True)
        (base / "region_index.json").write_bytes(index if isinstance(index, bytes) else json.dumps(index).encode())
        adv = advisor if advisor is not None else {"ranges": [{"index": 0, "label": "<5%"}], "spot_advisor": {}}
        (folder / "mirror" / "advisor.json").write_bytes(adv if isinstance(adv, bytes) else json.dumps(adv).encode())
        for region, body in (offers or {}).items():
            (base / region).mkdir(parents=True, exist_ok=True)
            (base / region / "index.csv").write_bytes(body)

    return make, {"SRIFT_AWS_PRICE_LIST_URL": "file://MIRROR", "SRIFT_AWS_SPOT_ADVISOR_URL": "file://MIRROR/advisor.json"}


def _offer(price: str, itype: str = "g5.xlarge") -> bytes:
    return price_list_csv([price_list_row("S", itype, price)])


def _refresh_probes() -> list[Probe]:
    out = []
    cases: list[tuple[str, object, object | None, dict[str, bytes] | None]] = [
        ("region index names ../../escaped", {"regions": {"us-west-2": {}, "../../escaped": {}}}, None, {"us-west-2": _offer("1.0")}),
        ("region index names an absolute path", {"regions": {"/tmp/srift-probe-abs": {}}}, None, None),
        ("region index names a region with a newline", {"regions": {"us-west-2\n": {}}}, None, None),
        ("region index of 10,000 regions", {"regions": {f"xx-east-{i}": {} for i in range(10_000)}}, None, None),
        ("region index is a list", [1, 2], None, None),
        ("region index is not JSON", b"{oops", None, None),
        ("region index with NaN", b'{"regions": NaN}', None, None),
        ("spot advisor saving is text", {"regions": {"us-west-2": {}}},
         {"ranges": [{"label": "<5%"}], "spot_advisor": {"us-west-2": {"Linux": {"g5.xlarge": {"s": "x", "r": 0}}}}}, None),
        ("spot advisor OS entry is a list", {"regions": {"us-west-2": {}}},
         {"ranges": [{"label": "<5%"}], "spot_advisor": {"us-west-2": ["Linux"]}}, None),
        ("spot advisor saving of 250 %", {"regions": {"us-west-2": {}}},
         {"ranges": [{"label": "<5%"}], "spot_advisor": {"us-west-2": {"Linux": {"g5.xlarge": {"s": 250, "r": 0}}}}}, None),
        ("price list price $1,000,000/h", {"regions": {"us-west-2": {}}}, None, {"us-west-2": _offer("1000000")}),
        ("price list is JSON, not CSV", {"regions": {"us-west-2": {}}}, None,
         {"us-west-2": b'{"products": {"S": [1]}, "terms": {"OnDemand": {"S": 5}}}'}),
        ("price list with a 20 MB line", {"regions": {"us-west-2": {}}}, None,
         {"us-west-2": b'{"products": {"S": {"attributes": {"instanceType": "' + b"a" * (20 << 20) + b'"}}}}'}),
        ("price list cut off", {"regions": {"us-west-2": {}}}, None, {"us-west-2": _offer("1.0")[:60]}),
        # (one region unreachable, the others written, exit 1: tests/test_catalog_refresh.py)
        ("every region's price list unreachable", {"regions": {"us-west-2": {}, "us-east-2": {}}}, None, {}),
    ]
    for what, index, advisor, offers in cases:
        setup, env = _mirror(index, advisor, offers)
        # A refreshed region already in the cache must survive every failed refresh.
        out.append(Probe(f"catalog refresh: {what}", ["catalog", "refresh", "--infra", "aws"], setup=setup, env=env,
                         cache_files={"catalog/aws/us-west-2.csv": "a good refreshed cache\n"}))
    return out


def _yaml_probes() -> list[Probe]:
    prof = PROFILE.read_text(encoding="utf-8")
    return [
        Probe("job file: a limit given twice (last would win)", ["check", "job.yaml"],
              {"job.yaml": JOB.replace("limits: {max_cost_usd: 100}", "limits: {max_cost_usd: 0.5, max_cost_usd: 1000000}")},
              says="twice"),
        Probe("job file: a key given twice on two lines", ["check", "job.yaml"], {"job.yaml": JOB + "steps: 5\n"},
              says="at lines 3 and 6"),
        Probe("job file: max_hours 1:30 (YAML 1.1: 90)", ["check", "job.yaml"],
              {"job.yaml": JOB.replace("limits: {max_cost_usd: 100}", "limits: {max_hours: 1:30}")}, says="line 5"),
        Probe("job file: steps 1:00:00 (YAML 1.1: 3600)", ["check", "job.yaml"], {"job.yaml": JOB.replace("steps: 1000", "steps: 1:00:00")},
              says="line 3"),
        Probe("job file: batch_size 032 (YAML 1.1: 26)", ["check", "job.yaml"], {"job.yaml": JOB.replace("batch_size: 32", "batch_size: 032")},
              says="line 2"),
        Probe("job file: spot: yes", ["check", "job.yaml"], {"job.yaml": JOB + "spot: yes\n"}, says="line 6"),
        Probe("job file: spot: off", ["check", "job.yaml"], {"job.yaml": JOB + "spot: off\n"}, says="line 6"),
        Probe("cluster file: a key given twice", ["predict", "--model", "resnet50", "--cluster", "c.yaml"],
              {"c.yaml": CLUSTER.replace("count: 2,", "count: 2, count: 200,")}, says="twice"),
        Probe("cluster file: count 010 (YAML 1.1: 8)", ["predict", "--model", "resnet50", "--cluster", "c.yaml"],
              {"c.yaml": CLUSTER.replace("count: 2,", "count: 010,")}, says="line 3"),
        Probe("profile: a key given twice", ["predict", "--instance", "p3.16xlarge:1", "--profile", "p.yaml"],
              {"p.yaml": prof + "batch_size: 1\n"}, says="twice"),
        Probe("profile: 25,001 layers (MAX_LAYERS, not the YAML bound)", ["predict", "--instance", "p3.16xlarge:1", "--profile", "p.yaml"],
              {"p.yaml": _profile_with(layers=[{"name": "l", "type": "Linear"}] * 25_001)},
              says="25,001 entries"),
        Probe("--compare-to: a key given twice (JSON)", ["check", "job.yaml", "--compare-to", "b.json"],
              {"job.yaml": JOB, "b.json": json.dumps(BASELINE)[:-1] + ', "predicted_cost_usd": 1e6}'}, says="twice"),
    ]


def _rendering_probes() -> list[Probe]:
    evil = "evil <!-- @everyone \x1b]0;pwned\x07 | x"
    prof = _profile_with(name="evil <!-- @everyone | x")
    hf = json.dumps({**HF, "_name_or_path": "\x1b[2J\x1b]0;pwned\x07<!--" + "x" * 1_000_000})
    job = JOB.replace("model: resnet50", "profile: p.yaml")
    return [
        Probe("check --format markdown: profile name with <!-- and @everyone", ["check", "job.yaml", "--format", "markdown"],
              {"job.yaml": job, "p.yaml": prof}, expect=(0, 1), not_shown=("<!--", "@everyone")),
        Probe("predict --format markdown: profile name with <!-- and @everyone",
              ["predict", "--instance", "p3.2xlarge", "--profile", "p.yaml", "--format", "markdown"], {"p.yaml": prof},
              expect=(0,), not_shown=("<!--", "@everyone")),
        Probe("predict: HF _name_or_path of 1 MB with terminal escapes", ["predict", "--model-config", "c.json", "--instance",
                                                                          "p4d.24xlarge"], {"c.json": hf}, expect=(0,),
              not_shown=("\x1b", "\x07", "x" * 1000)),
        Probe("recommend --format markdown: HF _name_or_path of 1 MB", ["recommend", "--model-config", "c.json", "--budget", "40",
                                                                        "--max-gpus", "8", "--format", "markdown"],
              {"c.json": hf}, expect=(0,), not_shown=("\x1b", "<!--", "x" * 1000)),
        Probe("profile name with an escape sequence (refused)", ["predict", "--instance", "p3.2xlarge", "--profile", "p.yaml"],
              {"p.yaml": _profile_with(name=evil)}),
    ]


def _environment_probes() -> list[Probe]:
    predict = ["predict", "--model", "resnet50", "--instance", "p3.2xlarge"]
    return [
        Probe("--version with stdout closed", ["--version"], stdout="closed", expect=(0,)),
        Probe("catalog list with stdout closed", ["catalog", "list"], stdout="closed", expect=(0,)),
        Probe("predict on an ASCII-only stdout", predict, env={"PYTHONIOENCODING": "ascii"}, expect=(0,)),
        Probe("check on a latin-1 stdout", ["check", "job.yaml", "--format", "markdown"], {"job.yaml": JOB},
              env={"PYTHONIOENCODING": "latin-1"}, expect=(0, 1)),
        Probe("--version with SRIFT_HOME missing", ["--version"], env={"SRIFT_HOME": "/nonexistent/srift"}, expect=(0,)),
        Probe("predict with SRIFT_HOME missing", predict, env={"SRIFT_HOME": "/nonexistent/srift"}, says="SRIFT_HOME"),
        Probe("predict with SRIFT_HOME a file", predict, env={"SRIFT_HOME": "/etc/hostname"}, says="SRIFT_HOME"),
        Probe("predict with SRIFT_HOME of 5,000 characters", predict, env={"SRIFT_HOME": "a" * 5000}, says="SRIFT_HOME"),
        Probe("predict with SRIFT_HOME an empty folder", predict, env={"SRIFT_HOME": "HOME_DIR"},
              setup=lambda d: (d / "home").mkdir(), says="SRIFT_HOME"),
        Probe("predict --global-batch-size 31 on 16 GPUs", ["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2",
                                                            "--global-batch-size", "31"], says="does not divide"),
        Probe("predict --global-batch-size 62 --grad-accum 2 on 16 GPUs",
              ["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2", "--global-batch-size", "62", "--grad-accum", "2"],
              says="does not divide"),
        Probe("calibrate comm --sizes of 5,000 sizes", ["calibrate", "comm", "--sizes", ",".join(str(8 + i) for i in range(5000))]),
        Probe("calibrate comm --sizes of 1 TB", ["calibrate", "comm", "--sizes", "1024,1000000000000"]),
        Probe("calibrate comm --sizes repeated", ["calibrate", "comm", "--sizes", "1024,1024"]),
        Probe("calibrate comm --reps 10^8", ["calibrate", "comm", "--reps", "100000000"]),
        Probe("calibrate comm --nproc 100000", ["calibrate", "comm", "--nproc", "100000"]),
        Probe("calibrate comm --nproc 1", ["calibrate", "comm", "--nproc", "1"]),
        Probe("calibrate comm --nproc -3", ["calibrate", "comm", "--nproc", "-3"]),
    ]


def _issue45_probes() -> list[Probe]:
    """Issue 45: streams and links as outputs, numbers as text, injection into what srift generates,
    settings that cannot apply, oversized inputs, a refresh with nothing usable."""
    predict = ["predict", "--model", "resnet50", "--instance", "p3.2xlarge"]
    log = "an earlier line of the build log\n"
    big_job = "model: resnet50\nsteps: 10\n" + "".join(f"unknown_key_{i}: {i}\n" for i in range(400_000))  # 10 MB
    layout = ["predict", "--model", "llama3-8b", "--instance", "p4d.24xlarge", "--layout"]
    ds = json.loads((ROOT / "tests" / "fixtures" / "hf_configs" / "DeepSeek-V3.json").read_text(encoding="utf-8"))
    inf_setup, inf_env = _mirror({"regions": {"us-west-2": {}}}, None, {"us-west-2": _offer("Infinity")})
    job_layout = JOB.replace("model: resnet50", "model: llama3-8b").replace("batch_size: 32\n", "").replace("p3.16xlarge", "p4d.24xlarge")
    loop = _both(_link("l1", "l2"), _link("l2", "l1"))
    return [
        Probe("predict --out-file /dev/stdout >> build.log (appended, not replaced)", [*predict, "--out-file", "/dev/stdout"],
              {"build.log": log}, stdout="build.log", keeps=log, expect=(0,)),
        Probe("predict --out-file /proc/self/fd/1 >> build.log", [*predict, "--out-file", "/proc/self/fd/1"],
              {"build.log": log}, stdout="build.log", keeps=log, expect=(0,)),
        Probe("predict --skypilot /dev/stdout >> build.log", [*predict, "--skypilot", "/dev/stdout"],
              {"build.log": log}, stdout="build.log", keeps=log, expect=(0,)),
        Probe("predict --out-file /dev/fd/9 (not open)", [*predict, "--out-file", "/dev/fd/9"], says="not open"),
        Probe("predict --out-file through a link to a file outside", [*predict, "--out-file", "pr.json"],
              setup=_both(lambda d: (d.parent / "outside" / "bashrc").write_text("keep\n"), _link("pr.json", "../outside/bashrc")),
              says="symbolic link"),
        Probe("predict --out-file over a file with another hard link", [*predict, "--out-file", "a.json"], {"a.json": "{}\n"},
              setup=lambda d: os.link(d / "a.json", d.parent / "outside" / "b.json"), says="hard link"),
        Probe("predict --layout tp=² (a superscript digit)", [*layout, "tp=²"], says="whole number"),
        Probe("predict --layout with a 5,000-digit degree", [*layout, "tp=" + "1" * 5000], says="5,000 characters"),
        Probe("predict --instance p3.2xlarge:٣ (an Arabic-Indic digit)", ["predict", "--model", "resnet50", "--instance",
                                                                       "p3.2xlarge:٣"], says="whole number"),
        Probe("check: layout tp=² in the job file (exit 2, not 1)", ["check", "job.yaml"],
              {"job.yaml": job_layout + 'layout: "tp=²"\n'}, says="whole number"),
        Probe("check: SRIFT_LAYOUT of 1,000 digits", ["check", "job.yaml"], {"job.yaml": job_layout},
              env={"SRIFT_LAYOUT": "tp=" + "9" * 1000}, says="characters long"),
        Probe("check: SRIFT_BATCH_SIZE in full-width digits", ["check", "job.yaml"], {"job.yaml": JOB},
              env={"SRIFT_BATCH_SIZE": "３２"}, says="must be a number"),
        Probe("recommend --plot - with $\\frac{$ in the profile name", ["recommend", "--profile", "p.yaml", "--budget", "20",
                                                                      "--max-gpus", "1", "--gpu", "T4", "--plot", "-"],
              {"p.yaml": _profile_with(name="x$\\frac{$y")}, expect=(0,)),
        Probe("predict --model with terminal escapes (Error: line inert)", ["predict", "--model", "\x1b[2J\x1b]0;pwned\x07x",
                                                                          "--instance", "p3.2xlarge"], not_shown=("\x1b", "\x07")),
        Probe("predict --infra with terminal escapes", [*predict, "--infra", "\x1b[31maws"], not_shown=("\x1b",)),
        Probe("examples --ref with a shell command", ["examples", "ex", "--repo", "https://github.com/x/srift", "--ref",
                                                      "v1*) touch pwned ;; *zz"], says="--ref"),
        Probe("examples --repo with a newline (a YAML key)", ["examples", "ex", "--repo", "https://github.com/x/srift\nfoo: bar",
                                                               "--ref", "v1"], says="--repo"),
        Probe("examples into a loop of symbolic links", ["examples", "l1"], setup=loop, says="loop of symbolic links"),
        Probe("catalog refresh: every price infinite (was exit 0, 0 rows)", ["catalog", "refresh", "--infra", "aws"],
              setup=inf_setup, env=inf_env, says="no usable"),
        Probe("predict --virtual-stages 2 with pp=1", [*layout, "tp=2,pp=1", "--virtual-stages", "2"], says="pp=1"),
        Probe("predict --moe-imbalance 60 with ep=8", ["predict", "--model", "mixtral-8x7b", "--instance", "p4d.24xlarge:2",
                                                       "--layout", "tp=1,ep=8", "--moe-imbalance", "60"], says="ep=8"),
        Probe("predict: first_k_dense_replace above the layers", ["predict", "--model-config", "c.json", "--instance",
                                                                  "p5.48xlarge:4"],
              {"c.json": json.dumps({**ds, "first_k_dense_replace": 99})}, says="first_k_dense_replace"),
        Probe("predict --lora-rank without --finetune", ["predict", "--model", "llama3-8b", "--instance", "p4d.24xlarge",
                                                         "--lora-rank", "8"], says="--lora-rank"),
        Probe("predict --precision bf16 on a T4", ["predict", "--model", "llama3.2-1b", "--instance", "g4dn.xlarge",
                                                    "--precision", "bf16"], says="no bf16"),
        Probe("predict --finetune lora on a T4 (bf16 by default)", ["predict", "--model", "llama3.2-1b", "--instance",
                                                                      "g4dn.xlarge", "--finetune", "lora"], says="no bf16"),
        Probe("check: a 10 MB job file of unknown keys (refused at once)", ["check", "job.yaml"], {"job.yaml": big_job}, says="MiB"),
        Probe("predict: a 19 MB profile (refused at once)", ["predict", "--instance", "p3.2xlarge", "--profile", "p.yaml"],
              {"p.yaml": "# " + "x" * (19 << 20) + "\n"}, says="MiB"),
    ]


def _new_surface_probes() -> list[Probe]:
    """Numbers typed as text and options that cannot apply on the surfaces added after issue 45:
    --grad-compression, --stack, --lengths-file, --moe-imbalance, profile --timeout, environment."""
    ddp = ["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2"]
    train = {"train.py": "print('hi')\n"}
    llm = ["predict", "--model", "llama3-8b", "--instance", "p4d.24xlarge"]
    return [
        Probe("predict --grad-compression powersgd:² (was a traceback)", [*ddp, "--grad-compression", "powersgd:²"], says="got '²'"),
        Probe("predict --grad-compression powersgd:٣ (int() reads 3)", [*ddp, "--grad-compression", "powersgd:٣"], says="got '٣'"),
        Probe("predict --grad-compression powersgd: (no rank)", [*ddp, "--grad-compression", "powersgd:"], says="got ''"),
        Probe("check: grad_compression powersgd:² in the job file (exit 2, not 1)", ["check", "job.yaml"],
              {"job.yaml": JOB + 'grad_compression: "powersgd:²"\n'}, says="got '²'"),
        Probe("check: stack is a list", ["check", "job.yaml"], {"job.yaml": JOB + "stack: [pytorch]\n"}, says="'stack'"),
        Probe("check: SRIFT_STACK with terminal escapes", ["check", "job.yaml"], {"job.yaml": JOB},
              env={"SRIFT_STACK": "\x1b]0;pwned\x07pytorch"}, not_shown=("\x1b", "\x07"), says="'stack'"),
        Probe("predict --stack with terminal escapes", [*ddp, "--stack", "\x1b[31mpytorch"], not_shown=("\x1b",), says="training stack"),
        Probe("predict --optimizer KFAC (case)", [*ddp, "--optimizer", "KFAC"], says="unknown optimizer"),
        Probe("predict --varlen-attention without packing", [*llm, "--varlen-attention"], says="--varlen-attention"),
        Probe("predict --lengths-file with a superscript digit", [*llm, "--packed", "--lengths-file", "len.txt"],
              {"len.txt": "100\n²\n"}, says="not a positive integer"),
        Probe("predict --moe-imbalance on a dense model", [*llm, "--layout", "auto", "--moe-imbalance", "3"], says="dense model"),
        Probe("predict --moe-imbalance with ep=1", ["predict", "--model", "mixtral-8x7b", "--instance", "p4d.24xlarge:8",
                                                    "--layout", "tp=2,pp=4", "--moe-imbalance", "3"], says="has ep=1"),
        Probe("predict SRIFT_SPOT_INTERRUPTIONS_PER_HOUR=٠ (float() reads 0)", [*ddp, "--spot"],
              env={"SRIFT_SPOT_INTERRUPTIONS_PER_HOUR": "٠"}, says="SRIFT_SPOT_INTERRUPTIONS_PER_HOUR"),
        Probe("calibrate comm with WORLD_SIZE=² (was a traceback)", ["calibrate", "comm"], env={"WORLD_SIZE": "²", "RANK": "0"},
              says="WORLD_SIZE"),
        Probe("predict with COLUMNS=² (rich read it: a traceback)", ddp, env={"COLUMNS": "²"}, expect=(0,)),
        Probe("profile --timeout 1e999", ["profile", "train.py", "--timeout", "1e999"], train, says="finite"),
        Probe("profile --timeout nan", ["profile", "train.py", "--timeout", "nan"], train, says="finite"),
        Probe("profile --timeout ٣", ["profile", "train.py", "--timeout", "٣"], train, says="--timeout"),
    ]


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
    out += _output_probes(os.geteuid() == 0)
    out += _refresh_probes() + _yaml_probes() + _rendering_probes() + _environment_probes() + _issue45_probes()
    out += _new_surface_probes()
    return out


def _snapshot(root: Path) -> dict[str, tuple[int, ...]]:
    """Every entry under ``root`` by its lstat: type and inode for all (a device or a pipe replaced
    by a file shows), size and time for files and links (folders' times change with any temporary
    file made and removed inside them, which leaves nothing behind)."""
    out: dict[str, tuple[int, ...]] = {}
    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        if stat.S_ISDIR(st.st_mode):
            out[str(p)] = (st.st_mode, st.st_ino)
        else:
            out[str(p)] = (st.st_mode, st.st_ino, st.st_rdev, st.st_size, st.st_mtime_ns)
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


def _preexec(probe: Probe) -> Callable[[], None] | None:
    if probe.stdout != "closed" and probe.fsize_bytes is None:
        return None

    def child() -> None:
        if probe.fsize_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as on a full disk
            resource.setrlimit(resource.RLIMIT_FSIZE, (probe.fsize_bytes, probe.fsize_bytes))
        if probe.stdout == "closed":
            os.close(1)

    return child


def run(probe: Probe, timeout_s: float = 180.0) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="srift-probe-") as tmp:
        root = Path(tmp)
        folder, cache = root / "work", root / "cache"
        for d in (folder, cache, root / "outside"):
            d.mkdir()
        for base, files in ((folder, probe.files), (cache, probe.cache_files)):
            for name, content in files.items():
                path = base / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content, encoding="utf-8")
        if probe.setup:
            probe.setup(folder)
        before = _snapshot(root)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SRIFT_", "AWS_"))}
        env.update(SRIFT_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), AWS_EC2_METADATA_DISABLED="true",
                   AWS_SHARED_CREDENTIALS_FILE=str(root / "no-credentials"), AWS_CONFIG_FILE=str(root / "no-config"))
        env.update({k: v.replace("file://MIRROR", f"file://{folder / 'mirror'}").replace("HOME_DIR", str(folder / "home"))
                    for k, v in probe.env.items()})
        t0 = time.perf_counter()
        mode = "a" if probe.keeps else "w"
        stdout_file = open(folder / probe.stdout, mode) if probe.stdout not in (None, "closed") else None  # noqa: SIM115
        try:
            res = subprocess.run([sys.executable, "-m", "srift.cli", *probe.argv], cwd=folder, env=env, text=True,
                                 stdout=stdout_file or subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s,
                                 stdin=subprocess.DEVNULL, preexec_fn=_preexec(probe), errors="replace")
            code, out, err = res.returncode, res.stdout or "", res.stderr
        except subprocess.TimeoutExpired:
            code, out, err = -1, "", f"(no answer within {timeout_s:g} s)"
        finally:
            if stdout_file is not None:
                try:
                    stdout_file.close()
                except OSError:
                    pass
        secs = time.perf_counter() - t0
        after = _snapshot(root)
        written = sorted(str(Path(p).relative_to(root)) for p in set(before) | set(after) if before.get(p) != after.get(p))
        if probe.stdout not in (None, "closed"):
            written = [w for w in written if w != f"work/{probe.stdout}"]  # the stdout device itself is written to, not replaced
            written += [f"work/{probe.stdout} (replaced)"] if before.get(str(folder / probe.stdout), ())[:3] != \
                after.get(str(folder / probe.stdout), ())[:3] else []
        lines = [l for l in err.strip().splitlines() if not l.startswith("Warning: ") and not PROGRESS.fullmatch(l)]
        tb = "Traceback" in err
        if 2 in probe.expect:
            one_each = (len(lines) == 2 and lines[0].startswith("Error: ") and lines[1].startswith("To fix: "))
            ok = code == 2 and one_each and probe.says in (lines[0] if lines else "") and not any(t in err for t in probe.not_shown)
        else:
            ok = code in probe.expect and not any(t in out for t in probe.not_shown)
        if probe.keeps:  # a stream path appends to the log standard output is redirected to
            ok = ok and (folder / str(probe.stdout)).read_text(encoding="utf-8", errors="replace").startswith(probe.keeps)
        ok = ok and not tb and not written
        return Outcome(probe.kind, code, lines[0] if lines else "", tb, written, ok, secs)


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
    """Exit code as expected, no traceback, p.yaml written exactly when expected and nothing written
    outside the script's folder (what the script itself makes there is its own), refusals with one
    Error: and To fix: line."""
    if c.code == 2:
        return o.ok
    inside = all(w == "work" or w.startswith("work/") for w in o.written)
    return o.code == c.code and not o.traceback and inside and ("work/p.yaml" in o.written) == c.writes_profile


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
    ap.add_argument("-j", type=int, default=1, help="Kinds run at once.")
    ap.add_argument("--width", type=int, default=110, help="Characters of the first line shown.")
    args = ap.parse_args()
    chosen = [p for p in probes() if args.k in p.kind]
    print("| # | kind | exit | first line | traceback | files written |\n|---|---|---|---|---|---|")
    from concurrent.futures import ThreadPoolExecutor

    outcomes = []
    with ThreadPoolExecutor(max_workers=max(1, args.j)) as pool:
        for i, o in enumerate(pool.map(run, chosen), 1):
            outcomes.append(o)
            line = o.first_line if len(o.first_line) <= args.width else o.first_line[: args.width - 3] + "..."
            mark = "" if o.ok else " **FAIL**"
            print(f"| {i} | {o.kind.replace('|', '/')}{mark} | {o.code} | {line.replace('|', '/')} | {'yes' if o.traceback else 'no'} | "
                  f"{', '.join(o.written) or 'no'} |", flush=True)
    bad = [o for o in outcomes if not o.ok]
    refusals = [o for o, p in zip(outcomes, chosen) if 2 in p.expect]
    outside = sum(any(not w.startswith("work/") for w in o.written) for o in outcomes)
    print(f"\n{len(outcomes)} kinds of bad input ({len(refusals)} to refuse, {len(outcomes) - len(refusals)} to run unharmed): "
          f"{sum(o.ok for o in outcomes)} as expected; refusals: {sum(o.code == 2 for o in refusals)} exit 2, "
          f"{sum(o.ok for o in refusals)} with one Error: and one To fix: line; {sum(o.traceback for o in outcomes)} tracebacks; "
          f"{sum(bool(o.written) for o in outcomes)} changed, replaced or destroyed a file; {outside} wrote outside their folder; "
          f"{sum(o.seconds for o in outcomes):.0f} s.")
    bad += run_profiler_section(args.k)
    for o in bad:
        print(f"FAIL: {o.kind!r}: exit {o.code}, {o.first_line!r}, written {o.written}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Crash safety and a bounded profiler, through real processes.

* SIGKILL: `srift profile` and `srift catalog refresh` (against a local, throttled fake of AWS's
  price list) are killed at random moments and at two injected points around the rename that
  publishes a file; the profile and every cached region are then the old file or the complete
  new one, never a part, and the next run works. ``SRIFT_KILL_ROUNDS`` repeats each test
  (default 1; `SRIFT_KILL_ROUNDS=20 python -m pytest -m slow tests/test_crash_safety.py` is the
  20-in-a-row run quoted in docs/limits.md).
* --timeout: a script that never steps, one that blocks, one whose DataLoader workers block and
  one that swallows the interruption all end with the error saying what was seen; no profile is
  written and no process of theirs is left.
"""

from __future__ import annotations

import http.server
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from srift.catalog.instances import parse_rows
from srift.profile import Profile
from srift.testing import price_list_csv, price_list_row

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = int(os.environ.get("SRIFT_KILL_ROUNDS", "1"))
RANDOM_KILLS = 3  # per round, besides the two injected crash points

TRAIN = textwrap.dedent("""\
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(1000):
        model(torch.randn(16, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
    """)

# Loaded by the child through PYTHONPATH: SIGKILL itself just before, or just after, the rename
# (os.replace or os.link) that publishes a file whose name ends with SRIFT_CRASH_TARGET.
SITECUSTOMIZE = textwrap.dedent("""\
    import os, signal
    _at, _target = os.environ.get("SRIFT_CRASH_AT"), os.environ.get("SRIFT_CRASH_TARGET", "")

    def _wrap(real):
        def publish(src, dst, *args, **kwargs):
            if not str(dst).endswith(_target):
                return real(src, dst, *args, **kwargs)
            if _at == "before-rename":
                os.kill(os.getpid(), signal.SIGKILL)
            out = real(src, dst, *args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
            return out
        return publish

    if _at:
        os.replace, os.link = _wrap(os.replace), _wrap(os.link)
    """)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SRIFT_"))}
    env.update(AWS_EC2_METADATA_DISABLED="true", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
               AWS_CONFIG_FILE="/nonexistent", **extra)
    return env


def _start(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "srift.cli", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _run_killed(args: list[str], cwd: Path, env: dict[str, str], delay_s: float | None) -> int:
    """Run srift; SIGKILL it after ``delay_s`` (None: let it finish); its exit code (-9 when killed)."""
    proc = _start(args, cwd, env)
    if delay_s is not None:
        try:
            proc.wait(timeout=delay_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its whole session: nothing it started outlives it
    proc.communicate(timeout=120)
    return proc.returncode


def _crash_env(tmp: Path, at: str, target: str, **extra: str) -> dict[str, str]:
    hooks = tmp / "crash_hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    return _env(PYTHONPATH=os.pathsep.join([str(hooks), str(ROOT)]), SRIFT_CRASH_AT=at, SRIFT_CRASH_TARGET=target, **extra)


# ---- srift profile --------------------------------------------------------------------------------
def _complete_profile(path: Path) -> bytes:
    """The file's bytes, after checking it is a whole profile of the run asked for."""
    data = path.read_bytes()
    prof = Profile.load(path)
    assert prof.iterations == 3 and len(prof.layers) == 3 and data.endswith(b"\n")
    return data


def test_sigkill_during_profile_leaves_the_old_or_the_new_profile(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("SRIFT_KILL_SEED", str(time.time_ns()))))
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    args = ["profile", "train.py", "-o", "out.yaml", "--warmup", "1", "--iters", "3"]
    t0 = time.perf_counter()
    assert _run_killed(args, tmp_path, _env(), None) == 0
    full_s = time.perf_counter() - t0
    out = tmp_path / "out.yaml"
    before = _complete_profile(out)
    assert _run_killed(args, tmp_path, _env(), None) == 2  # it exists: not replaced without --force
    assert out.read_bytes() == before
    args.append("--force")
    for _ in range(ROUNDS):
        for delay in [rng.uniform(0.1, full_s * 1.1) for _ in range(RANDOM_KILLS)]:
            _run_killed(args, tmp_path, _env(), delay)
            now = out.read_bytes()
            assert now == before or _complete_profile(out), f"partial profile after a kill at {delay:.2f} s"
            before = now
        assert _run_killed(args, tmp_path, _crash_env(tmp_path, "before-rename", "out.yaml"), None) == -signal.SIGKILL
        assert out.read_bytes() == before  # the new profile was complete but not published: the old one stays
        assert _run_killed(args, tmp_path, _crash_env(tmp_path, "after-rename", "out.yaml"), None) == -signal.SIGKILL
        before = _complete_profile(out)  # published whole
        assert _run_killed(args, tmp_path, _env(), None) == 0  # the next run works
        before = _complete_profile(out)


# ---- srift catalog refresh ------------------------------------------------------------------------
REGIONS = ("us-east-1", "us-west-2", "eu-west-1")


def _offer_file(region: str, version: int, types: list[str]) -> bytes:
    """A region's EC2 price list CSV (AWS's format): every GPU type of the catalog at a price that
    says which version served it, and filler rows so that streaming it takes a while."""
    names = types + [f"m9.filler{i}" for i in range(3000)]
    return price_list_csv([price_list_row(f"SKU{i:05d}", itype, (1.0 + i % 7) * (1.0 + version / 100.0), region)
                           for i, itype in enumerate(names)])


class _FakeAws(http.server.ThreadingHTTPServer):
    """AWS's price list (region index, price list CSVs) and the Spot Advisor file, sent in throttled
    chunks; ``version`` sets the prices of the price lists it serves."""

    BASE = "/offers/v1.0/aws/AmazonEC2/current"

    def __init__(self, types: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.types = types
        self.version = 1
        self._offers: dict[tuple[str, int], bytes] = {}

    def body(self, path: str) -> bytes | None:
        if path == f"{self.BASE}/region_index.json":
            return json.dumps({"regions": {r: {"regionCode": r} for r in REGIONS}}).encode()
        if path == "/spot-advisor-data.json":
            return json.dumps({"ranges": [], "spot_advisor": {}}).encode()
        for region in REGIONS:
            if path == f"{self.BASE}/{region}/index.csv":
                key = (region, self.version)
                if key not in self._offers:
                    self._offers[key] = _offer_file(region, self.version, self.types)
                return self._offers[key]
        return None


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _FakeAws

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.server.body(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for i in range(0, len(body), 256 * 1024):
                self.wfile.write(body[i:i + 256 * 1024])
                time.sleep(0.03)
        except (BrokenPipeError, ConnectionResetError):  # the client was killed
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_aws() -> Iterator[_FakeAws]:
    rows = parse_rows((ROOT / "configs" / "catalog" / "aws.csv").read_text(encoding="utf-8"), "aws.csv")
    server = _FakeAws(sorted({r.instance_type for r in rows}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _region_versions(cache: Path) -> dict[str, bytes]:
    """Each cached region's bytes, after checking it is whole and priced by one version."""
    out = {}
    for region in REGIONS:
        path = cache / "catalog" / "aws" / f"{region}.csv"
        if not path.exists():
            continue
        data = path.read_bytes()
        rows = parse_rows(data.decode("utf-8"), str(path))  # raises on a partial file
        assert {r.region for r in rows} == {region} and data.endswith(b"\n")
        out[region] = data
    return out


def test_sigkill_during_catalog_refresh_leaves_each_region_old_or_new(tmp_path: Path, fake_aws: _FakeAws) -> None:
    rng = random.Random(int(os.environ.get("SRIFT_KILL_SEED", str(time.time_ns()))))
    port = fake_aws.server_address[1]
    cache = tmp_path / "cache"
    extra = {"SRIFT_CACHE_DIR": str(cache), "SRIFT_AWS_PRICE_LIST_URL": f"http://127.0.0.1:{port}",
             "SRIFT_AWS_SPOT_ADVISOR_URL": f"http://127.0.0.1:{port}/spot-advisor-data.json"}
    args = ["catalog", "refresh", "--infra", "aws"]
    t0 = time.perf_counter()
    assert _run_killed(args, tmp_path, _env(**extra), None) == 0
    full_s = time.perf_counter() - t0
    before = _region_versions(cache)
    assert set(before) == set(REGIONS)
    for _ in range(ROUNDS):
        for delay in [rng.uniform(0.1, full_s * 1.1) for _ in range(RANDOM_KILLS)]:
            fake_aws.version += 1
            _run_killed(args, tmp_path, _env(**extra), delay)
            now = _region_versions(cache)
            assert set(now) == set(REGIONS)
            before = now
        fake_aws.version += 1
        assert _run_killed(args, tmp_path, _crash_env(tmp_path, "before-rename", "us-west-2.csv", **extra), None) == -signal.SIGKILL
        now = _region_versions(cache)
        assert now["us-west-2"] == before["us-west-2"]  # not published: the old region stays
        assert _run_killed(args, tmp_path, _crash_env(tmp_path, "after-rename", "us-west-2.csv", **extra), None) == -signal.SIGKILL
        before = _region_versions(cache)
        fake_aws.version += 1
        assert _run_killed(args, tmp_path, _env(**extra), None) == 0  # the next run works, and srift reads it
        before = _region_versions(cache)
        listed = subprocess.run([sys.executable, "-m", "srift.cli", "catalog", "list", "--region", "us-west-2", "--format", "json"],
                                cwd=tmp_path, env=_env(**extra), capture_output=True, text=True, check=True)
        assert json.loads(listed.stdout) and "Warning" not in listed.stderr


# ---- srift profile --timeout ----------------------------------------------------------------------
# Long enough for a script to reach its stall on a loaded 2-core machine (the first optimizer and
# DataLoader calls took over 3 s while two test suites ran beside it).
TIMEOUT_S = 8
STALLS = {
    "never_steps": ("""\
        import torch
        model = torch.nn.Linear(4, 2)
        while True:
            model(torch.randn(8, 4)).sum().backward()
        """, f"no torch.optim optimizer stepped within {TIMEOUT_S} s, though the model ran"),
    "blocks": ("""\
        import time
        time.sleep(3600)
        """, "no model forward, no backward; the script never reached training; it was at blocks.py:2 (time.sleep(3600))"),
    "stalls_after_a_step": ("""\
        import time, torch
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        time.sleep(3600)
        """, f"no optimizer step for {TIMEOUT_S} s after step 1 of the 25 asked; it was at stalls_after_a_step.py:6"),
    "worker_blocks": ("""\
        import os, sys, time, torch
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self):
                return 1000

            def __getitem__(self, i):
                with open("pids.txt", "a") as fh:
                    fh.write(f"{os.getpid()}\\n")
                time.sleep(3600)

        if __name__ == "__main__":
            model = torch.nn.Linear(4, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in DataLoader(Slow(), batch_size=2, num_workers=2):
                model(x).sum().backward()
                opt.step()
        """, "the script never reached training; it was at worker_blocks.py:16 (for x in DataLoader("),
}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("kind", list(STALLS))
def test_timeout_stops_the_script_says_what_was_seen_and_writes_nothing(tmp_path: Path, kind: str) -> None:
    code, seen = STALLS[kind]
    (tmp_path / f"{kind}.py").write_text(textwrap.dedent(code), encoding="utf-8")
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "srift.cli", "profile", f"{kind}.py", "--timeout", str(TIMEOUT_S)], cwd=tmp_path,
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr
    assert seen in res.stderr and "no profile was written" in res.stderr and "To fix:" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "profiles").exists()
    assert time.perf_counter() - t0 < 60
    if kind == "worker_blocks":  # the two DataLoader workers were started, and are gone
        pids = [int(p) for p in (tmp_path / "pids.txt").read_text().split()]
        assert len(set(pids)) >= 2 and not any(_alive(p) for p in pids)


def test_a_script_that_swallows_the_stop_is_ended_with_its_children(tmp_path: Path) -> None:
    (tmp_path / "stubborn.py").write_text(textwrap.dedent("""\
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        open("child.txt", "w").write(str(child.pid))
        while True:
            try:
                time.sleep(3600)
            except BaseException:
                pass
        """), encoding="utf-8")
    code = ("from srift.profiling.runner import profile_script\n"
            "profile_script('stubborn.py', [], timeout_s=2, stop_grace_s=1)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert "it did not stop within 1 s of being interrupted, so srift ended it; no profile was written." in res.stderr
    assert not _alive(int((tmp_path / "child.txt").read_text()))
    assert not (tmp_path / "profiles").exists()

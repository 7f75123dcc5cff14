"""A hostile user, file or environment: what srift writes (never through a device, a pipe or a
link to one, never over an input), how it reads YAML (strict: no duplicate keys, no YAML 1.1
surprises), what it shows (inert text), and how it survives broken standard streams.

Device nodes, pipes and links are made in a temporary folder (``os.mknod``, ``os.mkfifo``),
never in the real /dev.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from srift.bounds import MAX_LAYERS, MAX_YAML_NODES
from srift.cli import main
from srift.errors import SriftError
from srift.files import atomic_open, atomic_write_many, check_outputs, load_yaml, output_file, read_json
from srift.text import inert, markdown

from cli_helpers import run  # noqa: E402  (tests/cli_helpers.py)

ROOT = Path(__file__).resolve().parents[1]
JOB = "model: resnet50\nbatch_size: 32\nsteps: 1000\ninstance: p3.16xlarge:1\nlimits: {max_cost_usd: 100}\n"


def refused(code: int, err: str) -> bool:
    lines = err.strip().splitlines()
    return code == 2 and len(lines) == 2 and lines[0].startswith("Error: ") and lines[1].startswith("To fix: ")


def _null_device(path: Path) -> Path:
    """A private /dev/null (character device 1:3), or skip where device nodes cannot be made."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("device nodes cannot be made here (not root)")
    return path


# ---- output files ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["device", "fifo", "socket", "folder", "link to a device", "link to a folder", "dangling link"])
def test_an_output_that_is_not_a_regular_file_is_refused_and_left_alone(kind: str, tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    if kind == "device":
        _null_device(target)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
    elif kind == "folder":
        target.mkdir()
    elif kind == "link to a device":
        target.symlink_to(_null_device(tmp_path / "null"))
    elif kind == "link to a folder":
        (tmp_path / "d").mkdir()
        target.symlink_to(tmp_path / "d")
    else:
        target.symlink_to(tmp_path / "nowhere")
    before = os.lstat(target)
    with pytest.raises(SriftError, match="out.json"):
        output_file(target, "--out-file")
    with pytest.raises(SriftError):
        with atomic_open(target) as fh:
            fh.write("{}")
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_a_link_to_a_regular_file_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    real = tmp_path / "bashrc"
    real.write_text("old")
    real.chmod(0o600)
    link = tmp_path / "pr.json"
    link.symlink_to(real)
    code, _, err = run(["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--out-file", "pr.json"], cwd=tmp_path)
    assert refused(code, err) and "symbolic link" in err
    assert link.is_symlink() and real.read_text() == "old" and stat.S_IMODE(real.stat().st_mode) == 0o600


def test_a_file_with_other_hard_links_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "a.json"
    real.write_text("old")
    os.link(real, tmp_path / "b.json")
    with pytest.raises(SriftError, match="1 other hard link"):
        output_file(real, "--out-file")
    with pytest.raises(SriftError, match="hard link"):
        with atomic_open(real) as fh:
            fh.write("new")
    assert real.read_text() == "old" and real.stat().st_nlink == 2


def test_a_file_replaced_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "secret.json"
    target.write_text("old")
    target.chmod(0o600)
    with atomic_open(target) as fh:
        fh.write("new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600


@pytest.mark.parametrize("name", ["/dev/stdout", "/proc/self/fd/1", "/dev/fd/1", "//dev/../dev/stdout"])
def test_a_standard_output_path_appends_to_the_log_it_is_redirected_to(name: str, tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("earlier line\n")
    with log.open("a") as out:
        proc = subprocess.run([sys.executable, "-m", "srift.cli", "predict", "--model", "resnet50", "--instance", "p3.2xlarge",
                               "--out-file", name], stdout=out, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    assert text.startswith("earlier line\n") and '"schema": "srift.predict/v1"' in text and "p3.2xlarge" in text
    assert log.stat().st_nlink == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["build.log"]


def test_standard_error_paths_and_descriptors_are_streams(tmp_path: Path) -> None:
    log = tmp_path / "err.log"
    log.write_text("earlier\n")
    with log.open("a") as err:
        proc = subprocess.run([sys.executable, "-m", "srift.cli", "predict", "--model", "resnet50", "--instance", "p3.2xlarge",
                               "--skypilot", "/dev/stderr"], stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 0
    text = log.read_text()
    assert text.startswith("earlier\n") and "resources:" in text
    # A task written to a stream is saved before it is launched: the launch line names a file.
    assert "Launch: sky launch -c srift-resnet50 TASK.yaml --env" in text and "/dev/stderr --env" not in text
    with pytest.raises(SriftError, match="descriptor 97, which is not open"):
        output_file("/proc/self/fd/97", "--out-file")
    with pytest.raises(SriftError, match="both write"):
        check_outputs({"--out-file": "-", "--skypilot": "/dev/stdout"})


def test_written_files_get_0644_under_umask_022(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with atomic_open(tmp_path / "a.json") as fh:
            fh.write("{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644


def test_check_out_file_over_its_own_job_file_is_refused(tmp_path: Path) -> None:
    job = tmp_path / "srift.yaml"
    job.write_text(JOB)
    code, _, err = run(["check", "srift.yaml", "--out-file", "srift.yaml"], cwd=tmp_path)
    assert refused(code, err) and "same file as the input" in err
    assert job.read_text() == JOB


def test_two_outputs_on_one_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SriftError, match="--out-file and --skypilot both write"):
        check_outputs({"--out-file": tmp_path / "x", "--skypilot": tmp_path / "x"})


@pytest.mark.slow
def test_dash_writes_the_json_to_stdout(tmp_path: Path) -> None:
    code, out, err = run(["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--format", "json", "--out-file", "-"],
                         cwd=tmp_path)
    assert code == 0, err
    assert out.count('"schema"') == 2 and list(tmp_path.iterdir()) == []  # printed, and the --out-file copy on stdout too


def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "keep.json"
    target.write_text("old")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(SriftError, match="No space left on device"):
        with atomic_open(target) as fh:
            fh.write("new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["keep.json"]


def test_many_files_are_written_all_or_none(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "b")
    with pytest.raises(SriftError, match="named pipe"):
        atomic_write_many({tmp_path / "new" / "sub" / "a": b"1", tmp_path / "new" / "c": b"1", tmp_path / "b": b"2"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]  # no file, no folder made on the way


def test_examples_never_write_through_a_link_out_of_the_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "examples").symlink_to(outside)
    code, _, err = run(["examples", str(dest)])
    assert refused(code, err) and "leads out of" in err
    assert list(outside.iterdir()) == [] and sorted(p.name for p in dest.iterdir()) == ["examples"]


# ---- strict YAML -------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "words"), [
    ("limits: {max_cost_usd: 0.5, max_cost_usd: 1000000}\n", "key 'max_cost_usd' twice, on line 1"),
    ("a: 1\nb: 2\na: 3\n", "key 'a' twice, at lines 1 and 3"),
    ("max_hours: 1:30\n", "line 1: '1:30' is a base-60 number in YAML 1.1: PyYAML would read it as 90"),
    ("x: 1\nsteps: 1:00:00\n", "line 2: '1:00:00' is a base-60 number in YAML 1.1: PyYAML would read it as 3600"),
    ("batch_size: 032\n", "line 1: '032' is octal in YAML 1.1 and decimal in YAML 1.2: PyYAML would read it as 26"),
    ("spot: yes\n", "line 1: 'yes' is a boolean in YAML 1.1"),
    ("spot: Off\n", "line 1: 'Off' is a boolean in YAML 1.1"),
])
def test_yaml_surprises_are_refused_with_the_line(text: str, words: str) -> None:
    with pytest.raises(SriftError) as info:
        load_yaml(text, "job file 'srift.yaml'")
    assert words in info.value.message and info.value.message.startswith("job file 'srift.yaml'")


@pytest.mark.parametrize(("text", "value"), [
    ("d: 2026-07-20\n", {"d": "2026-07-20"}),  # YAML 1.2: no timestamps
    ("x: 1e3\n", {"x": 1000.0}), ("x: 1.5e3\n", {"x": 1500.0}),  # YAML 1.2 floats PyYAML reads as text
    ("x: '032'\ny: '1:30'\nz: 'yes'\n", {"x": "032", "y": "1:30", "z": "yes"}),  # quoted: the text
    ("x: 0.5\ny: 0\nz: true\nw: 0x10\nv: 1_000\n", {"x": 0.5, "y": 0, "z": True, "w": 16, "v": 1000}),
    ("base: &b {a: 1}\nuse:\n  <<: *b\n  a: 2\n", {"base": {"a": 1}, "use": {"a": 2}}),  # a merge key is no duplicate
])
def test_yaml_reads_as_yaml_1_2_would(text: str, value: object) -> None:
    assert load_yaml(text, "doc") == value


def test_the_ci_gate_cannot_be_bent_by_a_duplicate_limit(tmp_path: Path) -> None:
    (tmp_path / "srift.yaml").write_text(JOB.replace("limits: {max_cost_usd: 100}", "limits: {max_cost_usd: 0.5, max_cost_usd: 1000000}"))
    code, _, err = run(["check"], cwd=tmp_path)
    assert refused(code, err) and "twice" in err


@pytest.mark.slow
def test_every_yaml_file_srift_ships_reads_the_same_strictly() -> None:
    shipped = [p for p in sorted((ROOT / "configs").rglob("*.yaml")) + sorted((ROOT / "profiles").glob("*.yaml"))]
    assert len(shipped) > 10
    for path in shipped:
        text = path.read_text(encoding="utf-8")
        assert load_yaml(text, str(path)) == yaml.safe_load(text), path


def test_json_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_text('{"predicted_cost_usd": 1, "predicted_cost_usd": 1000}')
    with pytest.raises(SriftError, match="has the key 'predicted_cost_usd' twice"):
        read_json(path, "baseline", "pass the JSON of an earlier --out-file.")


def test_a_profile_of_max_layers_is_refused_by_its_layer_count_not_the_yaml_bound() -> None:
    """MAX_LAYERS is reachable: a profile with every layer field set and a collective per layer
    (a mapping of 2 x fields + 1 nodes each) stays under MAX_YAML_NODES up to MAX_LAYERS layers,
    and one layer more is refused by name, not by the YAML bound."""
    from srift.profile import LayerProfile, Profile, UnitCollective

    per_layer = 2 * len(LayerProfile.__dataclass_fields__) + 1 + 2 * len(UnitCollective.__dataclass_fields__) + 1
    assert per_layer * MAX_LAYERS + 10_000 < MAX_YAML_NODES  # 10,000: the rest of a profile, generously
    too_many = {**_minimal_profile(), "layers": [{"name": "x", "type": "Linear"}] * (MAX_LAYERS + 1)}
    with pytest.raises(SriftError, match=f"'layers' has {MAX_LAYERS + 1:,} entries"):
        Profile.from_dict(too_many)


def _minimal_profile() -> dict[str, object]:
    return yaml.safe_load((ROOT / "profiles" / "vgg16.yaml").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_the_node_bound_blames_aliases_only_when_there_are_some() -> None:
    with pytest.raises(SriftError) as info:
        load_yaml("[" + "1," * (MAX_YAML_NODES + 1) + "]", "doc")
    assert "alias" not in str(info.value)


# ---- inert text --------------------------------------------------------------------------------
def test_markdown_text_is_inert() -> None:
    assert markdown("a<!--b @user |x| `c`") == "a&lt;\\!--b &#64;user &#124;x&#124; \\`c\\`"
    assert inert("a\x1b[31mred\x1b[0m\nb\u202ec") == "a [31mred [0m b c"
    assert len(inert("x" * 10**6)) == 200


def test_a_megabyte_model_name_renders_fast_and_without_escapes(tmp_path: Path) -> None:
    cfg = json.loads((ROOT / "tests" / "fixtures" / "hf_configs" / "Llama-3.2-1B.json").read_text())
    cfg["_name_or_path"] = "\x1b]0;pwned\x07<!--" + "x" * 1_000_000
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    for fmt in ("table", "markdown"):
        code, out, err = run(["predict", "--model-config", str(tmp_path / "config.json"), "--instance", "p4d.24xlarge",
                              "--format", fmt])
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out and len(out) < 20_000
        assert fmt == "table" or "<!--" not in out
    assert time.perf_counter() - t0 < 60  # was over a minute for one render


def test_a_profile_name_cannot_hide_the_limits_table(tmp_path: Path) -> None:
    prof = _minimal_profile()
    prof["name"] = "evil <!-- @everyone"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(prof))
    (tmp_path / "srift.yaml").write_text(JOB.replace("model: resnet50", "profile: p.yaml"))
    code, out, err = run(["check", "--format", "markdown"], cwd=tmp_path)
    assert code in (0, 1), err
    assert "<!--" not in out and "@everyone" not in out and "| job cost |" in out


# ---- standard streams and the data folder ------------------------------------------------------
def _cli(args: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRIFT_")}
    env.update(PYTHONPATH=str(ROOT), **kw.pop("env", {}))  # type: ignore[arg-type]
    return subprocess.run([sys.executable, "-m", "srift.cli", *args], cwd=cwd, env=env, text=True, **kw)  # type: ignore[call-overload]


@pytest.mark.slow
def test_a_full_stdout_is_one_error_not_exit_120(tmp_path: Path) -> None:
    full = tmp_path / "full"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except OSError:
        pytest.skip("device nodes cannot be made here (not root)")
    (tmp_path / "srift.yaml").write_text(JOB)
    with open(full, "w") as out:
        res = _cli(["check"], tmp_path, stdout=out, stderr=subprocess.PIPE)
    assert res.returncode == 2 and "No space left on device" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--version"], ["catalog", "gpus"]])
def test_a_closed_stdout_or_an_ascii_terminal_is_no_traceback(args: list[str], tmp_path: Path) -> None:
    closed = _cli(args, tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, close_fds=True,
                  preexec_fn=lambda: os.close(1))
    ascii_ = _cli(["predict", "--model", "resnet50", "--instance", "p3.2xlarge"], tmp_path, capture_output=True,
                  env={"PYTHONIOENCODING": "ascii"})
    assert closed.returncode == 0 and "Traceback" not in closed.stderr
    assert ascii_.returncode == 0 and "Traceback" not in ascii_.stderr and "?" in ascii_.stdout


@pytest.mark.slow
def test_a_bad_srift_home_is_one_error_and_version_still_works(tmp_path: Path) -> None:
    version = _cli(["--version"], tmp_path, capture_output=True, env={"SRIFT_HOME": str(tmp_path / "nowhere")})
    predict = _cli(["predict", "--model", "resnet50", "--instance", "p3.2xlarge"], tmp_path, capture_output=True,
                   env={"SRIFT_HOME": str(tmp_path / "nowhere")})
    assert version.returncode == 0 and version.stdout.startswith("srift ")
    assert refused(predict.returncode, predict.stderr) and "SRIFT_HOME" in predict.stderr


# ---- smaller ones ------------------------------------------------------------------------------
def test_a_global_batch_that_does_not_divide_over_the_gpus_is_refused() -> None:
    code, _, err = run(["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2", "--global-batch-size", "31"])
    assert refused(code, err) and "global batch 31 does not divide over the 16 GPUs" in err and "make 16 or 32" in err
    code, out, _ = run(["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2", "--global-batch-size", "32", "--format", "json"])
    assert code == 0 and json.loads(out)["global_batch_size"] == 32


@pytest.mark.parametrize(("flags", "words"), [
    (["--sizes", "1024,1073741824000"], "distinct sizes from 4 to"), (["--sizes", ",".join(str(8 + i) for i in range(5000))], "more than 1,000"),
    (["--reps", "100000000"], "--reps"), (["--nproc", "100000"], "--nproc"), (["--nproc", "1"], "--nproc"),
])
def test_calibrate_comm_bounds_its_flags(flags: list[str], words: str) -> None:
    code, _, err = run(["calibrate", "comm", *flags])
    assert refused(code, err) and words in err

"""The shipped example files are reachable from any folder and after a non-editable install:
`srift examples [DIR]` copies them out, and the README's `--cluster configs/clusters/...` works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from srift import examples
from srift.cli import main
from srift.jobfile import load_jobfile

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["configs/ci/srift-check.yml", "configs/ci/srift.yaml", "configs/clusters/dgx-a100.yaml",
           "configs/clusters/gb200-nvl72.yaml", "configs/clusters/hgx-h800.yaml", "configs/clusters/ib-64.yaml", "configs/clusters/mixed-lab.yaml", "examples/train_bert.py",
           "examples/train_cnn.py", "examples/train_ddp.py", "examples/train_fsdp.py"]


def test_examples_copies_every_file_as_in_the_repository(tmp_path, capsys):
    assert examples.example_files() == SHIPPED
    dest = tmp_path / "here"
    assert main(["examples", str(dest)]) == 0
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == SHIPPED
    assert all((dest / rel).read_bytes() == (ROOT / rel).read_bytes() for rel in SHIPPED)
    out = capsys.readouterr().out
    assert f"Copied {len(SHIPPED)} file(s)" in out and "set SRIFT_REPO and SRIFT_REF" in out
    # Again: nothing is overwritten unless asked.
    (dest / "configs/clusters/ib-64.yaml").write_text("mine\n")
    assert main(["examples", str(dest)]) == 0
    assert f"Kept {len(SHIPPED)} existing file(s)" in capsys.readouterr().out
    assert (dest / "configs/clusters/ib-64.yaml").read_text() == "mine\n"
    assert main(["examples", str(dest), "--force"]) == 0
    assert (dest / "configs/clusters/ib-64.yaml").read_bytes() == (ROOT / "configs/clusters/ib-64.yaml").read_bytes()


def test_the_workflow_is_pinned_when_asked_or_when_srift_came_from_git(tmp_path, monkeypatch, capsys):
    assert main(["examples", str(tmp_path / "a"), "--repo", "https://github.com/me/srift", "--ref", "v0.1.0"]) == 0
    flow = yaml.safe_load((tmp_path / "a/configs/ci/srift-check.yml").read_text())
    assert flow["env"] == {"SRIFT_REPO": "https://github.com/me/srift", "SRIFT_REF": "v0.1.0"}
    assert "installs srift from https://github.com/me/srift at v0.1.0" in capsys.readouterr().out

    class FromGit:  # what pip records for `pip install "srift-planner @ git+URL@REF"` (PEP 610)
        @staticmethod
        def read_text(name):
            return json.dumps({"url": "https://github.com/org/srift.git",
                               "vcs_info": {"vcs": "git", "commit_id": "0123abc", "requested_revision": "main"}})

    monkeypatch.setattr(examples.metadata, "distribution", lambda name: FromGit)
    assert examples.installed_from_git() == ("https://github.com/org/srift.git", "0123abc")
    assert main(["examples", str(tmp_path / "b")]) == 0
    flow = yaml.safe_load((tmp_path / "b/configs/ci/srift-check.yml").read_text())
    assert flow["env"] == {"SRIFT_REPO": "https://github.com/org/srift.git", "SRIFT_REF": "0123abc"}


def test_bad_destinations_and_half_pins_are_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["examples", str(tmp_path / "file")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["examples", str(tmp_path / "c"), "--repo", "https://github.com/me/srift"]) == 2
    assert "--repo and --ref go together" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_the_example_job_file_is_valid_and_passes(capsys):
    job = load_jobfile(str(ROOT / "configs/ci/srift.yaml"), env={})
    assert job.instance == "p4d.24xlarge:2" and job.infra == "aws/us-east-1"
    assert main(["check", str(ROOT / "configs/ci/srift.yaml"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True


def test_readme_cluster_paths_work_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    assert main(["predict", "--model", "resnet50", "--cluster", "configs/clusters/ib-64.yaml", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 64
    # A path that is neither here nor shipped is still an error.
    assert main(["predict", "--model", "resnet50", "--cluster", "configs/clusters/nope.yaml"]) == 2
    assert "does not exist" in capsys.readouterr().err


def _wheel(tmp_path: Path) -> Path:
    """srift's wheel, built (no network) from a copy of the checkout."""
    src = tmp_path / "src"  # a copy: building in the checkout would leave build/ and *.egg-info there
    for part in ("srift", "configs", "profiles", "examples", "schemas"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(src)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("srift_planner-*.whl")
    return wheel


@pytest.mark.slow
def test_a_non_editable_install_ships_and_finds_its_files(tmp_path):
    """Build the wheel, install it (not editable) into a fresh virtualenv whose dependencies come
    from this one, and run the README's commands from an empty folder."""
    wheel = _wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    data = "srift_planner-0.1.0.data/data/share/srift/"
    for rel in SHIPPED + ["configs/gpus.yaml", "configs/catalog/aws.csv", "configs/perf/accuracy.json", "profiles/resnet50.yaml",
                "schemas/predict.schema.json"]:
        assert data + rel in names, rel

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    site = subprocess.run([str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # The dependencies (typer, numpy, ...) from this environment; srift itself only from the wheel.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("SRIFT_HOME", "PYTHONPATH")}

    def srift(*args: str) -> str:
        res = subprocess.run([str(bin_dir / "srift"), *args], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, (args, res.stdout[-2000:], res.stderr[-2000:])
        return res.stdout

    where = subprocess.run([str(bin_dir / "python"), "-c", "import srift; print(srift.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(site)  # the installed copy, not this checkout
    assert "CHOSEN" in srift("recommend", "--model", "resnet50", "--budget", "20")
    assert json.loads(srift("predict", "--model", "resnet50", "--cluster", "configs/clusters/ib-64.yaml", "--optimizer",
                            "kfac", "--format", "json"))["gpus"] == 64
    srift("examples", "out")
    assert sorted(p.relative_to(work / "out").as_posix() for p in (work / "out").rglob("*") if p.is_file()) == SHIPPED


@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="the user scheme's layout differs on Windows; the lookup is the same")
def test_a_user_install_finds_its_files_under_the_user_base(tmp_path):
    """`pip install --user` puts the data files under ``<userbase>/share/srift``, not under
    ``sys.prefix``: srift reads where the install's file list says they went, and runs the README's
    main command. The interpreter is a virtualenv that sees the system site-packages (pip installs
    ``--user`` only there); PYTHONUSERBASE is a fresh folder; the dependencies come from this
    environment through a .pth file in the user site-packages."""
    wheel = _wheel(tmp_path)
    venv, userbase = tmp_path / "venv", tmp_path / "userbase"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("SRIFT_HOME", "PYTHONPATH", "PYTHONNOUSERSITE")}
    env["PYTHONUSERBASE"] = str(userbase)
    user_site = subprocess.run([str(python), "-c", "import site; print(site.getusersitepackages())"], env=env, check=True,
                               capture_output=True, text=True).stdout.strip()
    assert user_site.startswith(str(userbase))
    Path(user_site).mkdir(parents=True)
    Path(user_site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--user", "--no-deps", "--no-index", "-q", str(wheel)],
                   env=env, check=True, capture_output=True, timeout=300)
    assert (userbase / "share/srift/configs/gpus.yaml").is_file()  # where the user scheme puts data files
    prefix = subprocess.run([str(python), "-c", "import sys; print(sys.prefix)"], env=env, check=True, capture_output=True,
                            text=True).stdout.strip()
    assert not Path(prefix, "share/srift").exists()  # not where srift looked before
    work = tmp_path / "work"
    work.mkdir()
    res = subprocess.run([str(userbase / "bin" / "srift"), "recommend", "--model", "resnet50", "--budget", "20"], cwd=work,
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])
    assert "CHOSEN" in res.stdout
    where = subprocess.run([str(python), "-c", "import srift.files as f; print(f.__file__); print(f.data_root())"], cwd=work,
                           env=env, capture_output=True, text=True, check=True).stdout.split()
    assert where == [str(Path(user_site, "srift", "files.py")), str(userbase / "share" / "srift")]

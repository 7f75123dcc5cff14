"""Hand-off: the SkyPilot task and the torchrun lines ask for exactly the configuration srift chose."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from srift import api
from srift.cli import main
from srift.cluster import Cluster, NodeGroup
from srift.report.handoff import skypilot_task, torchrun_lines
from srift.results import LaunchGroup, LaunchPlan
from srift.testing import SpeedModel

ROOT = Path(__file__).resolve().parents[1]
SKYPILOT_CATALOG = ROOT / "data" / "skypilot-catalog-multicloud"


def _task(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _check_torchrun_run(run: str) -> None:
    """The run section starts torchrun with the rendezvous SkyPilot provides, master = first IP."""
    assert 'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)' in run
    for flag in ('--nnodes="$SKYPILOT_NUM_NODES"', '--nproc_per_node="$SKYPILOT_NUM_GPUS_PER_NODE"',
                 '--node_rank="$SKYPILOT_NODE_RANK"', '--master_addr="$MASTER_ADDR"', "$TRAIN_SCRIPT"):
        assert flag in run
    assert run.index("MASTER_ADDR=") < run.index("\ntorchrun ")


@pytest.mark.slow
def test_recommend_writes_the_task_of_the_chosen_configuration(tmp_path, capsys):
    task_file = tmp_path / "task.yaml"
    assert main(["recommend", "--model", "resnet50", "--budget", "20", "--format", "json", "--skypilot", str(task_file)]) == 0
    out = capsys.readouterr()
    top = json.loads(out.out)["recommendations"][0]  # stdout stays one JSON document
    instance_type, count = top["instance"].split(":")
    row = api.catalog_show(instance_type, "us-east-1")[0]
    task = _task(task_file)
    assert task["num_nodes"] == int(count)
    efa = {"network_tier": "best"} if row.efa and int(count) > 1 else {}  # srift predicted EFA: the task asks for it
    assert task["resources"] == {"infra": "aws/us-east-1", "instance_type": row.vm_type, "accelerators": row.accelerators,
                                 "use_spot": top["spot"], **efa}
    assert task["resources"]["accelerators"] == f"{row.accelerators.split(':')[0]}:{row.gpu_count}"
    assert "setup" not in task and task["envs"]["TRAIN_SCRIPT"] == "train.py"
    assert ("FI_PROVIDER" in task["envs"]) == bool(efa)
    _check_torchrun_run(task["run"])
    assert f"Wrote SkyPilot task {task_file}" in out.err
    umask = os.umask(0)
    os.umask(umask)
    assert task_file.stat().st_mode & 0o777 == 0o666 & ~umask  # a normal file, not mkstemp's 0600


@pytest.mark.slow
def test_predict_tasks_by_hand(tmp_path):
    """g5.12xlarge is 4 x A10G (SkyPilot: A10G:4) with one EFA interface, which srift predicts over,
    so the task asks network_tier: best; p3.16xlarge 8 x V100 (V100:8) has no EFA, here on spot."""
    for spec, spot, nodes, itype, acc, efa in (("g5.12xlarge:3", [], 3, "g5.12xlarge", "A10G:4", {"network_tier": "best"}),
                                               ("p3.16xlarge:2", ["--spot"], 2, "p3.16xlarge", "V100:8", {})):
        f = tmp_path / f"{itype}.yaml"
        assert main(["predict", "--model", "resnet50", "--instance", spec, *spot, "--skypilot", str(f)]) == 0
        task = _task(f)
        assert task["num_nodes"] == nodes and task["name"] == "srift-resnet50"
        assert task["resources"] == {"infra": "aws/us-east-1", "instance_type": itype, "accelerators": acc, "use_spot": bool(spot),
                                     **efa}


def test_an_efa_task_asks_for_efa_and_says_what_all_interfaces_need(tmp_path, capsys):
    """p5.48xlarge has 32 EFA interfaces (3,200 Gb/s, 100 Gb/s each). SkyPilot 0.14.1 attaches EFA only
    at network_tier: best and all interfaces only with aws.use_internal_ips in the user's config:
    the task asks the tier, sets the libfabric/NCCL environment, and its header and the command line
    say what the config needs and what srift predicts with one interface (1/32 of the bandwidth)
    and with none (TCP)."""
    f = tmp_path / "p5.yaml"
    args = ["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:4", "--seq-len", "8192", "--batch-size", "1"]
    assert main([*args, "--skypilot", str(f), "--format", "json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    task, text = _task(f), f.read_text(encoding="utf-8")
    assert task["resources"]["network_tier"] == "best"
    assert task["envs"] == {"TRAIN_SCRIPT": "train.py", "SRIFT_BATCH_SIZE": "1", "SRIFT_GLOBAL_BATCH": "32",  # 1 x 32 GPUs
                            "FI_PROVIDER": "efa", "NCCL_DEBUG": "INFO", "FI_EFA_USE_DEVICE_RDMA": "1"}
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    full, (one, none) = doc["throughput_tokens_per_s"], [x["expected_throughput_samples_per_s"] * 8192
                                                                 for x in doc["network_fallbacks"]]
    assert [x["network"] for x in doc["network_fallbacks"]] == ["one EFA interface", "no EFA (TCP)"]
    assert full > one > none
    want = [f"# Network: srift predicts {full:,.0f} tokens/s with EFA on all 32 interfaces of p5.48xlarge (3,200 Gb/s)",
            "# All 32 interfaces need `aws: use_internal_ips: true` in your SkyPilot config",
            f"# With one EFA interface: srift predicts {one:,.0f} tokens/s ({full / one:.1f}x slower).",
            f"# With no EFA (TCP): srift predicts {none:,.0f} tokens/s ({full / none:.1f}x slower)."]
    for line in want:
        assert any(h.startswith(line) for h in header), line
        assert line[2:] in out.err  # the command line says it too
    # torchrun lines carry the environment and the same figures.
    assert main([*args, "--torchrun"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "# EFA: on every node, with the aws-ofi-nccl plugin installed: export FI_PROVIDER=efa NCCL_DEBUG=INFO " \
        "FI_EFA_USE_DEVICE_RDMA=1" in lines
    assert f"# With one EFA interface: srift predicts {one:,.0f} tokens/s." in lines


def test_a_gcp_host_with_attached_gpus_asks_for_the_host_and_the_gpus(tmp_path):
    f = tmp_path / "t.yaml"
    assert main(["predict", "--model", "resnet50", "--instance", "n1-highmem-8-t4x1:2", "--region", "gcp/us-central1",
                 "--skypilot", str(f)]) == 0
    assert _task(f)["resources"] == {"infra": "gcp/us-central1", "instance_type": "n1-highmem-8", "accelerators": "T4:1",
                                     "use_spot": False}


@pytest.mark.parametrize("spec", ["g5.12xlarge:1+p3.16xlarge:1", "g5.12xlarge:1@on-demand+g5.12xlarge:2@spot"])
def test_a_mixed_cluster_has_no_task_and_says_what_to_do(tmp_path, capsys, spec):
    f = tmp_path / "t.yaml"
    assert main(["predict", "--model", "resnet50", "--instance", spec, "--skypilot", str(f)]) == 2
    out = capsys.readouterr()
    assert "one SkyPilot task runs identical nodes" in out.err and "To fix:" in out.err and "Traceback" not in out.err
    assert out.out == "" and not f.exists()  # refused before anything is printed or written


def test_a_cluster_file_gets_torchrun_lines_but_no_task(tmp_path, capsys):
    lab = str(ROOT / "configs/clusters/mixed-lab.yaml")
    assert main(["predict", "--model", "resnet50", "--cluster", lab, "--skypilot", str(tmp_path / "t.yaml")]) == 2
    assert "cluster file describes your own machines" in capsys.readouterr().err
    assert main(["predict", "--model", "resnet50", "--cluster", lab, "--torchrun", "--format", "json"]) == 0
    out = capsys.readouterr()
    json.loads(out.out)  # the lines go to stderr when stdout is JSON
    lines = [_torchrun(ln) for ln in out.err.splitlines() if "torchrun --" in ln and not ln.startswith("#")]
    # 2 servers of 4 x V100, then 4 workstations of 2 x A6000: ranks 0..5, each its own worker count.
    assert [shlex.split(ln)[3] for ln in lines] == [f"--node_rank={r}" for r in range(6)]
    assert [shlex.split(ln)[2] for ln in lines] == ["--nproc_per_node=4"] * 2 + ["--nproc_per_node=2"] * 4
    assert all("--nnodes=6" in ln and "--master_addr=MASTER_ADDR" in ln for ln in lines)


def _torchrun(line: str) -> str:
    """The torchrun command of a line, after the SRIFT_* settings it sets."""
    settings, _, command = line.partition("torchrun ")
    assert all(word.startswith("SRIFT_") and "=" in word for word in settings.split())
    return "torchrun " + command


def test_torchrun_lines_of_one_node_and_of_several():
    one = _plan([(1, 8)])
    assert [ln for ln in torchrun_lines(one) if not ln.startswith("#")] == [
        "SRIFT_BATCH_SIZE=4 SRIFT_GLOBAL_BATCH=32 torchrun --standalone --nproc_per_node=8 train.py"]  # 4 per GPU x 8
    three = [_torchrun(ln) for ln in torchrun_lines(_plan([(3, 4)])) if not ln.startswith("#")]
    assert three == [f"torchrun --nnodes=3 --nproc_per_node=4 --node_rank={r} --master_addr=MASTER_ADDR "
                     f"--master_port=29500 train.py" for r in range(3)]


def _plan(groups: list[tuple[int, int]]) -> LaunchPlan:
    cluster = Cluster("test", tuple(NodeGroup(n, g, "cpu", "shared-memory", 10.0) for n, g in groups))
    pred = SpeedModel({"cpu": 100.0}, per_gpu_batch=4)(cluster)
    return LaunchPlan("tiny", "test", tuple(LaunchGroup(n, g, "cpu", False, 4, None) for n, g in groups), pred)


def test_the_task_of_a_plan_without_a_catalog_row_is_refused():
    from srift.errors import SriftError

    with pytest.raises(SriftError, match="cluster file"):
        skypilot_task(_plan([(2, 4)]))


@pytest.mark.slow
@pytest.mark.distributed
def test_the_printed_torchrun_lines_start_one_job_with_every_worker(tmp_path):
    """Run the lines of a 2-node plan with 1 and 2 workers (nodes of different sizes, as in a mixed
    cluster) on this machine: one gloo job of 3 ranks forms, and an all-reduce adds them up."""
    script = tmp_path / "train.py"
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    script.write_text(textwrap.dedent(f"""
        import os, torch, torch.distributed as dist
        dist.init_process_group("gloo")
        x = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(x)
        open(os.path.join({str(out_dir)!r}, str(dist.get_rank())), "w").write(f"{{dist.get_world_size()}} {{x.item():g}}")
        dist.destroy_process_group()
    """))
    from srift.testing import free_port

    port = free_port()
    lines = [ln for ln in torchrun_lines(_plan([(1, 1), (1, 2)]), script=str(script)) if not ln.startswith("#")]
    procs = []
    for ln in lines:
        argv = shlex.split(_torchrun(ln).replace("MASTER_ADDR", "127.0.0.1").replace("29500", str(port)))
        procs.append(subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *argv[1:]],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    results = {f.name: f.read_text() for f in out_dir.iterdir()}
    assert results == {"0": "3 3", "1": "3 3", "2": "3 3"}  # world size 3; 0 + 1 + 2 = 3


SKY_CHECK = r"""
import json, os, pathlib, shutil, sys
import sky.catalog.common as common
root = pathlib.Path(common._ABSOLUTE_VERSIONED_CATALOG_DIR)  # under this process's HOME
src = pathlib.Path(sys.argv[1])
for cloud, files in {"aws": ["aws-gpu-vms.csv"], "gcp": ["gcp-gpu-vms.csv", "gcp-n1-host-vms.csv"],
                     "lambda": ["lambda-gpu-vms.csv"], "azure": ["azure-gpu-vms.csv"]}.items():
    (root / cloud).mkdir(parents=True, exist_ok=True)
    text = [(src / f).read_text().splitlines() for f in files]
    (root / cloud / "vms.csv").write_text("\n".join(text[0] + [l for t in text[1:] for l in t[1:]]) + "\n")
import sky, yaml
import sky.catalog as catalog
from sky.utils import common_utils, schemas
out = {"version": sky.__version__}
for path in sys.argv[2:]:
    doc = yaml.safe_load(open(path))
    common_utils.validate_schema(doc, schemas.get_task_schema(), "Invalid task YAML: ")
    task = sky.Task.from_yaml(path)
    (res,) = task.resources
    cloud = str(res.cloud).lower()
    out[path] = {"num_nodes": task.num_nodes, "instance_type": res.instance_type, "accelerators": res.accelerators,
                 "use_spot": res.use_spot, "infra": f"{cloud}/{res.region}",
                 "network_tier": None if res.network_tier is None else res.network_tier.name,
                 "catalog_accelerators": catalog.get_accelerators_from_instance_type(res.instance_type, clouds=cloud)
                 if res.instance_type and cloud != "gcp" else None,
                 "usd_per_hour": catalog.get_hourly_cost(res.instance_type, use_spot=res.use_spot, region=res.region,
                                                         zone=None, clouds=cloud) * task.num_nodes}
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("sky") is None, reason="skypilot is not installed (pip install skypilot)")
def test_skypilot_accepts_the_tasks(tmp_path, capsys):
    """SkyPilot's own schema and ``sky.Task.from_yaml`` (validated with skypilot 0.14.1) accept the
    tasks, and SkyPilot's catalog (the copy in data/, offline, in a throw-away HOME) agrees on the
    machines: the instance type exists, carries these accelerators, and costs what srift says."""
    # recommend on A10G: the chosen row must be in SkyPilot's catalog (g7e, Karpenter-only, is not).
    cases = {"recommend": ["recommend", "--model", "resnet50", "--budget", "20", "--gpu", "A10G"],
             "aws-spot": ["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2", "--spot"],
             "aws-efa": ["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:4", "--seq-len", "8192", "--batch-size", "1"],
             "gcp": ["predict", "--model", "resnet50", "--instance", "a2-highgpu-8g:2", "--region", "gcp/us-central1"],
             "gcp-attached": ["predict", "--model", "resnet50", "--instance", "n1-highmem-8-t4x1:2", "--region", "gcp/us-central1"],
             "lambda": ["predict", "--model", "resnet50", "--instance", "gpu_8x_h100_sxm5:2", "--region", "lambda/us-east-1"],
             "azure": ["predict", "--model", "resnet50", "--instance", "Standard_ND96asr_v4:2", "--region", "azure/eastus"]}
    costs = {}
    for name, args in cases.items():
        assert main([*args, "--format", "json", "--skypilot", str(tmp_path / f"{name}.yaml")]) == 0
        doc = json.loads(capsys.readouterr().out)
        costs[name] = doc["recommendations"][0]["cost_per_hour_usd"] if name == "recommend" else doc["cost_per_hour_usd"]
    home = tmp_path / "home"
    home.mkdir()
    res = subprocess.run([sys.executable, "-c", SKY_CHECK, str(SKYPILOT_CATALOG), *(str(tmp_path / f"{n}.yaml") for n in cases)],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "HOME": str(home)})
    assert res.returncode == 0, res.stderr[-3000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    for name in cases:
        task, got = _task(tmp_path / f"{name}.yaml"), seen[str(tmp_path / f"{name}.yaml")]
        want = task["resources"]
        assert got["num_nodes"] == task["num_nodes"] and got["use_spot"] == want["use_spot"], name
        assert got["instance_type"] == want["instance_type"] and got["infra"] == want["infra"], name
        acc, n = want["accelerators"].split(":")
        assert got["accelerators"] == {acc: int(n)}, name
        assert got["network_tier"] == ("BEST" if want.get("network_tier") == "best" else None), name
        if got["catalog_accelerators"] is not None:  # the type itself has these GPUs in SkyPilot's catalog
            assert got["catalog_accelerators"] == {acc: int(n)}, name
    # The chosen AWS row (on-demand, us-east-1) is priced from SkyPilot's catalog: the same $/h.
    assert seen[str(tmp_path / "recommend.yaml")]["usd_per_hour"] == pytest.approx(costs["recommend"], rel=1e-3)


def test_the_task_in_docs_launch_md_is_what_srift_writes(tmp_path):
    doc = (ROOT / "docs/launch.md").read_text(encoding="utf-8")
    block = doc.split("<!-- out:skypilot-task-resnet50 -->\n```\n", 1)[1].split("```", 1)[0]
    shown = yaml.safe_load(block.split("\n", 1)[1])  # after the quoted command line (scripts/render_docs.py)
    f = tmp_path / "t.yaml"
    assert main(["predict", "--model", "resnet50", "--instance", "g5.12xlarge:3", "--skypilot", str(f)]) == 0
    assert shown == _task(f)

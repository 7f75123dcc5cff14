"""The JSON Schemas under schemas/ (scripts/make_schemas.py) admit what srift writes and reads:
documents of other commands than the ones they were inferred from, the shipped job file and
profiles; the job file's schema is the one the job-option table generates, and refuses what srift
refuses. SkyPilot's own task schema (a fixture) admits the hand-off task without skypilot."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from srift.cli import main
from srift.files import read_yaml
from srift.profile import Profile

ROOT = Path(__file__).resolve().parents[1]
SKYPILOT = ROOT / "tests" / "fixtures" / "skypilot"  # skypilot 0.14.1's schemas (README.md there)


def _schema(name: str) -> dict[str, Any]:
    schema = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _errors(name: str, doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in jsonschema.Draft202012Validator(_schema(name)).iter_errors(doc)]


def _run(tmp_path: Path, args: list[str], code: int = 0) -> Any:
    out = tmp_path / "doc.json"
    assert main([*args, "--format", "json", "--out-file", str(out)]) == code
    return json.loads(out.read_text())


# Not the commands the schemas were inferred from (scripts/make_schemas.py SAMPLES).
@pytest.mark.parametrize("name,args,code", [
    ("predict", ["predict", "--model", "gpt2", "--instance", "g5.12xlarge", "--seq-len", "512"], 0),
    ("predict", ["predict", "--model", "vgg16", "--instance", "p3.16xlarge:2", "--spot", "--precision", "amp"], 0),
    ("recommend", ["recommend", "--model", "bert-base", "--budget", "40", "--gpu", "A10G"], 0),
    ("check", ["check", "configs/ci/srift.yaml"], None),
    ("catalog", ["catalog", "list", "--gpu", "H100", "--infra", "aws,gcp"], 0),
    ("catalog", ["catalog", "gpus", "--infra", "aws/us-west-2", "--sort", "price"], 0),
    ("catalog", ["catalog", "show", "gpu_8x_h100_sxm5", "--infra", "lambda"], 0),
    ("catalog", ["catalog", "show", "g6e.12xlarge", "--infra", "aws/us-west-2"], 0),
])
def test_every_json_document_validates_against_its_schema(tmp_path, monkeypatch, name, args, code):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "doc.json"
    got = main([*args, "--format", "json", "--out-file", str(out)])
    assert got == code if code is not None else got in (0, 1)  # check: 1 when a limit is broken
    doc = json.loads(out.read_text())
    assert doc["schema"] == f"srift.{name}/v1"
    assert _errors(name, doc) == []


def test_a_document_of_another_kind_or_a_wrong_type_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    doc = _run(tmp_path, ["predict", "--model", "resnet50", "--instance", "p3.2xlarge"])
    assert _errors("recommend", doc)  # the schema names the kind
    doc["gpus"] = "one"
    assert any(e.startswith("gpus:") for e in _errors("predict", doc))
    del doc["iteration_time_s"]
    assert any("'iteration_time_s' is a required property" in e for e in _errors("predict", doc))


def test_the_profiles_srift_ships_and_writes_validate():
    for path in sorted((ROOT / "profiles").glob("*.yaml")):
        data = read_yaml(path, "profile")
        assert _errors("profile", data) == [], path.name
        written = json.loads(json.dumps(Profile.from_dict(data, str(path)).to_dict()))  # what srift writes
        assert _errors("profile", written) == [], path.name
    assert _errors("profile", {"schema": "srift.profile/v1", "name": "x", "batch_size": 8, "precision": "fp32"})  # no layers


def _make_schemas() -> Any:
    spec = importlib.util.spec_from_file_location("make_schemas", ROOT / "scripts" / "make_schemas.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_job_file_schema_is_the_one_the_option_table_generates():
    assert _make_schemas().jobfile_schema() == _schema("srift.yaml")


@pytest.mark.parametrize("job,ok", [
    ({}, True),
    (None, False),
    ({"model": "resnet50", "batch_size": 64, "epochs": 90, "dataset_size": 1281167, "instance": "p4d.24xlarge:2"}, True),
    ({"profile": ["a.yaml", "b.yaml"], "steps": 100, "global_batch_size": 64}, True),
    ({"model": "resnet50", "limits": {"max_cost_usd": 200, "max_hours": 6}}, True),
    ({"model": "resnet50", "batch_sise": 64}, False),  # unknown key
    ({"model": "resnet50", "batch_size": 0}, False),
    ({"model": "resnet50", "batch_size": 6.5}, False),
    ({"model": "resnet50", "precision": "fp7"}, False),
    ({"model": "resnet50", "spot": "yes"}, False),
    ({"model": "resnet50", "confidence": 1.0}, False),
    ({"model": "resnet50", "limits": {"max_cost_usd": 0.001}}, False),  # under a cent
    ({"model": "resnet50", "limits": {"max_dollars": 5}}, False),
])
def test_the_job_file_schema_agrees_with_srift_check(tmp_path, job, ok):
    """What the schema admits, `srift check` reads; what it refuses, srift refuses (exit 2)."""
    if job is not None:
        assert (_errors("srift.yaml", job) == []) == ok, _errors("srift.yaml", job)
    f = tmp_path / "srift.yaml"
    f.write_text(yaml.safe_dump(job if job is not None else [1]))
    if not ok:
        assert main(["check", str(f), "--instance", "p3.2xlarge"]) == 2
    assert _errors("srift.yaml", read_yaml(ROOT / "configs/ci/srift.yaml", "job file")) == []


def test_skypilots_own_task_schema_admits_the_hand_off_tasks(tmp_path):
    """SkyPilot's task and resources schemas (sky/utils/schemas.py of skypilot 0.14.1, saved in
    tests/fixtures/skypilot/) admit every task srift writes, skypilot not installed; a misspelt key
    is refused, so the check can fail."""
    task_schema, resources_schema = (json.loads((SKYPILOT / f"{n}-schema-0.14.1.json").read_text()) for n in ("task", "resources"))

    def errors(task: dict[str, Any]) -> list[str]:
        return [e.message for e in jsonschema.Draft202012Validator(task_schema).iter_errors(task)] + \
               [e.message for e in jsonschema.Draft202012Validator(resources_schema).iter_errors(task["resources"])]

    for i, args in enumerate([["recommend", "--model", "resnet50", "--budget", "20"],
                              ["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2", "--spot"],
                              ["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:4", "--seq-len", "8192", "--batch-size", "1"],
                              ["predict", "--model", "resnet50", "--instance", "n1-highmem-8-t4x1:2", "--region", "gcp/us-central1"],
                              ["predict", "--model", "resnet50", "--instance", "Standard_ND96asr_v4:2", "--region", "azure/eastus"]]):
        task_file = tmp_path / f"task{i}.yaml"
        assert main([*args, "--skypilot", str(task_file)]) == 0
        task = yaml.safe_load(task_file.read_text())
        assert errors(task) == [], args
    task["resources"]["instance_typ"] = task["resources"].pop("instance_type")
    assert errors(task)
    task["num_node"] = task["resources"]["instance_type"] = task.pop("num_nodes")
    assert errors(task)

"""Write the JSON Schemas of srift's documents under schemas/ (development time; commit the result).

- ``srift.yaml.schema.json``, the job file of `srift check`: generated from the job-option table
  (srift/job_options.py) and srift/jobfile.py's fields, types and bounds, so it is exact.
- ``predict``, ``recommend``, ``check``, ``catalog`` (``--format json``) and ``profile``: inferred from
  real documents, those of the commands in ``SAMPLES`` and the zoo profiles under profiles/: a key
  every sample has is required, a value takes the JSON types it took in any sample, an array's
  items the union of theirs, a number any number. A value seen only as null is left open (any
  type, described so).

    python scripts/make_schemas.py          # rewrite schemas/
    python scripts/make_schemas.py --check  # exit 1 when schemas/ is not what this writes

tests/test_schemas.py validates other real documents against the committed schemas.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.files import read_yaml  # noqa: E402
from srift.jobfile import BOUNDS, FIELDS, LIMITS, LOW_BOUNDS  # noqa: E402
from srift.job_options import JOB_OPTIONS  # noqa: E402

DRAFT = "https://json-schema.org/draft/2020-12/schema"
BASE = "https://github.com/OWNER/srift/schemas/"  # an identifier, not a download location
CHECK_JOB = {"model": "resnet50", "batch_size": 64, "precision": "amp", "steps": 20000, "instance": "p3.16xlarge:2",
             "limits": {"max_cost_usd": 500, "max_hours": 24, "max_usd_per_hour": 30}}
SAMPLES: dict[str, list[list[str]]] = {
    "predict": [["predict", "--model", "resnet50", "--cluster", "configs/clusters/ib-64.yaml"],
                ["predict", "--model", "resnet50", "--instance", "p4d.24xlarge:2", "--spot"],
                ["predict", "--model", "resnet50", "--instance", "a2-highgpu-8g", "--infra", "gcp", "--spot"],
                ["predict", "--model", "llama3-70b", "--instance", "p5.48xlarge:4", "--layout", "tp=8,pp=4"],
                ["predict", "--model", "mixtral-8x7b", "--instance", "p5.48xlarge:2", "--layout", "tp=1,pp=1,ep=8"],
                ["predict", "--model", "bert-large", "--instance", "p4d.24xlarge", "--optimizer", "kfac"]],
    "recommend": [["recommend", "--model", "resnet50", "--budget", "20"],
                  ["recommend", "--model", "llama3-8b", "--deadline", "24", "--tokens", "1e9"],
                  ["recommend", "--model", "gpt2", "--budget", "30", "--infra", "gcp,lambda,azure", "--spot"]],
    "check": [["check", "JOBFILE"]],
    "catalog": [["catalog", "list", "--gpu", "A100"], ["catalog", "list", "--infra", "gcp,lambda,azure"], ["catalog", "gpus"],
                ["catalog", "show", "p4d.24xlarge"], ["catalog", "show", "a2-highgpu-1g", "--infra", "gcp"],
                ["catalog", "show", "gpu_1x_a100", "--infra", "lambda"], ["catalog", "show", "Standard_NC24ads_A100_v4", "--infra", "azure"]],
}
_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null", list: "array", dict: "object"}


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One schema that admits what ``a`` and ``b`` admit (both inferred by ``_infer``)."""
    types = sorted(set(a["type"]) | set(b["type"]))
    out: dict[str, Any] = {"type": types}
    if "properties" in a or "properties" in b:
        pa, pb = a.get("properties", {}), b.get("properties", {})
        out["properties"] = {k: _merge(pa[k], pb[k]) if k in pa and k in pb else pa.get(k) or pb[k] for k in {**pa, **pb}}
        ra, rb = a.get("required"), b.get("required")  # None: not an object in that sample
        out["required"] = sorted(set(ra) & set(rb)) if ra is not None and rb is not None else sorted(ra or rb or [])
    if "items" in a or "items" in b:
        out["items"] = _merge(a["items"], b["items"]) if "items" in a and "items" in b else a.get("items") or b["items"]
    return out


def _infer(value: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": [_TYPES[type(value)]]}
    if isinstance(value, dict):
        schema["properties"] = {str(k): _infer(v) for k, v in value.items()}
        schema["required"] = sorted(str(k) for k in value)
    elif isinstance(value, list) and value:
        items = [_infer(v) for v in value]
        merged = items[0]
        for s in items[1:]:
            merged = _merge(merged, s)
        schema["items"] = merged
    return schema


def _finish(schema: dict[str, Any]) -> dict[str, Any]:
    """Plain JSON Schema: an integer admits a number, a type seen only as null stays open."""
    types = set(schema.pop("type"))
    if "integer" in types:  # 80 in one document may be 80.5 in another
        types = (types - {"integer"}) | {"number"}
    if types == {"null"}:
        schema["description"] = "only null in the samples this schema was inferred from"
    else:
        schema["type"] = sorted(types)[0] if len(types) == 1 else sorted(types)
    for sub in schema.get("properties", {}).values():
        _finish(sub)
    if "items" in schema:
        _finish(schema["items"])
    if "properties" in schema:
        schema["properties"] = dict(sorted(schema["properties"].items()))
    return schema


def inferred(name: str, documents: list[Any], title: str) -> dict[str, Any]:
    merged = _infer(documents[0])
    for doc in documents[1:]:
        merged = _merge(merged, _infer(doc))
    body = _finish(merged)
    if name != "profile":
        body["properties"]["schema"] = {"const": f"srift.{name}/v1"}
    return {"$schema": DRAFT, "$id": f"{BASE}{name}.schema.json", "title": title, **body}


def run_samples(name: str) -> list[Any]:
    """The JSON documents of ``SAMPLES[name]``, run in this process from the repository root."""
    from srift.cli import main

    docs = []
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp, "srift.yaml")
        job.write_text(json.dumps(CHECK_JOB))
        for i, args in enumerate(SAMPLES[name]):
            out = Path(tmp, f"{i}.json")
            args = [str(job) if a == "JOBFILE" else a for a in args]
            with contextlib.redirect_stdout(io.StringIO()):  # --format json prints it too
                code = main([*args, "--format", "json", "--out-file", str(out)])
            if code not in (0, 1):  # check exits 1 when a limit is broken: still a document
                raise SystemExit(f"{' '.join(args)} exited {code}")
            docs.append(json.loads(out.read_text()))
    return docs


def _job_value(name: str, kind: type) -> dict[str, Any]:
    option = next((o for o in JOB_OPTIONS if o.name == name), None)
    if kind is bool:
        return {"type": "boolean"}
    if kind is str:
        text: dict[str, Any] = {"type": "string", "minLength": 1}
        if option is not None and option.choices:
            text["enum"] = list(option.choices)
        return text
    number: dict[str, Any] = {"type": "integer" if kind is int else "number", "maximum": BOUNDS.get(name)}
    number["minimum" if name in LOW_BOUNDS else "exclusiveMinimum"] = LOW_BOUNDS.get(name, 0)
    if name == "confidence":
        number = {"type": "number", "minimum": 0.5, "exclusiveMaximum": 1.0}
    return {k: v for k, v in number.items() if v is not None}


def jobfile_schema() -> dict[str, Any]:
    """The job file's schema, from the fields srift/jobfile.py reads (unknown keys are refused)."""
    props: dict[str, Any] = {}
    for name, (kind, description) in FIELDS.items():
        props[name] = {"description": description, **_job_value(name, kind)}
    props["profile"] = {"description": FIELDS["profile"][1], "oneOf": [
        {"type": "string", "minLength": 1}, {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": 64}]}
    props["limits"] = {"type": ["object", "null"], "additionalProperties": False,
                       "properties": {k: _job_value(k, float) for k in LIMITS}}
    return {"$schema": DRAFT, "$id": f"{BASE}srift.yaml.schema.json",
            "title": "srift check job file (srift.yaml); every key is also a flag and a SRIFT_ variable",
            "type": "object", "additionalProperties": False, "properties": props}


def all_schemas() -> dict[str, dict[str, Any]]:
    out = {"srift.yaml": jobfile_schema()}
    for name in SAMPLES:
        out[name] = inferred(name, run_samples(name), f"srift {name} --format json (schema srift.{name}/v1)")
    profiles = [read_yaml(p, "profile") for p in sorted((ROOT / "profiles").glob("*.yaml"))]
    out["profile"] = inferred("profile", profiles, "srift profile file (schema srift.profile/v1)")
    out["profile"]["properties"]["schema"] = {"const": "srift.profile/v1"}
    # Required: what Profile.from_dict requires (srift/profile.py), not all the zoo profiles have.
    out["profile"]["required"] = ["batch_size", "layers", "name", "precision", "schema"]
    out["profile"]["properties"]["layers"]["items"]["required"] = ["name", "type"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with schemas/ instead of writing")
    args = parser.parse_args()
    import os

    os.chdir(ROOT)
    stale = []
    for name, schema in all_schemas().items():
        path = ROOT / "schemas" / f"{name}.schema.json"
        text = json.dumps(schema, indent=1, sort_keys=False) + "\n"
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"stale: {', '.join(stale)}; run python scripts/make_schemas.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())

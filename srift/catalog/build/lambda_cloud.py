"""The Lambda catalog: one on-demand price per instance type, listed in every region; no spot.

Lambda's catalog lists each type in all 17 regions at one price; a row does not mean the type is
available there (multicloud README). Rows are kept per region, so ``--infra lambda/us-east-1``
works, and flagged ``availability-unverified``. Lambda has no spot market: spot is empty.
"""

from __future__ import annotations

import ast
from pathlib import Path

from srift.catalog.build.common import Machine, Row, RowPrice, make_row, network_columns, opt_float, read_csv, rules
from srift.catalog.instances import FLAG_AVAILABILITY_UNVERIFIED
from srift.hardware import gpus


def build(data: Path) -> list[Row]:
    """Every Lambda row from data/skypilot-catalog-multicloud/lambda-gpu-vms.csv."""
    return build_rows(read_csv(data / "skypilot-catalog-multicloud" / "lambda-gpu-vms.csv"))[0]


def build_rows(source_rows: list[dict[str, str]], strict: bool = True) -> tuple[list[Row], dict[str, object]]:
    """Lambda rows from SkyPilot's Lambda rows; plus the types left out. ``strict`` (the bundled
    build): a type without a family or GPU rule stops the build; else (a refresh of a newer
    catalog) it is left out and named."""
    rule, src = rules()["lambda"], rules()["sources"]["skypilot"]["lambda"]
    known = gpus()
    rows: list[Row] = []
    left_out: dict[str, str] = {}
    for r in source_rows:
        itype = r["InstanceType"]
        gpu = rule["type_gpus"].get(itype) or rule["gpus"].get(r["AcceleratorName"])
        why = (f"no family for {itype} in configs/catalog/rules.yaml" if itype not in rule["families"]
               else f"{itype} has GPU {r['AcceleratorName']!r} without a spec" if gpu not in known else "")
        if why:
            if strict:
                raise SystemExit(f"lambda-gpu-vms.csv: {why}")
            left_out[itype] = why
            continue
        # Lambda's TotalGpuMemoryInMiB is per GPU (README); the per-GPU size is in Gpus[0].
        info = ast.literal_eval(r["GpuInfo"])
        family = rule["families"][itype]
        count = int(float(r["AcceleratorCount"]))
        net, net_flags = network_columns("lambda", family, itype)
        rows.append(make_row(
            cloud="lambda", region=r["Region"],
            machine=Machine(instance_type=itype, family=family, vm_type=itype,
                            accelerators=f"{r['AcceleratorName']}:{count}", gpu_name=str(gpu), gpu_count=count,
                            gpu_memory_gib=float(info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]) / 1024,
                            vcpus=int(float(r["vCPUs"])), memory_gib=float(r["MemoryGiB"]),
                            host_arch="arm64" if gpu in rule["arm64_gpus"] else "x86_64"),
            network=net, price=RowPrice(on_demand=opt_float(r["Price"]), spot=opt_float(r["SpotPrice"])),
            flags=[FLAG_AVAILABILITY_UNVERIFIED] + net_flags, as_of="", source=src,
        ))
    return rows, {"left_out": left_out}

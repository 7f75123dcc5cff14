"""The Azure catalog: N-series sizes from SkyPilot's older v6 file (8 US regions, date not recorded).

Rules (configs/catalog/rules.yaml ``azure``): ``*_Promo`` sizes (legacy promotional prices) are
left out; sizes whose GPU srift has no spec for are left out with the reason; source values that
contradict Azure's documentation are corrected and flagged ``corrected``; every row is flagged
``old-snapshot``. K80 and M60 sizes stay in the catalog: the supported-hardware rule
(``srift.catalog.support``) leaves them out of a search. Spot at on-demand is no spot offer.
"""

from __future__ import annotations

import re
from pathlib import Path

from srift.catalog.build.common import Machine, Row, RowPrice, ZonePrice, make_row, network_columns, opt_float, read_csv, regional_price, rules
from srift.catalog.instances import FLAG_CORRECTED, FLAG_OLD_SNAPSHOT
from srift.hardware import gpus


def family_of(instance_type: str, patterns: list[dict[str, str]]) -> str | None:
    """The N-series family of an Azure size by the rules' patterns, or None."""
    for p in patterns:
        if re.match(p["pattern"], instance_type):
            return p["family"]
    return None


def build(data: Path) -> tuple[list[Row], dict[str, object]]:
    """Every Azure row from data/skypilot-catalog-multicloud/azure-gpu-vms.csv; plus what was left out."""
    return build_rows(read_csv(data / "skypilot-catalog-multicloud" / "azure-gpu-vms.csv"))


def build_rows(source_rows: list[dict[str, str]], strict: bool = True) -> tuple[list[Row], dict[str, object]]:
    """Azure rows from SkyPilot's Azure rows; plus what was left out. ``strict`` (the bundled
    build): a size that matches no family or GPU rule stops the build; else (a refresh of a newer
    catalog) it is left out and named."""
    all_rules = rules()
    rule, src = all_rules["azure"], all_rules["sources"]["skypilot"]["azure"]
    known = gpus()
    rows: list[Row] = []
    left_out: dict[str, str] = {}
    for r in source_rows:
        itype = r["InstanceType"]
        if itype.endswith(rule["drop_suffix"]):
            left_out[itype] = "legacy promotional price"
            continue
        if itype in rule["leave_out"]:
            left_out[itype] = rule["leave_out"][itype]
            continue
        family = family_of(itype, rule["families"])
        gpu = rule["gpus"].get(r["AcceleratorName"])
        if family is None or gpu not in known:
            if strict:
                raise SystemExit(f"azure-gpu-vms.csv: {itype} ({r['AcceleratorName']}) matches no family/GPU rule")
            left_out[itype] = f"{r['AcceleratorName'] or 'no accelerator'}: no family or GPU rule in configs/catalog/rules.yaml"
            continue
        count, flags = int(float(r["AcceleratorCount"])), [FLAG_OLD_SNAPSHOT]
        fix = rule["corrections"].get(itype)
        if fix:
            count = int(fix["gpu_count"])
            flags.append(FLAG_CORRECTED)
        price = regional_price([ZonePrice(r["Region"], opt_float(r["Price"]), opt_float(r["SpotPrice"]))],
                               float(all_rules["spot_cap_ratio"]))
        net, net_flags = network_columns("azure", family, itype)
        rows.append(make_row(
            cloud="azure", region=r["Region"],
            machine=Machine(instance_type=itype, family=family, vm_type=itype,
                            accelerators=f"{r['AcceleratorName']}:{count}", gpu_name=gpu, gpu_count=count,
                            gpu_memory_gib=known[gpu].memory_gib,  # the v6 file gives the GPU name only
                            vcpus=int(float(r["vCPUs"])), memory_gib=float(r["MemoryGiB"]), host_arch="x86_64"),
            network=net, price=RowPrice(on_demand=price.on_demand, spot=price.spot),
            flags=flags + price.flags + net_flags, as_of="", source=src,
        ))
    return rows, {"left_out": left_out}

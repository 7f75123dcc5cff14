#!/usr/bin/env python3
"""Build configs/aws/us-east-1.csv, srift's bundled EC2 GPU catalog, from data/.

Sources (see each folder's README):
  data/karpenter-aws: instance types, GPUs, vCPUs, memory, network, EFA, on-demand price.
  data/skypilot-catalog-aws-spot-snapshot: per-zone spot prices for some GPU types.

Rules (also in configs/aws/README.md):
  * GPU instance types only (NVIDIA and AMD GPUs); Inferentia, Trainium, Gaudi and Qualcomm
    accelerators and fractional-GPU types (g6f, gr6f: gpu_count 0) are left out.
  * Spot price: median over the zones of the snapshot, leaving out zones priced at the on-demand cap
    (no spot capacity); if every zone is capped the price is the cap. Types without a snapshot row
    get on-demand x the median observed spot/on-demand ratio of their family, or of their class
    (p = training, g = graphics/inference) when the family has none; flagged spot_estimated.
  * Spot interruptions per instance-hour: the AWS Spot Advisor data is not available offline. We map
    the spot/on-demand ratio to an Advisor-style monthly interruption band (a scarce type is both
    dearer on spot and more often reclaimed): ratio < 0.25 -> 5-10 %, < 0.40 -> 10-15 %,
    < 0.55 -> 15-20 %, else > 20 % (taken as 25 %); the band's midpoint / 730 h gives the hourly rate
    per instance. This is an assumption, documented as such; `srift catalog refresh` keeps it.
  * Network: Karpenter's baseline Mbit/s; blank for old "Up to 10 Gigabit" sizes, taken as 10 Gb/s.

Run: python scripts/build_catalog.py [--data data] [--out configs/aws/us-east-1.csv]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.catalog.instances import band_for_ratio, rows_to_csv  # noqa: E402
from srift.files import atomic_write_text  # noqa: E402
from srift.hardware import family_link, find_gpu, gpus  # noqa: E402

AS_OF = "2026-07-20"  # Karpenter's pricing file: "generated at 2026-07-20T13:44:30Z for us-east-1"
REGION = "us-east-1"
UP_TO_10G_MBPS = 10000


def canonical_gpu(name: str, memory_mib: float) -> str | None:
    """Map Karpenter's gpu_name plus memory to a configs/gpus.yaml key (V100/A100 by memory)."""
    gib = memory_mib / 1024
    if name == "v100":
        return "V100-32GB" if gib > 20 else "V100-16GB"
    if name == "a100":
        return "A100-80GB" if gib > 50 else "A100-40GB"
    return find_gpu(name)


def spot_medians(path: Path) -> dict[str, tuple[float, float]]:
    """instance_type -> (median spot over uncapped zones, on-demand) from the snapshot."""
    zones: dict[str, list[float]] = {}
    ondemand: dict[str, float] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            od = float(row["ondemand_usd_per_hour"])
            ondemand[row["instance_type"]] = od
            if row["spot_usd_per_hour"]:
                zones.setdefault(row["instance_type"], []).append(float(row["spot_usd_per_hour"]))
    out = {}
    for itype, prices in zones.items():
        od = ondemand[itype]
        uncapped = [p for p in prices if p < od * 0.999]
        out[itype] = (statistics.median(uncapped or prices), od)
    return out


def build(data: Path) -> list[dict[str, object]]:
    known = gpus()
    spot = spot_medians(data / "skypilot-catalog-aws-spot-snapshot" / "spot_us_east_1_gpu_subset.csv")
    family_ratios: dict[str, list[float]] = {}
    for itype, (price, od) in spot.items():
        family_ratios.setdefault(itype.split(".")[0], []).append(price / od)
    class_ratios: dict[str, list[float]] = {}
    for fam, ratios in family_ratios.items():
        class_ratios.setdefault(fam[0], []).extend(ratios)

    rows = []
    with open(data / "karpenter-aws" / "instance_types_gpu.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            if not r["gpu_name"] or not r["gpu_count"] or int(r["gpu_count"]) < 1:
                continue
            gpu = canonical_gpu(r["gpu_name"], float(r["gpu_memory_mib_per_gpu"]))
            if gpu is None or gpu not in known:
                continue  # a GPU without a spec (Gaudi): srift cannot model it
            family = r["family"]
            link = family_link(family)
            if link is None:
                raise SystemExit(f"no intra-node link for family {family}: add it to configs/gpus.yaml")
            od = float(r["ondemand_usd_per_hour_us_east_1"]) if r["ondemand_usd_per_hour_us_east_1"] else None
            itype = r["instance_type"]
            if itype in spot:
                spot_price, estimated = spot[itype][0], False
                ratio = spot_price / spot[itype][1]
            else:
                ratios = family_ratios.get(family) or class_ratios.get(family[0]) or [v for vs in class_ratios.values() for v in vs]
                ratio = statistics.median(ratios)
                spot_price, estimated = (od * ratio if od is not None else None), True
            band, rate = band_for_ratio(ratio)
            mbps = float(r["network_bandwidth_mbps"]) if r["network_bandwidth_mbps"] else UP_TO_10G_MBPS
            rows.append({
                "instance_type": itype,
                "family": family,
                "gpu_name": gpu,
                "gpu_count": int(r["gpu_count"]),
                "gpu_memory_gib": round(float(r["gpu_memory_mib_per_gpu"]) / 1024, 2),
                "vcpus": int(r["vcpus"]),
                "memory_gib": round(float(r["memory_mib"]) / 1024, 2),
                "network_gbps": mbps / 1000,
                "efa": bool(r["efa_interfaces"] and int(r["efa_interfaces"]) > 0),
                "intra_node": link,
                "on_demand_usd_per_hour": "" if od is None else round(od, 6),
                "spot_usd_per_hour": "" if spot_price is None else round(spot_price, 6),
                "spot_estimated": estimated,
                "spot_interruption_band": band,
                "spot_interruption_per_hour": round(rate, 8),
                "region": REGION,
                "as_of": AS_OF,
                "source": "karpenter-aws@1d927085" + ("" if estimated else "; skypilot-catalog@00148f2a spot"),
            })
    rows.sort(key=lambda row: (str(row["family"]), int(row["gpu_count"]), float(row["vcpus"])))  # type: ignore[arg-type]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "data")
    ap.add_argument("--out", type=Path, default=ROOT / "configs" / "aws" / f"{REGION}.csv")
    args = ap.parse_args()
    rows = build(args.data)
    atomic_write_text(args.out, rows_to_csv(rows))
    priced = sum(1 for r in rows if r["on_demand_usd_per_hour"] != "")
    print(f"wrote {args.out}: {len(rows)} GPU instance types, {priced} with an on-demand price")
    return 0


if __name__ == "__main__":
    sys.exit(main())

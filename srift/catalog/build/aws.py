"""The AWS catalog: every region, from SkyPilot's per-zone prices, Karpenter's EC2 facts and us-east-1 list prices.

Sources (data/, see each README):
  * karpenter-aws/instance_types_gpu.csv: the EC2 facts of every GPU type (GPU, vCPUs, memory,
    baseline network, EFA, CPU architecture) and the us-east-1 on-demand list price (2026-07-20).
  * skypilot-catalog-multicloud/aws-gpu-vms.csv: on-demand and spot per availability zone, 22 regions
    (capture date not recorded; its p4d/p4de/p5/p5en prices predate AWS's mid-2025 price cut).
  * skypilot-catalog-aws-spot-snapshot: a newer per-zone spot snapshot of some types in us-east-1.

Rules:
  * Hardware always from Karpenter; GPU instance types only (NVIDIA and AMD GPUs, as before:
    Inferentia, Trainium, Gaudi and Qualcomm accelerators and fractional GPUs are left out).
  * On-demand: us-east-1 from Karpenter. Other regions: SkyPilot's regional price; where SkyPilot's
    us-east-1 price of the type differs from Karpenter's newer one (the price cut), the regional
    prices are rebased by Karpenter/SkyPilot in us-east-1 (the regional ratio kept), flagged
    ``on-demand-rebased`` (an estimated price). Spot is a market, not a list price: it is never
    scaled by the on-demand cut; the snapshot's spot price stays as it is (no offer where it is at
    or above the rebased on-demand price).
  * Spot: us-east-1 from the newer snapshot where it has the type, else SkyPilot's zones; the median
    of zones that offer spot (see ``regional_price``). Types SkyPilot lacks (us-east-1 rows from
    Karpenter alone) have no spot price: ``srift catalog refresh`` reads the Spot Advisor's.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from srift.catalog.build.common import (
    Machine, Row, RowPrice, ZonePrice, make_row, network_columns, opt_float, read_csv, regional_price, rules,
)
from srift.catalog.instances import FLAG_NO_SPOT_DISCOUNT, FLAG_ON_DEMAND_REBASED
from srift.hardware import find_gpu, gpus

REFERENCE_REGION = "us-east-1"
_REBASE_TOLERANCE = 0.005  # prices that agree within 0.5 % are the same list price


def canonical_gpu(name: str, memory_mib: float) -> str | None:
    """A Karpenter/SkyPilot GPU name plus per-GPU memory -> configs/gpus.yaml key (V100/A100 by memory)."""
    gib = memory_mib / 1024
    low = name.lower()
    if low.startswith("v100"):
        return "V100-32GB" if gib > 20 else "V100-16GB"
    if low.startswith("a100"):
        return "A100-80GB" if gib > 50 else "A100-40GB"
    return find_gpu(name)


@dataclass(frozen=True)
class Hardware:
    """The EC2 facts of one type (Karpenter)."""

    family: str
    gpu: str
    gpu_count: int
    gpu_memory_gib: float
    vcpus: int
    memory_gib: float
    host_arch: str
    baseline_gbps: float | None
    efa: bool
    od_reference: float | None  # us-east-1 on-demand list price


def _hardware(data: Path) -> dict[str, Hardware]:
    known = gpus()
    out: dict[str, Hardware] = {}
    for r in read_csv(data / "karpenter-aws" / "instance_types_gpu.csv"):
        if not r["gpu_name"] or not r["gpu_count"] or int(r["gpu_count"]) < 1:
            continue  # Inferentia/Trainium/Qualcomm (no GPU), fractional GPUs (count 0)
        gpu = canonical_gpu(r["gpu_name"], float(r["gpu_memory_mib_per_gpu"]))
        if gpu is None or gpu not in known:
            continue  # a GPU without a spec (Gaudi): srift cannot model it
        out[r["instance_type"]] = Hardware(
            family=r["family"], gpu=gpu, gpu_count=int(r["gpu_count"]),
            gpu_memory_gib=float(r["gpu_memory_mib_per_gpu"]) / 1024, vcpus=int(r["vcpus"]),
            memory_gib=float(r["memory_mib"]) / 1024,
            host_arch={"amd64": "x86_64", "arm64": "arm64"}[r["arch"]],
            baseline_gbps=float(r["network_bandwidth_mbps"]) / 1000 if r["network_bandwidth_mbps"] else None,
            efa=bool(r["efa_interfaces"] and int(r["efa_interfaces"]) > 0),
            od_reference=opt_float(r["ondemand_usd_per_hour_us_east_1"]),
        )
    return out


def _skypilot_zones(data: Path, hardware: dict[str, Hardware]
                    ) -> tuple[dict[tuple[str, str], dict[str, ZonePrice]], dict[str, str]]:
    """(type, region) -> AZ -> price, and SkyPilot's accelerator spec per type (``A100-80GB:8``).

    Duplicate AZ rows (p4de: one per GPU name) merge: the spot price is whichever has one.
    """
    out: dict[tuple[str, str], dict[str, ZonePrice]] = defaultdict(dict)
    accel: dict[str, str] = {}
    for r in read_csv(data / "skypilot-catalog-multicloud" / "aws-gpu-vms.csv"):
        itype = r["InstanceType"]
        if itype not in hardware:
            raise SystemExit(f"aws-gpu-vms.csv has {itype}, which the Karpenter data lacks: add it there first")
        accel.setdefault(itype, f"{r['AcceleratorName']}:{int(float(r['AcceleratorCount']))}")
        zones = out[(itype, r["Region"])]
        od, spot = opt_float(r["Price"]), opt_float(r["SpotPrice"])
        prev = zones.get(r["AvailabilityZone"])
        if prev is not None:
            if prev.on_demand != od:
                raise SystemExit(f"{itype} {r['AvailabilityZone']}: duplicate rows with different on-demand prices")
            spot = prev.spot if prev.spot is not None else spot
        zones[r["AvailabilityZone"]] = ZonePrice(r["AvailabilityZone"], od, spot)
    return out, accel


def _snapshot_zones(data: Path) -> dict[str, list[ZonePrice]]:
    out: dict[str, list[ZonePrice]] = defaultdict(list)
    for r in read_csv(data / "skypilot-catalog-aws-spot-snapshot" / "spot_us_east_1_gpu_subset.csv"):
        out[r["instance_type"]].append(ZonePrice(r["availability_zone_id"], float(r["ondemand_usd_per_hour"]),
                                                 opt_float(r["spot_usd_per_hour"])))
    return out


def build(data: Path) -> list[Row]:
    """Every AWS row (see the module docstring)."""
    rule = rules()
    cap, src = rule["spot_cap_ratio"], rule["sources"]
    hardware = _hardware(data)
    zones, accelerators = _skypilot_zones(data, hardware)
    snapshot = _snapshot_zones(data)

    # Rebase factors: Karpenter's us-east-1 list price over SkyPilot's, per type.
    factor: dict[str, float] = {}
    for itype, hw in hardware.items():
        ref = hw.od_reference
        sky = regional_price(zones[(itype, REFERENCE_REGION)].values(), cap).on_demand if (itype, REFERENCE_REGION) in zones else None
        if ref is not None and sky is not None and abs(ref / sky - 1) > _REBASE_TOLERANCE:
            factor[itype] = ref / sky

    rows: list[Row] = []

    def row(itype: str, region: str, od: float | None, spot: float | None, estimated: bool, nzones: int | None,
            flags: list[str], as_of: str, source: str) -> Row:
        hw = hardware[itype]
        net, net_flags = network_columns("aws", hw.family, itype, efa=hw.efa, baseline_gbps=hw.baseline_gbps)
        return make_row(
            cloud="aws", region=region,
            machine=Machine(instance_type=itype, family=hw.family, vm_type=itype,
                            accelerators=accelerators.get(itype, f"{hw.gpu}:{hw.gpu_count}"), gpu_name=hw.gpu,
                            gpu_count=hw.gpu_count, gpu_memory_gib=hw.gpu_memory_gib,
                            vcpus=hw.vcpus, memory_gib=hw.memory_gib, host_arch=hw.host_arch),
            network=net, price=RowPrice(on_demand=od, spot=spot, spot_estimated=estimated, zones=nzones),
            flags=flags + net_flags, as_of=as_of, source=source,
        )

    for (itype, region), by_zone in sorted(zones.items()):
        price = regional_price(by_zone.values(), cap)
        flags = list(price.flags)
        f = factor.get(itype, 1.0)
        spot, spot_src = price.spot, f"{src['skypilot']['aws']} spot"
        if region == REFERENCE_REGION:
            od, as_of = hardware[itype].od_reference, str(src["aws_as_of"])
            if od is None:
                od, as_of = price.on_demand, ""
            if itype in snapshot:
                snap = regional_price(snapshot[itype], cap)
                spot, spot_src, flags = snap.spot, f"{src['aws_spot_snapshot']} spot", list(snap.flags)
            source = f"{src['karpenter']}; {spot_src}"
        else:
            od, as_of, source = price.on_demand, "", str(src["skypilot"]["aws"])
            if f != 1.0:
                od = None if od is None else od * f
                flags.append(FLAG_ON_DEMAND_REBASED)
                source += f"; on-demand rebased to {src['karpenter']} us-east-1"
        # Spot as the snapshot has it, never scaled by an on-demand cut; at or above the (newer)
        # on-demand price it is no offer.
        if spot is not None and od is not None and spot >= od * cap:
            spot = None
            flags.append(FLAG_NO_SPOT_DISCOUNT)
        rows.append(row(itype, region, od, spot, False, price.zones, flags, as_of, source))

    # Types only Karpenter knows: us-east-1, on-demand only (no spot figure to use as it is).
    covered = {itype for itype, _ in zones}
    for itype, hw in sorted(hardware.items()):
        if itype in covered:
            continue
        od = hw.od_reference
        rows.append(row(itype, REFERENCE_REGION, od, None, False, None, [],
                        str(src["aws_as_of"]) if od is not None else "", str(src["karpenter"])))
    return rows

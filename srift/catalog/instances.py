"""Instance: one EC2 GPU instance type in one region, with prices (bundled catalog or user cache)."""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srift.errors import SriftError, unknown_name_error
from srift.files import cache_dir, configs_dir


@dataclass(frozen=True)
class Instance:
    """One row of the catalog.

    Attributes:
        instance_type: ``p4d.24xlarge``.
        family: ``p4d``.
        gpu_name: Canonical GPU name from configs/gpus.yaml (``A100-40GB``).
        gpu_count: GPUs per instance.
        gpu_memory_gib: Memory per GPU, GiB.
        vcpus: vCPUs.
        memory_gib: Host memory, GiB.
        network_gbps: Network bandwidth, Gbit/s.
        efa: True when the type has an Elastic Fabric Adapter.
        intra_node: Link between its GPUs (``pcie3``, ``nvlink``, ``nvswitch``...).
        on_demand_usd_per_hour: On-demand Linux price, None when not priced in this region.
        spot_usd_per_hour: Spot price (median over zones), or an estimate (see spot_estimated).
        spot_estimated: True when the spot price is estimated from a spot/on-demand ratio.
        spot_interruption_per_hour: Expected spot interruptions per instance-hour.
        region: AWS region.
        as_of: Date of the prices (ISO).
        source: Where the row came from.
    """

    instance_type: str
    family: str
    gpu_name: str
    gpu_count: int
    gpu_memory_gib: float
    vcpus: int
    memory_gib: float
    network_gbps: float
    efa: bool
    intra_node: str
    on_demand_usd_per_hour: float | None
    spot_usd_per_hour: float | None
    spot_estimated: bool
    spot_interruption_per_hour: float
    region: str
    as_of: str
    source: str

    def usd_per_hour(self, spot: bool) -> float | None:
        """The hourly price on spot or on demand (None when not priced)."""
        return self.spot_usd_per_hour if spot else self.on_demand_usd_per_hour


CSV_COLUMNS = [
    "instance_type", "family", "gpu_name", "gpu_count", "gpu_memory_gib", "vcpus", "memory_gib",
    "network_gbps", "efa", "intra_node", "on_demand_usd_per_hour", "spot_usd_per_hour",
    "spot_estimated", "spot_interruption_band", "spot_interruption_per_hour", "region", "as_of", "source",
]

HOURS_PER_MONTH = 730.0
# Advisor-style monthly interruption bands by spot/on-demand price ratio (see configs/aws/README.md).
_BANDS = ((0.25, "5-10%", 0.075), (0.40, "10-15%", 0.125), (0.55, "15-20%", 0.175), (float("inf"), ">20%", 0.25))


def band_for_ratio(spot_to_on_demand: float) -> tuple[str, float]:
    """Interruption band and expected interruptions per instance-hour for a spot/on-demand ratio.

    An assumption (AWS Spot Advisor data is not available offline): a type whose spot price sits
    close to on-demand is scarce, and scarce capacity is reclaimed more often.
    """
    for upper, band, monthly in _BANDS:
        if spot_to_on_demand < upper:
            return band, monthly / HOURS_PER_MONTH
    raise AssertionError("unreachable")


def _opt_float(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


def _parse_rows(text: str, source: str) -> list[Instance]:
    """Parse catalog CSV text; raise ValueError on any malformed row (a cache is then ignored)."""
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or [c for c in CSV_COLUMNS if c not in reader.fieldnames]:
        raise ValueError(f"{source}: missing columns")
    out = []
    for row in reader:
        out.append(
            Instance(
                instance_type=row["instance_type"],
                family=row["family"],
                gpu_name=row["gpu_name"],
                gpu_count=int(row["gpu_count"]),
                gpu_memory_gib=float(row["gpu_memory_gib"]),
                vcpus=int(row["vcpus"]),
                memory_gib=float(row["memory_gib"]),
                network_gbps=float(row["network_gbps"]),
                efa=row["efa"] == "true",
                intra_node=row["intra_node"],
                on_demand_usd_per_hour=_opt_float(row["on_demand_usd_per_hour"]),
                spot_usd_per_hour=_opt_float(row["spot_usd_per_hour"]),
                spot_estimated=row["spot_estimated"] == "true",
                spot_interruption_per_hour=float(row["spot_interruption_per_hour"]),
                region=row["region"],
                as_of=row["as_of"],
                source=row["source"],
            )
        )
    if not out:
        raise ValueError(f"{source}: no rows")
    return out


def bundled_path(region: str) -> Path:
    return configs_dir() / "aws" / f"{region}.csv"


def cache_path(region: str) -> Path:
    return cache_dir() / "aws" / f"{region}.csv"


_CACHE: dict[str, list[Instance]] = {}


def load_catalog(region: str = "us-east-1") -> list[Instance]:
    """The GPU instance types of a region: the user cache when newer and valid, else the bundled CSV.

    A cache that does not parse (half-written, edited by hand) is never used: srift warns once on
    stderr and falls back to the bundled catalog.

    Raises:
        SriftError: when srift has no catalog for the region.
    """
    if region in _CACHE:
        return _CACHE[region]
    bundled, cached = bundled_path(region), cache_path(region)
    rows: list[Instance] | None = None
    if cached.is_file() and (not bundled.is_file() or cached.stat().st_mtime >= bundled.stat().st_mtime):
        try:
            rows = _parse_rows(cached.read_text(encoding="utf-8"), str(cached))
        except (ValueError, KeyError, TypeError, OSError, UnicodeDecodeError):
            print(f"Warning: ignoring the unreadable catalog cache {cached}; using the bundled catalog.", file=sys.stderr)
    if rows is None:
        if not bundled.is_file():
            raise SriftError(
                f"srift has no catalog for region '{region}'.",
                f"run `srift catalog refresh --region {region}` with AWS credentials, or use --region us-east-1.",
            )
        rows = _parse_rows(bundled.read_text(encoding="utf-8"), str(bundled))
    _CACHE[region] = rows
    return rows


def clear_cache() -> None:
    """Forget loaded catalogs (after a refresh, or in tests)."""
    _CACHE.clear()


def get_instance(instance_type: str, region: str = "us-east-1") -> Instance:
    """Look up one instance type.

    Raises:
        SriftError: for a type not in the catalog, with the closest names.
    """
    rows = load_catalog(region)
    for inst in rows:
        if inst.instance_type == instance_type.lower():
            return inst
    raise unknown_name_error("instance type", instance_type, [i.instance_type for i in rows], "srift catalog list")


def rows_to_csv(rows: list[dict[str, Any]]) -> str:
    """Catalog rows (dicts keyed by CSV_COLUMNS) as CSV text; booleans as true/false."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (str(v).lower() if isinstance(v, bool) else v) for k, v in row.items()})
    return buf.getvalue()

"""Instance: one GPU VM type of one cloud in one region, with its prices; and the catalog CSV format.

The bundled catalog is one CSV per cloud under configs/catalog/ (built by scripts/build_catalog.py,
columns in configs/catalog/README.md); a refreshed region is the same CSV format in the user cache.
"""

from __future__ import annotations

import csv
import io
import math
from datetime import date
from dataclasses import dataclass, field
from typing import Any

from srift.bounds import (
    MAX_GPU_MEMORY_GIB, MAX_GPUS_PER_NODE, MAX_INTERRUPTIONS_PER_HOUR, MAX_NETWORK_GBPS, MAX_NODE_USD_PER_HOUR,
)
from srift.catalog.spot import BAND_MONTHLY_FREQUENCY
from srift.catalog.transports import cluster_network, transports
from srift.cluster import Network

CLOUDS = ("aws", "gcp", "lambda", "azure")
HOST_ARCHES = ("x86_64", "arm64")

# Row flags (the `flags` column, ';'-separated). Each says why a price deserves a second look.
FLAG_SUSPECT_PRICE = "suspect-price"  # the cloud's per-GPU price of this GPU spans > 2x across regions
FLAG_ON_DEMAND_REBASED = "on-demand-rebased"  # regional price scaled to a newer us-east-1 list price
FLAG_SPOT_ABOVE_ON_DEMAND = "spot-above-on-demand-dropped"  # a zone's spot > on-demand was left out
FLAG_NO_SPOT_DISCOUNT = "spot-at-on-demand"  # every zone priced spot at on-demand: no spot offer
FLAG_AVAILABILITY_UNVERIFIED = "availability-unverified"  # listed in every region at one price (Lambda)
FLAG_CORRECTED = "corrected"  # a source value fixed by a documented rule (configs/catalog/rules.yaml)
FLAG_OLD_SNAPSHOT = "old-snapshot"  # from the older Azure catalog (v6)


@dataclass(frozen=True)
class Instance:
    """One row of the catalog: a VM type in one region of one cloud.

    Attributes:
        instance_type: srift's name, unique within (cloud, region): ``p4d.24xlarge``,
            ``a2-highgpu-8g``, ``n1-highmem-8-t4x1`` (a GCP N1 host with attached GPUs),
            ``gpu_8x_h100_sxm5``, ``Standard_ND96asr_v4``.
        family: Instance family / machine series (``p4d``, ``a2-highgpu``, ``n1-t4``, ``ND_A100_v4``).
        gpu_name: Canonical GPU name from configs/gpus.yaml (``A100-40GB``).
        gpu_count: GPUs per instance.
        gpu_memory_gib: Memory per GPU, GiB.
        vcpus: vCPUs.
        memory_gib: Host memory, GiB.
        network_gbps: Per-VM network bandwidth a sustained all-reduce gets, Gbit/s: AWS's baseline
            (not the "up to" burst), a documented figure, or the stated assumption when unknown
            (see ``srift.catalog.network.facts_for``).
        efa: True when the type has an AWS Elastic Fabric Adapter.
        intra_node: Link between its GPUs (``pcie3``, ``nvlink``, ``nvswitch``...); the stated
            assumption when unknown.
        on_demand_usd_per_hour: On-demand price, None when not priced in this region.
        spot_usd_per_hour: Spot price (median over the region's zones), an estimate (see
            ``spot_estimated``), or None when the cloud offers none (Lambda) or the catalog has none.
        spot_estimated: True when the spot price is estimated from a spot/on-demand ratio.
        spot_interruption_per_hour: Expected spot interruptions per instance-hour.
        region: Cloud region (``us-west-2``, ``us-central1``, ``us-east-1``, ``eastus``).
        as_of: Date of the on-demand price (ISO), or "" when the source does not record it.
        source: Where the row came from.
        cloud: ``aws``, ``gcp``, ``lambda`` or ``azure``.
        vm_type: What the cloud calls the VM (``n1-highmem-8`` for ``n1-highmem-8-t4x1``).
        accelerators: SkyPilot's accelerator spec (``A100:8``, ``H100-MEGA:8``).
        host_arch: CPU architecture of the host, ``x86_64`` or ``arm64``.
        network_burst_gbps: The documented figure when it is a burst ("up to N Gigabit"), else
            the same as ``network_gbps`` when documented; None when not documented.
        transport: Inter-VM transport NCCL uses (configs/network.yaml ``transports``).
        spot_interruption_band: Monthly interruption band (``<5%`` ... ``>20%``), "" if no spot.
        zones: Zones of the region offering the type in the source catalog; None when the source
            has no zones (Lambda, Azure, AWS types only in the Karpenter data).
        flags: Row flags (``FLAG_*`` above).
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
    cloud: str = "aws"
    vm_type: str = ""
    accelerators: str = ""
    host_arch: str = "x86_64"
    network_burst_gbps: float | None = None
    transport: str = "tcp"
    spot_interruption_band: str = ""
    zones: int | None = None
    flags: tuple[str, ...] = field(default=())

    def usd_per_hour(self, spot: bool) -> float | None:
        """The hourly price on spot or on demand (None when not priced)."""
        return self.spot_usd_per_hour if spot else self.on_demand_usd_per_hour

    @property
    def infra(self) -> str:
        """SkyPilot's ``--infra`` spelling of where this row is: ``aws/us-west-2``."""
        return f"{self.cloud}/{self.region}"

    @property
    def price_suspect(self) -> bool:
        """True when the catalog's price for this row is flagged as doubtful (see ``flags``)."""
        return FLAG_SUSPECT_PRICE in self.flags

    @property
    def cluster_network(self) -> Network:
        """The cluster-file ``network`` class of the transport (``ethernet``, ``efa``, ``infiniband``)."""
        return cluster_network(self.transport)

    @property
    def hardware_key(self) -> tuple[Any, ...]:
        """What a prediction depends on, not where or at what price: rows with equal keys share one simulation.

        GPU model, count and memory, vCPUs (the input pipeline), the intra-node link and the
        network (bandwidth and transport). Two regions of one type, or the same hardware under
        two names, have equal keys.
        """
        return (self.gpu_name, self.gpu_count, self.gpu_memory_gib, self.vcpus, self.intra_node,
                self.network_gbps, self.transport)


CSV_COLUMNS = [
    "cloud", "region", "instance_type", "family", "vm_type", "accelerators", "gpu_name", "gpu_count",
    "gpu_memory_gib", "vcpus", "memory_gib", "host_arch", "intra_node", "network_gbps", "network_burst_gbps",
    "efa", "transport", "on_demand_usd_per_hour", "spot_usd_per_hour", "spot_estimated", "spot_interruption_band",
    "spot_interruption_per_hour", "zones", "flags", "as_of", "source",
]


def _number(row: dict[str, str], key: str, high: float, low: float = 0.0, optional: bool = False,
            integer: bool = False) -> Any:
    """The cell ``key`` as a finite number in ``[low, high]`` (None for an empty optional cell)."""
    text = row[key]
    if not text and optional:
        return None
    if len(text) > 40:
        raise ValueError(f"{key}: not a number")
    value: float = int(text) if integer else float(text)  # ValueError for anything else
    if not (math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{key}: {text} is outside [{low:g}, {high:g}]")
    return value


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"not a boolean: {text!r}")
    return text == "true"


def _text(row: dict[str, str], key: str, empty_ok: bool = True) -> str:
    text = row[key]
    if (not text and not empty_ok) or len(text) > 400 or not text.isprintable():
        raise ValueError(f"{key}: not a name")
    return text


def parse_rows(text: str, source: str) -> list[Instance]:
    """Parse catalog CSV text, every cell checked (a refreshed cache is read with it too, so a
    hand-edited or corrupted cache never brings a NaN price or an unknown GPU into a prediction).

    Raises:
        ValueError: on a missing column or any malformed row (a cache is then ignored).
    """
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or [c for c in CSV_COLUMNS if c not in reader.fieldnames]:
        raise ValueError(f"{source}: missing columns")
    out = []
    for row in reader:
        if None in row.values() or None in row or row["cloud"] not in CLOUDS or row["host_arch"] not in HOST_ARCHES:
            raise ValueError(f"{source}: malformed row {reader.line_num}")
        try:
            out.append(_instance(row))
        except (ValueError, KeyError) as exc:
            raise ValueError(f"{source}: row {reader.line_num}: {exc}") from None
    if not out:
        raise ValueError(f"{source}: no rows")
    return out


def _instance(row: dict[str, str]) -> Instance:
    from srift.hardware import find_gpu, links

    if find_gpu(row["gpu_name"]) != row["gpu_name"]:
        raise ValueError(f"gpu_name {row['gpu_name'][:40]!r} is not a GPU of configs/gpus.yaml")
    if row["intra_node"] not in links():
        raise ValueError(f"intra_node {row['intra_node'][:40]!r} is not a link of configs/gpus.yaml")
    if row["transport"] not in transports():
        raise ValueError(f"transport {row['transport'][:40]!r} is not one of configs/network.yaml")
    if row["as_of"]:
        date.fromisoformat(row["as_of"])  # ValueError when it is not an ISO date
    if row["spot_interruption_band"] and row["spot_interruption_band"] not in BAND_MONTHLY_FREQUENCY:
        raise ValueError(f"spot_interruption_band {row['spot_interruption_band'][:20]!r} is not a Spot Advisor band")
    return Instance(
        cloud=row["cloud"],
        region=_text(row, "region", empty_ok=False),
        instance_type=_text(row, "instance_type", empty_ok=False),
        family=_text(row, "family"),
        vm_type=_text(row, "vm_type"),
        accelerators=_text(row, "accelerators"),
        gpu_name=row["gpu_name"],
        gpu_count=_number(row, "gpu_count", MAX_GPUS_PER_NODE, low=1, integer=True),
        gpu_memory_gib=_number(row, "gpu_memory_gib", MAX_GPU_MEMORY_GIB, low=1e-9),
        vcpus=_number(row, "vcpus", 1 << 20, low=1, integer=True),
        memory_gib=_number(row, "memory_gib", 1e9),
        host_arch=row["host_arch"],
        intra_node=row["intra_node"],
        network_gbps=_number(row, "network_gbps", MAX_NETWORK_GBPS),
        network_burst_gbps=_number(row, "network_burst_gbps", MAX_NETWORK_GBPS, optional=True),
        efa=_bool(row["efa"]),
        transport=row["transport"],
        on_demand_usd_per_hour=_number(row, "on_demand_usd_per_hour", MAX_NODE_USD_PER_HOUR, optional=True),
        spot_usd_per_hour=_number(row, "spot_usd_per_hour", MAX_NODE_USD_PER_HOUR, optional=True),
        spot_estimated=_bool(row["spot_estimated"]),
        spot_interruption_band=row["spot_interruption_band"],
        spot_interruption_per_hour=_number(row, "spot_interruption_per_hour", MAX_INTERRUPTIONS_PER_HOUR),
        zones=_number(row, "zones", 10_000, optional=True, integer=True),
        flags=tuple(f for f in _text(row, "flags").split(";") if f),
        as_of=row["as_of"],
        source=_text(row, "source"),
    )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:.10f}".rstrip("0")  # fixed notation, at most 10 decimals, no float noise
        return text + "0" if text.endswith(".") else text
    if isinstance(value, (tuple, list)):
        return ";".join(value)
    return str(value)


def rows_to_csv(rows: list[dict[str, Any]]) -> str:
    """Catalog rows (dicts keyed by CSV_COLUMNS) as CSV text: booleans true/false, None empty, floats with at most 10 decimals."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n", extrasaction="raise")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in CSV_COLUMNS})
    return buf.getvalue()


def instance_to_row(inst: Instance) -> dict[str, Any]:
    """An Instance as a CSV row dict (the inverse of ``parse_rows``)."""
    return {k: getattr(inst, k) for k in CSV_COLUMNS}

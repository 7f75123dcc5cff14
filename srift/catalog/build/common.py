"""What every cloud's catalog build shares: zone prices to one regional price, spot bands, row assembly."""

from __future__ import annotations

import csv
import functools
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srift.catalog.instances import FLAG_NO_SPOT_DISCOUNT, FLAG_SPOT_ABOVE_ON_DEMAND
from srift.catalog.network import FLAG_NETWORK_ASSUMED, resolve
from srift.catalog.spot import default_band

Row = dict[str, Any]


@functools.lru_cache(maxsize=1)
def rules() -> dict[str, Any]:
    """configs/catalog/rules.yaml."""
    from srift.files import read_yaml
    from srift.files import configs_dir

    return dict(read_yaml(configs_dir() / "catalog" / "rules.yaml", "catalog rules file"))


def read_csv(path: Path) -> list[dict[str, str]]:
    """Rows of a source CSV (any line endings)."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def opt_float(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


@dataclass
class ZonePrice:
    """One zone's (or an Azure/Lambda region's) price of a VM: on-demand, and spot if offered."""

    zone: str
    on_demand: float | None
    spot: float | None


@dataclass
class RegionalPrice:
    """The prices srift keeps per (type, region), with the flags the zone rules raised."""

    on_demand: float | None
    spot: float | None
    zones: int
    flags: list[str] = field(default_factory=list)


def regional_price(zones: Iterable[ZonePrice], cap_ratio: float) -> RegionalPrice:
    """One price per region from its zones: the median on-demand, and the median spot over the zones that offer spot.

    A zone whose spot price is at or above ``cap_ratio`` x its on-demand price offers no spot
    (capped, or a catalog error when strictly above: flagged ``spot-above-on-demand-dropped``).
    When zones list spot only at or above on-demand, the region has no spot (``spot-at-on-demand``).
    The median, not the minimum: the cheapest zone is often the one without capacity.
    """
    zones = list(zones)
    flags: list[str] = []
    ods = [z.on_demand for z in zones if z.on_demand is not None]
    offers = []
    capped = 0
    for z in zones:
        if z.spot is None:
            continue
        if z.on_demand is not None and z.spot >= z.on_demand * cap_ratio:
            capped += 1
            if z.spot > z.on_demand * (2 - cap_ratio) and FLAG_SPOT_ABOVE_ON_DEMAND not in flags:
                flags.append(FLAG_SPOT_ABOVE_ON_DEMAND)
            continue
        offers.append(z.spot)
    if not offers and capped:
        flags.append(FLAG_NO_SPOT_DISCOUNT)
    return RegionalPrice(
        on_demand=statistics.median(ods) if ods else None,
        spot=statistics.median(offers) if offers else None,
        zones=len({z.zone for z in zones}),
        flags=flags,
    )


def spot_band(gpu_name: str, spot: float | None) -> tuple[str, float]:
    """The conservative default interruption band and rate of the GPU's class
    (``srift.catalog.spot.default_band``; never from the price); ("", 0) without spot."""
    if spot is None:
        return "", 0.0
    return default_band(gpu_name)


def network_columns(cloud: str, family: str, instance_type: str, *, efa: bool = False,
                    baseline_gbps: float | None = None) -> tuple[Row, list[str]]:
    """The link and network columns of a row from configs/network.yaml, and the row flags they raise."""
    facts = resolve(cloud, family, instance_type, efa=efa, baseline_gbps=baseline_gbps)
    cols = {
        "intra_node": facts.simulated_intra_node,
        "network_gbps": facts.simulated_network_gbps,
        "network_burst_gbps": facts.network_burst_gbps,
        "efa": efa,
        "transport": facts.simulated_transport,
    }
    return cols, ([FLAG_NETWORK_ASSUMED] if "network_gbps" in facts.unknowns else [])


@dataclass(frozen=True)
class Machine:
    """What a catalog row says of the instance itself (its CSV_COLUMNS of the same names)."""

    instance_type: str
    family: str
    vm_type: str
    accelerators: str
    gpu_name: str
    gpu_count: int
    gpu_memory_gib: float
    vcpus: int
    memory_gib: float
    host_arch: str


@dataclass(frozen=True)
class RowPrice:
    """A row's prices per hour (on-demand, spot; None where not offered), whether the spot price
    is estimated, and the zones it was taken over (None where the source has no zones)."""

    on_demand: float | None
    spot: float | None
    spot_estimated: bool = False
    zones: int | None = None


def make_row(*, cloud: str, region: str, machine: Machine, network: Row, price: RowPrice, flags: Iterable[str],
             as_of: str, source: str) -> Row:
    """A catalog row (CSV_COLUMNS) with the default interruption band of its GPU class."""
    m, on_demand, spot = machine, price.on_demand, price.spot
    band, rate = spot_band(m.gpu_name, spot)
    row: Row = {
        "cloud": cloud, "region": region, "instance_type": m.instance_type, "family": m.family, "vm_type": m.vm_type,
        "accelerators": m.accelerators, "gpu_name": m.gpu_name, "gpu_count": int(m.gpu_count),
        "gpu_memory_gib": round(float(m.gpu_memory_gib), 2), "vcpus": int(m.vcpus),
        "memory_gib": round(float(m.memory_gib), 2), "host_arch": m.host_arch, **network,
        "on_demand_usd_per_hour": None if on_demand is None else round(on_demand, 6),
        "spot_usd_per_hour": None if spot is None else round(spot, 6),
        "spot_estimated": price.spot_estimated, "spot_interruption_band": band,
        "spot_interruption_per_hour": round(rate, 10), "zones": price.zones,
        "flags": tuple(dict.fromkeys(flags)), "as_of": as_of, "source": source,
    }
    return row


def sort_rows(rows: list[Row]) -> list[Row]:
    """Rows in the CSV's order: region, family, GPUs, vCPUs, type."""
    return sorted(rows, key=lambda r: (r["region"], r["family"], r["gpu_count"], r["vcpus"], r["instance_type"]))

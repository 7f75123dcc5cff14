"""The GCP catalog: a GPU VM's price is its host row plus its accelerator row, zone by zone.

SkyPilot's GCP catalog lists machine types (host rows: vCPUs and memory, priced WITHOUT GPUs, even
for a2/a3/g2 with built-in GPUs) and GPUs (accelerator rows: ``AcceleratorCount`` GPUs together,
per zone) separately. A VM in zone Z costs host(Z) + accelerator(same GPU, same count, Z), on
demand and on spot alike (multicloud README). Built-in series pair with their GPU
(configs/catalog/rules.yaml ``gcp.built_in``); attachable T4/V100/P100 go on the N1 host
``gcp.n1_hosts`` names for the count. A VM exists in a zone only where both rows do; the regional
price is then the median over those zones (``regional_price``). A GPU with no host row in this
catalog (B200: no a4 host) cannot be priced and is left out.

Price checks: a component whose spot price is above its own on-demand price is a catalog error;
that zone's spot is dropped (flagged). A GPU whose per-GPU on-demand price spans more than
``gcp_suspect_price_span`` across regions is kept but flagged ``suspect-price`` on every row.
"""

from __future__ import annotations

import ast
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from srift.catalog.build.common import Machine, Row, RowPrice, ZonePrice, make_row, network_columns, opt_float, read_csv, regional_price, rules
from srift.catalog.instances import FLAG_SPOT_ABOVE_ON_DEMAND, FLAG_SUSPECT_PRICE
from srift.hardware import gpus


@dataclass(frozen=True)
class Host:
    """A host row in one zone."""

    machine_type: str
    region: str
    zone: str
    vcpus: int
    memory_gib: float
    price: float | None
    spot: float | None


@dataclass(frozen=True)
class Accelerator:
    """An accelerator row in one zone: ``count`` GPUs together."""

    name: str
    count: int
    region: str
    zone: str
    memory_mib: float
    price: float | None
    spot: float | None


@dataclass(frozen=True)
class Pairing:
    """A VM type: a host machine type with ``count`` GPUs of accelerator ``name``."""

    instance_type: str
    family: str
    machine_type: str
    accelerator: str
    count: int


def read_rows(rows: list[dict[str, str]]) -> tuple[list[Host], list[Accelerator]]:
    """Split SkyPilot GCP rows into host rows and accelerator rows."""
    hosts, accels = [], []
    for r in rows:
        if r["InstanceType"]:
            hosts.append(Host(r["InstanceType"], r["Region"], r["AvailabilityZone"], int(float(r["vCPUs"])),
                              float(r["MemoryGiB"]), opt_float(r["Price"]), opt_float(r["SpotPrice"])))
        else:
            info = ast.literal_eval(r["GpuInfo"]) if r["GpuInfo"] else {}  # a Python-dict string, never eval'd
            mem = float(info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]) if info else 0.0
            accels.append(Accelerator(r["AcceleratorName"], int(float(r["AcceleratorCount"])), r["Region"],
                                      r["AvailabilityZone"], mem, opt_float(r["Price"]), opt_float(r["SpotPrice"])))
    return hosts, accels


def pairings(machine_types: set[str], accelerators: set[tuple[str, int]], rule: dict) -> tuple[list[Pairing], list[str]]:
    """The VM types: built-in series by pattern, N1 hosts for attachable GPUs.

    Returns:
        The pairings, and the accelerator (name, count) pairs that no host prices (left out).
    """
    out: list[Pairing] = []
    for mt in sorted(machine_types):
        for b in rule["built_in"]:
            m = re.match(b["pattern"], mt)
            if m:
                count = int(b.get("count") or m.group(1))
                out.append(Pairing(mt, b["family"], mt, b["accelerator"], count))
                break
    n1 = {int(k): v for k, v in rule["n1_hosts"].items()}
    for name, count in sorted(accelerators):
        if name in rule["attachable"] and count in n1 and n1[count] in machine_types:
            host = n1[count]
            out.append(Pairing(f"{host}-{name.lower()}x{count}", rule["attachable"][name], host, name, count))
    used = {(p.accelerator, p.count) for p in out}
    return out, sorted(f"{n}:{c}" for n, c in accelerators if (n, c) not in used)


def compose_zone(host: Host, acc: Accelerator) -> tuple[ZonePrice, bool]:
    """The price of one VM in one zone: host + accelerator, on demand and on spot.

    Returns:
        The zone price, and True when a component's spot price was above its on-demand price
        (that zone's spot is then dropped).
    """
    od = None if host.price is None or acc.price is None else host.price + acc.price
    bad = any(s is not None and p is not None and s > p for s, p in ((host.spot, host.price), (acc.spot, acc.price)))
    spot = None if bad or host.spot is None or acc.spot is None else host.spot + acc.spot
    return ZonePrice(host.zone, od, spot), bad


def suspect_accelerators(accels: list[Accelerator], span: float) -> dict[str, tuple[float, float]]:
    """Accelerators whose per-GPU on-demand price spans more than ``span`` across regions: name -> (min, max)."""
    per_region: dict[tuple[str, str], list[float]] = defaultdict(list)
    for a in accels:
        if a.price is not None:
            per_region[(a.name, a.region)].append(a.price / a.count)
    by_name: dict[str, list[float]] = defaultdict(list)
    for (name, _region), prices in per_region.items():
        by_name[name].append(statistics.median(prices))
    return {n: (min(p), max(p)) for n, p in by_name.items() if max(p) > span * min(p)}


def build_rows(host_rows: list[dict[str, str]], n1_rows: list[dict[str, str]]) -> tuple[list[Row], dict[str, object]]:
    """GCP rows from SkyPilot's GCP rows (GPU VM file) and N1 host rows; plus what was left out or flagged."""
    rule, all_rules = rules()["gcp"], rules()
    hosts, accels = read_rows(host_rows)
    n1_hosts, _ = read_rows(n1_rows)
    hosts += n1_hosts
    host_at = {(h.machine_type, h.zone): h for h in hosts}
    acc_at = {(a.name, a.count, a.zone): a for a in accels}
    pairs, unpriced = pairings({h.machine_type for h in hosts}, {(a.name, a.count) for a in accels}, rule)
    suspects = suspect_accelerators(accels, float(all_rules["gcp_suspect_price_span"]))
    known = gpus()
    src = all_rules["sources"]["skypilot"]["gcp"]

    rows: list[Row] = []
    for p in pairs:
        gpu = rule["gpus"].get(p.accelerator)
        if gpu not in known:
            continue
        by_region: dict[str, list[tuple[Host, Accelerator]]] = defaultdict(list)
        for (name, count, zone), acc in acc_at.items():
            if name == p.accelerator and count == p.count and (p.machine_type, zone) in host_at:
                by_region[acc.region].append((host_at[(p.machine_type, zone)], acc))
        for region, pairs_in in sorted(by_region.items()):
            zone_prices, dropped = [], False
            for host, acc in pairs_in:
                zp, bad = compose_zone(host, acc)
                zone_prices.append(zp)
                dropped |= bad
            price = regional_price(zone_prices, float(all_rules["spot_cap_ratio"]))
            flags = list(price.flags) + ([FLAG_SPOT_ABOVE_ON_DEMAND] if dropped else [])
            if p.accelerator in suspects:
                flags.append(FLAG_SUSPECT_PRICE)
            host, acc = pairs_in[0]
            net, net_flags = network_columns("gcp", p.family, p.instance_type)
            rows.append(make_row(
                cloud="gcp", region=region,
                machine=Machine(instance_type=p.instance_type, family=p.family, vm_type=p.machine_type,
                                accelerators=f"{p.accelerator}:{p.count}", gpu_name=gpu, gpu_count=p.count,
                                gpu_memory_gib=acc.memory_mib / 1024, vcpus=host.vcpus, memory_gib=host.memory_gib,
                                host_arch="x86_64"),
                network=net, price=RowPrice(on_demand=price.on_demand, spot=price.spot, zones=price.zones),
                flags=flags + net_flags, as_of="", source=f"{src} (host + accelerator rows)",
            ))
    report: dict[str, object] = {
        "unpriced_accelerators": unpriced, "suspect_accelerators": suspects,
        "no_spec": sorted({a.name for a in accels if rule["gpus"].get(a.name) not in known}),
    }
    return rows, report


def build(data: Path) -> tuple[list[Row], dict[str, object]]:
    """Every GCP row from data/skypilot-catalog-multicloud (see the module docstring)."""
    folder = data / "skypilot-catalog-multicloud"
    return build_rows(read_csv(folder / "gcp-gpu-vms.csv"), read_csv(folder / "gcp-n1-host-vms.csv"))

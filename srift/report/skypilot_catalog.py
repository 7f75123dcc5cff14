"""Whether SkyPilot knows an instance type before srift writes a task that names it.

``sky launch`` of a task whose instance type is not in SkyPilot's catalog fails ("No instance type
g7e.4xlarge found"). srift checks the catalog the installed SkyPilot reads: SkyPilot 0.14.1 keeps
it at ``${SKY_RUNTIME_DIR:-~}/.sky/catalogs/<schema>/<cloud>/vms.csv`` (``sky/catalog/common.py``,
``sky/skylet/runtime_utils.py``, schema ``v8`` in ``sky/skylet/constants.py``; older releases
``v7``), fetched on first use. Without one (SkyPilot not installed, or never run), the check uses
srift's own catalog: the rows it took from SkyPilot's catalog (``source`` names it) are what
SkyPilot knew when srift's catalog was built (data/skypilot-catalog-multicloud).
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from srift.catalog.instances import Instance
from srift.errors import SriftError

_SCHEMA = re.compile(r"v([0-9]{1,4})", re.ASCII)
MAX_CATALOG_ROWS = 1_000_000  # a vms.csv larger than this is not read (SkyPilot's AWS one: about 40,000)


@dataclass(frozen=True)
class KnownTypes:
    """The instance types of one cloud that SkyPilot knows, and where that list comes from."""

    types: frozenset[str]
    where: str


def installed_catalog(cloud: str) -> KnownTypes | None:
    """The instance types in the installed SkyPilot's local catalog of ``cloud``, or None when
    SkyPilot is not installed or has not fetched that catalog."""
    version = None
    for dist in ("skypilot", "skypilot-nightly"):
        try:
            version = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    if version is None:
        return None
    root = Path(os.path.expanduser(os.environ.get("SKY_RUNTIME_DIR", "~"))) / ".sky" / "catalogs"
    try:
        schemas = sorted((int(m[1]), d) for d in root.iterdir() if (m := _SCHEMA.fullmatch(d.name)))
    except OSError:
        return None
    for _, folder in reversed(schemas):
        path = folder / cloud / "vms.csv"
        try:
            with path.open(newline="", encoding="utf-8") as fh:
                types = frozenset(row.get("InstanceType") or "" for _, row in zip(range(MAX_CATALOG_ROWS), csv.DictReader(fh)))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        return KnownTypes(types - {""}, f"SkyPilot {version}'s catalog ({path})")
    return None


def bundled_catalog(cloud: str, rows: list[Instance]) -> KnownTypes:
    """The instance types of ``cloud`` that srift's catalog took from SkyPilot's catalog."""
    return KnownTypes(frozenset(r.instance_type for r in rows if r.cloud == cloud and "skypilot" in r.source.lower()),
                      "SkyPilot's catalog as srift's catalog has it (SkyPilot is not installed here, or has fetched no catalog)")


def nearest(inst: Instance, known: KnownTypes, rows: list[Instance], n: int = 3) -> list[Instance]:
    """Up to ``n`` rows of types SkyPilot knows, nearest ``inst`` first: the same GPU, then the
    same GPU count, then the closest GPU memory and price."""
    seen: dict[str, Instance] = {}
    for r in rows:
        if r.cloud == inst.cloud and r.instance_type in known.types and r.instance_type != inst.instance_type:
            seen.setdefault(r.instance_type, r)
    price = inst.on_demand_usd_per_hour or 0.0
    return sorted(seen.values(), key=lambda r: (r.gpu_name != inst.gpu_name, abs(r.gpu_count - inst.gpu_count),
                                               abs(r.gpu_memory_gib - inst.gpu_memory_gib),
                                               abs((r.on_demand_usd_per_hour or 0.0) - price), r.instance_type))[:n]


def require_known(inst: Instance, nodes: int, rows: list[Instance]) -> None:
    """Refuse a SkyPilot task for an instance type SkyPilot does not know, naming the nearest it does.

    Args:
        inst: The configuration's catalog row.
        nodes: Its node count (for the command offered instead).
        rows: srift's catalog rows of the row's cloud (GPU facts of the alternatives).

    Raises:
        SriftError: when the type is not in the catalog SkyPilot reads (``installed_catalog``, else
            ``bundled_catalog``).
    """
    known = installed_catalog(inst.cloud) or bundled_catalog(inst.cloud, rows)
    name = inst.vm_type or inst.instance_type
    if not known.types or name in known.types or inst.instance_type in known.types:
        return
    near = nearest(inst, known, rows)
    alts = ", ".join(f"{r.instance_type} ({r.gpu_count} x {r.gpu_name})" for r in near)
    first = near[0].instance_type if near else "TYPE"
    raise SriftError(f"{inst.instance_type} is not in {known.where}: `sky launch` would fail with \"No instance type "
                     f"{name} found\"" + (f"; the nearest it knows: {alts}." if alts else "."),
                     f"hand off one it knows (srift predict --instance {first}:{nodes} ... --skypilot FILE), or update "
                     "SkyPilot (pip install -U skypilot) and run `sky show-gpus` to fetch its newer catalog.")

"""Load the catalog for an ``--infra`` selection: bundled CSVs, refreshed regions from the user cache.

API (what the CLI, search and reports use):

* ``load_catalog(infra="aws")``: every row of the selected clouds and regions, one per
  (cloud, region, instance type), with on-demand and spot prices. ``infra`` is SkyPilot's
  ``--infra`` spelling (``aws``, ``aws/us-west-2``, ``gcp,lambda``, a list of those) or, as
  before, a bare AWS region (``us-east-1``). Unknown clouds or regions raise SriftError naming the
  known ones. Rows with equal ``Instance.hardware_key`` predict alike: simulate one per key.
* ``get_instance(instance_type, infra=DEFAULT_INFRA)``: one row; when the selection spans
  several regions, the region where the type is cheapest on demand.
* ``regions(cloud)``: the regions srift has a catalog for.
* ``catalog_as_of(cloud, region=None)``: how old the prices in use are, and whether they are the
  bundled ones or a refresh (``srift catalog refresh``).

Sources, per cloud: configs/catalog/<cloud>.csv (bundled, built by scripts/build_catalog.py);
a refreshed region lives in <cache>/catalog/<cloud>/<region>.csv and replaces that region's
bundled rows while it is newer than the bundled file and parses cleanly (a half-written or
hand-edited cache is never used: srift warns once and keeps the bundled rows).
Parsed files are cached per process: loading every region of every cloud costs one parse.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from srift.bounds import MAX_CATALOG_BYTES, shown
from srift.cache import BoundedCache
from srift.catalog.infra import InfraTarget, parse_infra
from srift.catalog.instances import CLOUDS, Instance, parse_rows
from srift.errors import SriftError
from srift.files import read_text
from srift.job import DEFAULT_INFRA
from srift.log import LOGGER

CLOUD_NAMES = {"aws": "AWS", "gcp": "GCP", "lambda": "Lambda", "azure": "Azure"}


def bundled_path(cloud: str) -> Path:
    """configs/catalog/<cloud>.csv."""
    from srift.files import configs_dir

    return configs_dir() / "catalog" / f"{cloud}.csv"


# A cloud's or region's name as it may become a file name: lower-case letters, digits and '-'.
_PLAIN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def cache_path(cloud: str, region: str) -> Path:
    """The user cache file of one refreshed region, ``<cache>/catalog/<cloud>/<region>.csv``.

    Raises:
        SriftError: for a cloud or region that is not a plain name (``../x``, ``/etc/x``): names
            that come from remote data never leave the cache folder.
    """
    from srift.files import cache_dir

    for name in (cloud, region):
        if not isinstance(name, str) or not _PLAIN.fullmatch(name):
            raise SriftError(f"{shown(name)} is not a plain cloud or region name, so it is not a file name in the cache.",
                             "use region codes as the cloud lists them (us-east-1).")
    return cache_dir() / "catalog" / cloud / f"{region}.csv"


# cloud -> region -> rows in use (bundled, with refreshed regions swapped in); parsed once.
_BY_REGION: dict[str, dict[str, list[Instance]]] = {}
_SELECTIONS: dict[tuple[tuple[InfraTarget, ...], float | None], list[Instance]] = {}


def clear_cache() -> None:
    """Forget loaded catalogs (after a refresh, or in tests)."""
    _BY_REGION.clear()
    _SELECTIONS.clear()


BUNDLED_FILES_CACHED = 16  # parsed bundled catalog files kept per process (one a cloud)
# The bundled files' rows by path, size and modification time: clear_cache() (after a refresh, or
# a test with its own cache folder) forgets which regions were refreshed, not the bundled prices.
_BUNDLED: BoundedCache[tuple[str, int, int], list[Instance]] = BoundedCache(BUNDLED_FILES_CACHED)


def _bundled_rows(path: Path) -> list[Instance]:
    st = path.stat()
    return _BUNDLED.get((str(path), st.st_mtime_ns, st.st_size), lambda: parse_rows(path.read_text(encoding="utf-8"), str(path)))


def bundled_rows(cloud: str) -> list[Instance]:
    """The rows of srift's bundled catalog of ``cloud`` (no refreshed region swapped in)."""
    return _bundled_rows(bundled_path(cloud))


def _cloud_rows(cloud: str) -> dict[str, list[Instance]]:
    if cloud in _BY_REGION:
        return _BY_REGION[cloud]
    path = bundled_path(cloud)
    by_region: dict[str, list[Instance]] = {}
    if path.is_file():
        for inst in _bundled_rows(path):
            by_region.setdefault(inst.region, []).append(inst)
    bundled_mtime = path.stat().st_mtime if path.is_file() else 0.0
    cache_folder = cache_path(cloud, "x").parent
    if cache_folder.is_dir():
        for cached in sorted(cache_folder.glob("*.csv")):
            region = cached.stem
            try:
                if cached.stat().st_mtime < bundled_mtime:
                    continue  # a newer srift ships newer prices than this old refresh
                rows = parse_rows(read_text(cached, "catalog cache", MAX_CATALOG_BYTES), str(cached))
                if any(r.cloud != cloud or r.region != region for r in rows):
                    raise ValueError("rows of another cloud or region")
            except (ValueError, KeyError, TypeError, OSError, SriftError):
                LOGGER.warning(f"Warning: ignoring the unreadable catalog cache {cached}; using the bundled catalog.")
                continue
            by_region[region] = rows
    _BY_REGION[cloud] = by_region
    return by_region


def regions(cloud: str) -> list[str]:
    """The regions of a cloud srift has prices for (bundled or refreshed), sorted."""
    return sorted(_cloud_rows(cloud))


def _unknown_region(cloud: str, region: str) -> SriftError:
    from srift.errors import closest

    known = regions(cloud)
    near = closest(region, known)
    hint = (f"did you mean {', '.join(near)}? " if near else "") + f"{CLOUD_NAMES[cloud]} regions srift knows: {', '.join(known)}"
    if cloud == "aws":
        hint += f"; or run `srift catalog refresh --infra aws/{region}`"
    return SriftError(f"srift has no catalog for region '{region}' of {CLOUD_NAMES[cloud]}.", hint + ".")


def load_catalog(infra: str | Sequence[str] = "aws") -> list[Instance]:
    """Every catalog row of the selected clouds and regions (see the module docstring).

    Args:
        infra: ``aws``, ``aws/us-west-2``, ``gcp,lambda``, ``azure/eastus``, a list of such parts, or
            a bare AWS region. Default: every AWS region.

    Returns:
        Rows ordered by cloud (as given), region, then as in the catalog. The list is shared
        between calls with the same selection: do not modify it.

    Raises:
        SriftError: for an unknown cloud, a zone, or a region srift has no catalog for.
    """
    from srift.catalog.spot import rate_override

    targets = parse_infra(infra)
    override = rate_override()
    key = (targets, override)
    if key in _SELECTIONS:
        return _SELECTIONS[key]
    rows: list[Instance] = []
    for target in targets:
        by_region = _cloud_rows(target.cloud)
        if target.region is None:
            for region in sorted(by_region):
                rows.extend(by_region[region])
        elif target.region in by_region:
            rows.extend(by_region[target.region])
        else:
            raise _unknown_region(target.cloud, target.region)
    if override is not None:
        rows = [dataclasses.replace(r, spot_interruption_per_hour=override) if r.spot_usd_per_hour is not None else r
                for r in rows]
    _SELECTIONS[key] = rows
    return rows


def get_instance(instance_type: str, infra: str | Sequence[str] = DEFAULT_INFRA) -> Instance:
    """One instance type of the selection (case does not matter).

    When the selection spans several regions, the row of the region where the type is cheapest
    on demand (then by region name), as a user who can choose would.

    Raises:
        SriftError: for a type not in the selection, with the closest names, or the regions that
            have it when it exists elsewhere.
    """
    from srift.errors import unknown_name_error

    rows = load_catalog(infra)
    wanted = instance_type.strip().lower()
    hits = [r for r in rows if r.instance_type.lower() == wanted]
    if hits:
        return min(hits, key=lambda r: (r.on_demand_usd_per_hour is None, r.on_demand_usd_per_hour or 0.0, r.cloud, r.region))
    elsewhere: dict[str, list[str]] = {}
    for cloud in CLOUDS:
        for r in load_catalog(cloud):
            if r.instance_type.lower() == wanted and r.region not in elsewhere.setdefault(cloud, []):
                elsewhere[cloud].append(r.region)
    where = {c: sorted(rs) for c, rs in elsewhere.items() if rs}
    if where:
        parts = [f"{c} ({len(rs)} region{'s' if len(rs) > 1 else ''}: {', '.join(rs[:4])}{', ...' if len(rs) > 4 else ''})"
                 for c, rs in where.items()]
        first = next(iter(where))
        raise SriftError(f"{instance_type} is not offered in {','.join(str(t) for t in parse_infra(infra))}.",
                         f"it is offered by {'; '.join(parts)}: select it with --infra {first} or --infra {first}/{where[first][0]}.")
    gpu_hint = _gpu_instead_of_type(instance_type, rows)
    if gpu_hint is not None:
        raise gpu_hint
    raise unknown_name_error("instance type", instance_type, sorted({r.instance_type for r in rows}), "srift catalog list")


def _gpu_instead_of_type(name: str, rows: Sequence[Instance]) -> Exception | None:
    """The error for a GPU name given where an instance type goes (``--instance a100:8``): the
    types with that many of that GPU, and ``--gpu``; None when the name is no GPU."""
    from srift.errors import SriftError
    from srift.hardware import matching_gpus

    try:
        gpus = matching_gpus(name.strip())
    except SriftError:
        return None
    if not gpus:
        return None
    shown = sorted(gpus)[0] if len(gpus) == 1 else name.strip().upper()
    types = sorted({r.instance_type for r in rows if r.gpu_name in gpus},
                   key=lambda t: min(r.on_demand_usd_per_hour or 1e9 for r in rows if r.instance_type == t))[:3]
    some = f" ({', '.join(types)})" if types else ""
    return SriftError(f"{shown} is a GPU, not an instance type.",
                      f"name an instance type that has it{some}, e.g. --instance {types[0]}:2, or search them all with "
                      f"`srift recommend --gpu {name.strip()}`." if types else f"search with `srift recommend --gpu {name.strip()}`.")


@dataclass(frozen=True)
class CatalogAsOf:
    """How old the prices in use are, and where they come from.

    Attributes:
        cloud: The cloud.
        region: The region asked about, or None for the whole cloud.
        as_of: The oldest on-demand price date (ISO) among the rows that record one; None when no
            row records a date (the source catalogs of GCP, Lambda and Azure carry none).
        undated_rows: Rows whose source records no date (their prices are of unknown age).
        rows: Rows considered.
        source: ``bundled``, ``refreshed`` or ``bundled+refreshed``.
        refreshed_regions: Regions whose rows come from ``srift catalog refresh``.
        sources: The distinct row sources (file and commit, or refresh), for a footnote.
    """

    cloud: str
    region: str | None
    as_of: str | None
    undated_rows: int
    rows: int
    source: str
    refreshed_regions: tuple[str, ...]
    sources: tuple[str, ...]

    def age_days(self, today: str | None = None) -> int | None:
        """Days from ``as_of`` to ``today`` (ISO; default: today, UTC); None when undated."""
        from datetime import date, datetime, timezone

        if self.as_of is None:
            return None
        now = date.fromisoformat(today) if today else datetime.now(timezone.utc).date()
        return (now - date.fromisoformat(self.as_of)).days


REFRESH_SOURCE_PREFIX = "srift catalog refresh"  # every refreshed row's source starts with this


def catalog_as_of(cloud: str, region: str | None = None) -> CatalogAsOf:
    """The age and source of a cloud's (or one region's) prices in use.

    Raises:
        SriftError: for an unknown cloud or region.
    """
    target = parse_infra(cloud if region is None else f"{cloud}/{region}")[0]
    rows = load_catalog(str(target))
    dates = sorted(r.as_of for r in rows if r.as_of)
    refreshed = sorted({r.region for r in rows if r.source.startswith(REFRESH_SOURCE_PREFIX)})
    bundled_any = any(not r.source.startswith(REFRESH_SOURCE_PREFIX) for r in rows)
    source = "+".join(s for s, on in (("bundled", bundled_any), ("refreshed", bool(refreshed))) if on)
    return CatalogAsOf(
        cloud=target.cloud, region=target.region, as_of=dates[0] if dates else None,
        undated_rows=sum(1 for r in rows if not r.as_of), rows=len(rows), source=source,
        refreshed_regions=tuple(refreshed), sources=tuple(sorted({r.source for r in rows})),
    )

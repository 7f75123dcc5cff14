"""Refresh GCP, Lambda and Azure prices into the user cache from SkyPilot's published catalogs.

SkyPilot publishes each cloud's catalog as one CSV, re-fetched from the cloud's pricing API by its
bot, and its own optimizer reads the same files: ``{HOSTED}/{SCHEMA_VERSION}/{cloud}/vms.csv``
(skypilot 0.14.1, ``sky/skylet/constants.py``: ``HOSTED_CATALOG_DIR_URL``,
``HOSTED_CATALOG_DIR_URL_S3_MIRROR``, ``CATALOG_SCHEMA_VERSION = 'v8'``; ``sky/catalog/common.py``
falls back to the S3 mirror). A refresh reads that file with the standard library (size bound,
retries after network errors), builds the rows with the bundled catalog's own rules
(``srift.catalog.build``: the same pairing of GCP host and accelerator rows, the same families and
GPU names), and writes each region to ``<cache>/catalog/<cloud>/<region>.csv``, read back as the
catalog reader reads it first. Types the rules do not name are left out and counted (a new type
needs a rules entry and a rebuild). ``SRIFT_SKYPILOT_CATALOG_URL`` replaces the hosted folder (a
mirror, or ``file:///path`` to a folder laid out as ``<version>/<cloud>/vms.csv``, such as
SkyPilot's own ``~/.sky/catalogs``).
"""

from __future__ import annotations

import csv
import io
import os
import re
from datetime import datetime, timezone

from srift.bounds import MAX_INPUT_BYTES
from srift.catalog.build import azure, gcp, lambda_cloud
from srift.catalog.build.common import Row
from srift.catalog.fetch import Opener, Progress, offline_error, retrying, urlopen
from srift.catalog.instances import FLAG_OLD_SNAPSHOT, Instance, parse_rows, rows_to_csv
from srift.catalog.load import REFRESH_SOURCE_PREFIX, cache_path, clear_cache
from srift.errors import SriftError

HOSTED_URL = "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs"
MIRROR_URL = "https://skypilot-catalog.s3.us-east-1.amazonaws.com/catalogs"
SCHEMA_VERSION = "v8"
URL_ENV = "SRIFT_SKYPILOT_CATALOG_URL"
CLOUDS = ("gcp", "lambda", "azure")
# The columns each cloud's build reads (data/skypilot-catalog-multicloud/README.md).
REQUIRED = {
    "gcp": ("InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount", "GpuInfo", "Region",
            "AvailabilityZone", "Price", "SpotPrice"),
    "lambda": ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "Region", "GpuInfo",
               "SpotPrice"),
    "azure": ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice", "Region"),
}
REGION_NAME = re.compile(r"^[a-z][a-z0-9-]{1,40}$")  # gcp us-central1, lambda us-east-1, azure eastus: cache file names


def catalog_urls(cloud: str) -> list[str]:
    """Where SkyPilot's ``cloud`` catalog is read from, in order: the environment's folder, else
    SkyPilot's hosted folder and its S3 mirror."""
    bases = [os.environ[URL_ENV]] if os.environ.get(URL_ENV) else [HOSTED_URL, MIRROR_URL]
    return [f"{base.rstrip('/')}/{SCHEMA_VERSION}/{cloud}/vms.csv" for base in bases]


def fetch_rows(cloud: str, open_url: Opener, say: Progress) -> tuple[list[dict[str, str]], str]:
    """SkyPilot's ``cloud`` catalog rows and the URL they came from.

    Raises:
        SriftError: no URL answers (after retries), the file is too large, not UTF-8 CSV, or lacks
            a column the build reads.
    """
    urls = catalog_urls(cloud)
    for i, url in enumerate(urls):
        def read(url: str = url) -> bytes:
            with open_url(url) as fh:
                return bytes(fh.read(MAX_INPUT_BYTES + 1))

        say(f"{cloud}: reading {url}")
        try:
            body = retrying(read, f"SkyPilot's {cloud} catalog", say)
            break
        except OSError as exc:
            if i + 1 == len(urls):
                raise offline_error(f"SkyPilot's {cloud} catalog ({url})", exc) from None
            say(f"{cloud}: {type(exc).__name__}; trying the mirror")
    if len(body) > MAX_INPUT_BYTES:
        raise SriftError(f"SkyPilot's {cloud} catalog at {url} is larger than the {MAX_INPUT_BYTES / 2**20:,.0f} MiB srift "
                         "reads; the catalog in use is unchanged.", f"check the mirror ({URL_ENV}).")
    try:
        reader = csv.DictReader(io.StringIO(body.decode("utf-8")))
        rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise SriftError(f"SkyPilot's {cloud} catalog at {url} is not a UTF-8 CSV ({str(exc)[:120]}); the catalog in use "
                         "is unchanged.", "try again later; if it persists, report it.") from None
    missing = [c for c in REQUIRED[cloud] if c not in (reader.fieldnames or ())]
    if missing:
        raise SriftError(f"SkyPilot's {cloud} catalog at {url} has no column {', '.join(missing)} (its format changed); "
                         "the catalog in use is unchanged.", "report it, and keep the bundled prices meanwhile.")
    return rows, url


def built_rows(cloud: str, rows: list[dict[str, str]]) -> tuple[list[Row], dict[str, object]]:
    """The catalog rows the bundled build's rules make of SkyPilot's rows (types the rules do not
    name are left out, not fatal); plus what was left out."""
    try:
        if cloud == CLOUDS[0]:  # GCP: N1 hosts (for attachable GPUs) and every other row, as the bundled copy splits them
            n1 = [r for r in rows if r["InstanceType"].startswith("n1-")]
            return gcp.build_rows([r for r in rows if not r["InstanceType"].startswith("n1-")], n1)
        if cloud == CLOUDS[1]:
            return lambda_cloud.build_rows(rows, strict=False)
        return azure.build_rows(rows, strict=False)
    except (ValueError, KeyError, TypeError, SyntaxError, IndexError) as exc:  # a cell the build cannot read
        raise SriftError(f"SkyPilot's {cloud} catalog has a row srift cannot read ({type(exc).__name__}: {str(exc)[:120]}); "
                         "the catalog in use is unchanged.", "try again later; if it persists, report it.") from None


def refresh(cloud: str, regions: list[str] | None = None, progress: Progress | None = None,
            opener: Opener | None = None, today: str | None = None) -> list[Instance]:
    """Re-price ``cloud`` (every region it lists, or ``regions``) from SkyPilot's catalog; write
    each region to the user cache. Returns the rows written.

    Raises:
        SriftError: the catalog cannot be read, or it prices no GPU type srift models in the
            regions asked for (nothing written, exit 2).
    """
    say = progress or (lambda _msg: None)
    source_rows, url = fetch_rows(cloud, opener or urlopen, say)
    rows, report = built_rows(cloud, source_rows)
    stamp = today or datetime.now(timezone.utc).date().isoformat()
    source = f"{REFRESH_SOURCE_PREFIX} {stamp}: SkyPilot catalog {SCHEMA_VERSION}/{cloud}/vms.csv"
    by_region: dict[str, list[Row]] = {}
    for row in rows:
        if (regions is None or row["region"] in regions) and row["on_demand_usd_per_hour"] and REGION_NAME.fullmatch(row["region"]):
            flags = tuple(f for f in row["flags"] if f != FLAG_OLD_SNAPSHOT)  # the file is the current one
            by_region.setdefault(row["region"], []).append({**row, "flags": flags, "as_of": stamp, "source": source})
    left_out = [str(name) for key in ("left_out", "unpriced_accelerators", "no_spec") for name in _names(report.get(key))]
    if left_out:
        say(f"{cloud}: {len(left_out)} type(s) left out (no rule in configs/catalog/rules.yaml): "
            + ", ".join(sorted(left_out)[:8]) + (", ..." if len(left_out) > 8 else ""))
    if not by_region:
        where = ", ".join(regions) if regions else "any region"
        raise SriftError(f"SkyPilot's {cloud} catalog ({url}) prices no GPU type srift models in {where}; nothing was "
                         "written, the catalog in use is unchanged.", f"check the region name (srift catalog list --infra {cloud}).")
    return _write(cloud, by_region, say)


def _names(value: object) -> list[object]:
    """The names a build report lists under one key (a mapping's keys, a sequence's items)."""
    return list(value) if isinstance(value, (dict, list, tuple, set)) else []


def _write(cloud: str, by_region: dict[str, list[Row]], say: Progress) -> list[Instance]:
    """Every region's cache file, each read back as later runs read it, replaced together."""
    from srift.outputs import atomic_write_many

    texts, written = {}, []
    for region, rows in sorted(by_region.items()):
        text = rows_to_csv(sorted(rows, key=lambda r: (r["family"], r["gpu_count"], r["vcpus"], r["instance_type"])))
        try:
            written += parse_rows(text, f"refreshed {cloud}/{region}")
        except ValueError as exc:
            raise SriftError(f"SkyPilot's {cloud} catalog gives {region} prices srift cannot use ({str(exc)[:200]}); nothing "
                             "was written, the catalog in use is unchanged.", "try again later; if it persists, report it.") from None
        texts[cache_path(cloud, region)] = text.encode("utf-8")
    atomic_write_many(texts)
    clear_cache()
    for region, rows in sorted(by_region.items()):
        say(f"{region}: {len(rows)} GPU instance types -> {cache_path(cloud, region)}")
    return written

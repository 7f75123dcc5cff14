"""`srift catalog refresh --infra gcp|lambda|azure`: SkyPilot's published catalogs, read as SkyPilot
publishes them (the real files under data/skypilot-catalog-multicloud, served from a file:// mirror
or a fake opener; no network), priced by the bundled build's rules, written per region to the cache."""

from __future__ import annotations

import csv
import io
import urllib.error
from pathlib import Path

import pytest

import srift.catalog.fetch as fetch
from srift.catalog import get_instance
from srift.catalog.load import cache_path, clear_cache
from srift.catalog.skypilot_prices import HOSTED_URL, MIRROR_URL, SCHEMA_VERSION, URL_ENV, refresh
from srift.errors import SriftError

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "data" / "skypilot-catalog-multicloud"


def _bundled_rows(cloud: str) -> list[dict[str, str]]:
    with open(ROOT / "configs" / "catalog" / f"{cloud}.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _published(cloud: str) -> bytes:
    """The cloud's vms.csv as SkyPilot publishes it: GCP's one file holds the GPU VM rows and the N1 hosts."""
    if cloud == "gcp":
        gpu, n1 = ((SNAPSHOT / name).read_text(encoding="utf-8") for name in ("gcp-gpu-vms.csv", "gcp-n1-host-vms.csv"))
        return (gpu + n1.split("\n", 1)[1]).encode()
    return (SNAPSHOT / f"{cloud}-gpu-vms.csv").read_bytes()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(URL_ENV, raising=False)
    monkeypatch.setattr(fetch, "RETRY_DELAYS_S", (0.0, 0.0))
    clear_cache()
    yield tmp_path
    clear_cache()


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A folder laid out as SkyPilot's hosted catalogs (``<version>/<cloud>/vms.csv``), as a file:// URL."""
    root = tmp_path / "mirror"
    for cloud in ("gcp", "lambda", "azure"):
        path = root / SCHEMA_VERSION / cloud / "vms.csv"
        path.parent.mkdir(parents=True)
        path.write_bytes(_published(cloud))
    monkeypatch.setenv(URL_ENV, root.as_uri())
    return root


def test_gcp_refresh_prices_each_region_as_the_bundled_build_does(mirror):
    steps: list[str] = []
    rows = refresh("gcp", progress=steps.append, today="2026-12-07")
    bundled = {(r["region"], r["instance_type"]): r for r in _bundled_rows("gcp")}
    # The same file and the same rules: every bundled GCP row comes back, at the same price.
    assert {(r.region, r.instance_type) for r in rows} == set(bundled)
    a100 = next(r for r in rows if r.instance_type == "a2-highgpu-1g" and r.region == "us-central1")
    assert a100.on_demand_usd_per_hour == pytest.approx(float(bundled[("us-central1", "a2-highgpu-1g")]["on_demand_usd_per_hour"]))
    assert a100.as_of == "2026-12-07" and "SkyPilot catalog v8/gcp/vms.csv" in a100.source
    assert cache_path("gcp", "us-central1").is_file()
    # Later runs read the refreshed region from the cache.
    assert get_instance("a2-highgpu-1g", "gcp/us-central1").source == a100.source
    assert any(line.startswith("us-central1: ") for line in steps)


def test_a_region_refresh_writes_only_that_region(mirror):
    rows = refresh("gcp", regions=["us-central1"], today="2026-12-07")
    assert {r.region for r in rows} == {"us-central1"}
    assert not cache_path("gcp", "europe-west4").exists()


def test_lambda_types_the_rules_do_not_name_are_left_out_and_named(mirror):
    path = mirror / SCHEMA_VERSION / "lambda" / "vms.csv"
    text = path.read_text(encoding="utf-8")
    header, first = text.splitlines()[:2]
    path.write_text(text + first.replace("gpu_8x_v100", "gpu_8x_z900").replace("V100", "Z900") + "\n", encoding="utf-8")
    steps: list[str] = []
    rows = refresh("lambda", progress=steps.append)
    assert "gpu_8x_z900" not in {r.instance_type for r in rows}
    assert len(rows) == len(_bundled_rows("lambda"))
    assert any("left out" in s and "gpu_8x_z900" in s for s in steps)


def test_azure_refresh_drops_the_old_snapshot_flag_of_the_bundled_file(mirror):
    rows = refresh("azure", today="2026-12-07")
    assert rows and all("old-snapshot" not in r.flags for r in rows)
    assert all(r.as_of == "2026-12-07" for r in rows)


def test_the_s3_mirror_answers_when_github_does_not():
    body = _published("lambda")
    tried: list[str] = []

    def open_url(url: str):
        tried.append(url)
        if url.startswith(HOSTED_URL):
            raise urllib.error.HTTPError(url, 429, "Too Many Requests", None, None)  # type: ignore[arg-type]
        return io.BytesIO(body)

    rows = refresh("lambda", opener=open_url)
    assert rows
    assert tried[0] == f"{HOSTED_URL}/{SCHEMA_VERSION}/lambda/vms.csv"
    assert tried[-1] == f"{MIRROR_URL}/{SCHEMA_VERSION}/lambda/vms.csv"
    assert len(tried) == 4  # 429 is retried (three tries), then the mirror once


def test_a_catalog_without_a_column_the_build_reads_changes_nothing(mirror):
    path = mirror / SCHEMA_VERSION / "gcp" / "vms.csv"
    path.write_text(path.read_text(encoding="utf-8").replace("AvailabilityZone", "Zone", 1), encoding="utf-8")
    with pytest.raises(SriftError) as err:
        refresh("gcp")
    assert "has no column AvailabilityZone" in err.value.message and err.value.exit_code == 2
    assert not (cache_path("gcp", "us-central1").parent).exists()


def test_offline_keeps_the_catalog_and_says_so():
    def offline(url: str):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    with pytest.raises(SriftError) as err:
        refresh("azure", opener=offline)
    assert "could not reach SkyPilot's azure catalog" in err.value.message and "unchanged" in err.value.message


def test_cli_refreshes_lambda_and_aws_refusal_is_gone(mirror, srift_cli):
    code, out = srift_cli(["catalog", "refresh", "--infra", "lambda/us-east-1"])
    assert code == 0, out
    assert cache_path("lambda", "us-east-1").is_file() and not cache_path("lambda", "us-west-1").exists()

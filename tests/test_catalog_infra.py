"""--infra selection and region handling, on a small hand-made catalog (SRIFT_HOME points at it)."""

import shutil
from pathlib import Path

import pytest

from srift.catalog import catalog_as_of, clear_cache, get_instance, load_catalog, parse_infra, regions
from srift.catalog.infra import InfraTarget
from srift.catalog.instances import rows_to_csv
from srift.errors import SriftError

ROOT = Path(__file__).resolve().parents[1]


def row(cloud, region, itype, od, spot=None, *, gpu="A10G", count=1, net=10.0, as_of="", family=None):
    return {"cloud": cloud, "region": region, "instance_type": itype, "family": family or itype.split(".")[0],
            "vm_type": itype, "accelerators": f"{gpu}:{count}", "gpu_name": gpu, "gpu_count": count, "gpu_memory_gib": 24.0,
            "vcpus": 4, "memory_gib": 16.0, "host_arch": "x86_64", "intra_node": "pcie4", "network_gbps": net,
            "network_burst_gbps": None, "efa": False, "transport": "tcp", "on_demand_usd_per_hour": od,
            "spot_usd_per_hour": spot, "spot_estimated": False, "spot_interruption_band": "10-15%" if spot else "",
            "spot_interruption_per_hour": 0.125 / 730 if spot else 0.0, "zones": 2, "flags": (), "as_of": as_of,
            "source": "hand-made"}


CATALOG = {
    "aws": [row("aws", "us-east-1", "g5.xlarge", 1.0, 0.4, as_of="2026-07-20"), row("aws", "us-east-1", "p4d.24xlarge", 22.0, 8.0,
            gpu="A100-40GB", count=8, net=400.0, as_of="2026-07-20"),
            row("aws", "us-west-2", "g5.xlarge", 0.9, 0.3), row("aws", "eu-west-1", "g5.xlarge", 1.1, None, net=25.0)],
    "gcp": [row("gcp", "us-central1", "g2-standard-8", 0.85, 0.34, gpu="L4", family="g2-standard")],
    "lambda": [row("lambda", "us-east-1", "gpu_1x_a10", 0.75, gpu="A10", family="gpu_1x")],
    "azure": [row("azure", "eastus", "Standard_NV36ads_A10_v5", 3.2, 0.8, gpu="A10", family="NVadsA10_v5")],
}


@pytest.fixture(autouse=True)
def small_catalog(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "configs" / "catalog").mkdir(parents=True)
    for name in ("gpus.yaml", "network.yaml"):
        shutil.copy(ROOT / "configs" / name, home / "configs" / name)
    for cloud, rows in CATALOG.items():
        (home / "configs" / "catalog" / f"{cloud}.csv").write_text(rows_to_csv(rows))
    monkeypatch.setenv("SRIFT_HOME", str(home))
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SRIFT_SPOT_INTERRUPTIONS_PER_HOUR", raising=False)
    clear_cache()
    yield
    clear_cache()


@pytest.mark.parametrize("text, expected", [
    ("aws", [("aws", None)]),
    ("aws/us-west-2", [("aws", "us-west-2")]),
    ("gcp,lambda", [("gcp", None), ("lambda", None)]),
    (["gcp", "lambda/us-east-1"], [("gcp", None), ("lambda", "us-east-1")]),
    ("AWS/US-West-2, azure/eastus", [("aws", "us-west-2"), ("azure", "eastus")]),
    ("us-west-2", [("aws", "us-west-2")]),  # a bare region is an AWS region, as --region
    ("aws/us-west-2,aws", [("aws", None)]),  # the whole cloud covers its regions
])
def test_infra_spellings(text, expected):
    assert parse_infra(text) == tuple(InfraTarget(c, r) for c, r in expected)


@pytest.mark.parametrize("text, message, hint", [
    ("gcpp", "unknown cloud 'gcpp'", "aws, gcp, lambda, azure"),
    ("aws/us-east-1/us-east-1a", "names a zone", "--infra aws/us-east-1"),
    ("aws,,gcp", "empty part", "--infra aws/us-west-2"),
    ("", "empty part", "--infra gcp,lambda"),
])
def test_bad_infra_is_one_clear_error(text, message, hint):
    with pytest.raises(SriftError, match=message) as info:
        parse_infra(text)
    assert hint in info.value.hint


def test_selection_returns_the_rows_of_the_named_clouds_and_regions():
    assert {(r.cloud, r.region) for r in load_catalog()} == {("aws", "us-east-1"), ("aws", "us-west-2"), ("aws", "eu-west-1")}
    assert {r.region for r in load_catalog("aws/us-west-2")} == {"us-west-2"}
    assert {(r.cloud, r.instance_type) for r in load_catalog("gcp,lambda")} == {("gcp", "g2-standard-8"), ("lambda", "gpu_1x_a10")}
    assert [r.cloud for r in load_catalog("lambda/us-east-1")] == ["lambda"]  # not AWS's us-east-1
    assert len(load_catalog("us-east-1")) == 2  # today's callers: a bare AWS region
    assert regions("aws") == ["eu-west-1", "us-east-1", "us-west-2"]


def test_unknown_region_names_the_known_ones():
    with pytest.raises(SriftError, match="no catalog for region 'mars-north-1' of AWS") as info:
        load_catalog("aws/mars-north-1")
    assert "eu-west-1, us-east-1, us-west-2" in info.value.hint
    with pytest.raises(SriftError, match="of Azure") as info:
        load_catalog("azure/westeurope")
    assert "eastus" in info.value.hint


def test_get_instance_takes_the_cheapest_region_and_says_where_a_type_is():
    assert get_instance("g5.xlarge", "aws").region == "us-west-2"  # 0.9 < 1.0 < 1.1
    assert get_instance("G5.XLARGE", "aws/eu-west-1").on_demand_usd_per_hour == 1.1
    assert get_instance("standard_nv36ads_a10_v5", "azure").instance_type == "Standard_NV36ads_A10_v5"
    with pytest.raises(SriftError, match="p4d.24xlarge is not offered in aws/us-west-2") as info:
        get_instance("p4d.24xlarge", "aws/us-west-2")
    assert "aws/us-east-1" in info.value.hint
    with pytest.raises(SriftError, match="unknown instance type"):
        get_instance("g5.xlargee", "aws")


def test_hardware_key_ignores_price_and_region():
    east, west, eu = (get_instance("g5.xlarge", f"aws/{r}") for r in ("us-east-1", "us-west-2", "eu-west-1"))
    assert east.hardware_key == west.hardware_key  # same type, other region and price: one simulation
    assert east.hardware_key != eu.hardware_key  # a different network is different hardware
    assert len({r.hardware_key for r in load_catalog("aws")}) == 3


def test_catalog_as_of_per_cloud_and_region():
    aws = catalog_as_of("aws")
    assert (aws.as_of, aws.undated_rows, aws.rows, aws.source) == ("2026-07-20", 2, 4, "bundled")
    assert aws.age_days(today="2026-08-19") == 30
    west = catalog_as_of("aws", "us-west-2")
    assert west.as_of is None and west.undated_rows == 1 and west.age_days() is None
    assert catalog_as_of("gcp").sources == ("hand-made",)


def test_interruption_rate_override(monkeypatch):
    assert get_instance("g5.xlarge", "aws/us-west-2").spot_interruption_per_hour == pytest.approx(0.125 / 730)
    monkeypatch.setenv("SRIFT_SPOT_INTERRUPTIONS_PER_HOUR", "0.001")
    assert get_instance("g5.xlarge", "aws/us-west-2").spot_interruption_per_hour == 0.001
    assert get_instance("g5.xlarge", "aws/eu-west-1").spot_interruption_per_hour == 0.0  # no spot there
    monkeypatch.setenv("SRIFT_SPOT_INTERRUPTIONS_PER_HOUR", "often")
    with pytest.raises(SriftError, match="is not a rate"):
        load_catalog("aws")

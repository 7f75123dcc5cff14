"""The bundled catalog: rebuilt byte for byte from data/, with the figures a user checks first."""

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from srift.catalog import get_instance, load_catalog
from srift.cli import main
from srift.errors import SriftError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
SNAPSHOT = DATA / "skypilot-catalog-aws-spot-snapshot" / "spot_us_east_1_gpu_subset.csv"
SKY_AWS = DATA / "skypilot-catalog-multicloud" / "aws-gpu-vms.csv"


@pytest.mark.slow
def test_build_script_reproduces_the_bundled_csvs(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_catalog.py"), "--out", str(tmp_path)], check=True,
                   capture_output=True)
    for cloud in ("aws", "gcp", "lambda", "azure"):
        assert (tmp_path / f"{cloud}.csv").read_bytes() == (ROOT / "configs" / "catalog" / f"{cloud}.csv").read_bytes(), cloud


def test_every_source_file_the_build_reads_is_in_the_repository():
    for folder in ("skypilot-catalog-multicloud", "karpenter-aws", "skypilot-catalog-aws-spot-snapshot"):
        readme = (DATA / folder / "README.md").read_text()
        assert "srift" in readme.split("\n\n")[1]  # the line saying srift copies it


def test_catalog_covers_the_gpu_families_and_is_priced():
    rows = load_catalog("us-east-1")
    assert len(rows) >= 60
    families = {r.family for r in rows}
    assert {"p2", "p3", "p3dn", "p4d", "p4de", "p5", "p5en", "g4dn", "g5", "g5g", "g6", "g6e"} <= families
    assert all(r.on_demand_usd_per_hour is not None for r in rows)
    assert all(r.gpu_count >= 1 and r.cloud == "aws" and r.region == "us-east-1" for r in rows)
    assert len({r.region for r in load_catalog("aws")}) == 22


def test_p4d_matches_the_aws_facts():
    p4d = get_instance("p4d.24xlarge")
    assert (p4d.gpu_count, p4d.gpu_name, p4d.gpu_memory_gib) == (8, "A100-40GB", 40.0)
    assert p4d.network_gbps == 400 and p4d.efa and p4d.intra_node == "nvswitch" and p4d.transport == "efa"
    assert p4d.on_demand_usd_per_hour == pytest.approx(21.96, abs=0.005)
    assert (p4d.as_of, p4d.host_arch, p4d.accelerators) == ("2026-07-20", "x86_64", "A100:8")


def test_spot_is_the_median_of_uncapped_zones():
    zones = [float(r["spot_usd_per_hour"]) for r in csv.DictReader(open(SNAPSHOT))
             if r["instance_type"] == "p5.48xlarge" and r["spot_usd_per_hour"]]
    # two zones are priced at the on-demand cap (55.04): no spot capacity there, left out
    expected = statistics.median([z for z in zones if z < 55.04])
    p5 = get_instance("p5.48xlarge")
    assert p5.spot_usd_per_hour == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(statistics.median([10.2397, 19.2531, 21.1543, 25.7522, 17.6289]))
    assert not p5.spot_estimated


def test_other_regions_take_skypilot_zone_prices():
    # g5.xlarge in us-west-2: SkyPilot's three AZ rows, on-demand 1.006, spot the median of the zones
    zones = [r for r in csv.DictReader(open(SKY_AWS)) if r["InstanceType"] == "g5.xlarge" and r["Region"] == "us-west-2"]
    g5 = get_instance("g5.xlarge", "aws/us-west-2")
    assert g5.on_demand_usd_per_hour == pytest.approx(float(zones[0]["Price"]))
    assert g5.spot_usd_per_hour == pytest.approx(statistics.median(float(z["SpotPrice"]) for z in zones))
    assert g5.zones == len(zones) and not g5.spot_estimated and g5.as_of == ""


def test_price_cut_rebases_other_regions_by_the_us_east_1_ratio():
    sky = {(r["Region"], r["AvailabilityZone"]): float(r["Price"]) for r in csv.DictReader(open(SKY_AWS))
           if r["InstanceType"] == "p4d.24xlarge"}
    old_use1 = next(p for (reg, _), p in sky.items() if reg == "us-east-1")
    old_usw2 = next(p for (reg, _), p in sky.items() if reg == "us-west-2")
    assert old_use1 == 32.7726  # SkyPilot's pre-cut price; Karpenter's 2026-07-20 list price is 21.957642
    usw2 = get_instance("p4d.24xlarge", "aws/us-west-2")
    assert usw2.on_demand_usd_per_hour == pytest.approx(old_usw2 * 21.957642 / 32.7726, rel=1e-6)
    assert "on-demand-rebased" in usw2.flags
    # Spot is a market: the snapshot's spot price as it is, never scaled by the on-demand cut.
    spot = [float(r["SpotPrice"]) for r in csv.DictReader(open(SKY_AWS))
            if r["InstanceType"] == "p4d.24xlarge" and r["Region"] == "us-west-2" and r["SpotPrice"]]
    assert usw2.spot_usd_per_hour == pytest.approx(statistics.median(spot)) and not usw2.spot_estimated


def test_p4de_duplicate_zone_rows_merge_and_p5e_has_no_on_demand():
    p4de = get_instance("p4de.24xlarge", "aws/us-east-1")
    assert p4de.gpu_name == "A100-80GB" and p4de.accelerators == "A100-80GB:8"
    p5e = [r for r in load_catalog("aws") if r.instance_type == "p5e.48xlarge"]
    assert p5e and all(r.on_demand_usd_per_hour is None for r in p5e)


def test_no_spot_price_is_derived_from_a_ratio():
    """g7.2xlarge is Karpenter-only (no spot figure anywhere): no spot price rather than an
    on-demand price times a ratio; no bundled row's spot price is estimated."""
    g7 = get_instance("g7.2xlarge")
    assert g7.spot_usd_per_hour is None and not g7.spot_estimated
    assert not any(r.spot_estimated for r in load_catalog(["aws", "gcp", "lambda", "azure"]))


def test_arm64_hosts_are_marked():
    arm = {(r.cloud, r.family) for r in load_catalog(["aws", "gcp", "lambda", "azure"]) if r.host_arch == "arm64"}
    assert arm == {("aws", "g5g"), ("lambda", "gpu_1x")}
    assert get_instance("gpu_1x_gh200", "lambda").host_arch == "arm64"
    assert get_instance("gpu_1x_h100_sxm5", "lambda").host_arch == "x86_64"


def test_lambda_and_azure_rows():
    h100 = get_instance("gpu_8x_h100_sxm5", "lambda/us-east-1")
    assert (h100.gpu_name, h100.gpu_count, h100.on_demand_usd_per_hour, h100.spot_usd_per_hour) == ("H100", 8, 23.92, None)
    assert get_instance("gpu_1x_h100_pcie", "lambda/us-east-1").gpu_name == "H100-PCIe"
    nd = get_instance("Standard_ND96isr_H100_v5", "azure/eastus")
    assert nd.gpu_count == 8 and "corrected" in nd.flags  # the v6 file says 12
    assert nd.spot_usd_per_hour is None and "spot-at-on-demand" in nd.flags  # spot listed at on-demand
    assert not [r for r in load_catalog("azure") if r.instance_type.endswith("_Promo")]


def test_show_unknown_type_suggests_and_exits_2(capsys):
    assert main(["catalog", "show", "p4d.24xlarg"]) == 2
    err = capsys.readouterr().err
    assert "unknown instance type 'p4d.24xlarg'" in err and "p4d.24xlarge" in err
    assert "Traceback" not in err
    assert main(["catalog", "show", "p9.notreal"]) == 2
    assert "did you mean" in capsys.readouterr().err


def test_show_p4d_text(capsys):
    assert main(["catalog", "show", "p4d.24xlarge"]) == 0
    out = capsys.readouterr().out
    assert "8 x A100-40GB" in out and "400 Gb/s with EFA" in out and "$21.96/h" in out


def test_list_json_fields_and_gpu_filter(capsys):
    assert main(["catalog", "list", "--format", "json", "--gpu", "A100"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "srift.catalog/v1" and doc["region"] == "us-east-1"
    rows = doc["instances"]
    assert {r["instance_type"] for r in rows} == {"p4d.24xlarge", "p4de.24xlarge"}
    for key in ("instance_type", "gpu_name", "gpu_count", "gpu_memory_gib", "vcpus", "memory_gib", "network_gbps",
                "efa", "on_demand_usd_per_hour", "spot_usd_per_hour", "region", "cloud", "host_arch", "transport"):
        assert key in rows[0]


def test_list_unknown_gpu_exits_2(capsys):
    assert main(["catalog", "list", "--gpu", "Z9000"]) == 2
    assert "unknown GPU" in capsys.readouterr().err


def test_unknown_region_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path))
    with pytest.raises(SriftError, match="no catalog for region") as info:
        load_catalog("mars-north-1")
    assert "us-west-2" in info.value.hint

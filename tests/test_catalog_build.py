"""The bundled catalog: built from the data/ copies, with the figures a user checks first."""

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from srift.catalog import get_instance, load_catalog
from srift.catalog.instances import band_for_ratio
from srift.cli import main
from srift.errors import SriftError

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "data" / "skypilot-catalog-aws-spot-snapshot" / "spot_us_east_1_gpu_subset.csv"


def test_build_script_reproduces_the_bundled_csv(tmp_path):
    out = tmp_path / "cat.csv"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_catalog.py"), "--out", str(out)], check=True,
                   capture_output=True)
    assert out.read_text() == (ROOT / "configs" / "aws" / "us-east-1.csv").read_text()


def test_catalog_covers_the_gpu_families_and_is_priced():
    rows = load_catalog("us-east-1")
    assert len(rows) >= 60
    families = {r.family for r in rows}
    assert {"p2", "p3", "p3dn", "p4d", "p4de", "p5", "p5en", "g4dn", "g5", "g5g", "g6", "g6e"} <= families
    priced = [r for r in rows if r.on_demand_usd_per_hour is not None]
    assert len(priced) >= len(rows) - 2
    assert all(r.gpu_count >= 1 for r in rows)


def test_p4d_matches_the_aws_facts():
    p4d = get_instance("p4d.24xlarge")
    assert (p4d.gpu_count, p4d.gpu_name, p4d.gpu_memory_gib) == (8, "A100-40GB", 40.0)
    assert p4d.network_gbps == 400 and p4d.efa and p4d.intra_node == "nvswitch"
    assert p4d.on_demand_usd_per_hour == pytest.approx(21.96, abs=0.005)


def test_spot_is_the_median_of_uncapped_zones():
    zones = [float(r["spot_usd_per_hour"]) for r in csv.DictReader(open(SNAPSHOT))
             if r["instance_type"] == "p5.48xlarge" and r["spot_usd_per_hour"]]
    # two zones are priced at the on-demand cap (55.04): no spot capacity there, left out
    expected = statistics.median([z for z in zones if z < 55.04])
    p5 = get_instance("p5.48xlarge")
    assert p5.spot_usd_per_hour == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(statistics.median([10.2397, 19.2531, 21.1543, 25.7522, 17.6289]))
    assert not p5.spot_estimated


def test_unknown_spot_is_estimated_from_family_ratio():
    g5x = get_instance("g5.xlarge")  # not in the snapshot; g5.12xlarge and g5.16xlarge are
    assert g5x.spot_estimated
    ratios = [get_instance(t).spot_usd_per_hour / get_instance(t).on_demand_usd_per_hour for t in ("g5.12xlarge", "g5.16xlarge")]
    assert g5x.spot_usd_per_hour / g5x.on_demand_usd_per_hour == pytest.approx(statistics.median(ratios), rel=1e-4)


def test_interruption_bands():
    assert band_for_ratio(0.12)[0] == "5-10%"
    assert band_for_ratio(0.9) == (">20%", pytest.approx(0.25 / 730))


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
    rows = json.loads(capsys.readouterr().out)
    assert {r["instance_type"] for r in rows} == {"p4d.24xlarge", "p4de.24xlarge"}
    for key in ("instance_type", "gpu_name", "gpu_count", "gpu_memory_gib", "vcpus", "memory_gib", "network_gbps",
                "efa", "on_demand_usd_per_hour", "spot_usd_per_hour", "region"):
        assert key in rows[0]


def test_list_unknown_gpu_exits_2(capsys):
    assert main(["catalog", "list", "--gpu", "Z9000"]) == 2
    assert "unknown GPU" in capsys.readouterr().err


def test_unknown_region_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path))
    with pytest.raises(SriftError, match="no catalog for region"):
        load_catalog("mars-north-1")

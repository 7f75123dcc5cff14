"""`srift catalog gpus|list|show|refresh` on the command line: --infra, the per-GPU table, price ages,
and a refresh from stubbed public price files without credentials (or without a network)."""

import json

import pytest

import srift.catalog.aws as aws
from srift.catalog import get_instance, load_catalog
from srift.catalog.load import cache_path, clear_cache
from srift.cli import main
from test_catalog_refresh import FILES, FakeSession, opener


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SRIFT_SPOT_INTERRUPTIONS_PER_HOUR", raising=False)
    clear_cache()
    yield tmp_path
    clear_cache()


def test_gpus_lists_each_gpu_with_the_cheapest_offer_per_cloud(capsys):
    assert main(["catalog", "gpus", "--infra", "aws,gcp,lambda", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by = {g["gpu"]: g for g in data["gpus"]}
    assert set(data["catalog_as_of"]) == {"aws", "gcp", "lambda"}
    # L4: the cheapest on-demand $ per GPU-hour of each cloud, from the catalog rows by hand.
    for cloud in ("aws", "gcp"):
        rows = [r for r in load_catalog(cloud) if r.gpu_name == "L4" and r.on_demand_usd_per_hour]
        cheapest = min(r.on_demand_usd_per_hour / r.gpu_count for r in rows)
        assert by["L4"]["clouds"][cloud]["on_demand"]["usd_per_gpu_hour"] == pytest.approx(cheapest)
    assert by["A100-80GB"]["clouds"]["lambda"]["spot"] is None  # Lambda sells no spot
    assert by["K80"]["supported"] is False and by["H100"]["supported"] is True
    assert main(["catalog", "gpus", "--sort", "price"]) == 0
    out = capsys.readouterr().out
    assert "cheapest $ per GPU-hour" in out and "Prices: aws " in out and "azure" in out
    assert main(["catalog", "gpus", "--sort", "colour"]) == 2


def test_list_and_show_take_infra_and_say_how_old_the_prices_are(capsys):
    assert main(["catalog", "list", "--infra", "gcp/us-central1", "--gpu", "L4"]) == 0
    out = capsys.readouterr().out
    assert "g2-standard-8" in out and "gcp/us-central1 date not recorded (bundled)" in out
    assert main(["catalog", "list", "--infra", "aws/us-east-1,aws/us-west-2", "--gpu", "A10G"]) == 0
    out = capsys.readouterr().out
    assert "aws/us-west-2" in out and "where" in out
    assert main(["catalog", "show", "g5g.xlarge", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["host_arch"] == "arm64" and "aws/us-east-1" in data["catalog_as_of"]


def test_refresh_without_credentials_from_stubbed_public_files_updates_the_cache(monkeypatch, capsys):
    monkeypatch.setattr(aws, "_urlopen", opener(FILES))
    monkeypatch.setattr("boto3.Session", lambda *a, **k: FakeSession())
    assert main(["catalog", "refresh", "--infra", "aws/us-west-2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Catalog refreshed: 2 GPU instance rows in 1 AWS region(s) (aws/us-west-2).")
    assert "Prices: aws/us-west-2 as of 2026-10-30" in out and "(refreshed)" in out
    assert cache_path("aws", "us-west-2").is_file()
    assert get_instance("g5.xlarge", "aws/us-west-2").on_demand_usd_per_hour == 1.006
    # recommend and predict now say the prices are refreshed ones
    assert main(["predict", "--model", "resnet50", "--instance", "g5.xlarge", "--region", "us-west-2", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["catalog_as_of"]["aws/us-west-2"]["source"] == "refreshed"


def test_refresh_offline_keeps_the_bundled_catalog_with_one_error(monkeypatch, capsys):
    bundled = get_instance("g5.xlarge", "aws/us-west-2")
    monkeypatch.setattr(aws, "_urlopen", opener({}))
    monkeypatch.setattr("boto3.Session", lambda *a, **k: FakeSession())
    waits: list[float] = []
    monkeypatch.setattr("srift.catalog.fetch.time.sleep", waits.append)  # the waits are counted, not slept
    assert main(["catalog", "refresh"]) == 2
    assert waits == [2.0, 8.0]  # tried three times, after RETRY_DELAYS_S, before giving up
    err = capsys.readouterr().err
    assert err.startswith("Error: could not reach the AWS price list region index") and "catalog in use is unchanged" in err
    assert err.count("\n") == 2 and "Traceback" not in err  # the Error line and its To fix line
    assert get_instance("g5.xlarge", "aws/us-west-2") == bundled

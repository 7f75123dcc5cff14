"""`srift catalog refresh` with real boto3 clients, stubbed by botocore's Stubber."""

import json
import os
import time
from datetime import datetime, timezone

import boto3
import pytest
from botocore.stub import ANY, Stubber

from srift.catalog import load_catalog
from srift.catalog.aws import refresh
from srift.catalog.instances import cache_path, clear_cache
from srift.cli import main
from srift.errors import SriftError


class FakeSession:
    """A boto3-like session handing out pre-made (stubbed) clients."""

    def __init__(self, clients):
        self.clients = clients

    def client(self, name, region_name=None):
        return self.clients[name]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path))
    clear_cache()
    yield tmp_path
    clear_cache()


def _clients():
    kw = dict(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    return boto3.client("ec2", **kw), boto3.client("pricing", **kw)


def _instance_types_response():
    return {"InstanceTypes": [{
        "InstanceType": "g5.xlarge",
        "VCpuInfo": {"DefaultVCpus": 4},
        "MemoryInfo": {"SizeInMiB": 16384},
        "GpuInfo": {"Gpus": [{"Name": "A10G", "Manufacturer": "NVIDIA", "Count": 1, "MemoryInfo": {"SizeInMiB": 22888}}]},
        "NetworkInfo": {"NetworkPerformance": "Up to 10 Gigabit", "EfaSupported": False,
                        "NetworkCards": [{"BaselineBandwidthInGbps": 2.5}]},
    }, {
        "InstanceType": "m5.large",  # no GPU: skipped
        "VCpuInfo": {"DefaultVCpus": 2},
        "MemoryInfo": {"SizeInMiB": 8192},
        "NetworkInfo": {"NetworkPerformance": "Up to 10 Gigabit"},
    }]}


def _price_item(usd):
    return json.dumps({"product": {"attributes": {"instanceType": "g5.xlarge"}},
                       "terms": {"OnDemand": {"T1": {"priceDimensions": {"D1": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}}})


def test_refresh_writes_cache_that_srift_then_reads(isolated_cache):
    ec2, pricing = _clients()
    now = datetime(2026, 11, 1, tzinfo=timezone.utc)
    with Stubber(ec2) as s_ec2, Stubber(pricing) as s_pr:
        s_ec2.add_response("describe_instance_types", _instance_types_response(), {"Filters": ANY})
        s_pr.add_response("get_products", {"PriceList": [_price_item("1.1000000000")], "FormatVersion": "aws_v1"},
                          {"ServiceCode": "AmazonEC2", "Filters": ANY})
        s_ec2.add_response("describe_spot_price_history", {"SpotPriceHistory": [
            {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.40", "Timestamp": now},
            {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.90", "Timestamp": datetime(2026, 10, 31, tzinfo=timezone.utc)},
            {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-east-1b", "SpotPrice": "0.50", "Timestamp": now},
            {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-east-1c", "SpotPrice": "0.30", "Timestamp": now},
        ]}, {"InstanceTypes": ["g5.xlarge"], "ProductDescriptions": ["Linux/UNIX"], "StartTime": ANY, "EndTime": ANY})
        steps = []
        rows = refresh("us-east-1", session=FakeSession({"ec2": ec2, "pricing": pricing}), progress=steps.append)
    assert [r.instance_type for r in rows] == ["g5.xlarge"]
    g5 = rows[0]
    assert g5.gpu_name == "A10G" and g5.network_gbps == 2.5 and g5.on_demand_usd_per_hour == 1.1
    assert g5.spot_usd_per_hour == pytest.approx(0.40)  # latest price per zone (0.40, 0.50, 0.30), median
    assert not g5.spot_estimated
    assert cache_path("us-east-1").is_file() and steps
    clear_cache()
    assert [r.instance_type for r in load_catalog("us-east-1")] == ["g5.xlarge"]  # the cache is now in use


def test_no_credentials_is_one_clear_line(monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    session = boto3.Session(region_name="us-east-1")
    with pytest.raises(SriftError, match="no AWS credentials") as info:
        refresh("us-east-1", session=session)
    assert "aws configure" in info.value.hint
    assert not cache_path("us-east-1").exists()
    assert len(load_catalog("us-east-1")) >= 60  # the bundled catalog stays in use


def test_throttling_keeps_the_catalog(isolated_cache):
    ec2, pricing = _clients()
    with Stubber(ec2) as s_ec2:
        s_ec2.add_client_error("describe_instance_types", service_error_code="RequestLimitExceeded",
                               service_message="Rate exceeded", http_status_code=503)
        with pytest.raises(SriftError, match="throttled"):
            refresh("us-east-1", session=FakeSession({"ec2": ec2, "pricing": pricing}))
    assert not cache_path("us-east-1").exists()


def test_refresh_cli_exits_2_without_credentials(monkeypatch, capsys):
    import srift.catalog.aws as aws

    def no_creds(region, progress=None):
        raise SriftError("no AWS credentials found, so the catalog was not refreshed.", "configure credentials.")

    monkeypatch.setattr(aws, "refresh", no_creds)
    assert main(["catalog", "refresh"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "Traceback" not in err


def test_half_written_cache_is_never_read(isolated_cache, capsys):
    path = cache_path("us-east-1")
    path.parent.mkdir(parents=True)
    bundled = load_catalog("us-east-1")
    clear_cache()
    header = "instance_type,family,gpu_name,gpu_count,gpu_memory_gib,vcpus,memory_gib,network_gbps,efa,intra_node,on_demand_usd_per_hour,spot_usd_per_hour,spot_estimated,spot_interruption_band,spot_interruption_per_hour,region,as_of,source\n"
    path.write_text(header + "g5.xlarge,g5,A10G,1,22.35,4,16.0,2.5,false,pci")  # cut off mid-row
    future = time.time() + 60
    os.utime(path, (future, future))
    rows = load_catalog("us-east-1")
    assert len(rows) == len(bundled)
    assert "ignoring the unreadable catalog cache" in capsys.readouterr().err


def test_stale_cache_older_than_bundled_is_ignored(isolated_cache):
    path = cache_path("us-east-1")
    path.parent.mkdir(parents=True)
    path.write_text("garbage")
    os.utime(path, (0, 0))
    assert len(load_catalog("us-east-1")) >= 60

"""`srift catalog refresh`: AWS's public price list and Spot Advisor (fixtures in their real formats, a fake
HTTP opener, no network), spot history with credentials (botocore Stubber), offline behaviour, the cache."""

import io
import json
import os
import time
import tracemalloc
import urllib.error
from datetime import datetime, timezone

import boto3
import pytest
from botocore.stub import ANY, Stubber

import srift.catalog.aws as aws
import srift.catalog.fetch as fetch
from srift.catalog import catalog_as_of, get_instance, load_catalog
from srift.catalog.aws import REGION_INDEX_URL, REGION_OFFER_URL, SPOT_ADVISOR_URL, parse_spot_advisor, refresh
from srift.catalog.load import bundled_path, cache_path, clear_cache
from srift.catalog.price_list import on_demand_prices
from srift.catalog.spot import band_rate
from srift.cli import main
from srift.errors import SriftError
from srift.testing import price_list_csv, price_list_row

def row(sku, itype, usd, region="us-west-2", **columns):
    """An on-demand row and, after it, the same SKU's 1-year reserved upfront fee, as AWS lists them."""
    base = price_list_row(sku, itype, usd, region, **columns)
    return [base, {**base, "OfferTermCode": "4NA7Y494T4", "RateCode": f"{sku}.4NA7Y494T4.2TG2D8R56U", "TermType": "Reserved",
                   "Unit": "Quantity", "PricePerUnit": "9999", "LeaseContractLength": "1yr", "PurchaseOption": "All Upfront"}]


def offer_csv(rows):
    return price_list_csv([r for pair in rows for r in pair])


US_WEST_2 = offer_csv([
    row("G5LINUX", "g5.xlarge", 1.006), row("G5WIN", "g5.xlarge", 1.19, **{"Operating System": "Windows"}),
    row("G5DEDICATED", "g5.xlarge", 1.11, Tenancy="Dedicated"), row("G5SQL", "g5.xlarge", 2.5, **{"Pre Installed S/W": "SQL Std"}),
    row("G5RESERVED", "g5.xlarge", 0.5, CapacityStatus="UnusedCapacityReservation"),
    row("P4D", "p4d.24xlarge", 21.957642), row("M5", "m5.large", 0.096)])
EU_WEST_1 = offer_csv([row("M5", "m5.large", 0.107, region="eu-west-1")])
REGION_INDEX = json.dumps({
    "formatVersion": "v1.0", "disclaimer": "This pricing list is for informational purposes only.",
    "publicationDate": "2026-10-30T18:23:01Z",
    "regions": {r: {"regionCode": r, "currentVersionUrl": f"/offers/v1.0/aws/AmazonEC2/20261030182301/{r}/index.json"}
                for r in ("eu-west-1", "us-west-2")},
}, indent=2).encode()
ADVISOR = json.dumps({
    "global_rate": "<10%",
    "instance_types": {"g5.xlarge": {"emr": True, "cores": 4, "ram_gb": 16.0}, "p4d.24xlarge": {"emr": False, "cores": 96, "ram_gb": 1152.0}},
    "ranges": [{"index": 0, "label": "<5%", "dots": 0, "max": 5}, {"index": 1, "label": "5-10%", "dots": 1, "max": 11},
               {"index": 2, "label": "10-15%", "dots": 2, "max": 16}, {"index": 3, "label": "15-20%", "dots": 3, "max": 22},
               {"index": 4, "label": ">20%", "dots": 4, "max": 100}],
    "spot_advisor": {"us-west-2": {"Linux": {"g5.xlarge": {"s": 60, "r": 1}, "p4d.24xlarge": {"s": 62, "r": 4}},
                                   "Windows": {"g5.xlarge": {"s": 30, "r": 0}}}},
}).encode()
FILES = {REGION_INDEX_URL: REGION_INDEX, SPOT_ADVISOR_URL: ADVISOR,
         REGION_OFFER_URL.format(region="us-west-2"): US_WEST_2, REGION_OFFER_URL.format(region="eu-west-1"): EU_WEST_1}


def opener(files, fail=()):
    def open_url(url):
        if url in fail or url not in files:
            raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
        return io.BytesIO(files[url])
    return open_url


class FakeSession:
    """A boto3-like session: credentials or none, and pre-made (stubbed) clients."""

    def __init__(self, credentials=None, clients=None):
        self.credentials, self.clients = credentials, clients or {}

    def get_credentials(self):
        return self.credentials

    def client(self, name, region_name=None, config=None):
        assert config is None or config.retries == {"mode": "adaptive", "max_attempts": 8}
        return self.clients[name]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SRIFT_SPOT_INTERRUPTIONS_PER_HOUR", raising=False)
    monkeypatch.setattr(fetch, "RETRY_DELAYS_S", (0.0, 0.0))
    clear_cache()
    yield tmp_path
    clear_cache()


def test_public_files_refresh_a_region_without_credentials():
    bundled_g5 = get_instance("g5.xlarge", "aws/us-west-2")
    steps = []
    rows = refresh("aws/us-west-2", session=FakeSession(), progress=steps.append, opener=opener(FILES))
    assert [r.instance_type for r in rows] == ["g5.xlarge", "p4d.24xlarge"]  # m5.large: no GPU, not in the catalog
    g5, p4d = rows
    assert g5.on_demand_usd_per_hour == 1.006  # the Linux/Shared/NA/Used SKU, not Windows, Dedicated, SQL or reserved capacity
    assert g5.spot_usd_per_hour == pytest.approx(1.006 * (1 - 0.60)) and g5.spot_estimated  # the Advisor's 60 % saving
    assert (g5.spot_interruption_band, g5.spot_interruption_per_hour) == ("5-10%", pytest.approx(0.075 / 730))
    assert (p4d.spot_interruption_band, p4d.spot_interruption_per_hour) == (">20%", pytest.approx(0.25 / 730))
    assert (g5.network_gbps, g5.gpu_name, g5.host_arch) == (bundled_g5.network_gbps, "A10G", "x86_64")  # hardware kept
    assert any("no AWS credentials" in s for s in steps)
    assert cache_path("aws", "us-west-2").is_file()
    # srift now reads the refreshed region; other regions stay bundled
    assert get_instance("g5.xlarge", "aws/us-west-2").source.startswith("srift catalog refresh")
    as_of = catalog_as_of("aws", "us-west-2")
    assert (as_of.as_of, as_of.source, as_of.refreshed_regions) == ("2026-10-30", "refreshed", ("us-west-2",))
    assert catalog_as_of("aws").source == "bundled+refreshed"
    assert not get_instance("g5.xlarge", "aws/us-east-1").source.startswith("srift catalog refresh")


def test_infra_aws_refreshes_every_region_of_the_index():
    steps = []
    rows = refresh("aws", session=FakeSession(), progress=steps.append, opener=opener(FILES))
    assert {r.region for r in rows} == {"us-west-2"}
    assert any(s.startswith("eu-west-1: no GPU instance type") for s in steps)  # read, nothing to write
    assert not cache_path("aws", "eu-west-1").exists()


def test_offline_is_one_clear_error_and_the_bundled_catalog_stays():
    bundled = get_instance("g5.xlarge", "aws/us-west-2")
    with pytest.raises(SriftError, match="could not reach the AWS price list region index") as info:
        refresh("aws", session=FakeSession(), opener=opener({}))
    assert "catalog in use is unchanged" in info.value.message and "network" in info.value.hint
    assert "\n" not in info.value.message
    assert not cache_path("aws", "us-west-2").exists()
    assert get_instance("g5.xlarge", "aws/us-west-2") == bundled


def test_a_region_that_keeps_failing_keeps_its_prices_and_the_others_are_refreshed(isolated_cache):
    # eu-west-1's price list cannot be reached (three tries): us-west-2 is still written, eu-west-1's
    # earlier refresh stays as it was, and one error (exit 1) names the failed region.
    refresh("aws/eu-west-1", session=FakeSession(), opener=opener({**FILES, REGION_OFFER_URL.format(region="eu-west-1"):
                                                                   offer_csv([row("G5", "g5.xlarge", 1.2, region="eu-west-1")])}))
    before = cache_path("aws", "eu-west-1").read_bytes()
    tries = []

    def flaky(url):
        tries.append(url)
        return opener(FILES, fail={REGION_OFFER_URL.format(region="eu-west-1")})(url)

    steps = []
    with pytest.raises(SriftError) as info:
        refresh("aws", session=FakeSession(), opener=flaky, progress=steps.append)
    assert info.value.exit_code == 1
    assert info.value.message.startswith("1 of 2 AWS region(s) failed and keep the prices they had: eu-west-1 (first: could not "
                                         "reach the AWS price list of eu-west-1")
    assert info.value.message.endswith("1 refreshed (us-west-2).") and "aws/eu-west-1" in info.value.hint
    assert tries.count(REGION_OFFER_URL.format(region="eu-west-1")) == 3  # tried again twice
    assert sum("trying again" in s for s in steps) == 2
    assert cache_path("aws", "eu-west-1").read_bytes() == before
    assert get_instance("g5.xlarge", "aws/us-west-2").on_demand_usd_per_hour == 1.006


def test_a_download_that_fails_once_is_tried_again():
    url = REGION_OFFER_URL.format(region="us-west-2")
    calls = []

    def once(u):
        calls.append(u)
        if u == url and calls.count(u) == 1:
            raise urllib.error.URLError("timed out")
        return opener(FILES)(u)

    rows = refresh("aws/us-west-2", session=FakeSession(), opener=once)
    assert calls.count(url) == 2 and [r.instance_type for r in rows] == ["g5.xlarge", "p4d.24xlarge"]


def test_a_missing_file_is_not_tried_again():
    url = REGION_OFFER_URL.format(region="us-west-2")
    calls = []

    def missing(u):
        calls.append(u)
        if u == url:
            raise urllib.error.HTTPError(u, 404, "Not Found", {}, None)
        return opener(FILES)(u)

    with pytest.raises(SriftError, match="could not reach the AWS price list of us-west-2"):
        refresh("aws/us-west-2", session=FakeSession(), opener=missing)
    assert calls.count(url) == 1


def test_the_partial_refresh_command_exits_1_with_one_clear_line(monkeypatch, capsys):
    monkeypatch.setattr(aws, "_urlopen", opener(FILES, fail={REGION_OFFER_URL.format(region="eu-west-1")}))
    monkeypatch.setattr(aws, "_session_has_credentials", lambda _s: False)
    assert main(["catalog", "refresh"]) == 1
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[-2].startswith("Error: 1 of 2 AWS region(s) failed and keep the prices they had: eu-west-1")
    assert err[-1].startswith("To fix: run `srift catalog refresh --infra aws/eu-west-1` again later")
    assert "Traceback" not in captured.err
    assert get_instance("g5.xlarge", "aws/us-west-2").source.startswith("srift catalog refresh")


def _listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("code", ["../../escaped", "/tmp/abs", "us-west-2/../../x", "US-WEST-2", "us-west-2\n", "a" * 300])
def test_region_names_from_a_hostile_index_never_become_paths(code, isolated_cache, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    files = dict(FILES)
    files[REGION_INDEX_URL] = json.dumps({"regions": {"us-west-2": {}, code: {}}}).encode()
    files[REGION_OFFER_URL.format(region=code)] = US_WEST_2
    with pytest.raises(SriftError, match="region index is not in the expected format"):
        refresh("aws", session=FakeSession(), opener=opener(files))
    assert _listing(isolated_cache) == [] and _listing(outside) == []


@pytest.mark.parametrize("bad", [
    {"spot_advisor": {"us-west-2": {"Linux": {"g5.xlarge": {"s": "x", "r": 1}}}}, "ranges": []},
    {"spot_advisor": {"us-west-2": {"Linux": {"g5.xlarge": {"r": 1}}}}, "ranges": [{"label": "<5%"}]},
    {"spot_advisor": {"us-west-2": ["Linux"]}, "ranges": [{"label": "<5%"}]},
    {"spot_advisor": {"us-west-2": {"Linux": {"g5.xlarge": {"s": 250, "r": 0}}}}, "ranges": [{"label": "<5%"}]},
    {"spot_advisor": [], "ranges": 7},
])
def test_a_malformed_spot_advisor_is_one_clear_error(bad):
    files = {**FILES, SPOT_ADVISOR_URL: json.dumps(bad).encode()}
    with pytest.raises(SriftError, match="Spot Advisor file is not in the expected format"):
        refresh("aws/us-west-2", session=FakeSession(), opener=opener(files))


@pytest.mark.parametrize("price", ["Infinity", "1e400", "-3", "NaN", "abc"])
def test_an_offer_file_with_unusable_prices_writes_nothing(price, isolated_cache):
    body = offer_csv([row("G5LINUX", "g5.xlarge", 1.0)]).replace(b'"1.0000000000"', f'"{price}"'.encode())
    files = {**FILES, REGION_OFFER_URL.format(region="us-west-2"): body}
    with pytest.raises(SriftError, match="unchanged") as exc:  # refused whole (exit 2): nothing written, no "0 rows" success
        refresh("aws/us-west-2", session=FakeSession(), opener=opener(files))
    assert exc.value.exit_code == 2 and _listing(isolated_cache) == []


def test_one_huge_field_in_a_price_list_is_refused_in_bounded_memory():
    body = offer_csv([row("G5", "g5.xlarge", 1.0)]) + b'"X","' + b"a" * (8 << 20) + b'"\n'
    files = {**FILES, REGION_OFFER_URL.format(region="us-west-2"): body}
    tracemalloc.start()
    try:
        with pytest.raises(SriftError, match="could not be read.*a line is longer than"):
            refresh("aws/us-west-2", session=FakeSession(), opener=opener(files))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak - len(body) < 4 << 20  # lines are read with a bound: the 8 MB line is never held (beyond the fixture itself)


def test_an_oversized_region_index_is_refused_while_reading(monkeypatch):
    import srift.catalog.aws as aws

    monkeypatch.setattr(aws, "MAX_INPUT_BYTES", 1000)
    files = {**FILES, REGION_INDEX_URL: b'{"regions": {' + b" " * 5000 + b"}}"}
    with pytest.raises(SriftError, match="larger than"):
        refresh("aws", session=FakeSession(), opener=opener(files))


def test_hostile_spot_history_prices_are_left_out():
    from srift.catalog.aws import fetch_spot

    class Paginator:
        def paginate(self, **_):
            now = datetime.now(timezone.utc)
            return [{"SpotPriceHistory": [
                {"InstanceType": "g5.xlarge", "AvailabilityZone": z, "SpotPrice": p, "Timestamp": now}
                for z, p in (("a", "NaN"), ("b", "inf"), ("c", "-1"), ("d", "0.4"))]}]

    class EC2:
        def get_paginator(self, _):
            return Paginator()

    assert fetch_spot(EC2(), ["g5.xlarge"], lambda _m: None) == {"g5.xlarge": 0.4}


@pytest.mark.slow
def test_credentials_bring_spot_price_history():
    ec2 = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y")
    now = datetime.now(timezone.utc)
    with Stubber(ec2) as stub:
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
            {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-west-2a", "SpotPrice": "0.40", "Timestamp": now},
            {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-west-2a", "SpotPrice": "0.90", "Timestamp": datetime(2020, 1, 1, tzinfo=timezone.utc)},
            {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-west-2b", "SpotPrice": "0.50", "Timestamp": now},
            {"InstanceType": "g5.xlarge", "AvailabilityZone": "us-west-2c", "SpotPrice": "0.30", "Timestamp": now},
        ]}, {"InstanceTypes": ["g5.xlarge", "p4d.24xlarge"], "ProductDescriptions": ["Linux/UNIX"], "StartTime": ANY, "EndTime": ANY})
        rows = refresh("aws/us-west-2", session=FakeSession(credentials=object(), clients={"ec2": ec2}), opener=opener(FILES))
    g5, p4d = rows
    assert g5.spot_usd_per_hour == pytest.approx(0.40) and not g5.spot_estimated  # latest per zone (0.40, 0.50, 0.30): median
    assert g5.spot_interruption_band == "5-10%"  # bands still from the Advisor
    assert p4d.spot_usd_per_hour == pytest.approx(21.957642 * 0.38) and p4d.spot_estimated  # no history: the Advisor
    assert "EC2 spot price history" in g5.source


@pytest.mark.slow
def test_throttling_on_spot_history_writes_nothing():
    ec2 = boto3.client("ec2", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y")
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_spot_price_history", service_error_code="RequestLimitExceeded",
                              service_message="Rate exceeded", http_status_code=503)
        with pytest.raises(SriftError, match="throttled"):
            refresh("aws/us-west-2", session=FakeSession(credentials=object(), clients={"ec2": ec2}), opener=opener(FILES))
    assert not cache_path("aws", "us-west-2").exists()


def test_a_real_boto3_session_without_credentials_uses_the_advisor(monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    rows = refresh("us-west-2", session=boto3.Session(region_name="us-west-2"), opener=opener(FILES))
    assert all(r.spot_estimated for r in rows)


def test_only_aws_refreshes():
    with pytest.raises(SriftError, match="only AWS"):
        refresh("gcp", session=FakeSession(), opener=opener(FILES))


def test_price_list_csv_reading():
    want = {"g5.xlarge", "p4d.24xlarge"}
    whole = on_demand_prices(io.BytesIO(US_WEST_2), want)
    assert whole.on_demand_usd_per_hour == {"g5.xlarge": 1.006, "p4d.24xlarge": 21.957642}
    assert whole.publication_date == "2026-10-30"
    # CRLF line ends and a quoted comma inside a field read the same
    crlf = US_WEST_2.replace(b"\n", b"\r\n").replace(b"Up to 10 Gigabit", b"Up to 10, Gigabit")
    assert on_demand_prices(io.BytesIO(crlf), want) == whole
    with pytest.raises(ValueError, match="fields"):  # cut off mid-row
        on_demand_prices(io.BytesIO(US_WEST_2[: len(US_WEST_2) // 2]), want)
    with pytest.raises(ValueError, match="no column 'TermType'"):  # the JSON offer file, or anything else
        on_demand_prices(io.BytesIO(b'{"products": {}}\n' * 7), want)
    with pytest.raises(ValueError, match="before its header"):
        on_demand_prices(io.BytesIO(b""), want)


@pytest.mark.slow
def test_price_list_memory_stays_bounded():
    # 16,000 rows (about 7 MB of CSV); read row by row, memory is one row.
    body = offer_csv([row(f"SKU{i:05d}", "m5.large", 0.096) for i in range(8000)] + [row("G5", "g5.xlarge", 1.006)])
    tracemalloc.start()
    try:
        result = on_demand_prices(io.BytesIO(body), {"g5.xlarge"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.on_demand_usd_per_hour == {"g5.xlarge": 1.006}
    assert len(body) > 5_000_000 and peak < 1_500_000


def test_spot_advisor_format():
    table = parse_spot_advisor(json.loads(ADVISOR))
    assert table["us-west-2"]["g5.xlarge"].savings_pct == 60 and table["us-west-2"]["g5.xlarge"].band == "5-10%"
    assert band_rate(table["us-west-2"]["p4d.24xlarge"].band) == pytest.approx(0.25 / 730)
    with pytest.raises(ValueError):
        parse_spot_advisor({"spot_advisor": {}})


def test_refresh_cli_exits_2_with_one_line(monkeypatch, capsys):
    import srift.catalog.aws as aws

    def offline(region, progress=None):
        raise SriftError("could not reach the AWS price list (URLError); the catalog in use is unchanged.", "check your network.")

    monkeypatch.setattr(aws, "refresh", offline)
    assert main(["catalog", "refresh"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "Traceback" not in err


def test_half_written_cache_is_never_read(capsys):
    bundled = load_catalog("aws/us-west-2")
    clear_cache()
    path = cache_path("aws", "us-west-2")
    path.parent.mkdir(parents=True)
    header = bundled_path("aws").read_text().splitlines()[0]
    path.write_text(header + "\naws,us-west-2,g5.xlarge,g5,g5.xlarge,A10G:1,A10G,1,22.35,4,16.0,x86_64,pci")  # cut off mid-row
    future = time.time() + 60
    os.utime(path, (future, future))
    assert load_catalog("aws/us-west-2") == bundled
    assert "ignoring the unreadable catalog cache" in capsys.readouterr().err


def test_cache_older_than_the_bundled_catalog_is_ignored():
    rows = refresh("aws/us-west-2", session=FakeSession(), opener=opener(FILES))
    assert rows
    os.utime(cache_path("aws", "us-west-2"), (0, 0))  # an old refresh; a newer srift ships newer prices
    clear_cache()
    assert not get_instance("g5.xlarge", "aws/us-west-2").source.startswith("srift catalog refresh")

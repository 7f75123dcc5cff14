"""Refresh AWS prices into the user cache, without credentials, from AWS's public files.

* On-demand: the Price List file of each region in CSV,
  ``https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/{region}/index.csv``
  (regions from ``.../current/region_index.json``), read row by row (``srift.catalog.price_list``).
* Spot: the Spot Advisor file ``https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json``
  gives, per region and type, the average saving over on-demand (``s``, percent: spot is then
  on-demand x (1 - s/100), marked estimated) and the monthly interruption band (``r``, an index
  into ``ranges``), which replaces the price-ratio assumption (``srift.catalog.spot``).
* With AWS credentials (any boto3 source), the latest spot price per zone from EC2's spot price
  history replaces the Advisor's saving: the median over zones, as in the bundled catalog.

The instance types and their hardware are the bundled catalog's (GPU, vCPUs, network, EFA, host):
a refresh re-prices the types srift can model; a new type needs a catalog rebuild. Each region is
written atomically to <cache>/catalog/aws/<region>.csv, which srift then reads instead of the
bundled rows of that region. Remote data is untrusted: region codes must look like AWS's
(``us-east-1``) before they become file names, every file is read with a size bound, and each
region's rows are read back as the catalog reader reads them before its cache file is replaced.
Each download is tried again after a network error (``RETRY_DELAYS_S``). A region that still fails
keeps the prices it had; the others are written together, and one SriftError (exit status 1)
names the failed regions. Without the region index or the Spot Advisor nothing is refreshed.
``SRIFT_AWS_PRICE_LIST_URL`` and ``SRIFT_AWS_SPOT_ADVISOR_URL`` point the refresh at a mirror.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from srift.bounds import MAX_INPUT_BYTES, MAX_NODE_USD_PER_HOUR
from srift.catalog.fetch import Opener, Progress, offline_error, retrying
from srift.catalog.fetch import urlopen as _urlopen  # a module name tests replace
from srift.catalog.instances import Instance, instance_to_row, parse_rows, rows_to_csv
from srift.catalog.load import REFRESH_SOURCE_PREFIX, cache_path, clear_cache, load_catalog
from srift.catalog.network import FLAG_NETWORK_ASSUMED
from srift.catalog.spot import band_rate, default_band
from srift.errors import SriftError

PRICE_LIST_BASE = "https://pricing.us-east-1.amazonaws.com"
REGION_INDEX_URL = f"{PRICE_LIST_BASE}/offers/v1.0/aws/AmazonEC2/current/region_index.json"
REGION_OFFER_URL = PRICE_LIST_BASE + "/offers/v1.0/aws/AmazonEC2/current/{region}/index.csv"
SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
# A mirror (or a local test server) of the price list and the Spot Advisor file.
PRICE_LIST_ENV = "SRIFT_AWS_PRICE_LIST_URL"
SPOT_ADVISOR_ENV = "SRIFT_AWS_SPOT_ADVISOR_URL"


# An AWS region code (us-east-1, ap-southeast-5, us-gov-west-1, cn-northwest-1), the only
# region names a refresh accepts from the region index: they become cache file names.
REGION_CODE = re.compile(r"^[a-z]{2}(?:-[a-z]+){1,2}-[0-9]{1,2}$")
MAX_REGIONS = 200  # regions in one index (AWS lists about 40)
EXIT_PARTIAL = 1  # some regions refreshed, some failed (bad input stays 2)


def _sources() -> tuple[str, str, str]:
    """(region index URL, offer URL template, Spot Advisor URL): AWS's, or the mirror's of the
    environment (``SRIFT_AWS_PRICE_LIST_URL`` replaces ``https://pricing.us-east-1.amazonaws.com``)."""
    base = os.environ.get(PRICE_LIST_ENV, "").rstrip("/")
    advisor = os.environ.get(SPOT_ADVISOR_ENV) or SPOT_ADVISOR_URL
    if not base:
        return REGION_INDEX_URL, REGION_OFFER_URL, advisor
    return (REGION_INDEX_URL.replace(PRICE_LIST_BASE, base, 1), REGION_OFFER_URL.replace(PRICE_LIST_BASE, base, 1), advisor)

def _fetch_json(opener: Opener, url: str, what: str, say: Progress) -> Any:
    """The JSON document at ``url``, read with a size bound (MAX_INPUT_BYTES): a hostile or broken
    mirror cannot make srift hold an endless body in memory."""
    def read() -> bytes:
        with opener(url) as fh:
            return bytes(fh.read(MAX_INPUT_BYTES + 1))

    try:
        body = retrying(read, what, say)
        if len(body) > MAX_INPUT_BYTES:
            raise SriftError(f"{what} at {url} is larger than the {MAX_INPUT_BYTES / 2**20:,.0f} MiB srift reads; the catalog "
                             "in use is unchanged.", "check the mirror (SRIFT_AWS_PRICE_LIST_URL / SRIFT_AWS_SPOT_ADVISOR_URL).")
        return json.loads(body, parse_constant=_not_json)
    except (OSError, ValueError, RecursionError) as exc:  # URLError, timeouts and refused connections are OSErrors
        if not isinstance(exc, OSError):
            raise SriftError(f"{what} at {url} is not the JSON srift expects; the catalog in use is unchanged.",
                             "try again later; if it persists, report it.") from None
        raise offline_error(what, exc) from None


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@dataclass(frozen=True)
class AdvisorEntry:
    """The Spot Advisor's figures for one (region, type): saving over on-demand and interruption band."""

    savings_pct: float
    band: str


def parse_spot_advisor(data: Any) -> dict[str, dict[str, AdvisorEntry]]:
    """region -> instance type -> AdvisorEntry, from spot-advisor-data.json (Linux only).

    Raises:
        ValueError: when the file lacks ``spot_advisor`` or ``ranges``.
    """
    if not isinstance(data, dict) or "spot_advisor" not in data or "ranges" not in data:
        raise ValueError("spot advisor file: no 'spot_advisor' / 'ranges'")
    try:
        labels = {int(r.get("index", i)): str(r["label"])[:40] for i, r in enumerate(data["ranges"])}
        out: dict[str, dict[str, AdvisorEntry]] = {}
        for region, by_os in data["spot_advisor"].items():
            for itype, fig in (by_os.get("Linux") or {}).items():
                band = labels.get(int(fig["r"]))
                saving = float(fig["s"])
                if not 0 <= saving < 100:  # NaN fails too
                    raise ValueError(f"spot advisor file: saving {saving!r} of {str(itype)[:40]} is not a percentage below 100")
                if band is not None:
                    out.setdefault(str(region), {})[str(itype)] = AdvisorEntry(saving, band)
    except (KeyError, TypeError, AttributeError, OverflowError) as exc:  # a member missing or of the wrong type
        raise ValueError(f"spot advisor file: unexpected structure ({type(exc).__name__})") from None
    return out


def parse_region_index(data: Any) -> list[str]:
    """The region codes of the EC2 region index (``regions`` -> code -> ``currentVersionUrl``).

    Raises:
        ValueError: without ``regions``, with more than MAX_REGIONS, or with a code that is not an
            AWS region code (``../x``, ``/etc/x``: codes become file names in the cache).
    """
    if not isinstance(data, dict) or not isinstance(data.get("regions"), dict):
        raise ValueError("region index: no 'regions'")
    codes = sorted(data["regions"])
    if len(codes) > MAX_REGIONS:
        raise ValueError(f"region index: {len(codes):,} regions, more than {MAX_REGIONS}")
    for code in codes:
        if not REGION_CODE.fullmatch(code):
            raise ValueError(f"region index: {code[:60]!r} is not an AWS region code")
    return codes


def _session_has_credentials(session: Any) -> bool:
    try:
        return session.get_credentials() is not None
    except Exception:  # noqa: BLE001 (a broken profile is "no credentials" for this optional step)
        return False


def fetch_spot(ec2: Any, types: list[str], progress: Progress, now: datetime | None = None) -> dict[str, float]:
    """Median over zones of the latest spot price per type (last 24 hours of EC2 spot price history)."""
    now = now or datetime.now(timezone.utc)
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    for page in ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=types, ProductDescriptions=["Linux/UNIX"], StartTime=now - timedelta(days=1), EndTime=now
    ):
        for rec in page["SpotPriceHistory"]:
            key = (rec["InstanceType"], rec["AvailabilityZone"])
            price = float(rec["SpotPrice"])
            if not 0 < price <= MAX_NODE_USD_PER_HOUR:  # NaN and infinity fail too
                continue
            if key not in latest or rec["Timestamp"] > latest[key][0]:
                latest[key] = (rec["Timestamp"], price)
    per_type: dict[str, list[float]] = {}
    for (itype, _zone), (_ts, price) in latest.items():
        per_type.setdefault(itype, []).append(price)
    progress(f"spot price history of {len(per_type)} types")
    return {t: statistics.median(p) for t, p in per_type.items()}


def _spot_history(session: Any, region: str, types: list[str], progress: Progress) -> dict[str, float]:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        from botocore.config import Config

        # Adaptive retries: botocore backs off and rate-limits itself on throttling before giving up.
        client = session.client("ec2", region_name=region, config=Config(retries={"mode": "adaptive", "max_attempts": 8}))
        return fetch_spot(client, types, progress)
    except NoCredentialsError:
        raise SriftError("the AWS credentials could not be used, so spot history was not read; the catalog in use is unchanged.",
                         "configure credentials (`aws configure`, AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY).") from None
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "Error")
        if code in ("Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException"):
            raise SriftError(f"AWS throttled the spot price history ({code}); the catalog in use is unchanged.",
                             "wait a minute and run it again.") from None
        raise SriftError(f"AWS refused the spot price history ({code}); the catalog in use is unchanged.",
                         "check that your credentials allow ec2:DescribeSpotPriceHistory, or unset them to use the Spot Advisor.") from None
    except BotoCoreError as exc:
        raise SriftError(f"could not reach AWS ({type(exc).__name__}); the catalog in use is unchanged.",
                         "check your network connection and region, then run it again.") from None


def _hardware_rows() -> dict[str, Instance]:
    """One bundled row per AWS instance type (us-east-1 first): the hardware a refresh re-prices."""
    out: dict[str, Instance] = {}
    for inst in sorted(load_catalog("aws"), key=lambda r: r.region != "us-east-1"):
        out.setdefault(inst.instance_type, inst)
    return out


def price_region(region: str, hardware: dict[str, Instance], on_demand: dict[str, float],
                 advisor: dict[str, AdvisorEntry], history: dict[str, float] | None, as_of: str, source: str) -> list[Instance]:
    """The refreshed rows of one region (no I/O): the public on-demand price, spot from history or the Advisor."""
    rows = []
    for itype in sorted(on_demand):
        base = hardware[itype]
        od = on_demand[itype]
        adv = advisor.get(itype)
        spot: float | None
        if history is not None and itype in history:
            spot, estimated = history[itype], False
        elif adv is not None:
            spot, estimated = od * (1 - adv.savings_pct / 100), True
        else:  # no published spot figure: no spot offer (never a price scaled from an older ratio)
            spot, estimated = None, False
        if adv is not None:
            band, rate = adv.band, band_rate(adv.band)
        elif spot is not None:
            band, rate = default_band(base.gpu_name)
        else:
            band, rate = "", 0.0
        rows.append(replace(
            base, region=region, on_demand_usd_per_hour=round(od, 6), spot_usd_per_hour=None if spot is None else round(spot, 6),
            spot_estimated=estimated, spot_interruption_band=band, spot_interruption_per_hour=round(rate, 10), zones=None,
            flags=tuple(f for f in base.flags if f == FLAG_NETWORK_ASSUMED), as_of=as_of, source=source,
        ))
    return rows


def refresh(infra: str = "aws", session: Any = None, progress: Progress | None = None, opener: Opener | None = None,
            today: str | None = None) -> list[Instance]:
    """Re-price AWS regions from the public price list and Spot Advisor; write each to the user cache.

    Args:
        infra: ``aws`` (every region AWS lists), ``aws/us-west-2``, or a bare AWS region.
        session: A boto3 Session for spot price history; default ``boto3.Session()``. Without
            credentials the Spot Advisor's savings price spot (one line says so).
        progress: Called with a short line per step.
        opener: ``opener(url)`` -> a context manager yielding the response body (tests pass a fake).
        today: ISO date for the rows' ``as_of`` when the offer file has no publication date.

    Returns:
        The refreshed rows of every region written.

    Raises:
        SriftError: a non-AWS infra; the region index or the Spot Advisor unreachable or malformed
            (nothing refreshed, exit 2); regions whose price list or spot history failed (the
            others are written first; exit 1, or 2 when none was refreshed).
    """
    from srift.catalog.infra import parse_infra

    say = progress or (lambda _msg: None)
    open_url = opener or _urlopen
    targets = parse_infra(infra)
    if any(t.cloud != "aws" for t in targets):
        raise SriftError("only AWS prices refresh from public price files.",
                         "refresh with --infra aws (or aws/REGION); other clouds: rebuild with scripts/build_catalog.py on newer data.")
    index_url, offer_url, advisor_url = _sources()
    if any(t.region is None for t in targets):
        try:
            region_list = parse_region_index(_fetch_json(open_url, index_url, "the AWS price list region index", say))
        except ValueError:
            raise SriftError("the AWS price list region index is not in the expected format.", "try again later.") from None
    else:
        region_list = [t.region for t in targets if t.region]
        bad = [r for r in region_list if not REGION_CODE.fullmatch(r)]
        if bad:
            raise SriftError(f"{bad[0][:60]!r} is not an AWS region code.", "pass --infra aws/REGION with a code like us-west-2.")
    try:
        advisor = parse_spot_advisor(_fetch_json(open_url, advisor_url, "the AWS Spot Advisor", say))
    except ValueError:
        raise SriftError("the Spot Advisor file is not in the expected format.", "try again later.") from None
    say(f"Spot Advisor: {sum(len(v) for v in advisor.values())} Linux entries")

    if session is None:
        try:
            import boto3
        except ImportError:  # the `aws` extra: spot price history needs it, the public files do not
            say("boto3 is not installed (pip install 'srift-planner[aws]' for EC2 spot price history with credentials)")
        else:
            session = boto3.Session()
    credentialed = session is not None and _session_has_credentials(session)
    if not credentialed:
        say("no AWS credentials: spot prices from the Spot Advisor's average savings (marked estimated)")

    hardware = _hardware_rows()
    stamp = today or datetime.now(timezone.utc).date().isoformat()
    texts: dict[str, str] = {}
    written: list[Instance] = []
    failed: dict[str, str] = {}
    for region in region_list:
        try:
            rows = _region_rows(_RegionJob(region, offer_url.format(region=region), open_url, hardware, advisor.get(region, {}),
                                           session if credentialed else None, stamp), say)
            if rows:
                texts[region] = _checked_csv(region, rows)
                written.extend(rows)
        except SriftError as exc:
            failed[region] = exc.message
            say(f"{region}: FAILED, its prices are unchanged: {exc.message}")
    if not texts and not failed:  # nothing usable came back: a refresh that did nothing is not a success
        where = region_list[0] if len(region_list) == 1 else f"any of the {len(region_list)} regions"
        raise SriftError(f"the AWS price list gives no usable on-demand price of a GPU instance type srift models in {where} "
                         "(none listed, or none finite and above 0); nothing was written, the catalog in use is unchanged.",
                         "try again later, or refresh a region that has GPU instances (--infra aws/us-east-1).")
    _write_cache(texts)
    for region in texts:
        say(f"{region}: {sum(r.region == region for r in written)} GPU instance types -> {cache_path('aws', region)}")
    clear_cache()
    if failed:
        _partial_failure(failed, sorted(texts), len(region_list))
    return written


def _partial_failure(failed: dict[str, str], refreshed: list[str], regions: int) -> None:
    """Raise the error of a refresh in which ``failed`` regions failed (exit 1 when others were
    refreshed, 2 when none was)."""
    first = next(iter(failed.values()))
    if len(failed) == 1 and not refreshed:
        raise SriftError(first, "try again later.")
    names = ", ".join(failed)
    raise SriftError(f"{len(failed)} of {regions} AWS region(s) failed and keep the prices they had: {names} (first: {first}); "
                     f"{len(refreshed)} refreshed" + (f" ({', '.join(refreshed[:6])}{', ...' if len(refreshed) > 6 else ''})."
                                                      if refreshed else "."),
                     f"run `srift catalog refresh --infra aws/{next(iter(failed))}` again later.",
                     exit_code=EXIT_PARTIAL if refreshed else 2)


@dataclass(frozen=True)
class _RegionJob:
    """What re-pricing one region needs."""

    region: str
    url: str
    open_url: Opener
    hardware: dict[str, Instance]
    advisor: dict[str, AdvisorEntry]
    session: Any  # a boto3 Session with credentials, or None (Spot Advisor savings)
    stamp: str


def _region_rows(job: _RegionJob, say: Progress) -> list[Instance]:
    """The re-priced rows of one region ([] when it prices no type srift models).

    Raises:
        SriftError: its price list cannot be downloaded (after the retries) or read, or the
            credentialed spot step fails.
    """
    from srift.catalog.price_list import on_demand_prices

    say(f"{job.region}: reading {job.url}")

    def read() -> Any:
        with job.open_url(job.url) as fh:
            return on_demand_prices(fh, set(job.hardware))

    try:
        offer = retrying(read, f"the AWS price list of {job.region}", say)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise SriftError(f"the AWS price list of {job.region} could not be read ({str(exc)[:200] or type(exc).__name__}); "
                         "the catalog in use is unchanged.", "try again later.") from None
    except OSError as exc:
        raise offline_error(f"the AWS price list of {job.region}", exc) from None
    if not offer.on_demand_usd_per_hour:
        say(f"{job.region}: no GPU instance type srift models is priced there")
        return []
    history = _spot_history(job.session, job.region, sorted(offer.on_demand_usd_per_hour), say) if job.session is not None else None
    as_of = offer.publication_date or job.stamp
    source = (f"{REFRESH_SOURCE_PREFIX} {job.stamp}: AWS price list (published {as_of}); "
              + ("EC2 spot price history" if history is not None else "Spot Advisor savings"))
    return price_region(job.region, job.hardware, offer.on_demand_usd_per_hour, job.advisor, history, as_of, source)


def _checked_csv(region: str, rows: list[Instance]) -> str:
    """The cache text of one region, read back as every later run will read it: a price the
    catalog reader refuses (negative, NaN, beyond bounds) refuses the refresh, not later runs."""
    text = rows_to_csv([instance_to_row(r) for r in rows])
    bad = [r for r in rows if not (r.on_demand_usd_per_hour and math.isfinite(r.on_demand_usd_per_hour)
                                   and 0 < r.on_demand_usd_per_hour <= MAX_NODE_USD_PER_HOUR)]
    try:
        if bad:
            raise ValueError(f"{bad[0].instance_type} at {bad[0].on_demand_usd_per_hour!r} $/h")
        parse_rows(text, f"refreshed {region}")
    except ValueError as exc:
        raise SriftError(f"the AWS price list of {region} gives prices srift cannot use ({str(exc)[:200]}); nothing was "
                         "written, the catalog in use is unchanged.", "try again later; if it persists, report it.") from None
    return text


def _write_cache(texts: dict[str, str]) -> None:
    """Replace the cache files of every refreshed region together (all or none)."""
    from srift.outputs import atomic_write_many

    atomic_write_many({cache_path("aws", region): text.encode("utf-8") for region, text in texts.items()})

"""Refresh the catalog from AWS with boto3: Pricing (on-demand), EC2 spot history and instance types.

The result is written atomically to the user cache (srift.files.cache_dir()/aws/REGION.csv),
which srift reads when it is newer than the bundled catalog. Any AWS failure (no credentials, no
network, throttling, access denied) raises one SriftError; the catalog in use stays as it was.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from srift.catalog.instances import (
    Instance,
    band_for_ratio,
    cache_path,
    clear_cache,
    load_catalog,
    rows_to_csv,
)
from srift.errors import SriftError
from srift.files import atomic_write_text
from srift.hardware import family_link, find_gpu

Progress = Callable[[str], None]

# Pricing's location names for the regions srift users ask for most.
REGION_NAMES = {
    "us-east-1": "US East (N. Virginia)",
    "us-east-2": "US East (Ohio)",
    "us-west-1": "US West (N. California)",
    "us-west-2": "US West (Oregon)",
    "eu-west-1": "EU (Ireland)",
    "eu-central-1": "EU (Frankfurt)",
    "ap-northeast-1": "Asia Pacific (Tokyo)",
    "ap-southeast-1": "Asia Pacific (Singapore)",
}


def _gpu_key(name: str, memory_mib: float) -> str | None:
    if name.lower() == "v100":
        return "V100-32GB" if memory_mib > 20 * 1024 else "V100-16GB"
    if name.lower() == "a100":
        return "A100-80GB" if memory_mib > 50 * 1024 else "A100-40GB"
    return find_gpu(name)


def fetch_instance_types(ec2: Any, progress: Progress) -> dict[str, dict[str, Any]]:
    """GPU instance types of the region from EC2 DescribeInstanceTypes."""
    out: dict[str, dict[str, Any]] = {}
    for page in ec2.get_paginator("describe_instance_types").paginate(
        Filters=[{"Name": "instance-type", "Values": ["p*", "g*"]}]
    ):
        for it in page["InstanceTypes"]:
            gpu_info = it.get("GpuInfo")
            if not gpu_info or not gpu_info.get("Gpus"):
                continue
            g = gpu_info["Gpus"][0]
            key = _gpu_key(g["Name"], g["MemoryInfo"]["SizeInMiB"])
            family = it["InstanceType"].split(".")[0]
            link = family_link(family)
            if key is None or link is None or g.get("Count", 0) < 1:
                continue
            net = it.get("NetworkInfo", {})
            cards = net.get("NetworkCards") or []
            gbps = sum(c.get("BaselineBandwidthInGbps") or c.get("PeakBandwidthInGbps") or 0 for c in cards)
            if not gbps:
                gbps = _parse_gbps(net.get("NetworkPerformance", ""))
            out[it["InstanceType"]] = {
                "instance_type": it["InstanceType"],
                "family": family,
                "gpu_name": key,
                "gpu_count": g["Count"],
                "gpu_memory_gib": round(g["MemoryInfo"]["SizeInMiB"] / 1024, 2),
                "vcpus": it["VCpuInfo"]["DefaultVCpus"],
                "memory_gib": round(it["MemoryInfo"]["SizeInMiB"] / 1024, 2),
                "network_gbps": float(gbps),
                "efa": bool(net.get("EfaSupported")),
                "intra_node": link,
            }
    progress(f"{len(out)} GPU instance types")
    return out


def _parse_gbps(text: str) -> float:
    m = re.search(r"(\d+(?:\.\d+)?)\s*Gigabit", text)
    return float(m.group(1)) if m else 10.0


def fetch_on_demand(pricing: Any, region: str, types: list[str], progress: Progress) -> dict[str, float]:
    """On-demand Linux, shared-tenancy hourly prices from the Pricing API."""
    location = REGION_NAMES.get(region)
    if location is None:
        raise SriftError(f"srift does not know the Pricing name of region '{region}'.", f"use one of {', '.join(REGION_NAMES)}.")
    filters = [
        {"Type": "TERM_MATCH", "Field": "location", "Value": location},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    ]
    prices: dict[str, float] = {}
    for itype in types:
        for page in pricing.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2",
            Filters=filters + [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": itype}],
        ):
            for item in page["PriceList"]:
                product = json.loads(item) if isinstance(item, str) else item
                for term in product.get("terms", {}).get("OnDemand", {}).values():
                    for dim in term.get("priceDimensions", {}).values():
                        usd = float(dim.get("pricePerUnit", {}).get("USD", 0) or 0)
                        if usd > 0:
                            prices[itype] = usd
        progress(f"on-demand price of {itype}")
    return prices


def fetch_spot(ec2: Any, types: list[str], progress: Progress, now: datetime | None = None) -> dict[str, float]:
    """Median over zones of the latest spot price per type (last 24 hours of history)."""
    now = now or datetime.now(timezone.utc)
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    for page in ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=types, ProductDescriptions=["Linux/UNIX"], StartTime=now - timedelta(days=1), EndTime=now
    ):
        for rec in page["SpotPriceHistory"]:
            key = (rec["InstanceType"], rec["AvailabilityZone"])
            ts = rec["Timestamp"]
            if key not in latest or ts > latest[key][0]:
                latest[key] = (ts, float(rec["SpotPrice"]))
    per_type: dict[str, list[float]] = {}
    for (itype, _zone), (_ts, price) in latest.items():
        per_type.setdefault(itype, []).append(price)
    progress(f"spot prices of {len(per_type)} types")
    return {t: statistics.median(p) for t, p in per_type.items()}


def refresh(region: str = "us-east-1", session: Any = None, progress: Progress | None = None) -> list[Instance]:
    """Query AWS and write the region's catalog to the user cache (atomically).

    Args:
        region: AWS region to price.
        session: A boto3 Session (tests pass one whose clients are stubbed).
        progress: Called with a short line per step.

    Raises:
        SriftError: for missing credentials, no network, throttling or any AWS error.
    """
    import boto3  # only `srift catalog refresh` needs boto3 (slow to import)
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    say = progress or (lambda _msg: None)
    session = session or boto3.Session()
    try:
        ec2 = session.client("ec2", region_name=region)
        pricing = session.client("pricing", region_name="us-east-1")  # the Pricing endpoint lives there
        types = fetch_instance_types(ec2, say)
        if not types:
            raise SriftError(f"AWS lists no GPU instance types srift can model in {region}.", "try another --region.")
        names = sorted(types)
        on_demand = fetch_on_demand(pricing, region, names, say)
        spot = fetch_spot(ec2, names, say)
    except NoCredentialsError:
        raise SriftError(
            "no AWS credentials found, so the catalog was not refreshed (the bundled catalog stays in use).",
            "configure credentials (`aws configure`, AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY).",
        ) from None
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "Error")
        if code in ("Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException"):
            raise SriftError(
                f"AWS throttled the refresh ({code}); the catalog in use is unchanged.", "wait a minute and run it again."
            ) from None
        raise SriftError(
            f"AWS refused the refresh ({code}); the catalog in use is unchanged.",
            "check that your credentials allow pricing:GetProducts, ec2:DescribeSpotPriceHistory and ec2:DescribeInstanceTypes.",
        ) from None
    except (BotoCoreError, NoRegionError) as exc:
        raise SriftError(
            f"could not reach AWS ({type(exc).__name__}); the catalog in use is unchanged.",
            "check your network connection and region, then run it again.",
        ) from None

    as_of = datetime.now(timezone.utc).date().isoformat()
    rows = []
    for itype in names:
        row = dict(types[itype])
        od = on_demand.get(itype)
        sp = spot.get(itype)
        estimated = sp is None
        if estimated and od is not None:
            sp = od * _fallback_ratio(itype)
        ratio = (sp / od) if (sp is not None and od) else 0.35
        band, rate = band_for_ratio(ratio)
        row.update(
            on_demand_usd_per_hour="" if od is None else round(od, 6),
            spot_usd_per_hour="" if sp is None else round(sp, 6),
            spot_estimated=estimated,
            spot_interruption_band=band,
            spot_interruption_per_hour=round(rate, 8),
            region=region,
            as_of=as_of,
            source="aws-api (srift catalog refresh)",
        )
        rows.append(row)
    _write_cache(region, rows)
    clear_cache()
    say(f"wrote {cache_path(region)}")
    return load_catalog(region)


def _fallback_ratio(instance_type: str) -> float:
    """Spot/on-demand ratio for a type without spot history: the bundled catalog's family ratio."""
    try:
        rows = load_catalog("us-east-1")
    except SriftError:
        return 0.35
    fam = instance_type.split(".")[0]
    ratios = [r.spot_usd_per_hour / r.on_demand_usd_per_hour for r in rows
              if r.family == fam and r.spot_usd_per_hour and r.on_demand_usd_per_hour]
    return statistics.median(ratios) if ratios else 0.35


def _write_cache(region: str, rows: list[dict[str, Any]]) -> None:
    atomic_write_text(cache_path(region), rows_to_csv(rows))

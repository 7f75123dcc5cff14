#!/usr/bin/env python3
"""Catalog speed: loading every region of every cloud (target < 100 ms), and the offer-file stream parser.

Prints, per selection: rows, regions, distinct hardware keys (simulations the search needs), the
first load in this process (CSV parse) and a repeat load (parsed once, cached), median of runs.
Then the throughput of srift.catalog.offer_file on a synthetic EC2 offer file in AWS's format.

Run: python scripts/bench_catalog.py [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.catalog import clear_cache, load_catalog  # noqa: E402
from srift.catalog.offer_file import on_demand_prices  # noqa: E402


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _offer_file(products: int) -> bytes:
    attrs = {"servicecode": "AmazonEC2", "location": "US East (N. Virginia)", "locationType": "AWS Region",
             "instanceFamily": "General purpose", "vcpu": "2", "memory": "8 GiB", "networkPerformance": "Up to 10 Gigabit",
             "tenancy": "Shared", "operatingSystem": "Linux", "licenseModel": "No License required", "operation": "RunInstances",
             "capacitystatus": "Used", "preInstalledSw": "NA", "regionCode": "us-east-1"}
    prods, od, rsv = {}, {}, {}
    for i in range(products):
        sku = f"SKU{i:08d}"
        itype = "g5.xlarge" if i == products // 2 else f"m5.{i % 7}xlarge"
        prods[sku] = {"sku": sku, "productFamily": "Compute Instance",
                      "attributes": {**attrs, "instanceType": itype, "usagetype": f"BoxUsage:{itype}"}}
        dim = {"unit": "Hrs", "pricePerUnit": {"USD": "1.0060000000"}, "description": "$1.006 per On Demand Linux Instance Hour",
               "beginRange": "0", "endRange": "Inf", "appliesTo": []}
        od[sku] = {f"{sku}.JRTCKXETXF": {"offerTermCode": "JRTCKXETXF", "sku": sku, "effectiveDate": "2026-10-01T00:00:00Z",
                                         "priceDimensions": {f"{sku}.JRTCKXETXF.6YS6EN2CT7": dim}, "termAttributes": {}}}
        rsv[sku] = {f"{sku}.{code}": {"offerTermCode": code, "sku": sku, "priceDimensions": {f"{sku}.{code}.X": dim},
                                      "termAttributes": {"LeaseContractLength": "1yr"}} for code in ("A", "B", "C", "D", "E", "F")}
    doc = {"formatVersion": "v1.0", "offerCode": "AmazonEC2", "publicationDate": "2026-10-30T18:23:01Z",
           "products": prods, "terms": {"OnDemand": od, "Reserved": rsv}}
    return json.dumps(doc, indent=2, separators=(",", " : ")).encode()


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    selections = ["aws", "gcp", "lambda", "azure", "aws,gcp,lambda,azure"]
    print(f"{'--infra':<22} {'rows':>6} {'regions':>8} {'hardware keys':>14} {'first load':>11} {'repeat':>9}")
    for sel in selections:
        firsts, repeats = [], []
        for _ in range(args.runs):
            clear_cache()
            firsts.append(_timed(lambda: load_catalog(sel)))
            repeats.append(_timed(lambda: load_catalog(sel)))
        rows = load_catalog(sel)
        print(f"{sel:<22} {len(rows):>6} {len({(r.cloud, r.region) for r in rows}):>8} {len({r.hardware_key for r in rows}):>14} "
              f"{statistics.median(firsts) * 1e3:>8.1f} ms {statistics.median(repeats) * 1e6:>6.0f} us")
    body = _offer_file(20000)
    t = statistics.median(_timed(lambda: on_demand_prices(io.BytesIO(body), {"g5.xlarge"})) for _ in range(3))
    print(f"offer file: {len(body) / 1e6:.1f} MB synthetic (20,000 SKUs, on-demand + 6 reserved terms each) "
          f"parsed in {t:.2f} s = {len(body) / 1e6 / t:.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

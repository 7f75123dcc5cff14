#!/usr/bin/env python3
"""Catalog speed: loading every region of every cloud (target < 100 ms), and the price list CSV reader.

Prints, per selection: rows, regions, distinct hardware keys (simulations the search needs), the
first load in this process (CSV parse) and a repeat load (parsed once, cached), median of runs.
Then the throughput of srift.catalog.price_list on a synthetic EC2 price list CSV in AWS's format.

Run: python scripts/bench_catalog.py [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.catalog import clear_cache, load_catalog  # noqa: E402
from srift.catalog.price_list import on_demand_prices  # noqa: E402
from srift.testing import price_list_csv, price_list_row  # noqa: E402


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _offer_file(rows: int) -> bytes:
    """A synthetic EC2 price list CSV in AWS's format: on-demand rows, each with six reserved rows after it."""
    out = []
    for i in range(rows):
        base = price_list_row(f"SKU{i:08d}", "g5.xlarge" if i == rows // 2 else f"m5.{i % 7}xlarge", 1.006, "us-east-1")
        out.append(base)
        out.extend({**base, "TermType": "Reserved", "OfferTermCode": code, "LeaseContractLength": "1yr"} for code in "ABCDEF")
    return price_list_csv(out)


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
    print(f"price list: {len(body) / 1e6:.1f} MB synthetic CSV (20,000 SKUs, on-demand + 6 reserved rows each) "
          f"parsed in {t:.2f} s = {len(body) / 1e6 / t:.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

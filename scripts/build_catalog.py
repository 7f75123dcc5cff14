#!/usr/bin/env python3
"""Build configs/catalog/{aws,gcp,lambda,azure}.csv, srift's bundled GPU catalog, from data/.

Sources (copies of the shared data, each with its README): data/karpenter-aws,
data/skypilot-catalog-multicloud, data/skypilot-catalog-aws-spot-snapshot. Rules:
configs/catalog/rules.yaml (naming, pairings, corrections) and configs/network.yaml (links and
networks); what they do is described in configs/catalog/README.md and in srift/catalog/build/.
The build is deterministic: the same data gives byte-identical files.

Run: python scripts/build_catalog.py [--data data] [--out configs/catalog]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.catalog.build import build_all  # noqa: E402
from srift.files import atomic_write_text  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "data", help="folder with the source catalogs (default: data/)")
    ap.add_argument("--out", type=Path, default=ROOT / "configs" / "catalog", help="output folder (default: configs/catalog/)")
    args = ap.parse_args()
    for built in build_all(args.data):
        path = atomic_write_text(args.out / f"{built.cloud}.csv", built.csv)
        rows = built.rows
        flags = Counter(f for r in rows for f in r["flags"])
        print(f"wrote {path}: {len(rows)} rows, {len({r['instance_type'] for r in rows})} types, "
              f"{len({r['region'] for r in rows})} regions, {sum(1 for r in rows if r['on_demand_usd_per_hour'] is None)} "
              f"without on-demand, {sum(1 for r in rows if r['spot_usd_per_hour'] is None)} without spot")
        if flags:
            print("  flags: " + ", ".join(f"{k} {v}" for k, v in sorted(flags.items())))
        for key, value in built.report.items():
            if value:
                print(f"  {key.replace('_', ' ')}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

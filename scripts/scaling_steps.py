"""Where a multi-node prediction's error comes from: for every job of the multi-node sources that
also ran on one GPU and on one full node (ddl-benchmarks, DLPerf, CSC), the measured and the
predicted iteration time on one GPU, on one node, and on each number of nodes, and the two steps
between them (the time one node adds to one GPU, the time the network adds to one node).

    python scripts/scaling_steps.py [--data data] [--source dlperf|csc|ddl]

A source whose error is in its 1-GPU column is a compute miss (srift/perf/compute.py); one whose
error is in the steps is the all-reduce, its overlap or the network (srift/perf/comm.py,
srift/simulate/ddp.py). ``scripts/validate.py --only dense`` prints the same rows' errors; this
prints the seconds behind them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fit_models import profile_source  # noqa: E402
from srift.fitting import multinode_data as MD  # noqa: E402
from srift.fitting import validation  # noqa: E402
from srift.fitting.scaling_steps import steps_table  # noqa: E402

LOADERS = {"ddl": MD.load_ddl, "dlperf": MD.load_dlperf, "csc": MD.load_csc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT / "data"))
    ap.add_argument("--source", choices=sorted(LOADERS), action="append", help="one source (repeatable; default: all)")
    args = ap.parse_args()
    profiles = profile_source(None)
    for name in args.source or sorted(LOADERS):
        rows = LOADERS[name](Path(args.data)).reset_index(drop=True)
        table = steps_table(rows, validation.simulate_rows(rows, profiles)["pred"])
        print(f"\n{name}: milliseconds per iteration, measured and predicted")
        with pd.option_context("display.width", 250, "display.max_rows", None, "display.float_format", "{:.1f}".format):
            print(table.to_string(index=False) if len(table) else "  (no job with 1-GPU, one-node and multi-node rows)")


if __name__ == "__main__":
    main()

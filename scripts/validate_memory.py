#!/usr/bin/env python3
"""Memory truth: every shared run must be predicted to fit, and published peaks within 10 %.

Prints, over every run of data/ whose model, per-GPU batch and GPU are known
(srift/fitting/memory_runs.py): per source, the runs, how many srift predicts ``fits``, ``may not
fit`` and ``does not fit`` (a false refusal: goal 0), with each false refusal listed; then, on the
runs that published their peak reserved memory, the caching allocator's fit
(``reserved = factor x allocated + fixed``, srift/simulate/memory.py's ALLOCATOR_* constants), its
MAPE per source, in the fit and leave-one-source-out; then the runs srift does not model, with why.

Run: python scripts/validate_memory.py [--data DIR] [--write configs/perf/validation.json]
(``--write``: every printed row into that validation.json's ``memory`` and ``memory_peak``
sections, its other sections kept; docs/accuracy.md reads them.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.fitting import memory_runs  # noqa: E402
from srift.fitting.report import Report, merge  # noqa: E402
from srift.simulate import memory  # noqa: E402


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(pred / meas - 1.0)) * 100.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "data")
    ap.add_argument("--write", type=Path, default=None, metavar="FILE",
                    help="merge the printed rows into this validation.json (configs/perf/validation.json)")
    args = ap.parse_args()
    report = Report("meas_peak_gib")
    ddp = memory_runs.ddp_runs(args.data)
    llm, skipped = memory_runs.llm_runs(args.data)
    runs = memory_runs.predict_runs(pd.concat([ddp, llm], ignore_index=True))

    print("Runs people ran, predicted (fits: p90 of the reserved peak under 95 % of the GPU's memory; "
          "does not fit = a false refusal)")
    print(f"{'source':26s} {'runs':>5s} {'fits':>5s} {'may not':>8s} {'refused':>8s}")
    for source, g in runs.groupby("source", sort=True):
        counts = g["state"].value_counts()
        report.put("memory", source, {"runs": len(g), "fits": counts.get("fits", 0),
                                      "may_not_fit": counts.get("may not fit", 0), "refused": counts.get("does not fit", 0)})
        print(f"{source:26s} {len(g):5d} {counts.get('fits', 0):5d} {counts.get('may not fit', 0):8d} "
              f"{counts.get('does not fit', 0):8d}")
    counts = runs["state"].value_counts()
    refused = runs[runs["state"] == "does not fit"]
    report.put("memory", "all", {"runs": len(runs), "fits": counts.get("fits", 0),
                                 "may_not_fit": counts.get("may not fit", 0), "refused": len(refused)})
    print(f"{'all':26s} {len(runs):5d} {counts.get('fits', 0):5d} {counts.get('may not fit', 0):8d} {len(refused):8d}")
    print(f"False refusals: {len(refused)} (goal 0)")
    for r in refused.itertuples():
        print(f"  {r.source}: {r.model} batch {r.batch_per_gpu}{f' x {int(r.seq_len)}' if pd.notna(r.seq_len) else ''} "
              f"{r.precision} {r.parallelism}+{r.checkpointing} on {r.n_gpus} x {r.gpu} ({r.capacity_gib:g} GiB): "
              f"predicted {r.reserved_gib:.1f} GiB")
    unsure = runs[runs["state"] == "may not fit"]
    print(f"May not fit (within the typical error of the GPU's usable memory; shown, not dropped): {len(unsure)}, "
          "the closest:")
    for r in unsure.assign(margin=unsure["reserved_gib"] / unsure["capacity_gib"]).nlargest(8, "margin").itertuples():
        print(f"  may not fit: {r.source}: {r.model} batch {r.batch_per_gpu} {r.precision} on {r.gpu} "
              f"({r.capacity_gib:g} GiB): predicted {r.reserved_gib:.1f} GiB")

    measured = runs[runs["meas_peak_gib"].notna()].reset_index(drop=True)
    meas = measured["meas_peak_gib"].to_numpy(float)
    fixed = memory.ALLOCATOR_FIXED_BYTES / 2**30
    factor = memory_runs.fit_allocator(measured["allocated_gib"].to_numpy(float), meas)
    fit = factor * measured["allocated_gib"].to_numpy(float) + fixed
    loso = memory_runs.leave_one_source_out(measured)
    used = measured["reserved_gib"].to_numpy(float)
    print()
    raw = memory_runs.fit_allocator(measured["allocated_gib"].to_numpy(float), meas, floor=0.0)
    print(f"Peak reserved memory, {len(measured)} runs that published it: fitted reserved = {factor:.3f} x allocated + "
          f"{fixed:.2f} GiB (unbounded fit {raw:.3f}, held at 1 or more; srift uses ALLOCATOR_FACTOR "
          f"{memory.ALLOCATOR_FACTOR:.3f})")
    print(f"{'source':26s} {'runs':>5s} {'MAPE srift':>11s} {'MAPE fit':>9s} {'LOSO':>7s}")
    for source in sorted(measured["source"].unique()):
        m = (measured["source"] == source).to_numpy()
        report.put("memory_peak", source, {"runs": int(m.sum()), "srift": _mape(used[m], meas[m]),
                                           "fit": _mape(fit[m], meas[m]), "loso": _mape(loso[m], meas[m])})
        print(f"{source:26s} {int(m.sum()):5d} {_mape(used[m], meas[m]):10.1f}% {_mape(fit[m], meas[m]):8.1f}% "
              f"{_mape(loso[m], meas[m]):6.1f}%")
    print(f"{'all':26s} {len(measured):5d} {_mape(used, meas):10.1f}% {_mape(fit, meas):8.1f}% {_mape(loso, meas):6.1f}%")
    spread = float(np.std(loso / meas - 1.0) * 100.0)
    report.put("memory_peak", "all", {"runs": len(measured), "srift": _mape(used, meas), "fit": _mape(fit, meas),
                                      "loso": _mape(loso, meas), "loso_std": spread})
    print(f"Leave-one-source-out relative error: std {spread:.1f} % (srift's typical error, ALLOCATOR_ERROR: "
          f"{memory.ALLOCATOR_ERROR * 100:.1f} %)")
    for r, u in zip(measured.itertuples(), used):
        print(f"  {r.source}: {r.model} {r.n_gpus} x {r.gpu} batch {r.batch_per_gpu} x {int(r.seq_len)} {r.checkpointing}"
              f"{' [' + r.flags + ']' if r.flags else ''}: measured {r.meas_peak_gib:.1f} GiB, predicted {u:.1f} "
              f"({(u / r.meas_peak_gib - 1) * 100:+.1f} %)")

    skipped = pd.concat([skipped, memory_runs.skipped_finetuning(args.data)], ignore_index=True)
    print()
    print(f"Not modelled ({len(skipped)} runs):")
    for (source, reason), g in skipped.groupby(["source", "reason"], sort=True):
        print(f"  {source}: {len(g)} {reason}")
    if args.write:
        print(f"wrote {merge(args.write, report.sections)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

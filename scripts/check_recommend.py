#!/usr/bin/env python3
"""Are `srift recommend`'s choices right by their own numbers? A grid of LLM and CNN recommends,
each checked for:

- a dominated choice: another of the best-ranked configurations (``--no-diverse --top 20``) no
  worse on job hours and cost at the median and at the ranking quantile and better on one
  (srift/search/dominance.py);
- an unrunnable layout: a layout row that Megatron-Core cannot split without a custom pipeline
  layout, a CP that leaves fewer tokens a rank than any published run, or one ``check_layout``
  refuses (srift/simulate/layout_rules.py, srift/simulate/layouts.py);
- when nothing meets the limits, the binding limit named (srift/search/diagnose.py).

Prints one row per case and the totals; exits 1 when any choice is dominated or any layout unrunnable.

Run: python scripts/check_recommend.py [--quick]   (a few minutes; --quick: 2 LLM and 2 CNN cases)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift import api  # noqa: E402
from srift.job import Job, JobLength  # noqa: E402
from srift.search.dominance import dominator  # noqa: E402
from srift.search.limits import Constraints  # noqa: E402
from srift.simulate.layout_rules import why_not_runnable  # noqa: E402
from srift.simulate.layouts import check_layout, pytorch_stack, stage_layers  # noqa: E402

TOP = 20
# (model, tokens, seq, limits): LLMs searched with their layouts; the first three are issue 50's.
LLM = [("mixtral-8x7b", 10**11, None, {"deadline_hours": 240.0}),
       ("llama3-70b", 2 * 10**10, 4096, {"deadline_hours": 48.0, "max_cost_usd": 5000.0}),
       ("llama3-70b", 2 * 10**10, 4096, {"deadline_hours": 48.0}),
       ("llama3-8b", 10**10, 8192, {"deadline_hours": 24.0}),
       ("llama3-8b", 10**10, None, {"max_cost_usd": 5000.0, "objective": "throughput"}),
       ("llama3.1-405b", 10**11, 8192, {"deadline_hours": 720.0})]
# (model, epochs, dataset size, limits): CNNs and a small transformer, data parallel.
CNN = [("resnet50", 90, 1_281_167, {"deadline_hours": 24.0}),
       ("resnet50", 90, 1_281_167, {"budget_usd_per_hour": 20.0}),
       ("resnet152", 10, 1_281_167, {"max_cost_usd": 50.0}),
       ("vit-b16", 30, 1_281_167, {"deadline_hours": 48.0, "spot": True})]


def check(model: str, job: Job, limits: dict[str, object]) -> tuple[str, int, int, str]:
    """(chosen, dominated choices, unrunnable layout rows, what binds) of one recommend."""
    c = Constraints(top=TOP, diverse=False, auto_max_gpus=True, **limits)  # type: ignore[arg-type]  # as the CLI without --max-gpus
    res = api.recommend(job, c, model=model)
    found = res.search
    arch = api.model_arch(model)
    recs = found.recommendations
    dominated = 0
    if recs:
        beaten_by = dominator(recs[0], recs, c.ranking_confidence)
        dominated = int(beaten_by is not None)
    unrunnable = 0
    for r in recs:
        layout = r.prediction.layout
        if layout is None or arch is None:
            continue
        seq = res.seq_len or 0
        gpn = r.gpus // r.nodes
        if check_layout(arch, layout, seq, gpn) or why_not_runnable(arch, seq, layout.pp, layout.vp, layout.cp,
                                                                    pytorch_stack(r.prediction.parallelism), stage_layers):
            unrunnable += 1
    chosen = (recs[0].label + (f" {recs[0].prediction.plan_label}" if recs[0].prediction.layout else "")) if recs else "-"
    binds = "" if recs else f"{found.cut_by}: closest {found.closest.label if found.closest else '-'}"
    return chosen, dominated, unrunnable, binds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 LLM and 2 CNN cases")
    args = ap.parse_args()
    cases = [(m, Job(seq_len=s, length=JobLength(tokens=t)), lim) for m, t, s, lim in (LLM[:2] if args.quick else LLM)]
    cases += [(m, Job(length=JobLength(epochs=e, dataset_size=n)), lim) for m, e, n, lim in (CNN[:2] if args.quick else CNN)]
    total_dom = total_bad = 0
    print(f"{'model':<14}{'limits':<44}{'s':>6}  {'dominated':>9} {'unrunnable':>10}  chosen (or what binds)")
    for model, job, limits in cases:
        t0 = time.perf_counter()
        chosen, dom, bad, binds = check(model, job, limits)
        total_dom += dom
        total_bad += bad
        lim = ", ".join(f"{k}={v}" for k, v in limits.items())
        print(f"{model:<14}{lim:<44}{time.perf_counter() - t0:>6.1f}  {dom:>9} {bad:>10}  {binds or chosen}", flush=True)
    print(f"\n{len(cases)} recommends: {total_dom} dominated choices, {total_bad} unrunnable layout rows "
          f"(of the {TOP} best-ranked rows each)")
    sys.exit(1 if total_dom or total_bad else 0)


if __name__ == "__main__":
    main()

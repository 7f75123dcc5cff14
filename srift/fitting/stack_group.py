"""scripts/validate.py's stack group (``--only stacks``): every validation row tagged with its
stack (srift/fitting/stack_tags.py), leave-one-source-out beside leave-one-stack-out, per stack.

Leave-one-stack-out refits what the rows' predictions rest on without every row of the stack:
the layout factor (``megatron_compute_factor``, srift/fitting/layouts.py) for the layout, MoE and
NeMo fine-tuning rows. The data-parallel groups (single GPU to multi-node, sharded) are all plain
PyTorch (their compute model and interference are fitted on that stack alone), so holding it out
leaves nothing to fit: that stack quotes its groups' leave-one-source-out figures
(configs/perf/accuracy.json), weighted by their rows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd

from srift.files import configs_dir
from srift.fitting import stack_tags as st
from srift.job import PYTORCH_STACK

STACK_ACCURACY_SCHEMA = "srift.stack-accuracy/v1"
# The groups of configs/perf/accuracy.json whose rows are all plain PyTorch (configs/source_stacks.yaml).
PYTORCH_GROUPS = ("single_gpu", "one_node", "multi_node", "sharded")


def _layout_part(data: Path) -> tuple[pd.DataFrame, dict[str, float]]:
    """The layout rows' part, and the factor refitted without each stack."""
    from srift.fitting import layouts as lf

    megatron, _ = lf.load_rows(data)
    titan, _ = lf.torchtitan_rows(data)
    titan = titan[titan["fp8"].isna()] if len(titan) else titan
    rows = pd.concat([megatron, titan], ignore_index=True)
    rows["stack"] = st.tag(rows, "source_slug")
    fitted = (rows["source_slug"] != lf.TORCHTITAN_SOURCE).to_numpy()
    meas = rows["value"].to_numpy(float)
    factors = {s: lf.fit_factor(rows[(rows["stack"] != s).to_numpy() & fitted]) for s in rows["stack"].unique()}
    part = st.frame("layouts", rows["stack"], meas, lf.held_out(rows, "source_slug", fitted),
                    lf.held_out(rows, "stack", fitted))
    return part, factors


def _moe_part(data: Path, factor: float) -> pd.DataFrame:
    """The MoE rows (Megatron-Core): as predicted, and with the layout factor refitted without
    the Megatron-Core rows (their step time is 1 / tokens per second)."""
    from srift.fitting import moe as mf
    from srift.simulate.layout import plan

    rows, _ = mf.load_rows(data)
    recipes, layouts = mf.load_recipes(data), mf.load_pipeline_layouts(data)
    shipped = plan.load_layout_params()
    held = dataclasses.replace(shipped, megatron_compute_factor=factor)
    mf._predict.cache_clear()
    with mock.patch.object(plan, "load_layout_params", lambda path=None: held):
        lostack = np.array([mf.predict_row(r, recipes, layouts)[0] for r in rows.itertuples()])
    mf._predict.cache_clear()
    fit = np.array([mf.predict_row(r, recipes, layouts)[0] for r in rows.itertuples()])
    stacks = st.tag(rows, "source_slug")
    meas = 1.0 / rows["value"].to_numpy(float)
    return st.frame("moe", stacks, meas, 1.0 / fit, 1.0 / lostack)


def _finetune_part(data: Path) -> pd.DataFrame:
    """The fine-tuning step-time rows: nothing is fitted on them; the NeMo rows' layout factor is
    refitted without their repository (the NeMo stack's layout rows) for both leave-outs."""
    from srift.fitting import finetune

    rows, _ = finetune.load_rows(data)
    rows = rows.join(finetune.predict_rows(rows))
    rows = rows[rows["metric"] == "tokens_per_s_per_gpu"]
    held = np.array([finetune.held_out_tokens_per_s(r, data) for r in rows.itertuples()], dtype=float)
    held = np.where(np.isnan(held), rows["predicted"].to_numpy(float), held)
    meas = 1.0 / rows["measured"].to_numpy(float)
    return st.frame("finetune", st.tag(rows, "source"), meas, 1.0 / held, 1.0 / held)


def _csc_part(data: Path) -> pd.DataFrame:
    """csc-ddp's ResNet-50 rows under Lightning and DeepSpeed (the source's DDP rows of the same
    builds are in the data-parallel groups), priced under their stack, and as plain PyTorch beside
    (printed), each anchored on the same build's measured one-GPU DDP time as the multi-node group
    anchors (t1 x simulated t_n / t_1: the stack's communication, not the compute model, is
    checked). Nothing is fitted on them: both leave-outs are the prediction."""
    from srift.fitting import datasets, validation
    from srift.zoo import load_builtin_profile

    rows = datasets.load_csc(data, stacks=True)
    ddp = datasets.load_csc(data)
    t1 = ddp[ddp["n_gpus"] == 1].set_index("job")["iteration_time_s"]
    rows = rows[rows["job"].isin(t1.index)].reset_index(drop=True)
    profiles = datasets.ProfileSource(lambda m, b, s: load_builtin_profile(m, b, s))
    meas = rows["iteration_time_s"].to_numpy(float)
    anchor = rows["job"].map(t1).to_numpy(float) / validation.simulate_rows(rows, profiles, n_gpus=1)["pred"].to_numpy(float)
    pred = anchor * validation.simulate_rows(rows, profiles)["pred"].to_numpy(float)
    plain = anchor * validation.simulate_rows(rows.assign(stack=PYTORCH_STACK), profiles)["pred"].to_numpy(float)
    for stack in sorted(rows["stack"].unique()):
        m = (rows["stack"] == stack).to_numpy()
        print(f"  csc-ddp ResNet-50 under {stack}: {int(m.sum())} runs, MAPE {np.mean(np.abs(pred[m] / meas[m] - 1)) * 100:.1f} % "
              f"priced as {stack} (signed {np.mean(pred[m] / meas[m] - 1) * 100:+.1f} %), "
              f"{np.mean(np.abs(plain[m] / meas[m] - 1)) * 100:.1f} % as plain PyTorch")
    return st.frame("data_parallel", rows["stack"], meas, pred, pred)


def _pytorch_figure(accuracy: Path) -> st.StackFigure | None:
    groups = json.loads(accuracy.read_text()).get("groups", {})
    got = [(int(groups[g]["rows"]), float(groups[g]["loso"])) for g in PYTORCH_GROUPS if g in groups]
    if not got:
        return None
    n = sum(r for r, _ in got)
    return st.StackFigure(n, round(sum(r * v for r, v in got) / n, 1), None, PYTORCH_GROUPS)


def stack_group(data: Path, write: Path | None = None) -> dict[str, st.StackFigure]:
    """Print the per-stack table; with ``write``, write the figures predictions quote."""
    layouts, factors = _layout_part(data)
    print("\nStack group: csc-ddp's runs of other stacks (nothing fitted on them):")
    parts = [layouts, _finetune_part(data), _moe_part(data, factors["megatron-core"]), _csc_part(data)]
    figures = st.stack_figures(parts)
    py = _pytorch_figure(configs_dir() / "perf" / "accuracy.json")
    if py is not None:
        figures[PYTORCH_STACK] = py
    print("Stack group: step-time MAPE % per training stack (configs/source_stacks.yaml tags each source); "
          "leave-one-stack-out refits the layout factor without every row of the stack")
    print(f"{'stack':<22}{'rows':>6}{'LOSO':>8}{'LOStackO':>10}  groups")
    for name in sorted(figures):
        f = figures[name]
        lost = f"{f.lostack:>10.1f}" if f.lostack is not None else f"{'n/a':>10}"
        print(f"{name:<22}{f.rows:>6}{f.loso:>8.1f}{lost}  {', '.join(f.groups)}")
        for group, g in f.by_group if len(f.by_group) > 1 else ():
            glost = f"{g.lostack:>10.1f}" if g.lostack is not None else f"{'n/a':>10}"
            print(f"{'  ' + group:<22}{g.rows:>6}{g.loso:>8.1f}{glost}")
    print("  factor refitted without each stack: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(factors.items())))
    print(f"  {PYTORCH_STACK}: every row of the data-parallel groups' fits; holding it out leaves nothing to fit, so it "
          "quotes those groups' LOSO (configs/perf/accuracy.json, weighted by rows)")
    if write is not None:
        def entry(v: st.StackFigure) -> dict:
            return {"rows": v.rows, "loso_mape_pct": v.loso, "lostack_mape_pct": v.lostack, "groups": list(v.groups)}

        doc = {"schema": STACK_ACCURACY_SCHEMA, "source": "scripts/validate.py --only stacks --write-stacks",
               "stacks": {k: {**entry(v), "by_group": {g: entry(f) for g, f in v.by_group}}
                          for k, v in sorted(figures.items())}}
        write.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"  wrote {write}")
    return figures

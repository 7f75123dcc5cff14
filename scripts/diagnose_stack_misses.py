"""Why two stacks miss `validate.py --only stacks` (issue #43): a print-only diagnosis, nothing fitted
into srift. Every "best" figure below is fitted ON the rows it scores, so it is a diagnosis of the
miss's shape, never a prediction (srift must not carry these constants: they are this source's).

hf-trainer (data/finetuning, dgxc-benchmarking-h100's Hugging Face PEFT + FSDP rows): Transformers'
``train_samples_per_second`` is ``max_steps x total batch / train_runtime`` (transformers 4.38.2
``trainer.py`` ``_inner_training_loop``: ``start_time`` is taken after the model is wrapped and
prepared, and ``speed_metrics`` closes it after the loop, so everything the loop runs, end-of-epoch
evaluation and checkpoint saves included, is in it). The runs' lengths are the rows' notes
(``max_steps=30`` / ``100``). Compared: srift's steady step, plus (a) one start-up of k steps per run,
(b) a per-run cost proportional to the weights' per-GPU shard (P / N).

megatron-core MoE (data/moe-training): the rows grouped by what they share, and the source's own
repeated measurements of one configuration (its releases).

    python scripts/diagnose_stack_misses.py
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.fitting import finetune  # noqa: E402
from srift.fitting import moe as mf  # noqa: E402
from srift.zoo import llm_arch  # noqa: E402
from srift.zoo.llm import decoder_profile  # noqa: E402

DATA = ROOT / "data"


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(pred / meas - 1.0)) * 100.0)


def _best(score: Callable[[float], float]) -> tuple[float, float]:
    r = minimize_scalar(score, bounds=(0.0, 1e4), method="bounded")
    return float(r.x), float(r.fun)


def hf_rows() -> pd.DataFrame:
    """The whole-run-mean rows with srift's steady step, the measured mean step, the run length
    (``max_steps`` from the notes) and the trained model's weights (billions)."""
    rows, _ = finetune.load_rows(DATA)
    rows = rows[(rows["metric"] == "tokens_per_s_per_gpu") & ~rows["steady"]].copy()
    notes = pd.read_csv(DATA / finetune.FOLDER / finetune.FILES[1], dtype=str, keep_default_na=False)
    steps = {finetune.MODELS[r["model"]]: int(m.group(1)) for r in notes.to_dict("records")
             if (m := re.search(r"max_steps=(\d+)", r["notes"])) and r["model"] in finetune.MODELS}
    rows["steps"] = rows["model"].map(steps)
    rows["pred_step"] = [finetune.predict_row(r).iteration_time_s for r in rows.itertuples()]
    rows["meas_step"] = rows["micro_batch"] * rows["grad_accum"] * rows["seq_len"] / rows["measured"]
    weights = {m: sum(layer.params for layer in decoder_profile(llm_arch(m), batch_size=1, seq_len=2048,
                                                                 precision="bf16").layers) / 1e9
               for m in rows["model"].unique()}
    rows["weights_b"] = rows["model"].map(weights)
    return rows


def hf_report() -> None:
    rows = hf_rows()
    pred, meas = rows["pred_step"].to_numpy(float), rows["meas_step"].to_numpy(float)
    print("hf-trainer: whole-run mean step (s) against srift's steady step")
    print(f"{'model':<12}{'GPUs':>6}{'steps':>7}{'measured':>10}{'srift':>8}{'ratio':>7}")
    for r in rows.itertuples():
        print(f"{r.model:<12}{r.gpus:>6}{r.steps:>7}{r.meas_step:>10.1f}{r.pred_step:>8.1f}{r.meas_step / r.pred_step:>7.2f}")
    print(f"  srift's steady step: MAPE {_mape(pred, meas):.1f} %")
    steps, gpus, wb = (rows[c].to_numpy(float) for c in ("steps", "gpus", "weights_b"))
    k, m = _best(lambda k: _mape(pred * (1 + k / steps), meas))
    print(f"  (a) + one start-up of k steps per run, any N (best k {k:.1f}, fitted here): MAPE {m:.1f} %")
    c, m = _best(lambda c: _mape(pred + c * wb / gpus / steps, meas))
    print(f"  (b) + c x weights / N per run (best c {c:.0f} GPU-s per billion weights, fitted here): MAPE {m:.1f} %")
    for name in sorted(rows["model"].unique()):
        sel = (rows["model"] == name).to_numpy()
        other = ~sel
        c_other, _ = _best(lambda c: _mape(pred[other] + c * wb[other] / gpus[other] / steps[other], meas[other]))
        c_own, _ = _best(lambda c: _mape(pred[sel] + c * wb[sel] / gpus[sel] / steps[sel], meas[sel]))
        held = _mape(pred[sel] + c_other * wb[sel] / gpus[sel] / steps[sel], meas[sel])
        print(f"      {name}: own best c {c_own:.0f}; c of the other model {c_other:.0f} -> MAPE {held:.1f} % "
              f"(steady step alone {_mape(pred[sel], meas[sel]):.1f} %)")
    print("  measured step = a + b / N per model (least squares, N <= 256; the 512-GPU row and Mistral's 256 rise again):")
    for name, g in rows[rows["gpus"] <= 256].groupby("model"):
        design = np.vstack([np.ones(len(g)), 1.0 / g["gpus"].to_numpy(float)]).T
        (a, b), *_ = np.linalg.lstsq(design, g["meas_step"].to_numpy(float), rcond=None)
        per_run = b * float(g["steps"].iloc[0]) / float(g["weights_b"].iloc[0])
        print(f"      {name}: a {a:.1f} s (srift's steady step {g['pred_step'].iloc[0]:.1f} s), b {b:.0f} GPU-s per step; "
              f"b x max_steps / weights = {per_run:.0f} GPU-s per billion weights per run")


def moe_report() -> None:
    rows, _ = mf.load_rows(DATA)
    recipes, layouts = mf.load_recipes(DATA), mf.load_pipeline_layouts(DATA)
    pred = np.array([mf.predict_row(r, recipes, layouts)[0] for r in rows.itertuples()])
    meas = rows["value"].to_numpy(float)
    err = np.abs(meas / pred - 1.0) * 100.0  # step time (1 / tokens per second), as the stack group scores it
    signed = (meas / pred - 1.0) * 100.0  # + = srift's step too long
    frame = pd.DataFrame({
        "recipe known": [mf.recipe_of(r, recipes) is not None for r in rows.itertuples()],
        "dispatcher": [mf.dispatcher_of(r, recipes) for r in rows.itertuples()],
        "EP": rows["ep"].astype(int), "PP": rows["pp"].astype(int), "VP > 1": rows["vp"].fillna(1).astype(float) > 1,
        "release": rows["source_section"].str.split(" ").str[0], "err": err, "signed": signed})
    print(f"\nmegatron-core MoE: {len(rows)} rows, step-time MAPE {err.mean():.1f} % (signed + = srift's step too long)")
    for key in ("recipe known", "dispatcher", "EP", "PP", "VP > 1", "release"):
        print(f"  by {key}:")
        for value, g in frame.groupby(key):
            print(f"    {str(value):<12}{len(g):>4} rows  MAPE {g['err'].mean():5.1f} %  signed {g['signed'].mean():+6.1f} %")
    same = rows.assign(cls=rows["precision"].str.lower().map(mf.RECIPE_PRECISION), vp=rows["vp"].fillna(1.0))
    keys = ["model", "gpu", "cls", "gpus_total", "tp", "pp", "cp", "ep", "vp", "micro_batch", "global_batch"]
    print("  one configuration measured more than once (the source's releases):")
    for key, g in same.groupby(keys, dropna=False):
        if len(g) > 1:
            values = g["value"].to_numpy(float)
            print(f"    {key[0]} {key[1]} {key[2]} {key[3]} GPUs EP{key[7]}: "
                  + ", ".join(f"{v:,.0f} ({s.split(' ')[0]})" for v, s in zip(values, g["source_section"]))
                  + f" tokens/s/GPU: {values.max() / values.min():.2f}x apart")


def moe_vp_report() -> None:
    """Rows matched to a recipe (``recipe_of``: GPUs, TP, PP, EP, micro-batch) whose virtual
    pipeline stages differ from the recipe's (data/moe-training/recipes, column ``vp``): what they
    are predicted with the recipe's settings and with srift's defaults for an unknown recipe."""
    rows, _ = mf.load_rows(DATA)
    recipes, layouts = mf.load_recipes(DATA), mf.load_pipeline_layouts(DATA)
    table = pd.read_csv(DATA / mf.FOLDER / mf.RECIPES, keep_default_na=False)
    recipe_vp = {(r.model, r.gpu, r.precision): int(r.vp or 1) for r in table.itertuples()}
    print("  rows matched to a recipe of another VP: predicted with the recipe's settings / with the defaults of an "
          "unknown recipe (least recompute that fits, the model's dispatcher or alltoall, no EP overlap, bf16 attention)")
    for r in rows.itertuples():
        recipe = mf.recipe_of(r, recipes)
        key = (mf._model_key(r), str(r.gpu), mf.RECIPE_PRECISION[str(r.precision).lower()])
        vp = 1 if pd.isna(r.vp) else int(r.vp)
        if recipe is None or recipe_vp[key] == vp:
            continue
        with_recipe = mf.predict_row(r, recipes, layouts)[0]
        defaults = mf._predict(r.zoo, r.gpu, int(r.gpus_total), int(r.gpus_per_node), mf.row_layout(r), int(r.seq_len),
                               mf.FP8_RECIPE_OF[str(r.precision).lower()], None,
                               mf.model_dispatchers(recipes).get(key[0], "alltoall"), mf.mtp_layers_of(r),
                               mf.stage_blocks_of(r, layouts))[0]
        print(f"    {key[0]} {key[1]} {key[2]} VP {vp} (recipe {recipe_vp[key]}, {str(r.source_section).split(' ')[0]}): "
              f"measured {r.value:,.0f}, {with_recipe:,.0f} ({(with_recipe / r.value - 1) * 100:+.1f} %) / "
              f"{defaults:,.0f} ({(defaults / r.value - 1) * 100:+.1f} %) tokens/s/GPU")


if __name__ == "__main__":
    hf_report()
    moe_report()
    moe_vp_report()

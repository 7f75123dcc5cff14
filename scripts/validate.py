"""Predicted vs measured iteration time for every (model, GPU, #GPUs, precision) that the zoo and
the measurements in data/ share, with leave-one-GPU-out and leave-one-model-out refits.

    python scripts/validate.py [--data data] [--profiles-dir DIR] [--table]

Single-GPU rows are predicted by the compute model alone (structural profile, no anchor). For each
row three predictions are shown: with the shipped fit (in-sample), refitted without the row's GPU
(leave-one-GPU-out; GPUs with the same silicon, e.g. V100 16/32 GB, are held out together), and
refitted without the row's model (leave-one-model-out). Multi-GPU rows (one node) go through the
simulator (``srift.simulate``); the node's interconnect is inferred from the system label
(``srift.fitting.datasets.intra_node_of``), and the leave-out refits cover the all-reduce interference
too. MAPE is printed per group: single GPU, one node multi-GPU (by source, GPU count and link,
and without the rows that model-free checks flag: super-linear or flat scaling against the same
system on fewer GPUs), and multi-node: fast.ai's DAWNBench ImageNet runs on 4, 8 and 16
p3.16xlarge (``srift.fitting.datasets.load_dawnbench_multinode``: PyTorch DDP in 2018, iteration time
from epoch times, so it includes each epoch's validation and data-loader start), predicted on the
catalog's p3.16xlarge, and the all-reduce across nodes on its own (nccl-tests-aws over EFA).
Then profiles measured on another GPU or precision: each single-GPU measurement anchors the
prediction of the same model on every other GPU/precision of its source
(``srift.fitting.compute_fit.anchor_pairs``), with none, all or the shipped share of its departure from the
model carried over. The last lines give the DDP scaling fit (t_n / t_1 ratios). ``--only dense``
prints these groups alone.

Sharded (FSDP) group: tokens/s per GPU of the PyTorch FSDP runs of data/llm-training-throughput
(``srift.fitting.sharded``), with the decoder-LLM kernel rates refitted without the row's GPU
(LOGO), model size (LOMO) or source (LOSO), and peak memory against the runs that state it (``sharded_group``;
``--only sharded`` prints it alone).

Fine-tuning group (``finetune_group``; ``--only finetune`` prints it alone): full, LoRA and QLoRA
runs of data/finetuning (``srift.fitting.finetune``: which rows and how each becomes a job): peak
memory against LitGPT's one-A10G runs, fits-or-not on every run, tokens/s per GPU against NVIDIA's
NeMo and Hugging Face PEFT runs on H100. Nothing of the fine-tuning model is fitted, on these data
or others, so each figure is already out of sample for every source left out.
Layout group: step times of Megatron-Core TP x PP x CP x DP runs (data/llm-parallel-layouts,
``srift.fitting.layouts``), leave-one-model-out and leave-one-source-out, and the mean regret of
srift's ranking of measured layouts (``layout_group``; ``--only layouts``). Its figures are
configs/perf/layouts.json's (scripts/fit_models.py); with ``--write-accuracy FILE`` every row it
prints goes into validation.json beside FILE (``layouts`` section), the file's other sections kept.

K-FAC group (``kfac_group``; ``--only kfac``): per-phase MAPE (factors, inversion, preconditioning)
of the GPU K-FAC kernel model against PipeFisher's block timings (data/kfac-layer-phases), with
its constants refitted without the row's GPU (LOGO) and without its model (LOMO). It has no
accuracy.json group: with ``--write-accuracy FILE`` its rows go into validation.json beside FILE
(``kfac`` section; ``--only finetune`` likewise writes ``finetune``, ``finetune_by_class`` and
``finetune_long``), the file's other sections kept.

Pairs (``--only pairs``; with ``--write-accuracy`` the ``pairs_*`` groups): the error of the ratio of
two predictions of the layout and MoE groups, on one GPU (other counts or layouts) and across GPUs,
from their residuals (``srift.fitting.pairs``): what `recommend` compares two plans by.

MoE group: tokens/s per GPU of Megatron-Core expert-parallel runs (data/moe-training,
``srift.fitting.moe``), force-balanced routing, nothing fitted on them (``moe_group``;
``--moe-only`` runs it alone).

Rows left out, and why: SuperBench ``float16`` (the whole model cast to fp16, not srift's amp) and
its unidentified "V100" box; NVIDIA DLE BERT pre-training (the per-GPU batch is reached by
gradient accumulation and the masked-LM head's work depends on an option the tables do not give),
and its multi-node rows with them; the DAWNBench epochs at other image sizes than the zoo's 224 px,
and its TensorFlow/MXNet entries; tf_cnn_benchmarks 2017 and CM-DARE (TensorFlow with parameter
servers, not PyTorch DDP).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fit_models import profile_source  # noqa: E402
from srift.perf import comm as CM  # noqa: E402
from srift.hardware import gpu as gpu_spec  # noqa: E402
from srift.perf import compute as C  # noqa: E402
from srift.fitting import comm_fit  # noqa: E402
from srift.fitting import compute_fit  # noqa: E402
from srift.fitting import datasets  # noqa: E402
from srift.fitting import validation  # noqa: E402
from srift.fitting.report import Report, slug  # noqa: E402


def silicon(gpu: str) -> str:
    """GPUs with the same chip configuration (architecture and SM count) form one hold-out group."""
    s = gpu_spec(gpu)
    return f"{s.architecture}-{s.sm_count}"


def loo_predictions(rows: pd.DataFrame, profiles: datasets.ProfileSource, key: str, fits: dict[str, C.ComputeParams],
                    interference: dict[str, float] | None = None) -> np.ndarray:
    """Predictions for every row from the fit that held out the row's ``key`` value; with
    ``interference`` (held-out value -> k), multi-GPU rows go through the simulator and use the
    all-reduce interference fitted without that value too."""
    out = np.full(len(rows), np.nan)
    for value, held in rows.groupby(key).groups.items():
        params = fits.get(value)
        if params is None:
            continue
        sub = rows.loc[held]
        if interference is not None:
            # The simulator reads the shipped parameters; point it at the refitted ones meanwhile.
            shipped = C.load_params
            C.load_params = lambda path=None, _p=params: _p  # type: ignore[assignment]
            try:
                sim = validation.simulate_rows(sub, profiles)
            finally:
                C.load_params = shipped  # type: ignore[assignment]
            pred = sim["ideal"] + interference[value] * sim["hidden"]
        else:
            pred = compute_fit.predict_rows(sub, profiles, params)
        out[rows.index.get_indexer(held)] = pred
    return out


def interference_fits(pairs: pd.DataFrame, key: str, values) -> dict[str, float]:
    """All-reduce interference refitted on the scaling pairs without each value of ``key``."""
    out = {}
    for value in values:
        keep = pairs[key] != value
        out[value], _ = comm_fit.fit_overlap_interference(pairs.loc[keep, "scaling"].to_numpy(), pairs.loc[keep, "ideal"].to_numpy(),
                                                   pairs.loc[keep, "hidden"].to_numpy(), pairs.loc[keep, "pred1"].to_numpy())
    return out


def model_free(repeats: pd.DataFrame) -> pd.DataFrame:
    """``validation.same_gpu_repeats`` rows as predictions: the other systems' time in every column (no
    model is fitted, so leaving a GPU or model out changes nothing)."""
    return repeats.assign(pred=repeats["others_s"], logo=repeats["others_s"], lomo=repeats["others_s"], loso=repeats["others_s"])


def anchored_frame(single: pd.DataFrame, params: C.ComputeParams) -> pd.DataFrame:
    """Single-GPU predictions anchored on a measurement of the same model on another GPU or
    precision (``compute_fit.anchor_pairs``, one row per pair) with the shipped anchor share, from the
    in-fit model and from each leave-out refit."""
    out = {}
    for col in ("pred", "logo", "lomo", "loso"):
        pairs = compute_fit.anchor_pairs(single, col)
        out[col] = pairs["pred"] * np.array([C.anchor_factor(float(r), params) for r in pairs["ratio"]])
    return pd.DataFrame({**out, "iteration_time_s": pairs["meas"]})


def snapshot_scaling(pairs: pd.DataFrame) -> pd.DataFrame:
    """Measured t_n / t_1 of one system, model, precision and GPU count in both Lambda snapshots
    (2022-07 and head; the per-GPU batch may differ), with the relative difference head vs 2022-07:
    a model-free floor under the scaling error on these rows."""
    key = ["system", "model", "precision", "n_gpus"]
    p = pairs.assign(system=pairs["label"].map(validation.system_of))
    med = p.groupby(key + ["source"])["scaling"].median().unstack("source")
    if not {"lambda/2022-07", "lambda/head"} <= set(med.columns):
        return pd.DataFrame(columns=["lambda/2022-07", "lambda/head", "diff_pct"])
    both = med[["lambda/2022-07", "lambda/head"]].dropna()
    return both.assign(diff_pct=(both["lambda/head"] / both["lambda/2022-07"] - 1.0) * 100.0)


def available_models(profiles: datasets.ProfileSource) -> list[str]:
    """Zoo models whose structural profile loads (SuperBench rows need resnet152, vgg16, ...)."""
    ok = []
    for m in sorted(set(datasets.SUPERBENCH_MODELS.values())):
        try:
            profiles.get(m, 8, 224 if m.startswith(("bert", "gpt")) else None)
            ok.append(m)
        except Exception:  # noqa: BLE001 - a model the zoo does not ship yet
            continue
    return ok


def multi_node_allreduce(data: Path) -> list[tuple[str, int, float, float]]:
    """The multi-node part a DDP iteration adds, validated on its own: all-reduce time across
    nodes (nccl-tests-aws, 2x p4de and 2x p5 over EFA) for messages of 1 MiB and more (DDP's
    buckets), with the shipped fit and with the EFA class refitted without the instance type."""
    from srift.perf.comm import load_params as comm_params

    nccl = datasets.load_nccl(data)
    multi = nccl[nccl["nodes"] > 1].reset_index(drop=True)
    multi["instance"] = multi["source"].str.split("/").str[1]
    shipped = comm_params()
    out = []
    for inst, held in multi.groupby("instance").groups.items():
        train = multi.drop(index=held).reset_index(drop=True)
        refit, _ = comm_fit.fit_network_class(train, shipped, "efa", shipped.networks["efa"])
        params = dataclasses.replace(shipped, networks={**shipped.networks, "efa": refit})
        # One line per run (the two 2x p5 runs, Slurm and EKS, differ by up to 2.3x: the spread
        # the EFA p90 is fitted to).
        for source, test in multi.loc[held].groupby("source"):
            big = test[test["size_bytes"] >= 2**20].reset_index(drop=True)
            if len(big):
                out.append((source.split("/", 1)[1], len(big), validation.mape(comm_fit.comm_times(big, shipped), big["time_s"]),
                            validation.mape(comm_fit.comm_times(big, params), big["time_s"])))
    return out


def family(model: str) -> str:
    """The zoo model a leave-one-model-out fit holds out for a row: BERT pre-training rows hold out
    the same encoder's SQuAD rows (``bert-base`` -> ``bert-base-squad``)."""
    return model if model.endswith("-squad") or not model.startswith("bert") else f"{model}-squad"


def multi_node_rows(data: Path) -> pd.DataFrame:
    """Every multi-node row the data map onto the zoo: ddl-benchmarks (27: three networks, 2-8
    servers of 4 RTX 2080 Ti, synthetic data), fast.ai's DAWNBench runs (3: 4-16 p3.16xlarge over
    25 Gb/s TCP, JPEGs decoded on the vCPUs), DLPerf's NVIDIA DeepLearningExamples runs (12: 2-4
    nodes of 8 V100 SXM2 over 100 Gb/s EDR InfiniBand) and CSC's ResNet-50 DDP runs (16: two nodes
    of 4 A100 or 4 V100, fp32 and AMP, PyTorch 1.11-2.9), with ``net`` (the network as measured) and
    the 1-GPU and one-node times of the jobs that have them (``t1``, ``ref_time_s``: ddl, DLPerf)."""
    scal = datasets.multi_node_scaling_rows(data)
    scal["net"] = scal["network_label"].map({"ethernet-10g-tcp": "10 GbE TCP", "infiniband": "100 Gb/s InfiniBand",
                                             "infiniband-edr": "100 Gb/s EDR IB, 8x V100",
                                             "infiniband-csc": "IB (200 Gb/s assumed), 4x A100/V100"}).fillna("100 Gb/s TCP (IPoIB)")
    dawn = datasets.load_dawnbench_multinode(data)
    if len(dawn):
        dawn = dawn.assign(net="EC2 25 Gb/s TCP", network="ethernet", network_label="ec2-tcp", gpus_per_node=8)
    rows = pd.concat([scal, dawn], ignore_index=True)
    rows["silicon"] = rows["gpu"].map(silicon)
    rows["family"] = rows["model"].map(family)
    return rows


def signed_by_source(nodes: pd.DataFrame, meas_col: str) -> None:
    """The multi-node rows' signed error (predicted over measured - 1, %) per source and precision:
    shipped fit, the row's source held out, and from the job's measured 1-GPU run (the multi-GPU
    part alone); then, within each source and model, how that last error moves with the measured
    compute speed (samples/s per GPU, 1-GPU run): a model whose error grows with compute speed is
    wrong about overlap."""
    def pct(col: str, s_: pd.DataFrame) -> pd.Series:
        return (s_[col] / s_[meas_col] - 1.0) * 100.0

    print(f"\n{'signed error by source (%)':<40}{'rows':>6}{'fit':>8}{'LOSO':>8}{'1-GPU':>8}{'LOSO MAPE':>11}")
    for (src, prec), s_ in nodes.groupby(["source", "precision"], sort=False):
        one = pct("from_one", s_).mean() if s_["from_one"].notna().all() else float("nan")
        print(f"{'  ' + src + ' ' + prec:<40}{len(s_):>6}{pct('pred', s_).mean():>+8.1f}{pct('loso', s_).mean():>+8.1f}"
              f"{one:>+8.1f}{pct('loso', s_).abs().mean():>11.1f}")
    anchored = nodes[nodes["from_one"].notna()]
    for (src, model), s_ in anchored.groupby(["source", "model"], sort=False):
        speed = s_["batch_per_gpu"] / s_["t1"]
        if len(s_) >= 3 and np.log(speed).std() > 0.05:
            slope = float(np.polyfit(np.log(speed), pct("from_one", s_), 1)[0])
            print(f"{'  ' + src + ' ' + model:<40}from its 1-GPU run: {slope:+.1f} % per e-fold of compute speed "
                  f"({speed.min():.0f}-{speed.max():.0f} samples/s per GPU)")


def refit_networks(scal: pd.DataFrame, profiles: datasets.ProfileSource, compute: C.ComputeParams,
                   k: float) -> CM.CommParams:
    """The shipped communication parameters with the interference ``k`` and the network terms the
    multi-node training rows fit, refitted on ``scal`` (scripts/fit_models.py's fit, on fewer rows)."""
    base = dataclasses.replace(CM.load_params(), overlap_interference=k)
    with validation.using_params(compute=compute):
        params, _ = comm_fit.fit_ddl_networks(scal.reset_index(drop=True), profiles, base)
    return params


def simulate_with(rows: pd.DataFrame, profiles: datasets.ProfileSource, compute: C.ComputeParams | None,
                  comm: CM.CommParams | None) -> np.ndarray:
    with validation.using_params(compute=compute, comm=comm):
        return validation.simulate_rows(rows, profiles)["pred"].to_numpy()


def multi_node_predictions(nodes: pd.DataFrame, profiles: datasets.ProfileSource, fits_gpu: dict, fits_model: dict,
                           fits_src: dict, k_gpu: dict, k_model: dict, k_src: dict) -> pd.DataFrame:
    """``pred`` (shipped), ``logo`` (compute and interference refitted without the GPU; the network
    terms are fitted on one GPU type, ddl's, and stay), ``lomo`` (compute, interference and network
    terms refitted without the model, BERT pre-training rows without the same encoder's SQuAD rows
    as well), ``lono`` (the network terms refitted without the row's network: the socket transport
    without 10 GbE or without 100 Gb/s TCP; the DAWNBench runs are in no fit), ``loso`` (compute,
    interference and network terms refitted without the row's source: ddl-benchmarks, DAWNBench or
    DLPerf) and ``from_one`` (compute anchored on the job's measured 1-GPU time: ddl and DLPerf)."""
    out = nodes.copy()
    out["pred"] = validation.simulate_rows(nodes, profiles)["pred"].to_numpy()
    out["logo"] = np.nan
    for sil, idx in nodes.groupby("silicon").groups.items():
        comm = dataclasses.replace(CM.load_params(), overlap_interference=k_gpu[sil])
        out.loc[idx, "logo"] = simulate_with(nodes.loc[idx], profiles, fits_gpu.get(sil, C.load_params()), comm)
    ddl = nodes[nodes["t1"].notna()]  # the rows the network terms are fitted on
    out["lomo"] = np.nan
    for fam, idx in nodes.groupby("family").groups.items():
        compute = fits_model.get(fam, C.load_params())
        comm = refit_networks(ddl[ddl["family"] != fam], profiles, compute, k_model.get(fam, CM.load_params().overlap_interference))
        out.loc[idx, "lomo"] = simulate_with(nodes.loc[idx], profiles, compute, comm)
    out["lono"] = out["pred"]
    for label, idx in ddl.groupby("network_label").groups.items():
        comm = refit_networks(ddl[ddl["network_label"] != label], profiles, C.load_params(), CM.load_params().overlap_interference)
        out.loc[idx, "lono"] = simulate_with(nodes.loc[idx], profiles, None, comm)
    out["loso"] = np.nan
    for src, idx in nodes.groupby("source").groups.items():
        compute = fits_src.get(src, C.load_params())
        comm = refit_networks(ddl[ddl["source"] != src], profiles, compute, k_src.get(src, CM.load_params().overlap_interference))
        out.loc[idx, "loso"] = simulate_with(nodes.loc[idx], profiles, compute, comm)
    out["from_one"] = np.nan
    sel = out["t1"].notna()
    out.loc[sel, "from_one"] = validation.simulate_anchored(out[sel], profiles)["pred"].to_numpy()
    return out


# Fewest rows behind a per-link figure in configs/perf/accuracy.json (the others use the whole group).
MIN_LINK_ROWS = 20


def sharded_group(data: Path, report: Report | None = None) -> dict:
    """The sharded group: tokens/s per GPU of the PyTorch FSDP runs of data/llm-training-throughput
    (srift.fitting.sharded: which rows and why), predicted with the shipped fit, refitted without
    the row's GPU (LOGO; also without its silicon) and without the row's model size (LOSO), and
    peak memory against the runs that state it. Prints the table (each row into ``report``'s
    ``sharded`` section); returns accuracy.json's group."""
    from srift.fitting import sharded

    rows, out = sharded.load_rows(data)
    meas = rows["tokens_per_s_per_gpu"].to_numpy(float)
    rows["silicon"] = rows["gpu"].map(silicon)
    pred = np.array([sharded.predict_row(r).tokens_per_s_per_gpu for r in rows.itertuples()])
    memo: sharded.Memo = {}  # the held-out fits share their predictions (each starts where the others do)
    cols = {"fit": pred, "LOGO": sharded.held_out(rows, "gpu", memo), "leave-silicon": sharded.held_out(rows, "silicon", memo),
            "LOMO": sharded.held_out(rows, "model", memo), "LOSO": sharded.held_out(rows, "source", memo)}
    err = {k: (v / meas - 1.0) * 100.0 for k, v in cols.items()}
    print(f"\nSharded (FSDP) group: tokens/s per GPU of {len(rows)} PyTorch FSDP runs (data/llm-training-throughput), MAPE %")
    print(f"  rows left out: " + "; ".join(f"{n} {why}" for why, n in out["reason"].value_counts().items()))
    print(f"{'':<28}{'rows':>6}" + "".join(f"{k:>15}" for k in cols))

    def line(label: str, mask: np.ndarray) -> None:
        print(f"{label:<28}{int(mask.sum()):>6}" + "".join(f"{np.abs(e[mask]).mean():>15.1f}" for e in err.values()))
        if report is not None:
            report.put("sharded", label.strip(), {"rows": int(mask.sum()),
                                                  **{slug(k): float(np.abs(e[mask]).mean()) for k, e in err.items()}})

    line("all", np.ones(len(rows), bool))
    for key in ("source", "gpu", "model", "parallelism", "checkpointing"):
        for value in sorted(rows[key].unique(), key=str):
            line(f"  {value}", (rows[key] == value).to_numpy())
    for n in sorted(rows["nodes"].unique()):
        line(f"  {n} node{'s' if n > 1 else ''}", (rows["nodes"] == n).to_numpy())
    print(f"{'bias (+ = predicted faster)':<28}{'':>6}" + "".join(f"{e.mean():>+15.1f}" for e in err.values()))
    if report is not None:
        report.put("sharded", "signed", {slug(k): float(e.mean()) for k, e in err.items()})
    print("LOGO: fused-attention efficiency and LLM matmul factor refitted without the row's GPU (leave-silicon: "
          "without A100 40/80 GB together, or H100); LOMO: without the row's model size; LOSO: without the row's source.")
    mfu = np.array([sharded.predict_row(r).mfu or np.nan for r in rows.itertuples()]) * 100.0
    ok = np.isfinite(rows["meas_mfu_pct"].to_numpy(float))
    print(f"  MFU: predicted {np.nanmean(mfu[ok]):.1f} % vs llm-foundry's stated {rows['meas_mfu_pct'][ok].mean():.1f} % on average "
          "(its formula counts all parameters, srift's 6N + 12LHs the non-embedding ones)")
    fits = np.array([sharded.predict_row(r).fits_in_memory for r in rows.itertuples()])
    if report is not None:
        report.put("sharded", "mfu", {"predicted": float(np.nanmean(mfu[ok])), "stated": float(rows["meas_mfu_pct"][ok].mean())})
        report.put("sharded", "memory", {"fits": int(fits.sum()), "rows": len(rows)})
    print(f"  memory: {int(fits.sum())} of {len(rows)} measured runs predicted to fit (95 % of the GPU usable)")
    mem = sharded.load_memory_rows(data)
    if len(mem):
        mp = np.array([sharded.predicted_peak_gib(r) for r in mem.itertuples()])
        merr = (mp / mem["meas_peak_gib"].to_numpy() - 1.0) * 100.0
        if report is not None:
            compiled = mem["compiled"].to_numpy()
            report.put("sharded", "peak memory", {"rows": len(mem), "mape": float(np.abs(merr).mean()),
                                                  "eager": float(np.abs(merr[~compiled]).mean()),
                                                  "compiled": float(np.abs(merr[compiled]).mean())})
        print(f"  peak memory per GPU vs {len(mem)} torchtitan/torchao runs that state it: MAPE {np.abs(merr).mean():.1f} % "
              f"(eager {np.abs(merr[~mem['compiled'].to_numpy()]).mean():.1f} %, torch.compile {np.abs(merr[mem['compiled'].to_numpy()]).mean():.1f} %)")
        for r, e, m in zip(mem.itertuples(), merr, mp):
            print(f"    row {r.row_id}: {r.model} {r.n_gpus} GPUs batch {r.micro_batch}x{r.seq_len} {r.checkpointing}"
                  f"{' compiled' if r.compiled else ''}: measured {r.meas_peak_gib:.1f} GiB, predicted {m:.1f} ({e:+.1f} %)")
    return {"rows": int(len(rows)), "fit": round(float(np.abs(err["fit"]).mean()), 1),
            "logo": round(float(np.abs(err["LOGO"]).mean()), 1), "lomo": round(float(np.abs(err["LOMO"]).mean()), 1),
            "loso": round(float(np.abs(err["LOSO"]).mean()), 1),
            "leave_silicon": round(float(np.abs(err["leave-silicon"]).mean()), 1),
            # As the other groups: the mean signed error of the time per token, negative = predicted too fast.
            "bias_pct": round(float(np.mean(meas / cols["fit"] - 1.0) * 100.0), 1) + 0.0,
            "basis": "llm-foundry MPT 125M-70B on A100-40GB/80GB and H100, 8-512 GPUs, FSDP1 FULL_SHARD/SHARD_GRAD_OP, bf16"}


def finetune_group(data: Path, report: Report | None = None) -> dict:
    """The fine-tuning group: peak memory MAPE and fits-or-not against the runs that state memory,
    fits-or-not on every run, tokens/s per GPU MAPE, by source and mode (see the module docstring).
    Prints the table (each row into ``report``'s ``finetune`` section); returns accuracy.json's group
    (tokens/s is the figure predictions quote)."""
    from srift.fitting import finetune

    rows, out = finetune.load_rows(data)
    rows = rows.join(finetune.predict_rows(rows))
    rows["err"] = finetune.error_pct(rows, rows)
    # Held out (NeMo rows: the layout model's factor refitted without the same repository's tables).
    rows["held_out"] = [finetune.held_out_tokens_per_s(r, data) if r.metric == "tokens_per_s_per_gpu" else np.nan
                        for r in rows.itertuples()]
    rows["loso_err"] = (rows["held_out"].fillna(rows["predicted"]) / rows["measured"] - 1.0) * 100.0
    print(f"\nFine-tuning group: {len(rows)} measurements of data/finetuning (nothing fitted on them; LOSO: the NeMo rows' "
          "layout factor refitted without their repository's pre-training tables)")
    print("  left out: " + "; ".join(f"{n} {why}" for why, n in out["reason"].value_counts().items()))
    print(f"{'':<44}{'rows':>6}{'MAPE %':>9}{'bias %':>9}{'LOSO %':>9}{'fit ok':>8}")

    def line(label: str, s: pd.DataFrame) -> None:
        loso = f"{s['loso_err'].abs().mean():>9.1f}" if s["metric"].iloc[0] != "peak_memory_gb" else f"{'':>9}"
        if report is not None:
            tag = "memory" if s["metric"].iloc[0] == "peak_memory_gb" else "steady" if s["steady"].all() else "mean"
            report.put("finetune", f"{tag} {label}",
                       {"rows": len(s), "mape": float(s["err"].abs().mean()), "signed_pct": float(s["err"].mean()),
                        "loso": float(s["loso_err"].abs().mean()), "fits": int(s["fits"].sum())})
        print(f"{label:<44}{len(s):>6}{s['err'].abs().mean():>9.1f}{s['err'].mean():>+9.1f}{loso}"
              f"{int(s['fits'].sum()):>5}/{len(s)}")

    tokens = rows["metric"] == "tokens_per_s_per_gpu"
    for s, title in ((rows[rows["metric"] == "peak_memory_gb"], "peak memory (allocated)"),
                     (rows[tokens & rows["steady"]], "tokens/s per GPU, steady-state step times"),
                     (rows[tokens & ~rows["steady"]], "tokens/s per GPU, whole-run means (aside)")):
        if not len(s):
            continue
        line(title, s)
        for (framework, mode), g in s.groupby(["framework", "finetune"]):
            line(f"  {framework[:34]} {mode}", g)
    aside = rows[tokens & ~rows["steady"]]
    if len(aside):
        if report is not None:
            report.put("finetune", "aside", {"spread": float(aside.groupby("model")["measured"].agg(lambda m: m.max() / m.min()).max()),
                                             "above": int((aside["err"] > 0).sum()), "rows": len(aside),
                                             "err_min": float(aside["err"].min()), "err_max": float(aside["err"].max())})
        print(f"  aside: Hugging Face Trainer's train_samples_per_second is samples / train_runtime over 30-100 steps, "
              f"warm-up included (lower confidence, not srift's steady-state figure: per-GPU throughput of the same per-GPU "
              f"work varies {aside.groupby('model')['measured'].agg(lambda m: m.max() / m.min()).max():.1f}x across scales); "
              f"a lower bound on the steady state: predicted above it in {int((aside['err'] > 0).sum())} of {len(aside)}")
    if report is not None:
        report.put("finetune", "fits", {"right": int(rows["fits"].sum()), "runs": len(rows)})
    print(f"fits-or-not: {int(rows['fits'].sum())} of {len(rows)} runs that ran predicted to fit "
          "(95 % of the GPU usable; bias: + = predicted more memory / faster)")
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(rows[["label", "finetune", "lora_rank", "lora_targets", "micro_batch", "grad_accum", "parallelism",
                    "plan_checkpointing", "metric", "steady", "measured", "predicted", "err", "loso_err", "fits"]]
              .round(1).to_string(index=False))
    runtime = finetune.load_runtime_rows(data)
    ratio = runtime["measured"].to_numpy(float) / np.array([finetune.predicted_runtime_min(r) for r in runtime.itertuples()])
    for mode in ("full", "lora", "qlora"):
        r_ = ratio[(runtime["finetune"] == mode).to_numpy()]
        if report is not None:  # ratios to two decimals, as printed
            report.sections.setdefault("finetune", {})[f"litgpt-runtime-{mode}"] = {
                "min": round(float(r_.min()), 2), "max": round(float(r_.max()), 2)}
    print(f"LitGPT runtimes (not in the MAPE: shorter samples, validation included), measured / predicted at 512 tokens "
          f"per sample: " + "; ".join(f"{mode} {ratio[(runtime['finetune'] == mode).to_numpy()].min():.2f}-"
                                      f"{ratio[(runtime['finetune'] == mode).to_numpy()].max():.2f}"
                                      for mode in ("full", "lora", "qlora")))
    # Where LoRA and QLoRA ran the same batches for the same epochs, the sample lengths cancel in
    # the runtime ratio: a check of QLoRA's dequantization cost.
    runtime["predicted"] = runtime["measured"] / ratio
    keys = ["label_model", "epochs", "micro_batch", "grad_accum"]
    runtime["label_model"] = runtime["label"].str.split(" ").str[0]
    pairs = runtime[runtime["finetune"] == "lora"].merge(runtime[runtime["finetune"] == "qlora"], on=keys, suffixes=("_l", "_q"))
    for r in pairs.itertuples():
        if report is not None:
            report.sections.setdefault("finetune", {})[slug(f"qlora over lora {r.label_model}")] = {
                "measured": round(float(r.measured_q / r.measured_l), 2), "predicted": round(float(r.predicted_q / r.predicted_l), 2)}
        print(f"  QLoRA / LoRA runtime, {r.label_model} (same batches and epochs): measured {r.measured_q / r.measured_l:.2f}, "
              f"predicted {r.predicted_q / r.predicted_l:.2f}")
    speed = rows[tokens & rows["steady"]]
    memory = rows[rows["metric"] == "peak_memory_gb"]
    _finetune_by_class(rows, report)
    _long_context(data, report)
    # The figure a --finetune prediction quotes is the data-parallel PyTorch path's (a --layout one
    # quotes the layout group's): its only throughput rows are the whole-run means aside, so those,
    # said as such; the NeMo steady-state figure (the Megatron path) beside it. Nothing is fitted on
    # these runs; the NeMo rows' layout factor is refitted without their repository's tables held out.
    aside_mape = round(float(aside["err"].abs().mean()), 1)
    return {"rows": int(len(aside)), "fit": aside_mape, "loso": aside_mape,
            # As the other groups: the mean signed error of the time per token, negative = predicted too fast.
            "bias_pct": round(float(np.mean(aside["measured"] / aside["predicted"] - 1.0) * 100.0), 1),
            "steady_rows": int(len(speed)), "steady_fit": round(float(speed["err"].abs().mean()), 1),
            "steady_loso": round(float(speed["loso_err"].abs().mean()), 1),
            "memory_rows": int(len(memory)), "memory_mape": round(float(memory["err"].abs().mean()), 1),
            "fits_right": int(rows["fits"].sum()), "fits_runs": int(len(rows)),
            "basis": "Hugging Face PEFT LoRA + FSDP of Llama 2 70B and Mistral 7B on 8-512 H100, whole-run means "
                     "with warm-up (lower confidence: srift predicts above every one, as a steady state must be); "
                     f"Megatron-Core (--layout) fine-tuning within {speed['loso_err'].abs().mean():.1f} % over "
                     f"{len(speed)} NeMo steady-state runs; memory: LitGPT full/LoRA/QLoRA on one A10G"}


def _gpu_class(gpu: str) -> str:
    """``consumer`` for GeForce cards (configs/gpus.yaml's pcie_p2p false), else ``data-centre``."""
    from srift.hardware import gpu as gpu_spec
    return "data-centre" if gpu_spec(gpu).pcie_p2p else "consumer"


def _finetune_by_class(rows: pd.DataFrame, report: Report | None = None) -> None:
    """Peak memory and steady-state speed of the fine-tuning rows, leave-one-source-out and by GPU class."""
    rows = rows.assign(gpu_class=[_gpu_class(g) for g in rows["gpu"]])
    print("By GPU class and source (memory: nothing of the memory model is fitted, so its LOSO is its MAPE; speed: "
          "LOSO as above)")
    print(f"  {'':<34}{'memory rows':>12}{'MAPE %':>8}{'LOSO %':>8}{'speed rows':>12}{'MAPE %':>8}{'LOSO %':>8}")
    groups = [(f"class {c}", rows[rows["gpu_class"] == c]) for c in ("data-centre", "consumer")]
    groups += [(f"source {s}", g) for s, g in rows.groupby("source")]
    for label, g in groups:
        mem = g[g["metric"] == "peak_memory_gb"]
        spd = g[(g["metric"] == "tokens_per_s_per_gpu") & g["steady"]]

        def pct(s: pd.DataFrame, col: str) -> str:
            return f"{s[col].abs().mean():>8.1f}" if len(s) else f"{'-':>8}"
        if report is not None:
            report.put("finetune_by_class", label, {
                "memory_rows": len(mem), **({"memory_mape": float(mem["err"].abs().mean())} if len(mem) else {}),
                "speed_rows": len(spd), **({"speed_mape": float(spd["err"].abs().mean()),
                                            "speed_loso": float(spd["loso_err"].abs().mean())} if len(spd) else {})})
        print(f"  {label:<34}{len(mem):>12}{pct(mem, 'err')}{pct(mem, 'err')}{len(spd):>12}{pct(spd, 'err')}"
              f"{pct(spd, 'loso_err')}")
    if not (rows["gpu_class"] == "consumer").any():
        print("  consumer: no public fine-tuning table on a consumer GPU in data/ yet")


def _long_context(data: Path, report: Report | None = None) -> None:
    """XTuner / LLaMA-Factory long-context full fine-tuning: every run fits, every OOM does not."""
    from srift.fitting import finetune_long

    rows, out = finetune_long.load_rows(data)
    rows = rows.join(finetune_long.predict_rows(rows))
    rows["err"] = (rows["predicted"] / rows["measured"] - 1.0) * 100.0
    ran, oom = rows[~rows["oom"]], rows[rows["oom"]]
    print(f"\nLong-context full fine-tuning (data/finetuning/xtuner-long-context-speed-a100.csv, {len(rows)} rows; "
          f"left out: {len(out)} Yi-34B-200K): on the most memory-saving plan (fsdp, sequence parallel as cp, "
          "checkpointing auto)")
    print(f"  runs that ran predicted to fit: {int(ran['fits'].sum())} of {len(ran)}; published OOM predicted not to fit: "
          f"{int((~oom['fits']).sum())} of {len(oom)}")
    if report is not None:
        report.put("finetune_long", "verdicts", {"ran_fit": int(ran["fits"].sum()), "ran": len(ran),
                                                 "oom_refused": int((~oom["fits"]).sum()), "oom": len(oom)})
    for framework, g in ran.groupby("framework"):
        if report is not None:
            report.put("finetune_long", f"speed {framework}", {"rows": len(g), "mape": float(g["err"].abs().mean()),
                                                               "signed_pct": float(g["err"].mean())})
        why = ("packed Alpaca, attention within each sample (--varlen-attention, samples at XTuner's 2,048-token "
               "Alpaca bound)" if framework == finetune_long.XTUNER else "the framework's settings are not stated")
        print(f"  tokens/s per GPU, {framework}: MAPE {g['err'].abs().mean():.1f} %, bias {g['err'].mean():+.1f} % over "
              f"{len(g)} runs (aside: {why})")
        for model, m in g.groupby("model"):
            print(f"    {model}: MAPE {m['err'].abs().mean():.1f} %, bias {m['err'].mean():+.1f} % over {len(m)} runs")
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(rows[["label", "sp", "oom", "fit", "memory_gib", "checkpointing", "measured", "predicted", "err"]]
              .round(1).to_string(index=False))


def layout_group(data: Path, report: Report | None = None) -> None:
    """The layout group: bf16 step times of Megatron TP x PP x CP x DP runs
    (data/llm-parallel-layouts; srift.fitting.layouts says which rows and why), with the one
    layout figure (``megatron_compute_factor``) as shipped, refitted without the row's model
    (LOMO) and without its source (LOSO), per model and per source, and the mean regret of
    srift's ranking of the measured layouts of one model and GPU count. Each printed row goes into
    ``report``'s ``layouts`` section (``signed_pct`` of step time, + = predicted too slow)."""
    from srift.fitting import layouts as lf
    from srift.simulate.layouts import load_layout_params

    megatron, out = lf.load_rows(data)
    if not len(megatron):
        return
    titan, titan_out = lf.torchtitan_rows(data)
    titan_fp8 = titan[titan["fp8"].notna()].reset_index(drop=True) if len(titan) else titan
    titan_bf16 = titan[titan["fp8"].isna()].reset_index(drop=True) if len(titan) else titan
    # torchtitan's bf16 rows are a source of the table; nothing is fitted on them.
    rows = pd.concat([megatron, titan_bf16], ignore_index=True)
    fitted = (rows["source_slug"] != lf.TORCHTITAN_SOURCE).to_numpy()
    meas = rows["value"].to_numpy(float)
    pred = np.array([lf.predict_row(r)[0] for r in rows.itertuples()])
    fits = np.array([lf.predict_row(r)[1] for r in rows.itertuples()])
    cols = {"fit": pred, "LOMO": lf.held_out(rows, "zoo", fitted), "LOSO": lf.held_out(rows, "source_slug", fitted)}

    def pct(p: np.ndarray, mask: np.ndarray) -> float:
        return float(np.mean(np.abs(p[mask] / meas[mask] - 1.0)) * 100.0)

    def line(label: str, mask: np.ndarray) -> None:
        print(f"{'  ' + label:<40}{int(mask.sum()):>6}" + "".join(f"{pct(v, mask):>8.1f}" for v in cols.values()))
        if report is not None:
            report.put("layouts", label, {"rows": int(mask.sum()), **{k.lower(): pct(v, mask) for k, v in cols.items()},
                                          "signed_pct": float(np.mean(pred[mask] / meas[mask] - 1.0) * 100.0)})

    factor = load_layout_params().megatron_compute_factor
    print(f"\nLayout group: step time of {len(rows)} runs (TP x PP x CP x DP, bf16, H100 and A100, "
          f"{rows['source_slug'].nunique()} sources: Megatron runs of data/llm-parallel-layouts, torchtitan's FSDP2 2D runs "
          f"of data/llm-training-throughput, nothing fitted on those), megatron_compute_factor {factor:.4f}. MAPE %:")
    print(f"{'':<40}{'rows':>6}" + "".join(f"{k:>8}" for k in cols))
    line("all", np.ones(len(rows), dtype=bool))
    line("Megatron sources (fitted on)", fitted)
    for m in sorted(rows["zoo"].unique()):
        line(m, (rows["zoo"] == m).to_numpy())
    for src in sorted(rows["source_slug"].unique()):
        line("source " + src, (rows["source_slug"] == src).to_numpy())
    fp8 = lf.fp8_rows(data)
    fp8_pred = np.array([lf.predict_row(r)[0] for r in fp8.itertuples()])
    fp8_err = fp8_pred / fp8["value"].to_numpy(float) - 1.0
    print(f"  fp8 (Transformer Engine FP8 GEMMs, srift/perf/fp8.py, nothing fitted on them): {len(fp8)} runs, MAPE "
          f"{np.mean(np.abs(fp8_err)) * 100:.1f} %, signed {np.mean(fp8_err) * 100:+.1f} %")
    if report is not None:
        report.put("layouts", "fp8", {"rows": len(fp8), "mape": float(np.mean(np.abs(fp8_err)) * 100),
                                      "signed_pct": float(np.mean(fp8_err) * 100)})
    long_context_subgroup(data, report)
    titan_fp8_pred = torchtitan_subgroup(titan_bf16, pred[~fitted], titan_fp8, titan_out, report)
    long_rows, _ = lf.long_context_rows(data)
    long_pred = np.array([lf.predict_row(r)[0] for r in long_rows.itertuples()])
    both = pd.concat([rows, fp8, titan_fp8, long_rows], ignore_index=True)
    groups = lf.regret_groups(both, np.concatenate([pred, fp8_pred, titan_fp8_pred, long_pred]))
    print(f"  mean regret {groups['regret'].mean() * 100:.1f} % over the {len(groups)} (model, GPU, GPU count, precision, "
          "sequence length) groups with more than one measured layout (bf16, fp8, long-context and torchtitan rows; "
          "seconds per token); signed error "
          f"{np.mean(pred[fitted] / meas[fitted] - 1.0) * 100:+.1f} % (Megatron sources); {int(fits.sum())} of {len(rows)} "
          "measured runs predicted to fit in memory")
    for g in groups.itertuples():
        print(f"    {g.zoo} {g.gpu} x {g.gpus_total} {g.precision_key} seq {g.seq_len} ({g.sources}): {g.layouts} layouts, "
              f"measured best {g.best}, srift's first {g.chosen}: regret {g.regret * 100:.1f} %")
        if report is not None:
            report.put("layouts", f"regret {g.zoo} {g.gpu} {g.gpus_total} {g.precision_key} {g.seq_len}",
                       {"layouts": int(g.layouts), "regret_pct": float(g.regret * 100)})
    claims = lf.search_claims(megatron)
    if report is not None:
        report.put("layouts", "regret", {"groups": len(groups), "mean_pct": float(groups["regret"].mean() * 100)})
        report.put("layouts", "signed Megatron sources", {"signed_pct": float(np.mean(pred[fitted] / meas[fitted] - 1.0) * 100)})
        report.put("layouts", "memory", {"fits": int(fits.sum()), "rows": len(rows)})
        report.put("layouts", "search claims", {"cases": len(claims), "mean_pct": float(np.mean(claims) * -100),
                                                "most_pct": float(min(claims) * -100), "least_pct": float(max(claims) * -100)})
    print(f"  srift's own search picks a layout it predicts {np.mean(claims) * -100:.1f} % faster than the measured one on "
          f"average ({min(claims) * -100:.0f} to {max(claims) * -100:.0f} %, {len(claims)} model x GPU counts): unmeasured, a "
          "claim to check")
    print("  left out: " + "; ".join(f"{n} {why}" for why, n in out.items()))


def torchtitan_subgroup(bf16: pd.DataFrame, bf16_pred: np.ndarray, fp8: pd.DataFrame, out: dict[str, int],
                        report: Report | None = None) -> np.ndarray:
    """The layout group's torchtitan rows (FSDP2 under TP, PP, CP; data/llm-training-throughput),
    row by row: the bf16 ones (in the table above) and the fp8 ones (torchao tensorwise FP8 GEMMs,
    srift/perf/fp8.py), nothing fitted on either. Returns the fp8 rows' predictions."""
    from srift.fitting import layouts as lf

    fp8_pred = np.array([lf.predict_row(r)[0] for r in fp8.itertuples()])
    if not len(bf16) and not len(fp8):
        return fp8_pred
    print("  torchtitan FSDP2 x TP/PP/CP (Meta H100 HBM2e 500 W, predicted as H100 SXM with 96 GB; torch.compile; nothing "
          "fitted on them), step seconds:")
    for title, frame, p in (("bf16", bf16, bf16_pred), ("fp8 tensorwise", fp8, fp8_pred)):
        if not len(frame):
            continue
        err = p / frame["value"].to_numpy(float) - 1.0
        print(f"    {title}: {len(frame)} runs, MAPE {np.mean(np.abs(err)) * 100:.1f} %, signed {np.mean(err) * 100:+.1f} %")
        if report is not None:
            report.put("layouts", f"torchtitan {title}", {"rows": len(frame), "mape": float(np.mean(np.abs(err)) * 100),
                                                           "signed_pct": float(np.mean(err) * 100)})
        for r, q, e in zip(frame.itertuples(), p, err):
            if report is not None:
                report.put("layouts", f"torchtitan row {r.row_id}", {"measured": float(r.value), "predicted": float(q),
                                                                     "error_pct": float(e * 100)})
            print(f"      row {r.row_id} {r.zoo} {r.gpus_total} GPUs {lf.row_layout(r).label:<28} {r.checkpointing:<9} "
                  f"{'async TP' if r.tp_overlap else 'vanilla TP':<10} measured {r.value:6.2f} s  predicted {q:6.2f} s  "
                  f"{e * 100:+5.1f} %")
    both = pd.concat([bf16, fp8], ignore_index=True)
    peaks = both[both["peak_gib"].notna()]
    if len(peaks):
        mem_err = np.array([lf.row_memory_gib(r) / r.peak_gib - 1.0 for r in peaks.itertuples()])
        print(f"    peak memory (torchtitan's reserved peak; {len(peaks)} runs publish it): MAPE "
              f"{np.mean(np.abs(mem_err)) * 100:.1f} %, signed {np.mean(mem_err) * 100:+.1f} %; "
              + ", ".join(f"row {r.row_id} {r.peak_gib:.1f} GiB {e * 100:+.0f} %" for r, e in zip(peaks.itertuples(), mem_err)))
        if report is not None:
            report.put("layouts", "torchtitan peak memory", {"rows": len(peaks), "mape": float(np.mean(np.abs(mem_err)) * 100),
                                                             "signed_pct": float(np.mean(mem_err) * 100)})
            for r, e in zip(peaks.itertuples(), mem_err):
                report.put("layouts", f"torchtitan peak row {r.row_id}", {"peak_gib": float(r.peak_gib), "error_pct": float(e * 100)})
    if out:
        print("    left out: " + "; ".join(f"{n} {why}" for why, n in out.items()))
    return fp8_pred


def long_context_subgroup(data: Path, report: Report | None = None) -> None:
    """The layout group's long-context rows (NeMo, context parallelism up to 1M tokens, fp8): model
    TFLOP/s per GPU as step seconds by the source's FLOP count (causal attention counted full),
    predicted with srift/perf/fp8.py, nothing fitted on them; MAPE per sequence length and per CP
    size."""
    from srift.fitting import layouts as lf

    rows, out = lf.long_context_rows(data)
    if not len(rows):
        return
    meas = rows["value"].to_numpy(float)
    err = np.array([lf.predict_row(r)[0] for r in rows.itertuples()]) / meas - 1.0
    print(f"  long context, CP (NeMo long-sequence table, {', '.join(sorted(rows['zoo'].unique()))} fp8 on "
          f"{', '.join(sorted(rows['gpu'].unique()))}; model TFLOP/s -> step by Megatron/NeMo model FLOPs, causal "
          f"attention counted full; srift/perf/fp8.py, nothing fitted on them): {len(rows)} runs, MAPE "
          f"{np.mean(np.abs(err)) * 100:.1f} %, signed {np.mean(err) * 100:+.1f} %")
    if report is not None:
        report.put("layouts", "long context", {"rows": len(rows), "mape": float(np.mean(np.abs(err)) * 100),
                                               "signed_pct": float(np.mean(err) * 100)})
    for r, e in zip(rows.itertuples(), err):
        print(f"    seq {int(r.seq_len) // 1024:>5}K {lf.row_layout(r).label:<28} measured {r.value:6.2f} s  "
              f"error {e * 100:+5.1f} %")
        if report is not None:
            report.put("layouts", f"long context {int(r.seq_len) // 1024}K", {"measured": float(r.value), "error_pct": float(e * 100)})
    by_cp = "; ".join(f"cp{c} {np.mean(np.abs(err[(rows['cp'] == c).to_numpy()])) * 100:.1f} % "
                      f"({int((rows['cp'] == c).sum())})" for c in sorted(rows["cp"].unique()))
    print(f"    MAPE by CP size (runs): {by_cp}")
    if report is not None:
        for c in sorted(rows["cp"].unique()):
            mask = (rows["cp"] == c).to_numpy()
            report.put("layouts", f"long context cp{c}", {"rows": int(mask.sum()), "mape": float(np.mean(np.abs(err[mask])) * 100)})
    if out:
        print("    left out: " + "; ".join(f"{n} {why}" for why, n in out.items()))


def kfac_group(data: Path, report: Report | None = None) -> None:
    """The K-FAC group: per-phase MAPE of the GPU kernel model (srift.perf.kfac_kernels.derive_gpu)
    against PipeFisher's timings of one transformer block (data/kfac-layer-phases), with its five
    constants as shipped, refitted without the row's GPU (LOGO), without its model (LOMO) and
    without its block width (the models sharing its factor shapes). Each printed row goes into
    ``report``'s ``kfac`` section."""
    from srift.fitting import kfac_phases as KP
    from srift.perf.kfac_kernels import load_params

    params = load_params()
    rows = KP.load_rows(data)
    shipped = params.gpu_assumptions
    logo = KP.held_out(rows, "gpu", shipped, params.shape)
    lomo = KP.held_out(rows, "model", shipped, params.shape)
    lowo = KP.held_out(rows, "width", shipped, params.shape)
    fit = {p: KP.predict(rows, p, shipped, params.shape) for p in KP.PHASES}
    print(f"\nK-FAC group: {len(rows)} PipeFisher block timings (BERT/T5/OPT on P100, V100, RTX 3090, batch 1-128), "
          "per-phase MAPE %")
    print(f"{'':<34}{'rows':>6}{'fit':>8}{'LOGO':>8}{'LOMO':>8}{'width out':>10}")
    for p in KP.PHASES:
        label = "inversion (Cholesky inverse)" if p == "inversion" else p
        print(f"{label:<34}{len(rows):>6}{KP.mape(fit[p], rows, p):>8.1f}{KP.mape(logo[p], rows, p):>8.1f}{KP.mape(lomo[p], rows, p):>8.1f}"
              f"{KP.mape(lowo[p], rows, p):>10.1f}")
        held_gpu, held_model = KP.by_group(rows, "gpu", logo, p), KP.by_group(rows, "model", lomo, p)
        if report is not None:
            report.put("kfac", p, {"rows": len(rows), "fit": KP.mape(fit[p], rows, p), "logo": KP.mape(logo[p], rows, p),
                                   "lomo": KP.mape(lomo[p], rows, p), "width_out": KP.mape(lowo[p], rows, p),
                                   **{f"gpu_{slug(g)}": e for g, e in held_gpu.items()},
                                   **{f"model_{slug(m)}": e for m, e in held_model.items()}})
        print("    GPU held out: " + ", ".join(f"{g} {e:.1f}" for g, e in held_gpu.items())
              + "; model held out: " + ", ".join(f"{m} {e:.1f}" for m, e in held_model.items()))
    print("width out: the 768/3072 blocks (bert-base, t5-base, opt-125m) predicted from a fit on the 1024/4096 ones, and back")
    print("constants (configs/perf/kfac_kernels.json): " + ", ".join(f"{k} {v:.4g}" for k, v in KP.fitted_constants(shipped).items()))
    print("GPUs: configs/gpus.yaml's P100 (PCIe), V100-16GB (SXM2) and RTX-3090 entries (PipeFisher does not say which "
          "P100 or V100 variant it ran)")


def moe_group(data: Path, table: bool = False, report: Report | None = None) -> dict | None:
    """The MoE group: tokens/s per GPU of Megatron-Core expert-parallel runs (data/moe-training;
    srift.fitting.moe says which rows and why), force-balanced routing as the source ran. Nothing
    is fitted on these rows (the one layout figure comes from dense runs of another source), so
    leave-one-model-out and leave-one-source-out are the plain error; the table splits it by model,
    GPU, precision, release of the source and where the EP group runs (each row into ``report``'s
    ``moe`` section: ``signed_pct`` of tokens/s, + = predicted too fast). Returns accuracy.json's group."""
    from srift.fitting import moe as mf

    rows, out = mf.load_rows(data)
    if not len(rows):
        return None
    meas = rows["value"].to_numpy(float)
    recipes, layouts = mf.load_recipes(data), mf.load_pipeline_layouts(data)
    got = [mf.predict_row(r, recipes, layouts) for r in rows.itertuples()]
    pred = np.array([g[0] for g in got])
    policy = [g[1] for g in got]
    err = pred / meas - 1.0
    span = ["EP across NVLink domains" if int(r.ep) > mf.nvlink_domain_gpus(r) else "EP within an NVLink domain"
            for r in rows.itertuples()]
    rack = np.array([mf.nvlink_domain_gpus(r) > int(r.gpus_per_node) for r in rows.itertuples()])  # NVL72 rows
    frame = rows.assign(err=err, span=span, release=[str(s).split(" ")[0] for s in rows["source_section"]],
                        fp8=["bf16" if mf.FP8_RECIPE_OF[str(p).lower()] is None else f"fp8 ({mf.FP8_RECIPE_OF[str(p).lower()]})"
                             for p in rows["precision"]])
    print(f"\nMoE group: tokens/s per GPU of {len(rows)} Megatron-Core expert-parallel runs ({rows['zoo'].nunique()} models; "
          "bf16 and FP8; force-balanced routing; data/moe-training). MAPE % (= LOMO = LOSO: nothing fitted on these rows):")
    print(f"{'':<40}{'rows':>6}{'MAPE':>8}{'signed':>8}")

    def line(label: str, e: np.ndarray, key: str) -> None:
        print(f"{label:<40}{len(e):>6}{np.mean(np.abs(e)) * 100:>8.1f}{np.mean(e) * 100:>+8.1f}")
        if report is not None:
            report.put("moe", key, {"rows": len(e), "mape": np.mean(np.abs(e)) * 100, "signed_pct": np.mean(e) * 100})
    line("  all", err, "all")
    if rack.any() and not rack.all():
        line("  without multi-node NVLink domains", err[~rack], "without multi-node NVLink domains")
    for title, key in (("model (leave-one-model-out)", "zoo"), ("GPU", "gpu"), ("precision", "fp8"),
                       ("release (the source's section)", "release"), ("expert-parallel group", "span")):
        print(f"  by {title}:")
        for value, grp in frame.groupby(key):
            line("    " + str(value), grp["err"].to_numpy(), f"{key} {value}")
    if table:
        for r, p, k, e in zip(rows.itertuples(), pred, policy, err):
            print(f"    {r.zoo} {r.gpu} {r.precision} {r.gpus_total} GPUs {mf.row_layout(r).label}: measured {r.value:,.0f}, "
                  f"predicted {p:,.0f} ({e * 100:+.1f} %), recompute {k}, {mf.dispatcher_of(r, recipes)}")
    print("  recompute (the recipe's, data/moe-training/recipes; else the least that fits in srift's memory model):")
    for k in sorted(set(policy)):
        print(f"    {policy.count(k):>3} {k}")
    dispatchers = [mf.dispatcher_of(r, recipes) for r in rows.itertuples()]
    print("  token dispatcher (the recipe's; else the one every recipe of the model sets; else alltoall): "
          + ", ".join(f"{dispatchers.count(d)} {d}" for d in sorted(set(dispatchers))))
    print("  left out: " + ("; ".join(f"{n} {why}" for why, n in out.items()) or "none"))
    mape = round(float(np.mean(np.abs(err)) * 100), 1)
    return {"rows": int(len(rows)), "fit": mape, "lomo": mape, "loso": mape,
            "bias_pct": round(float(np.mean(meas / pred - 1.0) * 100.0), 1) + 0.0,  # of the time per token, - = too fast
            "basis": f"Megatron-Core on {', '.join(sorted(set(map(str, rows['gpu']))))}, {rows['zoo'].nunique()} models, "
                     "force-balanced routing, each with its recipe's settings at the recipe's GPU count and layout, "
                     "else srift's defaults with the model's dispatcher where all its recipes agree; DeepSeek-V3 with its "
                     "multi-token prediction layer and its recipes' pipeline layouts"}


def write_accuracy(path: Path, groups: dict[str, pd.DataFrame], meas_col: str, basis: dict[str, str],
                   computed: dict[str, dict] | None = None) -> None:
    """The figures `srift predict` and `recommend` quote (srift/perf/accuracy.py), atomically:
    MAPE per group for each fit, the in-fit mean signed error (``bias_pct``, negative = predicted
    too fast), and what a group rests on where it is narrow (``basis``); ``computed``: groups whose
    figures are already made (the sharded group, on tokens/s)."""
    from srift.files import write_json
    from srift.perf.accuracy import SCHEMA

    def figures(df: pd.DataFrame) -> dict:
        out = {"rows": int(len(df)), "fit": round(validation.mape(df["pred"], df[meas_col]), 1),
               "logo": round(validation.mape(df["logo"], df[meas_col]), 1), "lomo": round(validation.mape(df["lomo"], df[meas_col]), 1),
               # + 0.0: a bias that rounds to zero is 0, not -0.
               "bias_pct": round(float(((df["pred"] - df[meas_col]) / df[meas_col]).mean() * 100.0), 1) + 0.0}
        for col in ("lono", "loso"):
            if col in df:
                out[col] = round(validation.mape(df[col], df[meas_col]), 1)
        return out

    doc = {"schema": SCHEMA, "source": "scripts/validate.py (MAPE %, predicted vs measured iteration time)", "groups": {}}
    for name, df in groups.items():
        g = figures(df)
        if "link" in df:
            # One-node groups by intra-node link, where enough rows back a figure of its own.
            by_link = {link: figures(s) for link, s in df.groupby("link") if len(s) >= MIN_LINK_ROWS}
            g["by_link"] = dict(sorted(by_link.items()))
        if "nodes" in df and name == "multi_node":
            g["max_nodes"] = int(df["nodes"].max())  # beyond it predictions extrapolate (srift/perf/accuracy.py)
        if "network" in df and name == "multi_node":
            # The multi-node group by network class (ethernet = NCCL over TCP sockets), where enough rows back it.
            by_net = {net: figures(s) for net, s in df.groupby("network") if len(s) >= MIN_LINK_ROWS}
            g["by_network"] = dict(sorted(by_net.items()))
        doc["groups"][name] = {**g, **({"basis": basis[name]} if name in basis else {})}
    doc["groups"].update(computed or {})
    write_json(path, doc)


def _groups(path: Path) -> dict:
    """The groups of an accuracy.json."""
    from srift.files import read_json

    return read_json(path, "validation figures", "re-run scripts/validate.py --write-accuracy.")["groups"]


def _write_group(path: Path, name: str, figures: dict) -> None:
    """Replace one group of accuracy.json, the others as they are."""
    from srift.files import read_json, write_json

    doc = read_json(path, "validation figures", "re-run scripts/validate.py --write-accuracy.")
    doc["groups"][name] = figures
    write_json(path, doc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT / "data"), help="the measurements (default: the repository's data/)")
    ap.add_argument("--profiles-dir", default=None)
    ap.add_argument("--table", action="store_true", help="print every row, not only the summary")
    ap.add_argument("--write-accuracy", nargs="?", const=str(ROOT / "configs" / "perf" / "accuracy.json"), default=None,
                    metavar="FILE", help="write the group figures predict/recommend quote (default configs/perf/accuracy.json)")
    ap.add_argument("--moe-only", action="store_true", help="run only the MoE group (data/moe-training)")
    ap.add_argument("--write-stacks", nargs="?", const=str(ROOT / "configs" / "perf" / "stack_accuracy.json"), default=None,
                    metavar="FILE", help="with --only stacks: write the per-stack figures predictions quote "
                                         "(default configs/perf/stack_accuracy.json)")
    ap.add_argument("--only", choices=("dense", "sharded", "finetune", "layouts", "kfac", "pairs", "stacks"), default=None,
                    help="print one group only (dense: the iteration-time groups, single GPU to multi-node); with "
                         "--write-accuracy, write its figures and keep the file's others")
    args = ap.parse_args()
    if args.moe_only:
        moe_report = Report("value")
        moe_figures = moe_group(Path(args.data), args.table, moe_report)
        if args.write_accuracy and moe_figures is not None:  # this group alone, the others as they are
            _write_group(Path(args.write_accuracy), "moe", moe_figures)
            print(f"wrote {moe_report.write(Path(args.write_accuracy))}")
        return
    if args.only == "layouts":
        layout_report = Report("value")
        layout_group(Path(args.data), layout_report)
        if args.write_accuracy:  # its figures are layouts.json's (fit_models.py); its rows into validation.json
            print(f"wrote {layout_report.write(Path(args.write_accuracy))}")
        return
    if args.only == "stacks":  # leave-one-stack-out beside leave-one-source-out (srift/fitting/stack_group.py)
        from srift.fitting.stack_group import stack_group

        stack_group(Path(args.data), Path(args.write_stacks) if args.write_stacks else None)
        return
    if args.only == "kfac":
        kfac_report = Report("value")
        kfac_group(Path(args.data), kfac_report)
        if args.write_accuracy:  # no accuracy.json group: its rows into validation.json, the others as they are
            print(f"wrote {kfac_report.write(Path(args.write_accuracy))}")
        return
    if args.only == "pairs":  # the error of the ratio of two predictions of a group (srift/fitting/pairs.py)
        from srift.fitting.pairs import pair_groups

        for name, figures in pair_groups(Path(args.data)).items():
            print(f"{name:<32}{figures['rows']:>6} pairs  MAPE of the ratio {figures['fit']:5.1f} %")
            if args.write_accuracy:
                _write_group(Path(args.write_accuracy), name, figures)
        return
    if args.only in ("sharded", "finetune"):
        group_report = Report("value")
        figures = (sharded_group if args.only == "sharded" else finetune_group)(Path(args.data), group_report)
        if args.write_accuracy:  # this group alone, the others as they are
            _write_group(Path(args.write_accuracy), args.only, figures)
            if group_report.sections:
                print(f"wrote {group_report.write(Path(args.write_accuracy))}")
        return
    profiles = profile_source(args.profiles_dir)
    rows = datasets.load_rows(Path(args.data))
    rows["silicon"] = rows["gpu"].map(silicon)
    meas_col = "iteration_time_s"

    single = rows[rows["n_gpus"] == 1].reset_index(drop=True)
    single["pred"] = compute_fit.predict_rows(single, profiles, C.load_params())
    fits_gpu = compute_fit.held_out_fits(single, profiles, "silicon")
    fits_model = compute_fit.held_out_fits(single, profiles, "model")
    single["logo"] = loo_predictions(single, profiles, "silicon", fits_gpu)
    single["lomo"] = loo_predictions(single, profiles, "model", fits_model)
    # Leave-one-source-out: each source (a Lambda snapshot, NVIDIA DLE, SuperBench, ...) held out.
    fits_src = compute_fit.held_out_fits(single, profiles, "source")
    single["loso"] = loo_predictions(single, profiles, "source", fits_src)

    sb = datasets.load_superbench_models(Path(args.data))
    multi = pd.concat([rows[rows["n_gpus"] > 1], sb[sb["model"].isin(available_models(profiles))]], ignore_index=True)
    multi["silicon"] = multi["gpu"].map(silicon)
    multi = multi.join(validation.simulate_rows(multi, profiles))
    # Scaling pairs (a multi-GPU row and the same system's 1-GPU row) for the interference refits.
    pairs = validation.scaling_pairs(rows)
    pairs["silicon"] = pairs["gpu"].map(silicon)
    pairs = pairs.join(validation.simulate_rows(pairs, profiles)).join(validation.simulate_rows(pairs, profiles, n_gpus=1)["pred"].rename("pred1"))
    nodes = multi_node_rows(Path(args.data))
    # The interference is fitted on the one-node pairs and the multi-node sources' multi-GPU rows (compute
    # anchored on their measured 1-GPU time), as scripts/fit_models.py does; its refits hold both out.
    ddl_k = comm_fit.anchored_scaling_rows(datasets.multi_node_scaling_rows(Path(args.data), one_server=True), profiles)
    cols = ["scaling", "ideal", "hidden", "pred1", "silicon", "model", "source"]
    k_rows = pd.concat([pairs[cols], ddl_k.assign(silicon=ddl_k["gpu"].map(silicon))[cols]], ignore_index=True)
    k_gpu = interference_fits(k_rows, "silicon", set(multi["silicon"]) | set(nodes["silicon"]))
    k_model = interference_fits(k_rows, "model", set(multi["model"]) | set(nodes["family"]))
    k_src = interference_fits(k_rows, "source", set(multi["source"]) | set(nodes["source"]))
    multi["logo"] = loo_predictions(multi, profiles, "silicon", fits_gpu, k_gpu)
    # Models the single-GPU fit never saw (SuperBench's resnet152, vgg16, ...) are already
    # held out: they use the full fit.
    fits_any_model = {**fits_model, **{m: C.load_params() for m in multi["model"].unique() if m not in fits_model}}
    multi["lomo"] = loo_predictions(multi, profiles, "model", fits_any_model, k_model)
    # Sources the single-GPU fit never saw (SuperBench) are held out already: the full fit.
    fits_any_src = {**fits_src, **{s: C.load_params() for s in set(multi["source"]) | set(nodes["source"]) if s not in fits_src}}
    multi["loso"] = loo_predictions(multi, profiles, "source", fits_any_src, k_src)
    k_all, scal_mape = comm_fit.fit_overlap_interference(k_rows["scaling"].to_numpy(), k_rows["ideal"].to_numpy(),
                                                         k_rows["hidden"].to_numpy(), k_rows["pred1"].to_numpy())
    ideal_scal = validation.mape(k_rows["ideal"] / k_rows["pred1"], k_rows["scaling"])
    # A profile measured on one GPU of the system's type: the measured 1-GPU time, times the
    # simulated t_n / t_1 (each refit predicts both).
    from_one = pairs.assign(pred=pairs["t1"] * (pairs["ideal"] + k_all * pairs["hidden"]) / pairs["pred1"])
    one = pairs.assign(n_gpus=1)
    from_one["logo"] = pairs["t1"] * (loo_predictions(pairs, profiles, "silicon", fits_gpu, k_gpu)
                                  / loo_predictions(one, profiles, "silicon", fits_gpu, k_gpu))
    from_one["lomo"] = pairs["t1"] * (loo_predictions(pairs, profiles, "model", fits_any_model, k_model)
                                  / loo_predictions(one, profiles, "model", fits_any_model, k_model))
    from_one["loso"] = pairs["t1"] * (loo_predictions(pairs, profiles, "source", fits_any_src, k_src)
                                  / loo_predictions(one, profiles, "source", fits_any_src, k_src))
    from_one["link"] = [datasets.row_link(r) for r in pairs.itertuples()]
    repeats = model_free(validation.same_gpu_repeats(single))

    # Multi-node: ddl-benchmarks and DAWNBench, with the leave-out refits and leave-one-network-out.
    nodes = multi_node_predictions(nodes, profiles, fits_gpu, fits_model, fits_any_src, k_gpu, k_model, k_src)

    def err(df: pd.DataFrame, col: str) -> pd.Series:
        return (df[col] - df[meas_col]) / df[meas_col] * 100.0

    if args.table:
        show = single.copy()
        for col in ("pred", "logo", "lomo"):
            show[col + "_err%"] = err(show, col).round(1)
        cols = ["model", "gpu", "n_gpus", "precision", "batch_per_gpu", "source", meas_col, "pred", "pred_err%", "logo", "logo_err%", "lomo", "lomo_err%"]
        with pd.option_context("display.max_rows", None, "display.width", 200, "display.float_format", "{:.4f}".format):
            print(show[cols].sort_values(["model", "precision", "gpu"]).to_string(index=False))
            mshow = multi.copy()
            for col in ("pred", "logo", "lomo"):
                mshow[col + "_err%"] = err(mshow, col).round(1)
            print(mshow[["model", "gpu", "n_gpus", "precision", "batch_per_gpu", "label", meas_col, "pred", "pred_err%",
                         "logo_err%", "lomo_err%"]].to_string(index=False))

    print("\nMAPE (%) of predicted vs measured iteration time")
    report = Report(meas_col)
    section = ["single_gpu"]  # where line() files its row in validation.json

    def line(label: str, s: pd.DataFrame, key: str | None = None) -> str:
        report.add(section[0], key or label, s)
        loso = f"{validation.mape(s.loso, s[meas_col]):>8.1f}" if "loso" in s and s["loso"].notna().all() else f"{'':>8}"
        return (f"{label:<28}{len(s):>6}{validation.mape(s.pred, s[meas_col]):>8.1f}"
                f"{validation.mape(s.logo, s[meas_col]):>8.1f}{validation.mape(s.lomo, s[meas_col]):>8.1f}{loso}")

    print(f"{'group':<28}{'rows':>6}{'fit':>8}{'LOGO':>8}{'LOMO':>8}{'LOSO':>8}")
    print(line("single GPU", single))
    for prec in ("tf32", "amp"):
        print(line("  " + prec, single[single.precision == prec]))
    for model in sorted(single.model.unique()):
        print(line("  " + model, single[single.model == model]))
    for src in sorted(single.source.unique()):
        print(line("  " + src, single[single.source == src]))

    section[0] = "one_node"
    print(line("one node, multi-GPU", multi, "all"))
    multi["src"] = multi["source"].str.split("/").str[0]
    for src, s in multi.groupby("src"):
        print(line("  " + src, s))
    for n, s in multi.groupby("n_gpus"):
        print(line(f"  {n} GPUs", s))
    multi["link"] = [datasets.row_link(r) for r in multi.itertuples()]
    for link, s in multi.groupby("link"):
        print(line(f"  {link}", s))
    # Model-free checks against the same system with fewer GPUs (srift.fitting.validation.scaling_anomalies):
    # shown beside the headline figures, not dropped from them.
    fast, flat = validation.scaling_anomalies(pd.concat([single, multi], ignore_index=True))
    fast, flat = fast[len(single):], flat[len(single):]
    print(line(f"  without {int(fast.sum())} super-linear", multi[~fast], "without-super-linear"))
    print(line(f"  ... and {int((flat & ~fast).sum())} flat-throughput", multi[~fast & ~flat], "without-super-linear-or-flat"))
    both = pd.concat([single, multi], ignore_index=True)
    print(line("all single-node rows", both, "all-single-node"))
    print("profile measured on a GPU of the target's type (`srift profile` on your GPU):")
    section[0] = "same_gpu"
    print(line("  1 GPU, on another system", repeats))
    # The same floor on several GPUs (Lambda rows only: SuperBench's have no twin).
    print(line("  one node, another system", model_free(validation.same_gpu_repeats(rows[rows["n_gpus"] > 1]))))
    print(line("  one node, from its 1 GPU", from_one))
    for link, s in from_one.groupby("link"):
        print(line(f"    {link}", s, f"one node from its 1 GPU {link}"))
    other = anchored_frame(single, C.load_params())
    print(line("  1 GPU, from another GPU", other))
    def line5(label: str, df: pd.DataFrame, key: str | None = None) -> str:
        return line(label, df, key) + f"{validation.mape(df.lono, df[meas_col]):>8.1f}"

    print(f"\n{'multi-node':<28}{'rows':>6}{'fit':>8}{'LOGO':>8}{'LOMO':>8}{'LOSO':>8}{'LONO':>8}")
    section[0] = "multi_node"
    print(line5("multi-node", nodes, "all"))
    for src, s_ in nodes.groupby("source", sort=False):
        print(line5("  " + src, s_))
    for net, s_ in nodes.groupby("net", sort=False):
        print(line5("  " + net, s_))
    for cls, s_ in nodes.groupby("network"):
        print(line5(f"  class {cls}", s_))
    for nodes_n, s_ in nodes.groupby("nodes"):
        report.add("multi_node", f"{nodes_n} nodes", s_)
    for model, s_ in nodes.groupby("model"):
        print(line5("  " + model, s_))
    for prec, s_ in nodes.groupby("precision"):
        print(line5("  " + prec, s_))
    signed_by_source(nodes, meas_col)
    ddl_rows = nodes[nodes["from_one"].notna()]
    report.add("multi_node", "from its 1-GPU run", ddl_rows)
    print(f"{'  from its 1-GPU run':<28}{len(ddl_rows):>6}{validation.mape(ddl_rows.from_one, ddl_rows[meas_col]):>8.1f}"
          "   (compute anchored on the job's measured 1-GPU time: the multi-GPU part's error alone)")
    for r in nodes[nodes["source"].str.startswith("dawnbench")].itertuples():
        report.add("multi_node", r.label, nodes.loc[[r.Index]])
        print(f"{'  ' + r.label.replace('fast.ai ', ''):<28}{1:>6}{err(nodes.loc[[r.Index]], 'pred').iloc[0]:>+8.1f}"
              f"{err(nodes.loc[[r.Index]], 'logo').iloc[0]:>+8.1f}{err(nodes.loc[[r.Index]], 'lomo').iloc[0]:>+8.1f}"
              f"   measured {r.iteration_time_s:.3f} s, predicted {r.pred:.3f} s ({r.batch_per_gpu}/GPU)")
    if args.table:
        show = nodes.assign(**{c + "_err%": err(nodes, c).round(1) for c in ("pred", "logo", "lomo", "lono", "loso", "from_one")})
        with pd.option_context("display.max_rows", None, "display.width", 220, "display.float_format", "{:.4f}".format):
            print(show[["model", "precision", "net", "nodes", "n_gpus", "batch_per_gpu", meas_col, "pred", "pred_err%", "logo_err%",
                        "lomo_err%", "loso_err%", "lono_err%", "from_one_err%"]].to_string(index=False))
    print(f"{'':<28}(LONO: the network terms refitted without the row's network; ddl-benchmarks rows are synthetic data,"
          " DAWNBench decodes JPEGs)")
    for inst, n_rows, fit_mape, held_mape in multi_node_allreduce(Path(args.data)):
        short = inst.replace(".24xlarge", "").replace(".48xlarge", "")
        print(f"{'  all-reduce ' + short:<28}{n_rows:>6}{fit_mape:>8.1f}{held_mape:>8.1f}")
        report.sections.setdefault("all_reduce", {})[slug(inst)] = {"rows": n_rows, "fit": round(fit_mape, 1),
                                                                     "logo": round(held_mape, 1)}
    print(f"{'':<28}(all-reduce >= 1 MiB over EFA; LOGO column: EFA refitted without the instance type)")
    if args.only == "dense":  # the other groups' figures as the file has them
        kept = _groups(Path(args.write_accuracy)) if args.write_accuracy else {}
        sharded_figures, finetune_figures, moe_figures = kept.get("sharded"), kept.get("finetune"), kept.get("moe")
    else:
        sharded_figures = sharded_group(Path(args.data), report)
        finetune_figures = finetune_group(Path(args.data), report)
        layout_group(Path(args.data), report)
        kfac_group(Path(args.data), report)
        moe_figures = moe_group(Path(args.data), args.table, report)
        from srift.fitting.stack_group import stack_group

        stack_group(Path(args.data))  # leave-one-stack-out beside leave-one-source-out
    if args.write_accuracy:
        dense = {"single_gpu": single, "one_node": multi, **({"multi_node": nodes} if len(nodes) else {}),
                 "single_gpu_same_gpu": repeats, "single_gpu_other_gpu": other, "one_node_same_gpu": from_one}
        made = {name: figures for name, figures in (("sharded", sharded_figures), ("finetune", finetune_figures),
                                                    ("moe", moe_figures)) if figures is not None}
        target = Path(args.write_accuracy)
        # Groups this run does not compute (the pairs, --only parts run apart) stay as the file has them.
        others = {k: v for k, v in (_groups(target) if target.exists() else {}).items() if k not in dense and k not in made}
        write_accuracy(target, dense,
                       meas_col,
                       {"multi_node": ("ddl-benchmarks: 2-8 servers of 4 RTX 2080 Ti over 10 GbE TCP, 100 Gb/s TCP, "
                                       "100 Gb/s InfiniBand; DAWNBench: 4-16 p3.16xlarge; DLPerf: 2-4 nodes of 8 V100 "
                                       "over 100 Gb/s InfiniBand; CSC: 2 nodes of 4 A100 or 4 V100 over InfiniBand"),
                        "single_gpu_same_gpu": "the same runs on other systems of the same GPU model",
                        "single_gpu_other_gpu": "single-GPU runs anchored on another GPU or precision of the same model",
                        "one_node_same_gpu": "the same system's measured 1-GPU run, scaled by the simulator"},
                       {**others, **made})
    shipped = C.load_params()
    print(f"\nProfile measured on another GPU or precision ({len(compute_fit.anchor_pairs(single, 'lomo'))} pairs of one model and "
          f"source; its model held out of the fit), MAPE %:")
    for label, w, clip in (("model only (anchor ignored)", 0.0, np.inf), ("whole departure carried over", 1.0, np.inf),
                           (f"shipped: {shipped.anchor_weight:.0%} of it within +-{shipped.anchor_clip:.2f} (log)",
                            shipped.anchor_weight, shipped.anchor_clip)):
        report.put("anchor", label.split(":")[0].split(" (")[0], {
            "pairs": len(compute_fit.anchor_pairs(single, "lomo")),
            "lomo": compute_fit.anchored_mape(compute_fit.anchor_pairs(single, "lomo"), w, clip),
            "fit": compute_fit.anchored_mape(compute_fit.anchor_pairs(single, "pred"), w, clip)})
        print(f"  {label:<44}{compute_fit.anchored_mape(compute_fit.anchor_pairs(single, 'lomo'), w, clip):>6.1f}"
              f"   in-fit model: {compute_fit.anchored_mape(compute_fit.anchor_pairs(single, 'pred'), w, clip):.1f}")
    print(f"\nDDP scaling t_n/t_1 ({len(pairs)} pairs of a multi-GPU row and its system's 1-GPU row, and {len(ddl_k)} "
          f"multi-GPU rows of ddl-benchmarks and DLPerf): MAPE {ideal_scal:.1f}% with ideal overlap, {scal_mape:.1f}% with all-reduce "
          f"interference k = {k_all:.2f}")
    report.put("scaling", "t_n/t_1", {"pairs": len(pairs), "multi_node_rows": len(ddl_k), "ideal": ideal_scal,
                                      "interference": scal_mape})
    both_snapshots = snapshot_scaling(pairs)
    if len(both_snapshots):
        report.put("scaling", "lambda snapshots", {"cases": len(both_snapshots),
                                                   "diff_pct": both_snapshots["diff_pct"].abs().mean()})
        worst = both_snapshots.loc[both_snapshots["diff_pct"].abs().idxmax()]
        print(f"Measured t_n/t_1 of the same system, model, precision and GPU count in Lambda's two snapshots "
              f"({len(both_snapshots)} cases): they differ by {both_snapshots['diff_pct'].abs().mean():.1f} % on average "
              f"(most: {' '.join(map(str, worst.name))}: {worst['lambda/2022-07']:.2f} vs {worst['lambda/head']:.2f}); "
              f"no hardware model can match both.")
    print("LOGO: refit without the row's GPU silicon; LOMO: without the row's model; LOSO: without the row's source")
    print("(compute model and, for multi-GPU rows, the all-reduce interference; across nodes the network terms too).")
    if args.write_accuracy:
        print(f"wrote {report.write(Path(args.write_accuracy))}")


if __name__ == "__main__":
    main()

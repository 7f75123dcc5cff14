"""Fit srift's compute, communication and decoder-LLM kernel models to data/ and write configs/perf/*.json.

    python scripts/fit_models.py [--data data] [--profiles-dir DIR] [--out configs/perf]

Reproducible: the data files are read in a fixed order, the fits are deterministic (ridge
regression with a fixed start; least squares from fixed starting points). See srift/fitting/ for
the data used and the model forms. ``--profiles-dir`` reads ``<model>.yaml`` structural profiles
from a folder instead of the shipped zoo profiles.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.files import write_json  # noqa: E402
from srift.perf import comm as CM  # noqa: E402
from srift.fitting import comm_fit  # noqa: E402
from srift.fitting import compute_fit  # noqa: E402
from srift.fitting import datasets  # noqa: E402
from srift.fitting import sharded  # noqa: E402
from srift.fitting import validation  # noqa: E402


def profile_source(profiles_dir: str | None) -> datasets.ProfileSource:
    """Structural profiles: the zoo's shipped ones, or ``<dir>/<model>.yaml`` rescaled."""
    if profiles_dir:
        from srift.profile import Profile

        base = {}

        def load(model: str, batch: int, seq: int | None):
            if model not in base:
                base[model] = Profile.load(Path(profiles_dir) / f"{model}.yaml")
            return base[model].rescale(batch_size=batch, seq_len=seq)

        return datasets.ProfileSource(load)
    from srift.zoo import load_builtin_profile

    return datasets.ProfileSource(lambda m, b, s: load_builtin_profile(m, b, s))


def single_gpu_rows(rows):
    return rows[rows["n_gpus"] == 1].reset_index(drop=True)


def fit_compute_params(data: Path, profiles: datasets.ProfileSource):
    rows = single_gpu_rows(datasets.load_rows(data))
    designs = compute_fit.designs_for(rows, profiles, compute_fit.DEFAULT_FEATURES)
    params = compute_fit.fit_compute(designs)
    pred = compute_fit.predict_rows(rows, profiles, params)
    # How far a measured profile's departure from the model carries to other GPUs/precisions.
    scored = rows.assign(pred=pred, lomo=compute_fit.held_out_predictions(rows, profiles, "model"))
    weight, clip, info = compute_fit.fit_anchor(scored, "pred", "lomo")
    params = dataclasses.replace(params, anchor_weight=weight, anchor_clip=round(clip, 4))
    params.meta["anchor_fit"] = {**info, "method": "clip = 95th percentile of in-fit |log(measured/predicted)|; "
                                 "weight: grid 0..1 (step 0.05), lowest MAPE of anchored leave-one-model-out predictions"}
    return params, rows, pred


def fit_comm_params(data: Path) -> tuple[CM.CommParams, dict]:
    nccl = datasets.load_nccl(data)
    eth = datasets.p3dn_issue_rows()
    sig_intra, n_intra = comm_fit.intra_sigma(nccl)
    sig_efa, n_efa = comm_fit.efa_sigma(data)
    sig_eth, n_eth = comm_fit.ethernet_sigma(data)
    # Plain ethernet: EFA's between-run spread (the only between-run network figure) plus the
    # within-run jitter CM-DARE measured over cloud ethernet, as independent log-normal terms.
    sig_eth_total = float(np.hypot(sig_efa, sig_eth))
    p90 = {"intra": comm_fit.log_spread_to_p90(sig_intra), "efa": comm_fit.log_spread_to_p90(sig_efa), "ethernet": comm_fit.log_spread_to_p90(sig_eth_total)}
    start = CM.LinkClass(alpha_s=2e-6, eff_max=0.9, s_half_bytes=4e6, shape=1.0, p90_ratio=p90["intra"])
    params = CM.CommParams({
        "nvswitch": start, "nvswitch4": start, "nvlink": start, "pcie": start, "shared-memory": start,
        "efa": CM.LinkClass(3e-5, 0.8, 8e6, 1.0, p90["efa"]),
        "infiniband": CM.LinkClass(3e-5, 0.8, 8e6, 1.0, p90["efa"]),
        "ethernet": CM.LinkClass(5e-5, 0.6, 1.6e7, 1.0, p90["ethernet"]),
    })
    report = {}
    single = nccl[nccl["nodes"] == 1].reset_index(drop=True)
    multi = nccl[nccl["nodes"] > 1].reset_index(drop=True)
    for cls, sel in (("nvswitch", single["intra_node"] == "nvswitch"),
                     ("nvswitch4", single["intra_node"].isin(["nvswitch4", "nvswitch5"])),
                     ("pcie", single["intra_node"].str.startswith("pcie"))):
        sub = single[sel].reset_index(drop=True)
        fitted, rms = comm_fit.fit_link_class(sub, params, cls, (2e-6, 0.9, 4e6, 1.0))
        params = CM.CommParams({**params.classes, cls: fitted})
        report[cls] = {"rows": len(sub), "rms_log_error": round(rms, 4)}
    fitted, rms = comm_fit.fit_link_class(multi, params, "efa", (3e-5, 0.8, 8e6, 1.0))
    params = CM.CommParams({**params.classes, "efa": fitted})
    report["efa"] = {"rows": len(multi), "rms_log_error": round(rms, 4)}
    fitted, rms = comm_fit.fit_link_class(eth, params, "ethernet", (5e-5, 0.6, 1.6e7), fixed_shape=params.classes["efa"].shape)
    params = CM.CommParams({**params.classes, "ethernet": fitted})
    report["ethernet"] = {"rows": len(eth), "rms_log_error": round(rms, 4)}
    c = params.classes
    classes = {
        **c,
        # No NVLink (p3) NCCL measurement in data/: NVLink uses the NVSwitch curve's shape
        # against its own nominal bandwidth (configs/gpus.yaml links).
        "nvlink": c["nvswitch"],
        # No InfiniBand NCCL measurement: treated like EFA (RDMA, same NCCL net plugin behaviour).
        "infiniband": c["efa"],
        # CPU processes (gloo): the PCIe curve against the shared-memory nominal bandwidth; a
        # `srift calibrate comm` curve replaces it on real machines.
        "shared-memory": c["pcie"],
    }
    params = CM.CommParams(classes)
    meta = {
        "fit": report,
        "p90": {"intra_node": {"log_sigma": round(sig_intra, 4), "rows": n_intra, "source": "superbench-results nccl-bw NDv4/NDmv4 baselines"},
                "efa": {"log_sigma": round(sig_efa, 4), "sizes": n_efa, "source": "nccl-tests-aws 2x p5 blocks 2 vs 3"},
                "ethernet": {"log_sigma": round(sig_eth_total, 4), "within_run_log_sigma": round(sig_eth, 4), "runs": n_eth,
                             "source": "efa between-run spread (+) cm-dare speed_and_cluster_size within-run spread (GCE, 2-8 workers)"}},
        "assumptions": [
            "nvlink = nvswitch curve (no p3 NCCL data)", "nvswitch5 (B200/B300) = nvswitch4 curve (no data)", "infiniband = efa (no IB NCCL data)",
            "shared-memory = pcie curve (calibrate CPU clusters with `srift calibrate comm`)",
            "ethernet fitted to the p3dn.24xlarge figures quoted in nccl-tests-aws/README.md (shape pinned to efa's)",
            "superbench V100 box (2 GPUs, 11.7 GB/s peak busbw) taken as PCIe 3",
        ],
    }
    return params, meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT / "data"), help="the measurements (default: the repository's data/)")
    ap.add_argument("--profiles-dir", default=None)
    ap.add_argument("--out", default=str(ROOT / "configs" / "perf"))
    args = ap.parse_args()
    data, out = Path(args.data), Path(args.out)
    today = _dt.date.today().isoformat()

    profiles = profile_source(args.profiles_dir)
    cparams, rows, pred = fit_compute_params(data, profiles)
    err = np.abs(pred - rows["iteration_time_s"].to_numpy()) / rows["iteration_time_s"].to_numpy()
    meta = {
        "sources": ["data/lambda-deeplearning-benchmark (head, 2022-07; v1 files, 1-GPU rows)",
                    "data/nvidia-deeplearningexamples (PyTorch BERT SQuAD fine-tuning, 1-GPU rows)"],
        "fitted_on": today,
        "fit": {"rows": int(len(rows)), "gpus": sorted(rows["gpu"].unique().tolist()),
                "models": sorted(rows["model"].unique().tolist()), "in_sample_mape_pct": round(float(err.mean() * 100), 2)},
        "kind_groups": {g: list(k) for g, k in compute_fit.KIND_GROUPS.items()},
        "model": "t_layer_pass = max(F/(peak*eff_kind), B/(bw*eff_mem)) + launch_s; 1/eff = max(1, coef . features); launch_s fitted",
    }
    cdict = cparams.to_dict()
    cdict.update(meta)
    write_json(out / "compute.json", cdict)
    print(f"compute: {len(rows)} single-GPU rows, in-sample MAPE {err.mean() * 100:.1f}%  -> {out / 'compute.json'}")

    mparams, mmeta = fit_comm_params(data)
    mdict = mparams.to_dict()
    mdict.update({"sources": ["data/nccl-tests-aws", "data/superbench-results (nccl-bw)",
                              "data/cm-dare (spread)",
                              "data/lambda-deeplearning-benchmark + nvidia-deeplearningexamples (one-node DDP scaling)"],
                  "fitted_on": today, **mmeta})
    write_json(out / "comm.json", mdict)
    print(f"comm: {mmeta['fit']}  -> {out / 'comm.json'}")

    # The interference is fitted through the simulator, which reads the files just written.
    k, info = fit_interference(data, profiles, out)
    mdict["overlap_interference"] = k
    mdict["overlap_interference_fit"] = info
    write_json(out / "comm.json", mdict)
    print(f"comm: all-reduce interference k = {k:.2f} ({info})  -> {out / 'comm.json'}")

    sdoc = fit_sharded(data, out, today)
    write_json(out / "sharded.json", sdoc)
    print(f"sharded: fused attention efficiency {sdoc['fused_attention_efficiency']:.3f}, LLM matmul factor "
          f"{sdoc['llm_matmul_factor']:.3f} over {sdoc['fit']['rows']} FSDP runs, in-sample MAPE "
          f"{sdoc['fit']['in_sample_mape_pct']:.1f}%  -> {out / 'sharded.json'}")


@contextmanager
def params_from(params_dir: Path) -> Iterator[None]:
    """The simulator reads compute.json and comm.json from ``params_dir`` meanwhile (the files
    this run has just written)."""
    from srift.perf import compute as C

    C.load_params.cache_clear()
    CM.load_params.cache_clear()
    CM._MODEL_CACHE.clear()
    shipped_c, shipped_m = C.params_path, CM.params_path
    C.params_path = lambda: params_dir / "compute.json"  # type: ignore[assignment]
    CM.params_path = lambda: params_dir / "comm.json"  # type: ignore[assignment]
    try:
        yield
    finally:
        C.params_path, CM.params_path = shipped_c, shipped_m  # type: ignore[assignment]
        C.load_params.cache_clear()
        CM.load_params.cache_clear()
        CM._MODEL_CACHE.clear()


def fit_sharded(data: Path, params_dir: Path, today: str) -> dict:
    """Fit the decoder-LLM kernel rates (fused attention, LLM matmuls) to the PyTorch FSDP runs
    of data/llm-training-throughput, through the sharded simulator on the parameters just
    written (srift/fitting/sharded.py), and return configs/perf/sharded.json's document."""
    rows, _ = sharded.load_rows(data)
    with params_from(params_dir):
        params, mape = sharded.fit_llm_kernels(rows)
    doc = params.to_dict()
    doc.update({
        "sources": ["data/llm-training-throughput (llm-foundry MPT tables: PyTorch FSDP, bf16; see srift/fitting/sharded.py)"],
        "fitted_on": today,
        "fit": {"rows": int(len(rows)), "gpus": sorted(rows["gpu"].unique().tolist()),
                "models": sorted(rows["model"].unique().tolist()), "in_sample_mape_pct": round(mape, 2)},
        "model": "fused attention: FLOPs / (fused_attention_efficiency x min(peak, SMs x clock x 2048)); "
                 "matmuls of FSDP-unit profiles: llm_matmul_factor x the compute model's time (half precision)",
        "method": "least squares on log(predicted / measured tokens/s per GPU), from (0.3, 1.0)",
    })
    return doc


def fit_interference(data: Path, profiles: datasets.ProfileSource, params_dir: Path) -> tuple[float, dict]:
    """Fit the all-reduce interference to measured one-node DDP scaling (t_n / t_1 of one system)."""
    with params_from(params_dir):
        pairs = validation.scaling_pairs(datasets.load_rows(data))
        sim_n = validation.simulate_rows(pairs, profiles)
        sim_1 = validation.simulate_rows(pairs, profiles, n_gpus=1)
    scaling = pairs["scaling"].to_numpy()
    k, err = comm_fit.fit_overlap_interference(scaling, sim_n["ideal"].to_numpy(), sim_n["hidden"].to_numpy(), sim_1["pred"].to_numpy())
    ideal = validation.mape(sim_n["ideal"] / sim_1["pred"], scaling)
    return k, {"pairs": int(len(pairs)), "scaling_mape_pct": round(err, 2), "ideal_overlap_scaling_mape_pct": round(ideal, 2),
               "method": "grid search k in 0..3 (step 0.05) minimising the MAPE of predicted vs measured t_n/t_1"}


if __name__ == "__main__":
    main()

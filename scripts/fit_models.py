"""Fit srift's compute, communication, decoder-LLM and K-FAC kernel models to data/ and write configs/perf/*.json.

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
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.files import write_json  # noqa: E402
from srift.perf import comm as CM  # noqa: E402
from srift.fitting import comm_fit  # noqa: E402
from srift.fitting import compute_fit  # noqa: E402
from srift.fitting import datasets  # noqa: E402
from srift.fitting import kfac_kernels  # noqa: E402
from srift.fitting import layouts as layout_fit  # noqa: E402
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


# NCCL's socket-transport defaults by platform, and the MTU TCP runs at there.
SOCKET_DEFAULTS = {
    "generic": {"threads": 1, "sockets_per_thread": 1, "mtu_bytes": 1500},
    "aws": {"threads": 2, "sockets_per_thread": 8, "mtu_bytes": 9001},
    "gcp": {"threads": 4, "sockets_per_thread": 1, "mtu_bytes": 1460},
}
SOCKET_DEFAULTS_SOURCE = (
    "NCCL documentation, Environment Variables (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html): "
    "NCCL_SOCKET_NTHREADS (since 2.4.8) 'On AWS, the default value is 2; on Google Cloud instances with the gVNIC "
    "network interface, the default value is 4 (since 2.5.6); in other cases, the default value is 1'; "
    "NCCL_NSOCKS_PERTHREAD (since 2.4.8) 'On AWS, the default value is 8; in other cases, the default value is 1'; "
    "their product may not exceed 64. MTU: AWS EC2 User Guide, 'Network maximum transmission unit (MTU) for your "
    "EC2 instance' (jumbo frames, 9001, inside a VPC); Google Cloud VPC docs (default MTU 1460); 1500 elsewhere. "
    "Google Cloud GPU VMs are taken to use gVNIC (required by the A3 and G2 series).")


def fit_comm_params(data: Path, profiles: datasets.ProfileSource, compute: "object") -> tuple[CM.CommParams, dict]:
    """The intra-node classes (nccl-tests, SuperBench nccl-bw), EFA (nccl-tests across nodes),
    InfiniBand and RoCE (wire formats and SuperBench ib-loopback) and the socket transport (TCP
    framing; per-thread rate and step latency from ddl-benchmarks' TCP scaling); spreads."""
    nccl = datasets.load_nccl(data)
    sig_intra, n_intra = comm_fit.intra_sigma(nccl)
    sig_efa, n_efa = comm_fit.efa_sigma(data)
    sig_eth, n_eth = comm_fit.ethernet_sigma(data)
    # TCP: EFA's between-run spread (the only between-run network figure) plus the within-run
    # jitter CM-DARE measured over cloud ethernet, as independent log-normal terms. RDMA fabrics
    # (InfiniBand, RoCE) take EFA's: the only measured spread of an RDMA network.
    sig_eth_total = float(np.hypot(sig_efa, sig_eth))
    p90 = {"intra": comm_fit.log_spread_to_p90(sig_intra), "efa": comm_fit.log_spread_to_p90(sig_efa),
           "ethernet": comm_fit.log_spread_to_p90(sig_eth_total)}
    start = CM.LinkClass(alpha_s=2e-6, eff_max=0.9, s_half_bytes=4e6, shape=1.0, p90_ratio=p90["intra"])
    params = CM.CommParams({"nvswitch": start, "nvswitch4": start, "nvlink": start, "pcie": start, "shared-memory": start},
                           socket_defaults={k: CM.SocketDefaults(**v) for k, v in SOCKET_DEFAULTS.items()})
    report: dict = {}
    single = nccl[nccl["nodes"] == 1].reset_index(drop=True)
    multi = nccl[nccl["nodes"] > 1].reset_index(drop=True)
    for cls, sel in (("nvswitch", single["intra_node"] == "nvswitch"),
                     ("nvswitch4", single["intra_node"].isin(["nvswitch4", "nvswitch5"])),
                     ("pcie", single["intra_node"].str.startswith("pcie"))):
        sub = single[sel].reset_index(drop=True)
        fitted, rms = comm_fit.fit_link_class(sub, params, cls, (2e-6, 0.9, 4e6, 1.0))
        params = dataclasses.replace(params, classes={**params.classes, cls: fitted})
        report[cls] = {"rows": len(sub), "rms_log_error": round(rms, 4)}
    c = params.classes
    # No NVLink (p3) NCCL measurement in data/: NVLink uses the NVSwitch curve's shape against its
    # own nominal bandwidth (configs/gpus.yaml links). CPU processes (gloo): the PCIe curve against
    # the shared-memory nominal bandwidth; a `srift calibrate comm` curve replaces it.
    params = dataclasses.replace(params, classes={**c, "nvlink": c["nvswitch"], "shared-memory": c["pcie"]})
    # The interference of hidden all-reduce with backward, first from one-node DDP scaling (the
    # networks play no part there), for the network fits below to predict with.
    k, k_info = fit_interference(data, profiles, compute, params)
    params = dataclasses.replace(params, overlap_interference=k)

    # NCCL's own start-up over a host-mediated path (the PCIe class's half-efficiency size at the
    # rate it reaches): the curve of the networks without a measured NCCL curve.
    pcie = params.classes["pcie"]
    pcie_rate = pcie.eff_max * 15.75e9  # the class was fitted on PCIe 3 (15.75 GB/s)
    t_half = pcie.s_half_bytes / pcie_rate
    ib_share, ib_n = comm_fit.ib_write_share(data)
    tcp_share = CM.tcp_goodput_share(SOCKET_DEFAULTS["generic"]["mtu_bytes"])
    efa0 = CM.NetworkClass(3e-5, 0.8, 2e-4, 1.0, p90["efa"], "hierarchical")
    networks = {
        "efa": efa0,
        "infiniband": CM.NetworkClass(1e-5, ib_share, t_half, pcie.shape, p90["efa"], "ring"),
        "roce": CM.NetworkClass(1e-5, comm_fit.roce_share(ib_share), t_half, pcie.shape, p90["efa"], "ring"),
        "ethernet": CM.NetworkClass(5e-5, tcp_share, t_half, pcie.shape, p90["ethernet"], "ring", per_thread_gbps=20.0),
    }
    params = dataclasses.replace(params, networks=networks)
    fitted, rms = comm_fit.fit_network_class(multi, params, "efa", efa0)
    params = dataclasses.replace(params, networks={**params.networks, "efa": fitted})
    report["efa"] = {"rows": len(multi), "rms_log_error": round(rms, 4)}

    # Sockets from the multi-node sources that measured each job on one GPU and one node too
    # (ddl-benchmarks, dlperf-v100-ib), as t_N / t_1 node; then the interference again with their
    # multi-GPU rows beside the one-node pairs (the GPUs' share of a cross-node all-reduce interferes
    # as one node's does), and the networks again.
    ddl = datasets.multi_node_scaling_rows(data)
    with validation.using_params(compute=compute):  # type: ignore[arg-type]
        params, net_report = comm_fit.fit_ddl_networks(ddl, profiles, params)
        with validation.using_params(comm=params):
            extra = comm_fit.anchored_scaling_rows(datasets.multi_node_scaling_rows(data, one_server=True), profiles)
    k_one = k
    k, k_info = fit_interference(data, profiles, compute, params, extra)
    params = dataclasses.replace(params, overlap_interference=k)
    with validation.using_params(compute=compute):  # type: ignore[arg-type]
        params, net_report = comm_fit.fit_ddl_networks(ddl, profiles, params)
    report.update(net_report)
    report["overlap_interference"] = {**k_info, "one_node_pairs_alone": k_one}
    meta = {
        "fit": report,
        "p90": {"intra_node": {"log_sigma": round(sig_intra, 4), "rows": n_intra, "source": "superbench-results nccl-bw NDv4/NDmv4 baselines"},
                "efa": {"log_sigma": round(sig_efa, 4), "sizes": n_efa, "source": "nccl-tests-aws 2x p5 blocks 2 vs 3"},
                "ethernet": {"log_sigma": round(sig_eth_total, 4), "within_run_log_sigma": round(sig_eth, 4), "runs": n_eth,
                             "source": "efa between-run spread (+) cm-dare speed_and_cluster_size within-run spread (GCE, 2-8 workers)"}},
        "networks_provenance": {
            "ethernet": (f"NCCL's socket transport. efficiency = TCP/IPv4 payload share of an Ethernet frame at a 1500-byte MTU "
                         f"((1500 - 52) / (1500 + 38) = {tcp_share:.4f}; the platform's MTU where known: nccl_socket_defaults); "
                         "per_thread_gbps and alpha_s fitted to ddl-benchmarks (10 GbE and 100 Gb/s IPoIB TCP); "
                         "t_half_s and shape: NCCL's start-up over PCIe (the pcie class)"),
            "infiniband": (f"efficiency = SuperBench ib-loopback RDMA write bandwidth at >= 1 MiB over HDR's 25 GB/s "
                           f"({ib_share:.4f}, median of {ib_n} NIC runs); alpha_s fixed at 1 us (an InfiniBand hop, not fitted); "
                           "t_half_s and shape: NCCL's start-up over PCIe (the pcie class), not EFA's"),
            "roce": ("efficiency = InfiniBand's x (RoCE v2 / InfiniBand payload share at a 4096-byte MTU: 4096/4178 over 4096/4122); "
                     "alpha_s, t_half_s, shape as InfiniBand (no RoCE measurement)"),
            "efa": "alpha_s, efficiency, t_half_s, shape fitted to nccl-tests-aws all-reduce times (2x p4de, 2x p5)",
            "algorithm": ("ring for sockets and InfiniBand: ddl-benchmarks' per-node rate is constant over 2-8 servers only "
                          "under the ring's 2(n-1)/n traffic; hierarchical for EFA: 2-node busbw above the NICs' line rate "
                          "(p4de 78 GB/s over 50 GB/s) rules the ring out there; roce follows infiniband"),
        },
        "nccl_socket_defaults_source": SOCKET_DEFAULTS_SOURCE,
        "assumptions": [
            "nvlink = nvswitch curve (no p3 NCCL data)", "nvswitch5 (B200/B300) = nvswitch4 curve (no data)",
            "shared-memory = pcie curve (calibrate CPU clusters with `srift calibrate comm`)",
            "superbench V100 box (2 GPUs, 11.7 GB/s peak busbw) taken as PCIe 3",
            "NCCL socket threads: the fitted per-thread rate is per connection with NCCL's channel count on the fitting "
            "servers (ddl-benchmarks: 4 PCIe GPUs, one NIC); more channels elsewhere would move more",
            "roce = infiniband apart from the Ethernet framing (no RoCE data)",
            "RDMA spread (infiniband, roce) = EFA's between-run spread",
        ],
    }
    return params, meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT / "data"), help="the measurements (default: the repository's data/)")
    ap.add_argument("--profiles-dir", default=None)
    ap.add_argument("--out", default=str(ROOT / "configs" / "perf"))
    ap.add_argument("--only", choices=("layouts", "kfac"), default=None,
                    help="refit one file alone (layouts: configs/perf/layouts.json on the parameters as shipped; "
                         "kfac: configs/perf/kfac_kernels.json)")
    args = ap.parse_args()
    data, out = Path(args.data), Path(args.out)
    today = _dt.date.today().isoformat()
    if args.only == "layouts":
        _write_layouts(data, out, today)
        return
    if args.only == "kfac":
        _write_kfac(data, out, today)
        return

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

    mparams, mmeta = fit_comm_params(data, profiles, cparams)
    mdict = mparams.to_dict()
    mdict.update({"sources": ["data/nccl-tests-aws", "data/superbench-results (nccl-bw, ib-loopback)",
                              "data/ddl-benchmarks (multi-node scaling over 10 GbE TCP, 100 Gb/s TCP, 100 Gb/s InfiniBand)",
                              "data/dlperf-v100-ib (multi-node scaling over 100 Gb/s EDR InfiniBand; interference fit)",
                              "data/cm-dare (spread)",
                              "data/lambda-deeplearning-benchmark + nvidia-deeplearningexamples (one-node DDP scaling)"],
                  "fitted_on": today, **mmeta})
    mdict["overlap_interference_fit"] = mmeta["fit"].pop("overlap_interference")
    write_json(out / "comm.json", mdict)
    for name, info in mmeta["fit"].items():
        print(f"comm: {name}: {info}")
    n = mparams.networks
    print(f"comm: sockets {n['ethernet'].per_thread_gbps:.1f} Gb/s per thread, alpha {n['ethernet'].alpha_s * 1e6:.0f} us; "
          f"infiniband alpha {n['infiniband'].alpha_s * 1e6:.1f} us; interference k = {mparams.overlap_interference:.2f}"
          f"  -> {out / 'comm.json'}")

    sdoc = fit_sharded(data, out, today)
    write_json(out / "sharded.json", sdoc)
    print(f"sharded: fused attention efficiency {sdoc['fused_attention_efficiency']:.3f}, LLM matmul factor "
          f"{sdoc['llm_matmul_factor']:.3f} over {sdoc['fit']['rows']} FSDP runs, in-sample MAPE "
          f"{sdoc['fit']['in_sample_mape_pct']:.1f}%  -> {out / 'sharded.json'}")

    _write_layouts(data, out, today)

    _write_kfac(data, out, today)


def _write_kfac(data: Path, out: Path, today: str) -> None:
    """configs/perf/kfac_kernels.json: the K-FAC kernel model's tables and GPU constants."""
    kdoc = fit_kfac(data, today)
    write_json(out / "kfac_kernels.json", kdoc)
    print(f"kfac kernels: shape {kdoc['shape']:.3f} from the CPU table; measured: "
          + ", ".join(f"{k} ({', '.join(v)})" for k, v in kdoc["measured"].items()) + f"  -> {out / 'kfac_kernels.json'}")
    central = kdoc["gpu_assumptions"]["central"]
    print("kfac GPU phase constants: " + ", ".join(f"{k} {central[k]:.4g}" for k in (
        "factor_gemm_efficiency", "call_s", "solver_efficiency", "solver_cycles_per_column", "precondition_gemm_efficiency"))
        + f"; in-sample MAPE % {kdoc['gpu_assumptions']['phase_fit']['in_sample_mape_pct']}")


def _write_layouts(data: Path, out: Path, today: str) -> None:
    """configs/perf/layouts.json: the layout factor fitted on the parameters in ``out``."""
    ldoc = fit_layouts(data, out, today)
    write_json(out / "layouts.json", ldoc)
    print(f"layouts: Megatron compute factor {ldoc['megatron_compute_factor']:.4f} over {ldoc['fit']['rows']} runs "
          f"-> {out / 'layouts.json'}")


def fit_kfac(data: Path, today: str) -> dict:
    """Fit the K-FAC kernel model to every data/measurements/kfac-kernels-<device>.csv (a new GPU
    table is picked up here) and add the GPU assumptions with their sources
    (srift/fitting/kfac_kernels.py): configs/perf/kfac_kernels.json's document."""
    return kfac_kernels.params_document(kfac_kernels.fit_kernel_params(data), today)


@contextmanager
def params_from(params_dir: Path) -> Iterator[None]:
    """The simulator reads compute.json and comm.json from ``params_dir`` meanwhile (the files
    this run has just written)."""
    from srift.perf import compute as C

    with validation.using_params(compute=C.load_params(str(params_dir / "compute.json")),
                                 comm=CM.load_params(str(params_dir / "comm.json"))):
        yield


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


def fit_layouts(data: Path, params_dir: Path, today: str) -> dict:
    """Fit ``megatron_compute_factor`` to the bf16 step times of data/llm-parallel-layouts
    (srift/fitting/layouts.py) on the parameters just written: configs/perf/layouts.json's document."""
    return layout_fit.params_document(data, today)


def fit_interference(data: Path, profiles: datasets.ProfileSource, compute: "object",
                     comm: CM.CommParams, extra=None) -> tuple[float, dict]:
    """Fit the all-reduce interference to measured DDP scaling: one-node t_n / t_1 of one system,
    and ``extra`` rows (``comm_fit.anchored_scaling_rows``: the multi-node sources' multi-GPU rows) when given."""
    with validation.using_params(compute=compute, comm=comm):  # type: ignore[arg-type]
        pairs = validation.scaling_pairs(datasets.load_rows(data))
        sim_n = validation.simulate_rows(pairs, profiles)
        sim_1 = validation.simulate_rows(pairs, profiles, n_gpus=1)
    rows = pd.DataFrame({"scaling": pairs["scaling"].to_numpy(), "ideal": sim_n["ideal"].to_numpy(),
                         "hidden": sim_n["hidden"].to_numpy(), "pred1": sim_1["pred"].to_numpy()})
    if extra is not None:
        rows = pd.concat([rows, extra[list(rows.columns)]], ignore_index=True)
    k, err = comm_fit.fit_overlap_interference(rows["scaling"].to_numpy(), rows["ideal"].to_numpy(), rows["hidden"].to_numpy(),
                                               rows["pred1"].to_numpy())
    ideal = validation.mape(rows["ideal"] / rows["pred1"], rows["scaling"])
    return k, {"pairs": int(len(pairs)), "multi_node_rows": 0 if extra is None else int(len(extra)),
               "scaling_mape_pct": round(err, 2), "ideal_overlap_scaling_mape_pct": round(ideal, 2),
               "method": ("grid search k in 0..3 (step 0.05) minimising the MAPE of predicted vs measured t_n/t_1 over the "
                          "one-node pairs and the multi-GPU rows of ddl-benchmarks and dlperf-v100-ib (compute anchored on their "
                          "measured 1-GPU time)")}


if __name__ == "__main__":
    main()

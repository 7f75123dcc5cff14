"""The network fits (srift/fitting/comm_fit.py): the wire-format figures by hand, the ddl-benchmarks
loader, the anchored simulation they rest on, and the scaling fit recovering known parameters."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from srift.fitting import comm_fit, datasets, validation
from srift.perf import comm as CM
from srift.zoo import load_builtin_profile

DATA = Path(__file__).resolve().parents[1] / "data"
PROFILES = datasets.ProfileSource(lambda m, b, s: load_builtin_profile(m, b, s))


def test_rdma_shares_from_the_wire_and_a_measured_write_stream():
    share, n = comm_fit.ib_write_share(DATA)
    # SuperBench ib-loopback on HDR (25 GB/s): ~23.9 GB/s at 1 MiB and more.
    assert 0.94 < share < 0.97 and n == 96  # NICs x runs, messages of 1-8 MiB
    # RoCE v2 carries 82 header bytes per 4096-byte packet where InfiniBand carries 26.
    assert comm_fit.roce_share(1.0) == pytest.approx((4096 / 4178) / (4096 / 4122))


def test_ddl_rows_as_srift_runs_them():
    ddl = datasets.load_ddl(DATA)
    multi = ddl[ddl["nodes"] > 1]
    assert len(ddl) == 33 and len(multi) == 27
    assert multi.groupby("network").size().to_dict() == {"ethernet": 18, "infiniband": 9}
    assert set(ddl["gpu"]) == {"RTX-2080-Ti"} and set(ddl["data_loading"]) == {"synthetic"}
    r = ddl[(ddl["model"] == "bert-large") & (ddl["nodes"] == 2) & (ddl["network_label"] == "ethernet-10g-tcp")].iloc[0]
    assert r["iteration_time_s"] == pytest.approx(8 * 8 / 30.04)  # 8 GPUs x batch 8 / samples per second


def test_an_anchored_profile_reproduces_the_measured_one_gpu_time():
    prof = PROFILES.get("bert-large", 8, 64)
    anchored = validation.anchored_profile(prof, "RTX-2080-Ti", "fp32", 0.1633)
    from srift.perf.compute import layer_times

    assert layer_times(anchored, "RTX-2080-Ti", "fp32").total_s == pytest.approx(0.1633)
    assert anchored.measured and anchored.device.gpu == "RTX-2080-Ti"


@pytest.mark.slow
def test_the_scaling_fit_recovers_a_known_thread_rate_and_latency():
    """Rows whose 'measured' times are the model's own under known socket parameters: the fit
    finds them again (the grid start, then least squares)."""
    rows = datasets.ddl_scaling_rows(DATA)
    sock = rows[rows["network"] == "ethernet"].reset_index(drop=True)
    shipped = CM.load_params()
    truth = dataclasses.replace(shipped, networks={**shipped.networks, "ethernet": dataclasses.replace(
        shipped.networks["ethernet"], per_thread_gbps=31.0, alpha_s=2e-4)})
    # 'Measured' t_N and t_1 server from the model under the truth (anchored compute, as the fit).
    one = sock.assign(nodes=1, network="", n_gpus=sock["gpus_per_node"])
    with validation.using_params(comm=truth):
        t_n = validation.simulate_anchored(sock, PROFILES)["pred"].to_numpy()
        t_1 = validation.simulate_anchored(one, PROFILES)["pred"].to_numpy()
    fake = sock.assign(iteration_time_s=t_n, ref_time_s=t_1)
    fitted, rms = comm_fit.fit_network_scaling(fake, PROFILES, shipped, "ethernet", *comm_fit.SOCKET_FIT)
    assert rms < 1e-3
    assert fitted.per_thread_gbps == pytest.approx(31.0, rel=0.02)
    assert fitted.alpha_s == pytest.approx(2e-4, rel=0.1)
    # Without a row that reaches the thread limit (10 GbE only), no limit is invented.
    ten = fake[fake["network_label"] == "ethernet-10g-tcp"].reset_index(drop=True)
    fitted10, _ = comm_fit.fit_network_scaling(ten, PROFILES, shipped, "ethernet", *comm_fit.SOCKET_FIT)
    assert fitted10.per_thread_gbps > 100.0
    assert np.isfinite(fitted10.alpha_s)

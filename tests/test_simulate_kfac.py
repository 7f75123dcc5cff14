"""The K-FAC prediction (srift/simulate/kfac.py) on hand-worked examples: a two-layer profile,
compute times given per layer and a linear communication model. None of this needs torch."""

from __future__ import annotations


import pytest

from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.hardware import gpu
from srift.job import Job
from srift.profile import LayerProfile, Profile
from srift.simulate.kfac import kfac_memory_bytes, plan_kfac
from srift.testing import LinearComm, layer_times, workers


def _profile():
    conv = LayerProfile("conv", "Conv2d", fwd_flops=1e6, bwd_flops=2e6, kfac_a_dim=10, kfac_g_dim=4, kfac_spatial=36)
    fc = LayerProfile("fc", "Linear", fwd_flops=1e6, bwd_flops=2e6, kfac_a_dim=17, kfac_g_dim=10, kfac_spatial=1)
    return Profile("two", batch_size=8, precision="fp32", layers=[conv, fc])


TIMES = layer_times([1e-3, 1e-3], [2e-3, 2e-3])  # 6e6 FLOPs in 6 ms: 1e9 FLOP/s
# Factor FLOPs: conv rows 8*36=288: A 2*288*100 = 57600, G 2*288*16 = 9216; fc rows 8: A 2*8*289
# = 4624, G 2*8*100 = 1600. Total 73040 -> 73.04 us. Precondition: 2*10*4*14 + 2*17*10*27 =
# 1120 + 9180 = 10300 -> 10.3 us. Inversions: 10^3 + 4^3 + 17^3 + 10^3 = 6977 -> 6.977 us.


def measured(fwd_s, bwd_s):
    """Layer times as the compute model returns them for a measured profile (anchored)."""
    return layer_times(fwd_s, bwd_s, anchored=True)


def phases(profile, cluster, job, compute, comm):
    """The amortized median phases of one K-FAC iteration."""
    return plan_kfac(profile, cluster, job, compute, comm).phases.as_dict()


def test_phases_one_gpu_amortized_by_the_intervals():
    job = Job(optimizer="kfac", kfac_strategy="spd", kfac_factor_steps=2, kfac_inv_steps=4)
    ph = phases(_profile(), workers(1), job, TIMES, None)
    assert ph == pytest.approx({
        "factor_compute": 73.04e-6 / 2, "exposed_factor_comm": 0.0, "inversion": 6.977e-6 / 4,
        "inverse_broadcast": 0.0, "preconditioning": 10.3e-6,
    })
    assert kfac_memory_bytes(_profile()) == 2 * 4 * (100 + 16 + 289 + 100)


def test_phases_mpd_two_workers():
    ph = phases(_profile(), workers(2), Job(optimizer="kfac", kfac_strategy="mpd"), TIMES, LinearComm(1e-4, 1e-9))
    # Four packed factors (55 + 10 + 153 + 55 = 273 elements, 1092 bytes) enqueued after backward
    # and fused into one 64 MiB buffer: one all-reduce, 100 us + 1 ns * 1092.
    assert ph["exposed_factor_comm"] == pytest.approx(1e-4 + 1092e-9)
    # Round robin [0, 1, 0, 1] over dims [10, 4, 17, 10]: w0 1000 + 4913 = 5913 -> 5.913 us.
    assert ph["inversion"] == pytest.approx(5.913e-6)
    # Then four packed-inverse broadcasts, not overlapped.
    assert ph["inverse_broadcast"] == pytest.approx(4e-4 + 1092e-9)


# SPD timeline with hooks (seconds): forward conv 1e-3 + A_conv 57.6e-6 -> A0 ready 1.0576e-3;
# fc 1e-3 + A_fc 4.624e-6 -> A1 ready 2.062224e-3. Backward: G_fc (1.6e-6) is ready when the
# gradient of fc's output arrives, 2.063824e-3, then fc's backward 2e-3 -> 4.063824e-3; G_conv
# (9.216e-6) ready 4.07304e-3, conv's backward -> 6.07304e-3. Without hooks: 6e-3, the first-order
# iteration, and the factor compute adds 73.04e-6 on top of it.
def test_phases_spd_two_workers_pipeline_and_fusion():
    job = Job(optimizer="kfac", kfac_strategy="spd")
    plan = plan_kfac(_profile(), workers(2), job, TIMES, LinearComm(1e-4, 1e-9))
    # Every inversion (<= 4.9 us) is cheaper than a broadcast (>= 100 us): all local, no broadcast.
    assert plan.owners == [-1] * 4
    assert plan.phases.inversion == pytest.approx(6.977e-6) and plan.phases.inverse_broadcast == 0.0
    # Factors ready ~1 ms apart, alpha 100 us: no fusion, and every all-reduce (~100 us) ends
    # before the next layer's backward does: nothing exposed.
    assert plan.groups_a == [[0], [1]] and plan.groups_g == [[1], [0]]
    assert plan.phases.exposed_factor_comm == pytest.approx(0.0, abs=1e-12)

    # alpha 10 ms: waiting ~1-2 ms for the next factor is cheaper than a start-up, so both merge.
    plan = plan_kfac(_profile(), workers(2), job, TIMES, LinearComm(1e-2, 1e-9))
    assert plan.groups_a == [[0, 1]] and plan.groups_g == [[1, 0]]
    end_a = 2.062224e-3 + 1e-2 + 1e-9 * 4 * (55 + 153)  # packed 10x10 and 17x17
    end_g = end_a + 1e-2 + 1e-9 * 4 * (55 + 10)  # packed 10x10 and 4x4, queued behind the A group
    assert plan.phases.exposed_factor_comm == pytest.approx(end_g - 6e-3 - 73.04e-6)


def test_spd_factor_all_reduces_share_the_link_with_gradient_buckets():
    prof = _profile()
    prof.layers[1].grad_bytes = 2 << 20  # fc: 2 MiB closes DDP's 1 MiB first bucket
    prof.layers[0].grad_bytes = 1000
    comm = LinearComm(1e-4, 1e-9)
    ph = phases(prof, workers(2), Job(optimizer="kfac", kfac_strategy="spd"), TIMES, comm)
    b1, b2 = comm.allreduce_time_s(2 << 20), comm.allreduce_time_s(1000)
    # First-order: bucket 1 ready at 4e-3, bucket 2 (ready 6e-3) waits for it.
    base_end = 4e-3 + b1 + b2
    # With K-FAC (FIFO by ready time): A0, A1 and G_fc are done by 2.27e-3; bucket 1 runs from
    # 4.063824e-3; G_conv (ready 4.07304e-3) queues behind it and delays bucket 2.
    end = 4.063824e-3 + b1 + comm.allreduce_time_s(40) + b2
    assert ph["exposed_factor_comm"] == pytest.approx(end - base_end - 73.04e-6)


def test_profile_without_factor_dims_is_a_clear_error():
    prof = Profile("plain", batch_size=8, precision="fp32", layers=[LayerProfile("fc", "Linear", fwd_flops=1.0)])
    with pytest.raises(SriftError, match="K-FAC factor dimensions"):
        phases(prof, workers(2), Job(optimizer="kfac"), layer_times([1e-3], [2e-3]), LinearComm(1e-4, 1e-9))


def test_amp_jobs_run_the_kfac_math_at_the_fp32_rate():
    spec = gpu("A100")
    ratio = spec.peak_flops("fp32") / spec.peak_flops("amp")
    cluster = Cluster("a100", (NodeGroup(count=1, gpus_per_node=1, gpu=spec.name, intra_node="nvswitch", network_gbps=400),))
    fp32 = phases(_profile(), cluster, Job(optimizer="kfac"), TIMES, None)
    amp = phases(_profile(), cluster, Job(optimizer="kfac", precision="amp"), TIMES, None)
    assert amp["preconditioning"] == pytest.approx(fp32["preconditioning"] / ratio)
    assert amp["factor_compute"] == pytest.approx(fp32["factor_compute"] / ratio)


def _measured_kfac_profile():
    """The two-layer profile with forward/backward and K-FAC kernel times as `srift profile --kfac`
    records them (the compute model then returns the measured layer times: anchored)."""
    p = _profile()
    kernels = {"conv": (4e-3, 1e-3, 2e-3, 5e-4, 3e-4), "fc": (1e-3, 2e-4, 6e-3, 2e-3, 7e-4)}
    for layer in p.layers:
        layer.fwd_s, layer.bwd_s = 1e-3, 2e-3
        (layer.kfac_factor_a_s, layer.kfac_factor_g_s, layer.kfac_inverse_a_s,
         layer.kfac_inverse_g_s, layer.kfac_precondition_s) = kernels[layer.name]
    return p


def test_measured_kernel_times_replace_the_flop_model():
    p = _measured_kfac_profile()
    job = Job(optimizer="kfac", kfac_strategy="naive")
    ph = phases(p, workers(1), job, measured([1e-3, 1e-3], [2e-3, 2e-3]), None)
    assert ph == pytest.approx({
        "factor_compute": 4e-3 + 1e-3 + 1e-3 + 2e-4, "exposed_factor_comm": 0.0,
        "inversion": 2e-3 + 5e-4 + 6e-3 + 2e-3, "inverse_broadcast": 0.0, "preconditioning": 3e-4 + 7e-4,
    })
    # A GPU twice as fast on the model's layers runs the K-FAC kernels twice as fast.
    fast = phases(p, workers(1), job, measured([5e-4, 5e-4], [1e-3, 1e-3]), None)
    assert fast == pytest.approx({k: v / 2 for k, v in ph.items()})
    # Layer times from the FLOP model alone (not anchored): the kernel times do not apply.
    flops = phases(p, workers(1), job, TIMES, None)
    assert flops["factor_compute"] == pytest.approx(73.04e-6)
    assert plan_kfac(p, workers(1), job, measured([1e-3, 1e-3], [2e-3, 2e-3]), None).measured_kernels
    assert not plan_kfac(p, workers(1), job, TIMES, None).measured_kernels


def test_kernel_times_follow_the_batch_when_the_profile_is_rescaled():
    p = _measured_kfac_profile().rescale(batch_size=16)
    conv = p.layers[0]
    assert conv.kfac_factor_a_s == pytest.approx(8e-3) and conv.kfac_factor_g_s == pytest.approx(2e-3)
    assert conv.kfac_inverse_a_s == 2e-3 and conv.kfac_precondition_s == 3e-4  # dimensions unchanged
    again = Profile.from_dict(p.to_dict())
    assert again.layers[1].kfac_inverse_g_s == pytest.approx(2e-3)


def test_spd_on_cpu_workers_exposes_every_fused_all_reduce():
    job = Job(optimizer="kfac", kfac_strategy="spd")
    comm = LinearComm(1e-4, 1e-9)
    plan = plan_kfac(_profile(), workers(2, "cpu"), job, TIMES, comm)
    # Same fusion as on GPUs (no merge at alpha 100 us), but nothing hides behind backward: four
    # packed all-reduces (10x10 -> 55, 17x17 -> 153, 4x4 -> 10, 10x10 -> 55 elements).
    assert plan.groups_a == [[0], [1]] and plan.groups_g == [[1], [0]]
    expected = sum(comm.allreduce_time_s(4 * e) for e in (55, 153, 10, 55))
    assert plan.phases.exposed_factor_comm == pytest.approx(expected)
    gpu = plan_kfac(_profile(), workers(2), job, TIMES, comm)
    assert gpu.phases.exposed_factor_comm == pytest.approx(0.0, abs=1e-12)


def test_spd_gradient_buckets_follow_the_recorded_gradient_order():
    # fc's 2 MiB and conv's 1000 bytes of gradient. Without a recorded order DDP's buckets follow
    # reverse execution: fc alone closes the 1 MiB first bucket, issued when fc's backward ends
    # (4.063824e-3 with the hooks), and G_conv's all-reduce (ready 4.07304e-3) queues behind it:
    # 4.063824e-3 - 4e-3 + allreduce(40 B) - 73.04e-6 of factor compute = 90.824 us exposed.
    comm = LinearComm(1e-4, 1e-9)
    job = Job(optimizer="kfac", kfac_strategy="spd")
    prof = _profile()
    prof.layers[0].grad_bytes, prof.layers[1].grad_bytes = 1000, 2 << 20
    exposed = plan_kfac(prof, workers(2), job, TIMES, comm).phases.exposed_factor_comm
    assert exposed == pytest.approx(4.063824e-3 - 4e-3 + comm.allreduce_time_s(40) - 73.04e-6)
    # Recorded: conv's gradient was ready first, so one bucket holds conv then fc and goes out
    # when conv's backward ends, after every factor's all-reduce: nothing is exposed, as in the
    # first-order simulation of the same profile (srift.simulate.ddp.bucket_layout).
    prof.layers[0].grad_ready_order, prof.layers[1].grad_ready_order = 0, 1
    plan = plan_kfac(prof, workers(2), job, TIMES, comm)
    assert plan.phases.exposed_factor_comm == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("strategy", ["naive", "mpd", "spd"])
def test_the_p90_times_the_median_plan_with_the_p90_communication(strategy):
    class Spread(LinearComm):  # p90: every collective takes 20 times longer
        def allreduce_time_s(self, size_bytes, quantile=0.5):
            return super().allreduce_time_s(size_bytes) * (20.0 if quantile == 0.9 else 1.0)

        def broadcast_time_s(self, size_bytes, quantile=0.5):
            return super().broadcast_time_s(size_bytes) * (20.0 if quantile == 0.9 else 1.0)

    # Inversions take microseconds, broadcasts at least 10 us: SPD inverts everything locally at
    # the median, and the p90 keeps that plan (a re-plan would too here; the plan is made once).
    comm = Spread(1e-5, 1e-9)
    plan = plan_kfac(_profile(), workers(2), Job(optimizer="kfac", kfac_strategy=strategy), TIMES, comm)
    ph, p90 = plan.phases, plan.phases_p90
    assert (p90.factor_compute, p90.inversion, p90.preconditioning) == (ph.factor_compute, ph.inversion, ph.preconditioning)
    packed = [4 * d * (d + 1) // 2 for d in (10, 4, 17, 10)]  # upper triangles, fp32
    if strategy == "naive":  # four packed factors fused into one buffer after backward, no broadcast
        full = comm.allreduce_time_s(sum(packed))
        assert ph.exposed_factor_comm == pytest.approx(full)
        assert p90.exposed_factor_comm == pytest.approx(20 * full) and p90.inverse_broadcast == 0.0
    if strategy == "mpd":  # round robin: the four packed-inverse broadcasts follow the inversions
        bcast = sum(comm.broadcast_time_s(b) for b in packed)
        assert ph.inverse_broadcast == pytest.approx(bcast) and p90.inverse_broadcast == pytest.approx(20 * bcast)
    if strategy == "spd":
        assert plan.owners == [-1] * 4 and ph.inverse_broadcast == p90.inverse_broadcast == 0.0

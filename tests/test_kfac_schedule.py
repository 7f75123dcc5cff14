"""The fusion planner, the inversion placement and the K-FAC prediction, on hand-worked examples.
None of this needs torch."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from srift.job import Job
from srift.kfac import schedule
from srift.profile import LayerProfile, Profile
from srift.simulate.kfac import kfac_memory_bytes, kfac_phases, plan_kfac


# ---- fusion planner ------------------------------------------------------------------------
# alpha = 1 s, beta = 0.1 s/byte, two 10-byte tensors: each all-reduce takes 2 s.
def test_next_tensor_ready_within_alpha_merges():
    # Tensor 1 is ready 0.5 s after tensor 0's all-reduce started (< alpha = 1): merge.
    assert schedule.plan_fusion([10, 10], [0.0, 0.5], 1.0, 0.1) == [[0, 1]]


def test_next_tensor_ready_later_than_alpha_does_not_merge():
    # Ready 1.5 s after: still during tensor 0's all-reduce (ends at 2 s) but waiting costs more than alpha.
    assert schedule.plan_fusion([10, 10], [0.0, 1.5], 1.0, 0.1) == [[0], [1]]
    # Ready after the all-reduce ended: nothing to gain.
    assert schedule.plan_fusion([10, 10], [0.0, 3.0], 1.0, 0.1) == [[0], [1]]


def test_tensor_queued_behind_the_link_merges_for_free():
    # alpha 0.1, beta 0.1: t_c = [10.1, 0.2, 0.2]; ready at 0, 5, 6. Tensor 1 waits for the link
    # until 10.1, after tensor 2 is ready (6): merged. Tensor 0 started at 0 and 5 - 0 > alpha: alone.
    groups = schedule.plan_fusion([100, 1, 1], [0.0, 5.0, 1.0], 0.1, 0.1)
    assert groups == [[0], [1, 2]]
    cost = lambda b: 0.1 + 0.1 * b  # noqa: E731
    # [0]: 0 -> 10.1; [1, 2]: starts at 10.1, costs 0.1 + 0.1 * 2 = 0.3.
    assert schedule.pipeline_finish_s(groups, [100, 1, 1], [0.0, 5.0, 6.0], cost) == pytest.approx(10.4)
    # Unfused it would pay alpha twice: 10.1 + 0.2 + 0.2.
    assert schedule.pipeline_finish_s([[0], [1], [2]], [100, 1, 1], [0.0, 5.0, 6.0], cost) == pytest.approx(10.5)


def test_plan_fusion_rejects_bad_input():
    with pytest.raises(ValueError):
        schedule.plan_fusion([1, 2], [0.0], 1.0, 1.0)
    with pytest.raises(ValueError):
        schedule.plan_fusion([1], [0.0], -1.0, 1.0)
    assert schedule.plan_fusion([], [], 1.0, 1.0) == []


def test_fixed_fusion_packs_consecutive_tensors_up_to_the_buffer():
    # Buffer 10 bytes: 4 + 5 fit (9), + 3 would be 12: new buffer; 3 + 7 = 10 fits exactly;
    # 12 is larger than the buffer: alone; 1 starts the last buffer.
    assert schedule.plan_fixed_fusion([4, 5, 3, 7, 12, 1], 10) == [[0, 1], [2, 3], [4], [5]]
    assert schedule.plan_fixed_fusion([], 10) == []
    with pytest.raises(ValueError):
        schedule.plan_fixed_fusion([1], 0)
    with pytest.raises(ValueError):
        schedule.plan_fixed_fusion([-1], 10)


def test_fixed_fusion_of_resnet50_factors_at_horovods_64_mib():
    """ResNet-50's 108 factors (model order A_0, G_0, ...), packed: 4 * 77.0 M elements = 308 MB
    (shared/KFAC.md 1.3), so at least five 64 MiB buffers; every buffer but the last is filled past
    the point where the next factor would overflow it."""
    from srift.zoo import load_builtin_profile

    prof = load_builtin_profile("resnet50")
    dims = [d for l in prof.layers if l.kfac_a_dim for d in (l.kfac_a_dim, l.kfac_g_dim)]
    assert len(dims) == 108
    sizes = [schedule.factor_message_bytes(d) for d in dims]
    assert sum(sizes) == pytest.approx(4 * 77.0e6, rel=0.01)
    groups = schedule.plan_fixed_fusion(sizes)
    assert [i for g in groups for i in g] == list(range(108))
    assert len(groups) >= sum(sizes) / schedule.FUSION_BUFFER_BYTES
    for g, nxt in zip(groups, groups[1:]):
        assert sum(sizes[i] for i in g) + sizes[nxt[0]] > schedule.FUSION_BUFFER_BYTES


def test_message_bytes_are_the_packed_upper_triangle():
    assert schedule.factor_message_bytes(1) == 4
    assert schedule.factor_message_bytes(3) == 4 * 6  # 3 + 2 + 1 elements
    assert schedule.inverse_message_bytes(3) == 24
    assert schedule.inverse_message_bytes(3, "eigen") == 4 * (3 * 3 + 3)  # eigenvectors + eigenvalues
    with pytest.raises(ValueError):
        schedule.factor_message_bytes(0)
    with pytest.raises(ValueError):
        schedule.inverse_message_bytes(3, "svd")


def test_fit_alpha_beta_recovers_a_line():
    assert schedule.fit_alpha_beta(lambda b: 2e-5 + 1e-9 * b, 100, 1e6) == pytest.approx((2e-5, 1e-9))


# ---- placement -----------------------------------------------------------------------------
DIMS = [4, 2, 3, 3, 1]
INV = lambda d: float(d)  # noqa: E731  (seconds; linear so the hand calculation stays short)
BCAST = lambda d: 1.5  # noqa: E731


def test_placement_by_load_and_local_when_cheaper():
    # d=1 inverts in 1 s < 1.5 s broadcast: local. Largest first to the least-loaded worker:
    # 4 -> w0 [4, 0]; 3 (f2) -> w1 [4, 3]; 3 (f3) -> w1 [4, 6]; 2 (f1) -> w0 [6, 6].
    owners = schedule.place_inversions(DIMS, 2, INV, BCAST)
    assert owners == [0, 0, 1, 1, schedule.LOCAL]
    tl = schedule.inversion_timeline(DIMS, owners, 2, INV, BCAST, overlap=True)
    # Makespan: w0 4 + 2 + 1 = 7, w1 3 + 3 + 1 = 7 (every worker also inverts the local d=1).
    assert tl.per_worker_s == [7.0, 7.0] and tl.compute_s == 7.0
    # Broadcasts in model order as inverses become ready: f0 at 4 -> 5.5, f1 ready at 6 -> 7.5,
    # f2 (ready 3) -> 9.0, f3 (ready 6) -> 10.5.
    assert tl.end_s == pytest.approx(10.5) and tl.broadcast_exposed_s == pytest.approx(3.5)
    # Without overlap (MPD style) the four broadcasts follow the inversions: 7 + 4 * 1.5.
    assert schedule.inversion_timeline(DIMS, owners, 2, INV, BCAST, overlap=False).end_s == pytest.approx(13.0)


def test_round_robin_and_local_placements():
    assert schedule.place_round_robin(5, 2) == [0, 1, 0, 1, 0]
    assert schedule.place_round_robin(3, 1) == [-1, -1, -1]
    # Naive: everyone inverts everything: 4 + 2 + 3 + 3 + 1 = 13 s, no broadcast.
    tl = schedule.inversion_timeline(DIMS, schedule.place_local(5), 2, INV, BCAST)
    assert (tl.compute_s, tl.broadcast_exposed_s) == (13.0, 0.0)
    assert schedule.place_inversions(DIMS, 1, INV, BCAST) == [-1] * 5


# ---- prediction ----------------------------------------------------------------------------
@dataclass
class Times:  # what the compute model gives: per-layer seconds aligned with the profile
    fwd_s: list
    bwd_s: list


@dataclass
class LinearComm:  # all-reduce and broadcast both alpha + beta * bytes
    alpha: float
    beta: float

    def allreduce_time_s(self, size_bytes, quantile=0.5):
        return self.alpha + self.beta * size_bytes

    def broadcast_time_s(self, size_bytes, quantile=0.5):
        return self.alpha + self.beta * size_bytes


@dataclass
class Workers:
    gpus: int


def _profile():
    conv = LayerProfile("conv", "Conv2d", fwd_flops=1e6, bwd_flops=2e6, kfac_a_dim=10, kfac_g_dim=4, kfac_spatial=36)
    fc = LayerProfile("fc", "Linear", fwd_flops=1e6, bwd_flops=2e6, kfac_a_dim=17, kfac_g_dim=10, kfac_spatial=1)
    return Profile("two", batch_size=8, precision="fp32", layers=[conv, fc])


TIMES = Times([1e-3, 1e-3], [2e-3, 2e-3])  # 6e6 FLOPs in 6 ms: 1e9 FLOP/s
# Factor FLOPs: conv rows 8*36=288: A 2*288*100 = 57600, G 2*288*16 = 9216; fc rows 8: A 2*8*289
# = 4624, G 2*8*100 = 1600. Total 73040 -> 73.04 us. Precondition: 2*10*4*14 + 2*17*10*27 =
# 1120 + 9180 = 10300 -> 10.3 us. Inversions: 10^3 + 4^3 + 17^3 + 10^3 = 6977 -> 6.977 us.


def test_phases_one_gpu_amortized_by_the_intervals():
    job = Job(optimizer="kfac", kfac_strategy="spd", kfac_factor_steps=2, kfac_inv_steps=4)
    ph = kfac_phases(_profile(), Workers(1), job, TIMES, None)
    assert ph == pytest.approx({
        "factor_compute": 73.04e-6 / 2, "exposed_factor_comm": 0.0, "inversion": 6.977e-6 / 4,
        "inverse_broadcast": 0.0, "preconditioning": 10.3e-6,
    })
    assert kfac_memory_bytes(_profile()) == 2 * 4 * (100 + 16 + 289 + 100)


def test_phases_mpd_two_workers():
    ph = kfac_phases(_profile(), Workers(2), Job(optimizer="kfac", kfac_strategy="mpd"), TIMES, LinearComm(1e-4, 1e-9))
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
    plan = plan_kfac(_profile(), Workers(2), job, TIMES, LinearComm(1e-4, 1e-9))
    # Every inversion (<= 4.9 us) is cheaper than a broadcast (>= 100 us): all local, no broadcast.
    assert plan.owners == [-1] * 4
    assert plan.phases["inversion"] == pytest.approx(6.977e-6) and plan.phases["inverse_broadcast"] == 0.0
    # Factors ready ~1 ms apart, alpha 100 us: no fusion, and every all-reduce (~100 us) ends
    # before the next layer's backward does: nothing exposed.
    assert plan.groups_a == [[0], [1]] and plan.groups_g == [[1], [0]]
    assert plan.phases["exposed_factor_comm"] == pytest.approx(0.0, abs=1e-12)

    # alpha 10 ms: waiting ~1-2 ms for the next factor is cheaper than a start-up, so both merge.
    plan = plan_kfac(_profile(), Workers(2), job, TIMES, LinearComm(1e-2, 1e-9))
    assert plan.groups_a == [[0, 1]] and plan.groups_g == [[1, 0]]
    end_a = 2.062224e-3 + 1e-2 + 1e-9 * 4 * (55 + 153)  # packed 10x10 and 17x17
    end_g = end_a + 1e-2 + 1e-9 * 4 * (55 + 10)  # packed 10x10 and 4x4, queued behind the A group
    assert plan.phases["exposed_factor_comm"] == pytest.approx(end_g - 6e-3 - 73.04e-6)


def test_spd_factor_all_reduces_share_the_link_with_gradient_buckets():
    prof = _profile()
    prof.layers[1].grad_bytes = 2 << 20  # fc: 2 MiB closes DDP's 1 MiB first bucket
    prof.layers[0].grad_bytes = 1000
    comm = LinearComm(1e-4, 1e-9)
    ph = kfac_phases(prof, Workers(2), Job(optimizer="kfac", kfac_strategy="spd"), TIMES, comm)
    b1, b2 = comm.allreduce_time_s(2 << 20), comm.allreduce_time_s(1000)
    # First-order: bucket 1 ready at 4e-3, bucket 2 (ready 6e-3) waits for it.
    base_end = 4e-3 + b1 + b2
    # With K-FAC (FIFO by ready time): A0, A1 and G_fc are done by 2.27e-3; bucket 1 runs from
    # 4.063824e-3; G_conv (ready 4.07304e-3) queues behind it and delays bucket 2.
    end = 4.063824e-3 + b1 + comm.allreduce_time_s(40) + b2
    assert ph["exposed_factor_comm"] == pytest.approx(end - base_end - 73.04e-6)


def test_schedule_and_prediction_do_not_import_torch():
    import subprocess

    code = "import sys, srift.simulate.kfac, srift.kfac.schedule; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_profile_without_factor_dims_is_a_clear_error():
    from srift.errors import SriftError

    prof = Profile("plain", batch_size=8, precision="fp32", layers=[LayerProfile("fc", "Linear", fwd_flops=1.0)])
    with pytest.raises(SriftError, match="K-FAC factor dimensions"):
        kfac_phases(prof, Workers(2), Job(optimizer="kfac"), Times([1e-3], [2e-3]), LinearComm(1e-4, 1e-9))


def test_amp_jobs_run_the_kfac_math_at_the_fp32_rate():
    from srift.cluster import Cluster, NodeGroup
    from srift.hardware import gpu

    spec = gpu("A100")
    ratio = spec.peak_flops("fp32") / spec.peak_flops("amp")
    cluster = Cluster("a100", (NodeGroup(count=1, gpus_per_node=1, gpu=spec.name, intra_node="nvswitch", network_gbps=400),))
    fp32 = kfac_phases(_profile(), cluster, Job(optimizer="kfac"), TIMES, None)
    amp = kfac_phases(_profile(), cluster, Job(optimizer="kfac", precision="amp"), TIMES, None)
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


@dataclass
class Measured(Times):
    anchored: bool = True


def test_measured_kernel_times_replace_the_flop_model():
    p = _measured_kfac_profile()
    job = Job(optimizer="kfac", kfac_strategy="naive")
    ph = kfac_phases(p, Workers(1), job, Measured([1e-3, 1e-3], [2e-3, 2e-3]), None)
    assert ph == pytest.approx({
        "factor_compute": 4e-3 + 1e-3 + 1e-3 + 2e-4, "exposed_factor_comm": 0.0,
        "inversion": 2e-3 + 5e-4 + 6e-3 + 2e-3, "inverse_broadcast": 0.0, "preconditioning": 3e-4 + 7e-4,
    })
    # A GPU twice as fast on the model's layers runs the K-FAC kernels twice as fast.
    fast = kfac_phases(p, Workers(1), job, Measured([5e-4, 5e-4], [1e-3, 1e-3]), None)
    assert fast == pytest.approx({k: v / 2 for k, v in ph.items()})
    # Layer times from the FLOP model alone (not anchored): the kernel times do not apply.
    flops = kfac_phases(p, Workers(1), job, TIMES, None)
    assert flops["factor_compute"] == pytest.approx(73.04e-6)
    assert plan_kfac(p, Workers(1), job, Measured([1e-3, 1e-3], [2e-3, 2e-3]), None).measured_kernels
    assert not plan_kfac(p, Workers(1), job, TIMES, None).measured_kernels


def test_kernel_times_follow_the_batch_when_the_profile_is_rescaled():
    p = _measured_kfac_profile().rescale(batch_size=16)
    conv = p.layers[0]
    assert conv.kfac_factor_a_s == pytest.approx(8e-3) and conv.kfac_factor_g_s == pytest.approx(2e-3)
    assert conv.kfac_inverse_a_s == 2e-3 and conv.kfac_precondition_s == 3e-4  # dimensions unchanged
    again = Profile.from_dict(p.to_dict())
    assert again.layers[1].kfac_inverse_g_s == pytest.approx(2e-3)


@dataclass
class CpuWorkers:  # a cluster of CPU processes (gloo): collectives share the computing cores
    gpus: int
    node_groups: tuple = ()

    def __post_init__(self):
        self.node_groups = (type("Group", (), {"gpu": "cpu"})(),)


def test_spd_on_cpu_workers_exposes_every_fused_all_reduce():
    job = Job(optimizer="kfac", kfac_strategy="spd")
    comm = LinearComm(1e-4, 1e-9)
    plan = plan_kfac(_profile(), CpuWorkers(2), job, TIMES, comm)
    # Same fusion as on GPUs (no merge at alpha 100 us), but nothing hides behind backward: four
    # packed all-reduces (10x10 -> 55, 17x17 -> 153, 4x4 -> 10, 10x10 -> 55 elements).
    assert plan.groups_a == [[0], [1]] and plan.groups_g == [[1], [0]]
    expected = sum(comm.allreduce_time_s(4 * e) for e in (55, 153, 10, 55))
    assert plan.phases["exposed_factor_comm"] == pytest.approx(expected)
    gpu = plan_kfac(_profile(), Workers(2), job, TIMES, comm)
    assert gpu.phases["exposed_factor_comm"] == pytest.approx(0.0, abs=1e-12)

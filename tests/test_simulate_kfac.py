"""The K-FAC prediction (srift/simulate/kfac.py) on hand-worked examples: a two-layer profile,
compute times given per layer, a linear communication model, and a kernel model whose GEMMs and
solvers run at round rates with free copies (srift/perf/kfac_kernels.py has its own tests).
Only the last test needs torch (it profiles a real grouped convolution)."""

from __future__ import annotations

import dataclasses

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.job import Job
from srift.perf.comm import CommModel
from srift.perf.kfac_kernels import DeviceKernels, SolverCurve, device_kernels
from srift.profile import LayerProfile, Profile
from srift.simulate.kfac import kfac_blocks, kfac_memory_bytes, plan_kfac
from srift.testing import LinearComm, layer_times, workers

# GEMMs and solvers at 1e9 per second (an inversion takes d^3 / 1e9 s), copies free, no call costs.
CUBE = SolverCurve(latency_s=0.0, rate_n3_per_s=1e9, n_half=0.0, shape=1.0)
K = DeviceKernels("test", "test kernels", CUBE, CUBE, gemm_flops_per_s=1e9, memory_bytes_per_s=1e30, call_s=0.0)


def _profile():
    conv = LayerProfile("conv", "Conv2d", fwd_flops=1e6, bwd_flops=2e6, kfac_a_dim=10, kfac_g_dim=4, kfac_spatial=36)
    fc = LayerProfile("fc", "Linear", fwd_flops=1e6, bwd_flops=2e6, kfac_a_dim=17, kfac_g_dim=10, kfac_spatial=1)
    return Profile("two", batch_size=8, precision="fp32", layers=[conv, fc])


TIMES = layer_times([1e-3, 1e-3], [2e-3, 2e-3])
# Factor FLOPs: conv rows 8*36=288: A 2*288*100 = 57600, G 2*288*16 = 9216; fc rows 8: A 2*8*289
# = 4624, G 2*8*100 = 1600. Total 73040 -> 73.04 us. Precondition: 2*10*4*14 + 2*17*10*27 =
# 1120 + 9180 = 10300 -> 10.3 us. Inversions: 10^3 + 4^3 + 17^3 + 10^3 = 6977 -> 6.977 us.


def plan(profile=None, cluster=None, strategy="spd", comm=None, times=TIMES, **kw):
    job_kw = {k: kw.pop(k) for k in ("kfac_factor_steps", "kfac_inv_steps", "precision") if k in kw}
    job = Job(optimizer="kfac", kfac_strategy=strategy, **job_kw)
    kw.setdefault("kernels", K)
    return plan_kfac(profile or _profile(), cluster or workers(2), job, times, comm, **kw)


def test_phases_one_gpu_amortized_by_the_intervals():
    ph = plan(cluster=workers(1), kfac_factor_steps=2, kfac_inv_steps=4).phases.as_dict()
    assert ph == pytest.approx({
        "factor_compute": 73.04e-6 / 2, "exposed_factor_comm": 0.0, "inversion": 6.977e-6 / 4,
        "inverse_broadcast": 0.0, "kfac_comm_interference": 0.0, "preconditioning": 10.3e-6,
    })
    assert kfac_memory_bytes(_profile()) == 2 * 4 * (100 + 16 + 289 + 100)


def test_phases_mpd_two_workers():
    ph = plan(strategy="mpd", comm=LinearComm(1e-4, 1e-9)).phases
    # Four packed factors (55 + 10 + 153 + 55 = 273 elements, 1092 bytes) enqueued after backward
    # and fused into one 64 MiB buffer: one all-reduce, 100 us + 1 ns * 1092.
    assert ph.exposed_factor_comm == pytest.approx(1e-4 + 1092e-9)
    # Round robin [0, 1, 0, 1] over dims [10, 4, 17, 10]: w0 1000 + 4913 = 5913 -> 5.913 us.
    assert ph.inversion == pytest.approx(5.913e-6)
    # Then four packed-inverse broadcasts, not overlapped, and nothing hidden to interfere.
    assert ph.inverse_broadcast == pytest.approx(4e-4 + 1092e-9)
    assert ph.kfac_comm_interference == 0.0


def test_broadcast_inverses_are_packed_by_their_owner_and_unpacked_everywhere_else():
    # Copies at 1 GB/s: packing moves 20 bytes per element, unpacking 36 (srift.perf.kfac_kernels).
    k = dataclasses.replace(K, memory_bytes_per_s=1e9)
    ph = plan(strategy="mpd", comm=LinearComm(1e-4, 1e-9), kernels=k).phases
    # Round robin over dims [10, 4, 17, 10]: w0 inverts and packs 10 and 17 (1 + 2 + 4.913 + 5.78 us).
    assert ph.inversion == pytest.approx((1000 + 2000 + 4913 + 20 * 289) * 1e-9)
    # After the four broadcasts, w1 unpacks what w0 sent (the worker that owns least unpacks most).
    assert ph.inverse_broadcast == pytest.approx(4e-4 + 1092e-9 + 36 * (100 + 289) * 1e-9)


def test_naive_sends_packed_triangles_in_64_mib_buffers():
    # Four Linear layers 3000 -> 3000 with a bias (A 3001, G 3000; the FLOPs 2 x 8 x 3000 x 3000
    # say the input rows are 3000 wide): packed factors of 4 x 3001 x 3002 / 2 = 18 018 004 and
    # 4 x 3000 x 3001 / 2 = 18 006 000 bytes, in order A0 G0 A1 G1 ...: Horovod's 64 MiB buffer
    # (67 108 864 bytes) takes three (54.04 MB), then three, then the last two.
    layers = [LayerProfile(f"fc{i}", "Linear", params=3000 * 3001, fwd_flops=2 * 8 * 3000 * 3000, bwd_flops=1.0,
                           kfac_a_dim=3001, kfac_g_dim=3000, kfac_spatial=1) for i in range(4)]
    prof = Profile("wide", batch_size=8, precision="fp32", layers=layers)
    assert [b.width for b in kfac_blocks(prof)] == [3000] * 4 and all(b.bias for b in kfac_blocks(prof))
    comm = LinearComm(1e-3, 1e-9)
    ph = plan(prof, strategy="naive", comm=comm, times=layer_times([1e-3] * 4, [2e-3] * 4)).phases
    total = 4 * (18_018_004 + 18_006_000)
    assert ph.exposed_factor_comm == pytest.approx(3 * 1e-3 + 1e-9 * total)


def test_a_grouped_convolution_is_one_block_per_group():
    # params = groups x C_out/groups x a_dim: 3 x 4 x 10 -> three blocks of (10, 4), named conv[j].
    conv = LayerProfile("conv", "Conv2d", params=120, fwd_flops=1e6, bwd_flops=2e6, kfac_a_dim=10, kfac_g_dim=4,
                        kfac_spatial=36)
    prof = Profile("grouped", batch_size=8, precision="fp32", layers=[conv])
    p = plan(prof, cluster=workers(1), times=layer_times([1e-3], [2e-3]))
    assert p.layer_names == ["conv[0]", "conv[1]", "conv[2]"] and p.dims == [10, 4] * 3
    assert p.phases.factor_compute == pytest.approx(3 * (57600 + 9216) / 1e9)
    assert p.phases.inversion == pytest.approx(3 * (1000 + 64) / 1e9)
    assert kfac_memory_bytes(prof) == 2 * 4 * 3 * (100 + 16)


# SPD timeline with hooks (seconds): forward conv 1e-3 + A_conv 57.6e-6 -> A0 ready 1.0576e-3;
# fc 1e-3 + A_fc 4.624e-6 -> A1 ready 2.062224e-3. Backward: G_fc (1.6e-6) is ready when the
# gradient of fc's output arrives, 2.063824e-3, then fc's backward 2e-3 -> 4.063824e-3; G_conv
# (9.216e-6) ready 4.07304e-3, conv's backward -> 6.07304e-3. Without hooks: 6e-3, the first-order
# iteration, and the factor compute adds 73.04e-6 on top of it.
def test_phases_spd_two_workers_pipeline_and_fusion():
    p = plan(comm=LinearComm(1e-4, 1e-9))
    # Every inversion (<= 4.9 us) is cheaper than a broadcast (>= 100 us): all local, no broadcast.
    assert p.owners == [-1] * 4
    assert p.phases.inversion == pytest.approx(6.977e-6) and p.phases.inverse_broadcast == 0.0
    # Factors ready ~1 ms apart, alpha 100 us: no fusion, and every all-reduce (~100 us) ends
    # before the next layer's backward does: nothing exposed.
    assert p.groups_a == [[0], [1]] and p.groups_g == [[1], [0]]
    assert p.phases.exposed_factor_comm == pytest.approx(0.0, abs=1e-12)

    # alpha 10 ms: waiting ~1-2 ms for the next factor is cheaper than a start-up, so both merge.
    p = plan(comm=LinearComm(1e-2, 1e-9))
    assert p.groups_a == [[0, 1]] and p.groups_g == [[1, 0]]
    end_a = 2.062224e-3 + 1e-2 + 1e-9 * 4 * (55 + 153)  # packed 10x10 and 17x17
    end_g = end_a + 1e-2 + 1e-9 * 4 * (55 + 10)  # packed 10x10 and 4x4, queued behind the A group
    assert p.phases.exposed_factor_comm == pytest.approx(end_g - 6e-3 - 73.04e-6)


def test_spd_placed_by_the_paper_codes_threshold():
    # dims [10, 4, 17, 10]: with D_TH = 10 the 4 stays local and the others are placed largest first
    # on the least-loaded worker whatever the broadcast costs (17 -> 0, 10 -> 1, the second 10 -> 1,
    # whose load 1000 is still below worker 0's 4913).
    p = plan(comm=LinearComm(1e-4, 1e-9), local_below=10)
    assert p.owners == [1, -1, 0, 1]
    # The slowest worker inverts the local 4 and the 17: (64 + 4913) ns (the test curve: d^3 ns).
    assert p.phases.inversion == pytest.approx((64 + 4913) * 1e-9)
    # Three broadcasts of packed inverses (55, 153, 55 elements), the first issued when the 17 is done.
    assert p.off_rank == 3


def test_hidden_factor_all_reduces_are_charged_the_interference():
    comm = LinearComm(1e-4, 1e-9)
    p = plan(comm=comm, interference=0.5)
    # All four all-reduces (packed 55, 153, 10, 55 elements) hide behind backward: 0.5 s per second.
    hidden = sum(comm.allreduce_time_s(4 * e) for e in (55, 153, 10, 55))
    assert p.phases.exposed_factor_comm == pytest.approx(0.0, abs=1e-12)
    assert p.phases.kfac_comm_interference == pytest.approx(0.5 * hidden)
    # Amortized with the factor updates; D-KFAC hides nothing.
    assert plan(comm=comm, interference=0.5, kfac_factor_steps=2, kfac_inv_steps=2).phases.kfac_comm_interference == \
        pytest.approx(0.25 * hidden)
    assert plan(strategy="naive", comm=comm, interference=0.5).phases.kfac_comm_interference == 0.0
    # From a communication model: its overlap_interference x the GPUs' share (all of it within a node).
    cluster = workers(2)
    model = CommModel(cluster)
    assert plan(cluster=cluster, comm=model).interference == pytest.approx(model.params.overlap_interference)
    # CPU workers: gloo reduces on the cores that compute, so a hidden second costs a full second
    # (interference 1) and the iteration pays every all-reduce, as the serial first-order CPU
    # prediction does; the time lands where the runtime's timers see it (the hooks), not as exposed.
    cpu = plan(cluster=workers(2, "cpu"), comm=comm)
    assert cpu.interference == 1.0
    assert cpu.phases.exposed_factor_comm == pytest.approx(0.0, abs=1e-12)
    assert cpu.phases.kfac_comm_interference == pytest.approx(hidden)


def test_spd_broadcasts_hidden_behind_inversions_are_charged_too():
    # Inversions at 1e3 d^3/s (10 -> 1 s, 4 -> 64 ms, 17 -> 4.913 s) all outweigh a broadcast
    # (~100 us): largest first to the least loaded worker: 17 -> w0, 10 -> w1, 10 -> w1, 4 -> w1.
    slow = dataclasses.replace(K, inverse=SolverCurve(0.0, 1e3, 0.0, 1.0))
    comm = LinearComm(1e-4, 1e-9)
    p = plan(comm=comm, kernels=slow, interference=0.5)
    assert p.owners == [1, 1, 0, 1] and p.off_rank == 4
    b = {d: comm.broadcast_time_s(4 * d * (d + 1) // 2) for d in (10, 4, 17)}
    # w0 inverts 17 (4.913 s); its broadcast, issued in model order before factor 3's, ends the
    # phase; factors 0 and 1 are broadcast while the inversions go on (hidden), factor 3 after 17.
    assert p.phases.inversion == pytest.approx(4.913)
    assert p.phases.inverse_broadcast == pytest.approx(b[17] + b[10])
    factors = plan(comm=comm, interference=0.5).phases.kfac_comm_interference  # the hidden factor all-reduces
    assert p.phases.kfac_comm_interference == pytest.approx(factors + 0.5 * (b[10] + b[4]))


def test_placement_uses_the_costs_the_runtime_measures():
    # The runtime prices an inversion at d^3 over the rate it measures at d = 256. A solver with
    # a 1 s latency measures 256^3 / 1 s there, so it guesses 17^3 / 1.68e7 = 0.29 ms for the 17 x 17
    # factor (more than its 100.6 us broadcast: moved) and 60 us for a 10 x 10 one (kept local),
    # although every call really takes a second.
    latency = dataclasses.replace(K, inverse=SolverCurve(1.0, 1e12, 0.0, 1.0))
    p = plan(comm=LinearComm(1e-4, 1e-9), kernels=latency)
    assert p.owners == [-1, -1, 0, -1]
    assert p.phases.inversion == pytest.approx(4.0, rel=1e-6)  # timed with the real per-call cost


def test_eigen_broadcasts_the_eigenbasis_and_preconditions_with_four_gemms():
    comm = LinearComm(1e-4, 1e-9)
    inv = plan(strategy="mpd", comm=comm)
    eig = plan(strategy="mpd", comm=comm, inverse_method="eigen")
    # (d + 1) x d floats per factor instead of the packed triangle.
    assert eig.phases.inverse_broadcast == pytest.approx(4e-4 + 1e-9 * 4 * (11 * 10 + 5 * 4 + 18 * 17 + 11 * 10))
    assert eig.phases.preconditioning == pytest.approx(2 * inv.phases.preconditioning)
    with pytest.raises(SriftError, match="inverse method"):
        plan(comm=comm, inverse_method="lu")


def test_predict_prices_the_jobs_inverse_method():
    from srift import api

    def predict(method):
        job = Job(batch_size=32, optimizer="kfac", kfac_strategy="naive", kfac_inverse_method=method)
        return api.predict(job, model="resnet50", cluster_file="configs/clusters/ib-64.yaml").prediction

    inv, eig = predict("inverse"), predict("eigen")
    # eigh is memory-bound in its tridiagonal reduction: far slower than the Cholesky inverse on a GPU.
    assert eig.breakdown["inversion"] > 3 * inv.breakdown["inversion"]
    assert eig.breakdown["factor_compute"] == inv.breakdown["factor_compute"]
    assert any(n.startswith("K-FAC kernels (eigen): derived for RTX-2080-Ti") for n in eig.notes)
    with pytest.raises(SriftError, match="K-FAC inverse method"):
        Job(optimizer="kfac", kfac_inverse_method="lu")


def test_profile_without_factor_dims_is_a_clear_error():
    prof = Profile("plain", batch_size=8, precision="fp32", layers=[LayerProfile("fc", "Linear", fwd_flops=1.0)])
    with pytest.raises(SriftError, match="K-FAC factor dimensions"):
        plan(prof, comm=LinearComm(1e-4, 1e-9), times=layer_times([1e-3], [2e-3]))


def test_amp_jobs_run_the_kfac_math_in_fp32():
    cluster = Cluster("a100", (NodeGroup(count=1, gpus_per_node=1, gpu="A100-80GB", intra_node="nvswitch", network_gbps=400),))
    fp32 = plan(cluster=cluster, kernels=None)
    amp = plan(cluster=cluster, kernels=None, precision="amp")
    k = device_kernels("A100-80GB", "fp32")
    assert amp.kernels.gemm_flops_per_s == fp32.kernels.gemm_flops_per_s == k.gemm_flops_per_s
    assert amp.phases.preconditioning == pytest.approx(fp32.phases.preconditioning)
    # The half-precision output gradients are cast to fp32 in the G hooks: read 2 + write 4 bytes
    # per element, conv 288 x 4 and fc 8 x 10 elements (the profile records no input bytes).
    cast = 6 * (288 * 4 + 8 * 10) / k.memory_bytes_per_s
    assert amp.phases.factor_compute - fp32.phases.factor_compute == pytest.approx(cast)


def measured(fwd_s, bwd_s):
    """Layer times as the compute model returns them for a measured profile (anchored)."""
    return layer_times(fwd_s, bwd_s, anchored=True)


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


def test_measured_kernel_times_replace_the_kernel_model():
    p = _measured_kfac_profile()
    ph = plan(p, cluster=workers(1), strategy="naive", times=measured([1e-3, 1e-3], [2e-3, 2e-3])).phases.as_dict()
    assert ph == pytest.approx({
        "factor_compute": 4e-3 + 1e-3 + 1e-3 + 2e-4, "exposed_factor_comm": 0.0,
        "inversion": 2e-3 + 5e-4 + 6e-3 + 2e-3, "inverse_broadcast": 0.0, "kfac_comm_interference": 0.0,
        "preconditioning": 3e-4 + 7e-4,
    })
    # A GPU twice as fast on the model's layers runs the K-FAC kernels twice as fast.
    fast = plan(p, cluster=workers(1), strategy="naive", times=measured([5e-4, 5e-4], [1e-3, 1e-3])).phases.as_dict()
    assert fast == pytest.approx({k: v / 2 for k, v in ph.items()})
    # Layer times from the FLOP model alone (not anchored): the kernel model prices them.
    flops = plan(p, cluster=workers(1), strategy="naive")
    assert flops.phases.factor_compute == pytest.approx(73.04e-6) and not flops.measured_kernels
    assert plan(p, cluster=workers(1), strategy="naive", times=measured([1e-3, 1e-3], [2e-3, 2e-3])).measured_kernels


def test_kernel_times_follow_the_batch_when_the_profile_is_rescaled():
    p = _measured_kfac_profile().rescale(batch_size=16)
    conv = p.layers[0]
    assert conv.kfac_factor_a_s == pytest.approx(8e-3) and conv.kfac_factor_g_s == pytest.approx(2e-3)
    assert conv.kfac_inverse_a_s == 2e-3 and conv.kfac_precondition_s == 3e-4  # dimensions unchanged
    again = Profile.from_dict(p.to_dict())
    assert again.layers[1].kfac_inverse_g_s == pytest.approx(2e-3)


def test_spd_factor_all_reduces_share_the_link_with_gradient_buckets():
    prof = _profile()
    prof.layers[1].grad_bytes = 2 << 20  # fc: 2 MiB closes DDP's 1 MiB first bucket
    prof.layers[0].grad_bytes = 1000
    comm = LinearComm(1e-4, 1e-9)
    ph = plan(prof, comm=comm).phases
    b1, b2 = comm.allreduce_time_s(2 << 20), comm.allreduce_time_s(1000)
    # First-order: bucket 1 ready at 4e-3, bucket 2 (ready 6e-3) waits for it.
    base_end = 4e-3 + b1 + b2
    # With K-FAC (FIFO by ready time): A0, A1 and G_fc are done by 2.27e-3; bucket 1 runs from
    # 4.063824e-3; G_conv (ready 4.07304e-3) queues behind it and delays bucket 2.
    end = 4.063824e-3 + b1 + comm.allreduce_time_s(40) + b2
    assert ph.exposed_factor_comm == pytest.approx(end - base_end - 73.04e-6)


def test_spd_on_cpu_workers_pays_every_fused_all_reduce_in_compute():
    comm = LinearComm(1e-4, 1e-9)
    p = plan(cluster=workers(2, "cpu"), comm=comm)
    # Same fusion as on GPUs (no merge at alpha 100 us); the four packed all-reduces
    # (10x10 -> 55, 17x17 -> 153, 4x4 -> 10, 10x10 -> 55 elements) hide behind backward but take
    # their time from it: the K-FAC phases add up to what serial all-reduces would.
    assert p.groups_a == [[0], [1]] and p.groups_g == [[1], [0]]
    total = sum(comm.allreduce_time_s(4 * e) for e in (55, 153, 10, 55))
    assert p.phases.exposed_factor_comm + p.phases.kfac_comm_interference == pytest.approx(total)
    gpu = plan(comm=comm)
    assert gpu.phases.exposed_factor_comm == pytest.approx(0.0, abs=1e-12)
    assert p.phases.total_s - gpu.phases.total_s == pytest.approx(total - gpu.phases.kfac_comm_interference)


def test_spd_gradient_buckets_follow_the_recorded_gradient_order():
    # fc's 2 MiB and conv's 1000 bytes of gradient. Without a recorded order DDP's buckets follow
    # reverse execution: fc alone closes the 1 MiB first bucket, issued when fc's backward ends
    # (4.063824e-3 with the hooks), and G_conv's all-reduce (ready 4.07304e-3) queues behind it:
    # 4.063824e-3 - 4e-3 + allreduce(40 B) - 73.04e-6 of factor compute = 90.824 us exposed.
    comm = LinearComm(1e-4, 1e-9)
    prof = _profile()
    prof.layers[0].grad_bytes, prof.layers[1].grad_bytes = 1000, 2 << 20
    assert plan(prof, comm=comm).phases.exposed_factor_comm == pytest.approx(
        4.063824e-3 - 4e-3 + comm.allreduce_time_s(40) - 73.04e-6)
    # Recorded: conv's gradient was ready first, so one bucket holds conv then fc and goes out
    # when conv's backward ends, after every factor's all-reduce: nothing is exposed, as in the
    # first-order simulation of the same profile (srift.simulate.ddp.bucket_layout).
    prof.layers[0].grad_ready_order, prof.layers[1].grad_ready_order = 0, 1
    assert plan(prof, comm=comm).phases.exposed_factor_comm == pytest.approx(0.0, abs=1e-12)


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
    p = plan(strategy=strategy, comm=comm)
    ph, p90 = p.phases, p.phases_p90
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
        assert p.owners == [-1] * 4 and ph.inverse_broadcast == p90.inverse_broadcast == 0.0


@pytest.mark.torch
@pytest.mark.slow
def test_a_profiled_grouped_convolution_gives_the_runtimes_blocks():
    # The profiler records one group's dimensions; the simulator counts the groups from the
    # parameters and finds the blocks srift.kfac builds, depthwise included.
    torch = pytest.importorskip("torch")
    from srift.kfac.layers import make_layers, supported
    from srift.profiling.flops import analyze_layers

    net = torch.nn.Sequential(torch.nn.Conv2d(8, 12, 3, groups=4), torch.nn.Conv2d(12, 12, 3, groups=12, bias=False),
                              torch.nn.Flatten(), torch.nn.Linear(12 * 4 * 4, 5))
    x = torch.randn(2, 8, 8, 8)
    layers = analyze_layers(net, lambda: net(x).sum())
    prof = Profile("grouped", batch_size=2, precision="fp32", layers=layers)
    runtime = [(b.name, b.a_dim, b.g_dim) for name, m in net.named_children() if supported(m)
               for b in make_layers(name, m)]
    assert [(b.name, b.a_dim, b.g_dim) for b in kfac_blocks(prof)] == runtime
    assert [b.width for b in kfac_blocks(prof)][:5] == [18] * 4 + [9] and kfac_blocks(prof)[-1].bias

"""The simulator pinned on hand-computed cases."""

import dataclasses
import math

import numpy as np
import pytest

from srift.catalog.spec import cluster_from_spec
from srift.cluster import Cluster, NodeGroup
from srift.job import Job
from srift.perf.comm import load_params
from srift.profile import DeviceInfo, PhaseTimes
from srift.perf.quantiles import Z90
from srift.simulate import Predictor, predict
from srift.simulate.ddp import FIRST_BUCKET_BYTES, bucket_layout, comm_end_s
from srift.simulate.mixed import split_batch
from srift.simulate.spot import spot_expectation
from srift.testing import S_PER_BYTE, MiB, calibrated_cluster, measured_profile
from srift.zoo import load_builtin_profile


def test_one_bucket_all_reduce_is_fully_exposed():
    prof = measured_profile([100_000, 100_000, 100_000])  # 300 kB < 1 MiB: one bucket, ready at the end
    p = predict(prof, calibrated_cluster())
    comm = 300_000 * S_PER_BYTE
    assert p.breakdown["forward"] == pytest.approx(0.03)
    assert p.breakdown["backward"] == pytest.approx(0.06)
    assert p.breakdown["exposed_comm"] == pytest.approx(comm)
    assert p.iteration_time_s == pytest.approx(0.03 + 0.06 + comm + 0.005)
    assert p.throughput_samples_per_s == pytest.approx(16 / p.iteration_time_s)


def test_two_buckets_first_one_overlaps_backward():
    # Backward runs l2, l1, l0. l2's 2 MiB fill the 1 MiB first bucket alone; l1 + l0 share the second.
    prof = measured_profile([MiB, MiB, 2 * MiB])
    layout = bucket_layout(prof)
    assert list(layout.sizes_bytes) == [2 * MiB, 2 * MiB]
    p = predict(prof, calibrated_cluster())
    c = 2 * MiB * S_PER_BYTE
    ready1, ready2 = 0.03 + 0.02, 0.03 + 0.06
    end1 = ready1 + c
    end2 = max(ready2, end1) + c
    assert p.breakdown["exposed_comm"] == pytest.approx(end2 - ready2)
    assert p.breakdown.comm_total_s == pytest.approx(2 * c)
    # The breakdown's phases add up to the iteration; what the all-reduce hid is the rest of it.
    assert sum(p.breakdown.values()) == pytest.approx(p.iteration_time_s)
    assert p.breakdown.hidden_comm_s == pytest.approx(2 * c - (end2 - ready2))
    assert p.to_dict()["breakdown"]["comm_total"] == pytest.approx(2 * c)  # the documents keep the key


def test_first_bucket_is_one_mib_then_25():
    prof = measured_profile([10 * MiB] * 6 + [MiB // 2, MiB // 2])
    sizes = list(bucket_layout(prof).sizes_bytes)
    assert sizes[0] == FIRST_BUCKET_BYTES  # the two last layers' 0.5 MiB each
    assert sizes[1:] == [30 * MiB, 30 * MiB]  # 10 MiB tensors close a bucket once it reaches 25 MiB


def test_comm_bound_vs_compute_bound():
    prof = measured_profile([MiB, MiB, 2 * MiB])
    fast = predict(prof, calibrated_cluster(s_per_byte=1e-10))
    slow = predict(prof, calibrated_cluster(s_per_byte=1e-6))
    assert fast.bottleneck == "compute"
    assert fast.breakdown["exposed_comm"] == pytest.approx(2 * MiB * 1e-10)  # only the last bucket sticks out
    assert slow.bottleneck == "communication"
    c = 2 * MiB * 1e-6
    # comm-bound: the link is busy from the first bucket's ready time to the end
    assert slow.breakdown["exposed_comm"] == pytest.approx(0.05 + 2 * c - 0.09)


def test_single_worker_has_no_communication():
    p = predict(measured_profile([MiB] * 3), calibrated_cluster(workers=1))
    assert p.breakdown["exposed_comm"] == 0.0 and p.breakdown.comm_total_s == 0.0


def test_comm_end_recurrence_matches_loop():
    rng = np.random.default_rng(0)
    ready = np.sort(rng.random(20))
    c = rng.random(20) * 0.1
    end = 0.0
    for r, ci in zip(ready, c):
        end = max(r, end) + ci
    assert comm_end_s(ready, c) == pytest.approx(end)


def test_split_batch_by_speed():
    assert split_batch([2.0, 1.0], [2, 4], 64) == [16, 8]
    b = split_batch([3.0, 1.0], [1, 1], 10)
    assert sum(b) == 10 and b[0] > b[1]


def test_mixed_cluster_batch_split_follows_speed():
    prof = load_builtin_profile("resnet50")
    pr = Predictor(prof, Job(batch_size=64))
    p = pr.predict(cluster_from_spec("p3.2xlarge:1+g4dn.xlarge:1"))
    split = {b.gpu: b.per_gpu_batch for b in p.batch_split}
    v100 = pr.compute("V100-16GB", 64).speed
    t4 = pr.compute("T4", 64).speed
    assert split["V100-16GB"] == 64  # the fastest GPU takes --batch-size
    assert split["T4"] == round(64 * t4 / v100)
    assert p.global_batch_size == 64 + split["T4"]


def test_global_batch_is_split_exactly():
    p = predict(load_builtin_profile("resnet50"), cluster_from_spec("p3.8xlarge:1+g4dn.12xlarge:1"), Job(global_batch_size=512))
    assert sum(b.per_gpu_batch * b.gpus for b in p.batch_split) == 512


def test_memory_fit_and_no_fit():
    prof = load_builtin_profile("resnet50")
    k80 = cluster_from_spec("p2.xlarge")
    assert predict(prof, k80, Job(batch_size=16)).fits_in_memory
    big = predict(prof, k80, Job(batch_size=512))
    assert not big.fits_in_memory and big.bottleneck == "memory"
    m = big.memory_breakdown_bytes
    assert m["weights"] == 4 * prof.params and m["optimizer_state"] == 4 * prof.params


def test_spot_expectation_by_hand():
    group = NodeGroup(count=2, gpus_per_node=1, gpu="T4", intra_node="pcie3", network_gbps=10, spot=True,
                      interruption_per_hour=0.01, usd_per_hour=1.0)
    s = spot_expectation(Cluster("c", (group,)), state_bytes=1e9, throughput=100.0, cost_per_hour=2.0)
    rate = 0.02 / 3600
    ckpt = 10 + 1.0
    interval = math.sqrt(2 * ckpt / rate)
    useful = (1 - rate * (87 + 60 + interval / 2)) / (1 + ckpt / interval)
    assert s.useful_fraction == pytest.approx(useful)
    assert s.expected_throughput_samples_per_s == pytest.approx(100 * useful)
    assert s.expected_usd_per_million_samples == pytest.approx(2.0 / (100 * useful * 3600) * 1e6)
    on_demand = Cluster("d", (NodeGroup(count=2, gpus_per_node=1, gpu="T4", intra_node="pcie3", network_gbps=10),))
    assert spot_expectation(on_demand, 1e9, 100.0, 2.0) is None


def test_p90_adds_the_compute_spread_and_the_p90_all_reduce():
    # One 300 kB bucket, exposed whole: 3 ms at the median, 6 ms at the p90. Compute spread: the
    # measured 10 % coefficient of variation at z = Z90 = 1.28155 (the normal 90th percentile).
    prof = measured_profile([100_000, 100_000, 100_000])
    prof.phases.total_s_std = 0.1 * prof.phases.total_s
    p = predict(prof, calibrated_cluster(p90_factor=2.0))
    comm = 300_000 * S_PER_BYTE
    assert p.iteration_time_s == pytest.approx(0.09 + comm + 0.005)
    assert p.p90_iteration_time_s == pytest.approx(0.09 * (1 + Z90 * 0.1) + 2 * comm + 0.005)
    # A structural profile's compute spread is 3 %.
    bert = predict(load_builtin_profile("bert-base"), cluster_from_spec("g5.xlarge"))
    b = bert.breakdown
    compute = b["forward"] + b["backward"]
    assert bert.p90_iteration_time_s == pytest.approx(bert.iteration_time_s + Z90 * 0.03 * compute)


def test_cpu_workers_do_not_overlap_communication():
    # gloo on CPU processes shares the cores with the compute: the all-reduce adds up.
    prof = measured_profile([MiB, MiB, 2 * MiB], gpu="cpu")
    p = predict(prof, calibrated_cluster(gpu="cpu"))
    assert p.breakdown["exposed_comm"] == pytest.approx(4 * MiB * S_PER_BYTE)
    assert p.iteration_time_s == pytest.approx(0.03 + 0.06 + 4 * MiB * S_PER_BYTE + 0.005)


@pytest.mark.slow
def test_ddp_all_reduces_fp32_gradients_under_amp():
    from srift.job import Job

    # ResNet-50 has 25,557,032 parameters. Under AMP the parameters stay fp32 and so do their
    # gradients: DDP's buckets carry 4 bytes per parameter (102,228,128 bytes), not 2, unless a
    # communication hook compresses them (srift models none).
    prof = load_builtin_profile("resnet50", 64)
    assert prof.params == 25_557_032
    fp32 = Predictor(prof, Job(batch_size=64, precision="fp32")).bucket_sizes_bytes
    amp = Predictor(prof, Job(batch_size=64, precision="amp")).bucket_sizes_bytes
    assert float(np.sum(amp)) == 4 * 25_557_032 == float(np.sum(fp32))
    # The bucket cap: the first bucket closes at 1 MiB, the others at 25 MiB (each holds whole
    # tensors, so it may pass the cap by its last one); the last one takes what is left.
    # The classifier's gradient is ready first: (2048 x 1000 + 1000) x 4 = 8,196,000 bytes, alone
    # past 1 MiB; three buckets of 25 MiB or more follow, and the rest (7.5 MiB) is the last one,
    # whose all-reduce starts only when backward has ended: it is exposed.
    assert amp[0] == (2048 * 1000 + 1000) * 4 and amp[0] >= FIRST_BUCKET_BYTES
    assert len(amp) == 5 and all(s >= 25 * MiB for s in amp[1:4])
    assert amp[4] == 4 * 25_557_032 - float(np.sum(amp[:4]))
    from srift.perf.comm import CommModel

    cluster = cluster_from_spec("g4dn.xlarge:2")
    p = predict(prof, cluster, Job(batch_size=64, precision="amp"))
    assert p.breakdown["exposed_comm"] >= float(CommModel.for_cluster(cluster).allreduce_time_s(amp[4])) * (1 - 1e-9)


def test_a_bucket_cap_above_the_gradients_all_reduces_once_after_backward():
    # Six 10 MiB gradients and a 2 MiB one, ready first in backward. PyTorch's caps (1 MiB, then 25)
    # make buckets of 2, 30 and 30 MiB, the first two all-reduced behind backward; a 1000 MiB cap
    # (apex DDP's message_size=250M elements, as NVIDIA's BERT pre-training sets it) leaves DDP's
    # first bucket and puts the rest in one, started when backward ends: all of its 60 MiB exposed.
    prof = measured_profile([10 * MiB] * 6 + [2 * MiB])
    assert list(bucket_layout(prof).sizes_bytes) == [2 * MiB, 30 * MiB, 30 * MiB]
    assert list(bucket_layout(prof, cap_bytes=1000 * MiB).sizes_bytes) == [2 * MiB, 60 * MiB]
    one = predict(prof, calibrated_cluster(), Job(bucket_cap_mb=1000.0))
    # The 2 MiB bucket is ready after 0.07 s forward + 0.02 s and done by 0.111 s, before backward
    # ends at 0.21 s (hidden: it slows backward by k x its time); the 60 MiB one takes 60 MiB x 1e-8
    # s/B after that.
    from srift.perf.comm import load_params

    c = 60 * MiB * S_PER_BYTE
    hidden = load_params().overlap_interference * 2 * MiB * S_PER_BYTE
    assert one.breakdown["exposed_comm"] == pytest.approx(c)
    assert one.breakdown["comm_interference"] == pytest.approx(hidden)
    assert one.iteration_time_s == pytest.approx(0.07 + 0.14 + c + hidden + 0.005)
    assert predict(prof, calibrated_cluster()).breakdown["exposed_comm"] < c - 0.05  # part of it behind backward


def _resnet50_at(backward_s: float):
    """The zoo's ResNet-50 (32 images) as if measured on a T4: forward half of backward, each
    layer's share of both in proportion to its FLOPs."""
    prof = load_builtin_profile("resnet50", 32)
    fwd = sum(x.fwd_flops for x in prof.layers)
    bwd = sum(x.bwd_flops for x in prof.layers)
    layers = [dataclasses.replace(x, fwd_s=backward_s / 2 * x.fwd_flops / fwd, bwd_s=backward_s * x.bwd_flops / bwd)
              for x in prof.layers]
    return dataclasses.replace(prof, layers=layers, device=DeviceInfo("test T4", "cuda", "T4"),
                               phases=PhaseTimes(data_s=0.0, forward_s=backward_s / 2, backward_s=backward_s, optimizer_s=0.0,
                                                 total_s=1.5 * backward_s))


@pytest.mark.parametrize("backward_s", [0.120, 0.030])  # fp32 and AMP speeds (4x: tensor cores)
def test_exposed_all_reduce_of_a_resnet50_step_by_hand(backward_s):
    # DDP's buckets of ResNet-50's fp32 gradients (AMP's too: autocast keeps fp32 parameters): the
    # fc's 8,196,000 bytes close the 1 MiB first bucket alone; the next close at 25 MiB. Two
    # workers whose all-reduce moves 2.5 GB/s (0.4 ns per byte): 102 MB take 40.9 ms.
    prof = _resnet50_at(backward_s)
    sizes = bucket_layout(prof).sizes_bytes
    assert sizes[0] == 8_196_000 and float(sizes.sum()) == 4 * 25_557_032
    s_per_byte = 0.4e-9
    comm = sizes * s_per_byte
    # When each bucket's last gradient is ready: backward runs the layers in reverse.
    order = prof.gradient_order()
    bounds = [*bucket_layout(prof).starts.tolist(), len(order)]
    done, ready, t = {}, [], backward_s / 2
    for x in reversed(prof.layers):
        t += x.bwd_s
        done[x.name] = t
    ready = [max(done[x.name] for x in order[a:b]) for a, b in zip(bounds, bounds[1:])]
    end = 0.0
    for r, c in zip(ready, comm):  # one stream: a bucket starts when ready and the previous is done
        end = max(r, end) + c
    exposed = max(0.0, end - 1.5 * backward_s)
    p = predict(prof, calibrated_cluster(2, s_per_byte))
    assert p.breakdown["exposed_comm"] == pytest.approx(exposed, rel=1e-6)
    k = load_params().overlap_interference
    assert p.breakdown["comm_interference"] == pytest.approx(k * (float(comm.sum()) - exposed), rel=1e-6)
    if backward_s == 0.120:
        # fp32: backward outlasts the all-reduces, so only the last bucket (conv1 and layer1, ready
        # when backward ends) is exposed.
        assert exposed == pytest.approx(comm[-1])
    else:
        # AMP: backward (30 ms) is shorter than the all-reduce (40.9 ms): from some bucket on the
        # stream never idles, and the exposed part is the latest of (a bucket's ready time + the
        # all-reduces from it on) past the end of backward: 3.5 times fp32's, the same bytes.
        tail = max(r + float(comm[i:].sum()) for i, r in enumerate(ready))
        assert exposed == pytest.approx(tail - 1.5 * backward_s)
        assert exposed > 3 * comm[-1]


def test_a_16_bit_hook_halves_ddp_gradient_bytes():
    # ResNet-50's 25,557,032 fp32 gradients: 4 bytes each on the wire by default (autocast), 2 with
    # --grad-compression fp16 or bf16 (fp16/bf16_compress_hook); DDP cuts the buckets on the fp32
    # gradients either way.
    prof = load_builtin_profile("resnet50", 64)
    for hook, per in (("none", 4), ("fp16", 2), ("bf16", 2)):
        pred = Predictor(prof, Job(batch_size=64, precision="amp", grad_compression=hook))
        assert float(np.sum(pred.bucket_sizes_bytes)) == per * 25_557_032, hook
        assert len(pred.bucket_sizes_bytes) == len(bucket_layout(prof).sizes_bytes)


"""Sharded data parallelism (FSDP, ZeRO-2, HSDP, activation checkpointing) pinned on hand-computed
cases: the schedule, the plumbing from profile and cluster to it, memory per GPU of a 7B model,
auto's choice, tokens/s and MFU."""

import json

import numpy as np
import pytest

from srift.catalog.spec import cluster_from_spec
from srift.cli import main
from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.job import Job
from srift.perf.comm import CommModel
from srift.perf.compute import mma_rate_flops
from srift.hardware import gpu as gpu_spec
from srift.simulate import Predictor, predict
from srift.simulate.memory import ALLOCATOR_FACTOR, ALLOCATOR_FIXED_BYTES, activation_bytes, sharded_memory_bytes

EXAMPLE_GIB = 36.34
from srift.simulate.predictor import profile_flops_per_token
from srift.simulate.sharded import StepInputs, checkpoint_masks, simulate_step, unit_layout
from srift.testing import S_PER_BYTE, calibrated_cluster, measured_unit_profile
from srift.zoo import llm_arch, load_builtin_profile
from srift.zoo.llm import model_flops_per_token

# ---- the schedule ------------------------------------------------------------------------------
# Runs: root (embeddings), block 1, block 2, root (norm, head). Forward and backward seconds per run.
RUNS = (0, 1, 2, 0)


def step(fwd, bwd, gather, scatter, allreduce=(0.0, 0.0, 0.0), regather=True, serial=False):
    return simulate_step(StepInputs(RUNS, tuple(fwd), tuple(bwd), tuple(gather), tuple(scatter), tuple(allreduce),
                                    regather, serial))


def test_compute_bound_fsdp_exposes_only_the_root_gather_and_the_last_reduce_scatter():
    s = step(fwd=(1, 10, 10, 2), bwd=(2, 20, 20, 4), gather=(0.5, 1, 1), scatter=(0.5, 1, 1))
    # Forward: root gathered [0, 0.5] (compute waits), B1 prefetched at 0.5 -> 1.5, B2 at 1.5 -> 2.5,
    # both ready before they are needed; forward ends at 0.5 + 23 = 23.5. Backward: B2 gathered
    # again at 23.5 (ready 24.5 < 27.5), B1 at 27.5; RS(B2) at 47.5, RS(B1) at 67.5, compute ends
    # at 69.5, then the root's reduce-scatter [69.5, 70.0] is all that remains.
    assert s.end_s == pytest.approx(70.0)
    assert s.compute_s == pytest.approx(69.0)
    assert s.exposed_s == pytest.approx((0.5, 0.5, 0.0))
    assert s.comm_s == pytest.approx((0.5 + 1 + 1 + 1 + 1, 0.5 + 1 + 1, 0.0))
    assert s.hidden_s == pytest.approx(sum(s.comm_s) - 1.0)


def test_all_gather_bound_fsdp_waits_for_every_block():
    s = step(fwd=(1, 1, 1, 1), bwd=(1, 2, 2, 1), gather=(0.5, 5, 5), scatter=(0.5, 5, 5))
    # Forward: root [0, 0.5]; B1 [0.5, 5.5] so block 1 waits 1.5 -> 5.5 (4 s); B2 [5.5, 10.5],
    # block 2 waits 6.5 -> 10.5 (4 s); forward ends 12.5. Backward: B2 again [12.5, 17.5]: wait
    # 13.5 -> 17.5; B1 [17.5, 22.5]: wait 19.5 -> 22.5; RS(B2) queues behind it [22.5, 27.5],
    # RS(B1) [27.5, 32.5], RS(root) [32.5, 33.0]; compute ends 25.5 and waits 7.5 s for them.
    assert s.end_s == pytest.approx(33.0)
    assert s.exposed_s == pytest.approx((0.5 + 4 + 4 + 4 + 3, 7.5, 0.0))
    assert s.end_s == pytest.approx(s.compute_s + sum(s.exposed_s))


def test_zero2_keeps_parameters_from_forward_so_backward_gathers_nothing():
    fsdp = step(fwd=(1, 1, 1, 1), bwd=(1, 2, 2, 1), gather=(0.5, 5, 5), scatter=(0.5, 5, 5))
    zero2 = step(fwd=(1, 1, 1, 1), bwd=(1, 2, 2, 1), gather=(0.5, 5, 5), scatter=(0.5, 5, 5), regather=False)
    # Same forward (ends 12.5, comm free at 10.5); backward computes 13.5, 15.5, 17.5, 18.5 with
    # RS(B2) [15.5, 20.5], RS(B1) [20.5, 25.5], RS(root) [25.5, 26.0].
    assert zero2.end_s == pytest.approx(26.0)
    assert zero2.exposed_s == pytest.approx((8.5, 7.5, 0.0))
    assert zero2.comm_s[0] == pytest.approx(10.5) and fsdp.comm_s[0] == pytest.approx(20.5)
    assert zero2.end_s < fsdp.end_s


def test_hsdp_adds_the_cross_node_allreduce_of_each_shard_after_its_reduce_scatter():
    s = step(fwd=(1, 10, 10, 2), bwd=(2, 20, 20, 4), gather=(0.5, 1, 1), scatter=(0.5, 1, 1), allreduce=(0.25, 2, 2))
    # As the compute-bound case, with AR(B2) [48.5, 50.5], AR(B1) [68.5, 70.5]; the root's RS
    # queues behind AR(B1): [70.5, 71.0], then AR(root) [71.0, 71.25]. Compute ends 69.5 and
    # waits: 1.0 s of AR(B1), 0.5 s of RS(root), 0.25 s of AR(root).
    assert s.end_s == pytest.approx(71.25)
    assert s.exposed_s == pytest.approx((0.5, 0.5, 1.25))
    assert s.comm_s[2] == pytest.approx(4.25)


def test_serial_collectives_on_cpu_workers_overlap_nothing():
    s = step(fwd=(1, 10, 10, 2), bwd=(2, 20, 20, 4), gather=(0.5, 1, 1), scatter=(0.5, 1, 1), serial=True)
    assert s.end_s == pytest.approx(s.compute_s + sum(s.comm_s))
    assert s.hidden_s == pytest.approx(0.0)
    # Also when the first layer to run is a block's with nothing to gather: the root's gather at the
    # start holds the cores. Root [0, 0.5]; B1 runs 0.5 -> 1.5 forward, 1.5 -> 3.5 backward, then its
    # reduce-scatter 3.5 -> 4.5: 4.5 s, nothing hidden (overlapping the root's gather would say 4.0).
    one = simulate_step(StepInputs((1,), (1.0,), (2.0,), (0.5, 0.0), (0.5, 1.0), (0.0, 0.0), True, True))
    assert one.end_s == pytest.approx(4.5) and one.hidden_s == pytest.approx(0.0)


# ---- from a profile and a cluster to the schedule ------------------------------------------------
def test_fsdp_prediction_on_a_calibrated_node_matches_the_hand_schedule():
    # Root 1 M parameters (embed), 2 blocks of 2.5 M, head 0; every layer 10 ms forward, 20 ms
    # backward, measured on T4; 2 T4 whose all-reduce takes 1e-8 s/byte (so an all-gather or
    # reduce-scatter of S bytes takes S/2 x 1e-8: half an all-reduce's traffic).
    prof = measured_unit_profile([2_500_000, 2_500_000], root_params=1_000_000)
    cluster = calibrated_cluster(workers=2)
    p = predict(prof, cluster, Job(parallelism="fsdp", activation_checkpointing="none"))
    root, block = 4e6 * 0.5 * S_PER_BYTE, 10e6 * 0.5 * S_PER_BYTE  # fp32: 4 bytes a parameter
    expected = step(fwd=(0.01, 0.01, 0.01, 0.01), bwd=(0.02, 0.02, 0.02, 0.02), gather=(root, block, block),
                    scatter=(root, block, block))
    hidden_cost = CommModel.for_cluster(cluster).params.overlap_interference * expected.hidden_s  # one node: all GPU-side
    assert p.parallelism == "fsdp" and p.activation_checkpointing == "none"
    assert p.breakdown["exposed_all_gather"] == pytest.approx(expected.exposed_s[0])
    assert p.breakdown["exposed_reduce_scatter"] == pytest.approx(expected.exposed_s[1])
    assert p.breakdown["comm_interference"] == pytest.approx(hidden_cost)
    assert p.breakdown["optimizer"] == pytest.approx(0.005 / 2)  # the step runs on the local shard
    assert p.iteration_time_s == pytest.approx(expected.end_s + hidden_cost + 0.005 / 2)
    assert sum(v for k, v in p.breakdown.items() if k != "comm_total") == pytest.approx(p.iteration_time_s)


def test_gradient_accumulation_repeats_the_micro_batch_and_steps_once():
    prof = measured_unit_profile([2_500_000, 2_500_000], root_params=1_000_000)
    one = predict(prof, calibrated_cluster(), Job(parallelism="fsdp", activation_checkpointing="none"))
    four = predict(prof, calibrated_cluster(), Job(parallelism="fsdp", activation_checkpointing="none", grad_accum=4))
    opt = one.breakdown["optimizer"]
    assert four.iteration_time_s == pytest.approx(4 * (one.iteration_time_s - opt) + opt)
    assert four.global_batch_size == 4 * one.global_batch_size
    assert four.throughput_samples_per_s == pytest.approx(four.global_batch_size / four.iteration_time_s)


def test_all_gather_and_reduce_scatter_are_half_an_all_reduce():
    comm = CommModel.for_cluster(cluster_from_spec("p4d.24xlarge:4"))
    sizes = np.array([1e6, 1e8, 1e9])
    np.testing.assert_allclose(comm.all_gather_time_s(sizes), comm.allreduce_time_s(sizes) / 2)
    np.testing.assert_allclose(comm.reduce_scatter_time_s(sizes), comm.allreduce_time_s(sizes) / 2)
    # HSDP's groups: the 8 GPUs of a node, and the 4 nodes with a GPU's share of the network each.
    node, across = comm.within_node().topology, comm.across_nodes().topology
    assert (node.workers, node.nodes) == (8, 1)
    assert (across.workers, across.nodes, across.gpus_per_node) == (4, 4, 1)
    assert across.net_gbytes_per_s == pytest.approx(comm.topology.net_gbytes_per_s / 8)


# ---- activation checkpointing -----------------------------------------------------------------
def test_selective_checkpointing_is_torchtitans_per_op_policy():
    prof = load_builtin_profile("llama3-8b", batch_size=1, seq_len=1024, precision="bf16")
    masks = checkpoint_masks(prof, "selective")
    block = {layer.name.rsplit(".", 1)[-1] if "proj" in layer.name or "sdpa" in layer.name else layer.name.split(".")[-1]: i
             for i, layer in enumerate(prof.layers) if layer.unit == "model.layers.0"}
    saved = {k for k, i in block.items() if masks.keep[i]}
    recomputed = {k for k, i in block.items() if masks.recompute[i]}
    # Saved: the attention kernel's output and the 1st, 3rd, 5th, 7th matmul (q, v, gate, down).
    assert saved == {"q_proj", "v_proj", "sdpa", "gate_proj", "down_proj"}
    assert recomputed == {"input_layernorm", "k_proj", "o_proj", "post_attention_layernorm", "act_fn", "up_proj"}
    full = checkpoint_masks(prof, "full")
    assert all(full.recompute[i] for i in block.values()) and not full.recompute[0]  # the root is never checkpointed


def test_checkpointing_adds_recompute_and_saves_memory():
    prof = load_builtin_profile("llama3-8b", batch_size=1, seq_len=4096, precision="bf16")
    cluster = cluster_from_spec("p5.48xlarge:1")
    plans = {c: predict(prof, cluster, Job(precision="bf16", parallelism="fsdp", activation_checkpointing=c))
             for c in ("none", "selective", "full")}
    assert plans["none"].breakdown["recompute"] == 0.0
    # full: every block's forward again; the root (embedding, final norm, head) is not checkpointed.
    blocks_fwd = plans["none"].breakdown["forward"] - sum(
        t for t, layer in zip(Predictor(prof, Job(precision="bf16")).compute("H100", 1).times.fwd_s, prof.layers)
        if layer.unit is None)
    assert plans["full"].breakdown["recompute"] == pytest.approx(blocks_fwd)
    assert 0 < plans["selective"].breakdown["recompute"] < plans["full"].breakdown["recompute"]
    mem = [plans[c].memory_breakdown_bytes["activations"] for c in ("none", "selective", "full")]
    assert mem[0] > mem[1] > mem[2]


# ---- memory per GPU: a 7B model by hand -----------------------------------------------------------
def test_memory_of_llama2_7b_fsdp_on_8_gpus_by_hand():
    prof = load_builtin_profile("llama2-7b", batch_size=1, seq_len=4096, precision="bf16")
    d, layers, f, vocab, t, heads = 4096, 32, 11008, 32000, 4096, 32
    block = 4 * d * d + 3 * d * f + 2 * d  # q, k, v, o (no GQA), gate, up, down, two RMSNorm weights
    root = 2 * vocab * d + d  # embedding, untied head, final norm
    p = layers * block + root
    assert p == 6_738_415_616  # the published 6.74 B
    n = 8
    weights = 4 * p / n  # fp32 master shards
    gathered = (root + 2 * block) * 2  # bf16: the root and two blocks (computing, prefetched)
    in_flight = root * 2 + block * (2 + 2 + 4)  # root grads (bf16); one block computing, one reduced in fp32
    gradients = 4 * p / n + in_flight
    optimizer = 8 * p / n  # AdamW: two fp32 moments
    # Activations (bf16, 2 bytes): per block and token the outputs of norm1, q, k, v, attention, o,
    # norm2 and down (8 x d) and of gate, act and up with the SwiGLU product act*up (4 x f), plus
    # attention's fp32 log-sum-exp per head; the root keeps the embedding, RoPE tables
    # (2 x 128), the final norm and the logits; the loss adds fp32 log-softmax and fp32 logits.
    per_block = t * 2 * (8 * d + 4 * f) + t * heads * 4
    root_acts = t * d * 2 + 2 * t * 128 * 2 + t * d * 2 + t * vocab * 2
    loss = t * vocab * (4 + 4)
    acts_none = layers * per_block + root_acts + loss
    m = sharded_memory_bytes(prof, "bf16", "fsdp", "none", n)
    assert m["weights"] == pytest.approx(weights)
    assert m["gathered_weights"] == pytest.approx(gathered)
    assert m["gradients"] == pytest.approx(gradients)
    assert m["optimizer_state"] == pytest.approx(optimizer)
    assert m["activations"] == pytest.approx(acts_none)
    allocated = weights + gathered + gradients + optimizer + acts_none
    # The caching allocator reserves ALLOCATOR_FACTOR x allocated + ALLOCATOR_FIXED_BYTES.
    assert m["allocator"] == pytest.approx((ALLOCATOR_FACTOR - 1.0) * allocated + ALLOCATOR_FIXED_BYTES)
    total = ALLOCATOR_FACTOR * allocated + ALLOCATOR_FIXED_BYTES
    assert sum(m.values()) == pytest.approx(total)
    assert total / 2**30 == pytest.approx(EXAMPLE_GIB, abs=0.01)  # docs/sharded.md quotes this example
    # Full checkpointing: each block keeps its input (block 0's is the root's output, kept anyway),
    # and the block recomputing holds all of its activations once more.
    acts_full = (layers - 1) * t * d * 2 + per_block + root_acts + loss
    assert activation_bytes(prof, "bf16", "full") == pytest.approx(acts_full)
    # A fused cross-entropy keeps no fp32 copies of the logits.
    assert activation_bytes(prof, "bf16", "none", fused_loss=True) == pytest.approx(acts_none - loss)
    # DDP holds everything: 4 + 2 bytes of weights, 4 + 4 of gradients and buckets, 8 of Adam.
    ddp = sharded_memory_bytes(prof, "bf16", "ddp", "none", n)
    assert ddp["weights"] + ddp["gathered_weights"] + ddp["gradients"] + ddp["optimizer_state"] == pytest.approx(22 * p)


def test_zero2_keeps_all_parameters_gathered_and_hsdp_shards_within_a_node():
    prof = load_builtin_profile("llama2-7b", batch_size=1, seq_len=4096, precision="bf16")
    p = unit_layout(prof).params
    zero2 = sharded_memory_bytes(prof, "bf16", "zero2", "none", 16)
    hsdp = sharded_memory_bytes(prof, "bf16", "hsdp", "none", 8)
    assert zero2["gathered_weights"] == pytest.approx(2 * p)
    assert zero2["optimizer_state"] == pytest.approx(8 * p / 16)
    assert hsdp["optimizer_state"] == pytest.approx(8 * p / 8)


# ---- auto ------------------------------------------------------------------------------------
def _node(memory_gib: float, gpus: int = 8, nodes: int = 1) -> Cluster:
    return Cluster("test", (NodeGroup(nodes, gpus, "A100-80GB", "nvswitch", 400.0, "efa", gpu_memory_gib=memory_gib),))


def test_auto_takes_the_fastest_plan_that_fits():
    prof = load_builtin_profile("llama2-7b", batch_size=1, seq_len=4096, precision="bf16")
    job = dict(precision="bf16", batch_size=1, seq_len=4096)
    cluster = _node(80)
    auto = predict(prof, cluster, Job(**job))
    explicit = {(par, c): predict(prof, cluster, Job(**job, parallelism=par, activation_checkpointing=c))
                for par in ("ddp", "zero2", "fsdp") for c in ("none", "selective", "full")}
    fitting = {k: v for k, v in explicit.items() if v.fits_in_memory}
    assert ("ddp", "none") not in fitting  # 22 bytes a parameter: 148 GB
    best = min(fitting, key=lambda k: fitting[k].iteration_time_s)
    assert (auto.parallelism, auto.activation_checkpointing) == best
    assert auto.iteration_time_s == pytest.approx(fitting[best].iteration_time_s)
    # hsdp is not offered on one node (it is fsdp there).
    assert auto.parallelism != "hsdp"


def test_auto_checkpoints_fully_when_nothing_else_fits():
    # 22 GiB GPUs (20.9 usable): fsdp + full needs 20.2 GiB (the hand calculation above with
    # 3.0 GB of activations), fsdp + selective 27.4 GiB, zero2 + full 32.7 GiB.
    prof = load_builtin_profile("llama2-7b", batch_size=1, seq_len=4096, precision="bf16")
    job = Job(precision="bf16", batch_size=1, seq_len=4096)
    p = predict(prof, _node(22), job)
    assert (p.parallelism, p.activation_checkpointing) == ("fsdp", "full") and p.fits_in_memory
    tiny = predict(prof, _node(10), job)
    assert not tiny.fits_in_memory and tiny.bottleneck == "memory"
    assert (tiny.parallelism, tiny.activation_checkpointing) == ("fsdp", "full")  # the least memory


def test_a_profile_without_units_trains_with_ddp_unchanged():
    prof = load_builtin_profile("resnet50")
    cluster = cluster_from_spec("p3.16xlarge:2")
    auto = predict(prof, cluster, Job())
    ddp = predict(prof, cluster, Job(parallelism="ddp"))
    assert auto.parallelism == "ddp" and auto.iteration_time_s == ddp.iteration_time_s
    assert auto.memory_breakdown_bytes == ddp.memory_breakdown_bytes
    with pytest.raises(SriftError, match="nothing to checkpoint"):
        Predictor(prof, Job(activation_checkpointing="full"))


# ---- outputs for sequence models ---------------------------------------------------------------
def test_tokens_per_second_and_mfu():
    prof = load_builtin_profile("llama3-8b", batch_size=1, seq_len=8192, precision="bf16")
    arch = llm_arch("llama3-8b")
    cluster = cluster_from_spec("p5.48xlarge:2")
    p = Predictor(prof, Job(precision="bf16"), model_flops_per_token=lambda s: model_flops_per_token(arch, s)).predict(cluster)
    assert p.throughput_tokens_per_s == pytest.approx(p.throughput_samples_per_s * 8192)
    assert p.tokens_per_s_per_gpu == pytest.approx(p.throughput_tokens_per_s / 16)
    # MFU = tokens/s per GPU x (6 N + 12 L H s) / the H100's dense bf16 peak (989.4 TFLOP/s).
    n = 8_030_261_248 - 128_256 * 4096  # Llama 3 8B without its input embedding (the untied head counts)
    flops = 6 * n + 12 * 32 * 4096 * 8192
    assert p.model_flops_per_token == pytest.approx(flops)
    assert p.mfu == pytest.approx(p.tokens_per_s_per_gpu * flops / 989.4e12)
    # Counted from the profile's layers (matmuls and attention, as a torch profile counts them):
    # the same 6 N, and the attention term at what causal attention executes (half).
    assert profile_flops_per_token(prof) == pytest.approx(6 * n + 6 * 32 * 4096 * 8192, rel=1e-4)


def test_fused_attention_runs_at_amperes_mma_rate_on_hopper():
    assert mma_rate_flops(gpu_spec("A100-80GB"), "bf16") == pytest.approx(312e12, rel=0.01)
    assert mma_rate_flops(gpu_spec("H100"), "bf16") == pytest.approx(132 * 1.98e9 * 2048)  # 535 TFLOP/s, not 989
    # Ada: the datasheet peak is lower; the L4 (72 W) runs it at its sustained clock, 2005 of 2040 MHz.
    assert mma_rate_flops(gpu_spec("L4"), "bf16") == pytest.approx(121e12 * gpu_spec("L4").sustained_clock_mhz / 2040)


@pytest.mark.slow
def test_predict_json_for_an_llm_without_torch(tmp_path):
    from no_torch import run_without_torch

    out = run_without_torch(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:2", "--precision", "bf16",
                             "--seq-len", "8192", "--batch-size", "1", "--parallelism", "fsdp",
                             "--activation-checkpointing", "selective", "--format", "json"], tmp_path)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert (d["parallelism"], d["activation_checkpointing"]) == ("fsdp", "selective")
    assert d["throughput_tokens_per_s"] > 0 and 0 < d["mfu"] < 1 and d["fits_in_memory"]
    for key in ("forward", "backward", "recompute", "exposed_all_gather", "exposed_reduce_scatter", "optimizer"):
        assert key in d["breakdown"]
    assert sum(v for k, v in d["breakdown"].items() if k != "comm_total") == pytest.approx(d["iteration_time_s"])
    assert d["memory_per_gpu_bytes"] == pytest.approx(sum(d["memory_breakdown_bytes"].values()))


@pytest.mark.parametrize("args, message", [
    (["--parallelism", "zero3"], "unknown parallelism 'zero3'"),
    (["--activation-checkpointing", "some"], "unknown activation checkpointing 'some'"),
    (["--grad-accum", "0"], "grad-accum must be at least 1"),
    (["--precision", "bf8"], "unknown precision"),
])
def test_bad_settings_exit_2(args, message, capsys):
    assert main(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "To fix:" in err


def test_recommend_offers_only_plans_that_fit(capsys):
    assert main(["recommend", "--model", "llama3-70b", "--epochs", "1", "--dataset-size", "244141", "--deadline", "72",
                 "--precision", "bf16", "--seq-len", "4096", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    recs = d["recommendations"]
    assert recs and all(r["fits_in_memory"] for r in recs)
    # a decoder LLM's recommend searches Megatron layouts by default (zero1 = the distributed optimizer)
    assert all(r["parallelism"] in ("ddp", "zero1") and r["layout"]["tp"] * r["layout"]["pp"] * r["layout"]["cp"]
               * r["layout"]["dp"] == r["gpus"] for r in recs)
    assert all(r["usd_per_million_tokens"] > 0 and r["expected_throughput_tokens_per_s"] > 0 for r in recs)

"""Tensor, pipeline and context parallelism (srift/simulate/layouts.py): figures checked by hand."""

from __future__ import annotations

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.job import LayoutRequest, parse_layout
from srift.simulate.breakdown import LAYOUT_PHASES
from srift.simulate.layouts import (
    GRAD_BYTES, Layout, block_parts, bubble_fraction, candidate_layouts,
    cp_ring_exposed_s, cp_ring_step_bytes, PlanSettings, plan_layout, search_layouts, stage_layers,
    StageStates, stage_memory_bytes, tp_block_comm, tp_overlap_share, block_comm, p2p_interference,
)
from srift.perf.comm import CommModel
from srift.simulate.memory import ALLOCATOR_FACTOR, ALLOCATOR_FIXED_BYTES
from srift.zoo import llm_arch
from srift.zoo.llm import params_count


def dgx(gpus: int) -> Cluster:
    return Cluster(f"{gpus} H100", (NodeGroup(count=max(1, gpus // 8), gpus_per_node=min(8, gpus), gpu="H100",
                                              intra_node="nvswitch4", network_gbps=3200.0, network="infiniband"),))


def test_1f1b_bubble_by_hand():
    # 4 stages, 8 micro-batches: 3 idle slots of 11.
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    # Interleaved with 2 virtual stages: 1.5 idle slots of 9.5.
    assert bubble_fraction(4, 8, 2) == pytest.approx(1.5 / 9.5)
    assert bubble_fraction(1, 8) == 0.0


def test_pipeline_bubble_in_a_plan_is_p_minus_1_slots():
    arch = llm_arch("llama3-70b")
    plan = plan_layout(arch, dgx(32), Layout(8, 4, 1, 1, 1, 1, 8), 4096, PlanSettings())
    b = plan.breakdown
    slot = (b["forward"] + b["backward"] + b["exposed_tp"] + b["exposed_cp"]) / 8  # one forward + backward
    assert b["bubble"] == pytest.approx(3 * slot)
    assert b["bubble"] / (b["bubble"] + 8 * slot) == pytest.approx(bubble_fraction(4, 8))
    assert sum(b[k] for k in LAYOUT_PHASES) == pytest.approx(plan.iteration_s)


def test_tp_block_communication_volume_by_hand():
    # Sequence parallelism, 4096 tokens of a 8192-wide model in bf16 over 8 ranks: 10 collectives of
    # 4096 x 8192 x 2 = 67,108,864 bytes (forward 2 all-gathers + 2 reduce-scatters; backward 2
    # gradient all-gathers, 2 input re-gathers, 2 reduce-scatters), each sending 7/8 of it.
    c = tp_block_comm(4096, 8192, 8)
    assert c.size_bytes == 67_108_864
    assert (c.forward, c.backward) == (4, 6)
    assert c.bytes_per_gpu == 10 * 7 / 8 * 67_108_864 == 587_202_560
    assert tp_block_comm(4096, 8192, 1).bytes_per_gpu == 0.0


def test_hidden_tp_communication_costs_the_sms_userbuffers_hold():
    # TE's userbuffers: 4 ring-exchange collectives on 1 SM, 6 pipelined/bulk ones on 16: 10 SMs on
    # average, of the H100's 132.
    assert tp_overlap_share(132) == pytest.approx((4 * 1 + 6 * 16) / 10 / 132)
    # One node at TP 8 (no DP, CP or PP): every hidden second is TP's and costs that share;
    # without userbuffers it costs NCCL's all-reduce interference instead.
    arch, cluster = llm_arch("llama3-8b"), dgx(8)
    lay = Layout(8, 1, 1, 1, 1, 1, 4)
    plan = plan_layout(arch, cluster, lay, 4096, PlanSettings())
    b = plan.breakdown
    hidden = plan.comm_s["tp"] - b["exposed_tp"]
    assert hidden > 0
    assert b["comm_interference"] == pytest.approx(tp_overlap_share(132) * hidden)
    nccl = plan_layout(arch, cluster, lay, 4096, PlanSettings(tp_overlap=False))
    k = CommModel.for_cluster(cluster).params.overlap_interference
    assert nccl.breakdown["comm_interference"] == pytest.approx(k * (nccl.comm_s["tp"] - nccl.breakdown["exposed_tp"]))


def test_a_hidden_pipeline_send_costs_nccls_two_channels():
    # NCCL sends to one peer on 2 channels (2 SMs of the H100's 132). Two stages of Llama 3 8B,
    # interleaved (sends overlapped): every hidden second is a pipeline send's.
    assert p2p_interference("H100") == pytest.approx(2 / 132)
    plan = plan_layout(llm_arch("llama3-8b"), dgx(2), Layout(1, 2, 1, 1, 2, 1, 4, "interleaved"), 4096, PlanSettings())
    hidden = plan.comm_s["pp"] - plan.breakdown["exposed_pp"]
    assert hidden > 0
    assert plan.breakdown["comm_interference"] == pytest.approx(2 / 132 * hidden)


def test_a_ring_step_between_nodes_gets_one_rail():
    # 16 H100 in 2 nodes. TP 2 x CP 8 and TP 8 x CP 2 both put the ring across the nodes; each
    # crossing GPU sends through its own NICs: 1/8 of the node's 3,200 Gb/s, whatever the TP.
    arch, comm = llm_arch("llama3-70b"), CommModel.for_cluster(dgx(16))
    rail = comm.subgroup(2, 1, net_share=1 / 8)
    for t, c in ((2, 8), (8, 2)):
        parts = block_parts(arch, t, c, 1, 8192, "bf16", "H100")
        step = cp_ring_step_bytes(1, 8192, c, parts.kv_width)
        bc = block_comm(arch, comm, t, c, 1, 8192, 2.0, parts)
        assert bc.cp_step_f_s == pytest.approx(rail.broadcast_time_s(step))
        assert bc.cp_step_f_s > comm.subgroup(2, 1, net_share=1 / t).broadcast_time_s(step) or t == 8


def test_cp_ring_step_by_hand():
    # Llama 3 70B at TP 4: 8 / 4 = 2 key/value heads of 128 per rank; CP 2 over 8192 tokens: each
    # step sends K and V of 4096 tokens: 2 x 4096 x 256 x 2 bytes.
    parts = block_parts(llm_arch("llama3-70b"), 4, 2, 1, 8192, "bf16", "H100")
    assert parts.kv_width == 256
    assert cp_ring_step_bytes(1, 8192, 2, parts.kv_width) == 2 * 4096 * 256 * 2 == 4_194_304
    # 4 ranks, 1 ms per step, 1.2 ms of attention: 3 steps, each beside 0.3 ms of attention.
    assert cp_ring_exposed_s(1e-3, 1.2e-3, 4) == pytest.approx(3 * 0.7e-3)
    assert cp_ring_exposed_s(1e-4, 1.2e-3, 4) == 0.0  # hidden behind the attention


def test_stage_layers_put_the_embedding_and_head_in_a_layers_place():
    assert stage_layers(126, 8) == (15, 16, 16, 16, 16, 16, 16, 15)  # Megatron's 405B split
    assert sum(stage_layers(80, 4)) == 80 and max(stage_layers(80, 4)) == 21
    assert stage_layers(32, 1) == (32,)


def test_megatron_splits_evenly_where_it_cannot_count_the_embedding_and_loss():
    # Megatron-Core accepts account_for_embedding/loss_in_pipeline_split only when blocks + 2
    # divide by PP: 126 + 2 = 128 over 8 stages does, so Llama 3.1 405B keeps 15, 16 x 6, 15.
    assert stage_layers(126, 8, megatron=True) == (15, 16, 16, 16, 16, 16, 16, 15)
    # GPT-OSS-120B (36 blocks, PP 4: 38 does not divide by 4): 9 on each stage, as
    # Megatron-Bridge's recipe runs it (account_for_*_in_pipeline_split = False); Llama 3 70B's
    # 80 over 4: 20 each; GPT-3 175B's 96 over 8: 12 each.
    assert stage_layers(36, 4, megatron=True) == (9, 9, 9, 9)
    assert stage_layers(80, 4, megatron=True) == (20, 20, 20, 20)
    assert stage_layers(96, 8, megatron=True) == (12,) * 8
    # Neither divides (35 over 4): Megatron needs explicit first/last-stage counts; srift keeps
    # its balanced split.
    assert stage_layers(35, 4, megatron=True) == stage_layers(35, 4)
    # torchtitan weighs the embedding and the output as a layer each whatever the remainder.
    assert stage_layers(36, 4) == (8, 10, 9, 9)


def test_megatron_pipeline_layouts_place_blocks_by_hand():
    from srift.simulate.layouts import megatron_stage_blocks
    # DeepSeek-V3's recipes: 16 virtual stages, embedding + 4 blocks, 14 x 4 blocks, 1 block + MTP + loss
    assert megatron_stage_blocks("Et*4|(t*4|)*14tmL", 16) == (4,) * 15 + (2,)
    # interleaved: rank r runs virtual stages r, r + pp, ...: pp 4 x vp 4 -> 16 + 16 + 16 + (12 + 2)
    assert megatron_stage_blocks("Et*4|(t*4|)*14tmL", 4, 4) == (16, 16, 16, 14)
    assert megatron_stage_blocks("Et*4|(t*4|)*14tmL", 2, 8) == (32, 30)
    assert megatron_stage_blocks("Et|(tt|)*30mL", 16, 2) == (3,) + (4,) * 14 + (3,)
    with pytest.raises(ValueError):
        megatron_stage_blocks("Et*4|(t*4|)*14tmL", 4, 2)  # 16 virtual stages, not 8
    with pytest.raises(ValueError):
        megatron_stage_blocks("Ex|t", 2)


def test_stage_memory_by_hand():
    mem = stage_memory_bytes(StageStates(1e9, 8), 2e9, 4, 1e9)
    assert mem["weights"] == 2e9  # bf16
    assert mem["gradients"] == GRAD_BYTES * 1e9
    assert mem["optimizer_state"] == 12e9 / 8  # fp32 master + 2 Adam moments over CP x DP
    assert mem["activations"] == 4 * 2e9 + 1e9
    # The caching allocator as everywhere in srift: reserved = factor x allocated + fixed.
    allocated = 2e9 + GRAD_BYTES * 1e9 + 12e9 / 8 + 9e9
    assert mem["allocator"] == pytest.approx((ALLOCATOR_FACTOR - 1.0) * allocated + ALLOCATOR_FIXED_BYTES)
    assert sum(mem.values()) == pytest.approx(ALLOCATOR_FACTOR * allocated + ALLOCATOR_FIXED_BYTES)
    assert stage_memory_bytes(StageStates(1e9, 8), 0.0, 1, dp_flavour="ddp")["optimizer_state"] == 12e9


def test_a_tp_rank_holds_its_share_of_a_block():
    # Llama 3 70B at TP 4: q 8192 x 2048, k and v 8192 x 256, o 2048 x 8192, three MLP matrices
    # 8192 x 7168, two replicated RMSNorm weights.
    parts = block_parts(llm_arch("llama3-70b"), 4, 1, 1, 4096, "bf16", "H100")
    assert parts.local_block_params == 8192 * (2048 + 512) + 2048 * 8192 + 3 * 8192 * 7168 + 2 * 8192 == 213_925_888


def _megatron_interleaved_makespan(p: int, v: int, m: int, f: float, b: float) -> float:
    """Megatron-Core's interleaved 1F1B (``forward_backward_pipelining_with_interleaving``, groups
    of ``p`` micro-batches per model chunk) run event by event: rank ``r`` warms up with
    ``2 (p - r - 1) + (v - 1) p`` forwards, then alternates one forward and one backward; a chunk
    waits for the previous virtual stage's forward (the next one's backward) of its micro-batch."""
    n = m * v

    def chunk(k: int, forward: bool) -> int:
        c = k % (p * v) // p
        return c if forward else v - 1 - c

    order = []
    for r in range(p):
        w = min(n, 2 * (p - r - 1) + (v - 1) * p) if v > 1 else min(n, p - r - 1)
        order.append([("F", k) for k in range(w)] + [x for j in range(n - w) for x in (("F", w + j), ("B", j))]
                     + [("B", j) for j in range(n - w, n)])
    done: dict[tuple[str, int, int, int], float] = {}
    pos, clock = [0] * p, [0.0] * p
    while any(pos[r] < len(order[r]) for r in range(p)):
        for r in range(p):
            while pos[r] < len(order[r]):
                kind, k = order[r][pos[r]]
                c, mb = chunk(k, kind == "F"), k // (p * v) * p + k % p
                s = r + c * p  # virtual stage
                if kind == "F":
                    deps = [("F", (s - 1) % p, (s - 1) // p, mb)] if s > 0 else []
                else:
                    deps = [("F", r, c, mb)] + ([("B", (s + 1) % p, (s + 1) // p, mb)] if s < p * v - 1 else [])
                if any(d not in done for d in deps):
                    break
                clock[r] = max([clock[r]] + [done[d] for d in deps]) + (f if kind == "F" else b)
                done[(kind, r, c, mb)] = clock[r]
                pos[r] += 1
    return max(clock)


@pytest.mark.parametrize("p,v,m", [(4, 1, 8), (4, 2, 8), (8, 2, 32), (2, 24, 32), (2, 12, 128)])
def test_the_bubble_is_megatrons_interleaved_schedule(p, v, m):
    # Chunks of 1 s forward and 2 s backward: the makespan over the busy time is 1 / (1 - bubble).
    busy = m * v * 3.0
    assert _megatron_interleaved_makespan(p, v, m, 1.0, 2.0) == pytest.approx(busy / (1.0 - bubble_fraction(p, m, v)))


def test_first_stage_holds_p_micro_batches():
    arch = llm_arch("llama3-70b")
    plan = plan_layout(arch, dgx(32), Layout(8, 4, 1, 1, 1, 1, 16), 4096, PlanSettings())
    parts = block_parts(arch, 8, 1, 1, 4096, "bf16", "H100")
    # 80 blocks over 4 stages: 20 each (82 does not divide by 4, so Megatron-Core cannot count the
    # embedding and the loss as blocks: stage_layers(megatron=True)).
    first = 20 * parts.block_act_bytes + parts.first_act_bytes
    assert plan.memory_stage == 0
    assert plan.memory_breakdown_bytes["activations"] == pytest.approx(4 * first)


def test_gpt_oss_first_stage_holds_a_quarter_of_the_blocks_for_each_micro_batch_in_flight():
    # GPT-OSS-120B (36 blocks) on Megatron at PP 4, 8 micro-batches of 4 x 4096 tokens, EP 8: 9
    # blocks a stage (not 8, 10, 9, 9); the first holds 4 micro-batches of its 9 blocks and the
    # embedding's output, more than the second's 3 of 9.
    arch = llm_arch("gpt-oss-120b")
    plan = plan_layout(arch, dgx(64), Layout(1, 4, 1, 16, 1, 4, 8, "1f1b", 8), 4096, PlanSettings())
    parts = block_parts(arch, 1, 1, 4, 4096, "bf16", "H100", ep=8)
    assert plan.memory_stage == 0
    assert plan.memory_breakdown_bytes["activations"] == pytest.approx(4 * (9 * parts.block_act_bytes + parts.first_act_bytes))


def test_plan_checks_the_layout():
    arch = llm_arch("llama3-70b")
    with pytest.raises(SriftError, match="uses 64 GPUs"):
        plan_layout(arch, dgx(32), Layout(8, 8, 1, 1), 4096, PlanSettings())
    # TP across nodes runs in whole nodes (tests/test_stack_hardware.py); 12 of 8-GPU nodes does not.
    with pytest.raises(SriftError, match="spans nodes of 8 GPUs unevenly"):
        plan_layout(arch, dgx(24), Layout(12, 2, 1, 1), 4096, PlanSettings())
    with pytest.raises(SriftError, match="does not divide the 64 attention heads"):
        plan_layout(arch, dgx(24), Layout(3, 8, 1, 1), 4096, PlanSettings())


def test_parse_layout():
    assert parse_layout("tp=8,pp=4") == LayoutRequest(8, 4, 1, 1)
    assert parse_layout("auto").auto
    for bad in ("tp=8;pp=4", "tp=0", "dp=4", "tp=8,tp=4", "tp=x"):
        with pytest.raises(SriftError):
            parse_layout(bad)


def test_candidates_divide_the_model_and_the_cluster():
    arch = llm_arch("llama3.1-405b")
    cands = candidate_layouts(arch, 1024, 8, 8192, 512)
    assert cands
    for lay in cands:
        assert lay.gpus == 1024 and lay.tp <= 8 and arch.heads % lay.tp == 0 and lay.pp <= arch.n_layers
        assert lay.global_batch == 512
    fixed = candidate_layouts(arch, 1024, 8, 8192, 512, LayoutRequest(8, 8, 2))
    assert {(l.tp, l.pp, l.cp, l.dp) for l in fixed} == {(8, 8, 2, 8)}


def test_search_finds_a_layout_that_fits_and_beats_the_others():
    arch = llm_arch("llama3-70b")
    found = search_layouts(arch, dgx(64), 4096, 128)
    assert found.best is not None and found.best.fits
    assert found.simulated <= found.candidates - found.rejected_memory
    # No fitting candidate is faster than the one chosen.
    for lay in candidate_layouts(arch, 64, 8, 4096, 128)[:40]:
        plan = plan_layout(arch, dgx(64), lay, 4096, PlanSettings())
        if plan.fits:
            assert plan.iteration_s >= found.best.iteration_s - 1e-9


def test_search_says_when_nothing_fits():
    arch = llm_arch("llama3.1-405b")  # 405B on 8 GPUs: 810 GB of bf16 weights alone
    found = search_layouts(arch, dgx(8), 4096, 8)
    assert found.best is None and found.smallest is not None and not found.smallest.fits


def test_relu2_mlp_counts():
    # Nemotron-4 15B: q/o 6144^2, k/v 6144 x 1024, up and down 6144 x 24576 (squared ReLU: no gate),
    # two LayerNorms with weight and bias; untied 256000-row embedding and head; final norm.
    block = 2 * 6144 * 6144 + 2 * 6144 * 1024 + 2 * 6144 * 24576 + 4 * 6144
    assert params_count(llm_arch("nemotron-4-15b")) == 2 * 256000 * 6144 + 32 * block + 2 * 6144


def test_subgroups_match_the_node_and_replica_groups():
    from srift.perf.comm import CommModel
    comm = CommModel.for_cluster(dgx(64))
    size = 256e6
    assert comm.subgroup(8, 8).all_gather_time_s(size) == pytest.approx(comm.within_node().all_gather_time_s(size))
    assert comm.subgroup(8, 1).allreduce_time_s(size) == pytest.approx(comm.across_nodes().allreduce_time_s(size))
    with pytest.raises(ValueError):
        comm.subgroup(6, 4)


def test_the_searchs_memory_check_is_the_plans():
    from srift.simulate.layouts import _peak_memory, _stage_memories
    arch = llm_arch("llama3-70b")
    for lay in candidate_layouts(arch, 64, 8, 4096, 128)[::37]:
        parts = block_parts(arch, lay.tp, lay.cp, lay.micro_batch, 4096, "bf16", "H100")
        for ckpt in ("none", "full"):
            every = max(sum(m.values()) for m in _stage_memories(arch, lay, parts, ckpt, "zero1"))
            assert _peak_memory(arch, lay, parts, ckpt, "zero1") == pytest.approx(every)


# ---- the command line ---------------------------------------------------------------------------
def test_predict_a_layout_as_json(srift_cli):
    import json
    code, out = srift_cli(["predict", "--model", "llama3-70b", "--instance", "p5.48xlarge:4", "--layout", "tp=8,pp=4",
                      "--micro-batch-size", "1", "--global-batch-size", "128", "--seq-len", "4096", "--precision", "bf16",
                      "--format", "json"])
    assert code == 0, out
    d = json.loads(out)
    assert d["layout"] == {"tp": 8, "pp": 4, "cp": 1, "dp": 1, "vp": 1, "micro_batch": 1, "grad_accum": 128,
                           "schedule": "1f1b", "ep": 1}
    assert set(LAYOUT_PHASES) <= set(d["breakdown"])
    assert sum(d["breakdown"][k] for k in LAYOUT_PHASES) == pytest.approx(d["iteration_time_s"])
    # 1F1B over 4 stages and 128 micro-batches: 3 idle slots of 131.
    slot = sum(d["breakdown"][k] for k in ("forward", "backward", "exposed_tp", "exposed_cp")) / 128
    assert d["breakdown"]["bubble"] == pytest.approx(3 * slot)
    assert d["memory_stage"] == 0 and d["memory_per_gpu_bytes"] < 80 * 2**30
    assert d["throughput_tokens_per_s"] == pytest.approx(128 * 4096 / d["iteration_time_s"])


def test_a_layout_that_does_not_fit_names_one_that_does(srift_cli):
    code, out = srift_cli(["predict", "--model", "llama3-70b", "--instance", "p5.48xlarge:4", "--layout", "tp=2,pp=1",
                      "--global-batch-size", "128", "--seq-len", "4096", "--precision", "bf16"])
    assert code == 2
    assert "does not fit in GPU memory" in out and "To fix: --layout tp=" in out and "fits" in out


def test_layout_flags_need_a_layout_and_a_decoder_llm(srift_cli):
    code, out = srift_cli(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:1", "--pipeline-schedule", "1f1b"])
    assert code == 2 and "--pipeline-schedule needs a --layout" in out
    # Without a layout, --micro-batch-size is data parallelism's micro-batch (fine-tuning, #32):
    # 16 / (2 x 8 GPUs) = 1 micro-batch per step.
    code, out = srift_cli(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:1", "--micro-batch-size", "2",
                      "--global-batch-size", "16", "--precision", "bf16"])
    assert code == 0, out
    code, out = srift_cli(["predict", "--model", "resnet50", "--instance", "p5.48xlarge:1", "--layout", "tp=2"])
    assert code == 2 and "decoder LLM" in out
    code, out = srift_cli(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:1", "--layout", "tp=3"])
    assert code == 2 and "needs a multiple of 3 GPUs" in out
    code, out = srift_cli(["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:1", "--layout", "tp=2",
                      "--batch-size", "4"])
    assert code == 2 and "takes --micro-batch-size" in out


@pytest.mark.slow
def test_recommend_searches_layouts_and_offers_only_plans_that_fit(srift_cli):
    import json
    code, out = srift_cli(["recommend", "--model", "llama3-70b", "--layout", "auto", "--global-batch-size", "128", "--seq-len",
                      "4096", "--precision", "bf16", "--budget", "1000", "--infra", "aws/us-east-1", "--max-gpus", "32",
                      "--format", "json", "--quiet"])  # --quiet: no progress lines among the JSON (stderr is merged)
    assert code == 0, out
    recs = json.loads(out)["recommendations"]
    assert recs
    for r in recs:
        lay = r["layout"]
        assert lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"] == r["gpus"]
        assert r["fits_in_memory"] and r["global_batch_size"] == 128


def test_gpu_range_from_the_deadline_by_hand():
    from srift.search.gpu_range import gpus_floor, layout_gpu_range
    # 1e9 parameters, 6e9 FLOPs a token, 3.6e9 tokens in 1 h: 6e15 FLOP/s. Fastest GPU 1e15 at its
    # peak: 6 GPUs; slowest 2e14 at 25 % MFU: 120, so up to 128. States 16 GB fit one 80 GB GPU.
    r = layout_gpu_range(1e9, 6e9, [1e15, 2e14], [80e9, 40e9], tokens=3.6e9, deadline_hours=1.0)
    assert (r.min_gpus, r.max_gpus) == (6, 128)
    # Without a deadline: twice the states (32 GB) over the 40 GB GPU: 1, and at least 64.
    assert layout_gpu_range(1e9, 6e9, [1e15], [40e9]).max_gpus == 64
    # The memory floor: 1e11 parameters x 16 bytes over 80 GB: 20 GPUs.
    assert gpus_floor(1e11, 1e15, 80e9, None) == 20


@pytest.mark.slow
def test_recommend_lays_out_a_decoder_llm_by_default_and_keeps_other_models_data_parallel(srift_cli):
    import json
    code, out = srift_cli(["recommend", "--model", "llama3-8b", "--tokens", "1e10", "--deadline", "24", "--infra", "aws/us-east-1",
                      "--format", "json", "--quiet"])
    assert code == 0, out
    doc = json.loads(out)
    assert doc["gpu_range"]["max_gpus"] >= 64
    # The deadline's rate: 1e10 tokens (of the zoo's sequence length) x FLOPs per token over 24 h.
    from srift.zoo.llm import model_flops_per_token
    seq = doc["job"]["seq_len"]
    need = 1e10 * model_flops_per_token(llm_arch("llama3-8b"), seq) / (24 * 3600)
    assert f"needs {need / 1e15:,.3g} PFLOP/s" in doc["gpu_range"]["basis"]
    for r in doc["recommendations"]:
        lay = r["layout"]
        assert lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"] == r["gpus"]
        assert r["fits_in_memory"]
        # 4,194,304 tokens a step (Llama 2's) at the zoo's sequence length
        assert r["global_batch_size"] * doc["job"]["seq_len"] == 4_194_304
    code, out = srift_cli(["recommend", "--model", "resnet50", "--budget", "20", "--infra", "aws/us-east-1", "--format", "json",
                           "--quiet"])
    assert code == 0, out
    doc = json.loads(out)
    assert doc["gpu_range"] is None and all(r.get("layout") is None for r in doc["recommendations"])


def test_has_layout_by_hand():
    from srift.simulate.layouts import has_layout
    arch = llm_arch("llama3.1-405b")  # 126 layers, 128 heads, 8 key/value heads
    # 1,016 = 8 x 127 GPUs: every split leaves 127 (prime, more than the 126 layers) to PP or DP,
    # and DP 127 does not divide a global batch of 512.
    assert not has_layout(arch, 1016, 8, 8192, 512)
    assert has_layout(arch, 1016, 8, 8192, 127 * 4)  # DP 127 divides 508
    assert has_layout(arch, 1024, 8, 8192, 512)


@pytest.mark.slow
def test_the_issues_recommend_answers_with_layouts_that_fit(srift_cli):
    import json
    code, out = srift_cli(["recommend", "--model", "llama3.1-405b", "--tokens", "1e11", "--deadline", "240", "--precision", "bf16",
                      "--seq-len", "8192", "--format", "json", "--quiet"])
    assert code == 0, out
    doc = json.loads(out)
    assert doc["recommendations"]
    for r in doc["recommendations"]:
        lay = r["layout"]
        assert lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"] == r["gpus"] <= doc["gpu_range"]["max_gpus"]
        assert r["memory_fit"] == "fits" and r["global_batch_size"] == 512  # 4,194,304 tokens / 8,192


def test_a_long_context_rows_model_tflops_become_a_step_time_by_hand():
    """NeMo's Llama 2 7B at 1M tokens (CP 32 on 1024 H100, 536 model TFLOP/s per GPU): Megatron's /
    NeMo's model FLOPs B s L h^2 (12 + 12 g/n + 18 f/h + 12 s/h + 6 V/(L h)), causal attention
    counted full: 4 x 2^20 x 32 x 4096^2 x (12 + 12 + 48.375 + 3072 + 1.46484375) = 7.0838e18 FLOPs,
    / (536e12 x 1024) = 12.906 s."""
    from pathlib import Path

    from srift.fitting import layouts as lf

    rows, out = lf.long_context_rows(Path(__file__).resolve().parents[1] / "data")
    assert len(rows) == 9 and out == {"GPU B200 not in the row map": 8}
    r = rows[rows["seq_len"] == 1048576].iloc[0]
    flops = 4 * 2**20 * 32 * 4096**2 * (12 + 12 + 48.375 + 3072 + 1.46484375)
    assert r["value"] == pytest.approx(flops / (536e12 * 1024), rel=1e-9)
    assert r["value"] == pytest.approx(12.906, abs=1e-3)
    assert (r["cp"], r["tp"], r["dp"], r["micro_batch"], r["fp8"]) == (32, 8, 4, 1, "tensorwise")

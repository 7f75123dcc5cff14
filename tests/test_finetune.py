"""Fine-tuning (srift/simulate/finetune.py): LoRA's trainable parameters and FLOPs, QLoRA's memory,
on a tiny decoder checked by hand."""

from __future__ import annotations

import pytest

from srift.errors import SriftError
from srift.job import Job
from srift.simulate.finetune import (
    NF4_BYTES_PER_PARAM, allocated_bytes, finetune_memory_bytes, finetune_profile, trainable_params,
)
from srift.simulate.memory import activation_bytes, allocator_bytes
from srift.simulate.sharded import gated_product_bytes
from srift.zoo.llm import DecoderArch, decoder_profile, params_count

# hidden 64, 4 heads of 16, 2 kv heads (kv width 32), MLP 128 (SwiGLU), vocab 100, untied head.
TINY = DecoderArch(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100)
B, S = 2, 8  # 16 tokens


def tiny(**job) -> tuple:
    profile = decoder_profile(TINY, batch_size=B, seq_len=S, precision="bf16")
    return profile, finetune_profile(profile, Job(precision="bf16", **job))


def test_lora_trainable_params_by_hand():
    # r (d_in + d_out) per adapted Linear, rank 4: q 4(64+64)=512, k 4(64+32)=384, v 384, o 512,
    # gate 4(64+128)=768, up 768, down 4(128+64)=768 -> 4096 per block, 2 blocks.
    profile = decoder_profile(TINY, batch_size=B, seq_len=S, precision="bf16")
    assert trainable_params(profile, Job(finetune="lora", lora_rank=4)) == 8192
    assert trainable_params(profile, Job(finetune="lora", lora_rank=4, lora_targets="attention")) == 2 * (512 + 384 + 384 + 512)
    assert trainable_params(profile, Job(finetune="full")) == params_count(TINY) == 86848


def test_lora_flops_by_hand():
    full, (lora, _) = tiny(finetune="lora", lora_rank=4)
    # Base Linears, forward: 2 t (q 64x64 + k 64x32 + v 64x32 + o 64x64 + 3 x 64x128) per block,
    # t = 16: 2 x 16 x 36864 = 1,179,648 per block; head 2 x 16 x 64 x 100 = 204,800.
    linears = 2 * 1_179_648 + 204_800
    # Causal attention forward 0.5 x 4 b s^2 (q width) = 16,384 per block; backward 2.5x.
    attention = 2 * 16_384
    assert full.fwd_flops == linears + attention
    assert full.bwd_flops == 2 * linears + 2.5 * attention
    adapters_fwd = 2 * 16 * 8192  # 2 t x (adapter parameters)
    assert lora.fwd_flops == full.fwd_flops + adapters_fwd
    # Frozen Linears: the input-gradient GEMM only (one, not two); adapters: two.
    assert lora.bwd_flops == linears + 2.5 * attention + 2 * adapters_fwd
    names = [layer.name for layer in lora.layers]
    assert "model.layers.0.self_attn.q_proj.lora_A" in names and "model.layers.1.mlp.down_proj.lora_B" in names
    embed = lora.layers[0]
    assert embed.name == "model.embed_tokens" and embed.bwd_flops == 0 and embed.bwd_bytes == 0 and embed.params == 0


def test_qlora_memory_by_hand():
    _, (q, frozen) = tiny(finetune="qlora", lora_rank=4)
    # Block Linears in NF4: 2 x (attention 12,288 + MLP 24,576) = 73,728 weights at 0.5 + 1/64
    # + 4/(64 x 256) bytes = 36,864 + 1,152 + 18 = 38,034 bytes; the rest (embedding 6,400,
    # norms 4 x 64, final norm 64, head 6,400 = 13,120) in bf16.
    assert frozen.quantized_params == 73_728 and frozen.frozen_params == 86_848
    assert 73_728 * NF4_BYTES_PER_PARAM == 38_034
    m = finetune_memory_bytes(q, frozen, "bf16", "ddp", "none", shard_gpus=1)
    assert m["weights"] == 38_034 + 13_120 * 2 + 8192 * 2  # + the rank-4 adapters in bf16
    assert m["gradients"] == 8192 * 2  # one GPU: no DDP bucket copy
    assert m["optimizer_state"] == 8192 * 4  # AdamW: two bf16 moments
    assert m["dequantized_weight"] == 64 * 128 * 2  # the largest Linear, dequantized while it computes
    assert m["activations"] == activation_bytes(q, "bf16", "none")
    assert m["allocator"] == pytest.approx(allocator_bytes(allocated_bytes(m)))  # the allocator model's reserve
    assert allocated_bytes(m) == pytest.approx(sum(m.values()) - m["allocator"])
    # bitsandbytes' 8-bit AdamW: two 1-byte moments + an fp32 scale per 2048.
    _, (q8, frozen8) = tiny(finetune="qlora", lora_rank=4, optimizer="adamw8bit")
    assert finetune_memory_bytes(q8, frozen8, "bf16", "ddp", "none", 1)["optimizer_state"] == 8192 * 2 * (1 + 4 / 2048)


def test_qlora_dequantizes_in_forward_and_backward():
    _, (q, _) = tiny(finetune="qlora", lora_rank=4)
    deq = [layer for layer in q.layers if layer.type == "Dequantize"]
    assert len(deq) == 14  # 7 Linears per block
    gate = next(layer for layer in deq if layer.name == "model.layers.0.mlp.gate_proj.dequantize")
    assert gate.fwd_bytes == gate.bwd_bytes == 64 * 128 * (NF4_BYTES_PER_PARAM + 2)


def test_qlora_keeps_the_gated_mlp_product_as_lora_does():
    # The dequantize leaves keep nothing: QLoRA's activations are LoRA's, the SwiGLU product
    # act(gate) * up included (2 blocks x 16 tokens x 128 x 2 bytes = 8,192 bytes).
    _, (lo, _) = tiny(finetune="lora", lora_rank=4)
    _, (q, _) = tiny(finetune="qlora", lora_rank=4)
    assert gated_product_bytes(q).sum() == gated_product_bytes(lo).sum() == 2 * 16 * 128 * 2
    assert activation_bytes(q, "bf16", "none") == activation_bytes(lo, "bf16", "none")


def test_qlora_keeps_the_inputs_bitsandbytes_holds_by_hand():
    # qv adapters: q's lora_A keeps the attention input (q, k, v read it); bitsandbytes keeps the
    # other quantized Linears' inputs for backward: o's (16 tokens x 64 x 2 bytes = 2,048), the MLP
    # input gate and up read (2,048) and the product down reads (16 x 128 x 2 = 4,096) per block.
    _, (lo, _) = tiny(finetune="lora", lora_rank=4, lora_targets="qv")
    _, (q, _) = tiny(finetune="qlora", lora_rank=4, lora_targets="qv")
    kept = {layer.name: layer.activation_bytes for layer in q.layers if layer.type == "Dequantize" and layer.activation_bytes}
    assert kept == {f"model.layers.{i}.{n}.dequantize": b for i in (0, 1)
                    for n, b in (("self_attn.o_proj", 2048), ("mlp.gate_proj", 2048), ("mlp.down_proj", 4096))}
    assert activation_bytes(q, "bf16", "none") == activation_bytes(lo, "bf16", "none") + 2 * 8192


def test_qlora_without_double_quant_and_with_the_head_quantized_by_hand():
    # LitGPT's bnb.nf4 (Lightning): an fp32 absmax per 64 weights, 0.5 + 4/64 = 0.5625 bytes, and
    # every Linear in NF4, the 100 x 64 head too: 73,728 + 6,400 = 80,128 weights, 45,072 bytes;
    # the embedding and norms (6,400 + 320) stay in bf16.
    _, (q, frozen) = tiny(finetune="qlora", lora_rank=4, nf4_double_quant=False, quantize_head=True)
    assert frozen.quantized_params == 80_128 and frozen.largest_quantized == 64 * 128
    m = finetune_memory_bytes(q, frozen, "bf16", "ddp", "none", shard_gpus=1)
    assert m["weights"] == 80_128 * 0.5625 + 6_720 * 2 + 8192 * 2
    head = [layer for layer in q.layers if layer.name.startswith("lm_head")]
    assert [layer.type for layer in head] == ["Dequantize", "Linear"]  # the loss reads the last layer as the head
    assert head[0].fwd_bytes == 6_400 * (0.5625 + 2)


def test_full_finetune_keeps_every_weight_and_the_profile_compute():
    full, (f, frozen) = tiny(finetune="full")
    assert f.layers == full.layers and frozen.frozen_params == 0
    m = finetune_memory_bytes(f, frozen, "bf16", "ddp", "none", shard_gpus=1, gpus=2)
    assert m["weights"] == 86_848 * 2 and m["gradients"] == 2 * 86_848 * 2 and m["optimizer_state"] == 86_848 * 4


def test_finetune_options_are_checked():
    with pytest.raises(SriftError, match="fine-tuning mode"):
        Job(finetune="prefix")
    with pytest.raises(SriftError, match="--lora-rank"):
        Job(finetune="lora", lora_rank=0)
    with pytest.raises(SriftError, match="LoRA target"):
        Job(finetune="lora", lora_targets="mlp")
    with pytest.raises(SriftError, match="K-FAC"):
        Job(finetune="lora", optimizer="kfac")


def test_qv_targets_adapt_the_query_and_value_projections():
    profile = decoder_profile(TINY, batch_size=B, seq_len=S, precision="bf16")
    q, _ = finetune_profile(profile, Job(finetune="lora", lora_rank=4, lora_targets="qv"))
    adapted = sorted({layer.name.rsplit(".", 1)[0] for layer in q.layers if ".lora_" in layer.name})
    assert adapted == [f"model.layers.{i}.self_attn.{p}" for i in (0, 1) for p in ("q_proj", "v_proj")]
    assert q.params == 2 * (512 + 384)  # q 4(64+64), v 4(64+32) per block


def test_the_finetuning_measurements_become_jobs():
    """data/finetuning: every run is either a job srift predicts or left out with its reason."""
    from pathlib import Path

    from srift.fitting import finetune as F

    rows, out = F.load_rows(Path(__file__).resolve().parents[1] / "data")
    assert len(rows) + len(out) == 65 and len(rows) == 39
    assert rows.groupby("metric").size().to_dict() == {"peak_memory_gb": 16, "tokens_per_s_per_gpu": 23}
    # Steady-state step times (NeMo) apart from whole-run means with warm-up (HF Trainer).
    assert rows.groupby("steady").size().to_dict() == {False: 16 + 13, True: 10}
    litgpt = rows[rows["source"] == "litgpt-finetune-a10g"]
    adapted = litgpt[litgpt["finetune"] != "full"]
    assert set(adapted["lora_targets"]) == {"qv"} and set(adapted["lora_rank"]) == {32}
    assert set(litgpt["tied_head"]) == {False}  # LitGPT's GPT ties no weights
    # LitGPT's full fine-tunes: FSDP over 4 A10G, each Block checkpointed; global batch 64 of micro 4.
    full = litgpt[litgpt["finetune"] == "full"]
    assert set(full["gpus"]) == {4} and set(full["parallelism"]) == {"fsdp"} and set(full["checkpointing"]) == {"full"}
    assert set(full["grad_accum"]) == {64 // (4 * 4)}
    # NeMo Llama 3 8B SFT on 8 H100: global batch 32 of 4,096 tokens in 1.32 s.
    nemo = rows[rows["label"] == "Llama-3-8B sft 8xH100-SXM5-80GB"].iloc[0]
    assert nemo["measured"] == pytest.approx(32 * 4096 / 1.32 / 8) and nemo["grad_accum"] == 4
    assert (nemo["layout"], nemo["parallelism"]) == ("tp=1,pp=1,cp=1", "zero1")
    # NeMo 70B LoRA: TP2 PP4 VP20 over 16 GPUs is DP2; global 64 of micro 1 -> 32 micro-batches; the
    # recipe's LoRA (rank 16 on linear_qkv) with DDP for the adapters.
    lora = rows[rows["label"] == "Llama-3-70B lora 16xH100-SXM5-80GB"].iloc[0]
    assert (lora["layout"], lora["vp"], lora["grad_accum"], lora["parallelism"]) == ("tp=2,pp=4,cp=1", 20, 32, "ddp")
    assert (lora["lora_rank"], lora["lora_targets"]) == (16, "qkv")


def test_llama3_8b_lora_trainable_params_are_pefts():
    # PEFT prints "trainable params: 41,943,040" for Llama 3 8B at r=16 on every Linear of the
    # blocks: per block 16 x (q 8192 + k 5120 + v 5120 + o 8192 + gate, up, down 3 x 18432) = 1,310,720.
    from srift.zoo import llm_arch

    profile = decoder_profile(llm_arch("llama3-8b"), batch_size=1, seq_len=16, precision="bf16")
    assert trainable_params(profile, Job(finetune="lora")) == 32 * 1_310_720 == 41_943_040


@pytest.mark.slow
def test_predict_qlora_on_one_a10g_and_full_names_what_fits(capsys):
    import json

    from srift.cli import main

    args = ["predict", "--model", "llama3-8b", "--instance", "g5.xlarge", "--seq-len", "2048", "--micro-batch-size", "2",
            "--global-batch-size", "16", "--format", "json"]
    assert main([*args, "--finetune", "qlora"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits_in_memory"] and data["precision"] == "bf16" and data["optimizer"] == "adamw"
    assert (data["micro_batch_size"], data["grad_accum"]) == (2, 8)  # 16 / (2 x 1 GPU)
    assert data["throughput_tokens_per_s"] == pytest.approx(16 * 2048 / data["iteration_time_s"])
    mem = data["memory_breakdown_bytes"]
    assert sum(mem.values()) == pytest.approx(data["memory_per_gpu_bytes"])
    assert data["memory_per_gpu_bytes"] <= 24 * 2**30 * 0.95
    assert mem["optimizer_state"] == 41_943_040 * 4  # AdamW's two bf16 moments of the adapters
    assert "qlora fine-tuning: 41.9M trainable parameters" in data["notes"][0]
    assert main([*args, "--finetune", "full"]) == 2
    err = capsys.readouterr().err
    assert "does not fit in GPU memory on g5.xlarge" in err and "To fix: --finetune qlora fits" in err


def test_job_file_takes_the_finetuning_keys(tmp_path):
    import yaml

    from srift.jobfile import load_jobfile

    path = tmp_path / "srift.yaml"
    path.write_text(yaml.safe_dump({"model": "llama3-8b", "finetune": "lora", "lora_rank": 8, "lora_targets": "qv",
                                    "optimizer": "paged-adamw8bit", "tokens": 1000000, "limits": {"max_hours": 4}}))
    job = load_jobfile(str(path), {}).job
    assert (job.finetune, job.lora_rank, job.lora_targets, job.optimizer, job.precision) == ("lora", 8, "qv", "paged-adamw8bit", "bf16")
    path.write_text(yaml.safe_dump({"model": "llama3-8b", "finetune": "prefix", "tokens": 1000000, "limits": {"max_hours": 4}}))
    with pytest.raises(SriftError, match="fine-tuning mode"):
        load_jobfile(str(path), {})


def test_a_profile_of_a_lora_script_counts_its_frozen_weights(tmp_path):
    """`srift profile` records the bytes of parameters with requires_grad=False per layer; the
    predictor holds them as frozen weights (no gradients, no optimizer state), without --finetune."""
    from srift.cluster import Cluster, NodeGroup
    from srift.profile import LayerProfile, OptimizerInfo, Profile
    from srift.simulate import Predictor

    frozen = 4096 * 4096 * 2  # a bf16 4096 x 4096 base weight
    layers = [LayerProfile("block.0.base", "Linear", fwd_flops=1e9, bwd_flops=1e9, fwd_bytes=frozen, bwd_bytes=2 * frozen,
                           activation_bytes=1e6, unit="block.0", frozen_bytes=frozen),
              LayerProfile("block.0.base.lora_A", "Linear", params=4096 * 16, grad_bytes=4096 * 16 * 2, fwd_flops=1e6,
                           bwd_flops=2e6, fwd_bytes=1e6, bwd_bytes=2e6, activation_bytes=1e4, unit="block.0")]
    profile = Profile("lora-script", batch_size=1, precision="bf16", layers=layers,
                      optimizer=OptimizerInfo("AdamW", 8))
    path = profile.save(tmp_path / "p.yaml")
    assert Profile.load(path).layers[0].frozen_bytes == frozen
    one = Cluster("1 x A10G", (NodeGroup(1, 1, "A10G", "pcie4", 25.0),))
    pred = Predictor(Profile.load(path), Job(parallelism="ddp", activation_checkpointing="none")).predict(one)
    m = pred.memory_breakdown_bytes
    assert m["weights"] == frozen + 4096 * 16 * 2  # frozen as recorded + the adapter in bf16
    assert m["optimizer_state"] == 4096 * 16 * 8 and m["gradients"] == 4096 * 16 * 2
    assert "profiled lora fine-tuning" in pred.notes[0]
    # Rescaling keeps the frozen weight's reads fixed: only the activations' bytes grow.
    assert profile.rescale(batch_size=2).layers[0].fwd_bytes == frozen
    with pytest.raises(SriftError, match="already of a fine-tuning step"):
        Predictor(profile, Job(finetune="lora"))


@pytest.mark.slow
def test_the_profiler_records_frozen_parameters():
    torch = pytest.importorskip("torch")
    from srift.profiling.flops import analyze_layers

    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    net[0].weight.requires_grad_(False)  # a frozen base weight; its bias still trains
    x = torch.randn(2, 8)
    layers = analyze_layers(net, lambda: net(x).sum())
    assert (layers[0].params, layers[0].frozen_bytes) == (16, 8 * 16 * 4)
    assert (layers[1].params, layers[1].frozen_bytes) == (16 * 4 + 4, 0)


def test_a_small_frozen_table_leaves_a_training_profile_as_it_is():
    from srift.profile import LayerProfile, Profile
    from srift.simulate.finetune import frozen_in_profile

    layers = [LayerProfile("pos", "Embedding", frozen_bytes=1024.0),
              LayerProfile("fc", "Linear", params=4096, grad_bytes=4096 * 4)]
    assert frozen_in_profile(Profile("p", batch_size=1, precision="fp32", layers=layers)) is None
    layers[0].frozen_bytes = 4096 * 4 + 1.0
    assert frozen_in_profile(Profile("p", batch_size=1, precision="fp32", layers=layers)).mode == "lora"


def test_adapter_bytes_are_the_passes_counted_from_the_code():
    # q_proj of TINY (64 -> 64), rank 4, t = 16 tokens of 2 bytes: lora_A forward reads x (1 pass
    # of 16 x 64 x 2 = 2,048 bytes) and writes 16 x 4 x 2 = 128; backward 5 passes of x plus the
    # r-wide tensor twice. lora_B forward: 6 passes of its 64-wide output (write, scaling, sum) plus
    # the r-wide input; backward 4 passes plus 2 r-wide. Weight gradients on top, at the base
    # layer's gradient bytes per parameter (the profile records 4).
    _, (lora, _) = tiny(finetune="lora", lora_rank=4, lora_targets="qv")
    a = next(layer for layer in lora.layers if layer.name.endswith("layers.0.self_attn.q_proj.lora_A"))
    b = next(layer for layer in lora.layers if layer.name.endswith("layers.0.self_attn.q_proj.lora_B"))
    grad = 64 * 4 * 4
    assert a.fwd_bytes == 2_048 + 128 + grad and a.bwd_bytes == 5 * 2_048 + 2 * 128 + 2 * grad
    assert b.fwd_bytes == 6 * 2_048 + 128 + grad and b.bwd_bytes == 4 * 2_048 + 2 * 128 + 2 * grad


def test_fused_projections_take_one_adapter_pair():
    # Megatron's linear_qkv: one pair of rank 4 on 64 -> 64 + 32 + 32 = 128 per block, r (64 + 128)
    # = 768, where separate q, k, v modules take 512 + 384 + 384 = 1,280.
    profile = decoder_profile(TINY, batch_size=B, seq_len=S, precision="bf16")
    job = Job(finetune="lora", lora_rank=4, lora_targets="qkv")
    assert finetune_profile(profile, job, fused=True)[1].trainable_params == 2 * 768
    assert finetune_profile(profile, job)[1].trainable_params == 2 * 1_280
    # all-linear fused: qkv 768, o 512, gate+up 4 (64 + 256) = 1,280, down 768 = 3,328 per block.
    every = Job(finetune="lora", lora_rank=4)
    assert finetune_profile(profile, every, fused=True)[1].trainable_params == 2 * 3_328


def test_lora_in_a_megatron_layout_trains_only_the_adapters():
    from srift.cluster import Cluster, NodeGroup
    from srift.simulate.finetune import LoraSpec
    from srift.simulate.layouts import Layout, PlanSettings, plan_layout
    from srift.zoo import llm_arch

    arch = llm_arch("llama3-8b")
    dgx = Cluster("8 H100", (NodeGroup(1, 8, "H100", "nvswitch4", 3200.0, "infiniband"),))
    layout = Layout(1, 1, 1, 8, 1, 1, 4)
    full = plan_layout(arch, dgx, layout, 4096,
                       PlanSettings(precision="bf16", checkpointing="none", dp_flavour="zero1"))
    lora = plan_layout(arch, dgx, layout, 4096,
                       PlanSettings(precision="bf16", checkpointing="none", dp_flavour="ddp", lora=LoraSpec(8, "qkv")))
    # NeMo's recipe LoRA on Llama 3 8B: rank 8 on linear_qkv (4096 -> 4096 + 2 x 1024), per block
    # 8 x (4096 + 6144) = 81,920; 32 blocks: 2,621,440 adapter parameters.
    adapters = 32 * 81_920
    mem = lora.memory_breakdown_bytes
    assert mem["gradients"] == adapters * 2  # bf16 gradient buffers of the adapters only
    assert mem["optimizer_state"] == adapters * 12  # fp32 master + Adam, unsharded under DDP
    assert mem["weights"] == pytest.approx((params_count(arch) + adapters) * 2)
    # No weight-gradient GEMMs: the backward shrinks by more than the adapters add to the forward.
    assert lora.breakdown["backward"] < 0.75 * full.breakdown["backward"]
    assert lora.iteration_s < full.iteration_s and lora.breakdown["optimizer"] < 1e-3


def test_qlora_with_a_layout_says_what_to_do(capsys):
    from srift.cli import main

    args = ["predict", "--model", "llama3-8b", "--instance", "p5.48xlarge", "--layout", "tp=1,pp=1,cp=1",
            "--seq-len", "4096", "--micro-batch-size", "1", "--global-batch-size", "32"]
    assert main([*args, "--finetune", "qlora"]) == 2
    err = capsys.readouterr().err
    assert "QLoRA is modelled with data parallelism" in err and "To fix:" in err and "Traceback" not in err
    assert main([*args, "--finetune", "lora", "--lora-rank", "8", "--lora-targets", "qkv"]) == 0
    assert "LoRA rank 8 on qkv" in capsys.readouterr().out

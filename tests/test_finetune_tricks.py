"""The fine-tuning recipes' memory tricks (srift/simulate/offload.py), pinned by hand on small
decoders whose every tensor can be counted: optimizer in backward, CPU offload of the optimizer
states and of the parameters, activation offloading, paged 8-bit optimizer states."""

from __future__ import annotations

import pytest

from srift.errors import SriftError
from srift.job import Job
from srift.simulate.finetune import finetune_memory_bytes, finetune_profile
from srift.simulate.memory import activation_bytes, layer_activation_bytes, loss_bytes
from srift.simulate.offload import (
    CPU_ADAM_BYTES_PER_PARAM, HOST_MEMORY_GB_PER_S, MemoryTricks, cpu_step_s, host_link_gb_per_s,
    offloaded_activation_bytes,
)
from srift.zoo.llm import DecoderArch, decoder_profile, params_count

# hidden 64, 4 heads of 16, 2 kv heads (kv width 32), MLP 128 (SwiGLU), vocab 100, untied head:
# 86,848 weights; the largest layers are the MLP's gate, up and down, 64 x 128 = 8,192 each.
TINY = DecoderArch(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100)
B, S = 2, 8


def full(arch: DecoderArch = TINY, **job) -> tuple:
    profile = decoder_profile(arch, batch_size=B, seq_len=S, precision="bf16")
    return finetune_profile(profile, Job(precision="bf16", finetune="full", **job))


def test_optimizer_in_backward_full_finetune_by_hand():
    prof, frozen = full()
    assert params_count(TINY) == prof.params == 86_848
    plain = finetune_memory_bytes(prof, frozen, "bf16", "ddp", "none", shard_gpus=1)
    oib = finetune_memory_bytes(prof, frozen, "bf16", "ddp", "none", shard_gpus=1,
                                tricks=MemoryTricks(optimizer_in_backward=True))
    assert plain["gradients"] == 86_848 * 2  # every bf16 gradient, alive at the end of backward
    assert oib["gradients"] == 8_192 * 2  # one layer's: each is freed once its parameter is stepped
    assert oib["weights"] == plain["weights"] == 86_848 * 2
    assert oib["optimizer_state"] == plain["optimizer_state"] == 86_848 * 4  # AdamW's two bf16 moments stay
    assert oib["activations"] == plain["activations"] == activation_bytes(prof, "bf16", "none")
    # On two GPUs DDP's buckets still hold every gradient.
    two = finetune_memory_bytes(prof, frozen, "bf16", "ddp", "none", 1, gpus=2, tricks=MemoryTricks(optimizer_in_backward=True))
    assert two["gradients"] == 86_848 * 2 + 8_192 * 2


def test_cpu_offloaded_full_finetune_by_hand():
    prof, frozen = full()
    sharded = finetune_memory_bytes(prof, frozen, "bf16", "fsdp", "none", shard_gpus=4)
    opt = finetune_memory_bytes(prof, frozen, "bf16", "fsdp", "none", 4, tricks=MemoryTricks(cpu_offload="optimizer"))
    par = finetune_memory_bytes(prof, frozen, "bf16", "fsdp", "none", 4, tricks=MemoryTricks(cpu_offload="params"))
    assert sharded["optimizer_state"] == 86_848 * 4 / 4 and opt["optimizer_state"] == 0.0
    # The gradient shards go to the host; the units' gradients in flight stay.
    assert opt["gradients"] == sharded["gradients"] - 86_848 * 2 / 4
    assert opt["weights"] == 86_848 * 2 / 4 and par["weights"] == 0.0  # parameter shards on the host
    assert par["gathered_weights"] == opt["gathered_weights"] == sharded["gathered_weights"]
    # The CPU Adam step: 21,712 parameters per GPU x 28 bytes over the host's memory, and each
    # bf16 gradient down and parameter up over an A100's PCIe 4.0 x16 (31.5 GB/s).
    assert host_link_gb_per_s("A100-80GB") == 31.5
    assert cpu_step_s(21_712, 2.0, "A100-80GB") == pytest.approx(
        21_712 * CPU_ADAM_BYTES_PER_PARAM / (HOST_MEMORY_GB_PER_S * 1e9) + 2 * 21_712 * 2 / 31.5e9)


def test_activation_offloading_keeps_two_blocks_by_hand():
    deep = DecoderArch(name="deep", n_layers=6, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100)
    prof, _ = full(deep)
    acts = layer_activation_bytes(prof, "bf16")
    units = [layer.unit for layer in prof.layers]
    root = sum(a for a, u in zip(acts, units) if u is None)
    block = sum(a for a, u in zip(acts, units) if u == units[len(units) // 2])
    assert root + 6 * block == pytest.approx(acts.sum())  # six equal blocks and the root
    loss = loss_bytes(prof, "bf16")
    assert activation_bytes(prof, "bf16", "none") == pytest.approx(root + 6 * block + loss)
    # Offloaded: the root's, two blocks' (computing, in flight) and the loss's stay on the GPU.
    assert offloaded_activation_bytes(prof, "bf16", "none", False) == pytest.approx(root + 2 * block + loss)


def test_paged_states_leave_the_activation_peak_by_hand():
    # Every Linear and the tables have >= 1e5 weights (paged); the norms' 512 do not (on the GPU).
    wide = DecoderArch(name="wide", n_layers=2, hidden=512, heads=8, kv_heads=8, intermediate=1024, vocab=1000)
    prof, frozen = full(wide, optimizer="paged-adamw8bit")
    p = prof.params
    norms = 5 * 512
    state = prof.optimizer.state_bytes_per_param
    m = finetune_memory_bytes(prof, frozen, "bf16", "ddp", "none", 1, tricks=MemoryTricks(paged=True))
    acts = activation_bytes(prof, "bf16", "none")
    at_backward = p * 2 + p * 2 + norms * state + acts  # weights, gradients, resident states, activations
    in_step = p * 2 + p * 2 + p * state  # weights, gradients, every state, no activation
    assert sum(v for k, v in m.items() if k != "allocator") == pytest.approx(max(at_backward, in_step))
    # Stepped in backward (torchtune's 8B_full_single_device: PagedAdamW8bit with optimizer_in_bwd),
    # one layer's states come in at a time beside the activations.
    largest = 512 * 1024  # an MLP projection (the tables: 1,000 x 512)
    both = finetune_memory_bytes(prof, frozen, "bf16", "ddp", "none", 1,
                                 tricks=MemoryTricks(optimizer_in_backward=True, paged=True))
    assert both["optimizer_state"] == pytest.approx((norms + largest) * state)
    assert both["gradients"] == largest * 2


def test_the_tricks_are_refused_where_they_cannot_apply():
    with pytest.raises(SriftError, match="does not fine-tune"):
        Job(optimizer_in_backward=True)
    with pytest.raises(SriftError, match="gradient accumulation"):
        Job(finetune="full", optimizer_in_backward=True, grad_accum=4)
    with pytest.raises(SriftError, match="ZeRO-3"):
        Job(finetune="full", cpu_offload="params", parallelism="ddp")
    with pytest.raises(SriftError, match="not with --layout"):
        Job(finetune="full", activation_offloading=True, layout="tp=2,pp=1,cp=1")
    assert Job(finetune="full", cpu_offload="params", parallelism="fsdp").cpu_offload == "params"


def test_predict_prices_the_tricks_on_one_plan():
    """predict: torchtune's 8B_full_single_device recipe (PagedAdamW8bit stepped in backward) fits
    a full Llama 3 8B fine-tune on one 48 GB L40S, which plain AdamW does not, at the same speed;
    CPU offload moves the optimizer step to the CPU and prices it."""
    from srift.cluster import Cluster, NodeGroup
    from srift.simulate import Predictor
    from srift.zoo import load_builtin_profile

    profile = load_builtin_profile("llama3-8b", batch_size=1, seq_len=2048, precision="bf16")
    cluster = Cluster("1 x L40S", (NodeGroup(1, 1, "L40S", "pcie4", 25.0),))
    base = dict(finetune="full", batch_size=1, seq_len=2048, activation_checkpointing="full")
    plain = Predictor(profile, Job(**base)).predict(cluster)
    oib = Predictor(profile, Job(**base, optimizer_in_backward=True)).predict(cluster)
    recipe = Predictor(profile, Job(**base, optimizer_in_backward=True, optimizer="paged-adamw8bit")).predict(cluster)
    off = Predictor(profile, Job(**base, cpu_offload="optimizer")).predict(cluster)
    assert plain.memory_fit == "does not fit" and recipe.memory_fit == "fits"
    largest = max(layer.params for layer in profile.layers)  # the embedding (128,256 x 4,096)
    assert largest == 128_256 * 4_096
    assert plain.memory_breakdown_bytes["gradients"] - oib.memory_breakdown_bytes["gradients"] == pytest.approx(
        (profile.params - largest) * 2)
    assert oib.iteration_time_s == pytest.approx(plain.iteration_time_s)
    assert off.memory_breakdown_bytes["optimizer_state"] == 0.0
    assert off.breakdown["optimizer"] == pytest.approx(cpu_step_s(float(profile.params), 2.0, "L40S"))


def test_predict_prints_what_each_trick_saves(capsys):
    """predict --finetune: a what-if row per trick the job does not use, each predicted alone on the
    plan the job got; JSON carries the same rows."""
    import json

    from srift.cli import main

    args = ["predict", "--model", "llama3-8b", "--instance", "g5.xlarge", "--seq-len", "512", "--batch-size", "1",
            "--finetune", "lora", "--activation-checkpointing", "none"]
    assert main([*args, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {row["change"]: row for row in data["memory_what_if"]}
    assert {"--activation-checkpointing full", "--activation-offloading", "--optimizer-in-backward",
            "--optimizer paged-adamw8bit", "--cpu-offload optimizer", "--seq-len 256", "--lora-rank 8",
            "--finetune qlora"} == set(rows)  # batch 1 cannot halve
    for row in rows.values():
        assert row["saved_gib"] == pytest.approx(data["memory_per_gpu_bytes"] / 2**30 - row["memory_gib"])
    # Checkpointing every block and offloading activations save memory; QLoRA saves the weights.
    assert rows["--activation-checkpointing full"]["saved_gib"] > 0 and rows["--activation-offloading"]["saved_gib"] > 0
    assert rows["--finetune qlora"]["saved_gib"] > 5.0
    assert main(args) == 0
    assert "Memory what-if" in capsys.readouterr().out


def test_optimizer_in_backward_holds_one_layers_gradients_in_real_pytorch():
    """torchtune's optimizer in backward, as its recipe wires it (one AdamW per parameter, stepped
    and its gradient freed by a post-accumulate-grad hook), on a real PyTorch model of TINY's layer
    shapes: the gradients alive at once never exceed the largest layer's, which srift counts."""
    torch = pytest.importorskip("torch")

    prof, _ = full()
    shapes = [(int(layer.kfac_g_dim), int(layer.kfac_a_dim)) if layer.kfac_a_dim else (layer.params,)
              for layer in prof.layers if layer.params]
    params = [torch.nn.Parameter(torch.randn(*shape, dtype=torch.bfloat16)) for shape in shapes]
    assert sum(p.numel() for p in params) == prof.params
    optimizers = {p: torch.optim.AdamW([p], foreach=False) for p in params}
    alive: list[int] = []

    def step(p: torch.nn.Parameter) -> None:  # torchtune's optim_step hook
        alive.append(sum(q.grad.numel() * q.grad.element_size() for q in params if q.grad is not None))
        optimizers[p].step()
        optimizers[p].zero_grad(set_to_none=True)

    for p in params:
        p.register_post_accumulate_grad_hook(step)
    x = torch.ones(1, dtype=torch.bfloat16)
    for _ in range(2):
        h = x
        for p in params:  # a chain through every parameter, so backward reaches each in turn
            h = h + (p.float() * 1e-3).sum().to(torch.bfloat16)
        h.float().sum().backward()
    assert max(alive) == 8_192 * 2
    m = finetune_memory_bytes(prof, full()[1], "bf16", "ddp", "none", 1, tricks=MemoryTricks(optimizer_in_backward=True))
    assert m["gradients"] == max(alive)

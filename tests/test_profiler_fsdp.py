"""`srift profile` of FSDP scripts (issue 16, item 6), the all-gather and reduce-scatter calibration
(item 8's `srift calibrate comm`), and what the predictor makes of both: real FSDP1 and FSDP2 on
gloo, in one process and under torchrun, checked against hand counts of the models' parameters."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from srift.cluster import cluster_from_dict
from srift.errors import SriftError
from srift.job import Job
from srift.perf.comm import CommModel
from srift.profile import DeviceInfo, PhaseTimes, Profile, UnitCollective
from srift.simulate.predictor import job_with_profile_defaults, predict
from srift.testing import measured_unit_profile

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "train_fsdp.py"
SRIFT = [sys.executable, "-m", "srift.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# examples/train_fsdp.py at a small size: 2 blocks of width 64, 256 tokens of vocabulary, 32 positions.
SMALL = ["--dim", "64", "--layers", "2", "--heads", "2", "--vocab", "256", "--seq-len", "32", "--batch-size", "4"]
D, VOCAB, SEQ, TOKENS = 64, 256, 32, 4 * 32
BLOCK_PARAMS = 2 * 2 * D + 3 * D * D + D * D + 4 * D * D + 4 * D * D  # 2 LayerNorms, qkv, proj, fc1, fc2
ROOT_PARAMS = VOCAB * D + SEQ * D + 2 * D + D * VOCAB  # tok, pos, final norm, head


def _profile(tmp_path: Path, *script_args: str, nproc: int = 1, iters: int = 3) -> Profile:
    out = tmp_path / "p.yaml"
    args = ["profile", str(EXAMPLE), "--warmup", "2", "--iters", str(iters), "-o", str(out), "--", *SMALL, *script_args]
    if nproc == 1:
        cmd = [*SRIFT, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--standalone",
               "--no-python", *SRIFT, *args]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=ENV)
    assert res.returncode == 0, res.stderr[-3000:]
    return Profile.load(out)


def _unit_params(prof: Profile) -> dict[str | None, int]:
    out: dict[str | None, int] = {}
    for layer in prof.layers:
        out[layer.unit] = out.get(layer.unit, 0) + layer.params
    return out


# ---- real FSDP runs ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_fsdp2_in_one_process_records_units_clean_names_and_predicts_fsdp(tmp_path: Path) -> None:
    prof = _profile(tmp_path)
    assert (prof.parallelism, prof.activation_checkpointing) == ("fsdp", "none")
    assert prof.fsdp["api"] == "FSDP2" and prof.world_size == 1 and prof.precision == "fp32"
    # The unwrapped model's names, every block leaf in its block's unit, the rest in the root unit.
    names = [layer.name for layer in prof.layers]
    assert names[:2] == ["tok", "pos"] and names[-2:] == ["norm", "head"]
    assert "layers.1.qkv" in names and not any("_fsdp" in n or "_checkpoint" in n for n in names)
    assert {layer.unit for layer in prof.layers if layer.name.startswith("layers.1.")} == {"layers.1"}
    # Unsharded parameters per unit (FSDP2's DTensors report their global size), by hand.
    assert _unit_params(prof) == {None: ROOT_PARAMS, "layers.0": BLOCK_PARAMS, "layers.1": BLOCK_PARAMS}
    qkv = next(layer for layer in prof.layers if layer.name == "layers.0.qkv")
    assert qkv.fwd_flops == 2 * TOKENS * D * 3 * D and qkv.bwd_flops == 2 * qkv.fwd_flops
    assert all(layer.fwd_s is not None and layer.fwd_s > 0 for layer in prof.layers if layer.params)
    assert prof.collectives == []  # one rank: FSDP2 gathers nothing
    # The profile's parallelism is the job's default; an explicit one wins.
    cluster = _cpu_cluster(2, s_per_byte=1e-9)
    assert predict(prof, cluster).parallelism == "fsdp"
    assert predict(prof, cluster, Job(parallelism="ddp")).parallelism == "ddp"


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp1_under_torchrun_times_every_units_collectives_and_sees_full_checkpointing(tmp_path: Path) -> None:
    prof = _profile(tmp_path, "--fsdp", "1", "--checkpointing", "full", nproc=2)
    assert (prof.parallelism, prof.activation_checkpointing) == ("fsdp", "full")
    assert prof.fsdp["api"] == "FSDP1" and prof.fsdp["sharding_strategy"] == "FULL_SHARD" and prof.world_size == 2
    # FSDP1 flattens each unit's parameters into one sharded FlatParameter: the layers still get
    # their own unsharded counts from its metadata.
    assert _unit_params(prof) == {None: ROOT_PARAMS, "layers.0": BLOCK_PARAMS, "layers.1": BLOCK_PARAMS}
    fc1 = next(layer for layer in prof.layers if layer.name == "layers.0.fc1")
    assert (fc1.params, fc1.unit) == (4 * D * D, "layers.0")
    # Both ranks time, per unit: one all-gather in forward, one again in backward (resharded after
    # forward; the root stays gathered), one reduce-scatter; each of the unit's fp32 bytes.
    by = {(c.rank, c.unit, c.kind, c.phase): c for c in prof.collectives}
    for rank in (0, 1):
        for unit, params in ((None, ROOT_PARAMS), ("layers.0", BLOCK_PARAMS), ("layers.1", BLOCK_PARAMS)):
            kinds = [("all_gather", "forward"), ("reduce_scatter", "backward")] + \
                ([("all_gather", "backward")] if unit else [])
            for kind, phase in kinds:
                c = by.pop((rank, unit, kind, phase))
                assert (c.size_bytes, c.calls) == (4 * params, 1.0) and c.time_s > 0
    assert by == {}
    # The blocked time is the collectives' (rank 0: calls x seconds), left out of the overhead.
    blocked = sum(c.calls * c.time_s for c in prof.collectives if c.rank == 0)
    assert prof.phases.collectives_s == pytest.approx(blocked, rel=1e-6)
    assert any("recomputation measured" in n for n in prof.notes)


@pytest.mark.slow
@pytest.mark.distributed
def test_fsdp2_shard_grad_op_under_torchrun_is_zero2_without_backward_gathers(tmp_path: Path) -> None:
    prof = _profile(tmp_path, "--sharding", "grad-op", nproc=2)
    assert prof.parallelism == "zero2" and prof.fsdp["sharding_strategy"] == "reshard_after_forward=False"
    rank0 = [(c.unit, c.kind, c.phase) for c in prof.collectives if c.rank == 0]
    assert sorted(rank0, key=str) == sorted([(u, k, p) for u in (None, "layers.0", "layers.1")
                                             for k, p in (("all_gather", "forward"), ("reduce_scatter", "backward"))], key=str)


@pytest.mark.slow
def test_transformers_llama_with_fully_shard_per_decoder_layer(tmp_path: Path) -> None:
    """A real Hugging Face LlamaForCausalLM (tiny config), FSDP2 on each decoder layer: units named
    as the zoo's LLM profiles name them, each with the decoder layer's own parameter count."""
    pytest.importorskip("transformers")
    script = tmp_path / "train_llama.py"
    script.write_text(
        "import json, torch, torch.distributed as dist\n"
        "from torch.distributed.fsdp import fully_shard\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
        "torch.manual_seed(0)\n"
        "cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,\n"
        "                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)\n"
        "model = LlamaForCausalLM(cfg)\n"
        "expected = [sum(p.numel() for p in l.parameters()) for l in model.model.layers]\n"
        "print('BLOCKS', json.dumps([expected, sum(p.numel() for p in model.parameters())]))\n"
        "for layer in model.model.layers:\n"
        "    fully_shard(layer)\n"
        "fully_shard(model)\n"
        "opt = torch.optim.AdamW(model.parameters())\n"
        "for _ in range(20):\n"
        "    ids = torch.randint(0, 128, (2, 16))\n"
        "    model(input_ids=ids, labels=ids).loss.backward()\n"
        "    opt.step(); opt.zero_grad()\n"
        "dist.destroy_process_group()\n")
    out = tmp_path / "llama.yaml"
    res = subprocess.run([*SRIFT, "profile", str(script), "--warmup", "2", "--iters", "3", "-o", str(out)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=240, env=ENV)
    assert res.returncode == 0, res.stderr[-3000:]
    blocks_line = next(line for line in res.stdout.splitlines() if line.startswith("BLOCKS"))
    block_params, total = json.loads(blocks_line.split(" ", 1)[1])
    prof = Profile.load(out)
    units = _unit_params(prof)
    assert units["model.layers.0"] == block_params[0] and units["model.layers.1"] == block_params[1]
    assert prof.params == total and prof.seq_len == 16 and prof.parallelism == "fsdp"
    assert {layer.unit for layer in prof.layers if layer.name.startswith("model.layers.1.")} == {"model.layers.1"}


@pytest.mark.slow
@pytest.mark.distributed
def test_calibrate_measures_all_gather_and_reduce_scatter_and_the_comm_model_reads_them(tmp_path: Path) -> None:
    from srift.cli import main
    from srift.cluster import load_cluster

    out = tmp_path / "local.yaml"
    assert main(["calibrate", "comm", "--backend", "gloo", "--nproc", "2", "-o", str(out),
                 "--sizes", "4096,262144,1048576", "--reps", "3"]) == 0
    calib = load_cluster(out).comm_calibration
    assert calib is not None
    assert calib.all_gather is not None and calib.reduce_scatter is not None
    for curve in (calib.all_gather, calib.reduce_scatter):
        assert len(curve.times_s) == 3 and all(t > 0 for t in curve.times_s) and curve.p90_times_s is not None
        assert all(p90 >= p50 for p50, p90 in zip(curve.times_s, curve.p90_times_s))
    model = CommModel(load_cluster(out))
    assert model.all_gather_time_s(262144) == pytest.approx(calib.all_gather.times_s[1], rel=1e-6)
    assert model.reduce_scatter_time_s(1048576) == pytest.approx(calib.reduce_scatter.times_s[2], rel=1e-6)


# ---- the pieces, without processes ---------------------------------------------------------------------
def _cpu_cluster(workers: int, s_per_byte: float, ag_factor: float | None = None, rs_factor: float | None = None):
    """One machine of ``workers`` CPU processes whose all-reduce takes ``s_per_byte`` per byte; with
    the factors, measured all-gather and reduce-scatter curves of that many times the all-reduce's."""
    sizes = [1.0, 1e10]
    calib = {"backend": "gloo", "world_size": workers, "sizes_bytes": sizes, "times_s": [s * s_per_byte for s in sizes]}
    if ag_factor is not None:
        calib["all_gather_times_s"] = [s * s_per_byte * ag_factor for s in sizes]
    if rs_factor is not None:
        calib["reduce_scatter_times_s"] = [s * s_per_byte * rs_factor for s in sizes]
    return cluster_from_dict({"name": "local", "node_groups": [{"count": 1, "gpus_per_node": workers, "gpu": "cpu",
                                                                "intra_node": "shared-memory", "network_gbps": 0}],
                              "comm_calibration": calib})


def test_measured_all_gather_and_reduce_scatter_curves_replace_half_an_all_reduce() -> None:
    sizes = np.array([1e3, 1e6, 1e8])
    plain = CommModel(_cpu_cluster(2, 1e-9))
    np.testing.assert_allclose(plain.all_gather_time_s(sizes), sizes * 0.5e-9)  # half the all-reduce's time
    np.testing.assert_allclose(plain.reduce_scatter_time_s(sizes), sizes * 0.5e-9)
    measured = CommModel(_cpu_cluster(2, 1e-9, ag_factor=0.8, rs_factor=1.5))
    np.testing.assert_allclose(measured.all_gather_time_s(sizes), sizes * 0.8e-9)
    np.testing.assert_allclose(measured.reduce_scatter_time_s(sizes), sizes * 1.5e-9)
    assert measured.reduce_scatter_time_s(0.0) == 0.0


def test_fsdp_on_cpu_workers_waits_for_every_collective() -> None:
    """gloo's collectives block the cores that compute: the iteration is the compute, every
    all-gather and reduce-scatter, the optimizer step on the half shard and the measured overhead,
    by hand (nothing overlaps, no interference)."""
    base = measured_unit_profile([1_000_000, 1_000_000], root_params=500_000, fwd=0.01, bwd=0.02, opt=0.004)
    prof = dataclasses.replace(base, device=DeviceInfo("x86_64", "cpu"),
                               phases=dataclasses.replace(base.phases, total_s=0.2, collectives_s=0.03),
                               parallelism="fsdp", activation_checkpointing="none")
    p = predict(prof, _cpu_cluster(2, 1e-9, ag_factor=1.0, rs_factor=2.0))
    root_b, block_b = 4 * 500_000, 4 * 1_000_000
    gathers = (root_b + 2 * block_b) + 2 * block_b  # forward (root and blocks), backward (blocks again)
    scatters = 2.0 * (root_b + 2 * block_b)
    compute = 4 * (0.01 + 0.02)
    overhead = 0.2 - compute - 0.004 - 0.03  # what no layer, optimizer or collective accounts for
    assert p.parallelism == "fsdp" and p.breakdown["comm_interference"] == 0.0
    assert p.breakdown["exposed_all_gather"] == pytest.approx(gathers * 1e-9)
    assert p.breakdown["exposed_reduce_scatter"] == pytest.approx(scatters * 1e-9)
    assert p.breakdown["overhead"] == pytest.approx(overhead)
    assert p.iteration_time_s == pytest.approx(compute + (gathers + scatters) * 1e-9 + 0.004 / 2 + overhead)


def test_the_profiles_parallelism_and_checkpointing_are_the_jobs_defaults() -> None:
    prof = dataclasses.replace(measured_unit_profile([1000]), parallelism="zero2", activation_checkpointing="full")
    assert (job_with_profile_defaults(Job(), prof).parallelism, job_with_profile_defaults(Job(), prof).activation_checkpointing) \
        == ("zero2", "full")
    explicit = job_with_profile_defaults(Job(parallelism="fsdp", activation_checkpointing="none"), prof)
    assert (explicit.parallelism, explicit.activation_checkpointing) == ("fsdp", "none")
    assert job_with_profile_defaults(Job(optimizer="kfac"), prof).parallelism == "auto"  # K-FAC runs DDP
    plain = measured_unit_profile([1000])
    assert job_with_profile_defaults(Job(), plain) == Job()


def test_fsdp_fields_round_trip_and_old_profiles_load(tmp_path: Path) -> None:
    prof = dataclasses.replace(
        measured_unit_profile([1000]), parallelism="hsdp", activation_checkpointing="selective",
        fsdp={"api": "FSDP2", "sharding_strategy": "2-D mesh (replicate, shard)"},
        phases=PhaseTimes(total_s=1.0, collectives_s=0.25),
        collectives=[UnitCollective(0, "blocks.0", "all_gather", "forward", 4000, 1.0, 0.001),
                     UnitCollective(1, None, "reduce_scatter", "backward", 16, 2.0, 0.002)])
    back = Profile.load(prof.save(tmp_path / "p.yaml"))
    assert (back.parallelism, back.activation_checkpointing, back.fsdp) == ("hsdp", "selective", prof.fsdp)
    assert back.collectives == prof.collectives and back.phases.collectives_s == 0.25
    # A profile without them (any profile before FSDP profiling) loads as before.
    old = measured_unit_profile([1000]).to_dict()
    assert "parallelism" not in old and "collectives" not in old
    loaded = Profile.from_dict(old)
    assert (loaded.parallelism, loaded.activation_checkpointing, loaded.fsdp, loaded.collectives) == (None, None, {}, [])


@pytest.mark.parametrize("key, value, message", [
    ("parallelism", "zero3", "'parallelism' must be one of ddp, zero2, fsdp, hsdp or null"),
    ("activation_checkpointing", "some", "'activation_checkpointing' must be one of none, selective, full"),
    ("collectives", [{"rank": 0, "unit": None, "kind": "all_to_all", "phase": "forward", "size_bytes": 1, "calls": 1,
                      "time_s": 0.1}], "collectives[0].kind must be one of all_gather, reduce_scatter, all_reduce"),
    ("collectives", [{"rank": 0, "kind": "all_gather"}], "collectives[0] needs rank, unit, kind, phase"),
])
def test_bad_fsdp_fields_name_the_field(key, value, message) -> None:
    data = measured_unit_profile([1000]).to_dict()
    data[key] = value
    with pytest.raises(SriftError, match=re.escape(message)):
        Profile.from_dict(data)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.act, self.b = torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)

    def forward(self, x):
        return x + self.b(self.act(self.a(x)))


class _Net(torch.nn.Module):
    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Block(), _Block()])
        self.head = torch.nn.Linear(8, 2)
        self.checkpointed = checkpointed

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return self.head(x)


def test_recomputation_is_seen_timed_apart_and_not_counted_as_flops() -> None:
    from srift.profiling.flops import analyze_layers
    from srift.profiling.hooks import LayerTimer, WallClock

    x = torch.randn(4, 8)
    plain, ckpt = _Net(False), _Net(True)
    ckpt.load_state_dict(plain.state_dict())
    flops = {}
    for name, net in (("plain", plain), ("ckpt", ckpt)):
        layers = analyze_layers(net, lambda net=net: net(x).sum())
        flops[name] = [(layer.name, layer.fwd_flops, layer.bwd_flops, layer.activation_bytes) for layer in layers]
    assert flops["ckpt"] == flops["plain"]  # one forward and one backward, recomputation left out
    assert dict((n, f) for n, f, _, _ in flops["plain"])["blocks.0.a"] == 2 * 4 * 8 * 16

    timer = LayerTimer(ckpt, ckpt, WallClock())
    ckpt(x).sum().backward()
    rec = timer.resolve(timer.close_iteration(0.0, 1.0, measured=True))
    timer.remove()
    recomputed = {timer.leaves[i][0] for i in timer.recomputed}
    # Non-reentrant checkpointing recomputes each block up to the last tensor backward needs (b's input).
    assert {"blocks.0.a", "blocks.0.act", "blocks.1.a", "blocks.1.act"} <= recomputed and "head" not in recomputed
    assert rec is not None and rec.recompute_s > 0 and rec.micro_batches == 1
    assert set(rec.layer_fwd_s) == set(range(len(timer.leaves)))  # each leaf's forward, once


def test_checkpointing_policy_from_the_recomputed_leaves() -> None:
    from srift.profiling.fsdp import checkpointing

    layers = measured_unit_profile([10, 10]).layers  # embed, blocks.0.linear, blocks.1.linear, head
    assert checkpointing(layers, set()) == ("none", None)
    assert checkpointing(layers, {"blocks.0.linear", "blocks.1.linear"}) == ("full", None)
    policy, note = checkpointing(layers, {"blocks.0.linear"})
    assert policy == "selective" and note is not None and "1 of the 2 leaves" in note

"""Packed samples attending within themselves (srift/simulate/varlen.py, ``--varlen-attention``),
pinned by hand on a small decoder: the attention core's work, the same on the data-parallel path
(a profile) and the layout path (the model's shape), and its share under context parallelism."""

from __future__ import annotations

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.job import Job
from srift.simulate import Predictor
from srift.simulate.layout.blocks import block_parts
from srift.simulate.varlen import arch_with_sample_attention, sample_attention_len
from srift.simulate.workload import Workload
from srift.zoo import llm_arch
from srift.zoo.llm import DecoderArch, decoder_profile

TINY = DecoderArch(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100)
CAP = 512
# Q K^T and P V per (query, key) pair: 2 x batch 2 x 4 heads x (16 + 16) = 512 FLOPs; causal: half
# of the pairs of the whole pack of 512.
PER_PAIR = 2 * 2 * 4 * (16 + 16)
WHOLE_PACK_FWD = 0.5 * PER_PAIR * CAP * CAP


@pytest.fixture
def lengths(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("100\n200\n300\n500\n")
    return str(path)


def attention_fwd(profile) -> list[float]:
    return [l.fwd_flops for l in profile.layers if l.type == "ScaledDotProductAttention"]


def test_attention_within_samples_by_hand(lengths):
    packed = Workload(decoder_profile(TINY, batch_size=2, seq_len=CAP, precision="bf16"),
                      Job(seq_len=CAP, batch_size=2, packed=True, lengths_file=lengths))
    varlen = Workload(decoder_profile(TINY, batch_size=2, seq_len=CAP, precision="bf16"),
                      Job(seq_len=CAP, batch_size=2, packed=True, lengths_file=lengths, varlen_attention=True))
    # E[l^2] / E[l] = (100^2 + 200^2 + 300^2 + 500^2) / (100 + 200 + 300 + 500) = 390,000 / 1,100.
    lam = 390_000 / 1_100
    assert sample_attention_len(varlen.sequences) == pytest.approx(lam)
    assert attention_fwd(packed.base) == pytest.approx([WHOLE_PACK_FWD] * 2)
    # Each pack of 512 tokens: 512 x lam / 2 causal pairs (354.5 / 512 = 69 % of the whole pack's).
    assert attention_fwd(varlen.base) == pytest.approx([0.5 * PER_PAIR * CAP * lam] * 2)
    # Every other layer computes every token of the pack as before; tokens/s counts them all.
    others = [(l.name, l.fwd_flops, l.bwd_flops) for l in varlen.base.layers if l.type != "ScaledDotProductAttention"]
    assert others == [(l.name, l.fwd_flops, l.bwd_flops) for l in packed.base.layers if l.type != "ScaledDotProductAttention"]
    assert varlen.tokens_per_sample == CAP
    # The layout path builds the model's shape with the same samples: the same attention work.
    shaped = decoder_profile(arch_with_sample_attention(TINY, lam), batch_size=2, seq_len=CAP, precision="bf16")
    assert attention_fwd(shaped) == pytest.approx(attention_fwd(varlen.base))


def test_the_mean_alone_prices_equal_samples_and_a_sample_is_at_most_the_pack():
    w = Workload(decoder_profile(TINY, batch_size=2, seq_len=CAP, precision="bf16"),
                 Job(seq_len=CAP, batch_size=2, packed=True, mean_seq_len=128, varlen_attention=True))
    assert sample_attention_len(w.sequences) == 128
    assert attention_fwd(w.base) == pytest.approx([WHOLE_PACK_FWD / 4] * 2)  # 128 / 512 of it
    whole = Workload(decoder_profile(TINY, batch_size=2, seq_len=CAP, precision="bf16"),
                     Job(seq_len=CAP, batch_size=2, packed=True, mean_seq_len=CAP, varlen_attention=True))
    assert attention_fwd(whole.base) == pytest.approx([WHOLE_PACK_FWD] * 2)


def test_context_parallel_ranks_share_the_samples_attention():
    """Under cp=2 a rank computes half the pack's samples: half the attention (whole-pack causal
    attention's load-balanced ring gives each rank half too)."""
    arch = arch_with_sample_attention(llm_arch("llama3-8b"), 1024.0)
    one, two = (block_parts(arch, 1, cp, 1, 32768, "bf16", "H100") for cp in (1, 2))
    whole = block_parts(llm_arch("llama3-8b"), 1, 1, 1, 32768, "bf16", "H100")
    # 1,024 / 32,768 of the whole pack's attention (the kernel's rate the same within 3 %).
    assert one.attention_f_s / whole.attention_f_s == pytest.approx(1024 / 32768, rel=0.03)
    assert two.attention_f_s / one.attention_f_s == pytest.approx(0.5, rel=0.05)


def test_a_layout_job_and_a_data_parallel_job_both_run_faster():
    arch = llm_arch("llama3-8b")
    profile = decoder_profile(arch, batch_size=1, seq_len=4096, precision="bf16")
    cluster = Cluster("8 x H100", (NodeGroup(1, 8, "H100", "nvswitch4", 3200.0),))
    for settings in (dict(layout="tp=1,pp=1,cp=1", micro_batch_size=1, global_batch_size=32), dict(batch_size=1)):
        base = dict(seq_len=4096, precision="bf16", finetune="lora", **settings)
        whole = Predictor(profile, Job(**base), arch=arch).predict(cluster)
        within = Predictor(profile, Job(**base, packed=True, mean_seq_len=640, varlen_attention=True),
                           arch=arch).predict(cluster)
        assert within.iteration_time_s < whole.iteration_time_s
        assert within.tokens_per_s_per_gpu * within.iteration_time_s == pytest.approx(
            whole.tokens_per_s_per_gpu * whole.iteration_time_s)  # the same tokens a step


def test_varlen_attention_needs_packed_samples_and_their_lengths():
    with pytest.raises(SriftError, match="needs --packed"):
        Job(seq_len=512, mean_seq_len=100, varlen_attention=True)
    with pytest.raises(SriftError, match="needs --packed"):
        Job(seq_len=512, packed=True, varlen_attention=True)
    with pytest.raises(SriftError, match="modelled with data parallelism"):
        Job(seq_len=512, mean_seq_len=100, packed=True, layout="tp=1,pp=1,cp=1")


def test_the_layout_simulator_alone_prices_the_samples_attention():
    """``srift predict --model ... --layout`` runs the layout simulator without a profile
    (srift/api.py's LayoutPredictor): the same per-sample attention and a note saying so."""
    from srift.simulate.layout_prediction import LayoutPredictor

    arch = llm_arch("llama3-8b")
    cluster = Cluster("8 x H100", (NodeGroup(1, 8, "H100", "nvswitch4", 3200.0),))
    base = dict(layout="tp=1,pp=1,cp=1", micro_batch_size=1, global_batch_size=32, seq_len=4096, precision="bf16",
                finetune="lora")
    whole = LayoutPredictor(arch, Job(**base), 4096).predict(cluster)
    job = Job(**base, packed=True, mean_seq_len=640, varlen_attention=True)
    within = LayoutPredictor(arch, job, 4096).predict(cluster)
    via_profile = Predictor(decoder_profile(arch, batch_size=1, seq_len=4096, precision="bf16"), job,
                            arch=arch).predict(cluster)
    assert within.iteration_time_s < whole.iteration_time_s
    assert within.iteration_time_s == pytest.approx(via_profile.iteration_time_s)
    assert any("E[l^2]/E[l] = 640 tokens of the 4,096-token pack" in n for n in within.notes)

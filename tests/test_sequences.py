"""Sequences as recipes feed them (srift/simulate/sequences.py): a LoRA batch padded to its longest
sample against one packed to the sequence length, pinned by hand on a small decoder."""

from __future__ import annotations

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.errors import SriftError
from srift.job import Job
from srift.simulate import Predictor
from srift.simulate.sequences import expected_longest, read_lengths
from srift.simulate.workload import Workload
from srift.zoo.llm import DecoderArch, decoder_profile

# 86,848 weights; rank-4 LoRA on every Linear adds 8,192 (tests/test_finetune.py counts them).
TINY = DecoderArch(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=100)
CAP = 512


@pytest.fixture
def lengths(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("100\n200\n300\n500\n")
    return str(path)


def workload(**job) -> Workload:
    profile = decoder_profile(TINY, batch_size=2, seq_len=CAP, precision="bf16")
    return Workload(profile, Job(finetune="lora", lora_rank=4, seq_len=CAP, batch_size=2, **job))


def test_padded_against_packed_lora_batch_by_hand(lengths):
    padded, packed = workload(lengths_file=lengths), workload(lengths_file=lengths, packed=True)
    # The longest of 2 samples drawn from 100, 200, 300, 500: sum l_k ((k/4)^2 - ((k-1)/4)^2)
    # = (100 x 1 + 200 x 3 + 300 x 5 + 500 x 7) / 16 = 356.25 tokens per sample computed.
    assert expected_longest(read_lengths(lengths, CAP), 2) == 356.25
    assert padded.sequences.step_len(2) == 356 and padded.step_profile(2).seq_len == 356
    assert packed.sequences.step_len(2) == CAP and packed.step_profile(2).seq_len == CAP
    # Memory at the longest batch the data makes: 500 tokens padded, 512 packed.
    assert padded.profile_at(2).seq_len == 500 and packed.profile_at(2).seq_len == CAP
    mp, mk = padded.plan_memory(2, "ddp", "none", 1, False), packed.plan_memory(2, "ddp", "none", 1, False)
    for m in (mp, mk):
        assert m["weights"] == (86_848 + 8_192) * 2  # frozen base and adapters in bf16
        assert m["gradients"] == 8_192 * 2 and m["optimizer_state"] == 8_192 * 4
    # Every saved activation of this decoder grows with the tokens: 500 against 512 per sample.
    assert mp["activations"] == pytest.approx(mk["activations"] * 500 / 512)
    # Tokens/s counts real tokens: the mean sample, 275, padded; all 512 of a pack.
    assert padded.tokens_per_sample == 275.0 and packed.tokens_per_sample == CAP


def test_predict_counts_real_tokens_and_computes_the_padded_length(lengths):
    profile = decoder_profile(TINY, batch_size=2, seq_len=CAP, precision="bf16")
    cluster = Cluster("1 x A10G", (NodeGroup(1, 1, "A10G", "pcie4", 25.0),))
    padded = Predictor(profile, Job(finetune="lora", lora_rank=4, seq_len=CAP, batch_size=2, lengths_file=lengths)).predict(cluster)
    at356 = Predictor(profile, Job(finetune="lora", lora_rank=4, seq_len=356, batch_size=2)).predict(cluster)
    assert padded.iteration_time_s == pytest.approx(at356.iteration_time_s)  # the step at its expected length
    assert padded.throughput_tokens_per_s == pytest.approx(padded.throughput_samples_per_s * 275.0)
    assert any("padded per batch" in note for note in padded.notes)


def test_bad_lengths_are_refused(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("100\nlong\n")
    with pytest.raises(SriftError, match="not a positive integer"):
        read_lengths(str(bad), CAP)
    with pytest.raises(SriftError, match="does not exist"):
        workload(lengths_file=str(tmp_path / "none.txt"))
    with pytest.raises(SriftError, match="above --seq-len"):
        Job(seq_len=512, mean_seq_len=600)
    with pytest.raises(SriftError, match="give one of them"):
        Job(seq_len=512, mean_seq_len=300, lengths_file="x.txt")
    # With the mean alone one sample per batch computes the mean; more are bounded by --seq-len.
    w = workload(mean_seq_len=300)
    assert w.sequences.step_len(1) == 300 and w.sequences.step_len(2) == CAP and w.tokens_per_sample == 300

"""The memos that make an LLM catalog search answer in seconds (issue #45) change no figure: each
remembered value is the one computed without it, and a memo that starts again hands out no
stale figure."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from srift import api
from srift.api import resolve_cluster
from srift.hardware import gpus
from srift.job import Job
from srift.perf import comm as comm_module
from srift.perf.comm import CommModel
from srift.search.gpu_range import gpus_floor
from srift.search.limits import Constraints
from srift.search.space import CountFilter
from srift.simulate.layout import memory as memory_module
from srift.simulate.layout.blocks import block_parts
from srift.simulate.layout.memory import _peak_memory_of, memory_signature, peak_memory
from srift.simulate.layout.plan import state_shard
from srift.simulate.layout.search import has_layout
from srift.simulate.memory import usable_bytes
from srift.zoo import llm_arch
from srift.zoo.llm import params_count

SIZES = (0.0, 1e3, 4.5e6, 3.2e9)


@pytest.mark.parametrize("spec", ["p5.48xlarge:1", "p5.48xlarge:4", "p4d.24xlarge:2"])
def test_a_collective_of_one_size_is_the_array_paths_figure_remembered(spec: str, monkeypatch) -> None:
    monkeypatch.setattr(comm_module, "MAX_SCALARS", 3)  # the memo starts again several times below
    m = CommModel(resolve_cluster(spec, None))
    sizes = np.array(SIZES)
    for quantile in (0.5, 0.9):
        for name in ("allreduce_time_s", "all_gather_time_s", "reduce_scatter_time_s", "broadcast_time_s",
                     "all_to_all_time_s"):
            collective = getattr(m, name)
            reference = collective(sizes, quantile)  # the array path remembers nothing
            for _ in range(2):  # computed, then remembered
                for s, expected in zip(SIZES, reference):
                    assert collective(s, quantile) == float(expected), (name, s, quantile)
        for fraction in (1.0, 0.25):
            reference = m.all_to_all_time_s(sizes, quantile, fraction)
            for s, expected in zip(SIZES, reference):
                assert m.all_to_all_time_s(s, quantile, fraction) == float(expected)
    assert len(m._scalars) <= 3


def test_a_remembered_signature_names_no_other_blocks_after_the_memo_starts_again(monkeypatch) -> None:
    # search_layouts and the bound keep a split's signature while they keep its parts; the memo
    # of signatures may start again meanwhile (MAX_MEMO): a kept number must not come back for
    # other figures, or their peak would be read for it.
    monkeypatch.setattr(memory_module, "MAX_MEMO", 1)
    arch = llm_arch("deepseek-v3")
    kept = block_parts(arch, 2, 1, 1, 4096, "bf16", "H100", 8)
    other = block_parts(arch, 2, 1, 4, 4096, "bf16", "H100", 8)  # 4x the activations
    shard = state_shard("zero1", 8, 2, 1, 8, 16)
    args = (arch, 8, 1, 8, shard)
    sig_kept = memory_signature(arch, kept)
    sig_other = memory_signature(arch, other)  # the memo starts again here
    assert sig_other != sig_kept
    other_peak = peak_memory(sig_other, *args, other, "none", "zero1", 4)
    kept_peak = peak_memory(sig_kept, *args, kept, "none", "zero1", 4)
    assert other_peak == _peak_memory_of(*args, other, "none", "zero1", 4)
    assert kept_peak == _peak_memory_of(*args, kept, "none", "zero1", 4)
    assert kept_peak < other_peak
    assert memory_signature(arch, kept) == sig_kept  # the same parts asked again: the same number


def test_block_parts_hash_is_their_fields_and_a_stage_mix_hashes_its_own() -> None:
    arch = llm_arch("deepseek-v3")  # 3 dense blocks of 61: its parts carry both kinds
    parts = block_parts(arch, 2, 1, 1, 4096, "bf16", "H100", 8)

    def fields_hash(p: object) -> int:
        return hash(tuple(getattr(p, f.name) for f in dataclasses.fields(p)))  # type: ignore[arg-type]

    assert hash(parts) == fields_hash(parts)
    dense_stage = parts.on_stage(0, 3)  # a stage of the dense blocks only: other memory figures
    assert dense_stage != parts
    assert hash(dense_stage) == fields_hash(dense_stage)
    copy = pickle.loads(pickle.dumps(parts))
    assert copy == parts and hash(copy) == hash(parts)


def _reference_ok(arch, inst, nodes: int, seq: int, gb: int, floor_memory_gib: float) -> bool:
    """The per-count rule: enough GPUs of the type to hold the training states (no deadline: no
    rate), and some layout dividing them at the global batch."""
    floor = gpus_floor(params_count(arch), gpus()[inst.gpu_name].peak_flops("bf16"), usable_bytes(floor_memory_gib),
                       None)
    return nodes * inst.gpu_count >= floor and has_layout(arch, nodes * inst.gpu_count, inst.gpu_count, seq, gb)


def test_the_layout_count_filter_answers_each_count_as_the_per_count_rule(monkeypatch) -> None:
    asked = []
    made = api._layout_counts

    def recording(*args):
        found = made(*args)
        assert isinstance(found, CountFilter)

        def mask(inst, nodes):
            # No count at all (a global batch that no count divides) is no count that fits, not a crash.
            assert found.mask(inst, np.zeros(0, dtype=np.int64)).tolist() == []
            got = found.mask(inst, nodes)
            asked.append((inst, nodes.copy(), got.copy()))
            return got
        return CountFilter(mask)

    monkeypatch.setattr(api, "_layout_counts", recording)
    job = Job(layout="auto", global_batch_size=256, seq_len=4096, precision="bf16")
    api.recommend(job, Constraints(budget_usd_per_hour=500.0, max_gpus=128), model="llama3-70b")
    assert asked
    arch = llm_arch("llama3-70b")
    first_memory: dict[str, float] = {}  # the floor is the GPU type's, from the first instance asked
    checked = 0
    for inst, nodes, got in asked:
        first_memory.setdefault(inst.gpu_name, inst.gpu_memory_gib)
        expected = [_reference_ok(arch, inst, int(n), 4096, 256, first_memory[inst.gpu_name]) for n in nodes]
        assert got.tolist() == expected, (inst.gpu_name, inst.gpu_count)
        checked += len(nodes)
    assert checked > 100
    assert any(got.any() for _, _, got in asked) and any((~got).any() for _, _, got in asked)

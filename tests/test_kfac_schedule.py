"""The fusion planner and the inversion placement, on hand-worked examples (the K-FAC prediction
that uses them: tests/test_simulate_kfac.py). None of this needs torch."""

from __future__ import annotations

import pytest

from srift.kfac import schedule


# ---- fusion planner ------------------------------------------------------------------------
# alpha = 1 s, beta = 0.1 s/byte, two 10-byte tensors: each all-reduce takes 2 s.
def test_next_tensor_ready_within_alpha_merges():
    # Tensor 1 is ready 0.5 s after tensor 0's all-reduce started (< alpha = 1): merge.
    assert schedule.plan_fusion([10, 10], [0.0, 0.5], 1.0, 0.1) == [[0, 1]]


def test_next_tensor_ready_later_than_alpha_does_not_merge():
    # Ready 1.5 s after: still during tensor 0's all-reduce (ends at 2 s) but waiting costs more than alpha.
    assert schedule.plan_fusion([10, 10], [0.0, 1.5], 1.0, 0.1) == [[0], [1]]
    # Ready after the all-reduce ended: nothing to gain.
    assert schedule.plan_fusion([10, 10], [0.0, 3.0], 1.0, 0.1) == [[0], [1]]


def test_tensor_queued_behind_the_link_merges_for_free():
    # alpha 0.1, beta 0.1: t_c = [10.1, 0.2, 0.2]; ready at 0, 5, 6. Tensor 1 waits for the link
    # until 10.1, after tensor 2 is ready (6): merged. Tensor 0 started at 0 and 5 - 0 > alpha: alone.
    groups = schedule.plan_fusion([100, 1, 1], [0.0, 5.0, 1.0], 0.1, 0.1)
    assert groups == [[0], [1, 2]]
    cost = lambda b: 0.1 + 0.1 * b  # noqa: E731
    # [0]: 0 -> 10.1; [1, 2]: starts at 10.1, costs 0.1 + 0.1 * 2 = 0.3.
    assert schedule.pipeline_finish_s(groups, [100, 1, 1], [0.0, 5.0, 6.0], cost) == pytest.approx(10.4)
    # Unfused it would pay alpha twice: 10.1 + 0.2 + 0.2.
    assert schedule.pipeline_finish_s([[0], [1], [2]], [100, 1, 1], [0.0, 5.0, 6.0], cost) == pytest.approx(10.5)


def test_plan_fusion_rejects_bad_input():
    with pytest.raises(ValueError):
        schedule.plan_fusion([1, 2], [0.0], 1.0, 1.0)
    with pytest.raises(ValueError):
        schedule.plan_fusion([1], [0.0], -1.0, 1.0)
    assert schedule.plan_fusion([], [], 1.0, 1.0) == []


def test_fixed_fusion_packs_consecutive_tensors_up_to_the_buffer():
    # Buffer 10 bytes: 4 + 5 fit (9), + 3 would be 12: new buffer; 3 + 7 = 10 fits exactly;
    # 12 is larger than the buffer: alone; 1 starts the last buffer.
    assert schedule.plan_fixed_fusion([4, 5, 3, 7, 12, 1], 10) == [[0, 1], [2, 3], [4], [5]]
    assert schedule.plan_fixed_fusion([], 10) == []
    with pytest.raises(ValueError):
        schedule.plan_fixed_fusion([1], 0)
    with pytest.raises(ValueError):
        schedule.plan_fixed_fusion([-1], 10)


def test_fixed_fusion_of_resnet50_factors_at_horovods_64_mib():
    """ResNet-50's 108 factors (model order A_0, G_0, ...), packed: 4 * 77.0 M elements = 308 MB
    (shared/KFAC.md 1.3), so at least five 64 MiB buffers; every buffer but the last is filled past
    the point where the next factor would overflow it."""
    from srift.zoo import load_builtin_profile

    prof = load_builtin_profile("resnet50")
    dims = [d for l in prof.layers if l.kfac_a_dim for d in (l.kfac_a_dim, l.kfac_g_dim)]
    assert len(dims) == 108
    sizes = [schedule.factor_message_bytes(d) for d in dims]
    assert sum(sizes) == pytest.approx(4 * 77.0e6, rel=0.01)
    groups = schedule.plan_fixed_fusion(sizes)
    assert [i for g in groups for i in g] == list(range(108))
    assert len(groups) >= sum(sizes) / schedule.FUSION_BUFFER_BYTES
    for g, nxt in zip(groups, groups[1:]):
        assert sum(sizes[i] for i in g) + sizes[nxt[0]] > schedule.FUSION_BUFFER_BYTES


def test_message_bytes_are_the_packed_upper_triangle():
    assert schedule.factor_message_bytes(1) == 4
    assert schedule.factor_message_bytes(3) == 4 * 6  # 3 + 2 + 1 elements
    assert schedule.inverse_message_bytes(3) == 24
    assert schedule.inverse_message_bytes(3, "eigen") == 4 * (3 * 3 + 3)  # eigenvectors + eigenvalues
    with pytest.raises(ValueError):
        schedule.factor_message_bytes(0)
    with pytest.raises(ValueError):
        schedule.inverse_message_bytes(3, "svd")


def test_fit_alpha_beta_recovers_a_line():
    assert schedule.fit_alpha_beta(lambda b: 2e-5 + 1e-9 * b, 100, 1e6) == pytest.approx((2e-5, 1e-9))


# ---- placement -----------------------------------------------------------------------------
DIMS = [4, 2, 3, 3, 1]
INV = lambda d: float(d)  # noqa: E731  (seconds; linear so the hand calculation stays short)
BCAST = lambda d: 1.5  # noqa: E731


def test_placement_by_load_and_local_when_cheaper():
    # d=1 inverts in 1 s < 1.5 s broadcast: local. Largest first to the least-loaded worker:
    # 4 -> w0 [4, 0]; 3 (f2) -> w1 [4, 3]; 3 (f3) -> w1 [4, 6]; 2 (f1) -> w0 [6, 6].
    owners = schedule.place_inversions(DIMS, 2, INV, BCAST)
    assert owners == [0, 0, 1, 1, schedule.LOCAL]
    tl = schedule.inversion_timeline(DIMS, owners, 2, INV, BCAST, overlap=True)
    # Makespan: w0 4 + 2 + 1 = 7, w1 3 + 3 + 1 = 7 (every worker also inverts the local d=1).
    assert tl.per_worker_s == [7.0, 7.0] and tl.compute_s == 7.0
    # Broadcasts in model order as inverses become ready: f0 at 4 -> 5.5, f1 ready at 6 -> 7.5,
    # f2 (ready 3) -> 9.0, f3 (ready 6) -> 10.5.
    assert tl.end_s == pytest.approx(10.5) and tl.broadcast_exposed_s == pytest.approx(3.5)
    # Without overlap (MPD style) the four broadcasts follow the inversions: 7 + 4 * 1.5.
    assert schedule.inversion_timeline(DIMS, owners, 2, INV, BCAST, overlap=False).end_s == pytest.approx(13.0)


def test_round_robin_and_local_placements():
    assert schedule.place_round_robin(5, 2) == [0, 1, 0, 1, 0]
    assert schedule.place_round_robin(3, 1) == [-1, -1, -1]
    # Naive: everyone inverts everything: 4 + 2 + 3 + 3 + 1 = 13 s, no broadcast.
    tl = schedule.inversion_timeline(DIMS, schedule.place_local(5), 2, INV, BCAST)
    assert (tl.compute_s, tl.broadcast_exposed_s) == (13.0, 0.0)
    assert schedule.place_inversions(DIMS, 1, INV, BCAST) == [-1] * 5


def test_the_paper_codes_threshold_replaces_the_cost_criterion():
    # Inverting is cheap next to a slow broadcast: the criterion keeps every factor local.
    dims = [64, 2048, 1500, 1399, 4608]
    cheap = lambda d: d**3 * 1e-12  # noqa: E731
    slow_bcast = lambda d: 1.0  # noqa: E731
    assert schedule.place_inversions(dims, 4, cheap, slow_bcast) == [schedule.LOCAL] * 5
    # SPD-KFAC's D_TH = 1400: below it every worker inverts, the rest go largest first to the
    # least-loaded worker (4608 -> 0, 2048 -> 1, 1500 -> 2) whatever the broadcast costs.
    assert schedule.place_inversions(dims, 4, cheap, slow_bcast, local_below=1400) == [schedule.LOCAL, 1, 2, schedule.LOCAL, 0]
    # One worker: nothing to place.
    assert schedule.place_inversions(dims, 1, cheap, slow_bcast, local_below=1400) == [schedule.LOCAL] * 5

"""The three strategies compute the same mathematics in one process, gradient accumulation
included: factors come from every micro-batch and are averaged, so two micro-batches of 8 (each
loss divided by 2, the usual accumulation) precondition exactly like one batch of 16."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from srift.kfac import STRATEGIES, KFACPreconditioner  # noqa: E402
from kfac_helpers import batches, run_steps, small_cnn  # noqa: E402

STEPS, BATCH = 3, 16


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative error of a whole tensor (elements span many orders of magnitude)."""
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _accumulated(model: nn.Module, pre: KFACPreconditioner, data, micro: int) -> list[dict[str, torch.Tensor]]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = []
    for x, y in data:
        opt.zero_grad()
        for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
            (nn.functional.cross_entropy(model(xs), ys) / micro).backward()
        pre.step()
        out.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
        opt.step()
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("method", ["inverse", "eigen"])
@pytest.mark.slow
def test_accumulated_micro_batches_equal_the_whole_batch(strategy, method):
    kw = dict(strategy=strategy, inverse_method=method, damping=0.003, kl_clip=0.001, lr=0.1)
    data = batches(STEPS, BATCH)
    model = small_cnn()
    want = run_steps(model, KFACPreconditioner(model, **kw), data)
    model = small_cnn()
    pre = KFACPreconditioner(model, accumulation_steps=2, **kw)
    got = _accumulated(model, pre, data, micro=2)
    for step, (g, w) in enumerate(zip(got, want)):
        for name in w:
            assert _rel(g[name], w[name]) < 1e-5, (strategy, step, name, _rel(g[name], w[name]))
    assert pre.steps == STEPS


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.slow
def test_factors_average_every_micro_batch(strategy):
    """Three micro-batches of different sizes: the factor is the mean of the three factors (the
    first and the last alone would both differ)."""
    model = small_cnn()
    pre = KFACPreconditioner(model, strategy=strategy, accumulation_steps=3)
    xs = [torch.randn(n, 1, 8, 8, generator=torch.Generator().manual_seed(n)) for n in (2, 5, 3)]
    for x in xs:
        model(x).square().mean().backward()
    pre.step()
    first = pre.layers[0]
    per_batch = [first.factor_a(x) for x in xs]
    torch.testing.assert_close(pre.A[first.name], sum(per_batch) / 3)
    assert not torch.allclose(pre.A[first.name], per_batch[0]) and not torch.allclose(pre.A[first.name], per_batch[-1])


@pytest.mark.slow
def test_strategies_agree_step_by_step():
    """naive, mpd and spd give identical preconditioned gradients over several steps, with factor
    and inverse update intervals."""
    data = batches(5, 8)
    results = {}
    for strategy in STRATEGIES:
        model = small_cnn()
        pre = KFACPreconditioner(model, strategy=strategy, factor_update_steps=2, inv_update_steps=4)
        results[strategy] = run_steps(model, pre, data)
    for strategy in ("mpd", "spd"):
        for got, want in zip(results[strategy], results["naive"]):
            for name in want:
                assert _rel(got[name], want[name]) < 1e-6, (strategy, name)


@pytest.mark.slow
def test_spd_with_fewer_passes_than_accumulation_steps_still_averages_them():
    """spd starts an all-reduce at the accumulation_steps-th pass; with fewer passes, step()
    starts the rest: the factors are the same as naive's."""
    x = batches(1, 8)[0][0]
    factors = {}
    for strategy in ("naive", "spd"):
        model = small_cnn()
        pre = KFACPreconditioner(model, strategy=strategy, accumulation_steps=4)
        for half in x.chunk(2):
            model(half).sum().backward()
        pre.step()
        factors[strategy] = pre.G
    for name in factors["naive"]:
        torch.testing.assert_close(factors["spd"][name], factors["naive"][name])


def test_spd_more_passes_than_accumulation_steps_is_a_clear_error():
    model = small_cnn()
    pre = KFACPreconditioner(model, strategy="spd")
    x = batches(1, 4)[0][0]
    model(x).sum().backward()
    with pytest.raises(RuntimeError, match="accumulation_steps"):
        model(x)
    # naive averages any number of passes.
    model = small_cnn()
    pre = KFACPreconditioner(model, strategy="naive")
    for _ in range(2):
        model(x).sum().backward()
    pre.step()

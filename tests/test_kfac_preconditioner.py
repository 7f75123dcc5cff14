"""KFACPreconditioner in one process: the math of one step, convergence on a real data set and
argument validation (checkpoints and the other adoption features: test_kfac_adoption.py)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from srift.kfac import KFACPreconditioner, KFACStrategy  # noqa: E402
from kfac_helpers import batches, run_steps, small_cnn  # noqa: E402


def test_one_step_matches_the_formula_by_hand():
    """P = (G + lam_G I)^-1 dW (A + lam_A I)^-1 with pi-damping, bias folded in, KL-clipped."""
    torch.manual_seed(0)
    layer = nn.Linear(5, 3)
    x, y = torch.randn(12, 5), torch.randn(12, 3)
    pre = KFACPreconditioner(layer, damping=0.01, kl_clip=0.001, lr=0.5)
    nn.functional.mse_loss(layer(x), y).backward()
    grad = torch.cat([layer.weight.grad, layer.bias.grad[:, None]], 1).clone()
    with torch.no_grad():
        out = layer(x)

    a = torch.cat([x, torch.ones(12, 1)], 1)
    A = a.T @ a / 12
    g = 2 * (out - y) / (12 * 3)  # d(mean loss)/d(out)
    G = g.T @ g / 12
    pi = math.sqrt((A.trace() / 6) / (G.trace() / 3))
    lam_a, lam_g = math.sqrt(0.01) * pi, math.sqrt(0.01) / pi
    P = torch.linalg.solve(G + lam_g * torch.eye(3), grad) @ torch.linalg.inv(A + lam_a * torch.eye(6))
    nu = min(1.0, math.sqrt(0.001 / abs(float((P * grad).sum()) * 0.25)))

    pre.step()
    got = torch.cat([layer.weight.grad, layer.bias.grad[:, None]], 1)
    torch.testing.assert_close(got, nu * P, rtol=1e-4, atol=1e-7)
    assert nu < 1.0  # the clip was active: the test covers it


def test_eigen_method_matches_the_formula_by_hand():
    """P = Q_G [(Q_G^T dW Q_A) / (outer(l_G, l_A) + damping)] Q_A^T, without KL clipping."""
    torch.manual_seed(0)
    layer = nn.Linear(5, 3, bias=False)
    x, y = torch.randn(12, 5), torch.randn(12, 3)
    pre = KFACPreconditioner(layer, damping=0.01, kl_clip=None, inverse_method="eigen")
    nn.functional.mse_loss(layer(x), y).backward()
    grad = layer.weight.grad.clone()
    with torch.no_grad():
        g = 2 * (layer(x) - y) / (12 * 3)
    A, G = x.T @ x / 12, g.T @ g / 12
    la, qa = torch.linalg.eigh(A)
    lg, qg = torch.linalg.eigh(G)
    P = qg @ ((qg.T @ grad @ qa) / (torch.outer(lg, la) + 0.01)) @ qa.T
    pre.step()
    torch.testing.assert_close(layer.weight.grad, P, rtol=1e-4, atol=1e-6)
    # The check is not vacuous: preconditioning changed the gradient.
    assert not torch.allclose(P, grad)


def _digits():
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    return torch.tensor(d.data, dtype=torch.float32) / 16.0, torch.tensor(d.target)


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))


def _train(X, Y, kind: str, lr: float, steps: int = 50, batch: int = 64, damping: float = 0.003) -> float:
    model = _mlp()
    if kind == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    pre = KFACPreconditioner(model, lr=lr, damping=damping) if kind == "kfac" else None
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, len(X), (batch,), generator=gen)
        opt.zero_grad()
        nn.functional.cross_entropy(model(X[idx]), Y[idx]).backward()
        if pre is not None:
            pre.step()
        opt.step()
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(X), Y))


@pytest.mark.slow
def test_kfac_beats_its_base_optimizer_on_digits():
    """Same model, data order and number of steps. SGD (momentum 0.9) gets its best of four
    learning rates; K-FAC preconditions the same SGD at lr 0.1 with its best of four dampings
    (default kl_clip 0.001). In kfac-pytorch's scaling G is small (a batch-mean loss), so damping
    needs to be larger than with Martens & Grosse's per-sample G; see docs/kfac.md."""
    torch.set_num_threads(1)
    X, Y = _digits()
    sgd = min(_train(X, Y, "sgd", lr) for lr in (0.03, 0.1, 0.3, 1.0))
    kfac = min(_train(X, Y, "kfac", 0.1, damping=d) for d in (0.3, 0.1, 0.03, 0.01))
    assert kfac < 0.95 * sgd, (kfac, sgd)


def test_load_state_dict_rejects_another_model():
    pre = KFACPreconditioner(small_cnn())
    other = KFACPreconditioner(nn.Sequential(nn.Linear(3, 2)))
    x = torch.randn(4, 3)
    other_model = other.layers[0].module
    other_model(x).sum().backward()
    other.step()
    with pytest.raises(ValueError, match="does not match this model"):
        pre.load_state_dict(other.state_dict())
    with pytest.raises(ValueError):
        pre.load_state_dict({"A": {}})


@pytest.mark.parametrize("kwargs, match", [
    (dict(strategy="fast"), "strategy"),
    (dict(damping=0.0), "damping"),
    (dict(damping=-1.0), "damping"),
    (dict(factor_decay=1.0), "factor_decay"),
    (dict(kl_clip=0), "kl_clip"),
    (dict(lr=float("nan")), "lr"),
    (dict(factor_update_steps=0), "factor_update_steps"),
    (dict(inv_update_steps=3, factor_update_steps=2), "multiple"),
    (dict(inv_update_steps=1.5), "inv_update_steps"),
    (dict(inverse_method="svd"), "inverse_method"),
    (dict(inverse_method="cholesky"), "inverse_method"),
    (dict(accumulation_steps=0), "accumulation_steps"),
    (dict(factor_update_steps="2"), "factor_update_steps"),
    (dict(skip_layers=5), "skip_layers"),
    (dict(grad_scaler=object()), "grad_scaler"),
])
def test_invalid_arguments_fail_up_front(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KFACPreconditioner(small_cnn(), **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="fast"), "strategy"),
    (dict(comm_alpha_s=-1.0), "comm_alpha_s"),
    (dict(comm_beta_s_per_byte=float("nan")), "comm_beta_s_per_byte"),
    (dict(inv_flops_per_s=0), "inv_flops_per_s"),
    (dict(local_below=-1), "local_below"),
    (dict(local_below=1400.0), "local_below"),
    (dict(fusion_buffer_bytes=0), "fusion_buffer_bytes"),
    (dict(fusion_profile_steps=0), "fusion_profile_steps"),
])
def test_invalid_strategy_settings_fail_up_front(kwargs, match):
    """A strategy's planner settings are checked when the KFACStrategy is built, before any model."""
    with pytest.raises(ValueError, match=match):
        KFACStrategy(**kwargs)


def test_a_strategy_with_settings_runs_as_named():
    """``strategy=KFACStrategy(...)`` is the named strategy with its planner's settings; a plain
    name is that strategy with the defaults."""
    pre = KFACPreconditioner(small_cnn(), strategy=KFACStrategy("mpd", fusion_buffer_bytes=1024))
    assert pre.strategy == "mpd" and KFACPreconditioner(small_cnn(), strategy="naive").strategy == "naive"
    assert KFACStrategy.of("spd") == KFACStrategy() and KFACStrategy.of(KFACStrategy("mpd")).name == "mpd"


def test_model_without_supported_layers_and_skip_layers():
    with pytest.raises(ValueError, match="no Linear or Conv2d"):
        KFACPreconditioner(nn.Sequential(nn.ReLU()))
    with pytest.raises(ValueError, match="no Linear or Conv2d"):
        KFACPreconditioner(nn.Sequential(nn.Linear(2, 2)), skip_layers=["Linear"])
    pre = KFACPreconditioner(small_cnn(), skip_layers=[nn.Conv2d])
    assert [l.name for l in pre.layers] == ["5"]


@pytest.mark.slow
def test_skipped_layers_keep_their_gradient_and_intervals_reuse_inverses():
    model = small_cnn()
    pre = KFACPreconditioner(model, skip_layers=["0"], factor_update_steps=2, inv_update_steps=4)
    x, y = batches(1, 8)[0]
    nn.functional.cross_entropy(model(x), y).backward()
    raw = model[0].weight.grad.clone()
    pre.step()
    assert torch.equal(model[0].weight.grad, raw)
    inv_before = {k: v.clone() for k, v in pre.A_inv.items()}
    for _ in range(3):  # steps 1..3: no new inverses before step 4
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        pre.step()
        for k in inv_before:
            assert torch.equal(pre.A_inv[k], inv_before[k])
    assert pre.steps == 4


def test_step_before_backward_is_a_clear_error():
    pre = KFACPreconditioner(small_cnn())
    with pytest.raises(RuntimeError, match="forward"):
        pre.step()


@pytest.mark.slow
def test_factors_stay_fp32_under_autocast():
    model = small_cnn()
    pre = KFACPreconditioner(model)
    x, y = batches(1, 8)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    pre.step()
    ref_model = small_cnn()
    ref = KFACPreconditioner(ref_model)
    nn.functional.cross_entropy(ref_model(x), y).backward()
    ref.step()
    for name in ref.A:
        assert pre.A[name].dtype == torch.float32 and pre.G[name].dtype == torch.float32
        # bf16 activations (8 bits of mantissa): close to the fp32 factors, not equal.
        torch.testing.assert_close(pre.A[name], ref.A[name], rtol=5e-2, atol=5e-3)

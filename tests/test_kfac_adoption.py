"""What a user adopting srift's K-FAC relies on: checkpoint/resume, skip_layers, schedules as
callables, AMP with a GradScaler, and clear errors."""

from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from srift.kfac import KFACPreconditioner  # noqa: E402
from kfac_helpers import batches, run_steps, small_cnn  # noqa: E402


# ---- checkpoint / resume -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("method", ["inverse", "eigen"])
def test_resume_from_a_checkpoint_takes_identical_steps(method):
    """Train 3 steps, checkpoint (model, optimizer, preconditioner through torch.save and
    torch.load(weights_only=True)), train 4 more; a fresh process-like restart from the checkpoint
    takes bit-identical steps. Step 3 is mid-interval (inverses every 4 steps, factors every 2):
    the restored inverses and factors are used as they were saved."""
    data = batches(7, 8)
    kw = dict(strategy="spd", factor_update_steps=2, inv_update_steps=4, inverse_method=method)

    def train(model, opt, pre, part):
        out = []
        for x, y in part:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            pre.step()
            out.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
            opt.step()
        return out

    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    pre = KFACPreconditioner(model, **kw)
    train(model, opt, pre, data[:3])
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "kfac": pre.state_dict()}, buf)
    want = train(model, opt, pre, data[3:])

    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)
    model2 = small_cnn(seed=5)
    model2.load_state_dict(ckpt["model"])
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.1, momentum=0.9)
    opt2.load_state_dict(ckpt["opt"])
    pre2 = KFACPreconditioner(model2, **kw)
    pre2.load_state_dict(ckpt["kfac"])
    assert pre2.steps == 3
    got = train(model2, opt2, pre2, data[3:])
    for g, w in zip(got, want):
        for name in w:
            assert torch.equal(g[name], w[name]), name
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))


@pytest.mark.slow
def test_load_state_dict_errors():
    pre = KFACPreconditioner(small_cnn())
    model = small_cnn()
    src = KFACPreconditioner(model, inverse_method="eigen")
    run_steps(model, src, batches(1, 4))
    with pytest.raises(ValueError, match="inverse_method"):
        pre.load_state_dict(src.state_dict())
    with pytest.raises(ValueError, match="not a KFACPreconditioner state_dict"):
        pre.load_state_dict({"weights": 1})
    skipping = KFACPreconditioner(small_cnn(), skip_layers=["5"])
    state = KFACPreconditioner(small_cnn()).state_dict()
    state["A"] = {"0": torch.eye(10), "2": torch.eye(36), "5": torch.eye(17)}
    with pytest.raises(ValueError, match="unknown: 5"):
        skipping.load_state_dict(state)
    state["A"] = {"0": torch.eye(9), "2": torch.eye(36), "5": torch.eye(17)}
    with pytest.raises(ValueError, match=r"A\['0'\] has shape \(9, 9\), expected \(10, 10\)"):
        pre.load_state_dict(state)


@pytest.mark.parametrize("change", ["steps=-1", "steps=2.5", "steps=True", "factor_updates=-3", "A=nan", "G=inf", "A_inv=inf",
                                    "G_inv=nan"])
@pytest.mark.slow
def test_a_corrupt_checkpoint_is_refused_before_anything_changes(change):
    model = small_cnn()
    src = KFACPreconditioner(model, factor_update_steps=1, inv_update_steps=1)
    run_steps(model, src, batches(2, 4))
    state = src.state_dict()
    key, value = change.split("=")
    if key in ("A", "G", "A_inv", "G_inv"):
        state[key] = {k: v.clone() for k, v in state[key].items()}
        state[key]["5"][0, 0] = float(value)
    else:
        state[key] = {"-1": -1, "2.5": 2.5, "True": True, "-3": -3}[value]
    pre = KFACPreconditioner(small_cnn())
    before = pre.state_dict()
    with pytest.raises(ValueError, match="NaN or infinite" if key in ("A", "G", "A_inv", "G_inv") else f"'{key}'.*whole number"):
        pre.load_state_dict(state)
    after = pre.state_dict()
    assert after["steps"] == before["steps"] == 0 and after["A"] == before["A"] == {}


# ---- skip_layers ---------------------------------------------------------------------------
def test_skip_layers_by_name_type_and_class_name():
    # small_cnn: 0 Conv2d(1, 4, 3), 2 Conv2d(4, 4, 3, bias=False), 5 Linear(16, 10)
    names = lambda pre: [l.name for l in pre.layers]  # noqa: E731
    assert names(KFACPreconditioner(small_cnn())) == ["0", "2", "5"]
    assert names(KFACPreconditioner(small_cnn(), skip_layers=["2"])) == ["0", "5"]
    assert names(KFACPreconditioner(small_cnn(), skip_layers=nn.Conv2d)) == ["5"]
    assert names(KFACPreconditioner(small_cnn(), skip_layers="Linear")) == ["0", "2"]
    nested = nn.Sequential()
    nested.add_module("body", small_cnn())
    nested.add_module("head", nn.Linear(10, 2))
    assert names(KFACPreconditioner(nested, skip_layers=["body"])) == ["head"]  # a prefix skips the subtree


def test_skipped_layers_keep_their_gradient():
    model = small_cnn()
    pre = KFACPreconditioner(model, skip_layers=["0"])
    x, y = batches(1, 8)[0]
    nn.functional.cross_entropy(model(x), y).backward()
    raw, raw_fc = model[0].weight.grad.clone(), model[5].weight.grad.clone()
    pre.step()
    assert torch.equal(model[0].weight.grad, raw)
    assert not torch.allclose(model[5].weight.grad, raw_fc)


def test_skip_layers_typos_and_bad_entries_are_errors():
    with pytest.raises(ValueError, match="match no module.*fc9"):
        KFACPreconditioner(small_cnn(), skip_layers=["fc9"])
    with pytest.raises(ValueError, match="skip_layers entries"):
        KFACPreconditioner(small_cnn(), skip_layers=[3])
    with pytest.raises(ValueError, match="no Linear or Conv2d"):
        KFACPreconditioner(small_cnn(), skip_layers=[nn.Conv2d, nn.Linear])


def test_layers_kfac_does_not_handle_are_listed():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Conv1d(4, 4, 1), nn.LayerNorm(4), nn.Linear(4, 2))
    pre = KFACPreconditioner(model)
    assert [l.name for l in pre.layers] == ["3"]
    assert pre.unsupported == ["0", "1", "2"]


# ---- schedules -----------------------------------------------------------------------------
@pytest.mark.slow
def test_update_intervals_as_callables():
    """Factors at steps where step % factor_update_steps(step) == 0; inverses likewise."""
    model = small_cnn()
    factor_steps = lambda s: 1 if s < 2 else 3  # noqa: E731  -> factor updates at 0, 1, 3, 6
    inv_steps = lambda s: 2  # noqa: E731                 -> inverse updates at 0, 2, 4, 6
    pre = KFACPreconditioner(model, factor_update_steps=factor_steps, inv_update_steps=inv_steps)
    x, y = batches(1, 8)[0]
    factor_updates, inverse_updates = [], []
    for step in range(7):
        model.zero_grad()
        before_a = {k: v.clone() for k, v in pre.A.items()}
        before_inv = {k: v.clone() for k, v in pre.A_inv.items()}
        nn.functional.cross_entropy(model(x * (1 + step)), y).backward()
        pre.step()
        if any(k not in before_a or not torch.equal(before_a[k], pre.A[k]) for k in pre.A):
            factor_updates.append(step)
        if any(k not in before_inv or not torch.equal(before_inv[k], pre.A_inv[k]) for k in pre.A_inv):
            inverse_updates.append(step)
    assert factor_updates == [0, 1, 3, 6]
    assert inverse_updates == [0, 2, 4, 6]


@pytest.mark.slow
def test_damping_lr_and_decay_as_callables_use_the_current_step():
    """A schedule gives, at each step, exactly what the constant of that step's value gives."""
    data = batches(3, 8)
    sched = dict(damping=lambda s: [0.01, 0.03, 0.1][s], lr=lambda s: [0.1, 0.05, 0.02][s],
                 factor_decay=lambda s: [0.9, 0.8, 0.7][s], kl_clip=lambda s: [1e-3, 2e-3, 3e-3][s])
    model = small_cnn()
    got = run_steps(model, KFACPreconditioner(model, **sched), data)
    # Replay with constants: a preconditioner whose constants are changed before every step.
    model = small_cnn()
    pre = KFACPreconditioner(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(data):
        for k, f in sched.items():
            setattr(pre, k, f(step))
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        pre.step()
        for name, p in model.named_parameters():
            torch.testing.assert_close(p.grad, got[step][name])
        opt.step()


def test_a_schedule_returning_a_bad_value_is_a_clear_error():
    model = small_cnn()
    pre = KFACPreconditioner(model, damping=lambda s: -1.0)
    x, y = batches(1, 4)[0]
    nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises(ValueError, match=r"damping\(0\) must be > 0"):
        pre.step()
    with pytest.raises(ValueError, match=r"factor_update_steps\(0\) must be an integer >= 1"):
        model2 = small_cnn()
        KFACPreconditioner(model2, factor_update_steps=lambda s: 0)
        model2(x)


# ---- AMP -----------------------------------------------------------------------------------
def _amp_step(model, pre, scaler, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)  # gradients unscaled before preconditioning
    pre.step()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    scaler.step(opt)
    scaler.update()
    return grads


@pytest.mark.slow
def test_amp_grad_scaler_is_divided_out_and_bf16_stays_close_to_fp32():
    x, y = batches(1, 8)[0]
    runs = {}
    for scale in (1.0, 2.0**12):
        model = small_cnn()
        scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        pre = KFACPreconditioner(model, grad_scaler=scaler)
        runs[scale] = (pre, _amp_step(model, pre, scaler, x, y))
    (plain, g1), (scaled, g2) = runs[1.0], runs[2.0**12]
    for name in plain.G:  # a power-of-two scale is exact: the factors are the same
        torch.testing.assert_close(scaled.G[name], plain.G[name], rtol=1e-6, atol=0)
        assert scaled.G[name].dtype == torch.float32 and scaled.A[name].dtype == torch.float32
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], rtol=1e-5, atol=1e-9)
    # bf16 autocast against fp32: the same preconditioned gradients to bf16's precision.
    model = small_cnn()
    ref = run_steps(model, KFACPreconditioner(model), [(x, y)])[0]
    for name in ref:
        rel = float((g1[name] - ref[name]).norm() / ref[name].norm())
        assert rel < 0.05, (name, rel)


@pytest.mark.slow
def test_an_overflow_step_leaves_the_factors_alone():
    """At a loss scale of 2^127 the scaled output gradients overflow fp32 in the factor G: that
    factor update is dropped (the running factors stay finite), and training goes on when the
    scale comes back down."""
    model = small_cnn()
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0)
    pre = KFACPreconditioner(model, grad_scaler=scaler, factor_decay=0.5)
    data = batches(3, 8)
    _amp_step(model, pre, scaler, *data[0])  # a normal first step
    factors = {k: v.clone() for k, v in pre.G.items()}
    scaler.update(new_scale=2.0**127)
    _amp_step(model, pre, scaler, *data[1])  # overflows
    assert pre.skipped_factor_updates == 1
    assert all(torch.equal(pre.G[k], factors[k]) for k in factors)
    scaler.update(new_scale=1.0)
    grads = _amp_step(model, pre, scaler, *data[2])
    assert pre.skipped_factor_updates == 1
    assert not all(torch.equal(pre.G[k], factors[k]) for k in factors)  # updated again
    assert all(torch.isfinite(g).all() for g in grads.values())
    assert all(torch.isfinite(f).all() for f in pre.G.values())

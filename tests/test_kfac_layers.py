"""The K-FAC factor convention (kfac-pytorch's scaling, docs/kfac.md): hand-computed examples,
convolutions checked against a brute-force per-position computation (padding 'same', dilation,
groups, padding modes: what kfac-pytorch gets wrong or crashes on), and kfac-pytorch itself when
it is installed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from srift.kfac import KFACPreconditioner  # noqa: E402
from srift.kfac.layers import make_layers  # noqa: E402


def test_linear_factors_by_hand():
    layer = make_layers("fc", nn.Linear(2, 2, bias=False))[0]
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    # A = x^T x / 2 = [[1+9, 2+12], [2+12, 4+16]] / 2
    torch.testing.assert_close(layer.factor_a(x), torch.tensor([[5.0, 7.0], [7.0, 10.0]]))
    g = torch.tensor([[1.0, 0.0], [2.0, 1.0]])
    # G = g^T g / 2 = [[1+4, 2], [2, 1]] / 2 (g is the gradient of the loss as computed: no batch factor)
    torch.testing.assert_close(layer.factor_g(g), torch.tensor([[2.5, 1.0], [1.0, 0.5]]))
    # The AMP loss scale (and the world size) divide g: G / scale^2.
    torch.testing.assert_close(layer.factor_g(4 * g, loss_scale=4.0), torch.tensor([[2.5, 1.0], [1.0, 0.5]]))
    with_bias = make_layers("fc", nn.Linear(2, 2))[0]
    # [x, 1]: the bias row and column are the means of x's columns and 1.
    torch.testing.assert_close(with_bias.factor_a(x), torch.tensor([[5.0, 7.0, 2.0], [7.0, 10.0, 3.0], [2.0, 3.0, 1.0]]))


def test_conv_factors_by_hand():
    """Conv2d(1, 1, 2) with bias on one 3x3 image 0..8: four positions (S = 4), N = 4 rows.
    A = sum over positions of [patch, 1][patch, 1]^T / (N S^2) = / 64; G = sum g^2 / 64."""
    layer = make_layers("conv", nn.Conv2d(1, 1, 2))[0]
    x = torch.arange(9.0).reshape(1, 1, 3, 3)
    patches = torch.tensor([[0, 1, 3, 4, 1], [1, 2, 4, 5, 1], [3, 4, 6, 7, 1], [4, 5, 7, 8, 1]], dtype=torch.float32)
    want = sum(torch.outer(p, p) for p in patches) / 64
    torch.testing.assert_close(layer.factor_a(x), want)
    assert float(layer.factor_a(x)[-1, -1]) == pytest.approx(4 / 64)  # the bias entry: 4 ones / 64
    g = torch.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    torch.testing.assert_close(layer.factor_g(g), torch.tensor([[30.0 / 64]]))


# ---- brute force ---------------------------------------------------------------------------
def _pad_amounts(conv: nn.Conv2d, dim: int) -> tuple[int, int]:
    k, d = conv.kernel_size[dim], conv.dilation[dim]
    if conv.padding == "same":
        total = d * (k - 1)
        return total // 2, total - total // 2  # torch pads the extra one at the end
    if conv.padding == "valid":
        return 0, 0
    return conv.padding[dim], conv.padding[dim]


def _brute_force(conv: nn.Conv2d, x: torch.Tensor, g: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Factors of group ``group`` from an explicit loop over samples and output positions, padding
    with numpy (an implementation independent of torch's unfold)."""
    (top, bottom), (left, right) = _pad_amounts(conv, 0), _pad_amounts(conv, 1)
    mode = {"zeros": "constant", "reflect": "reflect", "circular": "wrap", "replicate": "edge"}[conv.padding_mode]
    xp = np.pad(x.numpy(), ((0, 0), (0, 0), (top, bottom), (left, right)), mode=mode)
    cin = conv.in_channels // conv.groups
    cout = conv.out_channels // conv.groups
    channels = range(group * cin, (group + 1) * cin)
    (kh, kw), (dh, dw), (sh, sw) = conv.kernel_size, conv.dilation, conv.stride
    batch, _, ho, wo = g.shape
    rows, grads = [], []
    for b, oy, ox in itertools.product(range(batch), range(ho), range(wo)):
        patch = [xp[b, c, oy * sh + i * dh, ox * sw + j * dw] for c in channels for i in range(kh) for j in range(kw)]
        if conv.bias is not None:
            patch.append(1.0)
        rows.append(patch)
        grads.append(g[b, group * cout:(group + 1) * cout, oy, ox].numpy())
    a, gr = np.array(rows, dtype=np.float64), np.array(grads, dtype=np.float64)
    s, n = ho * wo, len(rows)
    return torch.tensor(a.T @ a / (n * s * s), dtype=torch.float32), torch.tensor(gr.T @ gr / (n * s * s), dtype=torch.float32)


CONVS = {
    "same, even kernel (uneven padding)": dict(in_channels=2, out_channels=3, kernel_size=4, padding="same"),
    "same, dilated": dict(in_channels=2, out_channels=3, kernel_size=3, padding="same", dilation=2),
    "dilated, strided": dict(in_channels=2, out_channels=3, kernel_size=3, padding=1, dilation=2, stride=2),
    "grouped": dict(in_channels=4, out_channels=6, kernel_size=3, padding=1, groups=2),
    "depthwise, same, dilated": dict(in_channels=3, out_channels=3, kernel_size=3, padding="same", dilation=2, groups=3, bias=False),
    "reflect padding, rectangular kernel": dict(in_channels=2, out_channels=2, kernel_size=(3, 2), padding=(1, 1), padding_mode="reflect"),
    "circular padding, grouped": dict(in_channels=4, out_channels=4, kernel_size=3, padding=2, padding_mode="circular", groups=2),
}


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize("name", list(CONVS))
def test_conv_factors_match_a_brute_force_computation(name):
    torch.manual_seed(0)
    conv = nn.Conv2d(**CONVS[name])
    x = torch.randn(2, conv.in_channels, 7, 8)
    out = conv(x)
    g = torch.randn_like(out)
    blocks = make_layers("c", conv)
    assert len(blocks) == conv.groups
    for block in blocks:
        want_a, want_g = _brute_force(conv, x, g, block.group)
        assert block.factor_a(x).shape == (block.a_dim, block.a_dim)
        torch.testing.assert_close(block.factor_a(x), want_a, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(block.factor_g(g), want_g, rtol=1e-4, atol=1e-6)


def test_grouped_conv_is_preconditioned_like_separate_convs():
    """A Conv2d with 2 groups gives the same preconditioned gradients as two convs holding the
    groups' weights, each seeing its half of the channels."""
    torch.manual_seed(0)
    grouped = nn.Conv2d(4, 6, 3, padding=1, groups=2)
    halves = nn.ModuleList([nn.Conv2d(2, 3, 3, padding=1) for _ in range(2)])
    with torch.no_grad():
        for j, h in enumerate(halves):
            h.weight.copy_(grouped.weight[3 * j:3 * (j + 1)])
            h.bias.copy_(grouped.bias[3 * j:3 * (j + 1)])
    x = torch.randn(4, 4, 6, 6)
    target = torch.randn(4, 6, 6, 6)
    pre_g = KFACPreconditioner(grouped, kl_clip=None, damping=0.01)
    nn.functional.mse_loss(grouped(x), target).backward()
    pre_g.step()

    class Split(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.halves = halves

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([h(p) for h, p in zip(self.halves, x.chunk(2, dim=1))], dim=1)

    split = Split()
    pre_s = KFACPreconditioner(split, kl_clip=None, damping=0.01)
    nn.functional.mse_loss(split(x), target).backward()
    pre_s.step()
    assert [l.name for l in pre_g.layers] == ["[0]", "[1]"]
    for j, h in enumerate(halves):
        torch.testing.assert_close(grouped.weight.grad[3 * j:3 * (j + 1)], h.weight.grad, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(grouped.bias.grad[3 * j:3 * (j + 1)], h.bias.grad, rtol=1e-5, atol=1e-7)


def test_unsupported_module_is_a_clear_error():
    with pytest.raises(ValueError, match="Conv1d"):
        make_layers("c", nn.Conv1d(2, 2, 3))


# ---- kfac-pytorch, when installed (test-time only; not a dependency) -----------------------
def _kfac_pytorch_helpers():
    modules = pytest.importorskip("kfac.layers.modules", reason="kfac-pytorch is not installed")
    return modules.LinearModuleHelper, modules.Conv2dModuleHelper


def _small_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 4, bias=False))


def _small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 5, 3, stride=2, bias=False),
                         nn.ReLU(), nn.Flatten(), nn.Linear(5 * 3 * 3, 4))


@pytest.mark.parametrize("make, shape", [(_small_mlp, (16, 6)), (_small_cnn, (16, 3, 8, 8))])
def test_factors_equal_kfac_pytorchs(make, shape):
    """Same model, same batch: srift's A and G equal kfac-pytorch's module helpers' factors."""
    linear_helper, conv_helper = _kfac_pytorch_helpers()
    model = make()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 4, (shape[0],), generator=torch.Generator().manual_seed(2))
    inputs, grads = {}, {}

    def capture(name):
        def hook(mod, args, out):
            inputs[name] = args[0].detach()
            out.register_hook(lambda g: grads.__setitem__(name, g.detach()))
        return hook

    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            m.register_forward_hook(capture(name))
    nn.functional.cross_entropy(model(x), y).backward()
    for name, m in model.named_modules():
        if name not in inputs:
            continue
        ours = make_layers(name, m)[0]
        theirs = (conv_helper if isinstance(m, nn.Conv2d) else linear_helper)(m)
        torch.testing.assert_close(ours.factor_a(inputs[name]), theirs.get_a_factor(inputs[name]), rtol=1e-5, atol=1e-8)
        torch.testing.assert_close(ours.factor_g(grads[name]), theirs.get_g_factor(grads[name]), rtol=1e-5, atol=1e-10)

"""K-FAC factor computation per layer kind (Linear, Conv2d), bias folded into the weight.

For a layer with weight gradient ``dW`` reshaped to ``d_G x d_A`` (bias as the last column):

* ``A = a^T a / rows`` from the layer input ``a`` (im2col patches for Conv2d, divided by the
  output spatial size ``S``; a column of ones appended when there is a bias);
* ``G = g^T g / rows`` from the output gradient ``g``, multiplied by the batch size to undo the
  loss's batch mean (and by ``S`` for Conv2d).

These are the conventions of the public K-FAC code (see shared/KFAC.md 1.1). Because both are
means over rows, averaging per-worker factors over workers with equal batches gives the factor of
the whole batch, which is what makes the distributed preconditioner equal the single-process one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class KFACLayer:
    """One registered layer.

    Attributes:
        name: Qualified module name (without a DDP ``module.`` prefix).
        module: The nn.Linear or nn.Conv2d.
        a_dim: Dimension of factor A (inputs, +1 with bias).
        g_dim: Dimension of factor G (outputs).
    """

    name: str
    module: nn.Linear | nn.Conv2d
    a_dim: int
    g_dim: int

    @property
    def has_bias(self) -> bool:
        return getattr(self.module, "bias", None) is not None

    # ---- factors ---------------------------------------------------------------------------
    # The scalings (1/S for A, B*S for G) and the bias column of ones are applied to the small
    # d x d product, not to the large row matrices: no copies of the rows beyond the one GEMM.
    def _input_rows(self, x: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Rows of the input without the bias column, and the scale applied to them."""
        m = self.module
        if isinstance(m, nn.Conv2d):
            if isinstance(m.padding, str) or m.padding_mode != "zeros":
                # Pad exactly as the layer does, then unfold without padding.
                mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
                x = F.pad(x, m._reversed_padding_repeated_twice, mode=mode)
                padding: Any = 0
            else:
                padding = m.padding
            cols = F.unfold(x, m.kernel_size, dilation=m.dilation, padding=padding, stride=m.stride)
            spatial = cols.shape[-1]
            return cols.transpose(1, 2).reshape(-1, cols.shape[1]), 1.0 / spatial
        return x.reshape(-1, x.shape[-1]), 1.0

    def _output_rows(self, grad_output: torch.Tensor) -> tuple[torch.Tensor, float]:
        batch = grad_output.shape[0]
        if isinstance(self.module, nn.Conv2d):
            spatial = grad_output.shape[2] * grad_output.shape[3]
            g = grad_output.permute(0, 2, 3, 1).reshape(-1, grad_output.shape[1])
            return g, float(batch * spatial)
        return grad_output.reshape(-1, grad_output.shape[-1]), float(batch)

    def factor_a(self, x: torch.Tensor) -> torch.Tensor:
        """Factor A of one batch (``a_dim x a_dim``, symmetric, fp32): ``a^T a / rows``."""
        with torch.autocast(x.device.type, enabled=False):  # factors in fp16 diverge
            return self._factor_a(x.detach().float())

    def _factor_a(self, x: torch.Tensor) -> torch.Tensor:
        a, scale = self._input_rows(x)
        n = a.shape[0]
        gram = a.t() @ a
        if self.has_bias:  # [[a^T a, a^T 1], [1^T a, n]] without materializing the ones column
            col = a.sum(dim=0)
            out = gram.new_empty(self.a_dim, self.a_dim)
            out[:-1, :-1] = gram
            out[:-1, -1] = col
            out[-1, :-1] = col
            out[-1, -1] = n
            gram = out
        return _sym(gram, scale * scale / n)

    def factor_g(self, grad_output: torch.Tensor, loss_scale: float = 1.0) -> torch.Tensor:
        """Factor G of one batch (``g_dim x g_dim``, symmetric, fp32): ``g^T g / rows``.

        Args:
            grad_output: Gradient of the layer output.
            loss_scale: The AMP loss scale the gradients carry (divided out).
        """
        with torch.autocast(grad_output.device.type, enabled=False):
            g, scale = self._output_rows(grad_output.detach().float())
            scale /= loss_scale
            return _sym(g.t() @ g, scale * scale / g.shape[0])

    # ---- gradients -------------------------------------------------------------------------
    def grad_matrix(self) -> torch.Tensor | None:
        """The weight gradient as ``g_dim x a_dim`` with the bias gradient as the last column."""
        w = self.module.weight
        if w.grad is None:
            return None
        grad = w.grad.reshape(w.shape[0], -1)
        if self.has_bias:
            assert self.module.bias is not None
            b = self.module.bias.grad
            bcol = torch.zeros_like(grad[:, :1]) if b is None else b.reshape(-1, 1)
            grad = torch.cat([grad, bcol], dim=1)
        return grad

    def set_grad(self, mat: torch.Tensor) -> None:
        """Write a ``g_dim x a_dim`` matrix back into the weight (and bias) gradients."""
        w = self.module.weight
        assert w.grad is not None  # set after backward, over the gradient grad_matrix read
        if self.has_bias:
            w.grad.copy_(mat[:, :-1].reshape(w.shape))
            b = self.module.bias
            assert b is not None
            if b.grad is None:
                b.grad = mat[:, -1].reshape(b.shape).clone()
            else:
                b.grad.copy_(mat[:, -1].reshape(b.shape))
        else:
            w.grad.copy_(mat.reshape(w.shape))


def damped_inverse(f: torch.Tensor, damp: float) -> torch.Tensor:
    """``(F + damp I)^-1`` of a symmetric factor by Cholesky (what srift's K-FAC and its timing
    in ``srift profile --kfac`` run)."""
    m = f.clone()
    m.diagonal().add_(damp)
    return torch.cholesky_inverse(torch.linalg.cholesky(m))


def _sym(gram: torch.Tensor, scale: float) -> torch.Tensor:
    # Exact symmetry, so packing the upper triangle loses nothing.
    return (gram + gram.t()).mul_(scale / 2)


def supported(module: nn.Module) -> bool:
    """True for layers K-FAC handles: Linear, and Conv2d without groups."""
    if isinstance(module, nn.Linear):
        return True
    return isinstance(module, nn.Conv2d) and module.groups == 1


def make_layer(name: str, module: nn.Module) -> KFACLayer:
    """Build the KFACLayer of a supported module."""
    bias = 1 if getattr(module, "bias", None) is not None else 0
    if isinstance(module, nn.Linear):
        return KFACLayer(name, module, module.in_features + bias, module.out_features)
    assert isinstance(module, nn.Conv2d), f"{name}: unsupported {type(module).__name__} (check supported() first)"
    kh, kw = module.kernel_size
    return KFACLayer(name, module, module.in_channels * kh * kw + bias, module.out_channels)

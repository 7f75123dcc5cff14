"""K-FAC factors per layer kind (Linear, Conv2d), bias folded into the weight.

The convention is kfac-pytorch's (gpauloski/kfac-pytorch, ``kfac/layers/modules.py``), so that
damping values carry over. For a layer whose weight gradient is reshaped to ``d_G x d_A`` (the bias
gradient as the last column), with ``N`` rows of data and ``S`` output positions per sample:

* Linear (input ``B x d_in`` or ``B x ... x d_in``: ``N`` = all leading positions, ``S = 1``);
  Conv2d (im2col patches of the input, ``N = B * S``, ``S = H_out * W_out``)::

      a_hat = [a, 1] / S                      (a row per sample and position; 1 when bias)
      A     = a_hat^T a_hat / N               (d_A x d_A, d_A = C_in/groups * k_h * k_w [+ 1])
      g_hat = g / S                           (g = dLoss/d output, the loss as the user computes it)
      G     = g_hat^T g_hat / N               (d_G x d_G, d_G = C_out/groups)

``g`` is the gradient of the loss the optimizer minimizes (normally a batch mean), not of a sum
over samples: this is kfac-pytorch's scaling, and it is Martens & Grosse's ``G = E[Dg Dg^T]`` of the
per-sample loss divided by ``B^2``. Under data parallelism that loss is the mean over all workers'
samples (DDP averages the gradients), so the preconditioner divides each worker's output gradient by
the world size (``loss_scale``) and averages the workers' factors: the result is the factor of the
whole batch, and the distributed preconditioner equals the single-process one on that batch.
(kfac-pytorch uses the per-worker loss, so its G grows with the square of the worker count.) See
docs/kfac.md.

What srift does beyond kfac-pytorch: ``padding='same'`` and non-zero ``padding_mode`` (the input is
padded exactly as the layer pads it), dilation (passed to the unfold), and grouped convolutions:
group ``j`` of a Conv2d with ``groups > 1`` is a layer of its own (its input channels, its output
channels, its slice of the weight), so a grouped convolution gives ``groups`` pairs of factors.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@contextmanager
def ieee_fp32() -> Iterator[None]:
    """fp32 matmuls in full IEEE precision inside, whatever the script allowed (review item P3):
    under TF32 (``allow_tf32``, ``set_float32_matmul_precision("high")``, torch 2.9's
    ``fp32_precision = "tf32"``) the factors' Gram products and the preconditioning would keep a
    10-bit mantissa, enough to make a weakly damped factor fail its Cholesky; srift prices K-FAC's
    GEMMs as FP32 (srift.perf.kfac_kernels). The script's setting is restored after, through the
    API it used: once torch 2.9's is used, the legacy flags raise when read."""
    matmul = torch.backends.cuda.matmul
    try:
        matmul.allow_tf32  # noqa: B018 (raises once the script set fp32_precision)
    except RuntimeError:
        old_new = matmul.fp32_precision
        matmul.fp32_precision = "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = old_new
        return
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


@dataclass
class KFACLayer:
    """One preconditioned block: a Linear, a Conv2d, or one group of a grouped Conv2d.

    Attributes:
        name: Key of the block: the qualified module name (without a DDP ``module.`` prefix),
            with ``[j]`` appended for group ``j`` of a grouped convolution.
        module: The nn.Linear or nn.Conv2d.
        a_dim: Dimension of factor A (inputs of the group, +1 with bias).
        g_dim: Dimension of factor G (outputs of the group).
        group: Index of the group (0 for an ungrouped layer).
        groups: Number of groups of the module (1 for Linear).
    """

    name: str
    module: nn.Module
    a_dim: int
    g_dim: int
    group: int = 0
    groups: int = 1

    @property
    def has_bias(self) -> bool:
        return getattr(self.module, "bias", None) is not None

    @property
    def module_name(self) -> str:
        return self.name.split("[", 1)[0]

    def _out_slice(self) -> slice:
        n = self.g_dim
        return slice(self.group * n, (self.group + 1) * n)

    # ---- factors ---------------------------------------------------------------------------
    # The scalings and the bias column of ones are applied to the small d x d product, not to the
    # large row matrices: no copies of the rows beyond the one GEMM.
    def _input_rows(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Rows of the input (without the bias column) and the positions per sample ``S``."""
        m = self.module
        if isinstance(m, nn.Conv2d):
            if self.groups > 1:
                cin = m.in_channels // self.groups
                x = x[:, self.group * cin : (self.group + 1) * cin]
            if isinstance(m.padding, str) or m.padding_mode != "zeros":
                # Pad exactly as the layer does ('same' may pad unevenly), then unfold unpadded.
                mode = "constant" if m.padding_mode == "zeros" else m.padding_mode
                x = F.pad(x, m._reversed_padding_repeated_twice, mode=mode)
                padding: int | tuple[int, ...] = 0
            else:
                padding = m.padding
            cols = F.unfold(x, m.kernel_size, dilation=m.dilation, padding=padding, stride=m.stride)
            return cols.transpose(1, 2).reshape(-1, cols.shape[1]), cols.shape[-1]
        return x.reshape(-1, x.shape[-1]), 1

    def _output_rows(self, grad_output: torch.Tensor) -> tuple[torch.Tensor, int]:
        if isinstance(self.module, nn.Conv2d):
            g = grad_output[:, self._out_slice()] if self.groups > 1 else grad_output
            spatial = g.shape[2] * g.shape[3]
            return g.permute(0, 2, 3, 1).reshape(-1, g.shape[1]), spatial
        return grad_output.reshape(-1, grad_output.shape[-1]), 1

    def factor_a(self, x: torch.Tensor) -> torch.Tensor:
        """Factor A of one batch (``a_dim x a_dim``, symmetric, fp32)."""
        with torch.autocast(x.device.type, enabled=False), ieee_fp32():  # factors in fp16 (or TF32) diverge
            return self._factor_a(x.detach().float())

    def _factor_a(self, x: torch.Tensor) -> torch.Tensor:
        a, spatial = self._input_rows(x)
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
        return _sym(gram, 1.0 / (n * spatial * spatial))

    def factor_g(self, grad_output: torch.Tensor, loss_scale: float = 1.0) -> torch.Tensor:
        """Factor G of one batch (``g_dim x g_dim``, symmetric, fp32).

        Args:
            grad_output: Gradient of the layer output.
            loss_scale: Divided out of the gradient: the AMP loss scale, times the world size under
                data parallelism.
        """
        with torch.autocast(grad_output.device.type, enabled=False), ieee_fp32():
            g, spatial = self._output_rows(grad_output.detach().float())
            n = g.shape[0]
            return _sym(g.t() @ g, 1.0 / (n * spatial * spatial * loss_scale * loss_scale))

    # ---- gradients -------------------------------------------------------------------------
    def grad_matrix(self) -> torch.Tensor | None:
        """The weight gradient as ``g_dim x a_dim`` with the bias gradient as the last column."""
        w: torch.Tensor = self.module.weight  # type: ignore[assignment]
        if w.grad is None:
            return None
        rows = self._out_slice()
        grad = w.grad[rows].reshape(self.g_dim, -1)
        if self.has_bias:
            b: torch.Tensor | None = self.module.bias.grad  # type: ignore[assignment]
            bcol = torch.zeros_like(grad[:, :1]) if b is None else b[rows].reshape(-1, 1)
            grad = torch.cat([grad, bcol], dim=1)
        return grad

    def set_grad(self, mat: torch.Tensor) -> None:
        """Write a ``g_dim x a_dim`` matrix back into the weight (and bias) gradients."""
        w: torch.Tensor = self.module.weight  # type: ignore[assignment]
        assert w.grad is not None  # set_grad follows grad_matrix
        rows = self._out_slice()
        shape = w[rows].shape
        if self.has_bias:
            w.grad[rows].copy_(mat[:, :-1].reshape(shape))
            b: torch.Tensor = self.module.bias  # type: ignore[assignment]
            if b.grad is None:
                b.grad = torch.zeros_like(b)
            b.grad[rows].copy_(mat[:, -1])
        else:
            w.grad[rows].copy_(mat.reshape(shape))


def damped_inverse(f: torch.Tensor, damp: float | torch.Tensor) -> torch.Tensor:
    """``(F + damp I)^-1`` of a symmetric factor by Cholesky: what the ``inverse`` method runs,
    and what ``srift profile --kfac`` and scripts/measure_kfac_kernels.py time.

    Raises:
        torch.linalg.LinAlgError: when ``F + damp I`` is not positive definite.
    """
    inv, info = damped_inverse_ex(f, damp)
    if int(info):
        raise torch.linalg.LinAlgError(f"the damped factor is not positive definite (Cholesky info {int(info)})")
    return inv


def damped_inverse_ex(f: torch.Tensor, damp: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``damped_inverse`` without a host sync (review item P1): the inverse and Cholesky's ``info``
    (a device tensor, 0 when ``F + damp I`` is positive definite), for the caller to check once
    for many factors. ``damp`` may be a device tensor (0-dimensional)."""
    m = f.clone()
    m.diagonal().add_(damp)
    chol, info = torch.linalg.cholesky_ex(m)
    return torch.cholesky_inverse(chol), info


def eigen_decomposition(f: torch.Tensor) -> torch.Tensor:
    """The ``eigen`` method's result: eigenvectors ``Q`` (columns) with the eigenvalues, clamped at
    0, as an extra last row: a ``(d + 1) x d`` tensor (one tensor to keep, send and checkpoint)."""
    evals, evecs = torch.linalg.eigh(f)
    return torch.cat([evecs, evals.clamp_min(0.0)[None, :]], dim=0)


def _sym(gram: torch.Tensor, scale: float) -> torch.Tensor:
    # Exact symmetry, so packing the upper triangle loses nothing.
    return (gram + gram.t()).mul_(scale / 2)


def supported(module: nn.Module) -> bool:
    """True for the layers K-FAC preconditions: Linear and Conv2d (grouped included)."""
    return isinstance(module, (nn.Linear, nn.Conv2d))


def make_layers(name: str, module: nn.Module) -> list[KFACLayer]:
    """The K-FAC blocks of a supported module: one, or one per group of a grouped Conv2d.

    Raises:
        ValueError: for an unsupported module.
    """
    bias = 1 if getattr(module, "bias", None) is not None else 0
    if isinstance(module, nn.Linear):
        return [KFACLayer(name, module, module.in_features + bias, module.out_features)]
    if not isinstance(module, nn.Conv2d):
        raise ValueError(f"K-FAC supports nn.Linear and nn.Conv2d, not {type(module).__name__} ('{name}')")
    kh, kw = module.kernel_size
    g = module.groups
    a_dim = module.in_channels // g * kh * kw + bias
    if g == 1:
        return [KFACLayer(name, module, a_dim, module.out_channels)]
    return [KFACLayer(f"{name}[{j}]", module, a_dim, module.out_channels // g, j, g) for j in range(g)]

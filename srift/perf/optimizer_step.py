"""How many dispatches an optimizer step costs: PyTorch's per-tensor loop or its multi-tensor
(``foreach``) kernels.

The optimizer step is priced by srift/perf/compute.py ``optimizer_time_s``: its bytes at memory
bandwidth plus ``dispatches x optimizer_s_per_tensor`` (the fitted cost of one layer pass). How
many dispatches depends on the PyTorch the job runs (a named behaviour, not a fit):

- ``PER_TENSOR``: before PyTorch 2.0, ``torch.optim`` (SGD, Adam, AdamW) looped over the
  parameters in Python, a handful of small kernels per tensor: one dispatch per tensor.
- ``FOREACH``: since PyTorch 2.0 ``torch.optim`` defaults to the multi-tensor implementation on
  CUDA (``_default_to_fused_or_foreach`` in torch/optim/optimizer.py, read in torch 2.13.0):
  each of the step's few element-wise ops is one ``multi_tensor_apply`` launch per list of up to
  ``depth_to_max_tensors`` tensors (48 for a depth-3 list: parameter, gradient, momentum; 36 for
  Adam's depth 4; torch/include/ATen/native/cuda/MultiTensorApply.cuh, CUDA before 13), so a
  step is one dispatch per ``FOREACH_TENSORS_PER_LAUNCH`` tensors.

Which one a job runs comes from the PyTorch version it states (a profile's
``framework["torch"]``; the measured rows' ``torch_version`` column, from each data folder's
README); a job that states none runs today's PyTorch: ``FOREACH``.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable

from srift.profile import LayerProfile


class OptimizerStep(str, enum.Enum):
    """How ``torch.optim`` updates the parameters (see the module docstring)."""

    PER_TENSOR = "per-tensor"
    FOREACH = "foreach"


# The first PyTorch whose torch.optim defaults to foreach on CUDA (PyTorch 2.0 release notes;
# torch/optim/optimizer.py ``_default_to_fused_or_foreach``).
FOREACH_DEFAULT_SINCE = (2, 0)
# Tensors one multi_tensor_apply launch takes for a depth-3 list (MultiTensorApply.cuh,
# ``depth_to_max_tensors = {110, 64, 48, 36, 30}`` before CUDA 13).
FOREACH_TENSORS_PER_LAUNCH = 48


def step_kind(torch_version: str | None) -> OptimizerStep:
    """The optimizer-step kind of a PyTorch version (``"1.11.0+cu115"``, ``"2.3"``, ``"1"``); ``FOREACH``
    when the version is not stated or not readable."""
    m = re.match(r"\s*(\d+)(?:\.(\d+))?", torch_version or "")
    if m is None:
        return OptimizerStep.FOREACH
    version = (int(m.group(1)), int(m.group(2) or 0))
    return OptimizerStep.FOREACH if version >= FOREACH_DEFAULT_SINCE else OptimizerStep.PER_TENSOR


def step_dispatches(kind: OptimizerStep, n_tensors: int) -> int:
    """Dispatches (each priced at the compute model's ``launch_s``) of one optimizer step."""
    if n_tensors <= 0:
        return 0
    if kind is OptimizerStep.PER_TENSOR:
        return n_tensors
    return math.ceil(n_tensors / FOREACH_TENSORS_PER_LAUNCH)


def param_tensor_count(layers: Iterable[LayerProfile]) -> int:
    """Parameter tensors the optimizer updates: each trainable layer's ``param_tensors`` (ResNet-50:
    53 bias-free convolutions, 53 batch norms and the fc, 161 as ``len(list(model.parameters()))``);
    a layer of a profile that did not record it counts a weight and a bias (2)."""
    return sum((2 if l.param_tensors is None else l.param_tensors) for l in layers if l.params > 0)

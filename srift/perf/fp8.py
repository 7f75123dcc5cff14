"""FP8 GEMMs as Transformer Engine runs them in a bf16 job (no torch): the GEMMs' FLOPs at the
GPU's FP8 tensor-core peak, plus the casts the recipe adds.

Transformer Engine's FP8 recipes keep weights, activations, gradients and communication in bf16
and run the linear layers' GEMMs on FP8 operands. srift models a layer's FP8 time as

    t_fp8 = (t_bf16 - launch) x bf16_peak / fp8_peak + launch + cast_bytes / memory_rate

- ``t_bf16``: the compute model's bf16 time of the GEMM (srift/perf/compute.py), ``launch`` its
  fixed cost per layer pass (``launch_s``, which FP8 does not shorten); the fitted efficiency is
  taken to hold at the FP8 peak (``fp8_tflops`` in configs/gpus.yaml, the datasheet's
  dense rate). An *estimate*: no FP8 GEMM was measured to fit it.
- ``cast_bytes``: each FP8 GEMM's activation operand is quantized by a pass of its own: forward
  its input (rows x in), backward its output gradient (rows x out). The pass reads the bf16
  tensor (2 bytes an element) and writes two FP8 copies (rowwise and columnwise, 1 byte each: the
  weight-gradient GEMM reads the transposed one), ``CAST_BYTES_PER_ELEMENT`` 4 in all. Per-tensor
  scaling (``tensorwise``: Hopper's FP8, current or delayed scaling) reads the tensor once more
  for its amax (``AMAX_BYTES_PER_ELEMENT`` 2); MXFP8 (Blackwell) computes its per-32-element
  scales inside the quantizing pass. Weights are quantized once per optimizer step, not per
  micro-batch (Megatron-Core's first-micro-batch weight cache), and left out. Fusions of the
  quantization into a preceding norm or activation, which Transformer Engine does for some
  layers, are not modelled: the casts are an upper estimate.
- NVFP4 (``nvfp4``: Transformer Engine's ``NVFP4BlockScaling``, transformer_engine 2.20.2,
  ``transformer_engine/common/recipe/__init__.py``): the GEMMs at the GPU's dense FP4 peak
  (``fp4_tflops``); values in 4-bit E2M1 with an E4M3 scale per 16 consecutive values and one FP32
  scale per tensor (an amax pass, as per-tensor FP8); weights scaled per 16 x 16 block; inputs and
  gradients take a 16 x 16 random Hadamard transform (columnwise, for the weight gradient) and
  gradients stochastic rounding, both taken to run inside the quantizing pass (16 multiply-adds an
  element: memory-bound like the pass itself; an estimate). The recipe leaves attention
  unquantized (``fp8_dpa = False``) and keeps weights, activations and communication in the job's
  precision, as the FP8 recipes do. No NVFP4 run was measured: its predictions say so.
- Which GEMMs: every ``Linear`` of a decoder block and the routed experts, except the MoE router
  (Megatron-Core keeps it in fp32) and the output head and embedding (outside the blocks);
  attention's batched GEMMs (``ScaledDotProductAttention``) stay bf16, Transformer Engine's
  default, unless the job sets ``fp8_dot_product_attention`` (``fp8_attention_s``: the attention
  pass at the FP8 peak). A gated MLP's gate and up projections are one GEMM in Megatron-Core
  (``linear_fc1``): its input is quantized once (``fp8_times(fused_fc1=True)``, ``fused_with_gate``),
  the grouped experts' too; PyTorch and torchao (torchtitan) run them as two Linears, each
  quantizing it.
"""

from __future__ import annotations

import numpy as np

from srift.hardware import gpu as gpu_spec
from srift.hardware import GpuSpec
from srift.job import FP8_RECIPES, MXFP8, NVFP4, TENSORWISE, Fp8Recipe
from srift.perf.compute import LayerTimes, kernel_rates
from srift.profile import Profile

CAST_BYTES_PER_ELEMENT = 4.0  # read bf16 (2), write rowwise and columnwise FP8 copies (1 + 1)
AMAX_BYTES_PER_ELEMENT = 2.0  # per-tensor scaling's amax pass reads the bf16 tensor once more
# Bytes per element of the FP8 copy a GEMM keeps of its input for the weight gradient: 1, and
# MXFP8's one 8-bit scale per 32 elements (Transformer Engine keeps the quantized tensor, not bf16).
FP8_ELEMENT_BYTES = 1.0
MXFP8_BLOCK = 32
FP4_ELEMENT_BYTES = 0.5  # E2M1
NVFP4_BLOCK = 16  # one E4M3 (1-byte) scale per 16 values (rowwise or columnwise)
NVFP4_WEIGHT_BLOCK = 16 * 16  # weights: one scale per 16 x 16 block
ROUTER_SUFFIX = ".router"  # the MoE router's Linear (srift/zoo/llm.py), kept in fp32 by Megatron-Core
UP_SUFFIX, GATE_SUFFIX = "up_proj", "gate_proj"  # a gated MLP's projections (srift/zoo/llm.py names)


def fp8_gemm(layer_type: str, name: str, unit: str | None) -> bool:
    """True when a profile layer is a GEMM Transformer Engine runs in FP8 (module docstring)."""
    return layer_type == "Linear" and unit is not None and not name.endswith(ROUTER_SUFFIX)


# MXFP8's per-32-element scales are applied by block-scaled tensor cores, which Blackwell
# (compute capability 10.0) introduced; Hopper runs per-tensor scaling only.
MXFP8_MIN_COMPUTE_CAPABILITY = 10.0


def gemm_peak_flops(spec: GpuSpec, recipe: Fp8Recipe) -> float:
    """The dense tensor-core peak (FLOP/s) ``recipe``'s GEMMs run at on ``spec``: FP4's for NVFP4,
    FP8's otherwise; the bf16 peak where the GPU has neither (a bound, for the search)."""
    tflops = spec.fp4_tflops if recipe == NVFP4 else spec.fp8_tflops
    return tflops * 1e12 if tflops else spec.peak_flops("bf16")


def fp8_unsupported(gpu: str, recipe: Fp8Recipe) -> str | None:
    """Why ``gpu`` cannot run FP8 GEMMs under ``recipe`` (for messages), or None when it can."""
    spec = gpu_spec(gpu)
    if recipe == NVFP4 and not spec.fp4_tflops:
        return f"the {spec.name} has no NVFP4 tensor cores (no fp4_tflops in configs/gpus.yaml; Blackwell's)"
    if not spec.fp8_tflops:
        return f"the {spec.name} has no FP8 tensor cores (no fp8_tflops in configs/gpus.yaml)"
    cc = float(spec.compute_capability) if spec.compute_capability else 0.0
    if recipe == MXFP8 and cc < MXFP8_MIN_COMPUTE_CAPABILITY:
        return f"the {spec.name} (compute capability {spec.compute_capability}) has no MXFP8 tensor cores (Blackwell's)"
    return None


def fp8_saved_bytes(recipe: Fp8Recipe) -> float:
    """Bytes per element of a GEMM input kept for backward in FP8 under ``recipe``."""
    if recipe not in FP8_RECIPES:
        raise ValueError(f"FP8 recipe must be one of {FP8_RECIPES}, got {recipe!r}")
    if recipe == NVFP4:
        return FP4_ELEMENT_BYTES + FP8_ELEMENT_BYTES / NVFP4_BLOCK
    return FP8_ELEMENT_BYTES + (FP8_ELEMENT_BYTES / MXFP8_BLOCK if recipe == MXFP8 else 0.0)


def fp8_weight_cache_bytes(recipe: Fp8Recipe) -> float:
    """Bytes per parameter of the FP8 copies of a GEMM's weight that Transformer Engine casts at a
    step's first micro-batch and keeps for the rest (its weight workspace): a rowwise and a
    columnwise (transposed) copy, ``fp8_saved_bytes`` each (NVFP4: 4-bit values, one scale per
    16 x 16 block)."""
    if recipe == NVFP4:
        return 2.0 * (FP4_ELEMENT_BYTES + FP8_ELEMENT_BYTES / NVFP4_WEIGHT_BLOCK)
    return 2.0 * fp8_saved_bytes(recipe)


def fp8_cast_bytes_per_element(recipe: Fp8Recipe) -> float:
    """Bytes one quantizing pass moves per element of a GEMM's activation operand under ``recipe``
    (module docstring): ``CAST_BYTES_PER_ELEMENT``, plus ``AMAX_BYTES_PER_ELEMENT`` per-tensor;
    NVFP4 reads the bf16 tensor (2), writes two copies of ``fp8_saved_bytes`` and reads it once
    more for its per-tensor amax."""
    if recipe == NVFP4:
        return 2.0 + 2.0 * fp8_saved_bytes(recipe) + AMAX_BYTES_PER_ELEMENT
    return CAST_BYTES_PER_ELEMENT + (AMAX_BYTES_PER_ELEMENT if recipe == TENSORWISE else 0.0)


def fp8_peak_ratio(gpu: str, recipe: Fp8Recipe = TENSORWISE) -> float:
    """``bf16_peak / low_precision_peak`` of ``gpu`` under ``recipe`` (configs/gpus.yaml: ``fp8_tflops``,
    NVFP4's ``fp4_tflops``).

    Raises:
        ValueError: for a GPU without the recipe's tensor cores.
    """
    spec = gpu_spec(gpu)
    if not (spec.fp4_tflops if recipe == NVFP4 else spec.fp8_tflops):
        key = "fp4_tflops" if recipe == NVFP4 else "fp8_tflops"
        raise ValueError(f"{spec.name} has no {'NVFP4' if recipe == NVFP4 else 'FP8'} tensor cores (no {key} in configs/gpus.yaml)")
    return spec.peak_flops("bf16") / gemm_peak_flops(spec, recipe)


def fused_with_gate(name: str, names: set[str]) -> bool:
    """True for a gated MLP's up projection (``...up_proj`` beside a ``...gate_proj`` in ``names``):
    Megatron-Core runs the two as one GEMM (``linear_fc1``), whose input is quantized once."""
    return name.endswith(UP_SUFFIX) and name[: -len(UP_SUFFIX)] + GATE_SUFFIX in names


def fp8_attention_s(bf16_s: float, gpu: str) -> float:
    """Seconds of a fused attention pass of ``bf16_s`` in bf16 when Transformer Engine runs it in FP8
    (``fp8_dot_product_attention``: cuDNN's FP8 flash attention, its two batched GEMMs on FP8
    operands): the FLOP-bound pass less its launch at ``bf16_peak / fp8_peak``, as ``fp8_times``
    prices a GEMM. Its Q, K, V casts are fused into the preceding kernels and left out."""
    launch = kernel_rates(gpu, "bf16").launch_s
    return (bf16_s - launch) * fp8_peak_ratio(gpu) + launch


def fp8_times(profile: Profile, times: LayerTimes, gpu: str, recipe: Fp8Recipe,
              fused_fc1: bool = False, cast_shards: int = 1, gathered_width: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds per layer of ``profile`` (bf16 ``times`` on ``gpu``) with its
    FP8 GEMMs (``fp8_gemm``) under ``recipe``; other layers keep their bf16 times. ``fused_fc1``:
    a gated MLP's gate and up projections are one GEMM (Megatron-Core's ``linear_fc1``), whose
    input is quantized once. ``cast_shards``: torchao's float8 tensor parallelism quantizes a
    tensor it all-gathers on its sequence shard, before the gather (``Float8ColwiseParallel``'s
    inputs, ``Float8RowwiseParallel``'s output gradients): the inputs ``gathered_width`` wide and
    the output gradients that wide are cast on ``1 / cast_shards`` of their rows.

    Raises:
        ValueError: for an unknown recipe or a GPU without FP8 tensor cores.
    """
    if recipe not in FP8_RECIPES:
        raise ValueError(f"FP8 recipe must be one of {FP8_RECIPES}, got {recipe!r}")
    ratio = fp8_peak_ratio(gpu, recipe)
    per_element = fp8_cast_bytes_per_element(recipe)
    rates = kernel_rates(gpu, "bf16")
    s_per_byte, launch = 1.0 / rates.memory_bytes_per_s, rates.launch_s
    fwd, bwd = times.fwd_s.astype(float).copy(), times.bwd_s.astype(float).copy()
    names = {layer.name for layer in profile.layers}
    for i, layer in enumerate(profile.layers):
        if not fp8_gemm(layer.type, layer.name, layer.unit) or layer.kfac_a_dim is None or layer.kfac_g_dim is None:
            continue
        rows = profile.batch_size * (layer.kfac_spatial or 1)
        in_rows = rows / cast_shards if layer.kfac_a_dim == gathered_width else rows
        grad_rows = rows / cast_shards if layer.kfac_g_dim == gathered_width else rows
        cast_in = 0.0 if fused_fc1 and fused_with_gate(layer.name, names) else \
            in_rows * layer.kfac_a_dim * per_element * s_per_byte
        fwd[i] = (fwd[i] - launch) * ratio + launch + cast_in
        bwd[i] = (bwd[i] - launch) * ratio + launch + grad_rows * layer.kfac_g_dim * per_element * s_per_byte
    return fwd, bwd

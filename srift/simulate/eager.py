"""Hugging Face Transformers' eager modelling code (``--stack hf-trainer``: configs/stacks.yaml
``fused_kernels: transformers-eager``) as a transform of an analytic decoder profile.

srift's analytic decoder profile (srift/zoo/decoder_layers.py) counts one read and one write for a
norm and an activation, and nothing for the residual sums, the gated MLP's product or the rotary
embedding's application: what fused kernels (Transformer Engine, torch.compile, Liger) move. The
Transformers Trainer runs the model's own PyTorch code, where each of these is a chain of separate
kernels. Counted per element from transformers 4.56.1 ``transformers/models/llama/modeling_llama.py``
(Mistral's and Qwen2's files are the same code), with ``e`` the activation element size:

- ``LlamaRMSNorm.forward``: ``to(float32)`` (read e, write 4), ``pow(2)`` (4 + 4), ``mean`` (4),
  the product with ``rsqrt`` (4 + 4), ``to(input_dtype)`` (4 + e), the product with the weight
  (e + e): 28 + 4e bytes, of which the profile has 2e. Its backward, op by op through autograd:
  the weight product (e + e), the cast back (e + 4), the ``rsqrt`` product's two gradients (4 + 4
  and 4 + 4 + 4 + 4: the input's and the row sums'), ``pow``'s (4 + 4 + 4), the sum of the
  input's two gradients (4 + 4 + 4), the first cast (4 + e): 56 + 4e, of which the profile has 4e.
- The residual sums (``residual + hidden_states``, two a block): read 2e, write e, forward; the
  backward sums the two gradients of the residual stream, the same.
- A gated MLP's ``act_fn(gate_proj(x)) * up_proj(x)``: forward 3e per element of the intermediate
  width; backward two products (3e each).
- ``apply_rotary_pos_emb`` on the query and the key: ``q * cos`` (3e), ``rotate_half`` (the
  negated half, e; ``torch.cat``, 2e), ``* sin`` (3e), the sum (3e) = 12e per element of q and of
  k; the backward as many.

Each chain is one element-wise leaf (no FLOPs, its bytes), priced at the compute model's memory
rate as any element-wise layer; they keep nothing the profile does not count already (the memory
model is unchanged). A measured profile (``srift profile`` on the user's script) timed these
kernels as they ran and is not transformed.
"""

from __future__ import annotations

import dataclasses

from srift.perf.compute import ATTENTION, layer_kind
from srift.profile import LayerProfile, Profile

FP32 = 4.0


def norm_extra_bytes(e: float) -> tuple[float, float]:
    """Bytes per element an eager RMSNorm moves beyond the profile's (forward, backward)."""
    fwd = (e + FP32) + 2 * FP32 + FP32 + 2 * FP32 + (FP32 + e) + 2 * e  # 28 + 4e
    bwd = 2 * e + (e + FP32) + 2 * FP32 + 4 * FP32 + 3 * FP32 + 3 * FP32 + (FP32 + e)  # 56 + 4e
    return fwd - 2 * e, bwd - 4 * e


def _leaf(name: str, kind: str, unit: str | None, fwd: float, bwd: float) -> LayerProfile:
    return LayerProfile(name=name, type=kind, fwd_bytes=fwd, bwd_bytes=bwd, unit=unit)


def _width(layer: LayerProfile) -> int:
    return int(layer.kfac_g_dim or 0)


def eager_profile(profile: Profile) -> Profile:
    """``profile`` with the eager chains of Transformers' decoder code added (module docstring);
    a measured profile, or one without RMSNorm blocks (not a Llama-family decoder), as it is."""
    if profile.measured or not any(x.type == "RMSNorm" and x.unit is not None for x in profile.layers):
        return profile
    tokens = float(profile.batch_size * (profile.seq_len or 1))
    rotary = any("rotary" in x.type.lower() for x in profile.layers)
    layers: list[LayerProfile] = []
    for i, layer in enumerate(profile.layers):
        name, unit = layer.name, layer.unit
        if layer.type == "RMSNorm" and layer.params > 0:
            n = tokens * layer.params  # the weight is one per channel
            e = layer.activation_bytes / n
            fwd, bwd = norm_extra_bytes(e)
            layers.append(layer)
            layers.append(_leaf(f"{name}.fp32_chain", "Fp32CastMul", unit, fwd * n, bwd * n))
            if unit is not None:  # the block's residual sum after the sublayer this norm feeds
                layers.append(_leaf(f"{name}.residual_add", "Add", unit, 3 * e * n, 3 * e * n))
            continue
        if layer_kind(layer.type) == ATTENTION and rotary:
            qk = [x for x in profile.layers[:i] if x.unit == unit and x.name.endswith(("q_proj", "k_proj"))]
            if len(qk) == 2 and all(_width(x) for x in qk):
                e = qk[0].activation_bytes / (tokens * _width(qk[0]))
                n = tokens * sum(_width(x) for x in qk)
                layers.append(_leaf(f"{name}.rotary_apply", "RotaryMul", unit, 12 * e * n, 12 * e * n))
        layers.append(layer)
        if name.endswith("mlp.up_proj") and any(x.unit == unit and x.name.endswith("mlp.act_fn") for x in profile.layers[:i]):
            n = tokens * _width(layer)
            e = layer.activation_bytes / n if n else 2.0
            layers.append(_leaf(f"{name}.gated_product", "Mul", unit, 3 * e * n, 6 * e * n))
    return dataclasses.replace(profile, layers=layers,
                               notes=[*profile.notes, "Transformers' eager element-wise chains counted (norms, residual "
                                      "sums, gated product, rotary embedding; srift/simulate/eager.py)"])

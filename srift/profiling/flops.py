"""Structural analysis of a model: per leaf module, FLOPs, bytes, parameters, gradient order, K-FAC dims.

Used by the zoo (structural profiles, on the meta device: no memory, no time) and by the script
profiler (on the user's model, one extra untimed step).

FLOPs come from torch's own FlopCounterMode (2 FLOPs per multiply-add; matmuls and convolutions
only, as torch counts them), attributed to modules by its module tracker; an operation counts as
backward when it runs inside an autograd graph task (what torch's ModuleTracker.is_bw checks), so
the step may run several forward/backward passes (gradient accumulation) or call backward itself.

Recomputation under activation checkpointing (a leaf's forward run again inside backward) is not
counted: the FLOPs, bytes and activations are those of one forward and one backward; the predictor
adds the recomputation a checkpointing policy implies.

Bytes are estimates: ``fwd_bytes`` = inputs + outputs + parameters of the module (each read or
written once); ``bwd_bytes`` = twice that (read the output gradient, inputs and weights; write the
input and weight gradients). ``activation_bytes`` = the module's output bytes (what autograd keeps),
plus, for attention cores, the attention probabilities.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

from srift.profile import CAUSAL_FRACTION, LayerProfile
from srift.profiling.tensors import first_tensor, tensor_bytes


_GLOBAL = "Global"  # the module tracker's name for "outside every module"
_SDPA_MATH = "sdpa-math"  # the key of FLOPs scaled_dot_product_attention ran as plain matmuls (its math fallback)
OPS_SUFFIX = ".(ops)"  # the layer of FLOPs a non-leaf module runs outside its leaves: "<module>.(ops)"


def _total(counts: dict[Any, int]) -> float:
    return float(sum(counts.values()))


class _NoTracker:
    """Stands in for FlopCounterMode's ModuleTracker, which charges backward ops to every module
    whose output gradient arrived and whose input gradient it never saw leave: a module returning
    its input (``Identity``, ``Dropout(p=0)``) never leaves, and every later backward op was
    charged to it (issue 41: a nanoGPT profile's backward at 14x its forward). ``_NodeOwners``
    attributes ops instead."""

    parents: set[str] = set()

    def __enter__(self) -> "_NoTracker":
        return self

    def __exit__(self, *args: Any) -> None:
        pass


class _NodeOwners:
    """Which module each autograd node belongs to: the module whose forward created it.

    Pre/post hooks on every module of the model keep a stack of the modules running. At a module's
    pre-hook, the nodes reachable from its inputs that no module claimed yet were made by the
    module running it (its parent's own ops: residual adds, functional attention); at its post-hook,
    the unclaimed nodes reachable from its outputs were made by the module itself. The claim is
    written in the node's ``metadata``, which lives as long as the node. A module that returns its
    input makes no node and claims nothing. In backward, an op runs inside one node (the engine's
    current node): its FLOPs belong to that node's module, whatever modules sit between layers.

    Args:
        model: The model (every module gets the two hooks, removed by ``remove``).
        keys: Each module's key (``Root.path``, as the FLOP counts are keyed).
    """

    KEY = "srift_module"

    def __init__(self, model: nn.Module, keys: dict[nn.Module, str]) -> None:
        self.keys = keys
        self.stack: list[str] = []
        # Depth of module calls running inside the autograd engine: a recomputation (activation
        # checkpointing), whose ops are neither forward nor backward work of the step.
        self.recomputing = 0
        self.handles = []
        for m in model.modules():
            self.handles.append(m.register_forward_pre_hook(self._pre, with_kwargs=True))
            # always_call: non-reentrant checkpointing stops a recomputation by raising inside a module.
            self.handles.append(m.register_forward_hook(self._post, with_kwargs=True, always_call=True))

    def current(self) -> str:
        """The module whose work runs now: in backward, the owner of the engine's current node;
        in forward, the innermost module running (``_GLOBAL`` outside the model)."""
        if torch._C._current_graph_task_id() != -1:
            node = torch._C._current_autograd_node()
            return _meta(node).get(self.KEY, _GLOBAL) if node is not None else _GLOBAL
        return self.stack[-1] if self.stack else _GLOBAL

    def _pre(self, mod: nn.Module, args: Any, kwargs: Any) -> None:
        if torch._C._current_graph_task_id() != -1:
            self.recomputing += 1
        self._claim((args, kwargs), self.stack[-1] if self.stack else _GLOBAL)
        self.stack.append(self.keys.get(mod, _GLOBAL))

    def _post(self, mod: nn.Module, args: Any, kwargs: Any, out: Any) -> None:
        if self.stack:
            self._claim(out, self.stack.pop())
        if self.recomputing and torch._C._current_graph_task_id() != -1:
            self.recomputing -= 1

    def _claim(self, obj: Any, key: str) -> None:
        todo = [t.grad_fn for t in _tensors(obj) if t.grad_fn is not None]
        while todo:
            node = todo.pop()
            meta = _meta(node)
            if self.KEY in meta:
                continue
            meta[self.KEY] = key
            todo += [n for n, _ in node.next_functions if n is not None]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


def _meta(node: Any) -> dict[str, Any]:
    """An autograd node's metadata dict (kept on the C++ node, for as long as it lives)."""
    meta: dict[str, Any] = node.metadata
    return meta


def _tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor in ``obj`` (nested tuples, lists, dicts, dataclass-like outputs' values)."""
    out: list[torch.Tensor] = []
    todo = [obj]
    while todo:
        o = todo.pop()
        if isinstance(o, torch.Tensor):
            out.append(o)
        elif isinstance(o, (tuple, list)):
            todo += o
        elif isinstance(o, dict):
            todo += o.values()
    return out


class _PhaseFlopCounter(FlopCounterMode):
    """FlopCounterMode that counts each op once, for the module that owns it (``_NodeOwners``),
    and keeps the FLOPs counted during backward apart."""

    def __init__(self, recorder: "_LeafRecorder | None" = None, leaf_keys: frozenset[str] = frozenset(),
                 owners: _NodeOwners | None = None) -> None:
        super().__init__(display=False, custom_mapping=_cpu_attention_formulas())
        self.mod_tracker = _NoTracker()  # type: ignore[assignment]
        self.owners = owners
        self.bwd_flops: dict[str, float] = defaultdict(float)
        self.recorder = recorder
        # FLOPs of ops that run in no leaf (functional SDPA inside an HF attention module), per op, for
        # the innermost module running them; with the leaves run before its first one (its place).
        self.leaf_keys = leaf_keys
        self.own_fwd: dict[str, dict[Any, float]] = defaultdict(lambda: defaultdict(float))
        self.own_bwd: dict[str, dict[Any, float]] = defaultdict(lambda: defaultdict(float))
        self.first_leaf: dict[str, int] = {}
        self.in_sdpa = 0  # inside F.scaled_dot_product_attention (its math fallback runs plain bmm)

    def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
        # Same as FlopCounterMode._count_flops, for the op's owner only, plus the backward split,
        # less recomputation.
        recomputing = (self.recorder is not None and self.recorder.recomputing) or (
            self.owners is not None and self.owners.recomputing)
        if func_packet in self.flop_registry and not recomputing:
            n = self.flop_registry[func_packet](*args, **kwargs, out_val=out) * causal_factor(func_packet, args, kwargs)
            in_backward = torch._C._current_graph_task_id() != -1
            key = self.owners.current() if self.owners is not None else _GLOBAL
            self.flop_counts[key][func_packet] += n
            if in_backward:
                self.bwd_flops[key] += n
            if self.leaf_keys and key not in self.leaf_keys:
                self._count_own({key}, func_packet, n, in_backward)
        return out

    def _count_own(self, parents: set[str], func_packet: Any, n: float, in_backward: bool) -> None:
        # The tracker names modules by their path ("Root.blocks.0.attn"): the deepest is innermost.
        inner = max((p for p in parents if p != _GLOBAL), key=lambda p: p.count("."), default=None)
        if inner is None:  # outside the model (the loss)
            return
        op = _SDPA_MATH if self.in_sdpa and not _is_attention(func_packet) else func_packet
        (self.own_bwd if in_backward else self.own_fwd)[inner][op] += n
        if not in_backward and self.recorder is not None:
            self.first_leaf.setdefault(inner, len(self.recorder.order))


def _cpu_attention_formulas() -> dict[Any, Callable[..., int]]:
    """FLOP formulas for the CPU's fused SDPA kernel and its backward, which torch's registry lacks
    (it has CUDA's): the same ``4 b s^2 h d`` forward and its backward as torch counts on CUDA."""
    from torch.utils import flop_counter

    fwd_op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd_op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    fwd_count = getattr(flop_counter, "sdpa_flop_count", None)
    bwd_count = getattr(flop_counter, "sdpa_backward_flop_count", None)
    if fwd_op is None or bwd_op is None or fwd_count is None or bwd_count is None:  # older torch
        return {}

    def fwd(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return int(fwd_count(query, key, value))

    def bwd(grad_out: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return int(bwd_count(grad_out, query, key, value))

    return {fwd_op: fwd, bwd_op: bwd}


def causal_factor(func_packet: Any, args: Any, kwargs: dict[str, Any]) -> float:
    """``CAUSAL_FRACTION`` for a fused attention kernel (flash, memory-efficient, cuDNN: CUDA's
    SDPA) called causal, else 1 (review item M16): torch's formulas count the full ``4 b s^2 h d``
    whatever the mask, while a causal kernel skips the masked half, as srift's LLM profiles count."""
    if not _is_attention(func_packet):
        return 1.0
    try:
        names = [a.name for a in func_packet.default._schema.arguments]
    except AttributeError:
        return 1.0
    for name, causal in (("is_causal", lambda v: bool(v)), ("custom_mask_type", lambda v: int(v) != 0)):
        if name in names:
            i = names.index(name)
            value = args[i] if i < len(args) else kwargs.get(name)
            return CAUSAL_FRACTION if value is not None and causal(value) else 1.0
    return 1.0


class _LeafRecorder:
    """Forward hooks on every leaf module: execution order, bytes in and out, K-FAC dimensions."""

    def __init__(self) -> None:
        self.order: list[nn.Module] = []
        self.stats: dict[nn.Module, dict[str, float]] = {}
        self.kfac: dict[nn.Module, tuple[int, int, int]] = {}
        self.recomputing = 0  # depth of leaf forwards running inside backward (recomputation)
        self.versions: dict[nn.Module, int | None] = {}  # the input's version at each leaf's forward pre-hook

    def pre_hook(self, mod: nn.Module, args: Any) -> None:
        if torch._C._current_graph_task_id() != -1:
            self.recomputing += 1
            return
        if mod not in self.stats:
            self.order.append(mod)
            self.stats[mod] = {"in": 0.0, "out": 0.0, "extra": 0.0}
        self.stats[mod]["in"] += tensor_bytes(args)
        x = first_tensor(args)
        self.versions[mod] = x._version if x is not None else None

    def post_hook(self, mod: nn.Module, args: Any, out: Any) -> None:
        if self.recomputing:
            self.recomputing -= 1
            return
        s = self.stats[mod]
        x = first_tensor(args)
        if isinstance(out, torch.Tensor) and out is x and x._version == self.versions.get(mod):
            # Its input handed back untouched (``nn.Identity``, ``Dropout(p=0)``: ATen's dropout
            # returns its input at p = 0, on CUDA as on the CPU; an in-place op such as
            # ``ReLU(inplace=True)`` returns it too, but bumps its version): no kernel reads or
            # writes anything, nor does an autograd node run in backward, so the call moves no bytes.
            s["in"] -= tensor_bytes(args)
            return
        s["out"] += tensor_bytes(out)
        s["extra"] += float(getattr(mod, "extra_activation_bytes", 0.0) or 0.0)
        y = first_tensor(out)
        if isinstance(mod, nn.Linear) and x is not None:
            tokens = int(x.numel() // max(x.shape[0] * x.shape[-1], 1)) if x.dim() > 2 else 1
            self.kfac[mod] = (mod.in_features + (mod.bias is not None), mod.out_features, tokens)
        elif isinstance(mod, nn.Conv2d) and y is not None:
            # A grouped convolution is ``groups`` K-FAC blocks (srift.kfac.layers.make_layers), each
            # with its group's dimensions; the simulator counts the blocks from the parameters.
            kh, kw = mod.kernel_size
            a_dim = mod.in_channels // mod.groups * kh * kw + (mod.bias is not None)
            self.kfac[mod] = (a_dim, mod.out_channels // mod.groups, int(y.shape[-1] * y.shape[-2]))


def _param_bytes(params: list[nn.Parameter]) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def _ready_ranks(modules: list[nn.Module], owner: dict[int, nn.Module], params: list[nn.Parameter],
                 ready: list[int]) -> dict[nn.Module, int]:
    """Each module's position among modules by when its last parameter's gradient became ready."""
    ready_pos = {pid: i for i, pid in enumerate(ready)}
    module_ready: dict[nn.Module, int] = {}
    for p in params:
        m = owner[id(p)]
        if id(p) in ready_pos:
            module_ready[m] = max(module_ready.get(m, -1), ready_pos[id(p)])
    return {m: i for i, m in enumerate(sorted(module_ready, key=lambda m: module_ready[m]))}


def _run_step(model: nn.Module, step_fn: Callable[[], Any], rec: _LeafRecorder,
              params: list[nn.Parameter]) -> tuple[_PhaseFlopCounter, dict[str, dict[Any, int]], list[int]]:
    """Run one step with the leaf hooks and the FLOP counter; return the counter, its FLOPs per
    module and the ids of the parameters in the order their gradients became ready. The model's
    mode and gradients are left as they were."""
    handles = []
    for m in model.modules():
        if not list(m.children()):
            # always_call: non-reentrant checkpointing stops a recomputation by raising inside a leaf.
            handles += [m.register_forward_pre_hook(rec.pre_hook), m.register_forward_hook(rec.post_hook, always_call=True)]
    ready: list[int] = []
    for p in params:
        handles.append(p.register_post_accumulate_grad_hook(lambda t, pid=id(p): ready.append(pid)))
    was_training = model.training
    model.train()
    try:
        root = type(model).__name__
        keys = {m: (f"{root}.{n}" if n else root) for n, m in model.named_modules()}
        leaf_keys = frozenset(k for m, k in keys.items() if not list(m.children()))
        owners = _NodeOwners(model, keys)
        counter = _PhaseFlopCounter(rec, leaf_keys, owners)
        try:
            with counter, _AttentionCalls(counter):
                out = step_fn()
                if not ready and isinstance(out, torch.Tensor) and out.requires_grad:
                    out.backward()
                all_counts = counter.get_flop_counts()
        finally:
            owners.remove()
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
        for p in params:
            p.grad = None
    return counter, all_counts, ready


def analyze_layers(model: nn.Module, step_fn: Callable[[], Any]) -> list[LayerProfile]:
    """Run one training step and describe every leaf module, in execution order.

    Args:
        model: The model (any device, including ``meta``).
        step_fn: Runs one training step of ``model`` (not a copy): forward, loss and backward. It
            may instead return the scalar loss without calling backward; then this function calls
            ``backward()`` on it. It should not step an optimizer (the analysis clears the
            gradients it made, but cannot undo an update).

    Returns:
        One LayerProfile per leaf module that ran (modules called several times are summed), plus
        a pseudo-layer ``<name>.(params)`` for parameters that belong to non-leaf modules and
        ``<name>.(ops)`` for FLOPs a non-leaf module runs outside its children (review item M16).
    """
    names = {m: n for n, m in model.named_modules()}
    rec = _LeafRecorder()
    # Parameter ownership: a shared (tied) parameter belongs to the first module that registers it.
    owner: dict[int, nn.Module] = {}
    for m in model.modules():
        for p in m.parameters(recurse=False):
            owner.setdefault(id(p), m)
    params = [p for p in model.parameters() if p.requires_grad]
    counter, all_counts, ready = _run_step(model, step_fn, rec, params)
    root = type(model).__name__
    ready_rank = _ready_ranks(rec.order, owner, params, ready)

    def own_params(m: nn.Module) -> list[nn.Parameter]:
        return [p for p in m.parameters(recurse=False) if p.requires_grad and owner[id(p)] is m]

    def layer(m: nn.Module) -> LayerProfile:
        # The module tracker names modules by their path from the root, headed by its class name.
        key = f"{root}.{names[m]}" if names[m] else root
        s, ps = rec.stats[m], own_params(m)
        n_params = sum(p.numel() for p in ps)
        f_bwd = counter.bwd_flops.get(key, 0.0)
        f_fwd = _total(all_counts.get(key, {})) - f_bwd
        fwd_bytes = s["in"] + s["out"] + _param_bytes(list(m.parameters(recurse=False)))
        seq2 = bool(getattr(m, "srift_seq2", False))
        a, g, sp = rec.kfac.get(m, (None, None, None))
        return LayerProfile(
            name=names[m] or root, type=type(m).__name__, params=n_params, param_tensors=len(ps), grad_bytes=_param_bytes(ps),
            fwd_flops=f_fwd, bwd_flops=max(f_bwd, 0.0), fwd_bytes=fwd_bytes, bwd_bytes=2.0 * fwd_bytes,
            activation_bytes=s["out"] + s["extra"],
            fwd_flops_seq2=f_fwd if seq2 else 0.0, bwd_flops_seq2=max(f_bwd, 0.0) if seq2 else 0.0,
            activation_bytes_seq2=s["extra"] if seq2 else 0.0,
            grad_ready_order=ready_rank.get(m) if n_params else None, kfac_a_dim=a, kfac_g_dim=g, kfac_spatial=sp,
            frozen_bytes=float(_param_bytes([p for p in m.parameters(recurse=False) if not p.requires_grad])),
        )

    layers = [layer(m) for m in rec.order]
    # Operations a non-leaf module runs itself (functional SDPA in every HF attention, a matmul
    # in forward()): FLOPs no leaf was counted for, as an ``(ops)`` layer where they ran.
    for at, ops in sorted(_own_ops(names, root, counter), key=lambda x: -x[0]):
        layers.insert(at, ops)
    # Parameters held directly by non-leaf modules (ViT's class token, position embedding).
    for m in model.modules():
        if m in rec.stats or not list(m.children()):
            continue
        ps = own_params(m)
        if ps:
            layers.insert(0, LayerProfile(
                name=f"{names[m] or root}.(params)", type="Parameters", params=sum(p.numel() for p in ps), param_tensors=len(ps),
                grad_bytes=_param_bytes(ps), fwd_bytes=float(_param_bytes(ps)), grad_ready_order=ready_rank.get(m),
            ))
    return layers


class _AttentionCalls(TorchFunctionMode):
    """Marks the ops ``F.scaled_dot_product_attention`` runs on ``counter``: with a mask on a CPU (or
    another backend without a fused kernel) it falls back to plain ``bmm``s that torch counts as
    matmuls; they are attention all the same (their FLOPs grow with seq_len^2)."""

    def __init__(self, counter: _PhaseFlopCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is not F.scaled_dot_product_attention:
            return func(*args, **(kwargs or {}))
        self.counter.in_sdpa += 1
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.counter.in_sdpa -= 1


def _is_attention(func_packet: Any) -> bool:
    """A fused attention op (SDPA on any backend, and its backward) or SDPA's math fallback: FLOPs
    that grow with seq_len^2."""
    if func_packet == _SDPA_MATH:
        return True
    return str(getattr(func_packet, "__name__", "")).startswith(("_scaled_dot_product", "_flash_attention",
                                                                 "_efficient_attention"))


def _own_ops(names: dict[nn.Module, str], root: str, counter: _PhaseFlopCounter) -> list[tuple[int, LayerProfile]]:
    """Per module that ran FLOPs outside every leaf: the leaf position it ran them at and an
    ``<name>.(ops)`` layer, typed ``ScaledDotProductAttention`` when attention dominates (its FLOPs
    marked ``_seq2``) else ``MatMul``. No bytes: a functional op's operands are its neighbours'
    outputs, already counted."""
    by_key = {(f"{root}.{n}" if n else root): n for n in names.values()}
    out = []
    for key in sorted(set(counter.own_fwd) | set(counter.own_bwd)):
        fwd, bwd = counter.own_fwd.get(key, {}), counter.own_bwd.get(key, {})
        f_att = sum(v for op, v in fwd.items() if _is_attention(op))
        b_att = sum(v for op, v in bwd.items() if _is_attention(op))
        f_all, b_all = sum(fwd.values()), sum(bwd.values())
        if f_all + b_all <= 0:
            continue
        if not b_att and f_att:  # SDPA's math fallback: its backward runs plain matmuls, in the forward's share
            b_att = b_all * f_att / f_all
        name = by_key.get(key, key.split(".", 1)[1] if "." in key else "")
        attention = f_att + b_att >= (f_all + b_all) / 2
        out.append((counter.first_leaf.get(key, 0), LayerProfile(
            name=f"{name or root}{OPS_SUFFIX}", type="ScaledDotProductAttention" if attention else "MatMul", params=0,
            grad_bytes=0, fwd_flops=f_all, bwd_flops=b_all, fwd_flops_seq2=f_att, bwd_flops_seq2=b_att)))
    return out

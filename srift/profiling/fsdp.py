"""FSDP jobs under ``srift profile``: the units, their collectives, the parallelism, checkpointing.

A script that wraps its model with FSDP1 (``FullyShardedDataParallel``, typically an auto-wrap
policy per transformer block) or FSDP2 (``fully_shard`` on each block, then on the model) is
profiled like any other (srift/profiling/runner.py); this module adds what is particular to it.

**Units.** Every FSDP-wrapped module is a unit: its parameters are all-gathered and its gradients
reduce-scattered together. A leaf module belongs to the innermost unit around it
(``LayerProfile.unit``, the unit's module name without FSDP's and checkpointing's wrapper
segments, e.g. ``layers.3``); the outermost (the model the script calls) is the root unit
(``unit: null``), as in srift/simulate/sharded.py. Layer names lose the wrapper segments too
(``_fsdp_wrapped_module``, ``_checkpoint_wrapped_module``), so a profile of a wrapped model names
its layers as the unwrapped model does.

**Parameters.** A leaf's parameter count is its *unsharded* count: FSDP2's parameters are DTensors,
whose ``numel()`` is the global size; FSDP1 flattens a unit's parameters into one sharded
``FlatParameter`` whose metadata (``_param_infos``, ``_numels``) says which module owns how many
elements. The simulator sizes each unit's all-gather and reduce-scatter from these.

**Parallelism.** FSDP1's ``sharding_strategy``: FULL_SHARD -> ``fsdp``, SHARD_GRAD_OP -> ``zero2``,
HYBRID_SHARD (and _HYBRID_SHARD_ZERO2) -> ``hsdp``, NO_SHARD -> ``ddp``; but in one process FSDP1
replaces any strategy with NO_SHARD, so the strategy asked for is not visible: srift records
``fsdp`` (FSDP1's default) and says so in the notes. FSDP2: a 2-D mesh (replicate, shard) ->
``hsdp``; block units that keep their parameters after forward (``reshard_after_forward=False``)
-> ``zero2``; otherwise ``fsdp``. MixedPrecision's ``param_dtype`` bf16 makes the profile's
precision ``bf16``.

**Collectives** (what is measured, and its limits). Each unit's all-gathers and reduce-scatters are
timed from the call to its completion, per unit, kind and phase (forward / backward):
FSDP2 through each unit's all-gather and reduce-scatter communication objects (the ones
``set_custom_all_gather`` / ``set_custom_reduce_scatter`` replace; srift wraps whatever is there);
FSDP1 around each unit's ``FlatParamHandle._all_gather_flat_param`` and FSDP's gradient reduction
``_reduce_grad`` (reduce-scatter, and under HYBRID_SHARD the replica all-reduce with it). On CPU
(gloo) the calls block the training thread: the time includes waiting for the slowest rank to
reach the collective (load imbalance shows up here), the blocked stretches are cut out of the
layers' backward times (srift/profiling/hooks.py ``exclude``), and their sum per iteration is the
profile's ``phases.collectives_s``, which the compute model leaves out of the measured overhead
(the communication model predicts it instead). On CUDA the marks are events on the collective's
stream: its duration on that stream (queueing behind the previous collective included); how much
of it the compute stream waited for is not measured, and stays in the measured overhead, so profile
an FSDP job on one GPU (one process) to predict it elsewhere. In one process FSDP still gathers
(FSDP2: a 1-rank all-gather, a memory copy) or nothing at all (FSDP1's NO_SHARD); the sizes are the
point then. FSDP2's HSDP replica all-reduce is not timed separately.

**Activation checkpointing** is seen at run time (srift/profiling/hooks.py): a leaf whose forward
runs again inside backward is recomputed. Every block leaf recomputed: ``full``; some: ``selective``
(the simulator then applies its own per-op policy, torchtitan's, and the notes say how many of the
block's leaves the script recomputed); none: ``none``. Reentrant checkpointing (``use_reentrant=True``)
runs the first forward without autograd, so those leaves' forward is not timed: use the
non-reentrant default.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from srift.profile import LayerProfile, UnitCollective
from srift.profiling.buckets import cuda_mark
from srift.profiling.flops import OPS_SUFFIX
from srift.profiling.hooks import CudaClock, LayerTimer, WallClock

# Module-name segments FSDP1, activation checkpointing and torch.compile insert.
_WRAPPER_SEGMENTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})

_FSDP1_STRATEGIES = {"FULL_SHARD": "fsdp", "SHARD_GRAD_OP": "zero2", "HYBRID_SHARD": "hsdp",
                     "_HYBRID_SHARD_ZERO2": "hsdp", "NO_SHARD": "ddp"}


def clean_name(name: str) -> str:
    """A module name without FSDP's, checkpointing's and torch.compile's wrapper segments."""
    return ".".join(p for p in name.split(".") if p not in _WRAPPER_SEGMENTS)


def _fsdp1_class() -> type | None:
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # torch built without distributed
        return None
    return FullyShardedDataParallel


def _fsdp2_class() -> type | None:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        try:
            from torch.distributed._composable.fsdp import FSDPModule
        except ImportError:
            return None
    return FSDPModule


def fsdp_api(module: nn.Module) -> str | None:
    """``FSDP1``, ``FSDP2`` or None: how ``module`` (the model the script calls) is sharded."""
    fsdp1, fsdp2 = _fsdp1_class(), _fsdp2_class()
    mods = list(module.modules())
    if fsdp2 is not None and any(isinstance(m, fsdp2) for m in mods):
        return "FSDP2"
    if fsdp1 is not None and any(isinstance(m, fsdp1) for m in mods):
        return "FSDP1"
    return None


@dataclass
class FsdpSetup:
    """How a model is sharded, as detected.

    Attributes:
        api: ``FSDP1`` or ``FSDP2``.
        parallelism: ``fsdp``, ``zero2``, ``hsdp`` or ``ddp`` (srift.job.PARALLELISMS).
        strategy: FSDP's own name for it (``FULL_SHARD``; FSDP2: ``reshard_after_forward=True``...).
        unit_of: Unit name (None: root unit) of every module, by ``id``.
        unit_names: Unit module objects' names, by ``id`` (the root's is None).
        params_of: Unsharded trainable parameters ``(count, gradient bytes)`` each module owns, by ``id``.
        param_dtype: Dtype parameters are gathered and computed in (MixedPrecision), e.g. ``float32``.
        reduce_dtype: Dtype gradients are reduced in.
        notes: What the profile should say about the detection.
    """

    api: str
    parallelism: str
    strategy: str
    unit_of: dict[int, str | None]
    unit_names: dict[int, str | None]
    params_of: dict[int, tuple[int, int]]
    param_dtype: str
    reduce_dtype: str
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, str]:
        """The profile's ``fsdp`` mapping."""
        return {"api": self.api, "sharding_strategy": self.strategy, "param_dtype": self.param_dtype,
                "reduce_dtype": self.reduce_dtype, "units": str(sum(1 for u in self.unit_names.values() if u))}


def _dtype_name(dtype: Any, default: torch.dtype) -> str:
    return str(dtype if dtype is not None else default).replace("torch.", "")


def detect(root: nn.Module) -> FsdpSetup | None:
    """The FSDP setup of ``root`` (the model the script calls), or None when it is not sharded."""
    api = fsdp_api(root)
    if api is None:
        return None
    fsdp_type = _fsdp2_class() if api == "FSDP2" else _fsdp1_class()
    assert fsdp_type is not None
    named = list(root.named_modules())
    # The unit modules, innermost last for a given path; the outermost is the root unit.
    unit_raw: dict[str, nn.Module] = {name: m for name, m in named if issubclass(type(m), fsdp_type)}
    outermost = min(unit_raw, key=lambda n: (n.count("."), len(n))) if unit_raw else ""
    unit_names: dict[int, str | None] = {id(m): (None if n == outermost else clean_name(n)) for n, m in unit_raw.items()}
    unit_of: dict[int, str | None] = {}
    for name, m in named:
        owner = max((n for n in unit_raw if n == "" or name == n or name.startswith(n + ".")),
                    key=len, default=None)
        unit_of[id(m)] = None if owner is None else unit_names[id(unit_raw[owner])]
    first_param = next(root.parameters(), None)
    default_dtype = first_param.dtype if first_param is not None else torch.float32
    if api == "FSDP2":
        setup = _detect_fsdp2(root, unit_raw, outermost, default_dtype)
    else:
        setup = _detect_fsdp1(root, unit_raw, default_dtype)
    setup.unit_of, setup.unit_names = unit_of, unit_names
    if "" not in unit_raw:
        setup.notes.append("the model the script calls is not itself FSDP-wrapped: parameters outside the wrapped "
                           "units are counted in the root unit, which srift shards like FSDP's root")
    return setup


def _own_params(root: nn.Module) -> dict[int, tuple[int, int]]:
    """Unsharded ``(count, bytes)`` of the trainable parameters each module registers (a tied
    parameter counts once, at its first owner). DTensor parameters (FSDP2) report their global
    size; FSDP1's FlatParameters are left out (``_detect_fsdp1`` reads their metadata)."""
    seen: set[int] = set()
    out: dict[int, tuple[int, int]] = {}
    for m in root.modules():
        n = b = 0
        for p in m.parameters(recurse=False):
            if id(p) in seen or not p.requires_grad or getattr(p, "_is_flat_param", False):
                continue
            seen.add(id(p))
            n += p.numel()
            b += p.numel() * p.element_size()
        if n:
            out[id(m)] = (n, b)
    return out


def _detect_fsdp2(root: nn.Module, units: dict[str, nn.Module], outermost: str, default: torch.dtype) -> FsdpSetup:
    groups = []
    for name, m in units.items():
        state = m._get_fsdp_state()  # type: ignore[operator]
        for g in getattr(state, "_fsdp_param_groups", None) or [getattr(state, "_fsdp_param_group", None)]:
            if g is not None:
                groups.append((name, g))
    block_groups = [g for n, g in groups if n != outermost] or [g for _, g in groups]
    notes: list[str] = []
    mesh_kinds = {type(getattr(g, "mesh_info", None)).__name__ for g in block_groups}
    if any("HSDP" in k for k in mesh_kinds):
        parallelism, strategy = "hsdp", "2-D mesh (replicate, shard)"
    else:
        post = [getattr(g, "post_forward_mesh_info", "?") for g in block_groups]
        if all(p is None for p in post) and len(groups) > 1:
            parallelism, strategy = "zero2", "reshard_after_forward=False"
        else:
            parallelism, strategy = "fsdp", "reshard_after_forward=True"
            if any(p not in (None, "?") and p != getattr(g, "mesh_info", None) for p, g in zip(post, block_groups)):
                strategy = "reshard_after_forward=<int>"
                notes.append("FSDP2 reshards to a smaller group after forward; srift predicts it as fsdp")
    mp = getattr(block_groups[0], "mp_policy", None) if block_groups else None
    return FsdpSetup("FSDP2", parallelism, strategy, {}, {}, _own_params(root),
                     _dtype_name(getattr(mp, "param_dtype", None), default),
                     _dtype_name(getattr(mp, "reduce_dtype", None) or getattr(mp, "param_dtype", None), default), notes)


def _detect_fsdp1(root: nn.Module, units: dict[str, nn.Module], default: torch.dtype) -> FsdpSetup:
    strategy = getattr(getattr(root, "sharding_strategy", None), "name", "FULL_SHARD")
    notes: list[str] = []
    parallelism = _FSDP1_STRATEGIES.get(strategy, "fsdp")
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if strategy == "NO_SHARD" and world == 1:
        parallelism = "fsdp"
        notes.append("FSDP1 runs NO_SHARD in one process whatever strategy the script asked for; srift records "
                     "fsdp (FULL_SHARD, FSDP1's default): pass --parallelism zero2 or hsdp to predict another")
    elif strategy == "_HYBRID_SHARD_ZERO2":
        notes.append("_HYBRID_SHARD_ZERO2 is predicted as hsdp (parameters resharded after forward)")
    # Unsharded parameter counts per owning module, from each FlatParameter's metadata.
    params: dict[int, tuple[int, int]] = {}
    for m in units.values():
        handle = getattr(m, "_handle", None)
        flat = getattr(handle, "flat_param", None)
        if flat is None:
            continue
        for info, numel in zip(flat._param_infos, flat._numels):
            n, b = params.get(id(info.module), (0, 0))
            params[id(info.module)] = (n + int(numel), b + int(numel) * flat.element_size())
    # Parameters FSDP1 leaves alone (ignored_modules) keep their own, unsharded, counts.
    for mid, nb in _own_params(root).items():
        params.setdefault(mid, nb)
    mp = getattr(root, "mixed_precision", None)
    return FsdpSetup("FSDP1", parallelism, strategy, {}, {}, params,
                     _dtype_name(getattr(mp, "param_dtype", None), default),
                     _dtype_name(getattr(mp, "reduce_dtype", None) or getattr(mp, "param_dtype", None), default), notes)


# ---- collectives ---------------------------------------------------------------------------------
class _TimedAllGather:
    """Wraps an FSDP2 unit's all-gather communication object and times every call."""

    def __init__(self, inner: Any, timer: "CollectiveTimer", unit: str | None) -> None:
        self.inner, self.timer, self.unit = inner, timer, unit

    def allocate(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.inner.allocate(*args, **kwargs)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, async_op: bool = False) -> Any:
        size = output_tensor.numel() * output_tensor.element_size()
        return self.timer.timed(self.unit, "all_gather", size, lambda: self.inner(
            output_tensor=output_tensor, input_tensor=input_tensor, group=group, async_op=async_op))


class _TimedReduceScatter:
    """Wraps an FSDP2 unit's reduce-scatter communication object and times every call."""

    def __init__(self, inner: Any, timer: "CollectiveTimer", unit: str | None) -> None:
        self.inner, self.timer, self.unit = inner, timer, unit

    def allocate(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.inner.allocate(*args, **kwargs)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, op: Any,
                 async_op: bool = False) -> Any:
        size = input_tensor.numel() * input_tensor.element_size()
        return self.timer.timed(self.unit, "reduce_scatter", size, lambda: self.inner(
            output_tensor=output_tensor, input_tensor=input_tensor, group=group, op=op, async_op=async_op))


class CollectiveTimer:
    """Times every FSDP collective of the measured iterations, per unit (module docstring).

    Args:
        root: The FSDP model the script calls.
        setup: Its detected setup (``detect``).
        layer_timer: The layer timer, whose backward intervals lose the blocking stretches (CPU).
        clock: The profiler's clock.
    """

    def __init__(self, root: nn.Module, setup: FsdpSetup, layer_timer: LayerTimer, clock: WallClock | CudaClock) -> None:
        self.setup = setup
        self.layer_timer = layer_timer
        self.clock = clock
        self.rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self._current: list[list[Any]] = []  # [unit, kind, phase, bytes, start, end, blocking]
        self._sums: dict[tuple[str | None, str, str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])  # calls, seconds
        self._blocking_s: list[float] = []
        self._iterations = 0
        self._undo: list[Any] = []
        self.gathered: list[UnitCollective] | None = None
        fsdp_type = _fsdp2_class() if setup.api == "FSDP2" else _fsdp1_class()
        units = [m for m in root.modules() if fsdp_type is not None and isinstance(m, fsdp_type)]
        if setup.api == "FSDP2":
            self._wrap_fsdp2(units)
        else:
            self._wrap_fsdp1(units)

    # ---- installing -------------------------------------------------------------------------
    def _wrap_fsdp2(self, units: list[nn.Module]) -> None:
        for m in units:
            unit = self.setup.unit_names.get(id(m))
            state = m._get_fsdp_state()  # type: ignore[operator]
            for g in getattr(state, "_fsdp_param_groups", None) or [getattr(state, "_fsdp_param_group", None)]:
                if g is None or not hasattr(g, "_all_gather_comm"):
                    continue
                ag, rs = g._all_gather_comm, g._reduce_scatter_comm
                g._all_gather_comm = _TimedAllGather(ag, self, unit)
                g._reduce_scatter_comm = _TimedReduceScatter(rs, self, unit)
                self._undo.append(lambda g=g, ag=ag, rs=rs: g.__dict__.update(_all_gather_comm=ag, _reduce_scatter_comm=rs))

    def _wrap_fsdp1(self, units: list[nn.Module]) -> None:
        from torch.distributed.fsdp import _runtime_utils

        handles: dict[int, str | None] = {}
        for m in units:
            handle = getattr(m, "_handle", None)
            if handle is None or not hasattr(handle, "_all_gather_flat_param"):
                continue
            unit = self.setup.unit_names.get(id(m))
            handles[id(handle)] = unit
            inner = handle._all_gather_flat_param

            def all_gather(padded: torch.Tensor, inner: Any = inner, unit: str | None = unit) -> Any:
                return self.timed(unit, "all_gather", padded.numel() * padded.element_size(), lambda: inner(padded))

            handle._all_gather_flat_param = all_gather  # an instance attribute: this handle only
            self._undo.append(lambda h=handle: delattr(h, "_all_gather_flat_param"))
        # Gradient reduction is a module function of FSDP1's runtime, called per handle.
        for fn_name, kind in (("_reduce_grad", "reduce_scatter"), ("_reduce_grad_no_shard", "all_reduce")):
            inner_fn = getattr(_runtime_utils, fn_name, None)
            if inner_fn is None:
                continue

            def reduce(state: Any, handle: Any, inner_fn: Any = inner_fn, kind: str = kind) -> Any:
                grad = handle.flat_param.grad
                size = grad.numel() * grad.element_size() if grad is not None else 0
                return self.timed(handles.get(id(handle)), kind, size, lambda: inner_fn(state, handle))

            setattr(_runtime_utils, fn_name, reduce)
            self._undo.append(lambda n=fn_name, f=inner_fn: setattr(_runtime_utils, n, f))

    def remove(self) -> None:
        """Put FSDP's own communication back."""
        for undo in reversed(self._undo):
            undo()
        self._undo = []

    # ---- timing -----------------------------------------------------------------------------
    def timed(self, unit: str | None, kind: str, size_bytes: int, call: Any) -> Any:
        """Run one collective ``call`` and record it."""
        phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
        start = self.clock.mark()
        out = call()
        entry: list[Any] = [unit, kind, phase, int(size_bytes), start, None, False]
        work = out if isinstance(out, dist.Work) else None
        if work is not None and isinstance(self.clock, WallClock):
            # Asynchronous on CPU: done when its future completes (gloo's own threads run it).
            def done(fut: Any) -> Any:
                entry[5] = self.clock.mark()  # the training thread's clock, from gloo's thread
                return fut.value()

            work.get_future().then(done)
        elif work is not None:
            # Asynchronous on CUDA (explicit prefetch, ``unshard(async_op=True)``; M13): the end mark
            # goes in the future's callback, whose stream waits for NCCL, not right after the enqueue.
            def done_cuda(fut: Any) -> Any:
                entry[5] = cuda_mark()
                return fut.value()

            work.get_future().then(done_cuda)
        else:
            entry[5] = self.clock.mark()
            if isinstance(self.clock, WallClock):  # it blocked the training thread
                entry[6] = True
                self.layer_timer.exclude(start, entry[5])
        self._current.append(entry)
        return out

    def end_iteration(self, measured: bool) -> None:
        """Close an iteration (after its optimizer step and the clock's sync)."""
        current, self._current = self._current, []
        if not measured:
            return
        self._iterations += 1
        blocking = 0.0
        for unit, kind, phase, size, start, end, block in current:
            if end is None:
                continue
            # Never below 0: Linux books a thread's run-queue wait when it next runs, so a mark read on
            # gloo's thread can miss a wait the training thread is in that the other mark counts
            # (WallClock subtracts the training thread's wait from both).
            secs = max(self.clock.elapsed_s(start, end), 0.0)
            acc = self._sums[(unit, kind, phase, size)]
            acc[0] += 1
            acc[1] += secs
            if block:
                blocking += secs
        self._blocking_s.append(blocking)

    @property
    def blocking_s(self) -> float | None:
        """Mean seconds per measured iteration the training thread spent blocked in collectives
        (None on CUDA, where they run on their own streams)."""
        if not isinstance(self.clock, WallClock) or not self._blocking_s:
            return None
        return sum(self._blocking_s) / len(self._blocking_s)

    def collectives(self) -> list[UnitCollective]:
        """This rank's collectives, per unit, kind, phase and size, over the measured iterations."""
        n = max(self._iterations, 1)
        return [UnitCollective(self.rank, unit, kind, phase, size, calls / n, secs / calls)
                for (unit, kind, phase, size), (calls, secs) in self._sums.items() if calls]

    def gather(self) -> list[UnitCollective]:
        """Every rank's collectives (a collective itself: every rank calls it at the same step)."""
        mine = [(c.rank, c.unit, c.kind, c.phase, c.size_bytes, c.calls, c.time_s) for c in self.collectives()]
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            self.gathered = self.collectives()
            return self.gathered
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        self.gathered = [UnitCollective(*row) for rows in everyone for row in (rows or [])]
        return self.gathered


# ---- the profile ---------------------------------------------------------------------------------
@dataclass
class FsdpMeasurement:
    """What the profiler hands to assembling for an FSDP job.

    Attributes:
        setup: The detected setup.
        names: Every module's raw name (relative to the model the profiler timed), by ``id``.
        modules: Modules by raw name.
        collectives: Measured collectives (all ranks when gathered, else this rank's).
        blocking_s: Seconds per iteration the training thread spent in collectives (CPU), or None.
        recomputed: Names (clean) of the leaves the script recomputed in backward.
    """

    setup: FsdpSetup
    names: dict[int, str]
    modules: dict[str, nn.Module]
    collectives: list[UnitCollective]
    blocking_s: float | None
    recomputed: set[str]


def measurement(model: nn.Module, setup: FsdpSetup, timer: LayerTimer, comm: CollectiveTimer) -> FsdpMeasurement:
    """Collect what the profile needs once the measured iterations are over."""
    named = dict(model.named_modules())
    return FsdpMeasurement(setup, {id(m): n for n, m in named.items()}, named,
                           comm.gathered if comm.gathered is not None else comm.collectives(), comm.blocking_s,
                           {clean_name(timer.leaves[i][0]) for i in timer.recomputed})


def apply_to_layers(layers: list[LayerProfile], fm: FsdpMeasurement) -> list[LayerProfile]:
    """Give the assembled layers their units, unsharded parameters and clean names.

    The analysed layers (srift/profiling/flops.py) see FSDP1's sharded FlatParameters, owned by the
    wrapper modules, as pseudo-layers (``<module>.(params)``); they are replaced by the parameters
    of the modules the FlatParameters flatten (``FsdpSetup.params_of``): leaves get their own, other
    owners a pseudo-layer in their unit.
    """
    setup = fm.setup
    out: list[LayerProfile] = []
    covered: set[int] = set()
    for layer in layers:
        if layer.type == "Parameters" and layer.name.endswith(".(params)"):
            continue  # replaced below from the FSDP metadata
        mod = fm.modules.get(layer.name)
        if mod is None and layer.name.endswith(OPS_SUFFIX):  # ops a non-leaf module ran: its unit
            owner = fm.modules.get(layer.name[:-len(OPS_SUFFIX)])
            layer.unit = None if owner is None else setup.unit_of.get(id(owner))
        if mod is not None:
            n, b = setup.params_of.get(id(mod), (0, 0))
            layer.params, layer.grad_bytes = n, b
            layer.unit = setup.unit_of.get(id(mod))
            covered.add(id(mod))
        layer.name = clean_name(layer.name)
        out.append(layer)
    # Parameters of modules that are not timed leaves (a non-leaf module's own parameters).
    for mid, (n, b) in setup.params_of.items():
        if mid in covered or mid not in fm.names:
            continue
        name = clean_name(fm.names[mid])
        out.insert(0, LayerProfile(name=f"{name or 'model'}.(params)", type="Parameters", params=n, grad_bytes=b,
                                   fwd_bytes=float(b), unit=setup.unit_of.get(mid)))
    return out


def checkpointing(layers: list[LayerProfile], recomputed: set[str]) -> tuple[str, str | None]:
    """The checkpointing policy the script ran (``none``, ``selective``, ``full``) from the leaves it
    recomputed (clean names), and a note when it is partial.

    ``full`` when every unit recomputed its leaves from the first on: non-reentrant checkpointing
    stops recomputing once it has every tensor backward needs, so a block's last leaves (whose
    outputs nothing in the block saves) may not run again.
    """
    units: dict[str, list[bool]] = defaultdict(list)
    for layer in layers:
        if layer.unit is not None and layer.type != "Parameters":
            units[layer.unit].append(layer.name in recomputed)
    again = sum(sum(flags) for flags in units.values())
    if not again:
        return "none", None
    if all(flags[0] and flags == sorted(flags, reverse=True) for flags in units.values()):
        return "full", None
    total = sum(len(flags) for flags in units.values())
    return "selective", (f"activation checkpointing recomputed {again} of the {total} leaves of the FSDP units; "
                         "srift predicts it with its selective policy (torchtitan's per-op policy)")


def profile_precision(setup: FsdpSetup) -> str | None:
    """The profile precision FSDP's MixedPrecision implies (None: let autocast/TF32 detection decide)."""
    if setup.param_dtype == "bfloat16":
        return "bf16"
    if setup.param_dtype == "float16":
        return "amp"
    return None

"""Run a user's training script in-process under the profiler and write its profile.

The script runs as ``python SCRIPT ARGS`` would run it: ``runpy.run_path`` with run name
``__main__``, ``sys.argv = [SCRIPT, *ARGS]``, the script's folder first on ``sys.path`` (all
restored afterwards). An iteration is one optimizer step, seen through torch's global optimizer
step hooks (the first optimizer that steps is the one counted). Step 1 finds the model (see
srift.profiling.hooks) and installs the timing hooks; steps 2..warmup are warm-up; the next
``iters`` steps are measured. After the last one the step hook raises a private BaseException
that unwinds the script (the ``except Exception`` blocks scripts commonly have do not catch it),
so the script stops cleanly and its DataLoader workers shut down with their iterator.

Then, untimed, the model's structure is analysed with srift.profiling.flops.analyze_layers on
the batch captured in the first measured-phase iteration (one extra forward/backward, FLOPs from
torch's FlopCounterMode) and merged with the timings by module name.

Outcomes: the script raising shows its own traceback and writes nothing; no optimizer step, or
fewer steps than warm-up + 1, fails and writes nothing; a script that ends after at least one
measured step but fewer than ``iters`` writes what was measured, with a warning (also recorded
in the profile's ``notes`` and ``iterations``).

Gradient accumulation: every forward/backward of the model between two steps belongs to the
iteration; per-layer times are summed over those micro-batches, and ``batch_size`` is the number
of samples per optimizer step (micro-batch x accumulation steps) with FLOPs and moved bytes
scaled to match; ``activation_bytes`` stays per micro-batch (what is live at once).

Under torchrun (DDP, world size > 1) every rank measures its own all-reduce buckets; they are
gathered to rank 0, which alone writes the profile.
"""

from __future__ import annotations

import gc
import platform
import runpy
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import srift
from srift.errors import SriftError
from srift.profile import AllReduceBucket, LayerProfile, PhaseTimes, Profile
from srift.profiling.buckets import BucketTimer, is_ddp
from srift.profiling.hooks import CudaClock, IterationTimes, LayerTimer, ModelFinder, WallClock, mean_std


class _StopProfiling(BaseException):
    """Raised from the optimizer step hook once enough iterations are measured."""


@dataclass
class ProfileResult:
    """What a profiling run produced."""

    profile: Profile | None  # None on ranks other than 0
    path: Path | None
    warnings: list[str] = field(default_factory=list)


class _Session:
    """State shared by the optimizer step hooks during one script run."""

    def __init__(self, warmup: int, iters: int, progress: Any = None) -> None:
        self.warmup = warmup
        self.iters = iters
        self.finder = ModelFinder()
        self.optimizer: torch.optim.Optimizer | None = None
        self.root: torch.nn.Module | None = None
        self.model: torch.nn.Module | None = None
        self.timer: LayerTimer | None = None
        self.comm: BucketTimer | None = None
        self.clock: WallClock | CudaClock = WallClock()
        self.steps = 0
        self.prev_end: float | None = None
        self.records: list[IterationTimes] = []
        self.progress = progress
        self.task = None
        self.world_size = 1
        self.rank = 0
        self.gathered: list[AllReduceBucket] | None = None

    def pre_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.optimizer is None:
            self.optimizer = opt
            self._attach(opt)
        if opt is self.optimizer and self.timer is not None:
            self.timer.optimizer_start()

    def _attach(self, opt: torch.optim.Optimizer) -> None:
        root = self.finder.choose(opt)
        self.finder.remove()
        if root is None:
            return
        model = root.module if is_ddp(root) else root
        param = next(model.parameters(), None)
        if param is not None and param.is_cuda:
            self.clock = CudaClock()
        self.root, self.model = root, model
        # Read now: scripts often destroy the process group in a `finally` that runs on our stop.
        if dist.is_available() and dist.is_initialized():
            self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.timer = LayerTimer(root, model, self.clock)
        self.timer.want_capture = True
        if is_ddp(root) and dist.is_initialized() and dist.get_world_size() > 1:
            self.comm = BucketTimer(root)

    def post_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if opt is not self.optimizer:
            return
        if self.timer is not None:
            self.timer.optimizer_end()
        self.clock.sync()  # the one synchronisation per iteration (no-op on CPU)
        end = time.perf_counter()
        self.steps += 1
        measured = self.steps > self.warmup
        if self.timer is not None:
            rec = self.timer.finish_iteration(self.prev_end, end, measured)
            if rec is not None:
                self.records.append(rec)
        if self.comm is not None:
            self.comm.end_iteration(measured)
        self.prev_end = end
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=self.steps)
        if self.timer is not None and self.steps >= self.warmup + self.iters:
            if self.comm is not None:  # a collective: every rank stops at this same step
                self.gathered = self.comm.gather()
            raise _StopProfiling

    def close(self) -> None:
        self.finder.remove()
        if self.timer is not None:
            self.timer.remove()


def profile_script(
    script: str | Path,
    script_args: list[str],
    *,
    warmup: int = 5,
    iters: int = 20,
    output: str | Path | None = None,
    name: str | None = None,
    batch_size: int | None = None,
    show_progress: bool | None = None,
    kfac: bool = False,
) -> ProfileResult:
    """Run ``script`` under the profiler and write its profile (see module docstring).

    Args:
        script: Path of the training script.
        script_args: Its command-line arguments.
        warmup: Optimizer steps not measured (at least 1: step 1 finds the model).
        iters: Optimizer steps measured.
        output: Profile path (default ``profiles/<name>.yaml`` in the current folder).
        name: Profile name (default: the script's file name without extension).
        batch_size: Override of the detected samples per optimizer step.
        show_progress: Show a progress bar (default: when stderr is a terminal).
        kfac: Also time K-FAC's kernels on the captured batch (srift/profiling/kfac_timing.py).

    Raises:
        SriftError: bad arguments (exit 2), or the script failed / never stepped (exit 1).
    """
    path = Path(script)
    if not path.is_file():
        raise SriftError(f"script '{script}' does not exist.", "pass the path of your training script, e.g. `srift profile train.py`.")
    if warmup < 1:
        raise SriftError(f"--warmup must be at least 1, got {warmup}.", "the first step is used to find the model; pass --warmup 1 or more.")
    if iters < 1:
        raise SriftError(f"--iters must be at least 1, got {iters}.", "pass --iters 1 or more (20 gives a stable mean).")
    if batch_size is not None and batch_size < 1:
        raise SriftError(f"--batch-size must be positive, got {batch_size}.", "pass --batch-size 1 or more, or leave it out to detect it.")
    name = name or path.stem
    out_path = Path(output) if output else Path("profiles") / f"{name}.yaml"

    progress = _progress(show_progress)
    session = _Session(warmup, iters, progress)
    stopped = _run(path, script_args, session)
    try:
        return _finish(session, stopped, name, out_path, batch_size, kfac)
    finally:
        session.close()


def _progress(show: bool | None) -> Any:
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    return Progress(TextColumn("profiling"), BarColumn(), MofNCompleteColumn(), TextColumn("optimizer steps"),
                    console=Console(stderr=True), transient=True)


def _run(path: Path, args: list[str], session: _Session) -> bool:
    """Run the script; True when the profiler stopped it, False when it ended by itself."""
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    pre = register_optimizer_step_pre_hook(session.pre_step)
    post = register_optimizer_step_post_hook(session.post_step)
    if session.progress is not None:
        session.progress.start()
        session.task = session.progress.add_task("steps", total=session.warmup + session.iters)
    try:
        runpy.run_path(str(path), run_name="__main__")
        return False
    except _StopProfiling:
        return True
    except SystemExit as exc:
        if exc.code in (0, None):
            return False
        raise SriftError(f"the script exited with status {exc.code}; no profile was written.",
                         "make the script run on its own first (`python SCRIPT ARGS`).", exit_code=_exit_code(exc.code)) from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        _print_script_traceback(exc, path)
        raise SriftError(f"the script raised {type(exc).__name__} (traceback above); no profile was written.",
                         "fix the error and check the script runs on its own (`python SCRIPT ARGS`).", exit_code=1) from None
    finally:
        pre.remove()
        post.remove()
        session.finder.remove()
        if session.progress is not None:
            session.progress.stop()
        sys.argv = old_argv
        sys.path[:] = old_path
        gc.collect()  # drop the script's frames: DataLoader workers shut down with their iterator


def _exit_code(code: Any) -> int:
    return code if isinstance(code, int) and 0 < code < 256 else 1


def _print_script_traceback(exc: BaseException, path: Path) -> None:
    # Start the traceback at the script's own frame, not at srift's runner and runpy.
    tb = exc.__traceback__
    target = str(path.resolve())
    while tb is not None and str(Path(tb.tb_frame.f_code.co_filename).resolve()) != target:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__, file=sys.stderr)


def _finish(session: _Session, stopped: bool, name: str, out_path: Path, batch_override: int | None,
            kfac: bool = False) -> ProfileResult:
    if session.optimizer is None:
        raise SriftError("the script never called optimizer.step(), so there was no iteration to measure; no profile was written.",
                         "make sure the script trains (a torch.optim optimizer's step()) with the arguments given.", exit_code=1)
    if session.timer is None or session.model is None:
        raise SriftError("no model was called before the first optimizer step, so srift could not find what to time.",
                         "call the model (an nn.Module owning the optimizer's parameters) before optimizer.step().", exit_code=1)
    needed = session.warmup + session.iters
    warnings: list[str] = []
    if not session.records:
        raise SriftError(f"the script stopped after {session.steps} optimizer step(s), before any measured step "
                         f"(warm-up is {session.warmup}); no profile was written.",
                         f"lower --warmup (to {max(session.steps - 1, 1)}) or let the script run longer.", exit_code=1)
    if not stopped and session.steps < needed:
        warnings.append(f"the script ended after {session.steps} optimizer steps, fewer than the {needed} asked; "
                        f"the profile holds {len(session.records)} measured iteration(s) instead of {session.iters}.")

    world, rank = session.world_size, session.rank
    buckets: list[AllReduceBucket] = []
    notes: list[str] = []
    if session.comm is not None:
        if session.gathered is not None:
            buckets = session.gathered
        else:  # the script ended by itself: the other ranks' buckets cannot be collected any more
            buckets = session.comm.buckets()
            notes.append(f"all-reduce buckets of rank {rank} only (the script ended before srift stopped it)")
        if not session.comm.installed:
            notes.append("the script registered its own DDP comm hook; all-reduce buckets were not measured")
    if rank != 0:
        return ProfileResult(None, None, warnings)

    timer = session.timer
    timer.remove()
    layers = _structure(session, notes)
    leaf_names = [n for n, _ in timer.leaves]
    by_name = {n: i for i, n in enumerate(leaf_names)}
    micro = max(1, round(sum(r.micro_batches for r in session.records) / len(session.records)))
    for layer in layers:
        i = by_name.get(layer.name)
        if i is None:
            continue
        layer.fwd_s, layer.fwd_s_std = mean_std([r.layer_fwd_s.get(i, 0.0) for r in session.records])
        layer.bwd_s, layer.bwd_s_std = mean_std([r.layer_bwd_s.get(i, 0.0) for r in session.records])
        if micro > 1:  # the analysis ran one micro-batch; the iteration runs `micro` of them
            layer.fwd_flops *= micro
            layer.bwd_flops *= micro
            layer.fwd_flops_seq2 *= micro
            layer.bwd_flops_seq2 *= micro
            layer.fwd_bytes *= micro
            layer.bwd_bytes *= micro

    x = timer.first_input
    micro_batch = int(x.shape[0]) if x is not None and x.dim() > 0 else 1
    seq_len = int(x.shape[1]) if x is not None and x.dim() >= 2 and not x.is_floating_point() else None
    batch = batch_override or micro_batch * micro
    if micro > 1:
        notes.append(f"gradient accumulation: {micro} micro-batches of {micro_batch} per optimizer step; "
                     "batch_size, FLOPs and times are per step, activation_bytes per micro-batch")
    if batch_override:
        notes.append(f"batch size {batch_override} given with --batch-size (detected {micro_batch * micro})")
    if timer.autocast is not None:
        precision = "amp"
        notes.append(f"autocast {timer.autocast[0]} {str(timer.autocast[1]).replace('torch.', '')} detected")
    elif session.clock.kind == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        precision = "tf32"
    else:
        precision = "fp32"
    total, total_std = mean_std([r.total_s for r in session.records])
    phases = PhaseTimes(
        data_s=mean_std([r.data_s for r in session.records])[0],
        forward_s=mean_std([r.forward_s for r in session.records])[0],
        backward_s=mean_std([r.backward_s for r in session.records])[0],
        optimizer_s=mean_std([r.optimizer_s for r in session.records])[0],
        total_s=total,
        total_s_std=total_std,
    )
    if kfac:
        _kfac_times(session, layers, micro, notes)
    notes.extend(warnings)
    profile = Profile(
        name=name,
        batch_size=int(batch),
        precision=precision,
        layers=layers,
        seq_len=seq_len,
        device=_device(session.clock.kind),
        framework=_versions(),
        optimizer=_optimizer_info(session.optimizer, session.model),
        phases=phases,
        iterations=len(session.records),
        world_size=world,
        allreduce=buckets,
        input_bytes_per_sample=timer.input_bytes / max(micro_batch, 1),
        notes=[f"measured with `srift profile` ({session.warmup} warm-up + {len(session.records)} measured optimizer steps)"] + notes,
    )
    path = profile.save(out_path)
    return ProfileResult(profile, path, warnings)


def _analysis_step(session: _Session) -> Any:
    """One forward pass of the model on the batch captured in warm-up, returning a scalar to
    backpropagate, under the script's autocast; None when no batch was captured."""
    timer, model = session.timer, session.model
    assert timer is not None and model is not None
    if timer.capture is None:
        return None
    args, kwargs = timer.capture

    def step() -> Any:
        if timer.autocast is not None:
            with torch.autocast(timer.autocast[0], dtype=timer.autocast[1]):
                out = model(*args, **kwargs)
        else:
            out = model(*args, **kwargs)
        t = _loss_tensor(out)
        return t.float().sum() if t is not None else out

    return step


def _kfac_times(session: _Session, layers: list[LayerProfile], micro: int, notes: list[str]) -> None:
    """Time K-FAC's kernels on the captured batch and write them into ``layers``."""
    from srift.profiling.kfac_timing import measure_kfac

    step = _analysis_step(session)
    if step is None:
        notes.append("--kfac: no training forward pass was captured; K-FAC kernels were not timed")
        return
    try:
        times = measure_kfac(session.model, step)
    except Exception as exc:  # keep the profile; say why the K-FAC times are missing
        notes.append(f"--kfac: timing K-FAC kernels failed ({type(exc).__name__}: {exc})")
        return
    for layer in layers:
        t = times.get(layer.name)
        if t is None:
            continue
        # Factors are built per micro-batch: a step of `micro` micro-batches builds them `micro` times.
        layer.kfac_factor_a_s, layer.kfac_factor_g_s = t.factor_a_s * micro, t.factor_g_s * micro
        layer.kfac_inverse_a_s, layer.kfac_inverse_g_s = t.inverse_a_s, t.inverse_g_s
        layer.kfac_precondition_s = t.precondition_s
    notes.append(f"--kfac: K-FAC kernels timed on {len(times)} layers (factors, Cholesky inverses, preconditioning; fp32)")


def _structure(session: _Session, notes: list[str]) -> list[LayerProfile]:
    """Per-layer FLOPs/bytes/params from one untimed analysed step on the captured batch."""
    from srift.profiling.flops import analyze_layers

    timer, model = session.timer, session.model
    assert timer is not None and model is not None
    step = _analysis_step(session)
    if step is not None:
        try:
            with torch.enable_grad():
                return analyze_layers(model, step)
        except Exception as exc:  # a model FlopCounterMode cannot trace: keep the timings
            notes.append(f"structural analysis failed ({type(exc).__name__}: {exc}); FLOPs and bytes are missing")
    else:
        notes.append("no training forward pass was captured; FLOPs and bytes are missing")
    layers = []
    for name, m in timer.leaves:
        ps = [p for p in m.parameters(recurse=False) if p.requires_grad]
        layers.append(LayerProfile(name=name, type=type(m).__name__, params=sum(p.numel() for p in ps),
                                   grad_bytes=sum(p.numel() * p.element_size() for p in ps)))
    return layers


def _loss_tensor(out: Any) -> torch.Tensor | None:
    """The first floating tensor output that autograd can differentiate (loss or logits)."""
    if isinstance(out, torch.Tensor):
        return out if out.requires_grad else None
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        values = out.to_tuple() if hasattr(out, "to_tuple") else tuple(out.values())
        return _loss_tensor(values)
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _loss_tensor(o)
            if t is not None:
                return t
    return None


def _device(kind: str) -> dict[str, Any]:
    if kind == "cuda":
        from srift.hardware import find_gpu

        dev_name = torch.cuda.get_device_name()
        return {"name": dev_name, "kind": "cuda", "gpu": find_gpu(dev_name)}
    return {"name": platform.processor() or platform.machine() or "cpu", "kind": "cpu", "gpu": None}


def _versions() -> dict[str, str]:
    out = {"torch": str(torch.__version__), "python": platform.python_version(), "srift": srift.__version__}
    for mod in ("transformers", "torchvision", "timm"):
        if mod in sys.modules:
            out[mod] = str(getattr(sys.modules[mod], "__version__", "unknown"))
    return out


def _optimizer_info(opt: torch.optim.Optimizer, model: torch.nn.Module) -> dict[str, Any]:
    """Optimizer type and its measured state bytes per trainable parameter."""
    n_params = sum(p.numel() for g in opt.param_groups for p in g["params"]) or 1
    state_bytes = 0
    for st in opt.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:  # skip scalar step counters
                state_bytes += v.numel() * v.element_size()
    return {"type": type(opt).__name__, "state_bytes_per_param": round(state_bytes / n_params, 3)}

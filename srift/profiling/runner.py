"""Run a user's training script in-process under the profiler and write its profile.

The script runs as ``python SCRIPT ARGS`` would run it: ``runpy.run_path`` with run name
``__main__``, ``sys.argv = [SCRIPT, *ARGS]``, the script's folder first on ``sys.path`` (all
restored afterwards). An iteration is one optimizer step, seen through torch's global optimizer
step hooks (the first optimizer that steps is the one counted). Step 1 finds the model (see
srift.profiling.hooks) and installs the timing hooks; steps 2..warmup are warm-up; the next
``iters`` steps are measured. After the last one the step hook raises a private BaseException
that unwinds the script (the ``except Exception`` blocks scripts commonly have do not catch it),
so the script stops cleanly and its DataLoader workers shut down with their iterator.

Then srift/profiling/assemble.py builds the profile: the model's structure, analysed untimed on
the batch captured in the first measured-phase iteration (one extra forward/backward, FLOPs from
torch's FlopCounterMode), merged with the timings by module name.

Outcomes: the script raising shows its own traceback and writes nothing; no optimizer step, or
fewer steps than warm-up + 1, fails and writes nothing; a script that ends after at least one
measured step but fewer than ``iters`` writes what was measured, with a warning (also recorded
in the profile's ``notes`` and ``iterations``).

Bounded: no run waits more than ``timeout_s`` for its next optimizer step (the first one
included, so a script stuck before training stops too). A SIGALRM raises a private
BaseException in the script's thread, which unwinds it as a stop does; the error says what was
seen (forward calls, backward passes, steps) and the script line it was waiting on. A script that
swallows it or sits in C code past a grace period is ended from a watchdog thread. Either way
the child processes the script started (DataLoader workers, subprocesses) are stopped, and
nothing is written. The profile is written atomically and, unless ``overwrite``, never over an
existing file (checked before the script runs, and again at the write).

Under torchrun (DDP, world size > 1) every rank measures its own all-reduce buckets; they are
gathered to rank 0, which alone writes the profile.

FSDP (srift/profiling/fsdp.py): every rank times its units' collectives; at the last measured step,
before stopping the script, every rank runs the structural analysis (its forward and backward
run FSDP's all-gathers and reduce-scatters) and the collectives are gathered to rank 0.
"""

from __future__ import annotations

import gc
import linecache
import math
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from srift.bounds import (
    DEFAULT_PROFILE_TIMEOUT_S, MAX_BATCH_SIZE, MAX_ITERS, MAX_PROFILE_TIMEOUT_S, MAX_WARMUP, PROFILE_STOP_GRACE_S, require,
)
from srift.errors import SriftError
from srift.files import check_name, file_in, input_file, name_from, output_file
from srift.profile import AllReduceBucket, LayerProfile, Profile
from srift.profiling import fsdp
from srift.profiling.assemble import Measurement, analyze_structure, assemble_profile, leaf_layers
from srift.profiling.buckets import BucketTimer, is_ddp
from srift.profiling.hooks import CudaClock, IterationTimes, LayerTimer, ModelFinder, WallClock


class _StopProfiling(BaseException):
    """Raised from the optimizer step hook once enough iterations are measured."""


class _StepTimeout(BaseException):
    """Raised in the script's thread when no optimizer step came within the timeout."""


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
        self.watch: _StepWatch | None = None
        self.fsdp: fsdp.CollectiveTimer | None = None
        self.layers: list[LayerProfile] | None = None  # FSDP: analysed on every rank before stopping
        self.notes: list[str] = []

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
        model: torch.nn.Module = root.module if is_ddp(root) else root  # type: ignore[assignment]
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
        self._attach_fsdp(root)

    def _attach_fsdp(self, root: torch.nn.Module) -> None:
        setup = fsdp.detect(root)
        if setup is None or self.timer is None:
            return
        self.timer.pass_end_callback = True  # FSDP2 accumulates into copies whose hooks srift does not see
        self.fsdp = fsdp.CollectiveTimer(root, setup, self.timer, self.clock)

    def _finish_fsdp(self) -> None:
        """On every rank at the same step: the structural analysis and the collectives' gather
        (both run collectives)."""
        assert self.fsdp is not None and self.timer is not None and self.model is not None
        self.fsdp.remove()
        self.timer.remove()
        self.layers = analyze_structure(self.model, self.timer, self.notes)
        self.fsdp.gather()

    def post_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if opt is not self.optimizer:
            return
        if self.timer is not None:
            self.timer.optimizer_end()
        self.clock.sync()  # the one synchronisation per iteration (no-op on CPU)
        end = time.perf_counter()
        self.steps += 1
        if self.watch is not None:
            self.watch.stepped()
        measured = self.steps > self.warmup
        if self.timer is not None:
            rec = self.timer.finish_iteration(self.prev_end, end, measured)
            if rec is not None:
                self.records.append(rec)
        if self.comm is not None:
            self.comm.end_iteration(measured)
        if self.fsdp is not None:
            self.fsdp.end_iteration(measured)
        self.prev_end = end
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=self.steps)
        if self.timer is not None and self.steps >= self.warmup + self.iters:
            if self.comm is not None:  # a collective: every rank stops at this same step
                self.gathered = self.comm.gather()
            if self.fsdp is not None:
                self._finish_fsdp()
            raise _StopProfiling

    def close(self) -> None:
        self.finder.remove()
        if self.timer is not None:
            self.timer.remove()
        if self.fsdp is not None:
            self.fsdp.remove()


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
    timeout_s: float = DEFAULT_PROFILE_TIMEOUT_S,
    overwrite: bool = False,
    stop_grace_s: float = PROFILE_STOP_GRACE_S,
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
        timeout_s: Longest wait for the next optimizer step, the first included (see module docstring).
        overwrite: Replace an existing profile at the output path (``--force``).
        stop_grace_s: After a timeout, how long the script has to unwind before it is ended.

    Raises:
        SriftError: bad arguments or an existing output (exit 2), or the script failed, never
            stepped or timed out (exit 1).
    """
    input_file(script, "script")
    path = Path(script)
    if warmup < 1:
        raise SriftError(f"--warmup must be at least 1, got {warmup}.", "the first step is used to find the model; pass --warmup 1 or more.")
    require(warmup, "--warmup", 1, MAX_WARMUP, integer=True, hint=f"pass --warmup from 1 to {MAX_WARMUP:,}.")
    if iters < 1:
        raise SriftError(f"--iters must be at least 1, got {iters}.", "pass --iters 1 or more (20 gives a stable mean).")
    require(iters, "--iters", 1, MAX_ITERS, integer=True, hint=f"pass --iters from 1 to {MAX_ITERS:,} (20 gives a stable mean).")
    if batch_size is not None:
        if batch_size < 1:
            raise SriftError(f"--batch-size must be positive, got {batch_size}.", "pass --batch-size 1 or more, or leave it out to detect it.")
        require(batch_size, "--batch-size", 1, MAX_BATCH_SIZE, integer=True, hint=f"pass --batch-size from 1 to {MAX_BATCH_SIZE:,}.")
    require(timeout_s, "--timeout", 0, MAX_PROFILE_TIMEOUT_S, low_open=True, unit="s",
            hint=f"pass --timeout SECONDS above 0 and at most {MAX_PROFILE_TIMEOUT_S:,.0f} (default {DEFAULT_PROFILE_TIMEOUT_S:g}).")
    name = check_name(name) if name is not None else name_from(path.stem)
    out_path = output_file(output if output else file_in("profiles", name, ".yaml"), "profile", overwrite,
                           "pass --force to replace it, or choose another --name or -o.")

    progress = _progress(show_progress)
    session = _Session(warmup, iters, progress)
    watch = _StepWatch(timeout_s, stop_grace_s, session, path)
    session.watch = watch
    stopped = _run(path, script_args, session, watch)
    try:
        return _finish(session, stopped, name, out_path, batch_size, kfac, overwrite)
    finally:
        session.close()


def _progress(show: bool | None) -> Any:
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        return None
    return Progress(TextColumn("profiling"), BarColumn(), MofNCompleteColumn(), TextColumn("optimizer steps"),
                    console=Console(stderr=True), transient=True)


def _run(path: Path, args: list[str], session: _Session, watch: "_StepWatch | None" = None) -> bool:
    """Run the script; True when the profiler stopped it, False when it ended by itself."""
    watch = watch or _StepWatch(DEFAULT_PROFILE_TIMEOUT_S, PROFILE_STOP_GRACE_S, session, path)
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    pre = register_optimizer_step_pre_hook(session.pre_step)
    post = register_optimizer_step_post_hook(session.post_step)
    if session.progress is not None:
        session.progress.start()
        session.task = session.progress.add_task("steps", total=session.warmup + session.iters)
    try:
        with watch:
            runpy.run_path(str(path), run_name="__main__")
        return False
    except _StopProfiling:
        return True
    except _StepTimeout:
        watch.unwound()
        raise watch.error() from None
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
        stop_children(watch.children_before)  # and whatever the script started that is still running


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
            kfac: bool = False, overwrite: bool = True) -> ProfileResult:
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
    layers, fsdp_measured = session.layers, None
    if session.fsdp is not None:
        session.fsdp.remove()
        notes += session.notes
        if layers is None and world > 1:
            # The script ended by itself: an analysed step on this rank alone would wait for the others.
            notes.append("the script ended before srift stopped it, so the structure was not analysed on every rank: "
                         "FLOPs and bytes are missing")
            layers = leaf_layers(session.timer)
        fsdp_measured = fsdp.measurement(session.model, session.fsdp.setup, session.timer, session.fsdp)
    if rank != 0:
        return ProfileResult(None, None, warnings)

    session.timer.remove()
    measured = Measurement(name=name, model=session.model, optimizer=session.optimizer, timer=session.timer,
                           clock_kind=session.clock.kind, records=session.records, warmup=session.warmup,
                           world_size=world, buckets=buckets, layers=layers, fsdp=fsdp_measured)
    profile = assemble_profile(measured, notes, warnings, batch_override, kfac)
    try:
        written = profile.save(out_path, overwrite=overwrite)
    except FileExistsError:  # created while the script ran
        raise SriftError(f"profile '{out_path}' appeared while the script ran; srift does not replace it unasked.",
                         "pass --force to replace it, or choose another --name or -o.") from None
    return ProfileResult(profile, written, warnings)


# ---- the step watch ------------------------------------------------------------------------------
class _StepWatch:
    """Bounds the wait for each optimizer step (see module docstring).

    Armed around the script's run: SIGALRM (when srift runs in the main thread) raises
    _StepTimeout in the script after ``timeout_s`` without a step; ``stepped`` re-arms it. A
    daemon thread ends the process ``grace_s`` later if the script has not unwound by then.
    """

    def __init__(self, timeout_s: float, grace_s: float, session: _Session, script: Path) -> None:
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self.session = session
        self.script = str(script.resolve())
        self._names = {str(script), self.script, os.path.abspath(script)}  # how runpy may have named its code
        self.children_before = set(descendants(os.getpid()))
        self.deadline = math.inf
        self.where: str | None = None
        self._signal = False
        self._old_handler: Any = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "_StepWatch":
        self._signal = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM")
        if self._signal:
            self._old_handler = signal.signal(signal.SIGALRM, self._on_alarm)
        self.stepped()
        self._thread = threading.Thread(target=self._watchdog, name="srift-step-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unwound()

    def stepped(self) -> None:
        """An optimizer step happened: the next has ``timeout_s`` from now."""
        self.deadline = time.monotonic() + self.timeout_s
        if self._signal:
            signal.setitimer(signal.ITIMER_REAL, self.timeout_s)

    def unwound(self) -> None:
        """The script is done (stopped, ended, failed or timed out): disarm."""
        self._done.set()
        if self._signal:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_handler if self._old_handler is not None else signal.SIG_DFL)
            self._signal = False

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self._done.is_set():
            return
        self.where = self._script_line(frame)
        raise _StepTimeout

    def _script_line(self, frame: Any) -> str | None:
        """``train.py:12 (time.sleep(60))``: the innermost line of the script in ``frame``'s stack."""
        while frame is not None:
            if frame.f_code.co_filename in self._names:
                line = linecache.getline(self.script, frame.f_lineno).strip()
                return f"{Path(self.script).name}:{frame.f_lineno}" + (f" ({line[:80]})" if line else "")
            frame = frame.f_back
        return None

    def _watchdog(self) -> None:
        while not self._done.wait(0.25):
            if time.monotonic() > self.deadline + self.grace_s:
                if self.where is None:
                    self.where = self._script_line(sys._current_frames().get(threading.main_thread().ident or 0))
                err = self.error(hard=True)
                print(f"Error: {err.message}\nTo fix: {err.hint}", file=sys.stderr, flush=True)
                stop_children(self.children_before)
                os._exit(err.exit_code)

    def error(self, hard: bool = False) -> SriftError:
        """What the timeout saw: steps, forward calls, backward passes, and where the script waited."""
        s, t = self.session, f"{self.timeout_s:g} s"
        finder = s.finder
        if s.steps:
            seen = (f"no optimizer step for {t} after step {s.steps} of the {s.warmup + s.iters} asked")
            hint = "the script stalls between steps (data loading, I/O, a collective waiting for a peer); raise --timeout if a step really takes that long."
        elif finder.backward_passes:
            seen = (f"no torch.optim optimizer stepped within {t}, though the model ran {finder.forward_calls} forward "
                    f"and {finder.backward_passes} backward pass(es)")
            hint = ("srift counts one iteration per torch.optim.Optimizer.step(): make the script call one "
                    "(a custom optimizer must subclass torch.optim.Optimizer).")
        elif finder.forward_calls:
            seen = (f"no optimizer step within {t}: the model ran {finder.forward_calls} forward pass(es) but no backward "
                    "pass reached its output")
            hint = "check that the script trains (loss.backward(), then optimizer.step()) with the arguments given."
        else:
            seen = f"no optimizer step within {t}: no model forward, no backward; the script never reached training"
            hint = ("the script may be waiting (a download, input(), a lock, a rendezvous): run it on its own "
                    "(`python SCRIPT ARGS`), or raise --timeout if its start really takes that long.")
        where = f"; it was at {self.where}" if self.where else ""
        ended = (f"; it did not stop within {self.grace_s:g} s of being interrupted, so srift ended it" if hard else "")
        return SriftError(f"{seen}{where}{ended}; no profile was written.", hint, exit_code=1)


# ---- the script's child processes ---------------------------------------------------------------
def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...): /proc on Linux, else the
    multiprocessing children this process knows."""
    proc = Path("/proc")
    if not proc.is_dir():
        import multiprocessing

        return [p.pid for p in multiprocessing.active_children() if p.pid is not None]
    children: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            stat = (proc / entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[0] != "Z":  # zombies are already gone
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def stop_children(before: set[int], grace_s: float = 3.0) -> list[int]:
    """Stop the processes started under this one since ``before`` was taken (SIGTERM, then
    SIGKILL after ``grace_s``) and reap the direct ones; return their pids."""
    pids = [p for p in descendants(os.getpid()) if p not in before]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + grace_s
        while time.monotonic() < end and any(_alive(p) for p in pids):
            time.sleep(0.05)
        if not any(_alive(p) for p in pids):
            break
    return pids


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # reaps a direct child that has exited
        if done:
            return False
    except ChildProcessError:  # not our child: look for it
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

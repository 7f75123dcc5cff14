"""Run a user's training script in-process under the profiler and write its profile.

The script runs as ``python SCRIPT ARGS`` would run it: ``runpy.run_path`` with run name
``__main__``, ``sys.argv = [SCRIPT, *ARGS]``, the script's folder first on ``sys.path`` (all
restored afterwards). An iteration is one optimizer step, seen through torch's global optimizer
step hooks (the first optimizer that steps is the one counted). Step 1 finds the model (see
srift.profiling.hooks) and installs the root hooks; steps 2..warmup-1 run without the leaf hooks
(with ``warmup`` >= 3), then the leaf hooks go in; the next ``iters`` steps are measured. In one
process (no FSDP, no torchrun), when the leaves were timed, srift then times ``pairs(iters)``
pairs of steps whole, one without the leaf hooks and one with them: what the hooks cost a step is
the difference within the pairs (which see the same machine), taken out of the layers
(srift/profiling/assemble.py, docs/profiling.md). On CUDA (one
process) an iteration's events are read at the next step's end, without a device sync. After the
last step the step hook raises a private BaseException
that unwinds the script (the ``except Exception`` blocks scripts commonly have do not catch it),
so the script stops cleanly and its DataLoader workers shut down with their iterator. A script
that catches it anyway (a bare ``except:``) meets it again at its next module call or step; the
third time, or ``stop_grace_s`` without a hook, srift writes the profile and ends the process.
Forked children (multiprocessing, DataLoader workers) inherit the hooks but are not measured;
``os._exit`` in srift's own process unwinds the script like ``sys.exit``; SIGTERM/SIGHUP stop
the script's child processes before srift dies of the signal.

Then srift/profiling/assemble.py builds the profile: the model's structure, analysed untimed on
the batch captured at the model's first forward after step 1 (a warm-up step) (one extra forward/backward, FLOPs from
torch's FlopCounterMode), merged with the timings by module name.

Outcomes: the script raising shows its own traceback and writes nothing (exit 1); a non-zero
exit status is srift's, nothing written; no optimizer step, no model, or fewer steps than warm-up
+ 1, fails and writes nothing (exit 2); a script that ends after at least one
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
import inspect
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

from srift.profiling.stack_detect import detect_stack
from srift.stacks import DetectedStack
from srift.bounds import (
    DEFAULT_PROFILE_TIMEOUT_S, MAX_BATCH_SIZE, MAX_ITERS, MAX_PROFILE_TIMEOUT_S, MAX_WARMUP, PROFILE_STOP_GRACE_S, require,
)
from srift.errors import SriftError
from srift.files import check_name, file_in, input_file, name_from, output_file
from srift.profile import WALL_LESS_RUN_QUEUE, AllReduceBucket, LayerProfile, Profile, RankMemory
from srift.profiling import fsdp
from srift.profiling.step_lines import StepLines
from srift.profiling.assemble import Measurement, analyze_structure, assemble_profile, leaf_layers
from srift.profiling.buckets import BucketTimer, is_ddp
from srift.profiling.host import HostCalls
from srift.profiling.hooks import (
    PAIRED, UNHOOKED, CudaClock, IterationTimes, LayerTimer, ModelFinder, WallClock, hooks_off, unwrap,
)


# Hand-written parameter updates (no torch.optim) seen before srift stops the script: two, so one
# odd update (a weight initialised after a first backward) is not taken for a training loop.
HAND_UPDATES = 2


def pairs(iters: int) -> int:
    """srift's pairs of steps (one without the leaf hooks, one with) after ``iters`` measured
    steps: half as many, at least 2 (their differences' interquartile mean needs a few)."""
    return max(2, (iters + 1) // 2)


class _StopProfiling(BaseException):
    """Raised from the optimizer step hook once enough iterations are measured."""


class _StepTimeout(BaseException):
    """Raised in the script's thread when no optimizer step came within the timeout."""


class _ScriptExit(BaseException):
    """Raised in place of ``os._exit`` called by the script in srift's own process."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


_REAL_EXIT = os._exit  # srift's own hard exits, whatever the script's run patched
STOP_RERAISES = 2  # stops a script may swallow (a bare ``except:``) before srift stops it hard


@dataclass
class ProfileResult:
    """What a profiling run produced."""

    profile: Profile | None  # None on ranks other than 0
    path: Path | None
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Output:
    """Where and how the profile is written (also what a hard stop needs to write it)."""

    name: str
    path: Path
    batch_override: int | None
    kfac: bool
    overwrite: bool


class _Session:
    """State shared by the optimizer step hooks during one script run."""

    def __init__(self, warmup: int, iters: int, progress: Any = None) -> None:
        self.warmup = warmup
        self.iters = iters
        self.finder = ModelFinder()
        self.optimizer: torch.optim.Optimizer | None = None
        self.other_optimizers: list[torch.optim.Optimizer] = []  # the script's other optimizers (M10)
        self.root: torch.nn.Module | None = None
        self.model: torch.nn.Module | None = None
        self.timer: LayerTimer | None = None
        self.comm: BucketTimer | None = None
        self.clock: WallClock | CudaClock = WallClock()
        self.steps = 0
        self.start_mark: Any = None  # taken when srift hands control back to the script
        self.start_wait_s = 0.0  # the training thread's run-queue wait then (CPU clock)
        self.run_queue_s: list[float] = []  # per measured step: run-queue wait left out of its times
        self.lazy = False  # CUDA: resolve an iteration's events at the next step, without a sync
        self.lagging: Any = None  # the iteration waiting to be resolved (lazy)
        self.records: list[IterationTimes] = []
        self.unhooked_s: list[float] = []  # srift's pairs (after the measured steps): the unhooked step's total
        self.paired_s: list[float] = []  # and the hooked step's
        self.unhooked_ok = False  # one process, no FSDP: srift's pairs may follow the measured steps
        self.leaves_timed = False  # a measured step ran the leaf hooks (not compiled away)
        self.progress = progress
        self.task = None
        self.world_size = 1
        self.rank = 0
        self.gathered: list[AllReduceBucket] | None = None
        self.watch: _StepWatch | None = None
        self.fsdp: fsdp.CollectiveTimer | None = None
        self.layers: list[LayerProfile] | None = None  # FSDP: analysed on every rank before stopping
        self.notes: list[str] = []
        self.pid = os.getpid()
        self.stops = 0  # times srift's stop was raised (more than once: the script swallowed it)
        self.refusal: SriftError | None = None
        self.graph_capture = False  # a step hook fired while a CUDA graph was captured
        self.stack: DetectedStack | None = None  # the training stack driving the step (stack_detect.py)
        self.peak_memory: list[RankMemory] = []
        self.output: _Output | None = None
        self._stop_hook: Any = None
        self.hard_stopping: threading.Thread | None = None
        self.finder.hand_updates.on_update = self._hand_update

    def _hand_update(self, count: int) -> None:
        """The script updated its parameters itself, with no optimizer step (``HandUpdates``): after
        ``HAND_UPDATES`` of them srift stops it, nothing written (it times a step at ``step()``)."""
        if count < HAND_UPDATES or not self._ours() or self.optimizer is not None:
            return
        self.refusal = SriftError(
            f"the script updated its model's parameters itself {count} times after backward, without a "
            "torch.optim optimizer: srift times an iteration from one optimizer.step() to the next; no profile "
            "was written.",
            "use a torch.optim optimizer for the update: `opt = torch.optim.SGD(model.parameters(), lr=lr)` "
            "once, then `opt.step()` and `opt.zero_grad()` in place of the loop over the parameters "
            "(the same update: p -= lr * p.grad).")
        self.stop()

    def host_sink(self) -> LayerTimer | None:
        """The timer the data iterator's and zero_grad's calls report to (srift.profiling.host)."""
        return self.timer if self._ours() and not hooks_off() else None

    def _ours(self) -> bool:
        # A forked child (multiprocessing, DataLoader workers) inherits the hooks: not srift's run.
        return os.getpid() == self.pid

    def pre_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._ours():
            return
        if self.stops:
            self.stop_again()
        if hooks_off():
            self.graph_capture = self.graph_capture or not torch.compiler.is_compiling()
            return
        if self.optimizer is None:
            self.optimizer = opt
            self.stack = detect_stack(inspect.currentframe())
            self._attach(opt)
        if self.timer is not None:
            if opt is self.optimizer:
                self.timer.optimizer_start()
            else:
                self.timer.other_optimizer_start()
                if all(o is not opt for o in self.other_optimizers):
                    self.other_optimizers.append(opt)

    def _attach(self, opt: torch.optim.Optimizer) -> None:
        root = self.finder.choose(opt)
        self.finder.remove()
        if root is None:
            root = self.finder.fallback(opt)
            if root is None:
                return
            self.notes.append(f"the model ({type(root).__name__}) was found from the optimizer's parameters "
                              "(no top-level module call was seen: compiled in place?)")
        if isinstance(root, torch.nn.DataParallel) and len(root.device_ids or []) > 1:
            self.refusal = SriftError("the script uses nn.DataParallel on several GPUs, which srift cannot time "
                                      "(its replicas run srift's hooks from several threads); no profile was written.",
                                      "profile it on one GPU (CUDA_VISIBLE_DEVICES=0), or use DistributedDataParallel "
                                      "under torchrun (PyTorch recommends it over DataParallel).")
            self.stop()
        model = unwrap(root)
        device = model_device(model)
        # Read now: scripts often destroy the process group in a `finally` that runs on our stop.
        if dist.is_available() and dist.is_initialized():
            self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        if device.type == "cuda":
            if self.world_size > 1 and torch.cuda.current_device() != device.index:
                # torchrun without torch.cuda.set_device: NCCL, events and syncs would all go to GPU 0.
                torch.cuda.set_device(device)
                self.notes.append(f"the script did not set its CUDA device; srift set it to {device} (the model's)")
            self.clock = CudaClock(device)
        self.root, self.model = root, model
        setup = fsdp.detect(root)
        multi_ddp = is_ddp(root) and self.world_size > 1
        # Steps 2..warmup-1 without leaf hooks, leaf hooks after (FSDP and torchrun: from the start).
        self.timer = LayerTimer(root, model, self.clock, leaf_hooks=setup is not None or multi_ddp or self.warmup < 3)
        self.timer.want_capture = True
        self.lazy = self.clock.kind == "cuda" and setup is None and not multi_ddp
        # srift's unhooked steps, in one process only: every rank of a distributed job stops at the
        # same step, and FSDP analyses its structure at the last measured one.
        self.unhooked_ok = setup is None and self.world_size == 1
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, total=self.planned_steps())
        if multi_ddp:
            self.comm = BucketTimer(root)
        if setup is not None:
            self.fsdp = fsdp.CollectiveTimer(root, setup, self.timer, self.clock)

    def pair_steps(self) -> int:
        """Steps of srift's pairs after the measured ones (0 where none follow, see _attach)."""
        return 2 * pairs(self.iters) if self.unhooked_ok and self.leaves_timed else 0

    def planned_steps(self) -> int:
        """Optimizer steps srift runs before it stops the script (its pairs included once the leaves
        were timed; before that, where they may follow, counted as if they will)."""
        may_pair = self.unhooked_ok and (self.leaves_timed or self.steps <= self.warmup)
        return self.warmup + self.iters + (2 * pairs(self.iters) if may_pair else 0)

    def _finish_fsdp(self) -> None:
        """On every rank at the same step: the structural analysis and the collectives' gather
        (both run collectives)."""
        assert self.fsdp is not None and self.timer is not None and self.model is not None
        self.fsdp.remove()
        self.timer.remove()
        self.layers = analyze_structure(self.model, self.timer, self.notes)
        self.fsdp.gather()

    def post_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._ours():
            return
        if opt is not self.optimizer:  # the iteration ends at the first optimizer's step
            if self.timer is not None and not hooks_off():
                self.timer.other_optimizer_end()
            return
        if self.stops:
            self.stop_again()
        if hooks_off():  # a CUDA graph being captured: nothing of this runs at its replays
            self.graph_capture = self.graph_capture or not torch.compiler.is_compiling()
            return
        timer = self.timer
        self.steps += 1
        if self.watch is not None:
            self.watch.stepped()
        last_measured = self.warmup + self.iters
        measured = self.warmup < self.steps <= last_measured
        paired = self.steps > last_measured  # srift's pairs: unhooked, then hooked
        if timer is not None:
            timer.optimizer_end()
            if measured and isinstance(self.clock, WallClock) and self.clock.name == WALL_LESS_RUN_QUEUE:
                self.run_queue_s.append(self.clock.waited_s() - self.start_wait_s)
            pend = timer.close_iteration(self.start_mark, timer.pending.opt_end, measured or paired)
            if paired:
                pend.role = PAIRED if timer.leaf_hooks else UNHOOKED
            self.leaves_timed = self.leaves_timed or (measured and bool(pend.fwd))
            if self.lazy:
                done, self.lagging = self.lagging, pend
            else:
                self.clock.sync()  # distributed jobs: their collectives' marks are read now
                done = pend
            if done is not None:
                self._record(done, timer.resolve(done))
        if self.comm is not None:
            self.comm.end_iteration(measured)
        if self.fsdp is not None:
            self.fsdp.end_iteration(measured)
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=self.steps, total=self.planned_steps())
        if timer is not None and self.steps == self.warmup and self.clock.kind == "cuda":
            torch.cuda.reset_peak_memory_stats(self.clock.device)  # peaks of the measured steps
        if timer is not None and last_measured <= self.steps < last_measured + self.pair_steps():
            # srift's pairs (the same work: memory peaks stay): the hooks out for the first step of each.
            if (self.steps - last_measured) % 2 == 0:
                timer.remove_leaf_hooks()
            else:
                timer.install_leaf_hooks()
        elif timer is not None and self.steps >= last_measured + self.pair_steps():
            self.flush()
            self._read_memory()
            if self.comm is not None:  # a collective: every rank stops at this same step
                self.gathered = self.comm.gather()
            if self.fsdp is not None:
                self._finish_fsdp()
            self.stop()
        if timer is not None and not timer.leaf_hooks and self.warmup - 1 <= self.steps < last_measured:
            timer.install_leaf_hooks()
        if isinstance(self.clock, WallClock):
            self.start_wait_s = self.clock.waited_s()
        self.start_mark = self.clock.mark()  # last: srift's bookkeeping is in no iteration

    def _record(self, pend: Any, rec: IterationTimes | None) -> None:
        if rec is None:
            return
        if pend.role == UNHOOKED:
            self.unhooked_s.append(rec.total_s)
        elif pend.role == PAIRED:
            self.paired_s.append(rec.total_s)
        else:
            self.records.append(rec)

    def flush(self) -> None:
        """Resolve the iteration still waiting (lazy CUDA timing)."""
        if self.lagging is not None and self.timer is not None:
            done, self.lagging = self.lagging, None
            self._record(done, self.timer.resolve(done))

    def _read_memory(self) -> None:
        """Peak allocated/reserved bytes of the measured steps on the model's GPU, every rank's."""
        if self.clock.kind != "cuda":
            return
        dev = self.clock.device
        mine = RankMemory(self.rank, int(torch.cuda.max_memory_allocated(dev)), int(torch.cuda.max_memory_reserved(dev)))
        if self.world_size > 1 and dist.is_initialized():
            everyone: list[Any] = [None] * self.world_size
            dist.all_gather_object(everyone, mine)  # every rank stops at this same step
            self.peak_memory = [m for m in everyone if isinstance(m, RankMemory)]
        else:
            self.peak_memory = [mine]

    # ---- stopping the script -------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the script: raise _StopProfiling, and again at every later hook (a bare ``except:``
        swallows it), then stop it hard with the profile written (``stop_again``)."""
        self.stops = 1
        if self._stop_hook is None:
            self._stop_hook = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: self.stop_again())
        raise _StopProfiling

    def stop_again(self) -> None:
        if not self._ours():
            return
        if self.hard_stopping is not None:
            if self.hard_stopping is threading.current_thread():
                return  # srift's own analysis step, run while stopping hard
            threading.Event().wait()  # the script's thread, while srift writes the profile and exits
        self.stops += 1
        if self.stops > STOP_RERAISES + 1:
            self.hard_stop("it caught srift's stop (a bare `except:` or `except BaseException`) "
                           f"{STOP_RERAISES + 1} times")
        raise _StopProfiling

    def hard_stop(self, why: str) -> None:
        """End the process now, the profile written (or the error said), the script's children stopped."""
        code = 0
        self.hard_stopping = threading.current_thread()
        try:
            if self.watch is not None:
                self.watch.unwound()  # (from the watchdog's thread: the signal handlers stay; it exits anyway)
            if self.refusal is not None:
                raise self.refusal
            assert self.output is not None
            out = self.output
            result = _finish(self, True, out.name, out.path, out.batch_override, out.kfac, out.overwrite)
            print(f"Warning: the script did not stop when srift stopped it ({why}); srift ended it.", file=sys.stderr)
            for w in result.warnings:
                print(f"Warning: {w}", file=sys.stderr)
            if result.path is not None:
                print(f"Wrote {result.path}: {result.profile.name if result.profile else ''}, "
                      f"{result.profile.iterations if result.profile else 0} iterations.")
        except SriftError as err:
            print(f"Error: {err.message}\nTo fix: {err.hint}", file=sys.stderr)
            code = err.exit_code
        except BaseException as exc:  # srift's own failure while ending: still end
            print(f"Error: srift could not write the profile after stopping the script ({type(exc).__name__}: {exc}).\n"
                  "To fix: run the script without a bare `except:` around its training loop.", file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        stop_children(self.watch.children_before if self.watch is not None else set())
        _REAL_EXIT(code)

    def _remove_stop_hook(self) -> None:
        if self._stop_hook is not None:
            self._stop_hook.remove()
            self._stop_hook = None

    def close(self) -> None:
        self._remove_stop_hook()
        self.finder.remove()
        if self.timer is not None:
            self.timer.remove()
        if self.fsdp is not None:
            self.fsdp.remove()


def model_device(model: torch.nn.Module) -> torch.device:
    """The GPU the model computes on when any of its parameters or buffers is on one (a CPU-offloaded
    first parameter does not make it a CPU job), else the CPU."""
    for t in (*model.parameters(), *model.buffers()):
        if t.is_cuda:
            return t.device
    return torch.device("cpu")


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
    path = Path(os.path.abspath(script))  # absolute from the start: the script may change folder
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
    out_path = Path(os.path.abspath(out_path))

    progress = _progress(show_progress, warmup, iters)
    session = _Session(warmup, iters, progress)
    watch = _StepWatch(timeout_s, stop_grace_s, session, path)
    session.watch = watch
    session.output = _Output(name, out_path, batch_size, kfac, overwrite)
    stopped = _run(path, script_args, session, watch)
    try:
        return _finish(session, stopped, name, out_path, batch_size, kfac, overwrite)
    finally:
        session.close()


def _progress(show: bool | None, warmup: int, iters: int) -> Any:
    """A rich bar on a terminal, plain lines elsewhere (srift/profiling/step_lines.py), none when
    ``show`` is False."""
    if show is None:
        show = sys.stderr is not None and sys.stderr.isatty()
        if not show:
            return StepLines(warmup, iters)
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
    exits = _ExitGuard(session.pid)
    signals = _TermSignals(watch)
    host = HostCalls(session.host_sink)
    old_hook = threading.excepthook

    def thread_hook(args: Any) -> None:  # a script's training thread ends quietly on srift's stop
        if not isinstance(args.exc_value, _StopProfiling):
            old_hook(args)

    threading.excepthook = thread_hook
    try:
        with watch, exits, signals, host:
            runpy.run_path(str(path), run_name="__main__")
        return session.stops > 0  # stopped in a thread of the script's, which then ended
    except _StopProfiling:
        return True
    except _StepTimeout:
        watch.unwound()
        raise watch.error() from None
    except (SystemExit, _ScriptExit) as exc:
        how = "exited" if isinstance(exc, SystemExit) else "called os._exit"
        if exc.code in (0, None):
            if not session.stops and isinstance(exc, _ScriptExit):
                session.notes.append("the script called os._exit(0) before srift stopped it")
            return session.stops > 0
        raise SriftError(f"the script {how} with status {exc.code}; no profile was written.",
                         "make the script run on its own first (`python SCRIPT ARGS`).", exit_code=_exit_code(exc.code)) from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        _print_script_traceback(exc, path)
        raise SriftError(f"the script raised {type(exc).__name__} (traceback above); no profile was written.",
                         "fix the error and check the script runs on its own (`python SCRIPT ARGS`).", exit_code=1) from None
    finally:
        threading.excepthook = old_hook
        session._remove_stop_hook()
        pre.remove()
        post.remove()
        session.finder.remove()
        if session.progress is not None:
            session.progress.stop()
        sys.argv = old_argv
        sys.path[:] = old_path
        gc.collect()  # drop the script's frames: DataLoader workers shut down with their iterator
        stop_children(watch.children_before)  # and whatever the script started that is still running


class _ExitGuard:
    """While the script runs: ``os._exit`` in srift's own process unwinds the script as
    ``sys.exit`` would (so srift reports its status); forked children exit for real."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def _exit(self, code: int) -> None:
        if os.getpid() != self.pid:
            _REAL_EXIT(code)
        raise _ScriptExit(code)

    def __enter__(self) -> "_ExitGuard":
        os._exit = self._exit  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: Any) -> None:
        os._exit = _REAL_EXIT


class _TermSignals:
    """SIGTERM/SIGHUP while the script runs: stop the processes it started, then die of the signal
    (nothing is written: the profile is written atomically, or not at all)."""

    SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))

    def __init__(self, watch: "_StepWatch") -> None:
        self.watch = watch
        self._old: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        stop_children(self.watch.children_before)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def __enter__(self) -> "_TermSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._old = {}


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
    if session.refusal is not None:
        raise session.refusal
    if session.graph_capture and not session.records:
        raise SriftError("the script captures its training step in a CUDA graph; srift cannot time graph replays "
                         "(no Python runs in them); no profile was written.",
                         "profile the script without CUDA graphs (or torch.compile mode 'reduce-overhead'), then "
                         "predict from that profile.")
    if session.optimizer is None:
        raise SriftError("the script never called optimizer.step(), so there was no iteration to measure; no profile was written.",
                         "make sure the script trains (a torch.optim optimizer's step()) with the arguments given.")
    if session.timer is None or session.model is None:
        raise SriftError("no model was called before the first optimizer step, so srift could not find what to time.",
                         "call the model (an nn.Module owning the optimizer's parameters) before optimizer.step().")
    session.flush()
    needed = session.warmup + session.iters
    warnings: list[str] = []
    if not session.records:
        raise SriftError(f"the script stopped after {session.steps} optimizer step(s), before any measured step "
                         f"(warm-up is {session.warmup}); no profile was written.",
                         f"lower --warmup (to {max(session.steps - 1, 1)}) or let the script run longer.")
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
    if session.clock.kind == "cuda" and not session.peak_memory and world == 1:  # the script ended by itself
        session._read_memory()
    measured = Measurement(name=name, model=session.model, optimizer=session.optimizer,
                           other_optimizers=session.other_optimizers, timer=session.timer,
                           clock_kind=session.clock.kind, records=session.records, warmup=session.warmup,
                           world_size=world, buckets=buckets, layers=layers, fsdp=fsdp_measured,
                           device=session.clock.device, unhooked_s=session.unhooked_s, paired_s=session.paired_s,
                           pairs_planned=session.pair_steps() // 2, peak_memory=session.peak_memory,
                           clock=session.clock.name, run_queue_s=session.run_queue_s, stack=session.stack)
    profile = assemble_profile(measured, notes + [n for n in session.notes if n not in notes], warnings, batch_override, kfac)
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
        self.stopped_at = math.inf
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
        self.stopped_at = time.monotonic()
        self.deadline = time.monotonic() + self.timeout_s
        if self._signal:
            signal.setitimer(signal.ITIMER_REAL, self.timeout_s)

    def unwound(self) -> None:
        """The script is done (stopped, ended, failed or timed out): disarm."""
        self._done.set()
        if self._signal and threading.current_thread() is threading.main_thread():
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
            if self.session.stops and time.monotonic() > self.stopped_at + self.grace_s:
                # Stopped, but the script caught it and runs on without reaching a hook.
                self.session.hard_stop(f"it ran on for {self.grace_s:g} s after srift's stop")
            if time.monotonic() > self.deadline + self.grace_s:
                if self.where is None:
                    self.where = self._script_line(sys._current_frames().get(threading.main_thread().ident or 0))
                err = self.error(hard=True)
                print(f"Error: {err.message}\nTo fix: {err.hint}", file=sys.stderr, flush=True)
                stop_children(self.children_before)
                _REAL_EXIT(err.exit_code)

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
        if s.graph_capture:
            seen += " (its step was captured in a CUDA graph, whose replays srift cannot see)"
            hint = "profile the script without CUDA graphs (or torch.compile mode 'reduce-overhead')."
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

"""One profiling run's state, driven by torch's optimizer step hooks (``Session``: which steps are
warm-up, measured or srift's pairs, when the leaf hooks go in and out, when the script is stopped),
and the profile written from it at the end (``finish_run``). srift/profiling/runner.py runs the
script around it; its module docstring tells the whole run.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from srift.errors import SriftError
from srift.profile import WALL_LESS_RUN_QUEUE, AllReduceBucket, LayerProfile, Profile, RankMemory
from srift.profiling import fsdp
from srift.profiling.assemble import Measurement, analyze_structure, assemble_profile, leaf_layers
from srift.profiling.buckets import BucketTimer, is_ddp
from srift.profiling.children import stop_children
from srift.profiling.hooks import (
    PAIRED, UNHOOKED, CudaClock, IterationTimes, LayerTimer, ModelFinder, WallClock, hooks_off, unwrap,
)
from srift.profiling.stack_detect import detect_stack
from srift.profiling.step_watch import REAL_EXIT, StepWatch, StopProfiling
from srift.stacks import DetectedStack


# Hand-written parameter updates (no torch.optim) seen before srift stops the script: two, so one
# odd update (a weight initialised after a first backward) is not taken for a training loop.
HAND_UPDATES = 2


def pairs(iters: int) -> int:
    """srift's pairs of steps (one without the leaf hooks, one with) after ``iters`` measured
    steps: half as many, at least 2 (their differences' interquartile mean needs a few)."""
    return max(2, (iters + 1) // 2)


STOP_RERAISES = 2  # stops a script may swallow (a bare ``except:``) before srift stops it hard


@dataclass
class ProfileResult:
    """What a profiling run produced."""

    profile: Profile | None  # None on ranks other than 0
    path: Path | None
    warnings: list[str] = field(default_factory=list)


@dataclass
class Output:
    """Where and how the profile is written (also what a hard stop needs to write it)."""

    name: str
    path: Path
    batch_override: int | None
    kfac: bool
    overwrite: bool


class Session:
    """State shared by the optimizer step hooks during one script run."""

    def __init__(self, warmup: int, iters: int, progress: Any = None) -> None:
        self.warmup = warmup
        self.iters = iters
        self.finder = ModelFinder()
        self.optimizer: torch.optim.Optimizer | None = None
        self.other_optimizers: list[torch.optim.Optimizer] = []  # the script's other optimizers (M10)
        # Steps in progress per optimizer: a subclass whose step() calls super().step() runs the
        # global step hooks twice when torch has patched both classes (each class's step is
        # wrapped once an instance of it was made): only the outermost call counts.
        self._step_depth: dict[int, int] = {}
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
        self.watch: StepWatch | None = None
        self.fsdp: fsdp.CollectiveTimer | None = None
        self.layers: list[LayerProfile] | None = None  # FSDP: analysed on every rank before stopping
        self.notes: list[str] = []
        self.pid = os.getpid()
        self.stops = 0  # times srift's stop was raised (more than once: the script swallowed it)
        self.refusal: SriftError | None = None
        self.graph_capture = False  # a step hook fired while a CUDA graph was captured
        self.stack: DetectedStack | None = None  # the training stack driving the step (stack_detect.py)
        self.peak_memory: list[RankMemory] = []
        self.output: Output | None = None
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
        depth = self._step_depth.get(id(opt), 0)
        self._step_depth[id(opt)] = depth + 1
        if depth:  # a step inside the same optimizer's step (super().step())
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
        depth = self._step_depth.get(id(opt), 1) - 1
        self._step_depth[id(opt)] = depth
        if depth > 0:  # the end of a step inside the same optimizer's step
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
            self._close_iteration(timer, measured, paired)
        if self.comm is not None:
            self.comm.end_iteration(measured)
        if self.fsdp is not None:
            self.fsdp.end_iteration(measured)
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=self.steps, total=self.planned_steps())
        if timer is not None and self.steps == self.warmup and self.clock.kind == "cuda":
            torch.cuda.reset_peak_memory_stats(self.clock.device)  # peaks of the measured steps
        if timer is not None:
            self._pair_or_stop(timer, last_measured)
        if timer is not None and not timer.leaf_hooks and self.warmup - 1 <= self.steps < last_measured:
            timer.install_leaf_hooks()
        if isinstance(self.clock, WallClock):
            self.start_wait_s = self.clock.waited_s()
        self.start_mark = self.clock.mark()  # last: srift's bookkeeping is in no iteration

    def _close_iteration(self, timer: LayerTimer, measured: bool, paired: bool) -> None:
        """Close the iteration that just stepped and record its times (on lazy CUDA: the one before)."""
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

    def _pair_or_stop(self, timer: LayerTimer, last_measured: int) -> None:
        """After the measured steps: srift's pairs (the same work: memory peaks stay), the hooks out
        for the first step of each; after the last pair, the script is stopped."""
        if last_measured <= self.steps < last_measured + self.pair_steps():
            if (self.steps - last_measured) % 2 == 0:
                timer.remove_leaf_hooks()
            else:
                timer.install_leaf_hooks()
        elif self.steps >= last_measured + self.pair_steps():
            self.flush()
            self.read_memory()
            if self.comm is not None:  # a collective: every rank stops at this same step
                self.gathered = self.comm.gather()
            if self.fsdp is not None:
                self._finish_fsdp()
            self.stop()

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

    def read_memory(self) -> None:
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
        """Stop the script: raise StopProfiling, and again at every later hook (a bare ``except:``
        swallows it), then stop it hard with the profile written (``stop_again``)."""
        self.stops = 1
        if self._stop_hook is None:
            self._stop_hook = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: self.stop_again())
        raise StopProfiling

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
        raise StopProfiling

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
            result = finish_run(self, True, out.name, out.path, out.batch_override, out.kfac, out.overwrite)
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
        REAL_EXIT(code)

    def remove_stop_hook(self) -> None:
        if self._stop_hook is not None:
            self._stop_hook.remove()
            self._stop_hook = None

    def close(self) -> None:
        self.remove_stop_hook()
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

def finish_run(session: Session, stopped: bool, name: str, out_path: Path, batch_override: int | None,
               kfac: bool = False, overwrite: bool = True) -> ProfileResult:
    """Write the profile of a run that ended (stopped by srift, or ``stopped`` False: by itself), or
    raise why there is none; ranks other than 0 write nothing."""
    _check_ran(session)
    assert session.timer is not None and session.model is not None and session.optimizer is not None  # (_check_ran)
    session.flush()
    warnings = _measured_enough(session, stopped)
    world, rank = session.world_size, session.rank
    buckets, notes = _ddp_buckets(session)
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
        session.read_memory()
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


def _check_ran(session: Session) -> None:
    """Raise why the run has nothing to time: srift refused the script, a CUDA graph, no optimizer
    step, or no model."""
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


def _measured_enough(session: Session, stopped: bool) -> list[str]:
    """Raise when no step was measured; the warning of a script that ended before the steps asked."""
    needed = session.warmup + session.iters
    warnings: list[str] = []
    if not session.records:
        raise SriftError(f"the script stopped after {session.steps} optimizer step(s), before any measured step "
                         f"(warm-up is {session.warmup}); no profile was written.",
                         f"lower --warmup (to {max(session.steps - 1, 1)}) or let the script run longer.")
    if not stopped and session.steps < needed:
        warnings.append(f"the script ended after {session.steps} optimizer steps, fewer than the {needed} asked; "
                        f"the profile holds {len(session.records)} measured iteration(s) instead of {session.iters}.")
    return warnings


def _ddp_buckets(session: Session) -> tuple[list[AllReduceBucket], list[str]]:
    """The measured all-reduce buckets of a DDP run over several processes (every rank's when srift
    stopped it), and the notes on them."""
    buckets: list[AllReduceBucket] = []
    notes: list[str] = []
    if session.comm is not None:
        if session.gathered is not None:
            buckets = session.gathered
        else:  # the script ended by itself: the other ranks' buckets cannot be collected any more
            buckets = session.comm.buckets()
            notes.append(f"all-reduce buckets of rank {session.rank} only (the script ended before srift stopped it)")
        if not session.comm.installed:
            notes.append("the script registered its own DDP comm hook; all-reduce buckets were not measured")
    return buckets, notes

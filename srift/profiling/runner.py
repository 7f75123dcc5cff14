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
import os
import runpy
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from srift.bounds import (
    DEFAULT_PROFILE_TIMEOUT_S, MAX_BATCH_SIZE, MAX_ITERS, MAX_PROFILE_TIMEOUT_S, MAX_WARMUP, PROFILE_STOP_GRACE_S, require,
)
from srift.errors import SriftError
from srift.files import check_name, file_in, input_file, name_from, output_file
from srift.profiling.children import descendants, stop_children
from srift.profiling.host import HostCalls
from srift.profiling.session import (
    HAND_UPDATES, STOP_RERAISES, Output, ProfileResult, Session, finish_run, model_device, pairs,
)
from srift.profiling.step_lines import StepLines
from srift.profiling.step_watch import ExitGuard, ScriptExit, StepTimeout, StepWatch, StopProfiling, TermSignals

# The run's parts live in srift/profiling/session.py (the step hooks' state and the profile written
# from it), step_watch.py (timeouts, exits, signals) and children.py; their names stay importable here.
_Session = Session  # scripts/bench_profile_overhead.py
__all__ = ["HAND_UPDATES", "STOP_RERAISES", "ProfileResult", "descendants", "model_device", "pairs", "profile_script",
           "stop_children"]


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
    _check_counts(warmup, iters, batch_size, timeout_s)
    name = check_name(name) if name is not None else name_from(path.stem)
    out_path = output_file(output if output else file_in("profiles", name, ".yaml"), "profile", overwrite,
                           "pass --force to replace it, or choose another --name or -o.")
    out_path = Path(os.path.abspath(out_path))

    progress = _progress(show_progress, warmup, iters)
    session = Session(warmup, iters, progress)
    watch = StepWatch(timeout_s, stop_grace_s, session, path)
    session.watch = watch
    session.output = Output(name, out_path, batch_size, kfac, overwrite)
    stopped = _run(path, script_args, session, watch)
    try:
        return finish_run(session, stopped, name, out_path, batch_size, kfac, overwrite)
    finally:
        session.close()


def _check_counts(warmup: int, iters: int, batch_size: int | None, timeout_s: float) -> None:
    """Refuse steps, a batch size or a timeout out of srift's bounds (exit 2)."""
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


def _run(path: Path, args: list[str], session: Session, watch: "StepWatch | None" = None) -> bool:
    """Run the script; True when the profiler stopped it, False when it ended by itself."""
    watch = watch or StepWatch(DEFAULT_PROFILE_TIMEOUT_S, PROFILE_STOP_GRACE_S, session, path)
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    pre = register_optimizer_step_pre_hook(session.pre_step)
    post = register_optimizer_step_post_hook(session.post_step)
    if session.progress is not None:
        session.progress.start()
        session.task = session.progress.add_task("steps", total=session.warmup + session.iters)
    exits = ExitGuard(session.pid)
    signals = TermSignals(watch)
    host = HostCalls(session.host_sink)
    old_hook = threading.excepthook

    def thread_hook(args: Any) -> None:  # a script's training thread ends quietly on srift's stop
        if not isinstance(args.exc_value, StopProfiling):
            old_hook(args)

    threading.excepthook = thread_hook
    try:
        with watch, exits, signals, host:
            runpy.run_path(str(path), run_name="__main__")
        return session.stops > 0  # stopped in a thread of the script's, which then ended
    except StopProfiling:
        return True
    except StepTimeout:
        watch.unwound()
        raise watch.error() from None
    except (SystemExit, ScriptExit) as exc:
        how = "exited" if isinstance(exc, SystemExit) else "called os._exit"
        if exc.code in (0, None):
            if not session.stops and isinstance(exc, ScriptExit):
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
        session.remove_stop_hook()
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

"""What bounds and guards a profiled script's run in srift's process: the step watch (no wait
longer than ``timeout_s`` for the next optimizer step; a watchdog ends a script that does not
unwind), ``os._exit`` turned into an unwinding exception, SIGTERM/SIGHUP stopping the script's
children, and the exceptions that unwind the script (srift/profiling/runner.py's module
docstring says when each is raised)."""

from __future__ import annotations

import linecache
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from srift.errors import SriftError
from srift.profiling.children import descendants, stop_children
from srift.profiling.model_finder import ModelFinder


class StopProfiling(BaseException):
    """Raised from the optimizer step hook once enough iterations are measured."""


class StepTimeout(BaseException):
    """Raised in the script's thread when no optimizer step came within the timeout."""


class ScriptExit(BaseException):
    """Raised in place of ``os._exit`` called by the script in srift's own process."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


REAL_EXIT = os._exit  # srift's own hard exits, whatever the script's run patched


class WatchedRun(Protocol):
    """What the step watch reads of a profiling session (srift/profiling/session.py)."""

    finder: ModelFinder
    steps: int
    warmup: int
    iters: int
    stops: int
    graph_capture: bool

    def hard_stop(self, why: str) -> None: ...


class ExitGuard:
    """While the script runs: ``os._exit`` in srift's own process unwinds the script as
    ``sys.exit`` would (so srift reports its status); forked children exit for real."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def _exit(self, code: int) -> None:
        if os.getpid() != self.pid:
            REAL_EXIT(code)
        raise ScriptExit(code)

    def __enter__(self) -> "ExitGuard":
        os._exit = self._exit  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: Any) -> None:
        os._exit = REAL_EXIT


class TermSignals:
    """SIGTERM/SIGHUP while the script runs: stop the processes it started, then die of the signal
    (nothing is written: the profile is written atomically, or not at all)."""

    SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))

    def __init__(self, watch: "StepWatch") -> None:
        self.watch = watch
        self._old: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        stop_children(self.watch.children_before)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def __enter__(self) -> "TermSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._old = {}

# ---- the step watch ------------------------------------------------------------------------------
class StepWatch:
    """Bounds the wait for each optimizer step (see module docstring).

    Armed around the script's run: SIGALRM (when srift runs in the main thread) raises
    StepTimeout in the script after ``timeout_s`` without a step; ``stepped`` re-arms it. A
    daemon thread ends the process ``grace_s`` later if the script has not unwound by then.
    """

    def __init__(self, timeout_s: float, grace_s: float, session: WatchedRun, script: Path) -> None:
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

    def __enter__(self) -> "StepWatch":
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
        raise StepTimeout

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
                REAL_EXIT(err.exit_code)

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


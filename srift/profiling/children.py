"""The processes a profiled script started (DataLoader workers, multiprocessing, subprocesses):
finding them under srift's own process and stopping them when the script is done or stopped
(srift/profiling/runner.py)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


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

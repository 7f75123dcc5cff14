"""Time K-FAC's kernels with torch on this machine (fp32) and write a CSV for the kernel model.

Kernels (``kernel`` column):

* ``cholesky_inverse``: ``srift.kfac.layers.damped_inverse`` (``torch.linalg.cholesky_ex`` then
  ``torch.cholesky_inverse`` of ``F + damping I``), exactly what the preconditioner's ``inverse``
  method runs; batched: the same two calls on a ``(batch, n, n)`` stack.
* ``inv``: ``torch.linalg.inv`` of the damped factor.
* ``eigh``: ``torch.linalg.eigh``, what the ``eigen`` method runs (``eigen_decomposition``).
* ``factor_a`` / ``factor_g``: ``KFACLayer.factor_a`` / ``factor_g`` (im2col by unfold + ``a^T a``,
  or the output-gradient rows + ``g^T g``) on the real inputs of a zoo model's layers at the
  K-FAC issue's batch (ResNet-50, B=32), one row per distinct layer shape; ``unfold`` times the
  unfold alone. Linear layers: ResNet-50's classifier and BERT-base's projections.
* ``factor_step``: what ``step()`` does to each factor of a D-KFAC update besides the collective,
  with the runtime's own functions: ``pack_upper``, the copy into the fused buffer and the division
  after the all-reduce, ``unpack_upper``, and the running average (``mul_``, ``add_``); ``bytes`` is
  ``STEP_BYTES_PER_ELEMENT n^2`` (srift/perf/kfac_kernels.py), the traffic the model counts.

Matrices are ``M M^T / n + I`` (well conditioned, like a damped factor); the damping is 1e-3.
Each row: median, 10th and 90th percentile over ``repeats`` timed calls after one warm-up call,
with the thread count torch used. Usage::

    python scripts/measure_kfac_kernels.py [-o data/measurements/kfac-kernels-cpu.csv] [--max-n 4096] [--threads 2 1] [--merge]

On a GPU, ``--device cuda -o data/measurements/kfac-kernels-<gpu>.csv`` (a name configs/gpus.yaml
resolves) times the same kernels there, synchronising around each call; ``scripts/fit_models.py``
then fits the table and predictions on that GPU use it (srift/perf/kfac_kernels.py).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from srift.files import atomic_write_text  # noqa: E402
from srift.kfac.distributed import pack_upper, unpack_upper  # noqa: E402
from srift.kfac.layers import damped_inverse, eigen_decomposition, make_layers  # noqa: E402
from srift.perf.kfac_kernels import STEP_BYTES_PER_ELEMENT  # noqa: E402
from srift.zoo.models import build_model  # noqa: E402

DAMPING = 1e-3
SIZES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
BATCH = 8  # matrices per batched call
COLUMNS = ("kernel", "n", "batch", "median_s", "p10_s", "p90_s", "repeats", "threads", "layer", "rows", "bytes", "flop")


@dataclass
class Row:
    kernel: str
    n: int
    batch: int
    times_s: list[float]
    layer: str = ""
    rows: int = 0
    bytes: int = 0  # the bytes the kernel reads: the unfolded input (factor_a) or the rows (factor_g)
    flop: int = 0  # of the Gram product: 2 * rows * width^2

    def cells(self, threads: int) -> list[str]:
        t = sorted(self.times_s)
        q = statistics.quantiles(t, n=10, method="inclusive") if len(t) > 1 else [t[0]] * 9
        return [self.kernel, str(self.n), str(self.batch), f"{statistics.median(t):.6g}", f"{q[0]:.6g}",
                f"{q[8]:.6g}", str(len(t)), str(threads), self.layer, str(self.rows or ""), str(self.bytes or ""),
                str(self.flop or "")]


NOISY = 2.0  # p90 / p10 above this: the machine was busy (it is shared): time the kernel again
ATTEMPTS = 3


DEVICE = torch.device("cpu")  # --device


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def _once(fn: Callable[[], object], repeats: int, warmup: bool) -> list[float]:
    if warmup:
        fn()
    out = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        out.append(time.perf_counter() - t0)
    return out


def timed(fn: Callable[[], object], repeats: int, warmup: bool = True) -> list[float]:
    """``repeats`` timed calls after a warm-up call. A run whose spread says another process took
    the cores (p90 > NOISY x p10, with 5 or more repeats) is repeated, up to ATTEMPTS runs, and the
    run with the lowest median kept: the CSV describes the kernel, not the neighbours' load."""
    best: list[float] = []
    for _ in range(ATTEMPTS):
        t = _once(fn, repeats, warmup)
        if not best or statistics.median(t) < statistics.median(best):
            best = t
        q = sorted(t)
        if repeats < 5 or q[int(0.9 * (len(q) - 1))] <= NOISY * q[int(0.1 * (len(q) - 1))]:
            break
        warmup = False
    return best


MAX_CALL_S = 60.0  # the largest size is timed only where one call takes less than this


def timed_guarded(fn: Callable[[], object], repeats: int, label: str) -> list[float] | None:
    """``timed`` after one trial call (the warm-up), or None when that call took MAX_CALL_S or more."""
    _sync()
    t0 = time.perf_counter()
    fn()
    _sync()
    trial = time.perf_counter() - t0
    if trial >= MAX_CALL_S:
        print(f"{label}: one call took {trial:.0f} s (>= {MAX_CALL_S:.0f} s): not timed", flush=True)
        return None
    return timed(fn, repeats, warmup=False)


def repeats_for(n: int, batch: int) -> int:
    work = batch * n**3  # keep each size to a few seconds on two cores
    return 21 if work <= 512**3 else 9 if work <= 1024**3 else 5 if work <= 2048**3 else 3


def spd(n: int, batch: int, gen: torch.Generator) -> torch.Tensor:
    m = torch.randn(batch, n, n, generator=gen).to(DEVICE)
    out = m @ m.transpose(1, 2) / n + torch.eye(n, device=DEVICE)
    return out[0] if batch == 1 else out


def linalg_rows(max_n: int, max_eigh_n: int, max_batched_n: int, gen: torch.Generator, min_n: int = 0) -> list[Row]:
    rows = []
    for n in (s for s in SIZES if min_n <= s <= max_n):
        for batch in (1, BATCH):
            if batch > 1 and n > max_batched_n:
                continue
            f = spd(n, batch, gen)
            reps = repeats_for(n, batch)
            warm = n <= 1024 or n == min_n  # larger sizes follow smaller ones: already warm, and a call is long
            if batch == 1:
                inv_fn: Callable[[], object] = lambda: damped_inverse(f, DAMPING)  # noqa: E731
            else:  # what damped_inverse does, on a stack
                def inv_fn() -> object:
                    m = f.clone()
                    m.diagonal(dim1=-2, dim2=-1).add_(DAMPING)
                    return torch.cholesky_inverse(torch.linalg.cholesky(m))
            damped = f + DAMPING * torch.eye(n, device=DEVICE)
            eig = (lambda: eigen_decomposition(f)) if batch == 1 else (lambda: torch.linalg.eigh(f))
            kernels: list[tuple[str, Callable[[], object], int]] = [
                ("cholesky_inverse", inv_fn, reps), ("inv", lambda: torch.linalg.inv(damped), reps)]
            if n <= max_eigh_n and (batch == 1 or n <= max_batched_n // 2):
                kernels.append(("eigh", eig, max(3, reps // 2) if n >= 2048 else reps))
            for kernel, fn, k_reps in kernels:
                try:
                    t = timed_guarded(fn, k_reps, f"{kernel} n={n}") if n > 4096 else timed(fn, k_reps, warm)
                except RuntimeError as exc:
                    # torch 2.13's CPU build: batched LU with 2+ threads fails for n >= 256 (MKL
                    # "Parameter 6 was incorrect on entry to SLASWP"); the runtime never calls inv.
                    print(f"{kernel} n={n} batch={batch} threads={torch.get_num_threads()} failed: {str(exc)[:80]}", flush=True)
                    continue
                if t is not None:
                    rows.append(Row(kernel, n, batch, t))
            for r in [r for r in rows[-3:] if r.n == n and r.batch == batch]:
                print(f"{r.kernel:17} n={r.n:5} batch={r.batch} threads={torch.get_num_threads()} "
                      f"median {statistics.median(r.times_s):.4g} s", flush=True)
    return rows


STEP_SIZES = (64, 128, 256, 512, 1024, 2048)


def step_rows(max_n: int, gen: torch.Generator) -> list[Row]:
    """``factor_step`` rows: one factor's handling in ``step()`` (see the module docstring)."""
    rows = []
    for n in (s for s in STEP_SIZES if s <= max_n):
        f, running = spd(n, 1, gen), spd(n, 1, gen)
        buf = torch.empty(n * (n + 1) // 2, device=DEVICE)

        def step() -> object:
            buf.copy_(pack_upper(f))
            buf.div_(2.0)
            return running.mul_(0.95).add_(unpack_upper(buf, n), alpha=0.05)

        rows.append(Row("factor_step", n, 1, timed(step, repeats_for(n, 1)), bytes=int(STEP_BYTES_PER_ELEMENT * n * n)))
        print(f"factor_step       n={n:5} threads={torch.get_num_threads()} median {statistics.median(rows[-1].times_s):.4g} s",
              flush=True)
    return rows


def _capture(model: nn.Module, x: torch.Tensor, kinds: tuple[type, ...]) -> dict[str, tuple[nn.Module, torch.Tensor, tuple[int, ...]]]:
    """Input and output shape of the first layer of each distinct configuration, by label."""
    seen: dict[str, tuple[nn.Module, torch.Tensor, tuple[int, ...]]] = {}
    handles = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Module) and isinstance(m, kinds):
            def hook(mod: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor, name: str = name) -> None:
                if not any(s is mod or (str(s) == str(mod) and xi.shape == args[0].shape) for s, xi, _ in seen.values()):
                    seen[f"resnet50 {name} {tuple(args[0].shape)}"] = (mod, args[0].detach().clone(), tuple(out.shape))
            handles.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return seen


def factor_rows(batch: int, gen: torch.Generator) -> list[Row]:
    rows = []
    model = build_model("resnet50").eval().to(DEVICE)
    captured = _capture(model, torch.randn(batch, 3, 224, 224, generator=gen).to(DEVICE), (nn.Conv2d, nn.Linear))
    del model
    torch.manual_seed(0)
    bert = [nn.Linear(768, 768).to(DEVICE), nn.Linear(768, 3072).to(DEVICE), nn.Linear(3072, 768).to(DEVICE)]
    for lin in bert:  # BERT-base projections at batch 8 x 128 tokens
        x = torch.randn(8, 128, lin.in_features, generator=gen).to(DEVICE)
        captured[f"bert-base Linear({lin.in_features}, {lin.out_features}) {tuple(x.shape)}"] = (lin, x, (8, 128, lin.out_features))
    for label, (module, x, out_shape) in captured.items():
        layer = make_layers(label, module)[0]
        g = torch.randn(out_shape, generator=gen).to(DEVICE)
        reps = 5
        ta = timed(lambda: layer.factor_a(x), reps)
        a_rows, _ = layer._input_rows(x)
        n_rows, width = a_rows.shape
        del a_rows
        rows.append(Row("factor_a", layer.a_dim, 1, ta, label, n_rows, 4 * n_rows * width, 2 * n_rows * width**2))
        if isinstance(module, nn.Conv2d):
            rows.append(Row("unfold", layer.a_dim, 1, timed(lambda: layer._input_rows(x), reps), label, n_rows, 4 * n_rows * width))
        g_rows = g.numel() // layer.g_dim
        rows.append(Row("factor_g", layer.g_dim, 1, timed(lambda: layer.factor_g(g), reps), label, g_rows, 4 * g.numel(),
                        2 * g_rows * layer.g_dim**2))
        med = statistics.median(ta)
        print(f"{label[:60]:60} factor_a {med:.4g} s ({4 * n_rows * width / med / 1e9:.2f} GB/s unfolded, "
              f"{2 * n_rows * width**2 / med / 1e9:.1f} GFLOP/s)", flush=True)
    return rows


def merge_quieter(table: list[list[str]], previous: Path) -> list[list[str]]:
    """Per kernel, size, batch, threads and layer, the row of this run or of the previous CSV
    with the lower median (the same rule as ``timed``'s reruns, across runs of the script)."""
    key = lambda cells: (cells[0], cells[1], cells[2], cells[7], cells[8])  # noqa: E731
    with previous.open(newline="") as f:
        old = {key(c): c for c in list(csv.reader(f))[1:]}
    out = []
    for cells in table:
        prev = old.pop(key(cells), None)
        out.append(prev if prev is not None and float(prev[3]) < float(cells[3]) else cells)
    return out + list(old.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="data/measurements/kfac-kernels-cpu.csv")
    ap.add_argument("--min-n", type=int, default=0, help="smallest matrix dimension")
    ap.add_argument("--max-n", type=int, default=4096, help="largest matrix dimension (8192: see data/measurements/README.md)")
    ap.add_argument("--max-eigh-n", type=int, default=4096)
    ap.add_argument("--max-batched-n", type=int, default=2048, help=f"largest n timed as a batch of {BATCH}")
    ap.add_argument("--factor-batch", type=int, default=32, help="ResNet-50 per-GPU batch for the factor kernels")
    ap.add_argument("--skip-factors", action="store_true")
    ap.add_argument("--only-step", action="store_true", help="time only the factor_step rows (with --merge: add them)")
    ap.add_argument("--threads", type=int, nargs="+", default=[len(os.sched_getaffinity(0))],
                    help="torch thread counts to time with (default: the cores available); factor kernels use the first")
    ap.add_argument("--single-thread-max-n", type=int, default=2048, help="largest n for thread counts after the first")
    ap.add_argument("--merge", action="store_true",
                    help="keep, per row, the lower median of this run and the existing output (a busy shared machine)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda to time the kernels on the GPU")
    args = ap.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    print(f"torch {torch.__version__}, threads {args.threads}, load average {os.getloadavg()}", flush=True)
    gen = torch.Generator().manual_seed(0)
    t0 = time.time()
    rows: list[tuple[int, Row]] = []
    for i, threads in enumerate(args.threads):
        torch.set_num_threads(threads)
        max_n = args.max_n if i == 0 else min(args.max_n, args.single_thread_max_n)
        if not args.only_step:
            rows += [(threads, r) for r in linalg_rows(max_n, min(max_n, args.max_eigh_n), min(max_n, args.max_batched_n), gen, args.min_n)]
            if i == 0 and not args.skip_factors:
                rows += [(threads, r) for r in factor_rows(args.factor_batch, gen)]
        rows += [(threads, r) for r in step_rows(max_n, gen)]
    table = [r.cells(threads) for threads, r in rows]
    if args.merge and Path(args.output).exists():
        table = merge_quieter(table, Path(args.output))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerows(table)
    atomic_write_text(Path(args.output), buf.getvalue())
    print(f"wrote {len(table)} rows ({len(rows)} timed now) to {args.output} in {time.time() - t0:.0f} s; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()

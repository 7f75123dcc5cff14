"""Overhead of `srift profile`'s instrumentation: instrumented vs plain training-iteration time.

Trains the zoo's ResNet-50 (exact architecture, random weights) on CPU with SGD, in blocks of
iterations that alternate between plain and instrumented (the profiler's own hooks: per-leaf
forward hooks, output-gradient tensor hooks, parameter-ready hooks, optimizer step hooks), the
order flipped every round so that drift on a shared machine hits both alike. The iteration time
is wall clock around one whole step; the table reports medians. Target: overhead within 3%.

    python scripts/bench_profile_overhead.py [--batch-size 4] [--image-size 160] [--rounds 40] [--iters 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from srift.profiling.runner import _Session
from srift.zoo.models import build_model


def _step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    t0 = time.perf_counter()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--image-size", type=int, default=160)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--iters", type=int, default=1, help="iterations per block")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = build_model("resnet50", "cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    y = torch.randint(0, 1000, (args.batch_size,))
    for _ in range(3):  # warm up allocator and kernels
        _step(model, opt, x, y)

    # The profiler's hooks, installed once: step 1 finds the model and attaches the timers.
    session = _Session(warmup=1, iters=10**9)
    pre = register_optimizer_step_pre_hook(session.pre_step)
    post = register_optimizer_step_post_hook(session.post_step)
    _step(model, opt, x, y)
    pre.remove(), post.remove()
    timer = session.timer
    assert timer is not None and len(timer.leaves) > 100
    timer.remove()

    plain: list[float] = []
    instrumented: list[float] = []
    ratios: list[float] = []  # per round: median instrumented / median plain of the adjacent blocks
    for r in range(args.rounds):
        n_p, n_i = len(plain), len(instrumented)
        for mode in (("plain", "instr") if r % 2 == 0 else ("instr", "plain")):
            if mode == "instr":
                timer.__init__(timer.root, timer.model, timer.clock)  # re-install the same hooks
                pre = register_optimizer_step_pre_hook(session.pre_step)
                post = register_optimizer_step_post_hook(session.post_step)
                instrumented += [_step(model, opt, x, y) for _ in range(args.iters)]
                pre.remove(), post.remove()
                timer.remove()
            else:
                plain += [_step(model, opt, x, y) for _ in range(args.iters)]
        ratios.append(statistics.median(instrumented[n_i:]) / statistics.median(plain[n_p:]))

    mp, mi = statistics.median(plain), statistics.median(instrumented)
    print(f"ResNet-50 (zoo), batch {args.batch_size}, {args.image_size}x{args.image_size}, CPU, "
          f"{torch.get_num_threads()} threads, {args.rounds} interleaved rounds x {args.iters} iterations")
    print(f"{'mode':<14}{'n':>4}{'median s':>11}{'min s':>9}{'max s':>9}")
    for label, xs in (("plain", plain), ("instrumented", instrumented)):
        print(f"{label:<14}{len(xs):>4}{statistics.median(xs):>11.4f}{min(xs):>9.4f}{max(xs):>9.4f}")
    print(f"overhead (median): {100 * (mi / mp - 1):+.2f}%  (min vs min: {100 * (min(instrumented) / min(plain) - 1):+.2f}%)")
    print(f"overhead (median of {len(ratios)} per-round ratios): {100 * (statistics.median(ratios) - 1):+.2f}%")
    print(f"profiled leaves: {len(timer.leaves)}; measured iterations recorded: {len(session.records)}")


if __name__ == "__main__":
    main()

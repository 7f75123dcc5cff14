#!/usr/bin/env python3
"""How fast is the layout search (`--layout auto`)? One search per model and GPU count on DGX H100
nodes (8 x H100, NVSwitch, 3,200 Gb/s InfiniBand), cold (first search in the process: the compute
model runs on every TP x CP x micro-batch split) and warm (median of --repeats more, as the
recommender repeats it per cluster size), with the candidates, how many did not fit, how many
were simulated in full, and the layout chosen.

Target: llama3.1-405b on 1,024 GPUs in <= 1 s (cold).

Run: python scripts/bench_layouts.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.fitting.layouts import dgx_cluster  # noqa: E402
from srift.simulate import layouts  # noqa: E402
from srift.zoo import llm_arch  # noqa: E402

CASES = (("llama3-8b", 64, 8192, 512), ("llama3-70b", 256, 8192, 512), ("gpt3-175b", 512, 2048, 1024),
         ("nemotron-4-340b", 256, 4096, 64), ("llama3.1-405b", 1024, 8192, 512))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="warm searches per case (median)")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be 1 or more")
    print(f"{'model':<18}{'GPUs':>6}{'seq':>7}{'batch':>7}{'cold s':>9}{'warm s':>9}{'cands':>7}{'no fit':>8}{'sim':>6}"
          f"  chosen (iteration s, GiB/GPU)")
    for model, gpus, seq, batch in CASES:
        arch, cluster = llm_arch(model), dgx_cluster("H100-SXM5-80GB", gpus, 8)
        layouts.block_parts.cache_clear()
        layouts.scaled_parts.cache_clear()
        t0 = time.perf_counter()
        found = layouts.search_layouts(arch, cluster, seq, batch)
        cold = time.perf_counter() - t0
        warm = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            layouts.search_layouts(arch, cluster, seq, batch)
            warm.append(time.perf_counter() - t0)
        b = found.best
        chosen = (f"{b.layout.label} {b.checkpointing} ({b.iteration_s:.2f} s, {b.memory_per_gpu_bytes / 2**30:.1f})"
                  if b else "none fits")
        print(f"{model:<18}{gpus:>6}{seq:>7}{batch:>7}{cold:>9.3f}{statistics.median(warm):>9.3f}{found.candidates:>7}"
              f"{found.rejected_memory:>8}{found.simulated:>6}  {chosen}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Write profiles/<model>.yaml, the structural profile of every zoo model (reproducible, atomic).

Each is analyzed on the meta device (torch's FlopCounterMode, no memory or compute needed) at the
model's reference batch size and sequence length (srift.zoo.MODELS), with the bytes autograd saves
counted on small CPU runs (srift/profiling/saved.py); predict and recommend rescale them to other
batch sizes and sequence lengths without torch.

Run: python scripts/make_zoo_profiles.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.zoo import TORCH_MODEL_NAMES  # noqa: E402
from srift.zoo.models import structural_profile  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=list(TORCH_MODEL_NAMES))
    ap.add_argument("--out", type=Path, default=ROOT / "profiles")
    args = ap.parse_args()
    for name in args.only:
        t0 = time.perf_counter()
        prof = structural_profile(name, saved=True)
        # Versions would make the files change with every torch release; keep them reproducible.
        prof.framework = {"torch": prof.framework["torch"].split(".")[0] + ".x", "srift": prof.framework["srift"]}
        prof.save(args.out / f"{name}.yaml")
        print(f"{name:12s} params {prof.params:>12,d}  fwd {prof.fwd_flops / 1e9:9.1f} GFLOP  "
              f"batch {prof.batch_size:3d}  seq {prof.seq_len}  layers {len(prof.layers):4d}  ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

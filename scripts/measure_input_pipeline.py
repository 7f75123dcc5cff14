"""Measure the input pipeline on this machine's CPU cores and write configs/perf/input.json.

    python scripts/measure_input_pipeline.py [--images 200] [--trials 5] [--wait-load 1.0]
                                             [--out configs/perf/input.json] [--no-write]

Images. The script writes ImageNet-like JPEGs to a temporary folder: three in four are 500 px on
the long side (Flickr's "medium" size, most of ImageNet's training set), the rest spread from 150 to
1,000 px; mostly 4:3, some 3:2, square and others, a fifth of them portrait; quality 90; content
that decodes like a photograph (smooth gradients, edges, luminance texture at several scales and
grain; flat colour would decode unrealistically fast), with a per-image detail level so that the
files spread around ImageNet's mean of about 110 KB. It prints the mean size and resolution it made.

Then it times torchvision's standard ImageNet training transform per image: PIL decode +
``convert("RGB")`` (torchvision's ``pil_loader``), ``RandomResizedCrop(224)`` (scale 0.08-1, ratio
3/4-4/3, bilinear), ``RandomHorizontalFlip()``, ``ToTensor()``, ``Normalize(ImageNet mean, std)``.
torchvision cannot be installed next to the pinned torch here, so these steps are written out with
PIL and torch exactly as torchvision (0.15-0.2x) runs them on PIL images: the same crop sampling
(``RandomResizedCrop.get_params``, torch's RNG, 10 tries then the centre-crop fallback), crop then
``Image.resize(..., BILINEAR)`` (PIL's antialiased bilinear, as torchvision's PIL backend calls it),
``transpose(FLIP_LEFT_RIGHT)``, HWC uint8 -> CHW float / 255, ``sub_(mean).div_(std)`` on a clone.

Measured: (1) each stage's milliseconds in one process; (2) the whole transform at several output
sizes, to split the per-image cost into a part that depends on the source image (decode, crop and
resize, which reads the crop's source pixels) and a part that grows with the output's pixels; (3)
``torch.utils.data.DataLoader`` with 1 and 2 worker processes (batch 32, default collation), several
trials, alternating: images per second of wall time and per CPU-second of the workers (read from
/proc, so other load on a shared machine does not count against the rate); (4) the text path: a
batch of token ids sliced from a memory-mapped uint16 array at random offsets (nanoGPT's
``get_batch``), to show it costs next to nothing. ``--wait-load`` waits (up to ``--max-wait-s``)
for the 1-minute load average to drop below the threshold before measuring; the load before and
after is recorded.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFilter, features

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from srift.files import write_json  # noqa: E402

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
REFERENCE_SIZE = 224
# Assumptions the model reads with the figures (see the JSON's "assumptions").
VCPU_FACTOR = 0.6
RESERVED_VCPUS_PER_GPU = 1.0


# ---- ImageNet-like JPEGs ---------------------------------------------------------------------
def imagenet_like_size(rng: np.random.Generator) -> tuple[int, int]:
    """(width, height) drawn like ImageNet's training images (most 500 px on the long side)."""
    long_side = 500 if rng.random() < 0.75 else int(np.clip(rng.lognormal(math.log(400), 0.35), 150, 1000))
    aspect = rng.choice([4 / 3, 3 / 2, 1.0, float(rng.uniform(1.0, 1.9))], p=[0.6, 0.15, 0.08, 0.17])
    short_side = max(64, int(round(long_side / aspect)))
    return (long_side, short_side) if rng.random() < 0.8 else (short_side, long_side)


def natural_image(rng: np.random.Generator, w: int, h: int, detail: float) -> Image.Image:
    """A photograph-like RGB image: smooth colour gradients, a few blurred-edged shapes, luminance
    texture at three scales (weaker colour texture, as in photographs) and grain."""

    def field(fw: int, fh: int, amp: float, resample: Image.Resampling, chroma: float = 0.3) -> np.ndarray:
        lum = rng.normal(0, 1, (max(2, fh), max(2, fw), 1))
        small = (lum + chroma * rng.normal(0, 1, (max(2, fh), max(2, fw), 3))) / math.sqrt(1 + chroma ** 2)
        im = Image.fromarray(np.clip(small * 40 + 128, 0, 255).astype(np.uint8)).resize((w, h), resample)
        return (np.asarray(im, np.float32) - 128.0) / 40.0 * amp

    base = rng.uniform(60, 190, 3).astype(np.float32)
    img = np.broadcast_to(base, (h, w, 3)) + field(4, 3, 35, Image.Resampling.BICUBIC, chroma=1.0)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(pil)
    for _ in range(int(rng.integers(4, 12))):
        x0, y0 = rng.uniform(-w / 4, w), rng.uniform(-h / 4, h)
        x1, y1 = x0 + rng.uniform(20, w / 2), y0 + rng.uniform(20, h / 2)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=colour)
    arr = np.asarray(pil.filter(ImageFilter.GaussianBlur(1.0)), np.float32)
    arr = arr + field(w // 24, h // 24, 14 * detail, Image.Resampling.BICUBIC)
    arr = arr + field(w // 6, h // 6, 10 * detail, Image.Resampling.BICUBIC)
    arr = arr + field(w // 2, h // 2, 8 * detail, Image.Resampling.BILINEAR)
    arr = arr + rng.normal(0, 3.0 * detail, (h, w, 1)).astype(np.float32)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def make_images(folder: Path, n: int, seed: int, quality: int = 90) -> dict[str, Any]:
    """Write ``n`` JPEGs to ``folder``; return their count, mean size and resolution."""
    rng = np.random.default_rng(seed)
    sizes, widths, heights = [], [], []
    for k in range(n):
        w, h = imagenet_like_size(rng)
        detail = float(rng.lognormal(math.log(5.5), 0.4))
        path = folder / f"img_{k:05d}.jpg"
        natural_image(rng, w, h, detail).save(path, "JPEG", quality=quality)
        sizes.append(path.stat().st_size)
        widths.append(w)
        heights.append(h)
    return {"count": n, "quality": quality, "seed": seed,
            "mean_bytes": round(float(np.mean(sizes))), "median_bytes": round(float(np.median(sizes))),
            "p10_bytes": round(float(np.quantile(sizes, 0.1))), "p90_bytes": round(float(np.quantile(sizes, 0.9))),
            "mean_width": round(float(np.mean(widths)), 1), "mean_height": round(float(np.mean(heights)), 1),
            "mean_megapixels": round(float(np.mean(np.array(widths) * np.array(heights))) / 1e6, 4),
            "share_500px_long_side": round(float(np.mean(np.maximum(widths, heights) == 500)), 3)}


# ---- torchvision's ImageNet training transform, on PIL images ----------------------------------
def pil_loader(path: str | Path) -> Image.Image:
    """torchvision.datasets.folder.pil_loader: open, then convert (which decodes)."""
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


def random_resized_crop_params(width: int, height: int, scale: tuple[float, float] = (0.08, 1.0),
                               ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """torchvision.transforms.RandomResizedCrop.get_params: (top, left, height, width)."""
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect_ratio = math.exp(torch.empty(1).uniform_(log_ratio[0].item(), log_ratio[1].item()).item())
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,)).item())
            j = int(torch.randint(0, width - w + 1, size=(1,)).item())
            return i, j, h, w
    in_ratio = float(width) / float(height)  # fallback: centre crop
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def crop_resize(img: Image.Image, size: int) -> Image.Image:
    """RandomResizedCrop(size) on a PIL image: F.resized_crop = crop, then PIL bilinear resize."""
    i, j, h, w = random_resized_crop_params(*img.size)
    return img.crop((j, i, j + w, i + h)).resize((size, size), Image.Resampling.BILINEAR)


def flip(img: Image.Image) -> Image.Image:
    """RandomHorizontalFlip(p=0.5)."""
    return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if torch.rand(1) < 0.5 else img


def to_tensor(img: Image.Image) -> torch.Tensor:
    """ToTensor() for an RGB PIL image: HWC uint8 -> CHW float32 in [0, 1]."""
    t = torch.from_numpy(np.array(img, np.uint8, copy=True))
    t = t.view(img.size[1], img.size[0], 3).permute((2, 0, 1)).contiguous()
    return t.to(dtype=torch.get_default_dtype()).div(255)


def normalize(t: torch.Tensor) -> torch.Tensor:
    """Normalize(mean, std), not in place (F.normalize clones first)."""
    mean = torch.as_tensor(IMAGENET_MEAN, dtype=t.dtype).view(-1, 1, 1)
    std = torch.as_tensor(IMAGENET_STD, dtype=t.dtype).view(-1, 1, 1)
    return t.clone().sub_(mean).div_(std)


def transform(path: str | Path, size: int = REFERENCE_SIZE) -> torch.Tensor:
    return normalize(to_tensor(flip(crop_resize(pil_loader(path), size))))


class JpegFolder(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """ImageFolder-like: item ``k`` is file ``k mod n`` through the training transform."""

    def __init__(self, files: list[Path], length: int, size: int = REFERENCE_SIZE) -> None:
        self.files, self.length, self.size = files, length, size

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, k: int) -> tuple[torch.Tensor, int]:
        return transform(self.files[k % len(self.files)], self.size), 0


# ---- timing ------------------------------------------------------------------------------------
def time_stages(files: list[Path], n: int) -> dict[str, float]:
    """Mean milliseconds per image of each stage, in this process (thread CPU time)."""
    acc = {"decode": 0.0, "random_resized_crop": 0.0, "flip": 0.0, "to_tensor": 0.0, "normalize": 0.0}
    for k in range(n):
        t0 = time.thread_time()
        img = pil_loader(files[k % len(files)])
        t1 = time.thread_time()
        img = crop_resize(img, REFERENCE_SIZE)
        t2 = time.thread_time()
        img = flip(img)
        t3 = time.thread_time()
        t = to_tensor(img)
        t4 = time.thread_time()
        normalize(t)
        t5 = time.thread_time()
        for key, d in zip(acc, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            acc[key] += d
    return {k: round(v / n * 1e3, 4) for k, v in acc.items()}


def per_image_s_by_size(files: list[Path], sizes: tuple[int, ...], n: int, rounds: int = 3) -> dict[int, float]:
    """CPU seconds per image of the whole transform at each output size (interleaved rounds)."""
    acc = {s: 0.0 for s in sizes}
    for _ in range(rounds):
        for s in sizes:
            t0 = time.thread_time()
            for k in range(n):
                transform(files[k % len(files)], s)
            acc[s] += time.thread_time() - t0
    return {s: v / (rounds * n) for s, v in acc.items()}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loader_trial(files: list[Path], workers: int, images: int, batch: int, seed: int) -> dict[str, float]:
    """One DataLoader run. Timed from the arrival of the first ``workers`` batches (worker start-up
    and the first simultaneous batches excluded) to the last batch."""
    torch.manual_seed(seed)
    loader = torch.utils.data.DataLoader(JpegFolder(files, images), batch_size=batch, num_workers=workers,
                                         shuffle=False)
    it = iter(loader)
    n_batches = len(loader)
    for _ in range(workers):
        next(it)
    pids = [w.pid for w in it._workers]  # type: ignore[attr-defined]
    cpu0 = sum(_cpu_s(p) for p in pids)
    main0 = time.process_time()
    t0 = time.perf_counter()
    count = 0
    for _ in range(n_batches - workers):
        count += next(it)[0].shape[0]
    wall = time.perf_counter() - t0
    # Read the workers' CPU time before the iterator ends (it stops them then).
    cpu = sum(_cpu_s(p) for p in pids) - cpu0
    main_cpu = time.process_time() - main0
    del it, loader
    return {"images": count, "wall_s": wall, "images_per_s": count / wall,
            "images_per_s_per_worker": count / wall / workers, "images_per_worker_cpu_s": count / cpu,
            "main_cpu_ms_per_image": main_cpu / count * 1e3}


def token_path(folder: Path, seq_len: int, batch: int, batches: int, seed: int) -> dict[str, float]:
    """nanoGPT's get_batch from a memory-mapped uint16 token file: seconds per sample."""
    path = folder / "tokens.bin"
    if not path.exists():
        rng = np.random.default_rng(seed)
        rng.integers(0, 50257, size=1 << 24, dtype=np.uint16).tofile(path)  # 16 Mi tokens, 32 MiB
    data = np.memmap(path, dtype=np.uint16, mode="r")
    gen = torch.Generator().manual_seed(seed)
    t0 = time.thread_time()
    for _ in range(batches):
        ix = torch.randint(len(data) - seq_len - 1, (batch,), generator=gen)
        x = torch.stack([torch.from_numpy(data[i:i + seq_len].astype(np.int64)) for i in ix.tolist()])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + seq_len].astype(np.int64)) for i in ix.tolist()])
        assert x.shape == y.shape == (batch, seq_len)
    per_sample = (time.thread_time() - t0) / (batches * batch)
    return {"seq_len": seq_len, "batch": batch, "s_per_sample": per_sample, "s_per_token": per_sample / seq_len}


# ---- the machine -------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                            "pillow": Image.__version__, "libjpeg_turbo": features.version("libjpeg_turbo"),
                            "os_cpu_count": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "Hypervisor vendor",
                               "CPU family", "Model", "BogoMIPS"):
                info["lscpu_" + key.strip().lower().replace("(s)", "s").replace(" ", "_")] = value.strip()
    except (OSError, subprocess.CalledProcessError):
        info["lscpu"] = "unavailable"
    return info


def wait_for_load(threshold: float, max_wait_s: float) -> float:
    """Wait until the 1-minute load average is below ``threshold`` (or the time is up)."""
    start = time.monotonic()
    while os.getloadavg()[0] >= threshold and time.monotonic() - start < max_wait_s:
        time.sleep(10)
    return time.monotonic() - start


def summary(values: list[float]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(values), 2), "stdev": round(statistics.stdev(values), 2) if len(values) > 1 else 0.0,
            "min": round(min(values), 2), "max": round(max(values), 2), "trials": len(values)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=200, help="JPEGs to generate")
    ap.add_argument("--per-trial", type=int, default=1536, help="images through the DataLoader per trial")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wait-load", type=float, default=None, metavar="LOAD",
                    help="wait for the 1-minute load average to drop below LOAD first")
    ap.add_argument("--max-wait-s", type=float, default=900.0)
    ap.add_argument("--out", default=str(ROOT / "configs" / "perf" / "input.json"))
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    if args.images < 1 or args.trials < 1 or args.per_trial < 4 * args.batch:
        ap.error("--images and --trials must be >= 1, --per-trial >= 4 x --batch")

    torch.set_num_threads(1)  # as in a DataLoader worker
    with tempfile.TemporaryDirectory(prefix="srift-input-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        ds = make_images(folder, args.images, args.seed)
        files = sorted(folder.glob("*.jpg"))
        print(f"generated {ds['count']} JPEGs (quality {ds['quality']}) in {time.perf_counter() - t0:.0f} s: "
              f"mean {ds['mean_bytes'] / 1e3:.0f} KB (median {ds['median_bytes'] / 1e3:.0f}, p10-p90 "
              f"{ds['p10_bytes'] / 1e3:.0f}-{ds['p90_bytes'] / 1e3:.0f}), mean {ds['mean_width']:.0f} x "
              f"{ds['mean_height']:.0f} px ({ds['mean_megapixels']:.3f} MP), {ds['share_500px_long_side']:.0%} "
              "500 px on the long side")
        for f in files:  # warm the page cache: decode cost, not disk, is measured
            f.read_bytes()

        waited = wait_for_load(args.wait_load, args.max_wait_s) if args.wait_load is not None else 0.0
        load_before = [round(x, 2) for x in os.getloadavg()]
        stages = time_stages(files, 2 * len(files))
        sizes = (128, 160, 224, 288, 320)
        by_size = per_image_s_by_size(files, sizes, len(files))
        # t(s) = a + b s^2: a depends on the source image (decode, crop and resize), b on the output.
        a, b = np.linalg.lstsq(np.array([[1.0, s * s] for s in sizes]), np.array([by_size[s] for s in sizes]),
                               rcond=None)[0]
        t_ref = a + b * REFERENCE_SIZE ** 2
        source_share = float(a / t_ref)

        trials: dict[int, list[dict[str, float]]] = {1: [], 2: []}
        for t in range(args.trials):
            for workers in ((1, 2) if t % 2 == 0 else (2, 1)):
                trials[workers].append(loader_trial(files, workers, args.per_trial, args.batch, args.seed + t))
        load_after = [round(x, 2) for x in os.getloadavg()]
        tokens = [token_path(folder, L, 16, 200, args.seed) for L in (1024, 2048)]

    res = {w: {"images_per_s": summary([r["images_per_s"] for r in rs]),
               "images_per_s_per_worker": summary([r["images_per_s_per_worker"] for r in rs]),
               "images_per_worker_cpu_s": summary([r["images_per_worker_cpu_s"] for r in rs]),
               "main_cpu_ms_per_image": summary([r["main_cpu_ms_per_image"] for r in rs])} for w, rs in trials.items()}

    print(f"\nload average (1, 5, 15 min) before {load_before}, after {load_after} (waited {waited:.0f} s); "
          f"{os.cpu_count()} CPUs")
    print("\nper image, one process (ms of CPU):  " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items())
          + f"  = {sum(stages.values()):.2f}")
    print("whole transform by output size (ms): " + ", ".join(f"{s} px {by_size[s] * 1e3:.2f}" for s in sizes)
          + f"\n  fit t = {a * 1e3:.2f} ms + {b * 1e3 * REFERENCE_SIZE ** 2:.2f} ms x (size/224)^2: "
          f"{source_share:.0%} of the 224-px cost depends on the source image, not the output size")
    print(f"\nDataLoader, batch {args.batch}, {args.per_trial} images per trial, {args.trials} trials "
          "(mean +- stdev [min, max]):")
    print(f"{'workers':>8} {'images/s':>22} {'images/s per worker':>26} {'images per worker CPU-s':>28} "
          f"{'main ms/img':>12}")
    for w, r in res.items():
        cells = [r[k] for k in ("images_per_s", "images_per_s_per_worker", "images_per_worker_cpu_s")]
        print(f"{w:>8} " + " ".join(f"{c['mean']:>8.1f} +- {c['stdev']:<5.1f}[{c['min']:.0f}, {c['max']:.0f}]".rjust(w_)
                                     for c, w_ in zip(cells, (22, 26, 28)))
              + f" {r['main_cpu_ms_per_image']['mean']:>12.3f}")
    print("\ntext path (memory-mapped uint16 tokens, batch 16, one process): " + "; ".join(
        f"seq {t['seq_len']}: {t['s_per_sample'] * 1e6:.1f} us per sample ({t['s_per_token'] * 1e9:.1f} ns per token)"
        for t in tokens))

    per_core = res[2]["images_per_worker_cpu_s"]
    doc = {
        "schema": "srift.perf.input/v1",
        "images": {
            "transform": "torchvision ImageNet training transform on PIL: decode + convert('RGB'), "
                         "RandomResizedCrop(224, bilinear), RandomHorizontalFlip, ToTensor, Normalize "
                         "(written out with PIL + torch as torchvision does)",
            "reference_image_size": REFERENCE_SIZE,
            "images_per_s_per_core": per_core,
            "images_per_s_per_vcpu": {k: round(per_core[k] * VCPU_FACTOR, 2) for k in ("mean", "stdev", "min", "max")},
            "source_share_at_reference": round(source_share, 4),
            "stage_ms": stages,
            "ms_by_output_size": {str(s): round(by_size[s] * 1e3, 4) for s in sizes},
            "dataloader": {str(w): r for w, r in res.items()},
            "dataset": ds,
        },
        "tokens": {"s_per_token": max(t["s_per_token"] for t in tokens),
                   "measured": [{k: (round(v, 12) if isinstance(v, float) else v) for k, v in t.items()} for t in tokens],
                   "path": "nanoGPT get_batch: random offsets into a memory-mapped uint16 token file, int64 tensors"},
        "assumptions": {
            "vcpu_factor": VCPU_FACTOR,
            "vcpu_factor_basis": "images_per_s_per_vcpu = images per worker CPU-second (2 DataLoader workers) x "
                                 "vcpu_factor. Cloud GPU instances count hyperthreads as vCPUs (EC2: each vCPU is a "
                                 "thread of a core, 2 per core on p3/p4d/p5/g4dn/g5/g6; Graviton g5g, where a vCPU is a "
                                 "core, is not told apart), and a busy loader keeps both "
                                 "threads of a core busy; SMT adds roughly 15-30 % to a core's throughput on decode "
                                 "and resampling code, so each thread gets about 0.58-0.65 of a lone core: 0.6. This "
                                 "machine's vCPUs are taken as whole cores (lscpu: 1 thread per core). Not corrected "
                                 "for CPU generation: the GPU hosts' Xeon/EPYC cores are not faster than this one, so "
                                 "the rate is if anything optimistic.",
            "reserved_vcpus_per_gpu": RESERVED_VCPUS_PER_GPU,
            "reserved_basis": "each GPU's training process keeps one vCPU busy (Python dispatching kernels, the "
                              "pin-memory thread); the DataLoader workers get the rest",
            "output_scaling": "per-image cost = t224 x (source_share + (1 - source_share) x (size/224)^2): decode and "
                              "the crop's resize read the source image (RandomResizedCrop's cost depends on the "
                              "source, not the output); flip, ToTensor, Normalize and collation grow with the output",
            "storage": "files in the page cache: decode CPU only, no disk or network reads",
        },
        "measurement": {
            "command": "python scripts/measure_input_pipeline.py " + " ".join(sys.argv[1:]),
            "date": _dt.date.today().isoformat(),
            "machine": machine(),
            "load_average_before": load_before, "load_average_after": load_after, "waited_for_load_s": round(waited),
        },
    }
    if not args.no_write:
        write_json(Path(args.out), doc)
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

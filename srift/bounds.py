"""What srift models: the bounds of every count, size, budget and duration it accepts, in one place.

A value outside its bound is refused with exit code 2 and the bound in the message (``require``)
before it reaches the simulator: srift never predicts a cluster of 10^11 instances or a per-GPU
batch of 10^8 samples. The bounds are wide on purpose (they sit well beyond any real job), so a
job inside them is judged on its merits: a batch that is in bounds but too large for the GPU is
refused because it does not fit in memory (``srift predict``), not because of its size.
docs/limits.md lists them with their reasons.

Input files are bounded too, before they are parsed: their size, the nodes a YAML document
expands to (aliases counted at every use: "billion laughs") and its nesting depth.
"""

from __future__ import annotations

import math
import re
from typing import Any

from srift.errors import SriftError

# ---- a job -------------------------------------------------------------------------------------
MAX_BATCH_SIZE = 1 << 20  # samples per GPU per iteration (1,048,576)
MAX_GLOBAL_BATCH_SIZE = 1 << 26  # samples per iteration over the whole cluster (67,108,864)
MAX_SEQ_LEN = 1 << 20  # tokens per sample (1,048,576: the longest published contexts)
MAX_STEPS = 10**12  # iterations of one job
MAX_EPOCHS = 1e6  # epochs of one job
MAX_DATASET_SIZE = 10**15  # samples per epoch
MAX_SAMPLES = 10**18  # samples of one job (--samples)
MAX_TOKENS = 10**18  # tokens of one job (--tokens; the largest LLM runs: about 2 x 10^13)
MAX_GRAD_ACCUM = 65_536  # micro-batches per optimizer step
MAX_LORA_RANK = 65_536  # LoRA rank (above any model width srift has)
MAX_PARALLEL_DEGREE = 65_536  # TP, PP or CP degree of a layout, and virtual pipeline stages
MAX_MOE_IMBALANCE = 64.0  # busiest expert-parallel rank's routed tokens over the mean (at most EP)
MAX_MTP_LAYERS = 10_000  # multi-token prediction layers (each a block: a model config's layers' bound; DeepSeek-V3: 1)
MAX_KFAC_INTERVAL = 10**6  # K-FAC factor / inverse update interval, iterations
MAX_BUCKET_CAP_MB = 1 << 20  # DDP gradient bucket cap, MiB (1 TiB: above any model's gradients)

# ---- a cluster ---------------------------------------------------------------------------------
MAX_NODES = 16_384  # instances (nodes) in one cluster, over all its parts
MAX_NODE_GROUPS = 64  # node groups (instance types) in one cluster
MAX_GPUS_PER_NODE = 256  # GPUs, or CPU worker processes, per node
MAX_VCPUS_PER_NODE = 1 << 20  # vCPUs of one node
MAX_GPUS = 131_072  # GPUs (workers) in one cluster
MAX_NETWORK_GBPS = 100_000.0  # node network bandwidth, Gbit/s (the largest today: 3,200)
MIN_NETWORK_GBPS = 0.001  # a rate above 0 but below 1 Mbit/s: times past any float
MAX_NODE_USD_PER_HOUR = 100_000.0  # price of one node per hour (the dearest today: about $100)
MAX_INTERRUPTIONS_PER_HOUR = 60.0  # spot interruptions per node-hour
MAX_GPU_MEMORY_GIB = 16_384.0  # memory of one GPU
MAX_INTRA_NODE_GB_PER_S = 100_000.0  # a node's GPU-to-GPU link, GB/s per GPU per direction (the largest today: 900)
MIN_INTRA_NODE_GB_PER_S = 0.001  # above 0 but below 1 MB/s: times past any float

# ---- the user's limits and the search ----------------------------------------------------------
MIN_USD = 0.01  # the smallest budget or cost limit (a cent): below it margins in % lose meaning
MIN_HOURS = 1e-3  # the shortest deadline (3.6 s)
MAX_BUDGET_USD_PER_HOUR = 1e7  # whole-cluster budget
MAX_DEADLINE_HOURS = 1e6  # about 114 years
MAX_COST_USD = 1e12
# `srift recommend --max-gpus`: the largest cluster a search takes; its cost grows at most linearly
# with it (scripts/bench_recommend.py), and beyond the largest clusters run today a prediction
# would rest on nothing measured.
MAX_SEARCH_GPUS = 16_384
# Simulations one `srift recommend` search runs at most (srift/search/sweep.py): far above what
# the bounded searches need (the 16,384-GPU layout search of DeepSeek-V3 simulates under 2,000,
# scripts/bench_recommend.py --speed); it ends a search the bounds cannot cut short, and says so.
MAX_SEARCH_SIMULATIONS = 20_000
MAX_TOP = 1000  # configurations shown

# ---- the profiler ------------------------------------------------------------------------------
MAX_WARMUP = 10_000  # optimizer steps
MAX_ITERS = 100_000  # optimizer steps measured
DEFAULT_PROFILE_TIMEOUT_S = 600.0  # longest wait for the next optimizer step (the first included)
MAX_PROFILE_TIMEOUT_S = 7 * 24 * 3600.0
PROFILE_STOP_GRACE_S = 10.0  # after a timeout, how long the script has to unwind before a hard stop

# ---- srift calibrate comm ----------------------------------------------------------------------
MAX_CALIBRATION_SIZES = 1000  # message sizes of one calibration (a cluster file's comm_calibration)
MAX_CALIBRATION_BYTES = 1 << 32  # the largest message measured (4 GiB: each worker holds about three)
MAX_CALIBRATION_REPS = 10_000  # timed repetitions per size
MAX_CALIBRATION_NPROC = 256  # local worker processes (MAX_GPUS_PER_NODE: the file describes one node of them)

# ---- a profile ---------------------------------------------------------------------------------
MAX_LAYERS = 25_000  # leaf modules (a profile of this many, every field set, stays under MAX_YAML_NODES)
MAX_LAYER_PARAMS = 10**13  # parameters of one leaf module
MAX_LAYER_BYTES = 1e18  # gradient, activation and moved bytes of one leaf module per iteration
MAX_LAYER_FLOPS = 1e24  # FLOPs of one leaf module per iteration
MAX_LAYER_S = 1e6  # measured seconds of one leaf module (or phase) per iteration
MAX_KFAC_DIM = 1 << 24  # K-FAC factor dimension
MAX_KFAC_SPATIAL = 1 << 40  # K-FAC factor rows per sample
MAX_STATE_BYTES_PER_PARAM = 64  # optimizer state per parameter (Adam in fp32: 8)
MAX_SAMPLE_BYTES = 1e12  # bytes of one input sample
MAX_NAME_CHARS = 200  # a profile, cluster or model name
MAX_NOTES, MAX_NOTE_CHARS = 100, 1000  # a profile's notes kept, and the characters of each

# ---- input files -------------------------------------------------------------------------------
MAX_INPUT_BYTES = 64 * 2**20  # any YAML or JSON file srift reads
MAX_CATALOG_BYTES = 256 * 2**20  # a catalog CSV (bundled or refreshed)
MAX_JOB_FILE_BYTES = 2**20  # a job file (srift.yaml: a few dozen keys) or a cluster file (64 node groups, 1,000 calibration sizes)
# A profile: twice a MAX_LAYERS profile as srift writes it (densenet201's 608 layers repeated to 25,000: 7.2 MB).
MAX_PROFILE_BYTES = 16 * 2**20
MAX_YAML_NODES = 2_500_000  # nodes of a YAML document with every alias expanded
MAX_NESTING = 64  # nesting depth of a YAML document (JSON: as deep as Python parses, then refused)


def require(value: Any, name: str, low: float, high: float, *, hint: str, integer: bool = False,
            low_open: bool = False, unit: str = "") -> Any:
    """``value`` when it is a number (an integer if ``integer``) in ``[low, high]`` (``(low, high]``
    with ``low_open``); else a SriftError naming ``name`` and the bound.

    Args:
        value: The value to check (bools are refused: YAML's ``yes`` is not a count).
        name: How the message names it (a flag like ``--batch-size`` or a field like ``steps``).
        low: Lowest allowed value.
        high: Highest allowed value.
        hint: The ``To fix:`` line.
        integer: The value must be an integer.
        low_open: ``low`` itself is not allowed (``> 0`` rather than ``>= 0``).
        unit: Unit for the message (``GPUs``, ``$/h``).

    Returns:
        The value, unchanged.

    Raises:
        SriftError: for a non-number, NaN, infinity or a value outside the bound.
    """
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise SriftError(f"{name} must be {kind}, got {shown(value)}.", hint)
    if isinstance(value, float) and not math.isfinite(value):
        raise SriftError(f"{name} must be a finite number, got {shown(value)}.", hint)
    suffix = f" {unit}" if unit else ""
    if value <= low if low_open else value < low:
        lo = f"above {_num(low)}" if low_open else f"at least {_num(low)}"
        raise SriftError(f"{name} must be {lo}{suffix}, got {_num(value)}.", hint)
    if value > high:
        raise SriftError(f"{name} is {_num(value)}{suffix}; srift models at most {_num(high)}{suffix}.", hint)
    return value


#: The longest number srift reads from text (a --layout degree, a job file's SRIFT_ variable, an
#: instance count): far beyond every bound above, and short enough that converting it costs nothing.
MAX_NUMBER_CHARS = 40
_integer_text = re.compile(r"[0-9]+", re.ASCII)
_number_text = re.compile(r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?", re.ASCII)


def parse_number(text: str, name: str, *, hint: str, integer: bool = False) -> int | float:
    """The number a user typed as text: ASCII digits only (``²``, ``３`` and other Unicode digits,
    which Python's ``int`` and ``float`` would read, are refused), at most MAX_NUMBER_CHARS
    characters; an integer is digits alone, a number may have a sign, a point, ``_`` and an
    exponent (``1e9``). The one parser of every number srift reads from text; its bound is
    checked by ``require``.

    Raises:
        SriftError: naming ``name``, for anything else.
    """
    t = text.strip()
    kind = "a whole number (digits 0-9)" if integer else "a number (digits 0-9, e.g. 1e9)"
    if len(t) > MAX_NUMBER_CHARS:
        raise SriftError(f"{name} is {len(t):,} characters long, not {kind} srift reads (at most {MAX_NUMBER_CHARS}).", hint)
    if not (_integer_text if integer else _number_text).fullmatch(t):
        raise SriftError(f"{name} must be {kind}, got {shown(t)}.", hint)
    return int(t) if integer else float(t)


def ascii_integer(text: str) -> int | None:
    """``text`` as a whole number of ASCII digits (at most MAX_NUMBER_CHARS), else None: for text
    read where a refusal is not the answer (``$COLUMNS``) or one word of many (a lengths file);
    ``parse_number`` is the refusing form of the same rule."""
    t = text.strip()
    return int(t) if len(t) <= MAX_NUMBER_CHARS and _integer_text.fullmatch(t) else None


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages (never echo a huge value whole)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def key_text(key: Any) -> str:
    """A mapping key for a message: as written when it is a short plain string, else ``shown``."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 40 else shown(key, 40)


def _num(v: float) -> str:
    """A bound or value for a message: ``1,048,576``, ``1e+12``, ``0.5``; a huge integer by its size."""
    if isinstance(v, int):
        if abs(v) < 10**16:
            return f"{v:,}"
        return f"{float(v):.3g}" if abs(v) < 10**300 else f"a {len(str(abs(v)))}-digit number"
    return f"{int(v):,}" if v.is_integer() and abs(v) < 1e16 else f"{v:g}"

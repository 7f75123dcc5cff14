"""How far predictions have been from measurements: the figures `scripts/validate.py` measured,
shipped in ``configs/perf/accuracy.json``, so that `predict` and `recommend` can say how much to
trust a number (torch-free, read once)."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from srift.bounds import key_text, require
from srift.cache import CACHE_ENTRIES
from srift.errors import SriftError
from srift.files import configs_dir, read_json

SCHEMA = "srift.perf.accuracy/v1"
GROUPS = ("single_gpu", "one_node", "multi_node", "sharded", "finetune", "moe")


def accuracy_path() -> Path:
    return configs_dir() / "perf" / "accuracy.json"


@functools.lru_cache(maxsize=1)
def load_accuracy() -> dict[str, Any]:
    """The shipped validation figures (empty when the file is missing or of another schema)."""
    path = accuracy_path()
    if not path.is_file():
        return {}
    data = read_json(path, "validation figures", _HINT)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return {}
    groups = data.get("groups", {})
    if not isinstance(groups, dict):
        raise SriftError(f"{path}: 'groups' must be a mapping.", _HINT)
    for name, g in groups.items():
        _check_group(g, f"{path}: groups.{key_text(name)}")
    return data


_HINT = "reinstall srift-planner, or re-run scripts/validate.py --write-accuracy."


_FIGURES = ("fit", "logo", "lomo", "lono", "loso", "leave_silicon")  # MAPE in % under each way of holding out


def _check_group(g: Any, where: str) -> None:
    """A validation group: a row count and MAPE figures (%), what typical_error reads, and its
    subgroups (``by_link``, ``by_network``: groups of the same shape)."""
    if not isinstance(g, dict) or "fit" not in g or "rows" not in g:
        raise SriftError(f"{where} must be a mapping with 'rows' and 'fit' figures.", _HINT)
    require(g["rows"], f"{where}.rows", 0, 10**9, integer=True, hint=_HINT)
    for key in _FIGURES:
        if key in g:
            require(g[key], f"{where}.{key}", 0.0, 1000.0, hint=_HINT)
    require(g.get("bias_pct", 0.0), f"{where}.bias_pct", -1000.0, 1000.0, hint=_HINT)
    if "max_nodes" in g:  # the largest validated node count (multi-node group)
        require(g["max_nodes"], f"{where}.max_nodes", 0, 10**6, integer=True, hint=_HINT)
    if not isinstance(g.get("basis", ""), str):
        raise SriftError(f"{where}: 'basis' must be text.", _HINT)
    for key, sub in g.items():
        if isinstance(key, str) and key.startswith("by_"):
            if not isinstance(sub, dict):
                raise SriftError(f"{where}.{key} must be a mapping of groups.", _HINT)
            for name, group in sub.items():
                _check_group(group, f"{where}.{key}.{key_text(name)}")


_NETWORK_WORDS = {"ethernet": "TCP sockets", "efa": "EFA", "infiniband": "InfiniBand", "roce": "RoCE"}

#: Where a prediction's compute comes from (``typical_error``'s ``measured``).
MEASURED_HERE = "target"  # a profile measured on the target GPU type at the target precision
MEASURED_ELSEWHERE = "other"  # measured on another GPU or precision, scaled by the model
MEASURED = (None, MEASURED_HERE, MEASURED_ELSEWHERE)


# The held-out figures of a group (leave the GPU, its silicon, the model, the network or the
# source out of the fit) and their words; the largest is what a prediction quotes.
HELD_OUT = {"logo": "GPU", "leave_silicon": "silicon", "lomo": "model", "lono": "network", "loso": "source"}


def _figure(g: dict[str, Any]) -> float:
    """A group's quoted figure: the largest of its held-out MAPEs (``HELD_OUT``), so that a
    prediction's band covers data no fit saw; the in-fit one where none was computed."""
    held = [float(g[k]) for k in HELD_OUT if k in g]
    return max(held) if held else float(g["fit"])


def _held_words(g: dict[str, Any]) -> str:
    """What ``_figure`` took: "largest of leave-one-GPU-, model- and source-out MAPE", or "MAPE"."""
    words = [w for k, w in HELD_OUT.items() if k in g]
    if not words:
        return "MAPE"
    if len(words) == 1:
        return f"leave-one-{words[0]}-out MAPE"
    return "largest of leave-one-" + "-, ".join(words[:-1]) + f"- and {words[-1]}-out MAPE"


def _at_link(g: dict[str, Any] | None, link: str | None) -> tuple[dict[str, Any] | None, bool]:
    """A group's figures over ``link`` where the validation had enough rows over it (its
    ``by_link``), else the whole group's; and whether the link's were found."""
    by_link = (g or {}).get("by_link", {})
    return (by_link[link], True) if link in by_link else (g, False)


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def typical_error(nodes: int, gpus: int, cpu: bool = False, measured: str | None = None,
                  link: str | None = None, network: str | None = None) -> tuple[float | None, str]:
    """The largest held-out MAPE (%) of the matching validation group (GPU, model, network or
    source left out of the fit: ``_figure``), and what it rests on.

    The group follows the cluster and where the compute times come from (``measured``): a
    structural profile (None) or one measured on another GPU uses the model's figures; a profile
    measured on the target GPU type quotes how the same runs differ between systems of that GPU
    (one GPU) or how well the simulator scales a measured 1-GPU time to the node (one node).
    On one node with several GPUs, the figure of the node's intra-node ``link`` is used where the
    validation had enough rows over that link (``by_link``), else the whole group's.
    Several nodes -> the multi-node group's figure over the cluster's network class where enough
    rows back one, with which way those runs missed; CPU workers
    -> None (they run on measured times; scripts/validate_local_ddp.py checks them).

    Raises:
        ValueError: for a ``measured`` other than None, ``"target"`` or ``"other"``.
    """
    if measured not in MEASURED:
        raise ValueError(f"measured must be one of {MEASURED}, got {measured!r}")
    groups = load_accuracy().get("groups", {})
    if cpu:
        return None, "CPU workers: outside the GPU validation; scripts/validate_local_ddp.py checks them on your machine"
    if nodes > 1:
        one, _ = _at_link(groups.get("one_node"), link)
        within = f"; within one node ±{_figure(one):.1f} %" if one else ""
        group = groups.get("multi_node")
        if not group or not group.get("rows"):
            return None, f"not validated across nodes: no measured multi-node run to compare with{within}"
        by_net = group.get("by_network", {})
        g = by_net.get(network, group) if network else group
        over = f" over {_NETWORK_WORDS.get(network or '', network)}" if g is not group else ""
        bias = float(g.get("bias_pct", 0.0))
        way = (f"they ran {-bias:.0f} % slower than predicted on average" if bias < 0
               else f"they ran {bias:.0f} % faster than predicted on average")
        held = _held_words(g)
        pct, beyond = _figure(g), ""
        top = int(group.get("max_nodes", 0))
        if top and nodes > top:
            # Beyond the measured node counts the figure is extrapolated: widen it as a spread that
            # grows with the square root of the node count (an assumption, said in the basis).
            pct *= math.sqrt(nodes / top)
            beyond = f"; widened by sqrt({nodes}/{top}) for {nodes} nodes, beyond the {top} validated"
        return pct, (f"{held} over {g['rows']} measured multi-node runs{over} "
                     f"({group.get('basis', '')}; scripts/validate.py): {way}{within}{beyond}")
    if gpus <= 1:
        key = {MEASURED_HERE: "single_gpu_same_gpu", MEASURED_ELSEWHERE: "single_gpu_other_gpu"}.get(measured or "", "single_gpu")
    else:
        key = "one_node_same_gpu" if measured == MEASURED_HERE else "one_node"
    g = groups.get(key)
    if not g:
        return None, "no validation figures shipped"
    over = ""
    if gpus > 1:
        g, found = _at_link(g, link)
        over = f" over {link}" if found else ""
    held = _held_words(g)
    what = {
        "single_gpu": f"{held} over {g['rows']} measured single-GPU runs",
        "one_node": f"{held} over {g['rows']} measured one-node multi-GPU runs{over}",
        "single_gpu_same_gpu": f"MAPE of {g['rows']} single-GPU runs against the same runs on other systems with that GPU",
        "single_gpu_other_gpu": f"{held} over {g['rows']} single-GPU runs predicted from a run on another GPU or precision",
        "one_node_same_gpu": f"{held} over {g['rows']} one-node runs{over} predicted from the same system's 1-GPU run",
    }[key]
    if gpus > 1 and measured == MEASURED_ELSEWHERE:
        what += " (from structural profiles: a profile measured on another GPU carries little of its own time there)"
    tip = ""
    here, _ = _at_link(groups.get("one_node_same_gpu" if gpus > 1 else "single_gpu_same_gpu"), link if gpus > 1 else None)
    if measured != MEASURED_HERE and here:
        tip = f"; from a profile measured on this GPU type: ±{_figure(here):.1f} %"
    return _figure(g), f"{what}, scripts/validate.py{tip}"


def node_evidence(nodes: int, short: bool = False) -> str:
    """What the validation says about a node count: ``one node``, ``4 nodes: within the 32
    measured`` or ``38 nodes: beyond the 32 measured`` (the multi-node group's largest node count,
    ``max_nodes``); ``38 nodes: none measured`` without multi-node figures. ``short`` drops the
    word "nodes" for a table's ``nodes`` column (``38: beyond the 32 measured``, ``1``)."""
    if nodes <= 1:
        return "1" if short else "one node"
    top = int((load_accuracy().get("groups", {}).get("multi_node") or {}).get("max_nodes", 0))
    what = f"{'beyond' if nodes > top else 'within'} the {top} measured" if top else "none measured"
    return f"{nodes}: {what}" if short else f"{nodes} nodes: {what}"


@functools.lru_cache(maxsize=1)
def finetune_typical_error() -> tuple[float | None, str]:
    """The fine-tuning group's figure (``--finetune`` predictions): the MAPE of tokens/s per GPU
    over the fine-tuning runs of data/finetuning (``scripts/validate.py``'s fine-tuning group;
    nothing fitted on them, so it is out of sample), and what it rests on, with the peak memory
    figure beside it."""
    g = load_accuracy().get("groups", {}).get("finetune")
    if not g or not g.get("rows"):
        return None, "fine-tuning not validated: no figures shipped (scripts/validate.py --only finetune --write-accuracy)"
    memory = (f"; peak memory ±{float(g['memory_mape']):.1f} % over {int(g['memory_rows'])} runs"
              if "memory_mape" in g and "memory_rows" in g else "")
    return _figure(g), (f"MAPE of tokens/s per GPU over {g['rows']} fine-tuning runs ({g.get('basis', 'data/finetuning')}), "
                        f"out of sample, scripts/validate.py{memory}")


@functools.lru_cache(maxsize=1)
def sharded_typical_error() -> tuple[float | None, str]:
    """The sharded group's figure (FSDP/ZeRO-2/HSDP predictions): the largest held-out MAPE of
    tokens/s per GPU over the PyTorch FSDP runs of data/llm-training-throughput (GPU, silicon,
    model size or source left out: ``scripts/validate.py``'s sharded group), and what it rests on."""
    g = load_accuracy().get("groups", {}).get("sharded")
    if not g or not g.get("rows"):
        return None, "sharded training not validated: no figures shipped (scripts/validate.py --write-accuracy)"
    return _figure(g), (f"{_held_words(g)} of tokens/s per GPU over {g['rows']} PyTorch FSDP runs "
                        f"({g.get('basis', 'data/llm-training-throughput')}), scripts/validate.py")


@functools.lru_cache(maxsize=1)
def moe_typical_error() -> tuple[float | None, str]:
    """The MoE group's figure (a mixture-of-experts layout): the MAPE of tokens/s per GPU over the
    Megatron-Core expert-parallel runs of data/moe-training (``scripts/validate.py``'s MoE group;
    nothing fitted on them, so every model and the source are held out), and what it rests on."""
    g = load_accuracy().get("groups", {}).get("moe")
    if not g or not g.get("rows"):
        return None, "mixture of experts not validated: no figures shipped (scripts/validate.py --moe-only --write-accuracy)"
    return _figure(g), (f"MAPE of tokens/s per GPU over {g['rows']} expert-parallel runs ({g.get('basis', 'data/moe-training')}), "
                        "out of sample, scripts/validate.py")


def layout_finetune_typical_error() -> tuple[float | None, str]:
    """The figure of fine-tuning inside a Megatron layout: the fine-tuning group's NeMo
    steady-state runs with the layout factor refitted without their repository (``steady_loso``)."""
    g = load_accuracy().get("groups", {}).get("finetune")
    if not g or "steady_loso" not in g:
        return None, "fine-tuning in a layout not validated: no figures shipped (scripts/validate.py --only finetune --write-accuracy)"
    return float(g["steady_loso"]), (f"tokens/s per GPU over {int(g.get('steady_rows', 0))} NeMo SFT/LoRA steady-state runs "
                                     "(layout factor refitted without their repository), scripts/validate.py")


def pair_typical_error(group: str, same_gpu: bool) -> float | None:
    """The typical error of the ratio of two predictions of a validation ``group`` (``layouts``,
    ``moe``): on the same GPU (the scaling term) or on other GPUs (the cross-GPU term), from the
    validation's residuals (srift/fitting/pairs.py; scripts/validate.py --only pairs); None where
    the validation has no such pair."""
    g = load_accuracy().get("groups", {}).get(f"pairs_{group}_{'same_gpu' if same_gpu else 'other_gpu'}")
    return float(g["fit"]) if g and g.get("rows") else None


# ---- CPU profiles: scripts/validate_profiles.py's figures -------------------------------------------
PROFILE_ACCURACY_SCHEMA = "srift.perf.profile_accuracy/v1"


def profile_accuracy_path() -> Path:
    return configs_dir() / "perf" / "profile_accuracy.json"


@functools.lru_cache(maxsize=1)
def cpu_profile_typical_error() -> tuple[float | None, str]:
    """The figure of a GPU prediction from a profile measured on a CPU (``srift profile`` on a
    laptop): the largest held-out MAPE of scripts/validate_profiles.py, which profiles real training
    scripts on a CPU and predicts them against published GPU runs (configs/perf/profile_accuracy.json),
    and what it rests on; None where the file is missing."""
    path = profile_accuracy_path()
    if not path.is_file():
        return None, "CPU profiles not validated: no figures shipped (scripts/validate_profiles.py --write)"
    data = read_json(path, "CPU-profile validation figures", "reinstall srift-planner, or re-run scripts/validate_profiles.py --write.")
    g = data.get("groups", {}).get("cpu_profile") if isinstance(data, dict) and data.get("schema") == PROFILE_ACCURACY_SCHEMA else None
    if not isinstance(g, dict):
        raise SriftError(f"{path}: no 'cpu_profile' group of schema {PROFILE_ACCURACY_SCHEMA}.",
                         "reinstall srift-planner, or re-run scripts/validate_profiles.py --write.")
    _check_group(g, f"{path}: groups.cpu_profile")
    if not g["rows"]:
        return None, "CPU profiles not validated: no published run matched (scripts/validate_profiles.py)"
    held = f" over {int(g['held_out_rows'])} single-GPU runs" if "held_out_rows" in g else ""
    return _figure(g), (f"CPU-profile validation: {_held_words(g)}{held} (in-fit {float(g['fit']):.1f} % over all "
                        f"{g['rows']}) of published GPU runs predicted from CPU profiles of their training scripts "
                        f"({g.get('basis', '')}; scripts/validate_profiles.py)")


def with_cpu_profile_error(pct: float | None, basis: str, compute_pct: float | None) -> tuple[float | None, str, float | None]:
    """A prediction's figure, its basis and its compute part's, for a profile measured on a CPU:
    the CPU-profile validation's figure where it is the larger (its structure, not its times,
    carries to the GPU: how well that carries is what scripts/validate_profiles.py measured), with
    the cluster's own group beside it; unchanged, with a note, where none is shipped."""
    cpu_pct, cpu_basis = cpu_profile_typical_error()
    if cpu_pct is None:
        return pct, f"{basis}; {cpu_basis}", compute_pct
    if pct is None or cpu_pct >= pct:
        beside = f"; the cluster's own group: ±{pct:.1f} % ({basis})" if pct is not None else ""
        return cpu_pct, cpu_basis + beside, max(cpu_pct, compute_pct or 0.0)
    return pct, f"{basis}; {cpu_basis}: ±{cpu_pct:.1f} %", max(cpu_pct, compute_pct or 0.0)

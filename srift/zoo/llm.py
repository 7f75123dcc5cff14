"""Decoder-only LLMs as data: published architectures (configs/zoo/llm.yaml, ``zoo_llms``) and the
public names of srift's decoder model.

Torch-free and weight-free: an architecture (``DecoderArch``, srift/zoo/decoder_arch.py, from the
zoo's list or a Hugging Face config.json, srift/zoo/hf_config.py) becomes a ``Profile`` by
arithmetic (srift/zoo/decoder_layers.py: what a profile counts), so a 70B model profiles in
milliseconds on any machine. This module keeps the zoo's list and re-exports both modules' names,
so ``from srift.zoo.llm import ...`` finds them all.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from srift.errors import SriftError
from srift.files import configs_dir, read_yaml
from srift.zoo.decoder_arch import (  # noqa: F401  (re-exported: srift.zoo.llm's public names)
    BIAS_PARTS, DEFAULT_BATCH_SIZE, DEFAULT_SEQ_LEN, GATED_MLPS, GRAD_BYTES_PER_PARAM, LSE_BYTES, MLP_BIAS, MLP_KINDS,
    NAMINGS, NORM_KINDS, POSITION_KINDS, SCHEMA, TOKEN_ID_BYTES, BiasPart, DecoderArch, ZooLlm, active_params_count,
    attention_params, block_params, default_seq_len, dense_mlp_params, kv_cache_bytes_per_token, model_flops_per_token,
    moe_mlp_params, non_embedding_params, params_count,
)
from srift.zoo.decoder_layers import (  # noqa: F401  (re-exported)
    BLOCK_NORM_NAMES, EXPERTS_PREFIX, MLA_UP_PROJ_NAMES, MLP_PART_NAMES, SHARED_EXPERT_PREFIX, decoder_profile,
    expert_profile,
)


# ---- the zoo's list (configs/zoo/llm.yaml) --------------------------------------------------------
_ARCH_KEYS = {f.name for f in dataclasses.fields(DecoderArch)} - {"name", "unmodelled"}
_ENTRY_KEYS = {"hf_repo", "aliases", "published_params", "published_params_source", "published_active_params"}


def llm_catalog_path() -> Path:
    return configs_dir() / "zoo" / "llm.yaml"


@functools.lru_cache(maxsize=2)
def zoo_llms(path: str | None = None) -> dict[str, ZooLlm]:
    """The LLMs of configs/zoo/llm.yaml (or ``path``), by name, validated.

    Raises:
        SriftError: naming the first entry and key that is missing or wrong.
    """
    p = Path(path) if path else llm_catalog_path()
    data = read_yaml(p, "LLM zoo list")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("models"), dict):
        raise _catalog_error(p, f"expected 'schema: {SCHEMA}' and a 'models' mapping")
    return {str(name): _entry(str(name), raw, p) for name, raw in data["models"].items()}


def _entry(name: str, raw: Any, path: Path) -> ZooLlm:
    if not isinstance(raw, dict):
        raise _catalog_error(path, f"models.{name} must be a mapping")
    unknown = sorted(set(raw) - _ARCH_KEYS - _ENTRY_KEYS)
    if unknown:
        raise _catalog_error(path, f"models.{name} has unknown keys {', '.join(unknown)}")
    missing = [k for k in ("n_layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "published_params")
               if k not in raw]
    if missing:
        raise _catalog_error(path, f"models.{name} is missing {', '.join(missing)}")
    fields: dict[str, Any] = {k: raw[k] for k in _ARCH_KEYS if k in raw}
    biases = fields.get("biases", [])
    if not isinstance(biases, list):
        raise _catalog_error(path, f"models.{name}.biases must be a list")
    fields["biases"] = frozenset(str(b) for b in biases)
    dense_blocks = fields.get("dense_blocks", [])
    if not isinstance(dense_blocks, list):
        raise _catalog_error(path, f"models.{name}.dense_blocks must be a list of block numbers")
    fields["dense_blocks"] = frozenset(dense_blocks)
    if "norm_eps" in fields:
        fields["norm_eps"] = float(fields["norm_eps"])
    published = raw["published_params"]
    if not isinstance(published, int) or isinstance(published, bool) or published <= 0:
        raise _catalog_error(path, f"models.{name}.published_params must be a positive integer")
    active = raw.get("published_active_params", 0)
    if not isinstance(active, int) or isinstance(active, bool) or active < 0:
        raise _catalog_error(path, f"models.{name}.published_active_params must be a non-negative integer")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list):
        raise _catalog_error(path, f"models.{name}.aliases must be a list")
    hf_repo = raw.get("hf_repo")
    return ZooLlm(
        arch=DecoderArch(name=name, **fields),
        hf_repo=None if hf_repo is None else str(hf_repo),
        aliases=tuple(str(a) for a in aliases),
        published_params=published,
        published_params_source=str(raw.get("published_params_source", "")),
        published_active_params=active,
    )


def _catalog_error(path: Path, what: str) -> SriftError:
    return SriftError(f"the LLM zoo list '{path}' is not valid: {what}.", "reinstall srift-planner, or fix configs/zoo/llm.yaml.")

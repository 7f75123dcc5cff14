"""The model zoo: well-known architectures srift can predict without a user profile.

This module is torch-free: it lists the models and loads their shipped structural profiles
(profiles/<name>.yaml) for predict/recommend/check. Building the models (srift.zoo.models) and
making profiles need torch. The decoder LLMs (configs/zoo/llm.yaml) need neither: their profiles
are made by arithmetic (srift.zoo.llm) at any batch and sequence length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srift.cache import BoundedCache
from srift.errors import SriftError, closest
from srift.files import profiles_dir, read_yaml
from srift.profile import Profile
from srift.zoo import llm


@dataclass(frozen=True)
class ModelInfo:
    """Zoo entry: what the model takes and how its shipped profile was made.

    Attributes:
        name: Canonical name (``resnet50``).
        kind: ``image`` or ``sequence``.
        batch_size: Per-GPU batch of the shipped profile.
        seq_len: Sequence length of the shipped profile (sequence models), else None.
        image_size: Input height = width (image models), else None.
        optimizer: Usual optimizer (sets optimizer state bytes per parameter).
        params: Published parameter count (tests check the definition against it).
        reference: Where the parameter count comes from.
        llm: A decoder LLM of configs/zoo/llm.yaml: its profile is analytic (srift.zoo.llm), at
            any batch and sequence length, with no file and no torch.
    """

    name: str
    kind: str
    batch_size: int
    seq_len: int | None
    image_size: int | None
    optimizer: str
    params: int
    reference: str
    llm: bool = False


MODELS: dict[str, ModelInfo] = {m.name: m for m in (
    ModelInfo("resnet50", "image", 64, None, 224, "SGD", 25_557_032, "torchvision resnet50"),
    ModelInfo("resnet152", "image", 64, None, 224, "SGD", 60_192_808, "torchvision resnet152"),
    ModelInfo("vgg16", "image", 64, None, 224, "SGD", 138_357_544, "torchvision vgg16"),
    ModelInfo("densenet201", "image", 64, None, 224, "SGD", 20_013_928, "torchvision densenet201"),
    ModelInfo("inception-v4", "image", 64, None, 299, "SGD", 42_679_816, "timm inception_v4 (1000 classes)"),
    ModelInfo("vit-b16", "image", 64, None, 224, "AdamW", 86_567_656, "torchvision vit_b_16"),
    ModelInfo("bert-base", "sequence", 32, 128, None, "AdamW", 110_106_428, "HF BertForPreTraining bert-base-uncased"),
    ModelInfo("bert-large", "sequence", 16, 128, None, "AdamW", 336_226_108, "HF BertForPreTraining bert-large-uncased"),
    ModelInfo("bert-base-squad", "sequence", 32, 384, None, "AdamW", 108_893_186, "HF BertForQuestionAnswering bert-base-uncased"),
    ModelInfo("bert-large-squad", "sequence", 16, 384, None, "AdamW", 334_094_338, "HF BertForQuestionAnswering bert-large-uncased"),
    ModelInfo("gpt2", "sequence", 8, 1024, None, "AdamW", 124_439_808, "HF GPT2LMHeadModel gpt2 (tied head)"),
    ModelInfo("gpt2-medium", "sequence", 4, 1024, None, "AdamW", 354_823_168, "HF GPT2LMHeadModel gpt2-medium (tied head)"),
)}
# Models built with torch, whose structural profiles ship in profiles/ (scripts/make_zoo_profiles.py).
TORCH_MODEL_NAMES: tuple[str, ...] = tuple(MODELS)

_ALIASES = {"gpt2-124m": "gpt2", "gpt2-small": "gpt2", "gpt2-355m": "gpt2-medium", "inceptionv4": "inception-v4",
            "vit-b-16": "vit-b16", "vitb16": "vit-b16", "bert": "bert-base"}



def _register_llms() -> None:
    """Add the decoder LLMs of configs/zoo/llm.yaml to MODELS, and their names to _ALIASES (the
    aliases listed, the Hugging Face repository id and its last part)."""
    for name, entry in llm.zoo_llms().items():
        MODELS[name] = ModelInfo(name, "sequence", llm.DEFAULT_BATCH_SIZE, llm.default_seq_len(entry.arch), None,
                                 "AdamW", entry.published_params, entry.published_params_source, llm=True)
        repo = (entry.hf_repo, entry.hf_repo.rsplit("/", 1)[-1]) if entry.hf_repo else ()
        for alias in (*entry.aliases, *repo):
            _ALIASES[alias.lower()] = name


_register_llms()
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)

OPTIMIZER_STATE_BYTES_PER_PARAM = {"SGD": 4, "Adam": 8, "AdamW": 8}


def canonical_name(name: str) -> str:
    """Canonical zoo name for a name or alias (``resnet-50``, ``bert_base``, ``vit_b_16``,
    ``Llama-3-8B``, a Hugging Face repository such as ``meta-llama/Meta-Llama-3-8B``).

    Raises:
        SriftError: for an unknown model, listing the known ones.
    """
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    # A repository id's organisation does not change the model (mosaicml/mpt-1b is mpt-1b).
    for candidate in (key, key.rsplit("/", 1)[-1]) if "/" in key else (key,):
        found = _lookup(candidate)
        if found is not None:
            return found
    near = closest(name, list(MODELS))
    hint = f"did you mean {', '.join(near)}? " if near else ""
    raise SriftError(
        f"unknown model '{name}'.",
        f"{hint}Built-in models: {', '.join(MODEL_NAMES)}; or profile your own script with `srift profile` and pass --profile.",
    )


def _lookup(key: str) -> str | None:
    if key in MODELS:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    squashed = key.replace("-", "")
    for known in MODELS:
        if known.replace("-", "") == squashed:
            return known
    for alias, known in _ALIASES.items():
        if alias.replace("-", "") == squashed:
            return known
    return None


def llm_arch(name: str) -> llm.DecoderArch:
    """The architecture of a zoo LLM (any name or alias).

    Raises:
        SriftError: for an unknown model or one that is not a decoder LLM.
    """
    key = canonical_name(name)
    if not MODELS[key].llm:
        raise SriftError(f"'{key}' is not a decoder LLM of the zoo.",
                         f"decoder LLMs: {', '.join(n for n, m in MODELS.items() if m.llm)}.")
    return llm.zoo_llms()[key].arch


def load_builtin_profile(name: str, batch_size: int | None = None, seq_len: int | None = None,
                         precision: str = "fp32") -> Profile:
    """The structural profile of a zoo model at a batch size and sequence length.

    Torch-free: reads the shipped profiles/<name>.yaml and rescales it (at its own precision), or,
    for a decoder LLM, builds the analytic profile at ``precision`` (default batch and sequence
    length: the ModelInfo's).

    Raises:
        SriftError: for an unknown model, a missing profile file, or a seq_len on an image model.
    """
    key = canonical_name(name)
    info = MODELS[key]
    if info.llm:
        return llm.decoder_profile(llm.zoo_llms()[key].arch,
                                   batch_size=info.batch_size if batch_size is None else batch_size,
                                   seq_len=info.seq_len if seq_len is None else seq_len, precision=precision)
    path = profiles_dir() / f"{key}.yaml"
    if not path.is_file():
        raise SriftError(f"the shipped profile of '{key}' is missing ({path}).",
                         "reinstall srift-planner, or run `python scripts/make_zoo_profiles.py`.")
    if seq_len is not None and MODELS[key].kind != "sequence":
        raise SriftError(f"'{key}' is an image model: --seq-len does not apply.", "drop --seq-len.")
    return _shipped_profile(path).rescale(batch_size=batch_size, seq_len=seq_len)


SHIPPED_DOCUMENTS_CACHED = 64  # parsed shipped profile files kept per process (the zoo ships a dozen)
_SHIPPED: BoundedCache[tuple[str, int, int], Any] = BoundedCache(SHIPPED_DOCUMENTS_CACHED)


def _shipped_profile(path: Path) -> Profile:
    """The profile in a shipped file, its YAML parsed once per process (parsing is most of a load,
    and a search, a validation or a test session reads the same files again and again). Each call
    builds a new Profile, so a caller may change its own; the file's size and modification time
    are in the key, so a rewritten file is read again."""
    st = path.stat()
    doc = _SHIPPED.get((str(path), st.st_mtime_ns, st.st_size), lambda: read_yaml(path, "profile"))
    return Profile.from_dict(doc, source=str(path))


"""Where srift's bundled data lives (configs/ and profiles/), and the user's cache folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _data_root() -> Path:
    # A checkout or editable install keeps configs/ beside the package; a wheel install puts them
    # under <prefix>/share/srift (pyproject data-files). SRIFT_HOME overrides both.
    env = os.environ.get("SRIFT_HOME")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[1]
    if (repo / "configs").is_dir():
        return repo
    return Path(sys.prefix) / "share" / "srift"


def configs_dir() -> Path:
    """The bundled configs/ folder (gpus.yaml, aws/, clusters/, fitted model parameters)."""
    return _data_root() / "configs"


def profiles_dir() -> Path:
    """The bundled profiles/ folder (structural profiles of the zoo models)."""
    return _data_root() / "profiles"


def cache_dir() -> Path:
    """The user's cache folder (refreshed catalog), ``$SRIFT_CACHE_DIR`` or ``~/.cache/srift``."""
    env = os.environ.get("SRIFT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "srift"

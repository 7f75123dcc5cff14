"""Files: atomic writes, safe YAML/JSON reads, srift's bundled data folders and the user's cache.

Every file srift writes goes through ``atomic_open`` (a temporary file beside the target, then a
rename), so no half-written file is ever left behind; every YAML it reads goes through the safe
loader.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from srift.errors import SriftError

PathLike = str | os.PathLike[str]


# ---- writing ------------------------------------------------------------------------------------
@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` (``mode`` ``"w"`` for text, ``"wb"`` for bytes);
    on a clean exit it is flushed to disk and renamed over ``path``, on an error removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_open(path) as fh:
        fh.write(text)
    return Path(path)


def write_yaml(path: PathLike, data: Any) -> Path:
    """Write ``data`` as YAML atomically (block style, keys in insertion order)."""
    return atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, default_flow_style=False))


def write_json(path: PathLike, data: Any) -> Path:
    """Write ``data`` as indented JSON atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2) + "\n")


# ---- reading ------------------------------------------------------------------------------------
def read_yaml(path: PathLike, what: str = "file") -> Any:
    """Read a YAML (or JSON) file with the safe loader; raise SriftError on a missing or bad file."""
    p = Path(path)
    if not p.is_file():
        raise SriftError(f"{what} '{p}' does not exist.", "check the path, or create the file first.")
    try:
        # The C loader is the same safe loader, several times faster (profiles have hundreds of layers).
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(p.read_text(encoding="utf-8"))
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SriftError(f"{what} '{p}' is not valid YAML{where}.", "fix the syntax of the file.") from exc
    except UnicodeDecodeError as exc:
        raise SriftError(f"{what} '{p}' is not a text file.", "pass a YAML file.") from exc


def read_json(path: PathLike, what: str, hint: str) -> Any:
    """Read a JSON file; raise SriftError (``what`` is missing / not valid JSON, then ``hint``)."""
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SriftError(f"{what} '{p}' does not exist.", hint) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SriftError(f"{what} '{p}' is not valid JSON.", hint) from None


# ---- where things are ---------------------------------------------------------------------------
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

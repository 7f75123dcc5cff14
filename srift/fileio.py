"""Atomic file writes and safe YAML/JSON reads, so no half-written file is ever left behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from srift.errors import SriftError


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically: a temp file in the same folder, then rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return target


def write_yaml(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as YAML atomically (block style, keys in insertion order)."""
    return atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, default_flow_style=False))


def write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as indented JSON atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def read_yaml(path: str | os.PathLike[str], what: str = "file") -> Any:
    """Read a YAML (or JSON) file with ``yaml.safe_load``; raise SriftError on a missing or bad file."""
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


def read_json(path: str | os.PathLike[str], what: str, hint: str) -> Any:
    """Read a JSON file; raise SriftError (``what`` is missing / not valid JSON, then ``hint``)."""
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SriftError(f"{what} '{p}' does not exist.", hint) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SriftError(f"{what} '{p}' is not valid JSON.", hint) from None

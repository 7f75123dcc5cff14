"""Files: atomic writes, safe and bounded YAML/JSON reads, names, srift's bundled data folders and
the user's cache.

Every file srift writes goes through ``atomic_open`` (a temporary file beside the target, then a
rename), so no half-written file is ever left behind. Every file it reads goes through
``input_file`` (a folder, a device, a pipe, an unreadable or oversized file is named as such), and
every YAML document through ``load_yaml``, the safe loader behind a size check that refuses
alias bombs and deep nesting before anything is built. Names that become file names pass
``check_name``: a name is never a path.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from srift.bounds import MAX_INPUT_BYTES, MAX_NAME_CHARS, MAX_NESTING, MAX_YAML_NODES, shown
from srift.errors import SriftError

PathLike = str | os.PathLike[str]


# ---- writing ------------------------------------------------------------------------------------
@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w", overwrite: bool = True) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` (``mode`` ``"w"`` for text, ``"wb"`` for bytes);
    on a clean exit it is flushed to disk and renamed over ``path``, on an error removed.

    Readers see the old file or the complete new one, never a part: a process killed at any
    point leaves at most a ``.NAME.*.tmp`` beside the target. With ``overwrite=False`` the new
    file is linked in only where no file is (atomically: a file created meanwhile is kept).

    Raises:
        FileExistsError: with ``overwrite=False``, when ``path`` exists (nothing is written).
        SriftError: when the folder cannot be made or written.
    """
    target = Path(path)
    if target.is_dir():
        raise SriftError(f"cannot write '{_show(target)}': it is a folder.", "pass the path of a file to write.")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:  # a parent that is a file or a device, a read-only or full disk
        above = next((p for p in target.parents if os.path.lexists(p)), None)
        why = f"'{above}' is not a folder" if above is not None and not above.is_dir() else (exc.strerror or type(exc).__name__)
        raise SriftError(f"cannot write '{_show(target)}': {why}.", "pass a path in a folder you can write.") from None
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual permissions
        if overwrite:
            os.replace(tmp, target)
        else:
            _link_new(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _link_new(tmp: str, target: Path) -> None:
    """Put ``tmp`` at ``target`` only where nothing is (link, then drop the temporary name)."""
    try:
        os.link(tmp, target)  # fails when target exists: no window where another file is replaced
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then rename
        if os.path.lexists(target):
            raise FileExistsError(str(target)) from None
        os.replace(tmp, target)
        return
    os.unlink(tmp)


def _fsync_dir(folder: Path) -> None:
    # The rename is durable only once the folder's entry is on disk.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def output_file(path: PathLike, what: str, overwrite: bool, hint: str) -> Path:
    """``path`` when srift may write it: not a folder, not an existing file unless ``overwrite``,
    in a folder that exists or can be made. Checked before the work that produces it, so a long
    run does not end in a refusal to write; the write itself stays atomic (``atomic_open``).

    Raises:
        SriftError: naming ``what`` and the path (``hint`` says how to choose another path or
            overwrite).
    """
    p = Path(path)
    if p.is_dir():
        raise SriftError(f"{what} '{p}' is a folder.", "pass a file name, e.g. " + str(p / "profile.yaml") + ".")
    if os.path.lexists(p) and not overwrite:
        raise SriftError(f"{what} '{p}' already exists; srift does not replace it unasked.", hint)
    if os.path.lexists(p) and not p.is_file():
        raise SriftError(f"{what} '{p}' exists and is not a regular file.", "pass another path.")
    folder = p.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise SriftError(f"{what} '{p}' cannot be written: '{folder}' is a file, not a folder.", "pass another path.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SriftError(f"{what} '{p}' cannot be written: permission denied on '{folder}'.", "pass a path in a folder you can write.")
    return p


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def check_name(name: str, what: str = "--name") -> str:
    """``name`` when it is a plain file name: letters, digits and ``. _ + -``, starting with a
    letter or digit, at most MAX_NAME_CHARS characters. Names become file names
    (``profiles/<name>.yaml``): a name is never a path, so it cannot leave its folder.

    Raises:
        SriftError: for anything else, with the rule.
    """
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > MAX_NAME_CHARS:
        raise SriftError(f"{what} {shown(name)} is not a plain name.",
                         f"use letters, digits and . _ + - (starting with a letter or digit, at most {MAX_NAME_CHARS} "
                         "characters); to write elsewhere, pass -o PATH.")
    return name


def name_from(text: str, fallback: str = "profile") -> str:
    """A plain name (see ``check_name``) made from ``text`` (a script's file name): other characters
    become ``-``; ``fallback`` when nothing is left."""
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).lstrip("._+-")[:MAX_NAME_CHARS]
    return name or fallback


def file_in(folder: PathLike, name: str, suffix: str) -> Path:
    """``folder/<name><suffix>`` for a name ``check_name`` accepts, checked to lie in ``folder``."""
    base = Path(folder)
    path = base / f"{check_name(name)}{suffix}"
    if path.resolve().parent != base.resolve():  # cannot happen for a plain name; kept as the guarantee
        raise SriftError(f"name {shown(name)} leaves the folder '{base}'.", "use a plain name.")
    return path


def atomic_write_text(path: PathLike, text: str, overwrite: bool = True) -> Path:
    """Write ``text`` to ``path`` atomically (see ``atomic_open``)."""
    with atomic_open(path, overwrite=overwrite) as fh:
        fh.write(text)
    return Path(path)


def write_yaml(path: PathLike, data: Any, overwrite: bool = True) -> Path:
    """Write ``data`` as YAML atomically (block style, keys in insertion order); see ``atomic_open``."""
    return atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, default_flow_style=False), overwrite)


def write_json(path: PathLike, data: Any) -> Path:
    """Write ``data`` as indented JSON atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2) + "\n")


# ---- reading ------------------------------------------------------------------------------------
def input_file(path: PathLike, what: str, max_bytes: int = MAX_INPUT_BYTES) -> Path:
    """``path`` when it is a regular file srift can read and not larger than ``max_bytes``.

    Every reader of a user's file goes through this first, so a wrong path says what it is: missing,
    a folder, a device or a pipe (which ``open`` would read forever or block on), unreadable, or
    too large.

    Raises:
        SriftError: naming ``what`` and the path, and what is wrong with it.
    """
    p = Path(path)
    try:
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise SriftError(f"{what} '{_show(p)}' does not exist.", "check the path, or create the file first.") from None
    except PermissionError:
        raise SriftError(f"{what} '{_show(p)}' cannot be read: permission denied on its folder.",
                         "check the folder's permissions, or copy the file somewhere readable.") from None
    except ValueError:  # a NUL byte in the path
        raise SriftError(f"{what} {shown(str(p))} is not a valid path.", "pass a file path.") from None
    except OSError as exc:  # a symlink loop, a name too long, an I/O error
        raise SriftError(f"{what} '{_show(p)}' cannot be read ({exc.strerror or type(exc).__name__}).", "check the path.") from None
    if stat.S_ISDIR(st.st_mode):
        raise SriftError(f"{what} '{_show(p)}' is a folder, not a file.", "pass the path of a file in it.")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a pipe" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise SriftError(f"{what} '{_show(p)}' is {kind}, not a regular file.", "pass the path of a file saved on disk.")
    if st.st_size > max_bytes:
        raise SriftError(f"{what} '{_show(p)}' is {st.st_size / 2**20:,.1f} MiB, more than the {max_bytes / 2**20:,.0f} MiB srift reads.",
                         "check that this is the right file.")
    if not os.access(p, os.R_OK):
        raise SriftError(f"{what} '{_show(p)}' cannot be read: permission denied.", "check the file's permissions (ls -l).")
    return p


def read_text(path: PathLike, what: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a file checked by ``input_file``.

    Raises:
        SriftError: for a path ``input_file`` refuses, an I/O error, or bytes that are not UTF-8 text.
    """
    p = input_file(path, what, max_bytes)
    try:
        data = p.read_bytes()
    except PermissionError:
        raise SriftError(f"{what} '{_show(p)}' cannot be read: permission denied.", "check the file's permissions (ls -l).") from None
    except OSError as exc:
        raise SriftError(f"{what} '{_show(p)}' cannot be read ({exc.strerror or type(exc).__name__}).", "check the file.") from None
    if len(data) > max_bytes:  # it grew since the check
        raise SriftError(f"{what} '{_show(p)}' is more than the {max_bytes / 2**20:,.0f} MiB srift reads.", "check that this is the right file.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SriftError(f"{what} '{_show(p)}' is not a text file (not UTF-8).", "pass the text file srift expects.") from None


def read_yaml(path: PathLike, what: str = "file") -> Any:
    """Read a YAML (or JSON) file with the bounded safe loader (``load_yaml``).

    Raises:
        SriftError: for a path ``input_file`` refuses, bad YAML, or a document over the bounds.
    """
    return load_yaml(read_text(path, what), f"{what} '{_show(path)}'")


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML text with the safe loader, refusing by size before anything is built.

    A first pass over the parser's events (libyaml keeps its own stack: no recursion) counts the
    nodes the document expands to, an alias counting as the whole of its anchor every time it is
    used, and the nesting depth. A document over MAX_YAML_NODES (a "billion laughs" of nested
    aliases) or MAX_NESTING (which would exhaust the composer's stack) is refused there; only
    then is it composed and constructed.

    Raises:
        SriftError: naming ``source``, for invalid YAML or a document over the bounds.
    """
    try:
        _check_yaml_size(text, source)
        loader = _SafeLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SriftError(f"{source} is not valid YAML{where}.", "fix the syntax of the file.") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # constructors on odd scalars
        raise SriftError(f"{source} is not valid YAML ({shown(str(exc))}).", "fix the syntax of the file.") from None


# The C loader is the same safe loader, several times faster (profiles have hundreds of layers).
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_COLLECTION_START = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_COLLECTION_END = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _yaml_events(text: str, fast: bool = True) -> Iterator[Any]:
    parser: Any = None
    if fast:
        try:
            from yaml._yaml import CParser  # libyaml

            parser = CParser(text)
        except ImportError:
            pass
    if parser is None:
        parser = yaml.SafeLoader(text)
    try:
        while True:
            event = parser.get_event()
            if event is None:
                return
            yield event
    finally:
        parser.dispose()


def _check_yaml_size(text: str, source: str) -> None:
    """Refuse a document that expands to more than MAX_YAML_NODES nodes or nests deeper than MAX_NESTING.

    libyaml has limits of its own (PyYAML 6.0.4 stops at its own nesting depth while scanning, before
    the first event): when it refuses, the check runs again on PyYAML's pure-Python parser, which keeps
    its stack in a list, so srift's bounds and words decide, whichever libyaml a machine has.
    """
    try:
        _check_yaml_events(_yaml_events(text), source)
    except yaml.YAMLError:
        _check_yaml_events(_yaml_events(text, fast=False), source)


def _check_yaml_events(events: Iterator[Any], source: str) -> None:
    anchors: dict[str, int] = {}
    open_: list[tuple[str | None, int]] = [(None, 0)]  # (anchor, nodes so far) of each open collection
    for event in events:
        if isinstance(event, yaml.AliasEvent) and any(event.anchor == a for a, _ in open_):
            raise SriftError(f"{source} has an alias (*{shown(event.anchor, 30)}) inside the value it names, "
                             "a document that contains itself.", "write the repeated part out.")
        if isinstance(event, _COLLECTION_START):
            open_.append((event.anchor, 1))
            if len(open_) - 1 > MAX_NESTING:
                raise SriftError(f"{source} nests deeper than {MAX_NESTING} levels, more than srift reads.",
                                 "check that this is the right file.")
            continue
        if isinstance(event, _COLLECTION_END):
            anchor, size = open_.pop()
        elif isinstance(event, yaml.AliasEvent):
            anchor, size = None, anchors.get(event.anchor or "", 1)
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
        else:  # stream and document marks
            continue
        if anchor is not None:
            anchors[anchor] = size
        parent_anchor, parent_size = open_[-1]
        total = parent_size + size
        if total > MAX_YAML_NODES:
            raise SriftError(f"{source} expands to more than {MAX_YAML_NODES:,} values (aliases counted at every use), "
                             "more than srift reads.", "check that this is the right file; write repeated parts out.")
        open_[-1] = (parent_anchor, total)


def read_json(path: PathLike, what: str, hint: str) -> Any:
    """Read a JSON file checked by ``input_file``; raise SriftError (``what`` is missing / not
    valid JSON / nested too deep, then ``hint``). NaN and Infinity, which are not JSON, are refused."""
    p = Path(path)
    text = read_text(p, what)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (json.JSONDecodeError, ValueError):
        raise SriftError(f"{what} '{_show(p)}' is not valid JSON.", hint) from None
    except RecursionError:
        raise SriftError(f"{what} '{_show(p)}' nests deeper than srift reads.", hint) from None


def _show(path: PathLike) -> str:
    """A path for a message, its middle cut when it is very long."""
    text = str(path)
    return text if len(text) <= 160 else f"{text[:60]}...{text[-80:]}"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


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

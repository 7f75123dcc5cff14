"""Files: safe and bounded YAML/JSON reads, names, srift's bundled data folders and the user's cache.

Every file srift writes goes through srift/outputs.py (one policy for streams, links and modes;
atomic writes), whose functions are imported here too for the callers that read and write. Every
file it reads goes through
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from srift.bounds import MAX_INPUT_BYTES, MAX_NAME_CHARS, MAX_NESTING, MAX_YAML_NODES, shown
from srift.errors import SriftError
from srift.outputs import (  # noqa: F401 (re-exported: the writers' one module is srift.outputs)
    STDOUT, PathLike, atomic_open, atomic_write_many, atomic_write_text, check_outputs, output_file, stream_of,
    writable_target, write_json, write_yaml,
)
from srift.text import short_path as _show


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def check_name(name: str, what: str = "--name") -> str:
    """``name`` when it is a plain file name: letters, digits and ``. _ + -``, starting with a
    letter or digit, at most MAX_NAME_CHARS characters. Names become file names
    (``profiles/<name>.yaml``): a name is never a path, so it cannot leave its folder.

    Raises:
        SriftError: for anything else, with the rule.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > MAX_NAME_CHARS:
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


def read_yaml(path: PathLike, what: str = "file", max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """Read a YAML (or JSON) file of at most ``max_bytes`` (refused by its size before it is read)
    with the bounded safe loader (``load_yaml``).

    Raises:
        SriftError: for a path ``input_file`` refuses, bad YAML, or a document over the bounds.
    """
    return load_yaml(read_text(path, what, max_bytes), f"{what} '{_show(path)}'")


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
    except YAMLRefusal as exc:
        raise SriftError(f"{source} {exc.message}", exc.hint) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SriftError(f"{source} is not valid YAML{where}.", "fix the syntax of the file.") from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # constructors on odd scalars
        raise SriftError(f"{source} is not valid YAML ({shown(str(exc))}).", "fix the syntax of the file.") from None


class YAMLRefusal(SriftError):
    """A document the strict loader refuses: a duplicate key, or a plain value YAML 1.1 reads
    differently from YAML 1.2 (``load_yaml`` names the file)."""


class _StrictConstructor(yaml.constructor.SafeConstructor):
    """The safe constructor, strict where PyYAML (YAML 1.1) silently surprises.

    * A key given twice in one mapping is refused with both lines (PyYAML keeps the last, so
      ``limits: {max_cost_usd: 0.5, max_cost_usd: 1000000}`` would pass a CI gate at $1,000,000).
    * A plain value that YAML 1.1 reads as something else than YAML 1.2 is refused with its line:
      sexagesimal numbers (``1:30`` is 90), integers with a leading zero (``032`` is octal 26),
      the booleans ``yes/no/on/off``. Quoted, each is the text it shows. (``1_000`` and ``0b11``
      stay the numbers they were meant to be.)
    * A plain date (``2026-07-20``) stays the text it is, as in YAML 1.2.
    """

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue  # refused by the base constructor below, as an unhashable key
                line = key_node.start_mark.line + 1
                if key in first_line and type(key) is type(next(k for k in first_line if k == key)):
                    where = f"on line {line}" if first_line[key] == line else f"at lines {first_line[key]} and {line}"
                    raise YAMLRefusal(f"has the key {shown(str(key), 60)} twice, {where} (YAML would keep only the last one).",
                                      "remove one of them.")
                first_line.setdefault(key, line)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_bool(self, node: Any) -> Any:
        value = self.construct_scalar(node)
        if value.lower() in ("yes", "no", "on", "off"):
            _surprise(node, f"'{value}' is a boolean in YAML 1.1 and text in YAML 1.2",
                      "write true or false, or quote it for text.")
        return super().construct_yaml_bool(node)

    def construct_yaml_int(self, node: Any) -> Any:
        value = super().construct_yaml_int(node)
        _check_number(node, self.construct_scalar(node), value, integer=True)
        return value

    def construct_yaml_float(self, node: Any) -> Any:
        value = super().construct_yaml_float(node)
        _check_number(node, self.construct_scalar(node), value, integer=False)
        return value

    def construct_yaml_timestamp(self, node: Any, values: Any = None) -> Any:
        return self.construct_scalar(node)  # YAML 1.2 has no timestamps: the text as written


_LEADING_ZERO = re.compile(r"^[-+]?0[0-9_]")


def _check_number(node: Any, text: str, value: Any, integer: bool) -> None:
    """Refuse a number YAML 1.1 and YAML 1.2 read differently (see ``_StrictConstructor``);
    ``value`` is what YAML 1.1 made of ``text``."""
    text = text.strip()
    if ":" in text:
        why, fix = "a base-60 number in YAML 1.1", "write the number itself (e.g. 1.5 for an hour and a half), or quote it for text."
    elif integer and _LEADING_ZERO.match(text):
        why, fix = "octal in YAML 1.1 and decimal in YAML 1.2", "write it without the leading zero."
    else:
        return
    _surprise(node, f"{shown(text, 40)} is {why}: PyYAML would read it as {shown(value, 40)}", fix)


def _surprise(node: Any, what: str, fix: str) -> None:
    raise YAMLRefusal(f"line {node.start_mark.line + 1}: {what}.", fix)


for _tag, _method in (("bool", _StrictConstructor.construct_yaml_bool), ("int", _StrictConstructor.construct_yaml_int),
                      ("float", _StrictConstructor.construct_yaml_float),
                      ("timestamp", _StrictConstructor.construct_yaml_timestamp)):
    _StrictConstructor.add_constructor(f"tag:yaml.org,2002:{_tag}", _method)  # type: ignore[type-var]


class _Resolver12(yaml.resolver.Resolver):
    """PyYAML's resolver, and YAML 1.2's exponents without a sign or a dot (``1e3``, ``1.5e3``: numbers, not text)."""


_Resolver12.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
                                  list("-+.0123456789"))


try:  # the C parser, several times faster (profiles have hundreds of layers)
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover (PyYAML without libyaml)
    from yaml.composer import Composer
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser, Composer):  # type: ignore[no-redef]
        def __init__(self, stream: Any) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)


class _SafeLoader(_Parser, _StrictConstructor, _Resolver12):
    """The safe loader with the strict constructor: the one loader of every YAML srift reads."""

    def __init__(self, stream: Any) -> None:
        _Parser.__init__(self, stream)
        _StrictConstructor.__init__(self)
        _Resolver12.__init__(self)
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
            aliased = " (aliases counted at every use)" if anchors else ""  # blame aliases only where there are some
            raise SriftError(f"{source} expands to more than {MAX_YAML_NODES:,} values{aliased}, more than srift reads.",
                             "check that this is the right file" + ("; write repeated parts out." if anchors else "."))
        open_[-1] = (parent_anchor, total)


def read_json(path: PathLike, what: str, hint: str) -> Any:
    """Read a JSON file checked by ``input_file``; raise SriftError (``what`` is missing / not
    valid JSON / nested too deep, then ``hint``). NaN and Infinity, which are not JSON, are refused, and so is a key
    given twice in one object."""
    p = Path(path)
    text = read_text(p, what)
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise SriftError(f"{what} '{_show(p)}' has the key {shown(exc.key, 60)} twice in one object "
                         "(JSON readers differ on which one counts).", "remove one of them.") from None
    except (json.JSONDecodeError, ValueError):
        raise SriftError(f"{what} '{_show(p)}' is not valid JSON.", hint) from None
    except RecursionError:
        raise SriftError(f"{what} '{_show(p)}' nests deeper than srift reads.", hint) from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# ---- where things are ---------------------------------------------------------------------------
def data_root() -> Path:
    """srift's data folder (``configs/``, ``profiles/``, ``examples/``): ``$SRIFT_HOME``, else the
    checkout (or editable install) beside the package, else wherever the installer's scheme put the
    wheel's data files (``installed_data_root``).

    Raises:
        SriftError: when ``SRIFT_HOME`` is set but has no configs/ folder.
    """
    env = os.environ.get("SRIFT_HOME")
    if env:
        try:
            usable = (Path(env) / "configs").is_dir()
        except (OSError, ValueError):  # a name too long, a NUL byte
            usable = False
        if not usable:
            raise SriftError(f"SRIFT_HOME {shown(env, 120)} is not a srift data folder (it has no configs/ folder).",
                             "unset SRIFT_HOME, or point it at a srift checkout or at <prefix>/share/srift of an install.")
        return Path(env)
    repo = Path(__file__).resolve().parents[1]
    if (repo / "configs").is_dir():
        return repo
    return installed_data_root()


#: A file every install ships, relative to the data folder: it marks where the data folder is.
_MARKER = "configs/gpus.yaml"


def installed_data_root() -> Path:
    """Where an install (not editable) put ``share/srift`` (pyproject ``data-files``).

    The installer's scheme decides: ``<prefix>/share/srift`` for a venv or system install,
    ``<userbase>/share/srift`` for ``pip install --user``, anything for a distribution package or
    ``--prefix``/``--target``. The installed distribution's file list (its RECORD) names where the
    files went, so it is read first; the standard schemes are the fallback (an install without a
    RECORD). None found: ``<prefix>/share/srift``, which the caller's error names.
    """
    if not _INSTALLED_ROOT:
        _INSTALLED_ROOT.append(_find_installed_root())
    return _INSTALLED_ROOT[0]


_INSTALLED_ROOT: list[Path] = []  # installed_data_root's answer, found once


def _find_installed_root() -> Path:
    import sysconfig  # only an installed srift gets here
    from importlib import metadata

    from srift import DISTRIBUTION

    tail = "share/srift/" + _MARKER
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.as_posix().endswith(tail):
            found = Path(os.path.normpath(entry.locate())).parents[1]
            if (found / _MARKER).is_file():
                return found
    schemes = [sysconfig.get_paths()["data"]]
    with contextlib.suppress(KeyError, AttributeError):
        schemes.append(sysconfig.get_paths(scheme=sysconfig.get_preferred_scheme("user"))["data"])
    for data in schemes:
        if (Path(data, "share", "srift", _MARKER)).is_file():
            return Path(data, "share", "srift")
    return Path(sys.prefix) / "share" / "srift"


def configs_dir() -> Path:
    """The bundled configs/ folder (gpus.yaml, aws/, clusters/, fitted model parameters)."""
    return data_root() / "configs"


def profiles_dir() -> Path:
    """The bundled profiles/ folder (structural profiles of the zoo models)."""
    return data_root() / "profiles"


def cache_dir() -> Path:
    """The user's cache folder (refreshed catalog), ``$SRIFT_CACHE_DIR`` or ``~/.cache/srift``."""
    env = os.environ.get("SRIFT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "srift"

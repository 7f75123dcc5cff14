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
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from srift.bounds import MAX_INPUT_BYTES, MAX_NAME_CHARS, MAX_NESTING, MAX_YAML_NODES, shown
from srift.errors import SriftError

PathLike = str | os.PathLike[str]


# ---- writing ------------------------------------------------------------------------------------
#: The output path that means standard output.
STDOUT = "-"


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    return ("a folder" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


#: Output paths that name a stream, not a file: written as that stream (appended to what it is
#: redirected to), never opened, truncated or replaced. /proc/PID/fd/N of another process is a link,
#: and refused as one.
_STREAM_PATHS = {"/dev/stdout": 1, "/dev/stderr": 2, "/dev/stdin": 0}
_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd|proc/(?P<pid>[0-9]{1,10})/fd)/(?P<fd>[0-9]{1,9})", re.ASCII)


def stream_of(path: PathLike) -> int | None:
    """The file descriptor an output path names as a stream (``-``, ``/dev/stdout``: 1;
    ``/dev/stderr``: 2; ``/dev/fd/N``, ``/proc/self/fd/N``, ``/proc/<srift's pid>/fd/N``: N), else None."""
    text = os.fspath(path)
    if text == STDOUT:
        return 1
    if not isinstance(text, str) or "\0" in text or len(text) > 4096:
        return None
    norm = re.sub("^/+", "/", os.path.normpath(os.path.join(os.getcwd(), text)))
    if norm in _STREAM_PATHS:
        return _STREAM_PATHS[norm]
    m = _FD_PATH.fullmatch(norm)
    if m is not None and (m["pid"] is None or int(m["pid"]) == os.getpid()):
        return int(m["fd"])
    return None


def _check_stream(fd: int, path: PathLike, what: str) -> None:
    """Refuse a stream path whose descriptor is not open for writing."""
    import fcntl

    if (fd == 1 and sys.stdout is not None) or (fd == 2 and sys.stderr is not None):
        return
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        raise SriftError(f"{what} '{_show(path)}' names file descriptor {fd}, which is not open.",
                         "pass a file path, or - for standard output.") from None
    if flags & os.O_ACCMODE == os.O_RDONLY:
        raise SriftError(f"{what} '{_show(path)}' names file descriptor {fd}, which is open only for reading.",
                         "pass a file path, or - for standard output.")


def writable_target(path: PathLike, what: str = "output file") -> Path:
    """``path`` when srift may replace what is there: nothing, or a regular file with one name
    that the user owns (root: any owner; the replacement keeps the file's mode and owner).

    Refused, never written through or replaced (docs/limits.md, "What srift writes over"): a
    symbolic link (to anything: writing through it would write somewhere not named), a file with
    other hard links (replacing it would break them), a file another user owns, a device, a named
    pipe, a socket, a folder. Stream paths (``stream_of``) are checked by ``output_file``.

    Raises:
        SriftError: naming ``what``, the path and what is there.
    """
    p = Path(path)
    fix = f"pass the path of a regular file for {what}, or - for standard output."
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    except ValueError:  # a NUL byte
        raise SriftError(f"{what} {shown(str(p))} is not a valid path.", fix) from None
    except NotADirectoryError:
        above = next((a for a in p.parents if os.path.lexists(a) and not a.is_dir()), p.parent)
        raise SriftError(f"{what} '{_show(p)}' cannot be written: '{_show(above)}' is not a folder.", fix) from None
    except OSError as exc:  # a name too long, a symlink loop
        raise SriftError(f"{what} '{_show(p)}' cannot be written ({exc.strerror or type(exc).__name__}).", fix) from None
    if stat.S_ISLNK(st.st_mode):
        real = os.path.realpath(p)
        raise SriftError(f"{what} '{_show(p)}' is a symbolic link (to '{_show(real)}'); srift does not write through links.",
                         f"pass the file it points to ('{_show(real)}') if that is what you mean, or another path.")
    if not stat.S_ISREG(st.st_mode):
        raise SriftError(f"{what} '{_show(p)}' is {_kind(st.st_mode)}; srift does not replace it.", fix)
    if st.st_nlink > 1:
        raise SriftError(f"{what} '{_show(p)}' has {st.st_nlink - 1} other hard link(s); replacing it would break them.",
                         "pass another path, or copy the file and remove the extra links first.")
    if st.st_uid != os.geteuid() and os.geteuid() != 0:
        raise SriftError(f"{what} '{_show(p)}' belongs to another user; replacing it would make it yours.", "pass another path.")
    return p


def _keep_mode(tmp: str, target: Path) -> None:
    """Give the temporary file ``target``'s mode and owner when ``target`` is a file (else the usual
    0666 less the umask: mkstemp makes 0600 files)."""
    try:
        old = os.lstat(target)
    except OSError:
        old = None
    if old is None or not stat.S_ISREG(old.st_mode):
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        return
    if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(OSError):  # a group the user is not in stays the user's own
            os.chown(tmp, old.st_uid, old.st_gid)
    os.chmod(tmp, stat.S_IMODE(old.st_mode))  # after chown, which clears set-id bits


def _same_file(a: Path, b: PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def output_file(path: PathLike, what: str, overwrite: bool = True, hint: str = "",
                inputs: Iterable[PathLike | None] = ()) -> Path:
    """``path`` when srift may write it (``-``: standard output), checked before the work that
    produces it, so a long run does not end in a refusal to write; the write itself stays atomic
    (``atomic_open``). Refused: a target ``writable_target`` refuses, an existing file unless
    ``overwrite``, the same file as any of ``inputs`` (``check srift.yaml --out-file srift.yaml``),
    and a folder that cannot be made or written.

    Raises:
        SriftError: naming ``what`` and the path (``hint`` says how to choose another path or
            overwrite).
    """
    fd = stream_of(path)
    if fd is not None:
        _check_stream(fd, path, what)
        return Path(path)
    p = Path(path)
    if os.path.lexists(p) and not os.path.isdir(p) and not overwrite:
        raise SriftError(f"{what} '{_show(p)}' already exists; srift does not replace it unasked.", hint)
    real = writable_target(p, what)
    for source in inputs:
        if source is not None and str(source) != STDOUT and _same_file(real, source):
            raise SriftError(f"{what} '{_show(p)}' is the same file as the input '{_show(source)}'; writing it would destroy "
                             "the input.", "pass another path for the output.")
    folder = real.parent
    try:
        while not folder.exists():
            folder = folder.parent
    except OSError as exc:
        raise SriftError(f"{what} '{_show(p)}' cannot be written ({exc.strerror or type(exc).__name__}).", "pass another path.") from None
    if not folder.is_dir():
        raise SriftError(f"{what} '{_show(p)}' cannot be written: '{_show(folder)}' is {_kind(folder.stat().st_mode)}, not a folder.",
                         "pass another path.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SriftError(f"{what} '{_show(p)}' cannot be written: permission denied on '{_show(folder)}'.",
                         "pass a path in a folder you can write.")
    return p


def check_outputs(outputs: dict[str, PathLike | None], inputs: Iterable[PathLike | None] = ()) -> None:
    """Check every output a command was asked for (flag -> path or None) with ``output_file``, up
    front, and that no two of them are the same file or both standard output.

    Raises:
        SriftError: for the first output that cannot be written as asked.
    """
    given = {flag: path for flag, path in outputs.items() if path is not None and str(path) != ""}
    sources = list(inputs)
    seen: dict[str, str] = {}
    for flag, path in given.items():
        output_file(path, flag, inputs=sources)
        fd = stream_of(path)
        key = f"descriptor {fd}" if fd is not None else os.path.realpath(path)
        if key in seen:
            raise SriftError(f"{seen[key]} and {flag} both write '{_show(path)}'.", "pass a different path to each.")
        seen[key] = flag


@contextlib.contextmanager
def atomic_open(path: PathLike, mode: str = "w", overwrite: bool = True) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` (``mode`` ``"w"`` for text, ``"wb"`` for bytes);
    on a clean exit it is flushed to disk and renamed over ``path``, on an error removed.
    A stream path (``-``, ``/dev/stdout``, ``/dev/stderr``, ``/proc/self/fd/N``: ``stream_of``)
    is written as that stream, appended to wherever it points, never truncated or replaced.

    Readers see the old file or the complete new one, never a part: a process killed at any
    point leaves at most a ``.NAME.*.tmp`` beside the target. With ``overwrite=False`` the new
    file is linked in only where no file is (atomically: a file created meanwhile is kept). A
    target that is not a regular file with one name (a link, a hard-linked file, a device, a pipe,
    a folder) is refused (``writable_target``). A file replaced keeps its mode and owner; a new
    file gets the usual mode (0666 less the umask: 0644 under umask 022).

    Raises:
        FileExistsError: with ``overwrite=False``, when ``path`` exists (nothing is written).
        SriftError: when the target is refused, or its folder cannot be made or written (a full
            disk, a read-only file system, a name too long): nothing is left behind.
    """
    fd = stream_of(path)
    if fd is not None:
        with _stream(fd, path, binary="b" in mode) as out:
            yield out
        return
    target = writable_target(path)
    fix = "pass a path in a folder you can write, or free some space."
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:  # a parent that is a file or a device, a read-only or full disk
        above = next((p for p in target.parents if os.path.lexists(p)), None)
        why = f"'{above}' is not a folder" if above is not None and not above.is_dir() else (exc.strerror or type(exc).__name__)
        raise SriftError(f"cannot write '{_show(target)}': {why}.", "pass a path in a folder you can write.") from None
    try:
        try:
            with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            _keep_mode(tmp, target)
            if overwrite:
                os.replace(tmp, target)
            else:
                _link_new(tmp, target)
        except FileExistsError:
            raise
        except OSError as exc:  # ENOSPC, EFBIG, EIO, EROFS while writing or renaming
            raise SriftError(f"cannot write '{_show(target)}' ({exc.strerror or type(exc).__name__}); nothing was written "
                             "(a file that was there is unchanged).", fix) from None
        _fsync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _stream(fd: int, path: PathLike, binary: bool) -> Iterator[IO[Any]]:
    """The stream descriptor ``fd`` is (Python's own for 1 and 2, so the order of what is printed
    holds), written where it points (a ``>>`` log is appended to), flushed and not closed."""
    own = sys.stdout if fd == 1 else sys.stderr if fd == 2 else None
    if own is not None:
        own.flush()
        out = getattr(own, "buffer", None) if binary else own
        if out is not None:
            yield out
            out.flush()
            return
    _check_stream(fd, path, "output")
    with os.fdopen(os.dup(fd), "wb" if binary else "w", encoding=None if binary else "utf-8") as fh:
        yield fh


def atomic_write_many(files: dict[Path, bytes]) -> None:
    """Write several files all or none: each to a temporary file beside it, then every one renamed
    into place. A failure while writing (a full disk) removes the temporary files and leaves every
    target as it was. Targets are checked with ``writable_target``.

    Raises:
        SriftError: when a target is refused or a file cannot be written.
    """
    staged: list[tuple[str, Path]] = []
    made: list[Path] = []  # folders made here, removed again when the write fails
    try:
        for path, data in files.items():
            target = writable_target(path)
            try:
                missing = [a for a in [target.parent, *target.parent.parents] if not os.path.lexists(a)]
                target.parent.mkdir(parents=True, exist_ok=True)
                made += missing
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".tmp", dir=target.parent)
            except OSError as exc:
                raise SriftError(f"cannot write '{_show(target)}' ({exc.strerror or type(exc).__name__}); nothing was written.",
                                 "pass a folder you can write, or free some space.") from None
            staged.append((tmp, target))
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                _keep_mode(tmp, target)
            except OSError as exc:
                raise SriftError(f"cannot write '{_show(target)}' ({exc.strerror or type(exc).__name__}); nothing was written.",
                                 "free some space, or pass another folder.") from None
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for folder in sorted(made, key=lambda f: len(f.parts), reverse=True):  # each made here, empty again
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    for folder in {t.parent for _, t in staged}:
        _fsync_dir(folder)


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


def atomic_write_text(path: PathLike, text: str, overwrite: bool = True) -> Path:
    """Write ``text`` to ``path`` atomically (see ``atomic_open``)."""
    with atomic_open(path, overwrite=overwrite) as fh:
        fh.write(text)
    return Path(path)


def write_yaml(path: PathLike, data: Any, overwrite: bool = True) -> Path:
    """Write ``data`` as YAML atomically (block style, keys in insertion order); see ``atomic_open``."""
    text = yaml.dump(data, Dumper=_SafeDumper, sort_keys=False, default_flow_style=False)
    return atomic_write_text(path, text, overwrite)


# safe_dump's emitter in C where PyYAML has libyaml: the same text, several times faster (a profile
# has hundreds of layers).
_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


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


def _show(path: PathLike) -> str:
    """A path for a message, its middle cut when it is very long."""
    text = str(path)
    return text if len(text) <= 160 else f"{text[:60]}...{text[-80:]}"


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
def _data_root() -> Path:
    # A checkout or editable install keeps configs/ beside the package; a wheel install puts them
    # under <prefix>/share/srift (pyproject data-files). SRIFT_HOME overrides both.
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

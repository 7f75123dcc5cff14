"""Outputs: the one policy for every file and stream srift writes (docs/limits.md, "What srift
writes over").

* A stream path (``-``, ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``) is
  written as that stream, appended where it points, never reopened, truncated or replaced.
* A symbolic link, a file with other hard links, a file of another user (unless root), a device,
  a named pipe, a socket or a folder is refused, never written through or replaced.
* A file is written to a temporary file beside it, flushed and renamed over it (``atomic_open``),
  so no half-written file is ever left behind; a replaced file keeps its mode and owner.
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

from srift.bounds import shown
from srift.errors import SriftError
from srift.text import short_path as _show

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
    try:
        absolute = text if text.startswith("/") else os.path.join(os.getcwd(), text)
    except OSError:  # the working folder was removed: a relative path names no stream
        return None
    norm = re.sub("^/+", "/", os.path.normpath(absolute))
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

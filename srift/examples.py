"""The example files srift ships (cluster files, the CI workflow and its job file, training
scripts), and copying them out of an install (`srift examples [DIR]`).

From a checkout they are the repository's own files; after ``pip install`` (not editable) they
live under ``share/srift`` of the install's scheme (pyproject ``data-files``; ``files.data_root``
finds it). Both look the same from here:
paths relative to srift's data folder, the layout of the repository, so that the commands in the
README (``--cluster configs/clusters/ib-64.yaml``) work in the folder they are copied to.
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from srift import DISTRIBUTION
from srift.bounds import shown
from srift.errors import SriftError
from srift.files import data_root
from srift.outputs import PathLike, atomic_write_many, writable_target

#: What `srift examples` copies, as globs relative to the data folder.
EXAMPLE_GLOBS = ("configs/clusters/*.yaml", "configs/ci/*.yml", "configs/ci/*.yaml", "examples/*.py")
WORKFLOW = "configs/ci/srift-check.yml"
REPO_PLACEHOLDER, REF_PLACEHOLDER = "https://github.com/OWNER/srift", "COMMIT_SHA"


def example_files() -> list[str]:
    """The shipped example files, relative to the data folder, sorted.

    Raises:
        SriftError: when none is found (a broken install).
    """
    root = data_root()
    found = sorted({p.relative_to(root).as_posix() for pattern in EXAMPLE_GLOBS for p in root.glob(pattern) if p.is_file()})
    if not found:
        raise SriftError(f"no example files under {root}: this srift install is incomplete.",
                         f"reinstall {DISTRIBUTION} (pip install --force-reinstall), or set SRIFT_HOME to a srift checkout.")
    return found


def bundled(path: PathLike) -> Path | None:
    """The shipped file a relative ``path`` names (``configs/clusters/ib-64.yaml``), when ``path``
    does not exist where it is looked for but srift ships it; else None."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return None
    try:
        shipped = example_files()
    except SriftError:
        return None
    return data_root() / p if p.as_posix() in shipped else None


def installed_from_git() -> tuple[str, str] | None:
    """(repository URL, commit) when srift was installed with ``pip install git+URL@REF``
    (pip records both in ``direct_url.json``, PEP 610); else None."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        info = json.loads(text or "{}")
    except json.JSONDecodeError:
        return None
    vcs = info.get("vcs_info") if isinstance(info, dict) else None
    if not isinstance(vcs, dict) or vcs.get("vcs") != "git" or not vcs.get("commit_id") or not info.get("url"):
        return None
    return str(info["url"]), str(vcs["commit_id"])


# What a pin may be: pip's ``git+URL@REF`` takes them, the workflow interpolates them into YAML and a
# shell line. A URL of a scheme git clones, without spaces, quotes, ``$`` or a second ``@``; a ref by
# git's own rules for a branch, tag or commit name (git check-ref-format, less its rare corners).
_REPO = re.compile(r"(?:https|ssh|git|file)://(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9._~%/:+-]+", re.ASCII)
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/+-]*", re.ASCII)
_PIN_LINE = re.compile(r"^(  SRIFT_(?:REPO|REF): ).*$", re.MULTILINE)


def check_pin(repo: str, ref: str) -> None:
    """Refuse a repository URL or a ref that is not one (and would become YAML keys or shell
    commands in the workflow: ``--ref 'v1*) touch pwned ;; *zz'``).

    Raises:
        SriftError: naming the flag and what it takes.
    """
    if len(repo) > 500 or not _REPO.fullmatch(repo):
        raise SriftError(f"--repo {shown(repo, 120)} is not a repository URL.",
                         "pass an https://, ssh://, git:// or file:// URL of letters, digits and ./:_~%+-, e.g. "
                         "--repo https://github.com/you/srift.")
    if len(ref) > 200 or not _REF.fullmatch(ref) or ".." in ref or "//" in ref or ref.endswith((".", "/", ".lock")):
        raise SriftError(f"--ref {shown(ref, 120)} is not a git commit, tag or branch name.",
                         "pass a commit hash or a tag or branch name of letters, digits and ._/+- (e.g. --ref v0.1.0).")


def pinned_workflow(text: str, repo: str, ref: str) -> str:
    """The workflow with ``SRIFT_REPO`` and ``SRIFT_REF`` set to ``repo`` and ``ref`` (checked by
    ``check_pin``), each a quoted YAML string; nothing else in the file changes.

    Raises:
        SriftError: for a pin ``check_pin`` refuses.
    """
    check_pin(repo, ref)
    values = {"SRIFT_REPO": repo, "SRIFT_REF": ref}
    return _PIN_LINE.sub(lambda m: m.group(1) + json.dumps(values[m.group(1).strip().rstrip(":")]), text)


@dataclass
class CopiedExamples:
    """What `srift examples` did.

    Attributes:
        dest: The folder copied to.
        written: Files written (relative to ``dest``).
        skipped: Files left alone because they exist (without ``force``).
        pinned: (repository, commit) filled into the workflow, or None when left for the user.
    """

    dest: Path
    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    pinned: tuple[str, str] | None = None


def copy_examples(dest: PathLike = ".", force: bool = False, pin: tuple[str, str] | None = None) -> CopiedExamples:
    """Copy the example files into ``dest`` with the repository's layout; existing files are kept
    unless ``force``. The workflow gets ``pin`` (repository, commit) in place of its placeholders,
    or the commit srift was installed from when it came from git.

    Every file is written or none is (a full disk leaves no partial copy); a target that is not
    a regular file, or a link leading out of ``dest``, refuses the whole copy.

    Raises:
        SriftError: when ``dest`` is a file, a target is refused, or the files cannot be written.
    """
    target = Path(dest)
    try:
        inside = target.resolve(strict=False)
        is_file = target.exists() and not target.is_dir()
    except (OSError, RuntimeError) as exc:  # a symbolic link loop (RuntimeError before Python 3.13), a name too long
        why = "a loop of symbolic links" if isinstance(exc, RuntimeError) or exc.errno == errno.ELOOP else (exc.strerror or "")
        raise SriftError(f"folder {shown(str(dest), 120)} cannot be used: {why}.", "name another folder.") from None
    if is_file:
        raise SriftError(f"'{target}' is a file, not a folder.", "name a folder (it is created when missing).")
    if pin is not None:
        check_pin(*pin)
    else:  # pip's record of a git install: pinned only when it passes the same check
        pin = installed_from_git()
        if pin is not None:
            try:
                check_pin(*pin)
            except SriftError:
                pin = None
    out = CopiedExamples(target, pinned=None)
    files: dict[Path, bytes] = {}
    for rel in example_files():
        to = target / rel
        if os.path.lexists(to) and not force:
            out.skipped.append(rel)
            continue
        real = writable_target(to, "example file")  # a link, a device, a pipe or a folder in the way is refused, never replaced
        try:
            leaves = not real.resolve().is_relative_to(inside)
        except (OSError, RuntimeError):  # a loop of links in a folder above
            raise SriftError(f"'{to}' cannot be written: a loop of symbolic links is in its path; nothing was copied.",
                             "remove the loop, or copy into another folder.") from None
        if leaves:  # a link (of the file or a folder above it) leading out of DIR
            raise SriftError(f"'{to}' leads out of '{target}' (a symbolic link), so srift does not write it; nothing was copied.",
                             "remove the link, or copy into another folder.")
        data = (data_root() / rel).read_bytes()
        if rel == WORKFLOW and pin is not None:
            data = pinned_workflow(data.decode("utf-8"), *pin).encode("utf-8")
            out.pinned = pin
        files[real] = data
        out.written.append(rel)
    atomic_write_many(files)  # all or none: a full disk leaves no partial copy
    return out

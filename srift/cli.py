"""The `srift` command line: the typer app, the commands it registers (srift/commands/), and the
one place a SriftError becomes ``Error: ...`` / ``To fix: ...`` with its exit code (2 for bad
input), without a traceback unless ``SRIFT_DEBUG=1``.

No command module imports torch at import time, so `srift --help`, recommend, predict, check and
catalog start fast on a machine without torch.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from typing import Any

import typer
from typer import Abort

try:  # recent typer carries its own click
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover (older typer uses click's)
    from click.exceptions import ClickException, UsageError  # type: ignore[assignment]

from srift import __version__, log
from srift.bounds import ascii_integer
from srift.errors import SriftError
from srift.text import inert

BROKEN_INSTALL: SriftError | None = None
try:
    from srift.commands import calibrate_cmd, catalog_cmd, check_cmd, examples_cmd, metavars, panels, predict_cmd, profile_cmd, recommend_cmd
except SriftError as _exc:  # srift's own data cannot be read (a wrong SRIFT_HOME, a broken install): main() says so
    BROKEN_INSTALL = _exc

app = typer.Typer(
    name="srift",
    help="Predict a PyTorch training job's speed and cost on cloud GPU configurations, and pick the best one.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"srift {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, show_default=False, help="More on stderr: -v progress lines, -vv debug lines."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only errors on stderr: no warnings (srift's and libraries')."),
) -> None:
    """srift: where to train your PyTorch job, and what it will cost."""
    log.configure(-1 if quiet else verbose)


if BROKEN_INSTALL is None:
    app.command("profile", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(profile_cmd.profile)
    app.command("predict")(predict_cmd.predict)
    app.command("recommend")(recommend_cmd.recommend)
    app.command("check")(check_cmd.check)
    app.command("examples")(examples_cmd.examples)

    catalog_app = typer.Typer(help="The GPU instance catalog of AWS, GCP, Lambda and Azure: list, gpus, show, refresh.",
                              no_args_is_help=True)
    catalog_app.command("list")(catalog_cmd.list_)
    catalog_app.command("gpus")(catalog_cmd.gpus)
    catalog_app.command("show")(catalog_cmd.show)
    catalog_app.command("refresh")(catalog_cmd.refresh)
    app.add_typer(catalog_app, name="catalog")

    calibrate_app = typer.Typer(help="Measure your own machines so predictions use real numbers.", no_args_is_help=True)
    calibrate_app.command("comm")(calibrate_cmd.comm)
    app.add_typer(calibrate_app, name="calibrate")


@functools.lru_cache(maxsize=1)
def command() -> Any:
    """The click command tree of the app, with the metavars of srift/commands/metavars.py and the
    help panels and examples of srift/commands/panels.py."""
    return panels.apply(metavars.apply(typer.main.get_command(app)))


# Below this terminal width rich's help table cuts long flag names (`--activation-chec…`):
# help then uses click's plain layout, which puts a long name on its own line instead.
RICH_HELP_MIN_COLUMNS = 120


def _fit_help(cmd: Any, columns: int) -> None:
    """Rich help tables at ``RICH_HELP_MIN_COLUMNS`` and wider, click's plain layout below."""
    default = cmd.__dict__.setdefault("_srift_markup", getattr(cmd, "rich_markup_mode", None))
    if hasattr(cmd, "rich_markup_mode"):
        cmd.rich_markup_mode = default if columns >= RICH_HELP_MIN_COLUMNS else None
    for sub in getattr(cmd, "commands", {}).values():
        _fit_help(sub, columns)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app; a SriftError or a usage error (bad flag, bad value) becomes
    one ``Error:`` line and one ``To fix:`` line with its exit code (the README's table: 0 done,
    1 a check's limit exceeded or nothing meets the limits, 2 bad input or an error, 130
    interrupted, 141 standard output closed by its reader)."""
    _standard_streams()
    _terminal_size_variables()
    args = sys.argv[1:] if argv is None else argv
    if BROKEN_INSTALL is not None:
        if args[:1] == ["--version"]:
            print(f"srift {__version__}")
            return 0
        return _error(BROKEN_INSTALL.message, BROKEN_INSTALL.hint, 2)
    try:
        code = _run(argv)
        if sys.stdout is not None:
            sys.stdout.flush()  # a full disk shows here, not as exit 120 at shutdown
        return code
    except BrokenPipeError:  # `srift ... | head`: the reader has what it wanted
        _silence_stdout()
        return 141
    except OSError as exc:  # standard output on a full disk, a dead terminal, a closed descriptor
        _silence_stdout()
        return _error(f"could not write the output ({exc.strerror or type(exc).__name__}).",
                      "free some space or write to another place (--out-file FILE), and run it again.", 2)


def _run(argv: list[str] | None) -> int:
    try:
        _fit_help(command(), shutil.get_terminal_size().columns)
        rv = command().main(args=argv, prog_name="srift", standalone_mode=False)
    except SriftError as exc:
        if os.environ.get("SRIFT_DEBUG") == "1":
            raise
        return _error(exc.message, exc.hint, exc.exit_code)
    except UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `srift` or `srift catalog` alone: the help, on stdout
            if exc.ctx is not None:
                print(exc.ctx.get_help())
            else:
                exc.show()
            return 0
        where = exc.ctx.command_path if exc.ctx is not None else "srift"
        return _error(exc.format_message(), f"see `{where} --help` for the options and their values.", 2)
    except ClickException as exc:
        return _error(exc.format_message(), "see `srift --help`.", exc.exit_code)
    except Abort:
        print("Interrupted.", file=sys.stderr)
        return 130
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    return rv if isinstance(rv, int) else 0


def _standard_streams() -> None:
    """Make the standard streams safe to write: a closed descriptor 0, 1 or 2 is opened on
    /dev/null (output the user discarded; and no file srift opens can land on it), and text that
    the terminal's encoding cannot show is replaced, not a crash."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (lives as long as the process)
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="replace")


def _terminal_size_variables() -> None:
    """Unset a ``COLUMNS`` or ``LINES`` that is not a whole number in ASCII digits (``²``), as if
    it were not set: rich reads them with ``int`` after ``str.isdigit``, which a superscript digit
    passes and ``int`` refuses (a traceback at the first line printed)."""
    for name in ("COLUMNS", "LINES"):
        if name in os.environ and not ascii_integer(os.environ[name]):
            del os.environ[name]


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


def _error(message: str, hint: str, code: int) -> int:
    """Print ``Error: message`` and ``To fix: hint``, each on one line and of bounded length."""
    print(f"Error: {_one_line(message)}", file=sys.stderr)
    if hint:
        print(f"To fix: {_one_line(hint)}", file=sys.stderr)
    return code


def _one_line(text: str, limit: int = 600) -> str:
    """One line for the terminal: escape sequences and other control characters from what the user
    or a file gave become spaces (``inert``, the one escaping of the terminal sink)."""
    return " ".join(inert(text, limit).split())


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()

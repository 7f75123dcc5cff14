"""The `srift` command line: the typer app, the commands it registers (srift/commands/), and the
one place a SriftError becomes ``Error: ...`` / ``To fix: ...`` with its exit code (2 for bad
input), without a traceback unless ``SRIFT_DEBUG=1``.

No command module imports torch at import time, so `srift --help`, recommend, predict, check and
catalog start fast on a machine without torch.
"""

from __future__ import annotations

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

from srift import __version__
from srift.commands import calibrate_cmd, catalog_cmd, check_cmd, examples_cmd, metavars, predict_cmd, profile_cmd, recommend_cmd
from srift.errors import SriftError

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
) -> None:
    """srift: where to train your PyTorch job, and what it will cost."""


app.command("profile", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(profile_cmd.profile)
app.command("predict")(predict_cmd.predict)
app.command("recommend")(recommend_cmd.recommend)
app.command("check")(check_cmd.check)
app.command("examples")(examples_cmd.examples)

catalog_app = typer.Typer(help="The GPU instance catalog of AWS, GCP, Lambda and Azure: list, gpus, show, refresh.", no_args_is_help=True)
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
    """The click command tree of the app, with the metavars of srift/commands/metavars.py."""
    return metavars.apply(typer.main.get_command(app))


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
    one ``Error:`` line and one ``To fix:`` line with its exit code (2 for bad input)."""
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


def _error(message: str, hint: str, code: int) -> int:
    """Print ``Error: message`` and ``To fix: hint``, each on one line and of bounded length."""
    print(f"Error: {_one_line(message)}", file=sys.stderr)
    if hint:
        print(f"To fix: {_one_line(hint)}", file=sys.stderr)
    return code


def _one_line(text: str, limit: int = 600) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()

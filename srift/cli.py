"""The `srift` command line: the typer app, the commands it registers (srift/commands/), and the
one place a SriftError becomes ``Error: ...`` / ``To fix: ...`` with its exit code (2 for bad
input), without a traceback unless ``SRIFT_DEBUG=1``.

No command module imports torch at import time, so `srift --help`, recommend, predict, check and
catalog start fast on a machine without torch.
"""

from __future__ import annotations

import functools
import os
import sys

from typing import Any

import typer

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


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app, turning SriftError into `Error:`/`To fix:` and its exit code."""
    try:
        command().main(args=argv, prog_name="srift", standalone_mode=True)
    except SriftError as exc:
        if os.environ.get("SRIFT_DEBUG") == "1":
            raise
        err = f"Error: {exc.message}"
        if exc.hint:
            err += f"\nTo fix: {exc.hint}"
        print(err, file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:  # typer/click exit codes (usage errors are 2)
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    return 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()

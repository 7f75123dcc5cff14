"""The `srift` command line: parse, call one function, render. No logic lives here.

Each command is defined in srift/commands/<name>.py and registered on the app below. None of
them imports torch at module level, so `srift --help`, recommend, predict, check and catalog start
fast on a machine without torch.
"""

from __future__ import annotations

import os
import sys

import typer

from srift import __version__
from srift.commands import calibrate, catalog, check, predict, profile, recommend
from srift.errors import SriftError

app = typer.Typer(
    name="srift",
    help="Predict a PyTorch training job's speed and cost on cloud GPU configurations, and pick the best one.",
    no_args_is_help=True,
    add_completion=False,
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


for _module in (profile, predict, recommend, check, catalog, calibrate):
    _module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app, turning SriftError into `Error:`/`To fix:` and exit 2."""
    try:
        app(args=argv, prog_name="srift", standalone_mode=True)
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

"""What ``--help`` shows for each option's value: names people recognise (``TYPE[:COUNT]``, ``FILE``,
``USD``, ``HOURS``, ``N``, ``NAME``, the words a choice takes) rather than Python types (``<str>``,
``<list[str]>``, ``<bool>``).

One table for every command, applied to the click command tree that typer builds (cli.py), so an
option spelled the same way reads the same everywhere. An option not in the table gets one from
its type (``N`` for integers, ``NUMBER``, ``TEXT``); flags show none.
"""

from __future__ import annotations

import typing
from typing import Any

from srift.api import GPU_SORTS
from srift.cluster import NETWORKS
from srift.job_options import JOB_OPTIONS
from srift.search.limits import OBJECTIVES

FORMATS = "table|json|markdown"
MAX_CHOICES_WIDTH = 48  # widest choice list shown as a metavar (an 80-column help keeps room for the option)

#: Option (its long name) or argument (its parameter name) -> metavar.
METAVARS: dict[str, str] = {
    # files
    "--profile": "FILE", "--cluster": "FILE", "--model-config": "FILE", "--plot": "FILE.png", "--skypilot": "FILE",
    "--out-file": "FILE", "--compare-to": "FILE", "--output": "FILE", "job_file": "JOB_FILE", "script": "SCRIPT", "dest": "DIR", "--repo": "URL", "--ref": "COMMIT",
    # what the cloud sells, and where
    "--instance": "TYPE[:COUNT]", "instance_type": "TYPE", "--gpu": "NAME", "--region": "REGION",
    "--infra": "CLOUD[/REGION]", "--model": "NAME", "--name": "NAME",
    # money and time
    "--budget": "USD", "--max-cost": "USD", "--max-usd-per-hour": "USD", "--deadline": "HOURS", "--max-hours": "HOURS",
    "--confidence": "P",
    # counts
    "--sizes": "BYTES,...",
    # vocabularies
    "--format": FORMATS, "--objective": "|".join(OBJECTIVES), "--backend": "gloo|nccl",
    "--network": "|".join(NETWORKS), "--sort": "|".join(GPU_SORTS),
    # the job's options: a vocabulary's words, a count written as a number (1e9) as N
    # (a vocabulary too long for one help line, such as --stack's ten names, shows NAME: its help lists them)
    **{o.flag: ("|".join(o.choices) if len("|".join(o.choices)) <= MAX_CHOICES_WIDTH else "NAME") if o.choices else "N"
       for o in JOB_OPTIONS if o.choices or o.scientific},
    # a text option: the shape of its value
    "--layout": "tp=T,pp=P,cp=C|auto",
}


def _value_kind(param: Any) -> str:
    """``int``, ``float`` or ``str``: what one value of the parameter is (typer 0.2x keeps the
    annotation; older typer hands click a param type)."""
    desc = getattr(param, "type_descriptor", None)
    if desc is not None:
        annotation = desc.annotation
        args = typing.get_args(annotation)
        kind = args[0] if typing.get_origin(annotation) in (list, tuple) and args else annotation
        return kind.__name__ if kind in (int, float) else "str"
    name = getattr(getattr(param, "type", None), "name", "")
    return {"integer": "int", "float": "float"}.get(name, "str")


def metavar_for(param: Any) -> str:
    """The metavar ``param`` (an option or argument of the click tree) shows: from the table, else
    from its type ("" for a flag)."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    for name in [o for o in param.opts if o.startswith("--")] + [param.name or ""]:
        if name in METAVARS:
            return METAVARS[name]
    return {"int": "N", "float": "NUMBER"}.get(_value_kind(param), "TEXT")


def _no_type_column(ctx: Any) -> None:
    return None


def apply(command: Any) -> Any:
    """Set the metavar of every option and argument of ``command`` (typer's click command tree)
    and of its subcommands that has none; returns ``command``."""
    for param in command.params:
        if param.metavar is None:
            param.metavar = metavar_for(param)
        if getattr(param, "param_type_name", "") == "argument" and hasattr(param, "display_type_rich"):
            # typer's argument panel prints the Python type (<str>) beside the name it already shows.
            param.display_type_rich = _no_type_column
    help_option = command.get_help_option

    def quiet_help_option(ctx: Any) -> Any:  # --help is a flag: no "<bool>"
        option = help_option(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option

    command.get_help_option = quiet_help_option
    for sub in getattr(command, "commands", {}).values():
        apply(sub)
    return command

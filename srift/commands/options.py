"""What the commands share when parsing flags: output formats, the options several take, and the
job's options (srift/job_options.py) as the flags of every command that takes a job."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

import typer

from srift.commands import complete
from srift.errors import SriftError
from srift.job_options import JOB_OPTIONS, SETTING, JobOption, build_job

FORMATS = ("table", "json", "markdown")


def check_format(fmt: str, allowed: tuple[str, ...] = ("table", "json")) -> str:
    """Validate a --format value."""
    if fmt not in allowed:
        raise SriftError(f"unknown format '{fmt}'.", f"use --format {' or '.join(allowed)}.")
    return fmt


# Options several commands take, declared once (typer reads these as the parameters' defaults).
MODEL = typer.Option(None, "--model", autocompletion=complete.models, help="Built-in model (resnet50, bert-base, gpt2, llama3-8b, ...).")
MODEL_CONFIG = typer.Option(None, "--model-config", help="A Hugging Face decoder config.json (Llama, Mistral, Qwen2, Nemotron, GPT-2; mixtures of experts: Mixtral, Qwen2/3-MoE, DeepSeek-V3, Llama 4, GPT-OSS): predict that model without its weights.")
PROFILES = typer.Option(None, "--profile", help="Profile file from `srift profile`; repeat it with the same job measured "
                                                "on other GPUs (each GPU type then uses its own).")
REGION = typer.Option(None, "--region", help="AWS region (= --infra aws/REGION).")
INFRA = typer.Option(None, "--infra", autocompletion=complete.infra, help="Clouds and regions, SkyPilot's spelling: aws (every region), aws/us-west-2, gcp,lambda.")
CONFIDENCE = typer.Option(0.9, "--confidence", help="Meet the deadline and the maximum cost at this quantile of the prediction (0.5-0.99).")


def whole(value: float | None, flag: str) -> int | None:
    """A count given as a number (``1e9``) as an integer.

    Raises:
        SriftError: for a count that is not a whole number of at least 1.
    """
    if value is None:
        return None
    if not (value >= 1 and float(value).is_integer()):
        raise SriftError(f"{flag} must be a whole number of at least 1, got {value:g}.", f"pass e.g. {flag} 1e9.")
    return int(value)


FORMAT = typer.Option("table", "--format", help="table, json or markdown.")
OUT_FILE = typer.Option(None, "--out-file", help="Also write the JSON document to FILE (whatever --format prints).")
SKYPILOT = typer.Option(None, "--skypilot", help="Write a SkyPilot task for the configuration to FILE (sky launch FILE).")
TORCHRUN = typer.Option(False, "--torchrun", help="Print the torchrun command of every node of the configuration.")


# ---- the job's options --------------------------------------------------------------------------
@dataclass(frozen=True)
class JobParameter:
    """The default of a command's job parameter: ``takes_job`` replaces that parameter by a flag per
    job option (at its place in ``--help``) and passes the command what the flags give.

    Attributes:
        length: Also the length options (epochs, samples, ...), not only the settings.
        as_values: Pass the given values by option name (for the job file's overrides, where a
            flag left out keeps the file's value) instead of the ``Job`` they build.
    """

    length: bool
    as_values: bool = False


# Typed Any, as typer.Option is: they stand in for what the command receives.
JOB: Any = JobParameter(length=False)  # job: Job = JOB
JOB_WITH_LENGTH: Any = JobParameter(length=True)  # job: Job = JOB_WITH_LENGTH
JOB_VALUES: Any = JobParameter(length=True, as_values=True)  # job_values: Mapping[str, Any] = JOB_VALUES

F = TypeVar("F", bound=Callable[..., Any])


def _typer_parameter(option: JobOption, given_only: bool) -> inspect.Parameter:
    """The typer parameter of one job option (default None when only given values count)."""
    default = None if given_only else option.default
    kind: Any = float if option.scientific else option.type
    decls = [f"{option.flag}/{option.negative_flag}"] if option.negative_flag else [option.flag]
    annotation = Optional[kind] if given_only or option.default is None else kind
    return inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Option(default, *decls, help=option.help))


def _value(option: JobOption, value: Any) -> Any:
    return whole(value, option.flag) if option.scientific else value


def takes_job(command: F) -> F:
    """``command`` with its job parameter (the one whose default is ``JOB``, ``JOB_WITH_LENGTH``
    or ``JOB_VALUES``) replaced by one typer option per job option of srift/job_options.py.

    The command is then called with that parameter set to the ``Job`` the flags build
    (``build_job``), or to the values given (option name -> value, the flags left out absent).
    """
    signature = inspect.signature(command)
    hints = typing.get_type_hints(command)
    slot = [p for p in signature.parameters.values() if isinstance(p.default, JobParameter)]
    if len(slot) != 1:
        raise TypeError(f"{command.__name__} needs exactly one parameter defaulting to JOB, JOB_WITH_LENGTH or JOB_VALUES.")
    target, spec = slot[0].name, slot[0].default
    options = [o for o in JOB_OPTIONS if spec.length or o.part == SETTING]
    declared = {d.split("/")[0] for p in signature.parameters.values() for d in (getattr(p.default, "param_decls", None) or ())}
    clash = sorted({o.name for o in JOB_OPTIONS if o.name in signature.parameters or o.flag in declared})
    if clash:  # a job option declared by hand would drift from the table
        raise TypeError(f"{command.__name__} declares job option(s) {', '.join(clash)}: add them to srift/job_options.py instead.")
    params: list[inspect.Parameter] = []
    for p in signature.parameters.values():
        if p.name == target:
            params += [_typer_parameter(o, spec.as_values) for o in options]
        else:
            params.append(p.replace(annotation=hints.get(p.name, p.annotation), kind=inspect.Parameter.KEYWORD_ONLY))

    def run(**kwargs: Any) -> Any:
        values = {o.name: _value(o, kwargs.pop(o.name)) for o in options}
        given = {k: v for k, v in values.items() if v is not None}
        kwargs[target] = given if spec.as_values else build_job(given)
        return command(**kwargs)

    run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(run, attr, getattr(command, attr))
    return typing.cast(F, run)


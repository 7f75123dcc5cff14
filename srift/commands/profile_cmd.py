"""`srift profile`: measure a training script, or make a structural profile of a zoo model."""

from __future__ import annotations

from typing import Optional

import typer

from srift import api
from srift.bounds import DEFAULT_PROFILE_TIMEOUT_S
from srift.errors import SriftError, one_of
from srift.job import PRECISIONS
from srift.report import profiling_view


def profile(
    ctx: typer.Context,
    script: Optional[str] = typer.Argument(None, help="Training script to run (its arguments go after `--`)."),
    model: Optional[str] = typer.Option(None, "--model", help="Zoo model name: make a structural profile instead."),
    warmup: int = typer.Option(5, "--warmup", help="Optimizer steps run before measuring (at least 1)."),
    iters: int = typer.Option(20, "--iters", help="Optimizer steps measured (in one process, then about as many of srift's own: its hooks' cost)."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Profile file (default profiles/<name>.yaml)."),
    name: Optional[str] = typer.Option(None, "--name", help="Profile name (default: script or model name)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Samples per optimizer step (default: detected)."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length (zoo transformer models)."),
    precision: str = typer.Option("fp32", "--precision", help=f"{one_of(PRECISIONS)} (zoo models)."),
    kfac: bool = typer.Option(False, "--kfac", help="Also time K-FAC's factor, inversion and preconditioning kernels (scripts)."),
    timeout: float = typer.Option(DEFAULT_PROFILE_TIMEOUT_S, "--timeout",
                                  help="Longest wait in seconds for the next optimizer step, the first included; then the "
                                       "script is stopped and nothing is written."),
    force: bool = typer.Option(False, "--force", help="Replace an existing profile file."),
) -> None:
    """Profile a training script (`srift profile train.py -- ARGS`) or a zoo model (`--model resnet50`)."""
    if (script is None) == (model is None):
        raise SriftError("give either a training script or --model NAME.",
                         "run `srift profile train.py -- ARGS` or `srift profile --model resnet50 --batch-size 32`.")
    if model is not None:
        if ctx.args:
            raise SriftError(f"unexpected arguments {' '.join(ctx.args)} with --model.", "script arguments only apply to a script.")
        if kfac:
            raise SriftError("--kfac times real kernels, so it needs a training script, not --model.",
                             "run `srift profile train.py --kfac -- ARGS`.")
        prof, path = api.profile_model(model, batch_size=batch_size, seq_len=seq_len, precision=precision, name=name,
                                       output=output, overwrite=force)
        profiling_view.show_model_profile(prof, path)
        return
    api.check_outputs({"-o": output}, inputs=[script])
    args = list(ctx.args)
    if args[:1] == ["--"]:
        args = args[1:]
    result = api.profile_script(script, args, warmup=warmup, iters=iters, output=output, name=name,  # type: ignore[arg-type]
                                batch_size=batch_size, kfac=kfac, timeout_s=timeout, overwrite=force)
    profiling_view.show_script_profile(result)

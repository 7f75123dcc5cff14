"""`srift profile`: measure a training script, or make a structural profile of a zoo model.

torch is imported only when the command runs, so the rest of the CLI starts fast without it.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from srift.errors import SriftError


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SriftError("`srift profile` needs PyTorch, which is not installed.",
                         "install the torch extra: pip install 'srift[torch]'.") from None


def register(app: typer.Typer) -> None:
    @app.command("profile", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def _cmd(
        ctx: typer.Context,
        script: Optional[str] = typer.Argument(None, help="Training script to run (its arguments go after `--`)."),
        model: Optional[str] = typer.Option(None, "--model", help="Zoo model name: make a structural profile instead."),
        warmup: int = typer.Option(5, "--warmup", help="Optimizer steps run before measuring (at least 1)."),
        iters: int = typer.Option(20, "--iters", help="Optimizer steps measured."),
        output: Optional[str] = typer.Option(None, "-o", "--output", help="Profile file (default profiles/<name>.yaml)."),
        name: Optional[str] = typer.Option(None, "--name", help="Profile name (default: script or model name)."),
        batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Samples per optimizer step (default: detected)."),
        seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length (zoo transformer models)."),
        precision: str = typer.Option("fp32", "--precision", help="fp32, tf32 or amp (zoo models)."),
        kfac: bool = typer.Option(False, "--kfac", help="Also time K-FAC's factor, inversion and preconditioning kernels (scripts)."),
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
            from srift.zoo import MODELS, canonical_name, structural_profile

            key = canonical_name(model)
            if not MODELS[key].llm:  # decoder LLMs are profiled by arithmetic, without torch
                _require_torch()
            prof = structural_profile(key, batch_size=batch_size, seq_len=seq_len, precision=precision)
            if name:
                prof.name = name
            path = prof.save(output or f"profiles/{name or key}.yaml")
            typer.echo(f"Wrote {path}: {prof.name}, {len(prof.layers)} layers, {prof.params:,} parameters, "
                       f"{(prof.fwd_flops + prof.bwd_flops) / 1e9:.1f} GFLOP per iteration at batch {prof.batch_size}.")
            return
        _require_torch()
        from srift.profiling.runner import profile_script

        args = [a for a in ctx.args]
        if args[:1] == ["--"]:
            args = args[1:]
        result = profile_script(script, args, warmup=warmup, iters=iters, output=output, name=name, batch_size=batch_size,
                                kfac=kfac)
        for w in result.warnings:
            print(f"Warning: {w}", file=sys.stderr)
        prof = result.profile
        if prof is None:  # a DDP rank other than 0: rank 0 writes
            return
        ph = prof.phases
        typer.echo(f"Wrote {result.path}: {prof.name}, {len(prof.layers)} layers, batch {prof.batch_size}, {prof.precision}, "
                   f"{prof.iterations} iterations, {ph.total_s * 1e3:.1f} ms/iteration "
                   f"(data {ph.data_s * 1e3:.1f}, forward {ph.forward_s * 1e3:.1f}, backward {ph.backward_s * 1e3:.1f}, "
                   f"optimizer {ph.optimizer_s * 1e3:.1f} ms).")

"""How ``--help`` groups each command's options into panels (the workload, the job, the cluster, the
search, output) and the examples it ends with.

One table for every command, applied to the click command tree that typer builds (cli.py) as the
metavars are: an option spelled the same way sits in the same panel everywhere. The job's options
(srift/job_options.py) take their panel from their part; an option in no panel stays under
"Options". Rich help shows the panels as boxes; the plain layout (a narrow terminal) as sections.
"""

from __future__ import annotations

import textwrap
import types
from typing import Any

from srift.job_options import JOB_OPTIONS, SETTING

WORKLOAD, JOB, LENGTH, CLUSTER, SEARCH, OUTPUT = (
    "What to train", "The job", "How long it trains", "The cluster", "The search and its limits", "Output",
)
#: Sections in the order plain help shows them; "Options" (anything else, --help) last.
ORDER = ("Arguments", WORKLOAD, JOB, LENGTH, CLUSTER, SEARCH, OUTPUT, "Options")

_BY_PANEL: dict[str, tuple[str, ...]] = {
    WORKLOAD: ("--model", "--profile", "--model-config"),
    CLUSTER: ("--instance", "--cluster", "--spot", "--placement-group", "--infra", "--region", "--gpu", "--include-unsupported"),
    SEARCH: ("--budget", "--deadline", "--max-cost", "--max-hours", "--max-usd-per-hour", "--confidence", "--objective", "--mixed",
             "--max-gpus", "--max-nodes", "--max-global-batch", "--top", "--diverse"),
    OUTPUT: ("--format", "--out-file", "--skypilot", "--torchrun", "--plot", "--compare-to", "--quiet", "-o", "--output", "--force"),
}
PANELS: dict[str, str] = {
    **{o.flag: JOB if o.part == SETTING else LENGTH for o in JOB_OPTIONS},
    **{flag: panel for panel, flags in _BY_PANEL.items() for flag in flags},
}

#: The examples each command's help ends with (two or three a user can paste).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "predict": (
        "srift predict --model resnet50 --instance g5.12xlarge:3 --precision amp",
        "srift predict --profile profiles/train.yaml --instance p4d.24xlarge:2",
        "srift predict --model llama3-70b --instance p5.48xlarge:4 --layout tp=8,pp=4 --seq-len 4096",
    ),
    "recommend": (
        "srift recommend --model resnet50 --budget 20",
        "srift recommend --profile profiles/train.yaml --epochs 90 --dataset-size 1281167 --deadline 24 --spot",
        "srift recommend --model llama3-8b --finetune qlora --tokens 5e7 --deadline 4",
    ),
    "check": (
        "srift check srift.yaml",
        "srift check srift.yaml --format markdown --compare-to base.json",
    ),
    "profile": (
        "srift profile train.py -- --epochs 1 --lr 0.1",
        "torchrun --nproc_per_node 2 --no-python srift profile train_ddp.py",
    ),
}


def panel_of(param: Any) -> str | None:
    """The panel of a click option (by its long name, else its first name); None: no panel."""
    for name in [o for o in param.opts if o.startswith("--")] + list(param.opts):
        if name in PANELS:
            return PANELS[name]
    return None


def epilog(name: str) -> str | None:
    """The examples that end ``srift NAME --help`` (None: that command has none)."""
    lines = EXAMPLES.get(name)
    return None if lines is None else "Examples:\n\n" + "\n\n".join(f"$ {line}" for line in lines)


def _grouped_options(self: Any, ctx: Any, formatter: Any) -> None:
    """Click's plain help, its options in the panels' sections instead of one list."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for param in self.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None:
            default = "Arguments" if getattr(param, "param_type_name", "") == "argument" else "Options"
            groups.setdefault(getattr(param, "rich_help_panel", None) or default, []).append(record)
    for panel in sorted(groups, key=lambda p: ORDER.index(p) if p in ORDER else len(ORDER)):
        with formatter.section(panel):
            formatter.write_dl(groups[panel])


def _plain_epilog(self: Any, ctx: Any, formatter: Any) -> None:
    """The examples one a line, as typed (click would rewrap them as a paragraph); one too wide for
    the terminal goes on over lines ending in a shell's backslash, so it still pastes."""
    if self.epilog:
        width = (formatter.width or 80) - 4
        lines = [" \\\n      ".join(textwrap.wrap(line.strip(), width, break_long_words=False, break_on_hyphens=False))
                 for line in self.epilog.split("\n\n")]
        formatter.write("\n" + "\n".join(f"  {line}" for line in lines) + "\n")


def apply(command: Any, name: str = "") -> Any:
    """Put every option of ``command`` and its subcommands in its panel and set each command's
    examples; returns ``command``."""
    for param in command.params:
        panel = panel_of(param) if getattr(param, "param_type_name", "") == "option" else None
        if panel is not None:
            param.rich_help_panel = panel
    if any(getattr(p, "rich_help_panel", None) for p in command.params):
        command.format_options = types.MethodType(_grouped_options, command)
    text = epilog(name)
    if text is not None and not command.epilog:
        command.epilog = text
        command.format_epilog = types.MethodType(_plain_epilog, command)
    for sub_name, sub in getattr(command, "commands", {}).items():
        apply(sub, sub_name)
    return command

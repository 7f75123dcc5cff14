"""Hand the chosen configuration to a launcher: a SkyPilot task file (``--skypilot FILE``) and the
torchrun command line of every node (``--torchrun``).

SkyPilot task (validated against SkyPilot 0.14.1's task schema and ``sky.Task.from_yaml``):
``resources`` names the instance type, its accelerators in SkyPilot's spelling (``A10G:4``, from
the catalog's ``accelerators`` column, which comes from SkyPilot's own catalog), ``use_spot`` and
``infra: CLOUD/REGION`` (SkyPilot 0.10 and later; older releases spelled it ``cloud:`` and
``region:``); ``num_nodes`` the node count. ``run`` starts torchrun on every node with the
rendezvous SkyPilot provides: ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NUM_GPUS_PER_NODE``,
``SKYPILOT_NODE_RANK``, and the first of ``SKYPILOT_NODE_IPS`` as the master. ``setup`` is the
user's (a comment shows where); the script is ``$TRAIN_SCRIPT`` (``sky launch --env``).

**EFA.** srift predicts an EFA instance (p4d, p5, ...) with every EFA interface. SkyPilot (0.14.1,
``sky/clouds/aws.py``) attaches EFA only when the task asks ``resources: network_tier: best`` (the
default tier gets none), and every interface only when the user's SkyPilot config has ``aws:
use_internal_ips: true`` (a task cannot set it); otherwise one. So a multi-node EFA task asks
``network_tier: best``, sets libfabric's and NCCL's environment, and its header (and the command
line) says what the config needs and what srift predicts with one interface and with none; the
torchrun lines say the same.

One SkyPilot task runs identical nodes, so a mixed cluster (two instance types, or spot beside
on-demand nodes) has no task: that is an error with what to do instead. torchrun itself takes a
different ``--nproc_per_node`` on each node, so ``--torchrun`` prints mixed clusters too, with
each group's per-GPU batch.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from srift.catalog.load import bundled_rows
from srift.catalog.network import efa_interfaces, facts_for
from srift.cluster import EFA
from srift.errors import SriftError
from srift.outputs import atomic_write_text, stream_of
from srift.report.skypilot_catalog import require_known
from srift.results import LaunchGroup, LaunchPlan
from srift.simulate.prediction import Prediction

MASTER_PORT = 29500  # torchrun's default port
DEFAULT_SCRIPT = "train.py"
MASTER_PLACEHOLDER = "MASTER_ADDR"


# ---- DDP communication hook (--grad-compression) --------------------------------------------------
def hook_lines(pred: Prediction) -> list[str]:
    """The two lines that register the prediction's DDP communication hook, after ``model =
    DistributedDataParallel(...)`` in the user's script (torch 2.13.0 ddp_comm_hooks); none without one."""
    hook = pred.grad_compression
    if not hook:
        return []
    if hook.startswith("powersgd"):
        rank = hook.partition(":")[2] or "1"
        return ["from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD",
                f"model.register_comm_hook(powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank={rank}), "
                "powerSGD.powerSGD_hook)"]
    return ["from torch.distributed.algorithms.ddp_comm_hooks import default_hooks",
            f"model.register_comm_hook(None, default_hooks.{hook}_compress_hook)"]


def hook_notes(pred: Prediction) -> list[str]:
    """Comment lines saying where the hook's two lines go (none without a hook)."""
    lines = hook_lines(pred)
    if not lines:
        return []
    return [f"srift predicted this with --grad-compression {pred.grad_compression}: add these two lines to your script "
            "right after wrapping the model in DistributedDataParallel:", *(f"  {line}" for line in lines)]


# ---- SkyPilot ----------------------------------------------------------------------------------
def _single_group(plan: LaunchPlan) -> LaunchGroup:
    """The one group of identical catalog nodes a SkyPilot task can ask for.

    Raises:
        SriftError: for a mixed cluster or machines of a cluster file.
    """
    if any(g.instance is None for g in plan.groups):
        raise SriftError("a cluster file describes your own machines, not a cloud instance SkyPilot can start.",
                         "use --instance TYPE:COUNT for a SkyPilot task, or --torchrun for the launch lines of your machines.")
    if len(plan.groups) != 1:
        kinds = " and ".join(g.label for g in plan.groups)
        raise SriftError(
            f"{plan.configuration} mixes {kinds}; one SkyPilot task runs identical nodes, so it cannot express this cluster.",
            "hand off a configuration of one instance type on one market: rerun without --mixed, or "
            "`srift predict --instance TYPE:COUNT --skypilot FILE` for the row you want; --torchrun prints every node's line.")
    return plan.groups[0]


def _task_name(model: str) -> str:
    return "srift-" + (re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "job")


TORCHRUN_RUN = f"""\
# One torchrun per node, one worker per GPU; node 0 is the rendezvous master.
MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
torchrun \\
  --nnodes="$SKYPILOT_NUM_NODES" \\
  --nproc_per_node="$SKYPILOT_NUM_GPUS_PER_NODE" \\
  --node_rank="$SKYPILOT_NODE_RANK" \\
  --master_addr="$MASTER_ADDR" \\
  --master_port={MASTER_PORT} \\
  $TRAIN_SCRIPT
"""


# libfabric and NCCL settings for EFA (AWS's EFA + NCCL guide): use the EFA provider, and GPUDirect
# RDMA where the instance has it; NCCL_DEBUG=INFO prints "NET/OFI Selected Provider is efa" to confirm.
EFA_ENV = {"FI_PROVIDER": "efa", "NCCL_DEBUG": "INFO"}
EFA_RDMA_ENV = {"FI_EFA_USE_DEVICE_RDMA": "1"}
ALL_INTERFACES_CONFIG = "aws: use_internal_ips: true"


def efa_group(plan: LaunchPlan) -> LaunchGroup | None:
    """The plan's EFA node group when the plan spans several nodes and uses EFA, else None."""
    if plan.nodes < 2:
        return None
    return next((g for g in plan.groups if g.instance is not None and g.instance.cluster_network == EFA), None)


def efa_env(group: LaunchGroup) -> dict[str, str]:
    """The environment an EFA group's processes need (``EFA_ENV``, plus RDMA where it has it)."""
    assert group.instance is not None
    facts = facts_for(group.instance)
    return {**EFA_ENV, **(EFA_RDMA_ENV if facts.gpudirect_rdma else {})}


def efa_notes(plan: LaunchPlan, launcher: str = "skypilot") -> list[str]:
    """What all EFA interfaces need and what srift predicts without them (empty without EFA), for
    a SkyPilot task (``launcher="skypilot"``) or torchrun lines on machines the user starts."""
    group = efa_group(plan)
    if group is None:
        return []
    inst = group.instance
    assert inst is not None
    n = efa_interfaces(inst.instance_type)
    rate = _rate(plan.prediction)
    where = f"on all {n} interfaces" if n > 1 else "on its one interface"
    head = f"Network: srift predicts {_rate_text(plan.prediction)} with EFA {where} of {inst.instance_type} ({inst.network_gbps:,.0f} Gb/s)"
    if launcher == "torchrun":
        return [head + ": start each instance with every EFA interface attached (one per network card) in one "
                "cluster placement group."] + [f"With {what}: srift predicts {_rate_text(p)}."
                                               for what, p in plan.network_fallbacks]
    lines = [head + "; the task asks network_tier: best (without it, SkyPilot attaches no EFA)."]
    if n > 1:
        lines.append(f"All {n} interfaces need `{ALL_INTERFACES_CONFIG}` in your SkyPilot config (~/.sky/config.yaml; "
                     "a task cannot set it); without it SkyPilot attaches one.")
    for what, pred in plan.network_fallbacks:
        alt = _rate(pred)
        slower = f"{rate / alt:.1f}x slower" if alt > 0 else "no throughput"
        lines.append(f"With {what}: srift predicts {_rate_text(pred)} ({slower}).")
    return lines


def _rate(pred: Prediction) -> float:
    tokens = pred.expected_throughput_tokens_per_s
    return tokens if tokens is not None else pred.expected_throughput_samples_per_s


def _rate_text(pred: Prediction) -> str:
    """``222,018 tokens/s`` for a sequence model, else ``3,581 samples/s``."""
    unit = "tokens/s" if pred.expected_throughput_tokens_per_s is not None else "samples/s"
    return f"{_rate(pred):,.0f} {unit}"


def layout_env(plan: LaunchPlan) -> dict[str, str]:
    """The parallel settings srift priced, for the training script and its launcher: a layout's
    ``SRIFT_TP``, ``SRIFT_PP``, ``SRIFT_CP``, ``SRIFT_EP``, ``SRIFT_VP``, ``SRIFT_MICRO_BATCH`` and
    ``SRIFT_PIPELINE_SCHEDULE``; a data-parallel job's per-GPU ``SRIFT_BATCH_SIZE`` (one group);
    and ``SRIFT_GLOBAL_BATCH``. Megatron-LM takes them as ``--tensor-model-parallel-size``,
    ``--pipeline-model-parallel-size``, ``--context-parallel-size``, ``--expert-model-parallel-size``,
    ``--micro-batch-size`` and ``--global-batch-size``."""
    pred = plan.prediction
    env: dict[str, str] = {}
    lay = pred.layout.to_dict() if pred.layout is not None else None
    if lay:
        for key, name in (("tp", "TP"), ("pp", "PP"), ("cp", "CP"), ("ep", "EP"), ("vp", "VP"), ("micro_batch", "MICRO_BATCH"),
                          ("schedule", "PIPELINE_SCHEDULE")):
            if key in lay:
                env[f"SRIFT_{name}"] = str(lay[key])
    elif len({g.per_gpu_batch for g in plan.groups}) == 1 and plan.groups[0].per_gpu_batch is not None:
        env["SRIFT_BATCH_SIZE"] = str(plan.groups[0].per_gpu_batch)
    env["SRIFT_GLOBAL_BATCH"] = str(pred.global_batch_size)
    return env


MEGATRON_FLAGS = ('--tensor-model-parallel-size "$SRIFT_TP" --pipeline-model-parallel-size "$SRIFT_PP" '
                  '--context-parallel-size "$SRIFT_CP" --expert-model-parallel-size "$SRIFT_EP" '
                  '--micro-batch-size "$SRIFT_MICRO_BATCH" --global-batch-size "$SRIFT_GLOBAL_BATCH"')


def skypilot_task(plan: LaunchPlan) -> dict[str, Any]:
    """The SkyPilot task of a one-group catalog configuration, as the YAML document's mapping.

    Raises:
        SriftError: for a mixed cluster or a cluster file (see ``_single_group``).
    """
    group = _single_group(plan)
    inst = group.instance
    assert inst is not None
    resources: dict[str, Any] = {"infra": inst.infra, "instance_type": inst.vm_type or inst.instance_type}
    if inst.accelerators:  # SkyPilot's name and count; a row refreshed from AWS's API has none (the type says it)
        resources["accelerators"] = inst.accelerators
    resources["use_spot"] = group.spot
    envs = {"TRAIN_SCRIPT": DEFAULT_SCRIPT, **layout_env(plan)}
    if efa_group(plan) is not None:
        resources["network_tier"] = "best"  # SkyPilot attaches EFA only at this tier
        envs.update(efa_env(group))
    return {
        "name": _task_name(plan.model),
        "workdir": ".",
        "num_nodes": group.nodes,
        "resources": resources,
        "envs": envs,
        "run": TORCHRUN_RUN,
    }


class _TaskDumper(yaml.SafeDumper):
    """Safe YAML with multi-line strings as literal blocks (``run: |``), as people write them."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_TaskDumper.add_representer(str, _str)


def skypilot_yaml(plan: LaunchPlan) -> str:
    """The task file's text: a comment with the prediction and how to launch, then the task."""
    task = skypilot_task(plan)
    group = plan.groups[0]
    assert group.instance is not None
    notes = [
        f"SkyPilot task written by srift for {plan.summary()}",
        "Launch from the folder of your training script (workdir: . is copied to every node):",
        f"  sky launch -c {task['name']} THIS_FILE --env TRAIN_SCRIPT='{DEFAULT_SCRIPT} --your-args'",
        "Add what your script needs under setup, e.g.:",
        "  setup: |",
        "    pip install -r requirements.txt",
    ]
    if plan.prediction.layout:
        notes.append("The layout srift priced is in envs (SRIFT_TP, SRIFT_PP, ...): pass it to your launcher, e.g. Megatron-LM's "
                     + MEGATRON_FLAGS.replace('"', "") + " in TRAIN_SCRIPT.")
    notes += efa_notes(plan) + hook_notes(plan.prediction)
    header = "".join(f"# {line}\n" for line in notes)
    return header + yaml.dump(task, Dumper=_TaskDumper, sort_keys=False, default_flow_style=False, width=1000)


def write_skypilot(plan: LaunchPlan, path: str) -> Path:
    """Write the SkyPilot task file atomically (normal permissions)."""
    return atomic_write_text(path, skypilot_yaml(plan))


# ---- torchrun -----------------------------------------------------------------------------------
def torchrun_lines(plan: LaunchPlan, script: str = DEFAULT_SCRIPT) -> list[str]:
    """The command of every node, node 0 first (the master), preceded by comment lines.

    One node: ``torchrun --standalone``. Several: a static rendezvous at node 0's address
    (``MASTER_ADDR``, for the user to fill in) on port 29500, ``--node_rank`` 0..N-1, and each
    node's own ``--nproc_per_node`` (mixed clusters differ per group).
    """
    lines = [f"# {plan.summary()}"]
    settings = " ".join(f"{k}={v}" for k, v in layout_env(plan).items()) + " "
    lines.append("# Each line sets what srift priced (SRIFT_*) for your script and its launcher.")
    if plan.prediction.layout:
        lines.append(f"# e.g. Megatron-LM: {MEGATRON_FLAGS}")
    group = efa_group(plan)
    if group is not None:
        env = " ".join(f"{k}={v}" for k, v in efa_env(group).items())
        lines.append(f"# EFA: on every node, with the aws-ofi-nccl plugin installed: export {env}")
        lines += [f"# {line}" for line in efa_notes(plan, launcher="torchrun")]
    lines += [f"# {line}" for line in hook_notes(plan.prediction)]
    if plan.nodes == 1:
        g = plan.groups[0]
        return lines + [f"{settings}torchrun --standalone --nproc_per_node={g.gpus_per_node} {script}"]
    lines.append(f"# Run line R on node R; replace {MASTER_PLACEHOLDER} with node 0's address (port {MASTER_PORT} open "
                 "between the nodes).")
    rank = 0
    for g in plan.groups:
        if len(plan.groups) > 1:
            batch = f", batch {g.per_gpu_batch} per GPU" if g.per_gpu_batch is not None else ""
            lines.append(f"# {g.label}{batch}")
        for _ in range(g.nodes):
            lines.append(f"{settings}torchrun --nnodes={plan.nodes} --nproc_per_node={g.gpus_per_node} --node_rank={rank} "
                         f"--master_addr={MASTER_PLACEHOLDER} --master_port={MASTER_PORT} {script}")
            rank += 1
    return lines


# ---- what the commands call ---------------------------------------------------------------------
def check(plan: LaunchPlan, skypilot: str | None) -> LaunchPlan:
    """The plan, once it is known to be expressible as asked: call it before printing anything.

    Raises:
        SriftError: when a SkyPilot task is asked for a mixed cluster, a cluster file, or an
            instance type SkyPilot does not know (srift/report/skypilot_catalog.py).
    """
    if skypilot:
        inst = _single_group(plan).instance
        assert inst is not None
        require_known(inst, plan.nodes, bundled_rows(inst.cloud))
    return plan


def hand_off(plan: LaunchPlan, skypilot: str | None, torchrun: bool, fmt: str) -> None:
    """Write the SkyPilot task (``skypilot``: a path) and print the torchrun lines as asked.

    Messages go to stderr; the torchrun lines to stdout, or to stderr when stdout carries JSON.

    Raises:
        SriftError: when the configuration cannot be a SkyPilot task (nothing is written).
    """
    if skypilot:
        path = write_skypilot(plan, skypilot)
        task = skypilot_task(plan)
        res = task["resources"]
        # A task written to a stream (-, /dev/stdout) is saved by the user first: launch names a file.
        target = "TASK.yaml" if stream_of(skypilot) is not None else shlex.quote(str(path))
        print(f"Wrote SkyPilot task {path}: {task['num_nodes']} x {res['instance_type']}"
              + (f" ({res['accelerators']})" if "accelerators" in res else "")
              + f", {'spot' if res['use_spot'] else 'on demand'}, {res['infra']}. "
              f"Launch: sky launch -c {task['name']} {target} --env TRAIN_SCRIPT='{DEFAULT_SCRIPT} ARGS'",
              file=sys.stderr)
        for line in efa_notes(plan) + hook_notes(plan.prediction):
            print(line, file=sys.stderr)
    if torchrun:
        lines = torchrun_lines(plan)
        out = sys.stderr if fmt == "json" else sys.stdout
        if fmt == "markdown":
            lines = ["```bash", *lines, "```"]
        print("\n".join(lines), file=out)


"""`srift profile` records the training stack it sees in the script (issue 43): whatever drives
``optimizer.step()``. Real scripts of stacks installable on CPU (Lightning, the Transformers
Trainer, accelerate, plain PyTorch: tests/fixtures/stacks), and predictions from a profile use its
stack."""

from __future__ import annotations

import inspect
import json
import runpy
from importlib import metadata
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.optim.optimizer import register_optimizer_step_pre_hook  # noqa: E402

from srift.profile import Profile  # noqa: E402
from srift.profiling.stack_detect import detect_stack  # noqa: E402
from srift.stacks import DetectedStack  # noqa: E402
from tests.cli_helpers import run  # noqa: E402

SCRIPTS = Path(__file__).parent / "fixtures" / "stacks"


def _detected(script: str) -> DetectedStack:
    """The stack ``detect_stack`` sees at the script's first optimizer step (as `srift profile`'s
    step hook calls it), the script run in this process."""
    seen: list[DetectedStack] = []

    def hook(opt, args, kwargs) -> None:
        if not seen:
            seen.append(detect_stack(inspect.currentframe()))

    handle = register_optimizer_step_pre_hook(hook)
    try:
        runpy.run_path(str(SCRIPTS / script), run_name="__main__")
    finally:
        handle.remove()
    assert seen, f"{script} never stepped an optimizer"
    return seen[0]


def test_lightning_trainer_is_detected_with_its_version() -> None:
    pytest.importorskip("lightning")
    got = _detected("train_lightning.py")
    assert got.name == "lightning" and got.version == metadata.version("lightning")
    assert got.evidence.startswith("optimizer step called from lightning.")


def test_transformers_trainer_is_detected_over_the_accelerate_it_drives() -> None:
    pytest.importorskip("accelerate")
    got = _detected("train_hf_trainer.py")
    assert got.name == "hf-trainer" and got.version == metadata.version("transformers")
    assert "transformers.trainer" in got.evidence


def test_a_plain_loop_is_pytorch() -> None:
    got = _detected("train_plain.py")
    assert got == DetectedStack("pytorch", torch.__version__, "no training library around optimizer.step()")


def test_profile_records_an_accelerate_script_and_predictions_from_it_use_that_stack(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    out = tmp_path / "acc.yaml"
    code, stdout, err = run(["profile", "--warmup", "1", "--iters", "2", "-o", str(out),
                             str(SCRIPTS / "train_accelerate.py")])
    assert code == 0, err
    profile = Profile.load(out)
    assert profile.stack == DetectedStack("hf-trainer", metadata.version("accelerate"),
                                          "optimizer step called from accelerate.optimizer")
    code, stdout, err = run(["predict", "--profile", str(out), "--instance", "p4d.24xlarge", "--format", "json"])
    assert code == 0, err
    pred = json.loads(stdout)
    assert pred["stack"] == "hf-trainer"
    assert any(n.startswith("stack hf-trainer: priced: grad reduce overlap on, grad bucket mb 25 MiB") for n in pred["notes"])
    code, stdout, err = run(["predict", "--profile", str(out), "--instance", "p4d.24xlarge", "--format", "json",
                             "--stack", "deepspeed"])  # --stack overrides what was detected
    assert code == 0, err
    assert json.loads(stdout)["stack"] == "deepspeed"


def test_a_profile_with_a_bad_stack_mapping_is_refused(tmp_path: Path) -> None:
    from srift.errors import SriftError

    good = Profile.load(Path(__file__).parents[1] / "profiles" / "resnet50.yaml").to_dict()
    with pytest.raises(SriftError, match="stack.name"):
        Profile.from_dict({**good, "stack": {"name": "jax", "version": "1"}}, "p.yaml")
    ok = Profile.from_dict({**good, "stack": {"name": "lightning", "version": "2.5.5", "evidence": "x"}}, "p.yaml")
    assert ok.stack == DetectedStack("lightning", "2.5.5", "x")
    assert Profile.from_dict(ok.to_dict(), "again").stack == ok.stack

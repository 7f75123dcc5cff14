"""K-FAC where GPU scripts break it (the CUDA-path review of issue #28), on a CPU: an fp16-style
GradScaler whose first steps overflow (B9), and SPD's own collectives on the gradients' device,
never the CPU by default (B4: an NCCL group has no CPU side)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402

from srift.kfac import KFACPreconditioner, KFACStrategy  # noqa: E402
from srift.kfac.distributed import Comm  # noqa: E402
from kfac_helpers import batches, init_gloo, small_cnn  # noqa: E402


def _scaled_step(model, pre, opt, scaler, x, y, blow_up: float = 1.0):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y) * blow_up
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    pre.step()
    scaler.step(opt)
    scaler.update()


def test_a_first_step_that_overflows_is_skipped_and_training_goes_on():
    """B9: at a loss scale of 2^127 (times 10^10) the first step's scaled gradients overflow: no
    factors yet, so step() preconditions nothing and the scaler skips the optimizer step; at a
    sane scale the next step builds the factors and preconditions."""
    model = small_cnn()
    before = [p.detach().clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)
    pre = KFACPreconditioner(model, grad_scaler=scaler)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first, second = batches(2, 8)
    _scaled_step(model, pre, opt, scaler, *first, blow_up=1e10)  # raised "called before any forward/backward pass"
    assert (pre.skipped_factor_updates, pre.skipped_steps, pre.steps) == (1, 1, 0)
    assert not pre.A and all(torch.equal(a, b) for a, b in zip(model.parameters(), before))  # nothing stepped
    scaler.update(new_scale=1.0)
    _scaled_step(model, pre, opt, scaler, *second)
    assert pre.steps == 1 and pre.A and all(torch.isfinite(f).all() for f in pre.G.values())
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), before))


def test_a_single_process_comm_lives_on_the_cpu_or_the_given_device():
    assert Comm().device == torch.device("cpu")
    assert Comm(torch.device("meta")).device == torch.device("meta")
    pre = KFACPreconditioner(small_cnn())
    assert pre.device == pre.comm.device == next(small_cnn().parameters()).device


def _worker(rank: int, world: int, rendezvous: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    init_gloo(rank, world, rendezvous)
    seen: list[str] = []
    real = {name: getattr(dist, name) for name in ("all_reduce", "broadcast")}

    def spy(name):
        def call(tensor, *args, **kwargs):
            seen.append(str(tensor.device))
            return real[name](tensor, *args, **kwargs)
        return call

    try:
        for name in real:
            setattr(dist, name, spy(name))
        model = small_cnn()
        # No costs given: SPD calibrates the all-reduce and the inversion rate (the default path).
        pre = KFACPreconditioner(model, strategy=KFACStrategy("spd", fusion_profile_steps=1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in batches(3, 8, seed=rank + 1):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            pre.step()
            opt.step()
        with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
            f.write(f"{pre.comm.device}\n{next(model.parameters()).grad.device}\n{','.join(sorted(set(seen)))}\n{len(seen)}\n")
        dist.barrier()
    finally:
        for name, fn in real.items():
            setattr(dist, name, fn)
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.distributed
def test_spd_collectives_run_on_the_gradients_device(tmp_path):
    """B4: calibration, decisions broadcast, fused factor all-reduces and inverse broadcasts all send
    tensors on the device of the gradients (on a GPU: NCCL's device; the CPU here, with gloo)."""
    mp.spawn(_worker, args=(2, str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        comm_dev, grad_dev, devices, calls = (tmp_path / f"rank{rank}.txt").read_text().split("\n")[:4]
        assert comm_dev == grad_dev == devices == "cpu"
        assert int(calls) > 10  # calibration, broadcasts and every step's fused all-reduces were seen

"""Review items of issue #28 (the CUDA-path review it cites) that a CPU can check by hand: C1
(a GPU srift does not know), M10 (several optimizers)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from srift.cluster import cluster_from_dict
from srift.job import Job
from srift.profile import DeviceInfo
from srift.simulate import predict
from srift.testing import measured_profile


def _one_gpu(gpu: str):
    return cluster_from_dict({"name": "one", "node_groups": [{"count": 1, "gpus_per_node": 1, "gpu": gpu,
                                                             "intra_node": "pcie4", "network_gbps": 0}]})


def test_times_from_a_gpu_srift_does_not_know_are_said_to_be_unused() -> None:
    """C1: an H100 NVL (or a MIG slice) is no GPU of the catalog; its measured profile is predicted
    from FLOPs and bytes, and the prediction says so instead of passing it silently as structural."""
    nvl = measured_profile([4096], gpu="H100")
    nvl.device = DeviceInfo("NVIDIA H100 NVL", "cuda")
    notes = predict(nvl, _one_gpu("H100"), Job(batch_size=8)).notes
    assert any("'NVIDIA H100 NVL', a GPU srift does not know" in n for n in notes)
    known = predict(measured_profile([4096], gpu="H100"), _one_gpu("H100"), Job(batch_size=8)).notes
    assert not any("does not know" in n for n in known) and "compute anchored on measured times" in known


TWO_OPTIMIZERS = """
import time, torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)

class SlowAdamW(torch.optim.AdamW):  # a second optimizer whose step takes at least 20 ms
    def step(self, closure=None):
        time.sleep(0.02)
        return super().step(closure)

net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
first = torch.optim.SGD(net[0].parameters(), lr=0.01, momentum=0.9)
second = SlowAdamW(net[2].parameters(), lr=0.01)
for step in range(40):
    loss = net(torch.randn(16, 32)).square().mean()
    loss.backward()
    first.step()
    second.step()
    first.zero_grad()
    second.zero_grad()
"""


@pytest.mark.slow
def test_every_optimizer_of_the_script_is_timed_and_sized(tmp_path: Path) -> None:
    """M10: SGD with momentum (4 state bytes per parameter) on the first Linear (32 x 64 + 64 = 2112
    parameters), AdamW (8 bytes) on the second (64 x 10 + 10 = 650): (4 x 2112 + 8 x 650) / 2762 =
    4.941 bytes per parameter; the second's 20 ms sleep is optimizer time of every iteration."""
    from srift.profiling import runner

    import torch

    # An AdamW made earlier in the process has torch wrap AdamW.step with the step hooks too, so
    # SlowAdamW's super().step() runs them inside its own: only the outer call may count (it lost
    # the sleep when an earlier test of the same worker had made an AdamW).
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    script = tmp_path / "train.py"
    script.write_text(TWO_OPTIMIZERS)
    prof = runner.profile_script(script, [], warmup=4, iters=4, output=tmp_path / "p.yaml", show_progress=False).profile
    assert prof is not None
    assert prof.optimizer.type == "SGD+SlowAdamW"
    assert prof.optimizer.state_bytes_per_param == pytest.approx((4 * 2112 + 8 * 650) / 2762, abs=1e-3)
    # srift's clock is wall time less the thread's wait for a core (docs/profiling.md): a 20 ms sleep
    # reads 20 ms less the timer's slack when its wake-up waited for a core, so a hair under 20 ms.
    assert (prof.phases.optimizer_s or 0.0) >= 0.019


def test_a_bucket_queued_behind_another_counts_only_its_own_all_reduce() -> None:
    """M12: buckets ready at 0, 1 and 2 ms finish at 5, 8 and 9 ms on one communication stream: the
    second waited for the first until 5 ms, so its own time is 8 - 5 = 3 ms (7 ms ready to done),
    the third's 9 - 8 = 1 ms; a bucket ready after the previous one finished keeps its whole time."""
    pytest.importorskip("torch")
    from srift.profiling.buckets import own_times

    assert own_times([0.0, 1.0, 2.0], [5.0, 8.0, 9.0]) == [5.0, 3.0, 1.0]
    assert own_times([0.0, 6.0], [5.0, 8.0]) == [5.0, 2.0]
    # gloo's threads: the second (small) bucket finished at 2 ms, before the first (5 ms): nothing
    # held it up, its own time is 2 - 0.1 = 1.9 ms (queueing behind the first gave it 0); the third
    # queued behind both and starts at the later, 5 ms.
    assert own_times([0.0, 0.1, 0.2], [5.0, 2.0, 6.0]) == pytest.approx([5.0, 1.9, 1.0])


def test_bucket_times_survive_the_file() -> None:
    from srift.profile import AllReduceBucket, Profile

    prof = measured_profile([4096], gpu="T4")
    prof.allreduce = [AllReduceBucket(0, 0, 4096, 0.003, 0.007), AllReduceBucket(0, 1, 4096, 0.002)]
    assert Profile.from_dict(prof.to_dict()).allreduce == prof.allreduce


def test_an_asynchronous_fsdp_collective_on_cuda_ends_when_its_work_completes(monkeypatch) -> None:
    """M13: FSDP2's explicit prefetch (``unshard(async_op=True)``) returns a Work; on CUDA its end
    mark is recorded in the Work's future callback (whose stream waits for NCCL), not at enqueue.
    Run with a real asynchronous collective (gloo, one process) and the CUDA clock's marks shimmed."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from srift.profiling import fsdp

    class Marks:  # the CUDA clock's interface: marks and the seconds between them
        kind = "cuda"

        def __init__(self) -> None:
            self.n = 0

        def mark(self) -> str:
            self.n += 1
            return f"mark {self.n}"

    monkeypatch.setattr(fsdp, "cuda_mark", lambda: "completed")
    timer = fsdp.CollectiveTimer.__new__(fsdp.CollectiveTimer)
    timer.clock, timer._current = Marks(), []  # type: ignore[assignment]
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        work = timer.timed("blocks.0", "all_gather", 64, lambda: dist.all_reduce(torch.ones(16), async_op=True))
        work.wait()
        for _ in range(500):  # gloo runs the future's callbacks on its own thread, just after completing it
            if timer._current[0][5] is not None:
                break
            time.sleep(0.01)
    finally:
        dist.destroy_process_group()
    assert timer._current[0][4] == "mark 1" and timer._current[0][5] == "completed"


def _host_reads_per_step(width: int, layers: int, method: str) -> int:
    """Tensor-to-host reads (item, float, bool, tolist) in one K-FAC ``step()`` of an MLP."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.overrides import TorchFunctionMode

    from srift.kfac import KFACPreconditioner, KFACStrategy

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    pre = KFACPreconditioner(model, inverse_method=method, strategy=KFACStrategy(fusion_profile_steps=1))
    reads = {"n": 0}
    host = {torch.Tensor.item, torch.Tensor.__float__, torch.Tensor.__bool__, torch.Tensor.tolist, torch.Tensor.__int__}

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            reads["n"] += func in host
            return func(*args, **(kwargs or {}))

    for step in range(3):  # counted once the fusion is planned (step 1)
        model(torch.randn(16, width)).square().mean().backward()
        if step == 2:
            with Count():
                pre.step()
        else:
            pre.step()
        model.zero_grad()
    return reads["n"]


@pytest.mark.parametrize("method", ["inverse", "eigen"])
def test_a_kfac_step_reads_the_device_a_fixed_number_of_times(method: str) -> None:
    """P1: pi-damping's traces, the KL-clip sum and Cholesky's check stay on the device: the host
    reads of a step do not grow with the layers (they were 3 per layer: 2 traces, 1 KL-clip sum)."""
    assert _host_reads_per_step(8, 2, method) == _host_reads_per_step(8, 6, method) <= 1


def test_a_factor_that_is_not_positive_definite_still_raises() -> None:
    """P1 moved Cholesky's check to once per step; a damped factor that is not positive definite
    (-I + 0.5 I) still raises, and a positive definite one inverts exactly ((2 I + I)^-1 = I / 3)."""
    torch = pytest.importorskip("torch")
    from srift.kfac.layers import damped_inverse, damped_inverse_ex

    with pytest.raises(torch.linalg.LinAlgError):
        damped_inverse(-torch.eye(3), 0.5)
    inv, info = damped_inverse_ex(2 * torch.eye(3), torch.tensor(1.0))
    assert int(info) == 0 and torch.allclose(inv, torch.eye(3) / 3)


def test_a_causal_fused_attention_kernel_counts_half_its_flops() -> None:
    """M16: CUDA's SDPA kernels (flash, memory-efficient, cuDNN) called causal run half of
    QK^T and PV; torch's formula counts 4 b h s^2 d = 4 x 2 x 4 x 128^2 x 64 = 33,554,432 FLOPs
    for them whatever the mask. srift counts 16,777,216 when causal, as its LLM profiles do."""
    torch = pytest.importorskip("torch")
    from srift.profiling.flops import _PhaseFlopCounter

    aten = torch.ops.aten
    q = torch.empty(2, 4, 128, 64, device="meta")
    out = (torch.empty(2, 4, 128, 64, device="meta"),)

    def counted(packet, args, kwargs) -> float:
        counter = _PhaseFlopCounter()
        counter._count_flops(packet, out, args, kwargs)
        return float(sum(counter.flop_counts["Global"].values()))

    assert counted(aten._scaled_dot_product_flash_attention, (q, q, q), {}) == 33_554_432
    assert counted(aten._scaled_dot_product_flash_attention, (q, q, q, 0.0, True), {}) == 16_777_216
    assert counted(aten._scaled_dot_product_efficient_attention, (q, q, q, None, False), {"is_causal": True}) == 16_777_216
    # custom_mask_type 1 is the memory-efficient kernel's causal mask.
    qkv = (q.transpose(1, 2),) * 3 + (None,) * 5 + (0.0,)
    full = counted(aten._efficient_attention_forward, qkv + (0,), {})
    assert full > 0 and counted(aten._efficient_attention_forward, qkv + (1,), {}) == full / 2


def test_attention_called_inside_a_non_leaf_module_is_a_layer_of_its_own() -> None:
    """M16: an HF-style attention module (q, k, v, o Linear leaves, ``F.scaled_dot_product_attention``
    in its own forward) runs FLOPs that no leaf is counted for. They become ``attn.(ops)``, placed
    after v (where they ran), causal: 4 b h s^2 d / 2 = 4 x 2 x 4 x 16^2 x 8 / 2 = 32,768 forward,
    2.5 times that backward (torch's SDPA backward formula: 5 products of that size) = 81,920;
    all of it grows with seq_len^2. The Linear leaves keep their 2 b s d^2 = 65,536 forward."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from srift.profiling.flops import analyze_layers

    class Attention(nn.Module):
        def __init__(self, d: int = 32, heads: int = 4) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.heads = heads

        def forward(self, x):
            b, s, d = x.shape

            def split(y):
                return y.view(b, s, self.heads, d // self.heads).transpose(1, 2)

            y = nn.functional.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)),
                                                           is_causal=True)
            return self.o(y.transpose(1, 2).reshape(b, s, d))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Attention()])  # never called itself: the attention's parent is Net
            self.head = nn.Linear(32, 2)

        def forward(self, x):
            for block in self.blocks:
                x = x + block(x)
            return self.head(x)

    net, x = Net(), torch.randn(2, 16, 32)
    layers = analyze_layers(net, lambda: net(x).sum())
    names = [layer.name for layer in layers]
    assert names == ["blocks.0.q", "blocks.0.k", "blocks.0.v", "blocks.0.(ops)", "blocks.0.o", "head"]
    ops = layers[3]
    assert ops.type == "ScaledDotProductAttention" and ops.params == 0
    assert (ops.fwd_flops, ops.bwd_flops) == (32_768, 81_920)
    assert (ops.fwd_flops_seq2, ops.bwd_flops_seq2) == (32_768, 81_920)
    assert layers[0].fwd_flops == 65_536
    # Nothing counted twice: every FLOP of the step is in exactly one layer.
    assert sum(layer.fwd_flops for layer in layers) == 4 * 65_536 + 32_768 + 2 * 2 * 16 * 32 * 2

    # With a mask a CPU runs SDPA's math fallback: two plain bmm (QK^T, PV), the full 4 b h s^2 d =
    # 65,536, which torch counts as matmuls; srift still knows them for attention (seq_len^2).
    def masked(self, x):
        b, s, d = x.shape

        def split(y):
            return y.view(b, s, self.heads, d // self.heads).transpose(1, 2)

        mask = torch.ones(s, s, dtype=torch.bool)
        y = nn.functional.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)),
                                                       attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(b, s, d))

    Attention.forward = masked
    ops = next(layer for layer in analyze_layers(net, lambda: net(x).sum()) if layer.name == "blocks.0.(ops)")
    assert ops.type == "ScaledDotProductAttention" and ops.fwd_flops == ops.fwd_flops_seq2 == 65_536
    assert ops.bwd_flops == ops.bwd_flops_seq2 > 0


_P3_SCRIPT = """
import json, sys, torch
from torch import nn
from torch.overrides import TorchFunctionMode
from srift.kfac.preconditioner import KFACPreconditioner

legacy = sys.argv[1] == "legacy"
if legacy:
    torch.backends.cuda.matmul.allow_tf32 = True  # the legacy API: float32 matmul precision "high"
else:
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # torch 2.9's API
state = (lambda: torch.get_float32_matmul_precision()) if legacy else (lambda: torch.backends.cuda.matmul.fp32_precision)
seen = []

class Spy(TorchFunctionMode):  # the precision each of K-FAC's matmuls runs under
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("__matmul__", "matmul", "mm"):
            seen.append(state())
        return func(*args, **(kwargs or {}))

from srift.kfac.layers import KFACLayer
rows = KFACLayer._output_rows
g_seen = []

def output_rows(self, grad):  # factor G's rows, in the backward hook (where the mode above is not active)
    g_seen.append(state())
    return rows(self, grad)

KFACLayer._output_rows = output_rows
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
pre = KFACPreconditioner(net)
with Spy():
    for _ in range(2):
        net(torch.randn(8, 6)).square().mean().backward()
        pre.step()
print(json.dumps({"seen": sorted(set(seen + g_seen)), "count": len(seen), "g": len(g_seen), "after": state()}))
"""


@pytest.mark.slow  # two subprocesses (one per TF32 API), about 2 s each
@pytest.mark.parametrize("api", ["legacy", "new"])
def test_kfac_runs_its_matmuls_in_ieee_fp32_whatever_tf32_the_script_allows(api: str, tmp_path: Path) -> None:
    """P3: the script allows TF32 (either API); every matmul of K-FAC's factors (in the backward
    hooks) and of its preconditioning runs with full fp32 precision, and the script's setting is
    back afterwards. (A separate process: torch 2.9's API makes the legacy flags raise for good.)"""
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys

    script = tmp_path / "p3.py"
    script.write_text(_P3_SCRIPT)
    res = subprocess.run([sys.executable, str(script), api], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    # 2 Linear layers x 2 steps: factor A's Gram product, and G^-1 grad A^-1 (2 products) per layer
    # per step; factor G in each layer's backward hook, each step.
    assert out["count"] == 2 * 2 + 2 * 2 * 2 and out["g"] == 2 * 2
    assert out["seen"] == (["highest"] if api == "legacy" else ["ieee"])
    assert out["after"] == ("high" if api == "legacy" else "tf32")


def test_spd_plans_its_fusion_on_when_factors_are_ready_on_the_device() -> None:
    """M15: on CUDA the factors' ready marks are events on the GPU's time line (read once the last has
    run, ms -> s), not the host's launch times; on CPU perf_counter seconds, as before."""
    torch = pytest.importorskip("torch")
    from srift.kfac.preconditioner import ready_gaps_s, ready_mark

    class Event:  # what a CUDA event offers: elapsed_time in ms, synchronize
        def __init__(self, at_ms: float) -> None:
            self.at_ms, self.waited = at_ms, False

        def elapsed_time(self, other: "Event") -> float:
            return other.at_ms - self.at_ms

        def synchronize(self) -> None:
            self.waited = True

    events = [Event(10.0), Event(12.5), Event(20.0)]
    assert ready_gaps_s(events) == pytest.approx([0.0, 0.0025, 0.0075])
    assert events[-1].waited  # read only once the last factor ran
    assert ready_gaps_s([1.0, 1.5, 4.0]) == [0.0, 0.5, 2.5]
    assert ready_gaps_s([]) == []
    mark = ready_mark(torch.device("cpu"))
    assert isinstance(mark, float) and ready_gaps_s([mark, ready_mark(torch.device("cpu"))])[1] >= 0.0

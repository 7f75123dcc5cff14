"""A small decoder-only transformer trained with FSDP (gloo on CPU, NCCL on GPUs).

FSDP2 (``fully_shard`` on each block, then on the model) by default, or FSDP1
(``FullyShardedDataParallel`` with an auto-wrap policy per block) with ``--fsdp 1``; sharding
``full`` (FULL_SHARD / reshard after forward), ``grad-op`` (SHARD_GRAD_OP / keep the parameters
from forward to backward) or ``hybrid``; ``--checkpointing full`` recomputes every block in backward
(non-reentrant ``checkpoint_wrapper``, applied before sharding as torchtitan does).

Runs in one process on its own (a one-rank process group) or under torchrun:

    srift profile examples/train_fsdp.py --warmup 3 --iters 10 -o profiles/fsdp.yaml
    torchrun --nproc_per_node 2 --no-python srift profile examples/train_fsdp.py --warmup 3 --iters 10
    torchrun --nproc_per_node 2 examples/train_fsdp.py --report      # prints the median iteration time
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class ScaledDotProductAttention(nn.Module):
    """Causal attention of (batch, heads, seq, head_dim) tensors, a module of its own so that the
    profiler times it (and counts its FLOPs) as one layer."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Block(nn.Module):
    """Pre-norm transformer block: attention and a GELU MLP, each with a residual."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attn = ScaledDotProductAttention()
        self.proj = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim, bias=False)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(self.attn(q, k, v).transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(self.act(self.fc1(self.mlp_norm(x))))


class Decoder(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and the output head."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.layers = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.layers:
            x = block(x)
        return self.head(self.norm(x))


def shard(model: Decoder, api: int, sharding: str, checkpointing: str, device: torch.device) -> nn.Module:
    """Wrap ``model`` with FSDP1 or FSDP2, one unit per block and the model as the root unit."""
    if checkpointing == "full":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        for i, block in enumerate(model.layers):
            model.layers[i] = checkpoint_wrapper(block)
    world = dist.get_world_size()
    if api == 1:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        strategy = {"full": ShardingStrategy.FULL_SHARD, "grad-op": ShardingStrategy.SHARD_GRAD_OP,
                    "hybrid": ShardingStrategy.HYBRID_SHARD}[sharding]
        wrap = {type(m) for m in model.layers}
        return FSDP(model, auto_wrap_policy=ModuleWrapPolicy(wrap), sharding_strategy=strategy, device_id=device)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if sharding == "hybrid":  # replicate across pairs of ranks, shard within them
        shards = 2 if world % 2 == 0 else 1
        mesh = init_device_mesh(device.type, (world // shards, shards), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device.type, (world,))
    for block in model.layers:
        fully_shard(block, mesh=mesh, reshard_after_forward=sharding != "grad-op")
    return fully_shard(model, mesh=mesh)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fsdp", type=int, choices=(1, 2), default=2, help="FSDP1 (FullyShardedDataParallel) or FSDP2 (fully_shard)")
    p.add_argument("--sharding", choices=("full", "grad-op", "hybrid"), default="full")
    p.add_argument("--checkpointing", choices=("none", "full"), default="none")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=8, help="steps left out of --report's median")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (CPU)")
    p.add_argument("--report", action="store_true", help="print the median iteration time (rank 0, slowest rank's)")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    if "RANK" in os.environ:  # under torchrun
        dist.init_process_group("nccl" if cuda else "gloo")
    else:  # one process on its own
        dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = shard(Decoder(args.vocab, args.dim, args.layers, args.heads, args.seq_len).to(device),
                  args.fsdp, args.sharding, args.checkpointing, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    torch.manual_seed(rank)
    times = []
    try:
        for _ in range(args.steps):
            t0 = time.perf_counter()
            tokens = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), device=device)
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        if args.report:
            t = torch.tensor([statistics.median(times[args.warmup:])], device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if rank == 0:
                print(json.dumps({"median_iteration_s": float(t), "world_size": dist.get_world_size()}))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

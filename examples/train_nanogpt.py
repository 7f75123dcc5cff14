"""A nanoGPT-style decoder trained the way karpathy/nanoGPT's train.py trains it (its model.py's
structure: fused qkv ``c_attn``, functional causal SDPA, ``Dropout`` after attention and MLP, GELU
MLP, pre-LayerNorm blocks, the LM head tied to the token embedding; its loop: random token batches,
gradient clipping, AdamW, a cosine learning rate set by hand, ``zero_grad(set_to_none=True)``,
logging every few steps). Written here (nanoGPT is not on PyPI); ``--dropout 0.0`` is nanoGPT's
default, where every ``Dropout`` returns its input unchanged.

    srift profile examples/train_nanogpt.py --warmup 3 --iters 6 -- --batch-size 4 --block-size 64
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head, self.dropout = n_head, dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd: int, dropout: float) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block_size: int, n_layer: int, n_head: int, n_embd: int, dropout: float) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--log-interval", type=int, default=1)
    a = p.parse_args()

    torch.manual_seed(1337)
    data = torch.randint(0, a.vocab, (100_000,))
    model = GPT(a.vocab, a.block_size, a.n_layer, a.n_head, a.n_embd, a.dropout)
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)

    def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(data) - a.block_size, (a.batch_size,))
        x = torch.stack([data[i:i + a.block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + a.block_size] for i in ix])
        return x, y

    x, y = get_batch()
    t0 = time.time()
    for it in range(a.max_iters):
        lr = 6e-5 + 0.5 * (6e-4 - 6e-5) * (1 + math.cos(math.pi * it / a.max_iters))
        for group in optimizer.param_groups:
            group["lr"] = lr
        _, loss = model(x, y)
        x, y = get_batch()  # prefetch the next batch while... (on CPU: right after the forward, as nanoGPT)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if it % a.log_interval == 0:
            t1 = time.time()
            print(f"iter {it}: loss {loss.item():.4f}, time {(t1 - t0) * 1000:.2f}ms")
            t0 = t1


if __name__ == "__main__":
    main()

"""Transformer models of the zoo (BERT, GPT-2) and the block ViT shares, in plain torch.nn.

The attention score and value matmuls live in a leaf module, AttentionCore, so the profiler sees
the part of the FLOPs (and activations) that grows with the square of the sequence length.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class AttentionCore(nn.Module):
    """softmax(q k^T / sqrt(d) [+ causal mask]) v over heads. No parameters.

    ``srift_seq2`` tells the layer analysis that all its FLOPs grow with seq_len squared.
    """

    srift_seq2 = True

    def __init__(self, heads: int, causal: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.extra_activation_bytes = 0.0  # attention probabilities kept for backward (set in forward)

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        b, t, three_d = qkv.shape
        d = three_d // 3
        q, k, v = (x.view(b, t, self.heads, d // self.heads).transpose(1, 2) for x in qkv.split(d, dim=2))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=qkv.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        probs = scores.softmax(-1)
        self.extra_activation_bytes = float(probs.numel() * probs.element_size())
        return (probs @ v).transpose(1, 2).reshape(b, t, d)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.core = AttentionCore(heads, causal)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.core(self.qkv(x)))


class TransformerBlock(nn.Module):
    """Pre-norm (GPT-2, ViT) or post-norm (BERT) encoder/decoder block."""

    def __init__(self, dim: int, heads: int, mlp: int, pre_norm: bool, causal: bool = False, eps: float = 1e-5,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.ln_1 = nn.LayerNorm(dim, eps=eps)
        self.attn = SelfAttention(dim, heads, causal)
        self.drop_1 = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(dim, eps=eps)
        self.fc = nn.Linear(dim, mlp)
        self.act = nn.GELU()
        self.fc_out = nn.Linear(mlp, dim)
        self.drop_2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.drop_1(self.attn(self.ln_1(x)))
            return x + self.drop_2(self.fc_out(self.act(self.fc(self.ln_2(x)))))
        x = self.ln_1(x + self.drop_1(self.attn(x)))
        return self.ln_2(x + self.drop_2(self.fc_out(self.act(self.fc(x)))))


class _BertEncoder(nn.Module):
    """BERT's embeddings and post-norm encoder, shared by the pre-training and SQuAD models (the
    attribute names are the module names profiles record)."""

    def __init__(self, dim: int, depth: int, heads: int, vocab: int = 30522, max_pos: int = 512) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)
        self.position_embeddings = nn.Embedding(max_pos, dim)
        self.token_type_embeddings = nn.Embedding(2, dim)
        self.embeddings_ln = nn.LayerNorm(dim, eps=1e-12)
        self.embeddings_drop = nn.Dropout(0.1)
        self.layers = nn.ModuleList(TransformerBlock(dim, heads, 4 * dim, pre_norm=False, eps=1e-12) for _ in range(depth))

    def encode(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(pos) + self.token_type_embeddings(torch.zeros_like(ids))
        x = self.embeddings_drop(self.embeddings_ln(x))
        for layer in self.layers:
            x = layer(x)
        return x


class Bert(_BertEncoder):
    """BERT with the pre-training heads (masked LM, tied to the word embeddings, and next sentence),
    as BertForPreTraining: 110,106,428 parameters for base, 336,226,108 for large."""

    def __init__(self, dim: int, depth: int, heads: int, vocab: int = 30522, max_pos: int = 512) -> None:
        super().__init__(dim, depth, heads, vocab, max_pos)
        self.pooler = nn.Linear(dim, dim)
        self.pooler_act = nn.Tanh()
        self.cls_transform = nn.Linear(dim, dim)
        self.cls_act = nn.GELU()
        self.cls_ln = nn.LayerNorm(dim, eps=1e-12)
        self.cls_decoder = nn.Linear(dim, vocab)
        self.cls_decoder.weight = self.word_embeddings.weight  # tied, as in the reference
        self.cls_nsp = nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.encode(ids)
        nsp = self.cls_nsp(self.pooler_act(self.pooler(x[:, 0])))
        mlm = self.cls_decoder(self.cls_ln(self.cls_act(self.cls_transform(x))))
        # One scalar training loss (cross-entropy against the inputs stands in for the MLM labels).
        return nn.functional.cross_entropy(mlm.flatten(0, 1), ids.flatten()) + nsp.float().logsumexp(-1).mean()


class GPT2(nn.Module):
    """GPT-2 language model with the output head tied to the token embeddings."""

    def __init__(self, dim: int, depth: int, heads: int, vocab: int = 50257, ctx: int = 1024) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(ctx, dim)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(TransformerBlock(dim, heads, 4 * dim, pre_norm=True, causal=True) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


class BertSquad(_BertEncoder):
    """BERT fine-tuned for extractive question answering (SQuAD), as BertForQuestionAnswering: the
    encoder without pooler or pre-training heads, and a span head (start/end logits per token):
    108,893,186 parameters for base, 334,094,338 for large."""

    def __init__(self, dim: int, depth: int, heads: int, vocab: int = 30522, max_pos: int = 512) -> None:
        super().__init__(dim, depth, heads, vocab, max_pos)
        self.qa_outputs = nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        start, end = self.qa_outputs(self.encode(ids)).float().unbind(-1)
        # Span loss: cross-entropy of the start and end positions (position 0 stands in for labels).
        target = torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device)
        return (nn.functional.cross_entropy(start, target) + nn.functional.cross_entropy(end, target)) / 2


def bert_base() -> nn.Module:
    return Bert(768, 12, 12)


def bert_large() -> nn.Module:
    return Bert(1024, 24, 16)


def bert_base_squad() -> nn.Module:
    return BertSquad(768, 12, 12)


def bert_large_squad() -> nn.Module:
    return BertSquad(1024, 24, 16)


def gpt2() -> nn.Module:
    return GPT2(768, 12, 12)


def gpt2_medium() -> nn.Module:
    return GPT2(1024, 24, 16)

"""Fine-tune a small transformers BertForSequenceClassification built from a config (no download),
on the GPU when there is one.

    srift profile examples/train_bert.py --warmup 2 --iters 5 -- --batch-size 4 --seq-len 32
"""

import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=128, num_labels=2)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = BertForSequenceClassification(config).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(args.steps):
        ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device=device)
        labels = torch.randint(0, 2, (args.batch_size,), device=device)
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()

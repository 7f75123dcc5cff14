"""DistributedDataParallel training (gloo on CPU, NCCL on GPUs), launched by torchrun.

    torchrun --nproc_per_node 2 --no-python srift profile examples/train_ddp.py --warmup 2 --iters 5
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)  # NCCL and CUDA's current stream follow the current device
    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    # Small buckets so that even this small model makes several all-reduce buckets.
    ddp = DDP(model, device_ids=[device] if cuda else None, bucket_cap_mb=0.1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    try:
        for _ in range(args.steps):
            x = torch.randn(args.batch_size, 64, device=device)
            y = torch.randint(0, 10, (args.batch_size,), device=device)
            loss = loss_fn(ddp(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

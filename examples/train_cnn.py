"""A plain CNN training script: argparse, `if __name__ == "__main__":`, a DataLoader.

Run it alone (`python examples/train_cnn.py --epochs 1`) or under srift:
    srift profile examples/train_cnn.py --warmup 2 --iters 5 -- --batch-size 8
Options: --workers N (DataLoader worker processes), --amp (CPU autocast bf16 / CUDA fp16 with a
GradScaler), --accum K (gradient accumulation: K backward passes per optimizer step).
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc = nn.Linear(32 * 8 * 8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--accum", type=int, default=1)
    parser.add_argument("--samples", type=int, default=256)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = TensorDataset(torch.randn(args.samples, 3, 32, 32), torch.randint(0, 10, (args.samples,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, drop_last=True)
    model = SmallCNN().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    # GradScaler only matters for fp16 on CUDA; on CPU (bf16) it is disabled and passes through.
    scaler = torch.amp.GradScaler(device, enabled=args.amp and device == "cuda")
    amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(args.epochs):
        for i, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            with torch.autocast(device, dtype=amp_dtype, enabled=args.amp):
                loss = loss_fn(model(x), y) / args.accum
            scaler.scale(loss).backward()
            if (i + 1) % args.accum == 0:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()

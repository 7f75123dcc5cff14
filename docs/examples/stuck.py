"""A script whose DataLoader workers never deliver a batch (docs/limits.md quotes what
`srift profile --timeout` says of it)."""
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Stuck(Dataset):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(3600)  # a read from a storage that never answers
        return torch.randn(4)


if __name__ == "__main__":
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in DataLoader(Stuck(), batch_size=2, num_workers=2):
        model(x).sum().backward()
        opt.step()

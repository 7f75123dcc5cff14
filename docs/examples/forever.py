"""A script that trains without an optimizer step: three forward and backward passes, then it waits
for ever (docs/limits.md quotes what `srift profile --timeout` says of it)."""
import time

import torch

model = torch.nn.Linear(4, 2)
for _ in range(3):
    model(torch.randn(8, 4)).sum().backward()
time.sleep(3600)  # waiting for an update that never comes

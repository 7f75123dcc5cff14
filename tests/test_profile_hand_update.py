"""A script that updates its parameters itself after backward, without torch.optim (pytorch/examples'
word_language_model), is refused with the fix after a few iterations, not at the timeout (issue 41)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

# word_language_model's loop (main.py's train()): sequence-first LSTM, clip, then
# `p.data.add_(p.grad, alpha=-lr)` for every parameter; runs for ever unless stopped.
SCRIPT = textwrap.dedent('''
    import torch
    from torch import nn

    class RNNModel(nn.Module):
        def __init__(self, ntoken=50, ninp=16, nhid=16):
            super().__init__()
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, 2)
            self.decoder = nn.Linear(nhid, ntoken)
        def forward(self, x, hidden):
            out, hidden = self.rnn(self.encoder(x), hidden)
            return self.decoder(out), hidden

    model = RNNModel()
    criterion = nn.CrossEntropyLoss()
    lr = 20.0
    while True:
        data, targets = torch.randint(0, 50, (35, 4)), torch.randint(0, 50, (35 * 4,))
        hidden = (torch.zeros(2, 4, 16), torch.zeros(2, 4, 16))
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, 50), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
''')


def test_a_hand_written_update_is_refused_with_the_fix(tmp_path: Path) -> None:
    script = tmp_path / "main.py"
    script.write_text(SCRIPT)
    out = tmp_path / "p.yaml"
    res = subprocess.run([sys.executable, "-m", "srift.cli", "profile", str(script), "-o", str(out)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "updated its model's parameters itself 2 times" in res.stderr
    assert "To fix: use a torch.optim optimizer" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


def test_gradient_accumulation_is_not_a_hand_update() -> None:
    import torch
    from torch import nn

    from srift.profiling.hooks import ModelFinder

    finder = ModelFinder()
    seen: list[int] = []
    finder.hand_updates.on_update = seen.append
    try:
        model = nn.Linear(4, 2)
        for _ in range(4):  # four micro-batches, no update: the parameters stay as they were
            model(torch.randn(3, 4)).sum().backward()
        assert seen == []
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        model(torch.randn(3, 4)).sum().backward()
        assert seen == [1]
    finally:
        finder.remove()

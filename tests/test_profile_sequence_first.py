"""Sequence-first inputs are read from the model's own ``batch_first`` flags (issue 41): an LSTM,
``nn.Transformer`` and ``nn.TransformerEncoder`` at PyTorch's default take (sequence, batch, ...);
the batch and the sequence length must not be swapped, and the half-batch analysis cuts the batch
dimension, not the sequence."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from srift.profile import Profile

torch = pytest.importorskip("torch")
nn = torch.nn

from srift.profiling.batch_timing import sub_batch  # noqa: E402
from srift.profiling.layout import InputShape, SequenceLayout  # noqa: E402


class LstmLM(nn.Module):
    """pytorch/examples word_language_model's RNNModel, small."""

    def __init__(self, batch_first: bool = False, transpose: bool = False) -> None:
        super().__init__()
        self.encoder = nn.Embedding(50, 16)
        self.rnn = nn.LSTM(16, 16, 2, batch_first=batch_first)
        self.decoder = nn.Linear(16, 50)
        self.transpose = transpose

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.transpose:  # batch-first ids, turned sequence-first for the LSTM by the model itself
            x = x.t()
        out, _ = self.rnn(self.encoder(x))
        return self.decoder(out)


def _shape(model: nn.Module, x: torch.Tensor, *more: torch.Tensor) -> InputShape:
    layout = SequenceLayout(model)
    model(x, *more)
    assert layout.seen is not None
    return layout.input_shape(x)


def test_a_sequence_first_lstm_reads_batch_from_dimension_1() -> None:
    # word_language_model: ids (bptt 35, batch 20) -> batch 20, sequence 35
    assert _shape(LstmLM(), torch.randint(0, 50, (35, 20))) == InputShape(20, 35, batch_dim=1)


def test_a_batch_first_lstm_keeps_dimension_0() -> None:
    assert _shape(LstmLM(batch_first=True), torch.randint(0, 50, (20, 35))) == InputShape(20, 35, batch_dim=0)


def test_a_model_that_transposes_its_own_input_is_read_by_sizes_not_the_flag() -> None:
    assert _shape(LstmLM(transpose=True), torch.randint(0, 50, (20, 35))) == InputShape(20, 35, batch_dim=0)


def test_nn_transformer_default_is_sequence_first() -> None:
    model = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32)
    src, tgt = torch.randn(12, 3, 16), torch.randn(7, 3, 16)  # (S, N, E), (T, N, E)
    assert _shape(model, src, tgt) == InputShape(3, 12, batch_dim=1)


def test_a_transformer_encoder_behind_an_embedding_is_sequence_first() -> None:
    layer = nn.TransformerEncoderLayer(16, 2, 32)  # batch_first=False by default
    model = nn.Sequential(nn.Embedding(50, 16), nn.TransformerEncoder(layer, 2, enable_nested_tensor=False))
    assert _shape(model, torch.randint(0, 50, (24, 5))) == InputShape(5, 24, batch_dim=1)


def test_a_model_without_sequence_modules_is_unchanged() -> None:
    mlp = nn.Sequential(nn.Linear(8, 4))
    assert _shape_or_none(mlp, torch.randn(6, 8)) == InputShape(6, None)
    gpt_like = nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 50))  # ids (batch, seq): no flag to read
    assert _shape_or_none(gpt_like, torch.randint(0, 50, (4, 32))) == InputShape(4, 32)


def _shape_or_none(model: nn.Module, x: torch.Tensor) -> InputShape:
    layout = SequenceLayout(model)
    model(x)
    assert layout.seen is None
    return layout.input_shape(x)


def test_sub_batch_cuts_the_batch_dimension_of_sequence_first_tensors() -> None:
    ids, hidden, targets = torch.zeros(35, 20), torch.zeros(2, 20, 16), torch.zeros(35 * 20)
    cut = sub_batch((ids, (hidden, hidden)), 20, 10, dim=1)
    assert cut[0].shape == (35, 10) and cut[1][0].shape == (2, 10, 16)
    assert sub_batch(targets, 20, 10, dim=1).shape == (700,)  # no batch dimension 1: left as it is
    assert sub_batch(torch.zeros(20, 35), 20, 10).shape == (10, 35)  # the default: dimension 0


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
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for _ in range(40):
        data, targets = torch.randint(0, 50, (35, 6)), torch.randint(0, 50, (35 * 6,))
        hidden = (torch.zeros(2, 6, 16), torch.zeros(2, 6, 16))
        opt.zero_grad()
        output, hidden = model(data, hidden)
        criterion(output.view(-1, 50), targets).backward()
        opt.step()
''')


def test_a_sequence_first_script_profiles_batch_6_of_35_tokens(tmp_path: Path) -> None:
    script = tmp_path / "main.py"
    script.write_text(SCRIPT)
    out = tmp_path / "p.yaml"
    res = subprocess.run([sys.executable, "-m", "srift.cli", "profile", str(script), "--warmup", "2", "--iters", "3",
                          "-o", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    prof = Profile.load(out)
    assert (prof.batch_size, prof.seq_len) == (6, 35)
    # The decoder's forward: 2 * 35 * 6 tokens * 16 * 50 (+ bias), whichever way the ids are read;
    # input bytes per sample: 35 int64 ids and the hidden state (h, c: 2 layers x 16 fp32).
    dec = next(la for la in prof.layers if la.name.endswith("decoder"))
    assert dec.fwd_flops == pytest.approx(2 * 35 * 6 * 16 * 50, rel=0.05)
    assert prof.input_bytes_per_sample == pytest.approx(35 * 8 + 2 * (2 * 16 * 4), rel=0.01)

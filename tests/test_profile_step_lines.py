"""`srift profile` is never silent for minutes where standard error is not a terminal: one line as
each phase begins (warm-up, measured steps, srift's hook-cost pairs) and at most every 10 s."""

from __future__ import annotations

import io

from srift.profiling.step_lines import LINE_EVERY_S, StepLines


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_line_when_each_phase_begins_and_then_every_ten_seconds(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    out, clock = io.StringIO(), _Clock()
    lines = StepLines(warmup=2, iters=3, stream=out, clock=clock)
    lines.start()
    for step in range(1, 10):  # 2 warm-up, 3 measured, 4 of srift's pair steps
        clock.now += 1.0
        lines.update(0, completed=step, total=9)
    text = out.getvalue().splitlines()
    assert [t.split(" (", 1)[1].rsplit("), ", 1)[0] for t in text] == [
        "warm-up", "measured steps", "srift's hook-cost pairs: steps without and with its hooks"]
    assert text[0] == "srift profile: step 1 of 9 (warm-up), 1 s"
    clock.now += LINE_EVERY_S  # a long step within a phase: one more line
    lines.update(0, completed=9, total=9)
    assert len(out.getvalue().splitlines()) == 4


def test_only_rank_zero_speaks_under_torchrun(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    out = io.StringIO()
    lines = StepLines(warmup=1, iters=1, stream=out)
    lines.update(0, completed=1, total=2)
    assert out.getvalue() == ""

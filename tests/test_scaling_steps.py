"""srift.fitting.scaling_steps: the seconds behind a multi-node error (scripts/scaling_steps.py),
on the real DLPerf rows (data/dlperf-v100-ib)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from srift.fitting import multinode_data as MD
from srift.fitting.scaling_steps import steps_table

DATA = Path(__file__).resolve().parents[1] / "data"


def test_each_multi_node_row_gets_its_jobs_one_gpu_and_one_node_steps():
    rows = MD.load_dlperf(DATA)
    job = "bert-base/amp/64/FP16 (apex amp) BERT-Base batch_size = 64"
    rows = rows[rows["job"] == job].reset_index(drop=True)
    # A prediction of 0.1 s on 1 GPU, 0.12 s on 4 or 8 GPUs of one node and 0.15 s across nodes.
    pred = pd.Series([0.1 if n == 1 else 0.12 if k == 1 else 0.15 for n, k in zip(rows["n_gpus"], rows["nodes"])])
    table = steps_table(rows, pred)
    assert list(table["gpus"]) == [16, 32]
    two = table.iloc[0]
    # The source's samples/s: 444.51 on 1 GPU, 3251.7 on 8, 4936.92 on 16 GPUs, at 64 per GPU.
    one_ms, node_ms, two_ms = 64 / 444.51 * 1e3, 64 * 8 / 3251.7 * 1e3, 64 * 16 / 4936.92 * 1e3
    assert two["1 GPU meas"] == pytest.approx(one_ms)
    assert two["+node meas"] == pytest.approx(node_ms - one_ms)  # 13.5 ms
    assert two["+network meas"] == pytest.approx(two_ms - node_ms)  # 50.0 ms
    assert two["+node pred"] == pytest.approx(20.0)
    assert two["+network pred"] == pytest.approx(30.0)
    assert two["network"] == "infiniband-edr"


def test_a_job_without_a_one_gpu_run_has_no_steps():
    rows = MD.load_dlperf(DATA)
    rows = rows[(rows["model"] == "resnet50") & (rows["n_gpus"] > 1)].reset_index(drop=True)
    assert steps_table(rows, pd.Series([0.3] * len(rows))).empty

"""The input-pipeline model: data-loading seconds per iteration from vCPUs, batch and image size."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from srift.errors import SriftError
from srift.perf import input as I

# Round figures so that every expected value below is checked by hand, not by the formula.
P = I.InputParams(images_per_s_per_vcpu=200.0, images_per_s_per_vcpu_slow=160.0, reference_image_size=224,
                  source_share=0.75, reserved_vcpus_per_gpu=1.0, token_s_per_token=1e-8, source="test")


def test_images_use_the_vcpus_left_after_the_training_process():
    # g5.xlarge: 4 vCPUs, 1 GPU -> 3 for the loader: 64 / (200 x 3) s; the slowest trial 64 / (160 x 3).
    t = I.input_time("images", 64, 4, params=P)
    assert t.time_s == pytest.approx(64 / 600)
    assert t.slow_time_s == pytest.approx(64 / 480)
    assert t.kind == "images" and "3 vCPUs per GPU" in t.basis
    # g5.2xlarge: 8 vCPUs, 1 GPU -> 7: 64 / 1400 s, 7/3 times faster than g5.xlarge.
    assert I.input_time_s("images", 64, 8, params=P) == pytest.approx(64 / 1400)
    # p4d.24xlarge: 96 vCPUs for 8 GPUs -> 12 per GPU, 11 for its loader.
    assert I.input_time_s("images", 64, 96 / 8, params=P) == pytest.approx(64 / 2200)


def test_the_crop_size_scales_only_the_output_side_of_the_cost():
    # 448 px: 0.75 + 0.25 x (448/224)^2 = 1.75 times the 224-px cost per image.
    assert I.input_time_s("images", 64, 8, image_size=448, params=P) == pytest.approx(64 * 1.75 / 1400)
    # 112 px: 0.75 + 0.25 / 4 = 0.8125 (decode and resize still read the whole source image).
    assert I.input_time_s("images", 64, 8, image_size=112, params=P) == pytest.approx(64 * 0.8125 / 1400)
    assert P.image_rate_per_vcpu(224) == pytest.approx(200.0)


def test_tokens_cost_next_to_nothing():
    # 8 samples x 2048 tokens x 10 ns over 7 vCPUs = 23.4 us.
    assert I.input_time_s("tokens", 8, 8, seq_len=2048, params=P) == pytest.approx(8 * 2048 * 1e-8 / 7)


def test_synthetic_is_free_and_a_measured_data_time_wins_over_the_model():
    assert I.input_time_s("synthetic", 64, 4, params=P) == 0.0
    assert I.input_time_s("synthetic", 64, 4, measured_data_s=0.05, params=P) == 0.0
    m = I.input_time("images", 64, 4, measured_data_s=0.012, params=P)
    assert (m.kind, m.time_s, m.slow_time_s) == ("measured", 0.012, 0.012)
    assert I.input_time_s("tokens", 8, 8, seq_len=512, measured_data_s=0.0, params=P) == 0.0


@pytest.mark.parametrize("call, says", [
    (lambda: I.input_time("jpeg", 64, 8, params=P), "unknown data loading 'jpeg'"),
    (lambda: I.input_time("images", 64, 1, params=P), "leave none for data loading"),
    (lambda: I.input_time("images", 0, 8, params=P), "samples per GPU"),
    (lambda: I.input_time("images", 64, float("nan"), params=P), "vCPUs per GPU"),
    (lambda: I.input_time("images", 64, 8, image_size=0, params=P), "image size"),
    (lambda: I.input_time("images", 64, 8, measured_data_s=-1.0, params=P), "measured data time"),
    (lambda: I.input_time("tokens", 8, 8, params=P), "sequence length"),
    (lambda: I.input_time("images", True, 8, params=P), "samples per GPU"),
])
def test_bad_input_is_a_srift_error_with_a_hint(call, says):
    with pytest.raises(SriftError) as e:
        call()
    assert says in e.value.message and e.value.hint


def _doc(**images: object) -> dict:
    base = {"images_per_s_per_vcpu": {"mean": 200.0, "min": 160.0}, "reference_image_size": 224,
            "source_share_at_reference": 0.75}
    base.update(images)
    return {"schema": I.SCHEMA, "images": base, "tokens": {"s_per_token": 1e-8},
            "assumptions": {"reserved_vcpus_per_gpu": 1.0}}


def test_params_read_the_measurement_file(tmp_path):
    path = tmp_path / "input.json"
    path.write_text(json.dumps(_doc()))
    got = I.load_params(str(path))
    assert (got.images_per_s_per_vcpu, got.images_per_s_per_vcpu_slow, got.source_share, got.token_s_per_token) == (
        200.0, 160.0, 0.75, 1e-8)
    for bad in ({**_doc(), "schema": "other/v1"}, {k: v for k, v in _doc().items() if k != "tokens"},
                _doc(source_share_at_reference=1.5), _doc(images_per_s_per_vcpu={"mean": 100.0, "min": 160.0})):
        with pytest.raises(SriftError):
            I.InputParams.from_dict(bad, "bad.json")


def test_the_shipped_figures_come_from_a_recorded_measurement():
    doc = json.loads(I.params_path().read_text())
    got = I.load_params()
    assert doc["schema"] == I.SCHEMA and got.images_per_s_per_vcpu > 0 and 0 < got.source_share < 1
    meas = doc["measurement"]
    assert meas["command"].startswith("python scripts/measure_input_pipeline.py")
    assert meas["machine"]["lscpu_model_name"] and meas["machine"]["pillow"]
    assert len(meas["load_average_before"]) == 3 and len(meas["load_average_after"]) == 3
    # The per-vCPU rate is the measured per-core rate times the stated hyperthread factor.
    factor = doc["assumptions"]["vcpu_factor"]
    assert got.images_per_s_per_vcpu == pytest.approx(doc["images"]["images_per_s_per_core"]["mean"] * factor, abs=0.01)
    # Whatever the rate: g5.2xlarge's 7 loader vCPUs prepare a batch 7/3 times faster than g5.xlarge's 3.
    assert I.input_time_s("images", 32, 4) / I.input_time_s("images", 32, 8) == pytest.approx(7 / 3)


def test_the_model_does_not_import_torch():
    code = "import sys, srift.perf.input; assert 'torch' not in sys.modules, 'torch imported'"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr

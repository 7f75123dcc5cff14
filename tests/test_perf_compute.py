"""Compute model: roofline by hand, anchoring, cross-GPU scaling, optimizer step, shipped fit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from srift.errors import SriftError
from srift.hardware import gpu as gpu_spec
from srift.hardware import gpus
from srift.perf import compute as C
from srift.profile import DeviceInfo, LayerProfile, PhaseTimes, Profile

# 50% of peak FLOP/s for every kind, 80% of bandwidth, no fixed costs: easy to do by hand.
FLAT = C.ComputeParams(
    features=("one",), inv_eff={"other": (2.0,)}, inv_eff_mem=(1.25,),
    launch_s=0.0, optimizer_s_per_tensor=0.0, overhead_s=0.0,
)


def _profile(**kw) -> Profile:
    layers = [
        # compute-bound: 1 TFLOP forward, 2 TFLOP backward, few bytes
        LayerProfile("fc", "Linear", params=1_000_000, grad_bytes=4_000_000, fwd_flops=1e12, bwd_flops=2e12, fwd_bytes=1e6, bwd_bytes=2e6),
        # memory-bound: no FLOPs, 0.9 GB moved forward, 1.8 GB backward
        LayerProfile("act", "ReLU", fwd_flops=0.0, bwd_flops=0.0, fwd_bytes=9e8, bwd_bytes=1.8e9),
    ]
    return Profile(name="toy", batch_size=32, precision="fp32", layers=layers, **kw)


def test_roofline_by_hand_on_v100():
    lt = C.layer_times(_profile(), "V100-16GB", "fp32", params=FLAT)
    peak, bw = 15.7e12, 900e9
    assert lt.fwd_s[0] == pytest.approx(1e12 * 2.0 / peak)
    assert lt.bwd_s[0] == pytest.approx(2e12 * 2.0 / peak)
    assert lt.fwd_s[1] == pytest.approx(9e8 * 1.25 / bw)  # 1.25 ms
    assert lt.bwd_s[1] == pytest.approx(1.8e9 * 1.25 / bw)
    assert not lt.anchored


def test_efficiency_never_exceeds_the_physical_ceilings():
    # Coefficients asking for 200% of peak and 500% of bandwidth are held at 80% and 90%.
    greedy = dataclasses.replace(FLAT, inv_eff={"other": (0.5,)}, inv_eff_mem=(0.2,))
    lt = C.layer_times(_profile(), "V100-16GB", "fp32", params=greedy)
    assert lt.fwd_s[0] == pytest.approx(1e12 / (0.8 * 15.7e12))
    assert lt.fwd_s[1] == pytest.approx(9e8 / (0.9 * 900e9))


def test_layer_exactly_at_its_roofline_takes_the_ridge_time():
    # F / (P * 0.5) == B / (BW * 0.8): both ceilings give the same time, and max() returns it once.
    peak, bw = 15.7e12, 900e9
    flops = 1e10
    bytes_ = flops * 2.0 / peak * bw / 1.25
    p = Profile("ridge", 1, "fp32", [LayerProfile("c", "Conv2d", fwd_flops=flops, fwd_bytes=bytes_)])
    lt = C.layer_times(p, "V100-16GB", "fp32", params=FLAT)
    assert lt.fwd_s[0] == pytest.approx(flops * 2.0 / peak)
    assert lt.fwd_s[0] == pytest.approx(bytes_ * 1.25 / bw)


def test_launch_and_overhead_add_per_pass_and_per_iteration():
    params = dataclasses.replace(FLAT, launch_s=1e-5, overhead_s=2e-3)
    lt = C.layer_times(_profile(), "V100-16GB", "fp32", params=params)
    base = C.layer_times(_profile(), "V100-16GB", "fp32", params=FLAT)
    np.testing.assert_allclose(lt.fwd_s - base.fwd_s, 1e-5)
    np.testing.assert_allclose(lt.bwd_s - base.bwd_s, 1e-5)
    assert lt.overhead_s == 2e-3


def test_amp_halves_activation_bytes_of_an_fp32_profile():
    fp32 = C.layer_times(_profile(), "A100-40GB", "fp32", params=FLAT)
    amp = C.layer_times(_profile(), "A100-40GB", "amp", params=FLAT)
    assert amp.fwd_s[1] == pytest.approx(fp32.fwd_s[1] / 2)
    # and the compute-bound layer runs at the fp16 tensor peak
    assert amp.fwd_s[0] == pytest.approx(1e12 * 2.0 / 312e12)


def test_optimizer_step_by_hand():
    p = _profile(framework={"torch": "1.13.0"})  # 1e6 params, SGD momentum: 4 bytes of state per parameter
    per_tensor = 3e-6
    params = dataclasses.replace(FLAT, optimizer_s_per_tensor=per_tensor)
    # weight read+write 8, grad read 4, state read+write 8 = 20 bytes per parameter; PyTorch 1.x
    # loops over the 2 tensors: 2 dispatches
    expected = 1e6 * 20 * 1.25 / 900e9 + 2 * per_tensor
    assert C.optimizer_time_s(p, "V100-16GB", "fp32", params) == pytest.approx(expected)
    assert C.layer_times(p, "V100-16GB", "fp32", params=params).optimizer_s == pytest.approx(expected)
    # PyTorch 2.x (and a profile that states no version): one foreach dispatch for both tensors
    for framework in ({"torch": "2.3.1"}, {}):
        p2 = _profile(framework=framework)
        assert C.optimizer_time_s(p2, "V100-16GB", "fp32", params) == pytest.approx(1e6 * 20 * 1.25 / 900e9 + per_tensor)


def test_resnet50_optimizer_step_per_tensor_and_foreach():
    """ResNet-50's 161 parameter tensors: 161 dispatches under PyTorch 1.x's loop, ceil(161 / 48) = 4
    under foreach; the shipped fit's cost per dispatch times the difference (157) is what 2.x saves.
    The shipped profile (what predict and recommend load without torch) counts the same."""
    from srift.zoo import load_builtin_profile
    from srift.zoo.models import structural_profile
    from srift.zoo.vision import resnet50

    base = structural_profile("resnet50", batch_size=32)
    n = C.layer_arrays(base).n_param_tensors
    # torchvision's resnet50 has len(list(model.parameters())) == 161: 53 bias-free convolutions (a
    # weight), 53 batch norms (weight, bias) and the fc (weight, bias); the zoo's module is the same.
    assert n == 53 + 2 * 53 + 2 == 161 == len(list(resnet50().parameters()))
    assert C.layer_arrays(load_builtin_profile("resnet50", 32)).n_param_tensors == 161
    old = dataclasses.replace(base, framework={**base.framework, "torch": "1.11.0+cu115"})
    new = dataclasses.replace(base, framework={**base.framework, "torch": "2.0.0+cu117"})
    params = C.load_params()
    saved = C.optimizer_time_s(old, "A100-40GB", "fp32", params) - C.optimizer_time_s(new, "A100-40GB", "fp32", params)
    assert saved == pytest.approx((161 - 4) * params.optimizer_s_per_tensor)  # 161 dispatches, then ceil(161 / 48)


def _measured_on(gpu: str) -> Profile:
    p = _profile(device=DeviceInfo(gpu, "cuda", gpu), iterations=10)
    p.layers[0].fwd_s, p.layers[0].bwd_s = 0.150, 0.310
    p.layers[1].fwd_s, p.layers[1].bwd_s = 0.0012, 0.0021
    p.phases = PhaseTimes(data_s=0.01, forward_s=0.16, backward_s=0.32, optimizer_s=0.004, total_s=0.50)
    return p


def test_anchored_on_the_same_gpu_returns_measured_times_exactly():
    p = _measured_on("V100-16GB")
    lt = C.layer_times(p, "V100-16GB", "fp32")
    assert lt.anchored
    np.testing.assert_array_equal(lt.fwd_s, [0.150, 0.0012])
    np.testing.assert_array_equal(lt.bwd_s, [0.310, 0.0021])
    assert lt.optimizer_s == 0.004
    # what no layer, the optimizer or data loading explain: 0.50 - 0.01 - 0.1512 - 0.3121 - 0.004
    assert lt.overhead_s == pytest.approx(0.50 - 0.01 - 0.1512 - 0.3121 - 0.004)


def test_anchored_alias_of_the_gpu_also_counts_as_the_same_gpu():
    p = _measured_on("Tesla V100-SXM2-16GB")
    lt = C.layer_times(p, "V100-16GB", "fp32")
    np.testing.assert_array_equal(lt.fwd_s, [0.150, 0.0012])


def test_scaling_to_another_gpu_follows_the_model_ratio_per_layer():
    # FLAT carries the whole departure over (anchor_weight 1): each layer scales by the model ratio.
    p = _measured_on("V100-16GB")
    src = C.layer_times(_profile(), "V100-16GB", "fp32", params=FLAT)
    dst = C.layer_times(_profile(), "A100-40GB", "fp32", params=FLAT)
    lt = C.layer_times(p, "A100-40GB", "fp32", params=FLAT)
    assert lt.anchored
    np.testing.assert_allclose(lt.fwd_s, np.array([0.150, 0.0012]) * dst.fwd_s / src.fwd_s)
    np.testing.assert_allclose(lt.bwd_s, np.array([0.310, 0.0021]) * dst.bwd_s / src.bwd_s)
    # compute-bound layer: fp32 peak ratio 15.7 / 19.5; memory-bound: bandwidth ratio 900 / 1555
    assert lt.fwd_s[0] == pytest.approx(0.150 * 15.7 / 19.5)
    assert lt.fwd_s[1] == pytest.approx(0.0012 * 900 / 1555)


def test_another_gpu_carries_only_part_of_the_measured_departure():
    # Measured on a V100 and scaled by the model's per-layer ratio (as above), the A100 layers sum
    # to 0.120769 + 0.249590 + 0.000695 + 0.001215 = 0.372269 s, plus the unattributed 0.0227 s x
    # (A100 / V100 model ratio 0.309862 / 0.385920) = 0.018226 s: r = 0.390495 / 0.309862 = 1.2602
    # times the model's own A100 prediction. With anchor_weight 0.3 and no clip the total is
    # model x r^0.3; with a clip at 0.2 (log), the part of log r beyond it is carried whole.
    p = _measured_on("V100-16GB")
    model = C.layer_times(_profile(), "A100-40GB", "fp32", params=FLAT)
    full = C.layer_times(p, "A100-40GB", "fp32", params=FLAT)
    r = (full.forward_s + full.backward_s + full.overhead_s) / (model.forward_s + model.backward_s)
    assert r == pytest.approx(0.390495 / 0.309862, rel=1e-5)
    part = C.layer_times(p, "A100-40GB", "fp32", params=dataclasses.replace(FLAT, anchor_weight=0.3))
    assert part.anchored
    assert part.forward_s + part.backward_s + part.overhead_s == pytest.approx((model.forward_s + model.backward_s) * r ** 0.3)
    # the measured split over layers is kept
    np.testing.assert_allclose(part.fwd_s / part.fwd_s.sum(), full.fwd_s / full.fwd_s.sum())
    clipped = C.layer_times(p, "A100-40GB", "fp32", params=dataclasses.replace(FLAT, anchor_weight=0.3, anchor_clip=0.2))
    expected = (model.forward_s + model.backward_s) * np.exp(0.3 * 0.2 + (np.log(r) - 0.2))
    assert clipped.forward_s + clipped.backward_s + clipped.overhead_s == pytest.approx(expected)
    # on the profiling GPU itself the measurement stands, whatever the weight
    same = C.layer_times(p, "V100-16GB", "fp32", params=dataclasses.replace(FLAT, anchor_weight=0.0))
    np.testing.assert_array_equal(same.fwd_s, [0.150, 0.0012])
    assert (same.anchored_from, part.anchored_from) == (None, "V100-16GB fp32")


def test_anchor_factor_by_hand():
    p = dataclasses.replace(FLAT, anchor_weight=0.3, anchor_clip=0.24)
    # log 2 = 0.693: 0.3 x 0.24 inside the clip + 0.453 beyond it = 0.525
    assert C.anchor_factor(2.0, p) == pytest.approx(np.exp(0.3 * 0.24 + np.log(2.0) - 0.24))
    assert C.anchor_factor(1.1, p) == pytest.approx(1.1 ** 0.3)
    assert C.anchor_factor(0.5, p) == pytest.approx(1 / C.anchor_factor(2.0, p))
    assert C.anchor_factor(1.7, FLAT) == pytest.approx(1.7)  # default: all of it


def test_bad_anchor_parameters_in_a_params_file_are_rejected():
    d = FLAT.to_dict()
    assert d["anchor_weight"] == 1.0 and d["anchor_clip"] is None
    assert C.ComputeParams.from_dict(d).anchor_clip == np.inf
    with pytest.raises(SriftError, match="anchor_weight must be in"):
        C.ComputeParams.from_dict({**d, "anchor_weight": 1.5})
    with pytest.raises(SriftError, match="anchor_weight must be in"):
        C.ComputeParams.from_dict({**d, "anchor_clip": -1})


def test_same_gpu_other_precision_scales_by_the_model_ratio():
    p = _measured_on("A100-40GB")
    fp32 = C.layer_times(_profile(), "A100-40GB", "fp32", params=FLAT)
    amp = C.layer_times(_profile(), "A100-40GB", "amp", params=FLAT)
    lt = C.layer_times(p, "A100-40GB", "amp", params=FLAT)
    assert lt.anchored
    np.testing.assert_allclose(lt.fwd_s, np.array([0.150, 0.0012]) * amp.fwd_s / fp32.fwd_s)
    # the memory-bound layer moves half the bytes under amp
    assert lt.fwd_s[1] == pytest.approx(0.0006)


def test_gpu_named_only_by_its_device_string_anchors():
    p = _measured_on("V100-16GB")
    p.device = DeviceInfo("Tesla V100-SXM2-16GB", "cuda")
    np.testing.assert_array_equal(C.layer_times(p, "V100-16GB", "fp32").fwd_s, [0.150, 0.0012])


def test_cpu_needs_a_cpu_measurement():
    with pytest.raises(SriftError, match="profile on this machine first"):
        C.layer_times(_profile(), "cpu", "fp32")
    with pytest.raises(SriftError, match="profile on this machine first"):
        C.layer_times(_measured_on("V100-16GB"), "cpu", "fp32")
    p = _profile(device=DeviceInfo("x86_64", "cpu"), iterations=5)
    p.layers[0].fwd_s, p.layers[0].bwd_s = 2.0, 4.0
    p.layers[1].fwd_s, p.layers[1].bwd_s = 0.5, 0.7
    p.phases = PhaseTimes(optimizer_s=0.1, total_s=7.5)
    lt = C.layer_times(p, "cpu", "fp32")
    np.testing.assert_array_equal(lt.fwd_s, [2.0, 0.5])
    assert lt.overhead_s == pytest.approx(7.5 - 2.5 - 4.7 - 0.1)


def test_cpu_measured_profile_predicts_gpus_from_structure():
    p = _profile(device=DeviceInfo("x86_64", "cpu"), iterations=5)
    p.layers[0].fwd_s = p.layers[0].bwd_s = p.layers[1].fwd_s = p.layers[1].bwd_s = 1.0
    lt = C.layer_times(p, "V100-16GB", "fp32", params=FLAT)
    assert not lt.anchored
    assert lt.fwd_s[0] == pytest.approx(1e12 * 2.0 / 15.7e12)


def test_bad_names_are_clear_errors():
    with pytest.raises(SriftError, match="unknown GPU"):
        C.layer_times(_profile(), "V1000", "fp32")
    with pytest.raises(SriftError, match="unknown precision"):
        C.layer_times(_profile(), "V100-16GB", "fp64")


def test_layer_kinds():
    assert C.layer_kind("Conv2d") == "conv"
    assert C.layer_kind("Linear") == "matmul"
    assert C.layer_kind("Conv1D") == "matmul"  # HF GPT-2's Linear
    assert C.layer_kind("BatchNorm2d") == "norm"
    assert C.layer_kind("LayerNorm") == "norm"
    assert C.layer_kind("BertSelfAttention") == "attention"
    assert C.layer_kind("MaxPool2d") == "pool"
    assert C.layer_kind("Embedding") == "embedding"
    assert C.layer_kind("GELUActivation") == "elementwise"


def test_shipped_fit_never_exceeds_peak_and_faster_gpus_are_faster():
    params = C.load_params()
    assert params.meta.get("sources"), "the shipped fit must name its data sources"
    p = _profile()
    times = {}
    for name in gpus():
        for precision in ("fp32", "tf32", "amp"):
            lt = C.layer_times(p, name, precision)
            spec = gpu_spec(name)
            # never faster than the roofline at 100% efficiency
            assert lt.fwd_s[0] >= 1e12 / spec.peak_flops(precision) * 0.999
            assert lt.fwd_s[1] >= 9e8 * (0.5 if precision == "amp" else 1.0) / spec.memory_bandwidth_bytes_per_s * 0.999
            times[(name, precision)] = lt.total_s
    assert times[("H100", "amp")] < times[("A100-40GB", "amp")] < times[("V100-16GB", "amp")] < times[("T4", "amp")]
    assert times[("A100-40GB", "tf32")] < times[("A100-40GB", "fp32")]


def test_params_round_trip_and_bad_file(tmp_path):
    params = C.load_params()
    again = C.ComputeParams.from_dict(params.to_dict())
    assert again.inv_eff == params.inv_eff and again.launch_s == params.launch_s
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SriftError, match="not valid JSON"):
        C.load_params(str(bad))


def test_a_t4_computes_at_its_sustained_clock_not_its_boost(monkeypatch):
    from srift.hardware import sustained_clock_mhz

    # Cube law of dynamic power against Turing's full-power card (TITAN RTX: 1770 MHz, 72 SMs,
    # 280 W): a T4 (70 W, 40 SMs) holds 1770 x ((70/40) / (280/72)) ** (1/3) = 1770 x 0.45 ** (1/3)
    # = 1356.4 MHz under load, not its 1590 MHz boost.
    by_hand = 1770.0 * 0.45 ** (1.0 / 3.0)
    assert by_hand == pytest.approx(1356.4, abs=0.1)
    assert sustained_clock_mhz(1590.0, 40, 70.0, (1770.0, 72, 280.0)) == pytest.approx(by_hand)
    t4 = gpu_spec("T4")
    assert t4.sustained_clock_mhz == pytest.approx(by_hand) and t4.clock_derate == pytest.approx(1590.0 / by_hand)
    # A card whose power per SM is the reference's or more keeps its boost (A10G at 300 W: 3.75 W/SM).
    assert gpu_spec("A10G").clock_derate == 1.0 and gpu_spec("Titan-RTX").clock_derate == 1.0
    # A compute-bound layer: FLOPs / (peak x efficiency) at the boost clock, x 1590 / 1356.4 (17 %
    # longer); the memory-bound layer keeps its time (DRAM does not follow the core clock).
    prof = _profile()
    at_sustained = C.layer_times(prof, "T4", "fp32-strict", FLAT)
    monkeypatch.setattr(C, "gpu_spec", lambda name: dataclasses.replace(gpu_spec(name), sustained_clock_mhz=0.0))
    at_boost = C.layer_times(prof, "T4", "fp32-strict", dataclasses.replace(FLAT))
    assert at_boost.fwd_s[0] == pytest.approx(1e12 * 2.0 / 8.1e12)  # 50 % of the datasheet's 8.1 TFLOP/s
    assert at_sustained.fwd_s[0] == pytest.approx(1e12 * 2.0 / 8.1e12 * 1590.0 / by_hand)
    assert at_sustained.fwd_s[1] == pytest.approx(at_boost.fwd_s[1]) == pytest.approx(9e8 * 1.25 / 320e9)

"""Profile schema: round trip, validation messages, rescaling by batch and sequence length."""

import pytest
import yaml

from srift.errors import SriftError
from srift.profile import SCHEMA, DeviceInfo, LayerProfile, OptimizerInfo, PhaseTimes, Profile


def _profile(**kw):
    layers = [
        LayerProfile("conv", "Conv2d", params=100, grad_bytes=400, fwd_flops=1000.0, bwd_flops=2000.0,
                     activation_bytes=64.0, fwd_s=0.01, bwd_s=0.02, grad_ready_order=1,
                     kfac_a_dim=10, kfac_g_dim=10, kfac_spatial=4),
        LayerProfile("attn", "Attention", fwd_flops=600.0, bwd_flops=1200.0, fwd_flops_seq2=200.0,
                     bwd_flops_seq2=400.0, activation_bytes=32.0, activation_bytes_seq2=16.0),
        LayerProfile("fc", "Linear", params=10, grad_bytes=40, fwd_flops=20.0, bwd_flops=40.0, grad_ready_order=0),
    ]
    base = dict(name="toy", batch_size=8, precision="fp32", layers=layers, seq_len=16,
                phases=PhaseTimes(data_s=0.004, forward_s=0.02, backward_s=0.04, optimizer_s=0.003))
    base.update(kw)
    return Profile(**base)


def test_round_trip_through_yaml(tmp_path):
    p = _profile()
    path = p.save(tmp_path / "p.yaml")
    text = path.read_text()
    assert text.startswith(f"schema: {SCHEMA}")
    q = Profile.load(path)
    assert q.to_dict() == p.to_dict()
    assert q.params == 110 and q.grad_bytes == 440
    assert q.measured



def test_device_and_optimizer_parse_into_their_nouns_and_write_the_same_keys(tmp_path):
    doc = _profile().to_dict()
    doc["device"] = {"name": "NVIDIA A10G", "kind": "cuda", "gpu": "A10G"}
    doc["optimizer"] = {"type": "AdamW", "state_bytes_per_param": 8}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    q = Profile.load(path)
    assert q.device == DeviceInfo("NVIDIA A10G", "cuda", "A10G") and q.optimizer == OptimizerInfo("AdamW", 8)
    assert q.to_dict()["device"] == doc["device"] and q.to_dict()["optimizer"] == doc["optimizer"]
    # Without them: nothing measured on a device, SGD with momentum (4 bytes of state per parameter).
    del doc["device"], doc["optimizer"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    bare = Profile.load(path)
    assert bare.device == DeviceInfo("none", "none", None) and bare.optimizer == OptimizerInfo("SGD", 4)

def test_gradient_order_uses_recorded_order():
    p = _profile()
    assert [l.name for l in p.gradient_order()] == ["fc", "conv"]


def test_gradient_order_defaults_to_reverse_execution():
    p = _profile()
    for layer in p.layers:
        layer.grad_ready_order = None
    assert [l.name for l in p.gradient_order()] == ["fc", "conv"]


def test_rescale_batch_is_linear():
    p = _profile().rescale(batch_size=16)
    conv = p.layers[0]
    assert conv.fwd_flops == pytest.approx(2000.0)
    assert conv.fwd_s == pytest.approx(0.02)
    assert conv.params == 100 and conv.grad_bytes == 400  # weights do not scale with the batch
    assert p.phases.data_s == pytest.approx(0.008)


def test_rescale_keeps_the_weight_bytes_fixed():
    p = _profile()
    conv = p.layers[0]
    conv.fwd_bytes, conv.bwd_bytes = 400.0 + 600.0, 800.0 + 1200.0  # 400 weight bytes + activations
    q = p.rescale(batch_size=32)  # 4x the batch: activations x4, weights once
    assert q.layers[0].fwd_bytes == pytest.approx(400.0 + 4 * 600.0)
    assert q.layers[0].bwd_bytes == pytest.approx(800.0 + 4 * 1200.0)
    assert p.rescale(batch_size=2).layers[0].fwd_bytes == pytest.approx(400.0 + 600.0 / 4)


def test_rescale_seq_len_scales_quadratic_part_by_square():
    p = _profile().rescale(seq_len=32)
    attn = p.layers[1]
    # linear part 400 doubles to 800; quadratic part 200 quadruples to 800
    assert attn.fwd_flops == pytest.approx(1600.0)
    assert attn.fwd_flops_seq2 == pytest.approx(800.0)
    assert attn.bwd_flops == pytest.approx(800.0 * 2 + 400.0 * 4)
    assert attn.activation_bytes == pytest.approx(16.0 * 2 + 16.0 * 4)
    # and back again
    back = p.rescale(seq_len=16)
    assert back.layers[1].fwd_flops == pytest.approx(600.0)


def test_rescale_rejects_seq_len_without_sequence():
    with pytest.raises(SriftError, match="no sequence length"):
        _profile(seq_len=None).rescale(seq_len=128)
    with pytest.raises(SriftError, match="must be positive"):
        _profile().rescale(batch_size=0)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema="srift.profile/v0"), "schema"),
        (lambda d: d.pop("layers"), "'layers' is missing"),
        (lambda d: d.update(batch_size=-1), "batch_size"),
        (lambda d: d.update(precision="fp8"), "precision"),
        (lambda d: d["layers"][0].update(fwd_flops="many"), r"layers\[0\].fwd_flops"),
        (lambda d: d["layers"][0].pop("type"), r"layers\[0\] is missing 'type'"),
    ],
)
def test_load_names_what_is_wrong(tmp_path, mutate, message):
    d = _profile().to_dict()
    mutate(d)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(SriftError, match=message):
        Profile.load(path)


def test_load_missing_and_broken_files(tmp_path):
    with pytest.raises(SriftError, match="does not exist"):
        Profile.load(tmp_path / "nope.yaml")
    bad = tmp_path / "broken.yaml"
    bad.write_text("schema: [unclosed\n")
    with pytest.raises(SriftError, match="not valid YAML"):
        Profile.load(bad)


def test_parameter_tensors_are_recorded_kept_and_counted(tmp_path):
    """A layer's ``param_tensors`` (what torch.optim updates) round-trips; a profile written before
    srift recorded it counts a weight and a bias per trainable layer; a measured profile's leaves
    count their own tensors (a bias-free Linear 1, a LayerNorm 2, a ReLU 0)."""
    import types

    from torch import nn

    from srift.perf.optimizer_step import param_tensor_count
    from srift.profiling.assemble import leaf_layers

    p = _profile()
    p.layers[0].param_tensors, p.layers[2].param_tensors = 1, 2
    q = Profile.load(p.save(tmp_path / "p.yaml"))
    assert [x.param_tensors for x in q.layers] == [1, None, 2]
    assert param_tensor_count(q.layers) == 3
    assert param_tensor_count(_profile().layers) == 4  # old profile: conv and fc, 2 each
    doc = p.to_dict()
    doc["layers"][0]["param_tensors"] = 1.5
    with pytest.raises(SriftError, match="param_tensors"):
        Profile.from_dict(doc, "p.yaml")
    model = nn.Sequential(nn.Linear(8, 4, bias=False), nn.LayerNorm(4), nn.ReLU())
    timer = types.SimpleNamespace(leaves=list((n, m) for n, m in model.named_modules() if not list(m.children())))
    layers = leaf_layers(timer)  # type: ignore[arg-type]
    assert [x.param_tensors for x in layers] == [1, 2, 0]
    assert param_tensor_count(layers) == 3 == len(list(model.parameters()))

"""The zoo: exact architectures (published parameter counts), FLOPs by hand, torch-free loading."""

import subprocess
import sys

import pytest
import torch
from torch import nn

from srift.errors import SriftError
from srift.profiling.flops import analyze_layers
from srift.zoo import MODEL_NAMES, MODELS, canonical_name, load_builtin_profile
from srift.zoo.models import build_model, structural_profile


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_parameter_counts_match_published(name):
    model = build_model(name, "meta")
    assert sum(p.numel() for p in model.parameters()) == MODELS[name].params


def test_published_counts_are_the_known_ones():
    assert MODELS["resnet50"].params == 25_557_032
    assert MODELS["gpt2"].params == 124_439_808
    assert 109_000_000 < MODELS["bert-base"].params < 111_000_000


def test_resnet50_first_conv_flops_by_hand():
    prof = structural_profile("resnet50", batch_size=4)
    conv1 = prof.layers[0]
    assert conv1.name == "conv1" and conv1.type == "Conv2d"
    assert conv1.fwd_flops == 2 * 64 * 3 * 7 * 7 * 112 * 112 * 4
    # The input needs no gradient: backward computes only the weight gradient (same FLOPs).
    assert conv1.bwd_flops == conv1.fwd_flops
    assert (conv1.kfac_a_dim, conv1.kfac_g_dim, conv1.kfac_spatial) == (147, 64, 112 * 112)
    assert conv1.grad_bytes == 64 * 3 * 7 * 7 * 4


def test_linear_flops_forward_and_backward_by_hand():
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    x = torch.randn(8, 10)
    layers = analyze_layers(model, lambda: model(x).sum())
    first, relu, last = layers
    assert first.fwd_flops == 2 * 8 * 10 * 20
    assert first.bwd_flops == 2 * 8 * 10 * 20  # weight grad only: x needs no grad
    assert last.fwd_flops == 2 * 8 * 20 * 5
    assert last.bwd_flops == 2 * (2 * 8 * 20 * 5)  # weight grad and input grad
    assert relu.params == 0 and relu.grad_ready_order is None
    assert first.params == 220 and first.kfac_a_dim == 11 and first.kfac_g_dim == 20
    # Backward visits the last layer first, so its gradients are ready first.
    assert last.grad_ready_order == 0 and first.grad_ready_order == 1
    assert first.activation_bytes == 8 * 20 * 4


def test_grad_ready_order_is_a_permutation():
    prof = load_builtin_profile("resnet50")
    orders = sorted(l.grad_ready_order for l in prof.layers if l.grad_ready_order is not None)
    assert orders == list(range(len(orders)))


def test_seq_len_rescale_matches_fresh_analysis():
    rescaled = load_builtin_profile("bert-base", seq_len=256)
    fresh = structural_profile("bert-base", seq_len=256)
    total = lambda p: p.fwd_flops + p.bwd_flops
    assert total(rescaled) == pytest.approx(total(fresh), rel=0.01)
    assert rescaled.activation_bytes == pytest.approx(fresh.activation_bytes, rel=0.01)


def test_batch_rescale_is_linear():
    assert load_builtin_profile("resnet50", batch_size=128).fwd_flops == pytest.approx(
        2 * load_builtin_profile("resnet50").fwd_flops)


def test_aliases_and_unknown_model():
    assert canonical_name("ResNet-50") == "resnet50"
    assert canonical_name("bert_base") == "bert-base"
    assert canonical_name("vit_b_16") == "vit-b16"
    assert canonical_name("gpt2-124m") == "gpt2"
    with pytest.raises(SriftError, match="unknown model 'resnet5000'") as info:
        canonical_name("resnet5000")
    assert "resnet50" in info.value.hint
    with pytest.raises(SriftError, match="image model"):
        load_builtin_profile("resnet50", seq_len=128)


def test_loading_builtin_profiles_does_not_import_torch():
    code = "import sys; from srift.zoo import load_builtin_profile as l; l('gpt2', batch_size=2, seq_len=512); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_shipped_profiles_are_current():
    for name in ("resnet50", "gpt2"):
        shipped = load_builtin_profile(name)
        fresh = structural_profile(name)
        assert shipped.fwd_flops == fresh.fwd_flops and shipped.params == fresh.params

"""The zoo: exact architectures (published parameter counts), FLOPs by hand, torch-free loading."""


import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from srift.errors import SriftError
from srift.profiling.flops import analyze_layers
from srift.zoo import MODELS, TORCH_MODEL_NAMES, canonical_name, load_builtin_profile
from srift.zoo.models import build_model, structural_profile


@pytest.mark.parametrize("name", TORCH_MODEL_NAMES)
def test_parameter_counts_match_published(name):
    model = build_model(name, "meta")
    assert sum(p.numel() for p in model.parameters()) == MODELS[name].params


PUBLISHED = {
    "resnet50": 25_557_032, "resnet152": 60_192_808, "vgg16": 138_357_544, "densenet201": 20_013_928,
    "inception-v4": 42_679_816,  # timm inception_v4, 1000 classes
    "vit-b16": 86_567_656, "gpt2": 124_439_808, "gpt2-medium": 354_823_168,  # tied LM head
    # HF BertForPreTraining: BertModel (109,482,240 / 335,141,888) + MLM transform, LayerNorm and
    # decoder bias (decoder weight tied to the word embeddings) + next-sentence head.
    "bert-base": 109_482_240 + (768 * 768 + 768) + 2 * 768 + 30522 + (768 * 2 + 2),
    "bert-large": 335_141_888 + (1024 * 1024 + 1024) + 2 * 1024 + 30522 + (1024 * 2 + 2),
    # HF BertForQuestionAnswering: BertModel without its pooler + the span head (hidden x 2).
    "bert-base-squad": 109_482_240 - (768 * 768 + 768) + (768 * 2 + 2),
    "bert-large-squad": 335_141_888 - (1024 * 1024 + 1024) + (1024 * 2 + 2),
}


def test_published_counts_are_the_known_ones():
    assert {n: MODELS[n].params for n in TORCH_MODEL_NAMES} == PUBLISHED  # LLMs: tests/test_zoo_llm.py
    assert PUBLISHED["bert-base"] == 110_106_428 and PUBLISHED["bert-large"] == 336_226_108
    assert PUBLISHED["bert-base-squad"] == 108_893_186 and PUBLISHED["bert-large-squad"] == 334_094_338


@pytest.mark.slow
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


@pytest.mark.slow
def test_seq_len_rescale_matches_fresh_analysis():
    rescaled = load_builtin_profile("bert-base", seq_len=256)
    fresh = structural_profile("bert-base", seq_len=256)
    total = lambda p: p.fwd_flops + p.bwd_flops
    assert total(rescaled) == pytest.approx(total(fresh), rel=0.01)
    assert rescaled.activation_bytes == pytest.approx(fresh.activation_bytes, rel=0.01)
    # Weight bytes do not grow with the sequence: the bytes match a fresh analysis too.
    moved = lambda p: sum(l.fwd_bytes + l.bwd_bytes for l in p.layers)
    assert moved(rescaled) == pytest.approx(moved(fresh), rel=0.01)


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


@pytest.mark.slow
def test_shipped_profiles_are_current():
    for name in ("resnet50", "gpt2"):
        shipped = load_builtin_profile(name)
        fresh = structural_profile(name)
        assert shipped.fwd_flops == fresh.fwd_flops and shipped.params == fresh.params


def test_step_that_calls_backward_itself_and_accumulates():
    """A step that runs backward itself (twice: gradient accumulation) counts both passes."""
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    x = torch.randn(8, 10)

    def step():
        for _ in range(2):
            model(x).sum().backward()

    first, relu, last = analyze_layers(model, step)
    assert first.fwd_flops == 2 * (2 * 8 * 10 * 20)
    assert last.bwd_flops == 2 * (2 * (2 * 8 * 20 * 5))
    assert relu.fwd_flops == 0 and relu.bwd_flops == 0
    assert all(p.grad is None for p in model.parameters())  # the analysis leaves no gradients behind


class _Shared(nn.Module):
    """One Linear applied twice to a [B, T, F] input, and a parameter held by a non-leaf module."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(6))
        self.lin = nn.Linear(6, 6, bias=False)

    def forward(self, x):
        return self.lin(self.lin(x) * self.scale)


def test_reused_leaf_sums_and_non_leaf_params_get_a_pseudo_layer():
    model = _Shared()
    x = torch.randn(3, 7, 6)
    layers = analyze_layers(model, lambda: model(x).sum())
    by_name = {l.name: l for l in layers}
    lin = by_name["lin"]
    assert lin.fwd_flops == 2 * (2 * 3 * 7 * 6 * 6)  # called twice, summed
    assert lin.params == 36 and lin.kfac_a_dim == 6 and lin.kfac_g_dim == 6 and lin.kfac_spatial == 7
    assert lin.activation_bytes == 2 * 3 * 7 * 6 * 4
    pseudo = by_name["_Shared.(params)"]
    assert pseudo.params == 6 and pseudo.grad_bytes == 24
    assert sum(l.params for l in layers) == sum(p.numel() for p in model.parameters())
    assert sorted(l.grad_ready_order for l in layers if l.params) == [0, 1]


@pytest.mark.slow
def test_attention_core_flops_scale_with_seq_squared_by_hand():
    b, t, d, depth = 2, 64, 768, 12
    prof = structural_profile("bert-base", batch_size=b, seq_len=t)
    cores = [l for l in prof.layers if l.type == "AttentionCore"]
    assert len(cores) == depth
    # q k^T and probs v: each 2 * B * T * T * D FLOPs (all heads together).
    assert all(c.fwd_flops == c.fwd_flops_seq2 == 2 * (2 * b * t * t * d) for c in cores)
    assert all(c.bwd_flops_seq2 == 2 * c.fwd_flops_seq2 for c in cores)  # grads of both operands
    # Probabilities kept for backward: B * heads * T * T fp32 values.
    assert all(c.activation_bytes_seq2 == b * 12 * t * t * 4 for c in cores)
    assert sum(l.fwd_flops_seq2 for l in prof.layers) == sum(c.fwd_flops for c in cores)


@pytest.mark.slow
def test_amp_profile_same_flops_half_activations_fp32_grads():
    fp32 = structural_profile("resnet50", batch_size=2)
    amp = structural_profile("resnet50", batch_size=2, precision="amp")
    assert amp.fwd_flops == fp32.fwd_flops and amp.grad_bytes == fp32.grad_bytes
    conv32, conv16 = fp32.layers[0], amp.layers[0]
    assert conv16.activation_bytes == conv32.activation_bytes / 2
    bn32, bn16 = fp32.layers[1], amp.layers[1]
    assert bn16.type == "BatchNorm2d" and bn16.activation_bytes == bn32.activation_bytes / 2  # fp16 in, fp16 out


@pytest.mark.slow
def test_amp_transformer_layernorm_stays_fp32_and_keeps_probs_twice():
    fp32 = structural_profile("gpt2", batch_size=1, seq_len=32)
    amp = structural_profile("gpt2", batch_size=1, seq_len=32, precision="amp")
    pairs = list(zip(fp32.layers, amp.layers))
    ln32, ln16 = next((a, b) for a, b in pairs if a.type == "LayerNorm")
    assert ln16.activation_bytes == ln32.activation_bytes
    core32, core16 = next((a, b) for a, b in pairs if a.type == "AttentionCore")
    out_bytes = 1 * 32 * 768 * 4
    probs_bytes = 1 * 12 * 32 * 32 * 4
    assert core32.activation_bytes == out_bytes + probs_bytes
    assert core16.activation_bytes == out_bytes / 2 + probs_bytes * 1.5

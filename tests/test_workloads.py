"""Workloads built from architecture definitions match published counts."""

import pytest

from sim.gpu.workloads import bert_large, build_workload, gpt2_xl, resnet50, transformer, vgg16


@pytest.mark.parametrize("build, params", [
    (resnet50, 25_557_032),      # torchvision
    (vgg16, 138_357_544),        # torchvision
    (bert_large, 335_141_888),   # BERT-large with pooler
    (gpt2_xl, 1_557_611_200),    # GPT-2 XL, tied output embedding
])
def test_parameter_counts_are_exact(build, params):
    assert build().params == params


def test_vgg16_fc6_alone():
    fc6 = next(layer for layer in vgg16().layers if layer.name == "fc6")
    assert fc6.params == 102_764_544


def test_resnet50_forward_macs_per_image():
    """torchvision quotes 4.09 GFLOPs (multiply-adds) per 224×224 image for ResNet-50."""
    w = resnet50(batch=1)
    macs = sum(layer.fwd_flops for layer in w.layers if layer.kind in ("conv", "linear")) / 2
    assert macs == pytest.approx(4.09e9, rel=0.02)


def test_transformer_flops_near_six_n_per_token():
    """Kaplan et al. 2020: training FLOPs ≈ 6 · (non-embedding) parameters per token, plus
    attention; backward ≈ 2 × forward for the weighted layers."""
    w = gpt2_xl(batch=1, seq=1024)
    tokens = 1024
    dense = sum(layer.params for layer in w.layers if layer.kind == "linear")
    weighted_fwd = sum(layer.fwd_flops for layer in w.layers if layer.kind == "linear")
    assert weighted_fwd == pytest.approx(2 * dense * tokens + 2 * tokens * 1600 * 50257,
                                         rel=0.01)
    total = w.fwd_flops + w.bwd_flops
    assert 6 * dense * tokens < total < 6 * (dense + 50257 * 1600) * tokens * 1.3


def test_backward_is_twice_forward_for_weighted_layers():
    for layer in bert_large().layers:
        if layer.kind in ("linear", "conv"):
            assert layer.bwd_flops == 2 * layer.fwd_flops


def test_generic_transformer_scales():
    small = transformer(hidden=512, layers=2, seq=128, batch=2)
    big = transformer(hidden=512, layers=4, seq=128, batch=2)
    per_layer = big.params - small.params
    assert per_layer == 2 * (12 * 512 * 512 + 13 * 512)   # qkv, out, ffn, 2 LN with biases


def test_unknown_model():
    with pytest.raises(ValueError, match="unknown model 'alexnet'"):
        build_workload("alexnet")

"""Weight-only int8 products (mmspec.kernels.int8_linear): the kernel computes with the quantised weights it says it
holds, stacked maps split back, widths the kernel cannot take are refused, and a drafter's decoder layer through them
stays close to its float function."""

import pytest
import torch
import torch.nn.functional as F

from mmspec.drafters.lean_layer import Int8Layer, decoder_layer
from mmspec.kernels.int8_linear import MAX_INT8_ROWS, Int8Weight, int8_available, int8_fits
from mmspec.tiny import tiny_model

pytestmark = pytest.mark.skipif(not int8_available("cpu"), reason="no int8 weight-only kernel in this torch")


def test_product_uses_the_quantised_weights_it_holds():
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(40, 24, generator=g), torch.randn(40, generator=g)
    lin = Int8Weight(w, bias=b)
    x = torch.randn(2, 5, 24, generator=g)
    ref = F.linear(x.bfloat16().float(), lin.dequantized(), b)
    out = lin(x)
    assert out.shape == (2, 5, 40) and out.dtype == torch.float32
    # the kernel returns bfloat16 rows: agreement to bfloat16's rounding of the product, not to the float weights'
    assert torch.allclose(out, ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())
    # the quantisation itself: within one step of every weight (half a step of rounding, and the scale's own
    # bfloat16 rounding times at most 127 steps: another quarter)
    step = w.abs().amax(1, keepdim=True) / 127
    assert bool(((lin.dequantized() - w).abs() <= step).all())


def test_stacked_maps_split_back_and_empty_inputs():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(16, 32, generator=g), torch.randn(8, 32, generator=g)
    both = Int8Weight(a, b)
    x = torch.randn(3, 32, generator=g)
    ya, yb = both.split(x)
    assert ya.shape == (3, 16) and yb.shape == (3, 8)
    assert torch.equal(torch.cat([ya, yb], -1), both(x))
    assert both(torch.randn(0, 32)).shape == (0, 24)


def test_many_rows_run_in_float_on_the_stacked_weights():
    g = torch.Generator().manual_seed(3)
    a, b, bias = torch.randn(16, 32, generator=g), torch.randn(8, 32, generator=g), torch.randn(24, generator=g)
    both = Int8Weight(a, b, bias=bias)
    x = torch.randn(MAX_INT8_ROWS + 1, 32, generator=g)
    assert torch.equal(both(x), F.linear(x, torch.cat([a, b]), bias))  # (a prefill, a batch's blocks)
    few = x[:MAX_INT8_ROWS]
    assert not torch.equal(both(few), F.linear(few, torch.cat([a, b]), bias))  # (the int8 kernel)


def test_widths_the_kernel_cannot_take_are_refused():
    assert int8_fits(8) and int8_fits(1280) and not int8_fits(12) and not int8_fits(4)
    with pytest.raises(ValueError, match="multiple of 8"):
        Int8Weight(torch.randn(8, 100))
    assert not int8_available("meta")


def test_decoder_layer_with_int8_weights_stays_close_to_its_float_function():
    model = tiny_model("llama", seed=0, vocab_size=96, num_layers=1)
    layer = model.model.layers[0]
    assert Int8Layer.fits(layer)
    g = torch.Generator().manual_seed(2)
    h = torch.randn(1, 6, model.config.hidden_size, generator=g)
    D = model.config.head_dim
    cos, sin = torch.ones(1, 6, D), torch.zeros(1, 6, D)

    def own(k, v):
        return k, v
    with torch.no_grad():
        ref = decoder_layer(layer, h, cos, sin, own, None)
        out = decoder_layer(layer, h, cos, sin, own, None, int8=Int8Layer(layer))
    assert not torch.equal(out, ref)  # (it really ran the int8 products)
    assert (out - ref).norm() / (ref - h).norm() < 0.05

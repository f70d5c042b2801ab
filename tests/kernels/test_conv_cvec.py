"""The channels-across-lanes implicit gemm (kernels/cpu/conv_cvec.py) for small output planes
with many output channels: compiled models against onnxruntime with the kernel chosen by its
rule, the kernel called directly on the edges (panels cut, tiles cut, K blocks, threads), and
the rule's boundaries."""
import numpy as np
import pytest

import jitort
from jitort.kernels.cpu import conv_cvec as CV
from jitort.codegen.calls import Kernel
from tests.helpers import called_names, kernels_called, run_onnxruntime
from tests.kernels.test_conv_implicit import _model

CASES = {
    '3x3 on 7x7, relu': dict(c=192, m=96, k=3, strides=(1, 1), pads=(1, 1, 1, 1), h=7,
                             act='relu', wscale=0.05),
    '3x3/2 onto 7x7, residual + relu, 40 channels': dict(
        c=64, m=40, k=3, strides=(2, 2), pads=(1, 1, 1, 1), h=14, res=True, act='relu',
        wscale=0.1),
    '1x1 K 384 on 13x13, batch 2': dict(c=384, m=64, k=1, strides=(1, 1), pads=(0, 0, 0, 0),
                                        h=13, n=2, wscale=0.05),
    '5x5 on 11x9, no bias, clip': dict(c=32, m=50, k=5, strides=(1, 1), pads=(2, 2, 2, 2),
                                       h=11, w_=9, bias=False, act='clip', wscale=0.05),
    '3x3 dilation 2 stride (2, 1), sigmoid': dict(c=24, m=33, k=3, strides=(2, 1),
                                                  pads=(2, 2, 2, 2), dil=(2, 2), h=15,
                                                  act='sigmoid', wscale=0.1),
    # stems (the implicit gemm's domain, 32 output channels and more): 112x112 out is written
    # straight, 64x64 (a plane of 2^12 floats) through the staging block
    'stem 3->64 3x3/2 onto 112x112, relu': dict(c=3, m=64, k=3, strides=(2, 2),
                                                pads=(1, 1, 1, 1), h=224, act='relu'),
    # grouped: 4 groups of 32 at stride 2 (conv_group's layer otherwise), 8 groups of 16 on
    # 56x56 (Winograd's otherwise)
    'grouped 4 x 32 3x3/2, residual + relu': dict(c=128, m=128, k=3, strides=(2, 2),
                                                  pads=(1, 1, 1, 1), h=56, g=4, res=True,
                                                  act='relu', wscale=0.1),
    'grouped 8 x 16 3x3 on 56x56, batch 2': dict(c=128, m=128, k=3, strides=(1, 1),
                                                 pads=(1, 1, 1, 1), h=56, g=8, n=2,
                                                 wscale=0.1),
    'stem 3->32 7x7/2 onto 64x64, batch 2, residual + relu': dict(
        c=3, m=32, k=7, strides=(2, 2), pads=(3, 3, 3, 3), h=128, n=2, res=True, act='relu',
        wscale=0.1),
}


@pytest.mark.parametrize('case', list(CASES))
def test_cvec_conv_matches_onnxruntime(case, nthreads):
    m, feeds = _model(**CASES[case])
    cm = jitort.compile(m, threads=nthreads, strict=True)
    got = cm.run(None, feeds)[0]
    assert kernels_called(cm).count(Kernel('conv_cvec', 'conv2d_cvec')) == 1, \
        'the rule should pick conv_cvec'
    want = run_onnxruntime(m, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _direct(n, c, m, h, w, k, s, p, d, threads, act=0, res=False, g=1):
    rng = np.random.default_rng(c * m + h)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    cg, mg = c // g, m // g
    wt = (rng.standard_normal((m, cg, k, k)) / np.sqrt(cg * k * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
    # numpy reference: zero-padded input, one einsum per tap
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    want = np.zeros((n, m, oh, ow)) + b[None, :, None, None]
    for i in range(k):
        for j in range(k):
            sl = xp[:, :, i * d:i * d + s * (oh - 1) + 1:s, j * d:j * d + s * (ow - 1) + 1:s]
            for gi in range(g):
                want[:, gi * mg:(gi + 1) * mg] += np.einsum(
                    'nchw,mc->nmhw', sl[:, gi * cg:(gi + 1) * cg],
                    wt[gi * mg:(gi + 1) * mg, :, i, j].astype(np.float64))
    r = rng.standard_normal(want.shape).astype(np.float32) if res else None
    if res:
        want += r
    if act == 1:
        want = np.maximum(want, 0)
    out = np.full(want.shape, np.nan, np.float32)
    scr = np.zeros(CV.cvec_scratch_elems(n, c, h, w, k, k, oh, ow, s, s, d, d, threads),
                   np.float32)
    CV.conv2d_cvec(x, CV.pack_weights(wt, g), k, k, b, r if res else out, out, scr, s, s, p,
                   p, d, d, g, True, res, act, 0.0, 0.0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('shape', [
    # (n, c, m, h, w, k, stride, pad, dilation): panels of 48 cut at 1, 16, 17, 33 channels;
    # rows of 1-8 and 9-17 pixels (tiles of 8, 7+6, 6+6+5); K past one block of 512 taps;
    # a 16x32 plane (512 floats: staged); grouped: 2 groups of 40 -> 50, 4 of 32 -> 32 (stride
    # 2), 3 of 200 -> 60 (1x1), 8 groups of 16 -> 16; unpadded layers read in place at
    # strides 2 (1x1, 3x3 on odd planes, dilated)
    (1, 8, 1, 5, 5, 3, 1, 1, 1), (2, 16, 17, 9, 13, 3, 2, 1, 1), (1, 70, 100, 6, 17, 3, 1, 1, 1),
    (1, 600, 33, 7, 7, 1, 1, 0, 1), (1, 64, 49, 8, 8, 3, 1, 1, 1), (1, 3, 64, 12, 12, 7, 2, 3, 1),
    (1, 32, 96, 12, 12, 3, 1, 2, 2), (2, 40, 50, 16, 32, 3, 1, 1, 1),
    (1, 600, 20, 16, 32, 1, 1, 0, 1),
    (2, 80, 100, 9, 9, 3, 1, 1, 1, 2), (1, 128, 128, 14, 14, 3, 2, 1, 1, 4),
    (1, 600, 180, 7, 7, 1, 1, 0, 1, 3), (1, 128, 128, 7, 7, 3, 1, 1, 1, 8),
    (1, 64, 48, 14, 14, 1, 2, 0, 1), (1, 32, 40, 15, 13, 3, 2, 0, 1),
    (1, 48, 32, 9, 11, 3, 2, 0, 2), (1, 96, 64, 9, 9, 3, 2, 1, 1, 2),
])
@pytest.mark.parametrize('threads', [1, 2])
def test_kernel_edges_against_numpy(shape, threads):
    import numba
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        _direct(*shape[:9], threads=threads, act=1, res=shape[0] == 2,
                g=shape[9] if len(shape) > 9 else 1)
    finally:
        numba.set_num_threads(old)


def test_kernel_rejects_short_buffers():
    """Packed weights or scratch too small for the call raise instead of reading past them."""
    x = np.zeros((1, 8, 7, 7), np.float32)
    w = np.zeros((20, 8, 3, 3), np.float32)
    out = np.zeros((1, 20, 7, 7), np.float32)
    scr = np.zeros(CV.cvec_scratch_elems(1, 8, 7, 7, 3, 3, 7, 7, 1, 1, 1, 1, 1), np.float32)
    pk = CV.pack_weights(w)
    with pytest.raises(ValueError, match='packed weights'):
        CV.conv2d_cvec(x, pk[:-1], 3, 3, np.zeros(20, np.float32), out, out, scr, 1, 1, 1, 1,
                       1, 1, 1, True, False, 0, 0.0, 0.0)
    with pytest.raises(ValueError, match='scratch'):
        CV.conv2d_cvec(x, pk, 3, 3, np.zeros(20, np.float32), out, out, scr[:100], 1, 1, 1, 1,
                       1, 1, 1, True, False, 0, 0.0, 0.0)
    with pytest.raises(ValueError, match='group'):
        CV.conv2d_cvec(x, pk, 3, 3, np.zeros(20, np.float32), out, out, scr, 1, 1, 1, 1,
                       1, 1, 3, True, False, 0, 0.0, 0.0)


def test_rule_boundaries():
    """Small planes with many taps take it, 1x1 layers from 64 input channels, stems with 32
    output channels and more; Winograd's layers, stems with fewer output channels, fewer
    than 16 output channels and big planes do not."""
    assert CV.cvec_wins(512, 512, 3, 3, 7, 7, 1, 1)
    assert CV.cvec_wins(128, 256, 3, 3, 28, 28, 2, 2)
    assert CV.cvec_wins(2048, 512, 1, 1, 7, 7, 1, 1)
    assert CV.cvec_wins(64, 256, 1, 1, 56, 56, 1, 1)
    assert CV.cvec_wins(3, 64, 3, 3, 112, 112, 2, 2, implicit_alt=True)
    assert not CV.cvec_wins(3, 24, 3, 3, 112, 112, 2, 2, implicit_alt=True)
    assert not CV.cvec_wins(256, 256, 3, 3, 14, 14, 1, 1, winograd_alt=True)
    assert not CV.cvec_wins(40, 240, 1, 1, 28, 28, 1, 1)       # K 40
    assert not CV.cvec_wins(64, 3, 3, 3, 56, 56, 1, 1)         # 3 output channels
    assert not CV.cvec_wins(64, 64, 3, 3, 112, 112, 2, 2)      # plane past 56x56
    # grouped (C and M count every group)
    assert CV.cvec_wins(128, 128, 3, 3, 28, 28, 2, 2, group=4)
    assert CV.cvec_wins(128, 128, 3, 3, 28, 28, 1, 1, winograd_alt=True, group=4)
    assert not CV.cvec_wins(256, 256, 3, 3, 28, 28, 1, 1, winograd_alt=True, group=4)  # 64/group
    assert CV.cvec_wins(512, 512, 3, 3, 7, 7, 2, 2, group=16)      # strided onto 7x7
    assert CV.cvec_wins(512, 512, 3, 3, 14, 14, 1, 1, group=64)    # 8 per group, 14x14
    assert not CV.cvec_wins(256, 256, 3, 3, 28, 28, 1, 1, group=32)  # 8 per group, 28x28
    assert not CV.cvec_wins(256, 256, 1, 1, 7, 7, 1, 1, group=8)   # 1x1: K 32
    assert not CV.cvec_wins(256, 256, 1, 1, 14, 14, 1, 1, group=4)  # 1x1: K 64
    assert not CV.cvec_wins(64, 64, 3, 3, 14, 14, 1, 1, group=64)  # depthwise


def test_lowering_picks_by_rule():
    """A 3x3 layer on 14x14 keeps Winograd; on 7x7 it takes conv_cvec."""
    for h, want in ((14, 'winograd.conv3x3_winograd'), (7, 'conv_cvec.conv2d_cvec')):
        m, feeds = _model(c=128, m=64, k=3, strides=(1, 1), pads=(1, 1, 1, 1), h=h,
                          wscale=0.05)
        cm = jitort.compile(m, strict=True)
        got = cm.run(None, feeds)[0]
        assert want in called_names(cm)
        np.testing.assert_allclose(got, run_onnxruntime(m, feeds)[0], rtol=1e-3, atol=1e-3)

"""The grouped convolution through a channels-last im2col (kernels/cpu/conv_group.py): compiled
models against onnxruntime at 1 and 2 threads, the kernel chosen by its rule, the rule's edges,
and the kernel called directly (float64, scratch for one worker, a bad scratch)."""
import numpy as np
import pytest

import jitort
from jitort.kernels.cpu import conv_group as CG
from tests.helpers import called_names, run_onnxruntime
from tests.kernels.test_conv_implicit import _model as _conv_model


def _model(**kw):
    return _conv_model(wscale=0.2, **kw)


@pytest.fixture
def no_cvec(monkeypatch):
    """conv_cvec's rule (checked before this kernel's) switched off, so the layers it would
    take run here."""
    from jitort.kernels.cpu import conv_cvec
    monkeypatch.setattr(conv_cvec, 'cvec_wins', lambda *a, **k: False)


CASES = {
    'resnext 512/16 3x3/2 14->7 relu': dict(c=512, m=512, g=16, k=3, strides=(2, 2),
                                             pads=(1, 1, 1, 1), h=14, act='relu'),
    '256/8 on 7x7, residual + relu, batch 3': dict(c=256, m=256, g=8, k=3, strides=(1, 1),
                                                   pads=(1, 1, 1, 1), h=7, res=True,
                                                   act='relu', n=3),
    '24 per group, 48 out per group, clip': dict(c=96, m=192, g=4, k=3, strides=(2, 2),
                                                 pads=(1, 1, 1, 1), h=12, act='clip'),
    'no bias, asymmetric pads, sigmoid': dict(c=64, m=32, g=2, k=3, strides=(2, 2),
                                              pads=(0, 1, 1, 0), h=13, bias=False,
                                              act='sigmoid'),
    'dilation 2, 5x5, 8x5 plane': dict(c=96, m=48, g=3, k=5, strides=(1, 1), pads=(4, 4, 4, 4),
                                       h=8, w_=5, dil=(2, 2)),
    'strides (2, 1), residual': dict(c=128, m=64, g=4, k=3, strides=(2, 1), pads=(1, 0, 1, 2),
                                     h=12, w_=5, res=True),
}


@pytest.mark.parametrize('case', list(CASES))
def test_grouped_conv_matches_onnxruntime(case, nthreads, no_cvec):
    m, feeds = _model(**CASES[case])
    cm = jitort.compile(m, threads=nthreads, strict=True)
    got = cm.run(None, feeds)[0]
    called = called_names(cm)
    assert called.count('conv_group.conv2d_grouped') == 1, 'the rule should pick the grouped kernel'
    assert not any(c.startswith('conv.conv2d') for c in called)
    want = run_onnxruntime(m, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_rule_edges(no_cvec):
    """Small output planes with >= 16 channels per group take it; a 14x14 output, 8 channels
    per group, depthwise and group 1 stay on conv.py (or its depthwise kernels); 32 channels
    per group at stride 1 go to Winograd (``winograd.winograd_grouped_wins``)."""
    assert CG.grouped_wins(512, 512, 7, 7, 16) and CG.grouped_wins(128, 128, 8, 8, 2)
    assert CG.grouped_wins(256, 256, 7, 7, 16)
    assert not CG.grouped_wins(512, 512, 14, 14, 16)   # 196 positions
    assert not CG.grouped_wins(64, 64, 7, 7, 8)        # 8 per group
    assert not CG.grouped_wins(64, 64, 7, 7, 64)       # depthwise
    assert not CG.grouped_wins(64, 64, 7, 7, 1)        # dense
    for kw, want in ((dict(c=256, m=256, g=8, k=3, strides=(1, 1), pads=(1, 1, 1, 1), h=14),
                      'winograd.conv3x3_winograd'),
                     (dict(c=128, m=128, g=8, k=3, strides=(1, 1), pads=(1, 1, 1, 1), h=14),
                      'conv.conv2d'),
                     (dict(c=64, m=64, g=8, k=3, strides=(1, 1), pads=(1, 1, 1, 1), h=7),
                      'conv.conv2d')):
        m, feeds = _model(**kw)
        cm = jitort.compile(m, strict=True)
        out = cm.run(None, feeds)[0]
        called = called_names(cm)
        assert any(c.startswith(want) for c in called), (want, called)
        assert not any(c.startswith('conv_group.') for c in called)
        want_y = run_onnxruntime(m, feeds)[0]
        np.testing.assert_allclose(out, want_y, rtol=1e-4, atol=1e-4)


def _reference(x, w, b, g, s, p):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    mg = m // g
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - kh) // s + 1, (wd + 2 * p - kw) // s + 1
    y = np.zeros((n, m, oh, ow), x.dtype)
    for gi in range(g):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, gi * cg:(gi + 1) * cg, i:i + s * oh:s, j:j + s * ow:s]
                y[:, gi * mg:(gi + 1) * mg] += np.einsum('nchw,mc->nmhw', patch,
                                                         w[gi * mg:(gi + 1) * mg, :, i, j])
    return y + b[None, :, None, None]


def test_kernel_float64_one_worker_scratch_and_bad_scratch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 64, 9, 9))
    w = rng.standard_normal((32, 16, 3, 3))
    b = rng.standard_normal(32)
    out = np.empty((2, 32, 5, 5))
    scr = np.empty(CG.grouped_scratch_elems(64, 9, 9, 3, 3, 5, 5, 32, 4, threads=1))
    CG.conv2d_grouped(x, CG.pack_weights(w, 4), 3, 3, b, out, out, scr, 2, 2, 1, 1, 1, 1, 4,
                      True, False, 0, 0.0, 0.0)
    np.testing.assert_allclose(out, _reference(x, w, b, 4, 2, 1), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match='scratch'):
        CG.conv2d_grouped(x, CG.pack_weights(w, 4), 3, 3, b, out, out, scr[:100], 2, 2, 1, 1,
                          1, 1, 4, True, False, 0, 0.0, 0.0)

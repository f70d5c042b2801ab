"""The implicit-gemm convolution (kernels/cpu/conv_implicit.py) for few taps per output (a
network's stem): compiled models against onnxruntime, the kernel chosen by its rule, and the
rule's edges."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import jitort
from jitort.kernels.cpu import conv_implicit as CI
from tests.helpers import called_names, run_onnxruntime


def _model(c, m, k, strides, pads, h, w_=None, act=None, res=False, dil=(1, 1), n=1,
           bias=True, seed=0, g=1, wscale=1.0):
    """A Conv (``g`` groups, weights standard normal times ``wscale``) [+ Add of a residual
    input] [+ Relu / Clip(0, 6) / Sigmoid] model and its feeds (also used by
    test_conv_group.py)."""
    rng = np.random.default_rng(seed)
    w_ = w_ or h
    x = rng.standard_normal((n, c, h, w_)).astype(np.float32)
    w = (rng.standard_normal((m, c // g, k, k)) * wscale).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    ins = ['x', 'w'] + (['b'] if bias else [])
    nodes = [helper.make_node('Conv', ins, ['y'], kernel_shape=[k, k], strides=list(strides),
                              pads=list(pads), dilations=list(dil), group=g)]
    inputs = [helper.make_tensor_value_info('x', TensorProto.FLOAT, x.shape)]
    feeds, last = {'x': x}, 'y'
    oh = (h + pads[0] + pads[2] - dil[0] * (k - 1) - 1) // strides[0] + 1
    ow = (w_ + pads[1] + pads[3] - dil[1] * (k - 1) - 1) // strides[1] + 1
    if res:
        feeds['r'] = rng.standard_normal((n, m, oh, ow)).astype(np.float32)
        inputs.append(helper.make_tensor_value_info('r', TensorProto.FLOAT, (n, m, oh, ow)))
        nodes.append(helper.make_node('Add', ['y', 'r'], ['y2']))
        last = 'y2'
    if act == 'relu':
        nodes.append(helper.make_node('Relu', [last], ['z']))
        last = 'z'
    elif act == 'clip':
        nodes.append(helper.make_node('Clip', [last, 'lo', 'hi'], ['z']))
        last = 'z'
    elif act == 'sigmoid':
        nodes.append(helper.make_node('Sigmoid', [last], ['z']))
        last = 'z'
    inits = [numpy_helper.from_array(w, 'w')] + ([numpy_helper.from_array(b, 'b')] if bias else [])
    if act == 'clip':
        inits += [numpy_helper.from_array(np.float32(0), 'lo'),
                  numpy_helper.from_array(np.float32(6), 'hi')]
    gr = helper.make_graph(nodes, 'g', inputs,
                           [helper.make_tensor_value_info(last, TensorProto.FLOAT, None)],
                           initializer=inits)
    model = helper.make_model(gr, opset_imports=[helper.make_opsetid('', 13)])
    model.ir_version = 7
    return model, feeds


CASES = {
    # (32 output channels and more take conv_cvec: test_conv_cvec.py)
    'stem 3->24 3x3/2 relu': dict(c=3, m=24, k=3, strides=(2, 2), pads=(1, 1, 1, 1), h=112,
                                  act='relu'),
    'stem 3->16 7x7/2 batch 2': dict(c=3, m=16, k=7, strides=(2, 2), pads=(3, 3, 3, 3), h=64,
                                     n=2, act='relu'),
    'relu6, 13 channels (tiles cut)': dict(c=3, m=13, k=3, strides=(2, 2), pads=(1, 1, 1, 1),
                                           h=70, act='clip'),
    'residual + sigmoid, stride 1': dict(c=3, m=16, k=3, strides=(1, 1), pads=(1, 1, 1, 1),
                                         h=40, res=True, act='sigmoid'),
    'residual + relu, odd plane': dict(c=4, m=7, k=3, strides=(2, 2), pads=(1, 1, 1, 1), h=57,
                                       res=True, act='relu'),
    'no bias, asymmetric pads': dict(c=3, m=20, k=3, strides=(2, 2), pads=(0, 1, 1, 0), h=61,
                                     bias=False),
    'dilation 2, 5x5': dict(c=3, m=13, k=5, strides=(1, 1), pads=(4, 4, 4, 4), h=40,
                            dil=(2, 2), act='relu'),
    'strides (2, 1), wide plane': dict(c=3, m=24, k=3, strides=(2, 1), pads=(1, 0, 1, 2), h=30,
                                       w_=150, act='relu'),
}


@pytest.mark.parametrize('case', list(CASES))
def test_implicit_conv_matches_onnxruntime(case, nthreads):
    m, feeds = _model(**CASES[case])
    cm = jitort.compile(m, threads=nthreads, strict=True)
    got = cm.run(None, feeds)[0]
    called = called_names(cm)
    assert called.count('conv_implicit.conv2d_implicit') == 1, 'the rule should pick the implicit gemm'
    want = run_onnxruntime(m, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_rule_keeps_im2col_and_winograd_elsewhere():
    """Many taps (64 -> 32 3x3, stride 2: K 576) go elsewhere (conv_cvec on this 15x15
    plane); few channels on a tiny plane stay off it too; a 3x3 stride-1 layer with 64 channels
    keeps Winograd (16 channels into 24 take the implicit gemm)."""
    assert CI.implicit_wins(3, 3, 3, 112, 112) and CI.implicit_wins(3, 7, 7, 112, 112)
    assert not CI.implicit_wins(64, 3, 3, 28, 28)
    assert not CI.implicit_wins(3, 3, 3, 8, 8)
    assert not CI.implicit_wins(1, 3, 3, 64, 64)  # K = 9
    assert not CI.implicit_wins(128, 1, 1, 55, 55)  # 1x1: a plain gemm
    for kw, want in ((dict(c=64, m=32, k=3, strides=(2, 2), pads=(1, 1, 1, 1), h=30),
                      'conv_cvec.conv2d_cvec'),
                     (dict(c=64, m=32, k=3, strides=(1, 1), pads=(1, 1, 1, 1), h=30),
                      'winograd.conv3x3_winograd'),
                     (dict(c=16, m=24, k=3, strides=(1, 1), pads=(1, 1, 1, 1), h=56),
                      'conv_implicit.conv2d_implicit')):
        m, feeds = _model(**kw)
        cm = jitort.compile(m, strict=True)
        out = cm.run(None, feeds)[0]
        called = called_names(cm)
        assert want in called
        assert want.startswith('conv_implicit') or not any(c.startswith('conv_implicit.') for c in called)
        want_y = run_onnxruntime(m, feeds)[0]
        # (Winograd's transforms over K = 576 products of unit normals: ~3e-4 of values ~24)
        np.testing.assert_allclose(out, want_y, rtol=1e-3, atol=1e-3)


def test_kernel_direct_empty_and_tiny():
    """The kernel called directly: an empty batch writes nothing; a 1x1 output plane."""
    w = np.random.default_rng(1).standard_normal((5, 3, 3, 3)).astype(np.float32)
    pk = CI.pack_weights(w)
    b = np.arange(5, dtype=np.float32)
    x = np.zeros((0, 3, 9, 9), np.float32)
    out = np.zeros((0, 5, 4, 4), np.float32)
    CI.conv2d_implicit(x, pk, 3, 3, b, out, out, np.zeros(1, np.float32), 2, 2, 0, 0, 1, 1,
                       True, False, 0, 0.0, 0.0)
    x = np.random.default_rng(2).standard_normal((1, 3, 3, 3)).astype(np.float32)
    out = np.full((1, 5, 1, 1), np.nan, np.float32)
    scr = np.zeros(CI.implicit_scratch_elems(1, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1), np.float32)
    CI.conv2d_implicit(x, pk, 3, 3, b, out, out, scr, 1, 1, 0, 0, 1, 1, True, False, 0, 0.0, 0.0)
    want = (w.reshape(5, -1) @ x.reshape(-1)) + b
    np.testing.assert_allclose(out.reshape(-1), want, rtol=1e-5, atol=1e-5)

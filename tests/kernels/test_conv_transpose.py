"""ConvTranspose compiled by jitort (kernels/cpu/conv_transpose.py) against onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import jitort


def _model(xshape, wshape, bias=True, opset=17, const_w=True, x_dims=None, **attrs):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal((wshape[1] * attrs.get('group', 1),)).astype(np.float32)
    ins = ['x', 'w'] + (['b'] if bias else [])
    inits = [numpy_helper.from_array(b, 'b')] if bias else []
    vis = [helper.make_tensor_value_info('x', TensorProto.FLOAT, x_dims or xshape)]
    feeds = {'x': x}
    if const_w:
        inits.append(numpy_helper.from_array(w, 'w'))
    else:
        vis.append(helper.make_tensor_value_info('w', TensorProto.FLOAT, wshape))
        feeds['w'] = w
    node = helper.make_node('ConvTranspose', ins, ['y'], **attrs)
    g = helper.make_graph([node], 'g', vis,
                          [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    return m, feeds


def _check(m, feeds, threads=None):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(m.SerializeToString(), so,
                               providers=['CPUExecutionProvider']).run(None, feeds)[0]
    cm = jitort.compile(m, threads=threads)
    assert cm.fallback_nodes() == []
    got = cm.run(None, feeds)[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    return cm


CASES = [
    # x shape, w shape, bias, attrs
    ((1, 4, 5, 5), (4, 3, 3, 3), True, {}),
    # decoder.onnx's upsampler in miniature: 3x3 stride 2, pads 1, output_padding 1
    ((2, 4, 5, 6), (4, 3, 3, 3), True, dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                            output_padding=[1, 1])),
    # U-Net up-conv: 2x2 stride 2 (no overlap), no bias
    ((1, 4, 5, 5), (4, 2, 2, 2), False, dict(strides=[2, 2])),
    # groups, unequal strides, dilation, asymmetric pads
    ((1, 4, 5, 5), (4, 2, 3, 3), True, dict(strides=[2, 3], dilations=[2, 1],
                                            pads=[1, 0, 2, 1], group=2)),
    # depthwise (one input channel per group: no gemm)
    ((1, 6, 5, 5), (6, 1, 3, 3), True, dict(strides=[2, 2], group=6)),
    ((1, 6, 5, 5), (6, 2, 4, 4), True, dict(strides=[2, 2], pads=[1, 1, 1, 1], group=6)),
    # stride 3, dilation 3 (odd, pairs taps), even dilation (no pairs)
    ((1, 3, 4, 5), (3, 2, 3, 3), True, dict(strides=[3, 2], dilations=[1, 3])),
    ((1, 3, 4, 5), (3, 2, 3, 3), True, dict(strides=[2, 2], dilations=[2, 2], pads=[2, 1, 0, 3])),
    # auto_pad: the odd total pad goes to the end for SAME_UPPER, to the begin for SAME_LOWER
    ((1, 4, 5, 5), (4, 2, 3, 3), True, dict(strides=[2, 2], auto_pad='SAME_UPPER')),
    ((1, 4, 5, 5), (4, 2, 4, 4), True, dict(strides=[3, 3], auto_pad='SAME_UPPER')),
    ((1, 4, 5, 5), (4, 2, 4, 4), True, dict(strides=[3, 3], auto_pad='SAME_LOWER')),
    ((1, 4, 5, 5), (4, 2, 3, 3), True, dict(strides=[2, 2], auto_pad='VALID')),
    # output_shape (pads derived from it), with auto_pad, with output_padding
    ((1, 4, 5, 5), (4, 2, 3, 3), True, dict(strides=[2, 2], output_shape=[10, 10])),
    ((1, 4, 5, 5), (4, 2, 3, 3), True, dict(strides=[2, 2], output_shape=[10, 9],
                                            auto_pad='SAME_UPPER')),
    ((1, 4, 5, 5), (4, 2, 3, 3), True, dict(strides=[2, 2], output_shape=[12, 11],
                                            output_padding=[1, 1])),
    # 1-D and 3-D
    ((1, 4, 7), (4, 3, 3), True, dict(strides=[2], pads=[1, 0])),
    ((2, 4, 9), (4, 1, 4), True, dict(strides=[2], pads=[1, 1], group=4)),
    ((1, 4, 3, 4, 5), (4, 3, 3, 3, 3), True, dict(strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1],
                                                  output_padding=[1, 0, 1])),
    ((1, 4, 3, 4, 5), (4, 2, 2, 2, 2), True, dict(strides=[2, 2, 2], group=2)),
]


@pytest.mark.parametrize('case', CASES, ids=[f'{c[0]}-{c[1]}-{sorted(c[3])}' for c in CASES])
def test_conv_transpose(case):
    xs, ws, bias, attrs = case
    _check(*_model(xs, ws, bias, **attrs))


@pytest.mark.parametrize('opset', [1, 11, 22])
def test_conv_transpose_opsets(opset):
    _check(*_model((1, 3, 4, 4), (3, 2, 3, 3), True, opset=opset, strides=[2, 2],
                   pads=[1, 1, 1, 1], output_padding=[1, 1], kernel_shape=[3, 3]))


def test_conv_transpose_weights_as_input():
    _check(*_model((1, 4, 5, 5), (4, 2, 3, 3), True, const_w=False, strides=[2, 2], group=2))


def test_conv_transpose_threads(nthreads):
    # big enough for the prange path (output channels split across workers at batch 1)
    _check(*_model((1, 16, 24, 24), (16, 8, 3, 3), True, strides=[2, 2], pads=[1, 1, 1, 1],
                   output_padding=[1, 1]), threads=nthreads)
    _check(*_model((2, 32, 12, 12), (32, 1, 4, 4), True, strides=[2, 2], pads=[1, 1, 1, 1],
                   group=32), threads=nthreads)


def test_conv_transpose_dynamic_shapes():
    """One compiled model serves every input size (the sizes are driver arguments)."""
    m, feeds = _model((1, 4, 5, 6), (4, 3, 3, 3), True, x_dims=['N', 4, 'H', 'W'],
                      strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])
    cm = _check(m, feeds)
    sess = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])
    for shape in [(2, 4, 7, 3), (1, 4, 1, 1)]:
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(cm.run(None, {'x': x})[0], sess.run(None, {'x': x})[0],
                                   rtol=1e-4, atol=1e-4)


def test_conv_transpose_empty():
    """Empty batch and empty spatial input: empty output / bias-only output, no reads."""
    m, _ = _model((0, 4, 5, 5), (4, 2, 3, 3), True, x_dims=['N', 4, 'H', 'W'], strides=[2, 2])
    cm = jitort.compile(m)
    assert cm.fallback_nodes() == []
    y = cm.run(None, {'x': np.zeros((0, 4, 5, 5), np.float32)})[0]
    assert y.shape == (0, 2, 11, 11)
    # no input rows (1x1 kernel): an empty output
    m, feeds = _model((1, 4, 0, 3), (4, 2, 1, 1), True, strides=[1, 1], output_padding=[0, 0])
    cm = jitort.compile(m)
    y = cm.run(None, {'x': np.zeros((1, 4, 0, 3), np.float32)})[0]
    assert y.shape == (1, 2, 0, 3)

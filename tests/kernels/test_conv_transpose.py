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
    # stride-2 tap pairs cropped at both ends of the row, a one-column input, odd dilation 3
    # with pads (pairs offset by one input column, ends that one tap of a pair reaches)
    ((1, 4, 5, 6), (4, 2, 2, 2), False, dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 4, 5, 1), (4, 2, 2, 2), False, dict(strides=[2, 2], pads=[1, 0, 0, 1])),
    ((1, 4, 3, 6), (4, 2, 5, 5), True, dict(strides=[2, 2], dilations=[1, 3], pads=[2, 4, 1, 3])),
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


# --- Conv beyond 2-D: 1-D (as 2-D with height 1) and 3-D (conv.conv3d), fused epilogues ------
def _conv_model(xshape, wshape, bias=True, post=(), **attrs):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[0]).astype(np.float32)
    inits = [numpy_helper.from_array(w, 'w')] + ([numpy_helper.from_array(b, 'b')] if bias else [])
    nodes = [helper.make_node('Conv', ['x', 'w'] + (['b'] if bias else []), ['c'], **attrs)]
    vis = [helper.make_tensor_value_info('x', TensorProto.FLOAT, xshape)]
    feeds = {'x': x}
    last = 'c'
    for i, op in enumerate(post):
        nodes.append(helper.make_node(op, [last], [f'p{i}']))
        last = f'p{i}'
    nodes.append(helper.make_node('Identity', [last], ['y']))
    m = helper.make_model(helper.make_graph(
        nodes, 'g', vis, [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid('', 17)])
    m.ir_version = 8
    return m, feeds


CONV_CASES = [
    # 1-D: strides, dilations, pads, groups, auto_pad
    ((2, 4, 11), (6, 4, 3), dict(pads=[1, 2])),
    ((1, 4, 12), (6, 2, 3), dict(strides=[2], dilations=[2], group=2, pads=[0, 1])),
    ((1, 4, 10), (4, 1, 5), dict(group=4, auto_pad='SAME_UPPER')),
    ((1, 4, 10), (8, 4, 4), dict(strides=[3], auto_pad='SAME_LOWER')),
    # 3-D
    ((2, 4, 5, 6, 7), (6, 4, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1])),
    ((1, 4, 6, 7, 8), (6, 4, 3, 3, 3), dict(strides=[2, 1, 2], dilations=[1, 2, 1],
                                            pads=[0, 1, 2, 1, 0, 1])),
    ((1, 4, 5, 6, 7), (6, 2, 3, 3, 3), dict(group=2, auto_pad='SAME_UPPER', strides=[2, 2, 2])),
    ((1, 4, 5, 6, 7), (6, 4, 1, 1, 1), dict(auto_pad='VALID')),
]


@pytest.mark.parametrize('case', CONV_CASES, ids=[f'{c[0]}-{c[1]}-{sorted(c[2])}' for c in CONV_CASES])
def test_conv_nd(case):
    xs, ws, attrs = case
    _check(*_conv_model(xs, ws, **attrs))


def test_conv3d_fused_relu():
    _check(*_conv_model((1, 4, 5, 6, 7), (6, 4, 3, 3, 3), post=('Relu',), pads=[1] * 6))


def test_conv3d_fused_residual():
    """Conv + Add(residual) + Relu: the residual read by the conv's epilogue."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 5, 6, 7)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    nodes = [helper.make_node('Conv', ['x', 'w', 'b'], ['c'], pads=[1] * 6),
             helper.make_node('Add', ['c', 'x'], ['a']), helper.make_node('Relu', ['a'], ['y'])]
    m = helper.make_model(helper.make_graph(
        nodes, 'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, 'w'), numpy_helper.from_array(b, 'b')]),
        opset_imports=[helper.make_opsetid('', 17)])
    m.ir_version = 8
    _check(m, {'x': x})


def test_conv3d_threads(nthreads):
    _check(*_conv_model((1, 8, 12, 12, 12), (16, 8, 3, 3, 3), pads=[1] * 6), threads=nthreads)


# --- pools beyond 2-D: 1-D MaxPool / AveragePool (2-D kernels at height 1), global pools ------
def _pool_check(op, xshape, opset=17, threads=None, **attrs):
    x = np.random.default_rng(4).standard_normal(xshape).astype(np.float32)
    m = helper.make_model(helper.make_graph(
        [helper.make_node(op, ['x'], ['y'], **attrs)], 'g',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, xshape)],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    _check(m, {'x': x}, threads=threads)


POOL_1D = [
    ('MaxPool', dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ('MaxPool', dict(kernel_shape=[3], strides=[2], ceil_mode=1)),
    ('MaxPool', dict(kernel_shape=[2], dilations=[2], pads=[1, 0])),
    ('MaxPool', dict(kernel_shape=[3], strides=[2], auto_pad='SAME_UPPER')),
    ('AveragePool', dict(kernel_shape=[3], strides=[1], pads=[1, 1])),
    ('AveragePool', dict(kernel_shape=[3], strides=[2], pads=[1, 0], count_include_pad=1)),
    ('AveragePool', dict(kernel_shape=[4], strides=[3], ceil_mode=1)),
]


@pytest.mark.parametrize('op,attrs', POOL_1D, ids=[f'{o}-{sorted(a.items())}' for o, a in POOL_1D])
def test_pool_1d(op, attrs):
    _pool_check(op, (2, 3, 11), **attrs)


@pytest.mark.parametrize('op', ['GlobalAveragePool', 'GlobalMaxPool'])
@pytest.mark.parametrize('shape', [(2, 3, 7), (1, 3, 4, 5, 6)])
def test_global_pool_nd(op, shape):
    _pool_check(op, shape)


POOL_ND = [
    # 3-D Max / Average / Lp
    ('MaxPool', (1, 2, 5, 6, 7), dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1] * 6)),
    ('MaxPool', (1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], ceil_mode=1, strides=[2, 2, 2])),
    ('AveragePool', (2, 2, 5, 6, 7), dict(kernel_shape=[3, 3, 3], pads=[1, 0, 1, 1, 1, 0])),
    ('AveragePool', (1, 2, 5, 6, 7), dict(kernel_shape=[3, 2, 3], strides=[2, 2, 2],
                                          pads=[1] * 6, count_include_pad=1)),
    ('AveragePool', (1, 2, 5, 6, 7), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2],
                                          ceil_mode=1)),
    # AveragePool dilations (opset 19)
    ('AveragePool', (1, 2, 9, 8), dict(kernel_shape=[3, 2], dilations=[2, 3], pads=[1, 1, 1, 1])),
    ('AveragePool', (1, 2, 9), dict(kernel_shape=[3], dilations=[2], count_include_pad=1,
                                    pads=[2, 1])),
    # LpPool: p 1, 2, 3; 1-D/2-D/3-D; dilations
    ('LpPool', (1, 3, 8, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ('LpPool', (1, 3, 10), dict(kernel_shape=[3], p=1)),
    ('LpPool', (1, 3, 8, 9), dict(kernel_shape=[2, 3], p=3, dilations=[2, 1])),
    ('LpPool', (1, 2, 4, 5, 6), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], p=2)),
    ('GlobalLpPool', (2, 3, 5, 6), dict()),
    ('GlobalLpPool', (2, 3, 7), dict(p=1)),
    ('GlobalLpPool', (1, 3, 3, 4, 5), dict(p=3)),
]


@pytest.mark.parametrize('op,shape,attrs', POOL_ND,
                         ids=[f'{o}-{s}-{sorted(a.items())}' for o, s, a in POOL_ND])
def test_pool_nd(op, shape, attrs):
    _pool_check(op, shape, opset=19, **attrs)


POOL_3D_EDGES = [
    # windows clipped on both sides of short rows (no window inside a row), stride 3
    ('MaxPool', (1, 3, 4, 3, 2), dict(kernel_shape=[3, 3, 3], strides=[3, 3, 3], pads=[2] * 6)),
    # dilated windows, stride 1, asymmetric pads
    ('MaxPool', (1, 3, 7, 8, 9), dict(kernel_shape=[2, 3, 3], dilations=[2, 2, 3],
                                      pads=[1, 2, 0, 0, 1, 2])),
    # kernel wider than the row (W = 2), ceil mode leaving a window in the end pad
    ('MaxPool', (2, 2, 5, 6, 2), dict(kernel_shape=[2, 2, 3], strides=[2, 2, 2], ceil_mode=1,
                                      pads=[0, 0, 1, 0, 0, 1])),
    ('AveragePool', (1, 3, 6, 7, 9), dict(kernel_shape=[3, 3, 3], strides=[1, 2, 3],
                                          dilations=[1, 2, 2], pads=[1, 2, 0, 2, 1, 2],
                                          count_include_pad=1)),
    ('AveragePool', (1, 3, 6, 7, 9), dict(kernel_shape=[3, 2, 4], strides=[2, 1, 2],
                                          pads=[0, 1, 3, 1, 0, 2])),
    ('LpPool', (1, 3, 5, 6, 7), dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], p=3,
                                     pads=[1] * 6)),
    # big enough for the parallel path at 2 threads
    ('MaxPool', (2, 8, 12, 12, 12), dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2],
                                         pads=[1] * 6)),
    ('AveragePool', (1, 8, 12, 13, 14), dict(kernel_shape=[3, 3, 3], pads=[1] * 6)),
]


@pytest.mark.parametrize('op,shape,attrs', POOL_3D_EDGES,
                         ids=[f'{o}-{s}-{sorted(a.items())}' for o, s, a in POOL_3D_EDGES])
def test_pool_3d_edges(op, shape, attrs, nthreads):
    """pool.pool5d's separable passes where windows are clipped (at every output, on one side,
    by a row shorter than the window), dilated, strided past the kernel, at 1 and 2
    threads."""
    _pool_check(op, shape, opset=19, threads=nthreads, **attrs)


@pytest.mark.parametrize('op', ['MaxPool', 'AveragePool'])
def test_pool_3d_empty_batch(op):
    attrs = dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1] * 6)
    m = helper.make_model(helper.make_graph(
        [helper.make_node(op, ['x'], ['y'], **attrs)], 'g',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 2, 5, 6, 7])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid('', 19)])
    m.ir_version = 8
    cm = jitort.compile(m)
    assert cm.fallback_nodes() == []
    assert cm.run(None, {'x': np.zeros((0, 2, 5, 6, 7), np.float32)})[0].shape == (0, 2, 3, 3, 4)


@pytest.mark.parametrize('shape,attrs', [
    ((2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((2, 3, 6, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 6, 7), dict(kernel_shape=[2, 2], strides=[2, 2], storage_order=1)),
    ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
    ((1, 2, 4, 5, 6), dict(kernel_shape=[3, 2, 2], strides=[1, 2, 2], storage_order=1)),
])
def test_maxpool_indices(shape, attrs):
    """MaxPool's second output: flat indices over the whole input (storage_order 1: the
    spatial axes column-major)."""
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    m = helper.make_model(helper.make_graph(
        [helper.make_node('MaxPool', ['x'], ['y', 'i'], **attrs)], 'g',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None),
         helper.make_tensor_value_info('i', TensorProto.INT64, None)]),
        opset_imports=[helper.make_opsetid('', 12)])
    m.ir_version = 8
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=['CPUExecutionProvider']).run(None, {'x': x})
    cm = jitort.compile(m)
    assert cm.fallback_nodes() == []
    got = cm.run(None, {'x': x})
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])


# --- MaxUnpool, Col2Im -----------------------------------------------------------------------
def _graph_check(nodes, inputs, inits=(), opset=18, n_out=1):
    """A small graph of ``nodes`` with (name, array) ``inputs`` and ``inits``: jitort
    (nothing interpreted) against onnxruntime, outputs y0..."""
    from onnx.helper import np_dtype_to_tensor_dtype as tt
    m = helper.make_model(helper.make_graph(
        nodes, 'g', [helper.make_tensor_value_info(k, tt(a.dtype), a.shape) for k, a in inputs],
        [helper.make_tensor_value_info(f'y{i}', TensorProto.FLOAT, None) for i in range(n_out)],
        [numpy_helper.from_array(a, k) for k, a in inits]),
        opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    feeds = dict(inputs)
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=['CPUExecutionProvider']).run(None, feeds)
    cm = jitort.compile(m)
    assert cm.fallback_nodes() == []
    got = cm.run(None, feeds)
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('shape,attrs,out_shape', [
    ((2, 3, 6, 8), dict(kernel_shape=[2, 2], strides=[2, 2]), None),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), None),
    ((1, 2, 6, 7), dict(kernel_shape=[2, 2], strides=[2, 2]), [1, 2, 7, 8]),
    ((1, 2, 9), dict(kernel_shape=[3], strides=[3]), None),
    ((1, 2, 4, 4, 6), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), None),
])
def test_max_unpool(shape, attrs, out_shape):
    """MaxPool's values and indices back through MaxUnpool (with an explicit output_shape)."""
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    ins = ['p', 'i'] + (['s'] if out_shape else [])
    inits = [('s', np.array(out_shape, np.int64))] if out_shape else []
    nodes = [helper.make_node('MaxPool', ['x'], ['p', 'i'], **attrs),
             helper.make_node('MaxUnpool', ins, ['y0'], **attrs)]
    _graph_check(nodes, [('x', x)], inits, opset=11)


@pytest.mark.parametrize('image,block,attrs', [
    ([5, 5], [1, 5], {}),                                          # onnx's example
    ([6, 7], [3, 3], dict(pads=[1, 1, 1, 1])),
    ([9, 8], [3, 2], dict(strides=[2, 3], dilations=[2, 1], pads=[1, 0, 2, 1])),
    ([10], [3], dict(strides=[2], pads=[1, 1])),
    ([4, 5, 6], [2, 2, 3], dict(strides=[2, 1, 2], pads=[0, 1, 1, 0, 1, 1])),
])
def test_col2im(image, block, attrs):
    nd = len(image)
    st = attrs.get('strides', [1] * nd)
    dl = attrs.get('dilations', [1] * nd)
    pd = attrs.get('pads', [0] * (2 * nd))
    grid = [(image[a] + pd[a] + pd[a + nd] - (dl[a] * (block[a] - 1) + 1)) // st[a] + 1
            for a in range(nd)]
    c = 2
    x = np.random.default_rng(8).standard_normal(
        (2, c * int(np.prod(block)), int(np.prod(grid)))).astype(np.float32)
    nodes = [helper.make_node('Col2Im', ['x', 'im', 'bl'], ['y0'], **attrs)]
    _graph_check(nodes, [('x', x)], [('im', np.array(image, np.int64)),
                                     ('bl', np.array(block, np.int64))])


def test_max_unpool_bad_index():
    """An index outside the output raises (never writes out of bounds)."""
    x = np.ones((1, 1, 2, 2), np.float32)
    i = np.array([0, 1, 2, 99], np.int64).reshape(1, 1, 2, 2)
    m = helper.make_model(helper.make_graph(
        [helper.make_node('MaxUnpool', ['x', 'i'], ['y'], kernel_shape=[2, 2], strides=[2, 2])],
        'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT, x.shape),
              helper.make_tensor_value_info('i', TensorProto.INT64, i.shape)],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid('', 11)])
    m.ir_version = 8
    cm = jitort.compile(m)
    assert cm.fallback_nodes() == []
    with pytest.raises(Exception, match='out of range'):
        cm.run(None, {'x': x, 'i': i})
    i[0, 0, 1, 1] = 3
    want = np.zeros(16, np.float32)
    want[:4] = 1
    np.testing.assert_array_equal(cm.run(None, {'x': x, 'i': i})[0], want.reshape(1, 1, 4, 4))


def test_conv_transpose_float64():
    """float64 (onnxruntime's CPU provider has no double ConvTranspose: onnx.reference, which
    has no groups)."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 4, 5, 6))
    w = rng.standard_normal((4, 3, 3, 3))
    b = rng.standard_normal(3)
    m = helper.make_model(helper.make_graph(
        [helper.make_node('ConvTranspose', ['x', 'w', 'b'], ['y'], strides=[2, 2],
                          pads=[1, 0, 1, 1], output_padding=[1, 0])], 'g',
        [helper.make_tensor_value_info('x', TensorProto.DOUBLE, x.shape)],
        [helper.make_tensor_value_info('y', TensorProto.DOUBLE, None)],
        [numpy_helper.from_array(w, 'w'), numpy_helper.from_array(b, 'b')]),
        opset_imports=[helper.make_opsetid('', 17)])
    m.ir_version = 8
    ref = ReferenceEvaluator(m).run(None, {'x': x})[0]
    cm = jitort.compile(m)
    assert cm.fallback_nodes() == []
    got = cm.run(None, {'x': x})[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)

"""Shape ops (jitort/codegen/lowerings/shape_ops.py, kernels/cpu/shape_ops.py) compiled through
jitort.compile against onnxruntime on the same inputs; every case asserts that nothing ran in
the interpreter."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.helper import np_dtype_to_tensor_dtype as _tt

import jitort
from jitort.kernels.cpu import shape_ops as K


def _model(nodes, inputs, outputs, inits=(), opset=19):
    """``inputs``: (name, array) graph inputs; ``inits``: (name, array) initializers."""
    vi = [helper.make_tensor_value_info(n, _tt(a.dtype), a.shape) for n, a in inputs]
    init = [numpy_helper.from_array(np.asarray(a), n) for n, a in inits]
    g = helper.make_graph(nodes, 'g', vi, [onnx.ValueInfoProto(name=n) for n in outputs],
                          initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    for o in m.graph.output:  # output types as onnx infers them
        o.CopyFrom(inferred.get(o.name, o))
    return m


def _check(m, feeds, threads=None, reference=False):
    """Run ``m`` in onnxruntime (onnx.reference where onnxruntime lacks the kernel) and jitort;
    assert equal outputs and nothing interpreted."""
    if reference:
        from onnx.reference import ReferenceEvaluator
        ref = ReferenceEvaluator(m).run(None, feeds)
    else:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        ref = ort.InferenceSession(m.SerializeToString(), so,
                                   providers=['CPUExecutionProvider']).run(None, feeds)
    cm = jitort.compile(m, threads=threads)
    got = cm.run(None, feeds)
    assert cm.fallback_nodes() == []
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        if g.dtype.kind == 'f':
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=0)
        else:
            np.testing.assert_array_equal(g, r)
    return cm


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) * 50).astype(dtype)


def _pad_model(x, pads, mode='constant', value=None, axes=None, opset=19):
    ins, inits = ['x', 'p'], [('p', np.array(pads, np.int64))]
    if value is not None or axes is not None:
        ins.append('' if value is None else 'v')
        if value is not None:
            inits.append(('v', np.array(value, x.dtype)))
    if axes is not None:
        ins.append('a')
        inits.append(('a', np.array(axes, np.int64)))
    return _model([helper.make_node('Pad', ins, ['y'], mode=mode)], [('x', x)], ['y'], inits,
                  opset)


# --- Pad -----------------------------------------------------------------------------------

_SP, _CROP = [0, 0, 1, 2, 0, 0, 3, 1], [0, 1, -1, 2, 0, 0, 3, -2]
PAD_CASES = [  # shape, pads (begins then ends), mode
    *[((2, 3, 5, 6), _SP, m) for m in ('constant', 'reflect', 'edge', 'wrap')],  # spatial pads
    *[((2, 3, 5, 6), _CROP, m) for m in ('constant', 'reflect', 'edge', 'wrap')],  # crops too
    ((2, 3, 5, 6), [1, 0, 0, 0, 0, 2, 0, 0], 'constant'),   # outer axes only: inner blocks of 30
    ((2, 3, 5, 6), [1, 0, 0, 0, 0, 2, 0, 0], 'edge'),
    ((7,), [2, 3], 'reflect'),                               # 1-D
    ((7,), [2, 3], 'wrap'),
    ((2, 3, 4, 5, 3), [0, 1, 0, 2, 1, 0, 0, 1, 2, 0], 'constant'),  # 5-D, alternating axes
    ((2, 3, 4, 5, 3), [0, 1, 0, 2, 1, 0, 0, 1, 2, 0], 'reflect'),
]


@pytest.mark.parametrize('shape,pads,mode', PAD_CASES)
def test_pad_modes(shape, pads, mode):
    x = _data(shape, np.float32)
    _check(_pad_model(x, pads, mode), {'x': x})


@pytest.mark.parametrize('mode,pads', [('wrap', [0, -3, 0, 2]), ('reflect', [0, 2, 0, -3]),
                                       ('edge', [-1, -2, 1, 5]), ('wrap', [-1, -2, 1, 5])])
def test_pad_crop_then_pad(mode, pads):
    """onnxruntime crops first and pads against what is left: wrap and reflect see the
    cropped extent."""
    x = _data((3, 8), np.float32)
    _check(_pad_model(x, pads, mode), {'x': x})


@pytest.mark.parametrize('dtype', [np.int32, np.uint8, np.bool_])
def test_pad_dtypes_constant_value(dtype):
    x = _data((2, 3, 4), dtype)
    value = True if dtype == np.bool_ else 7
    _check(_pad_model(x, [0, 1, 2, 0, 2, 1], 'constant', value=value), {'x': x})


@pytest.mark.parametrize('dtype', [np.int64])
def test_pad_dtypes_reflect(dtype):
    x = _data((3, 4, 5), dtype)
    _check(_pad_model(x, [0, 2, 1, 0, 1, 3], 'reflect'), {'x': x})


def test_pad_axes_input():
    """Opset 18: pads for the listed axes only, negative axes too."""
    x = _data((2, 3, 5, 6), np.float32)
    _check(_pad_model(x, [1, 2, 3, 0], 'constant', value=-1.5, axes=[-1, 1]), {'x': x})
    _check(_pad_model(x, [1, 2, 3, 1], 'reflect', axes=[2, 3], opset=18), {'x': x})


@pytest.mark.parametrize('opset', [11, 13, 21])
def test_pad_opsets(opset):
    x = _data((2, 3, 4, 5), np.float32)
    _check(_pad_model(x, [0, 0, 1, 1, 0, 0, 2, 1], 'edge', opset=opset), {'x': x})
    _check(_pad_model(x, [0, 0, 1, 1, 0, 0, 2, 1], 'constant', value=0.5, opset=opset), {'x': x})


def test_pad_opset2_attributes():
    x = _data((2, 3, 4, 5), np.float32)
    for mode in ('constant', 'reflect', 'edge'):
        node = helper.make_node('Pad', ['x'], ['y'], mode=mode, pads=[0, 0, 1, 2, 0, 0, 2, 1],
                                value=3.25)
        _check(_model([node], [('x', x)], ['y'], opset=2), {'x': x})


def test_pad_empty():
    """A constant pad of an empty tensor is all fill; an empty output writes nothing."""
    x = np.zeros((2, 0, 3), np.float32)
    _check(_pad_model(x, [0, 1, 0, 0, 2, 1], 'constant', value=4.0), {'x': x})
    _check(_pad_model(x, [0, 0, 1, 0, 0, 1], 'edge'), {'x': x})  # the empty axis unpadded
    x = _data((0, 3, 4), np.float32)
    _check(_pad_model(x, [0, 1, 1, 0, 1, 1], 'reflect'), {'x': x})


def test_pad_no_pads_and_scalar_value_input_absent():
    x = _data((2, 3), np.float32)
    _check(_pad_model(x, [0, 0, 0, 0], 'constant'), {'x': x})


def test_pad_parallel(nthreads):
    """Above the parallel threshold (the prange over the two outer axes), 1 and 2 threads."""
    x = _data((2, 4, 130, 130), np.float32)
    _check(_pad_model(x, [0, 0, 3, -2, 0, 0, 3, 1], 'reflect'), {'x': x}, threads=nthreads)


def test_pad_pads_from_graph_input():
    """Pads that arrive as a graph input (known on the host at run time), per call."""
    x = _data((2, 3, 4), np.float32)
    m = _model([helper.make_node('Pad', ['x', 'p'], ['y'], mode='reflect')],
               [('x', x), ('p', np.zeros(6, np.int64))], ['y'])
    for pads in ([0, 1, 2, 0, 1, 1], [0, 0, 1, 0, 2, 3]):
        _check(m, {'x': x, 'p': np.array(pads, np.int64)})


def test_pad_src_index_map():
    """The index map against numpy.pad, pads longer than the axis included."""
    for n in (1, 2, 3, 5):
        for p in (0, 1, 3, 12):
            for code, mode in ((1, 'reflect'), (2, 'edge'), (3, 'wrap')):
                ref = np.zeros(n + 2 * p, int) if (n == 1 and mode == 'reflect') \
                    else np.pad(np.arange(n), p, mode=mode)
                got = [K.pad_src(o - p, n, code) for o in range(n + 2 * p)]
                np.testing.assert_array_equal(got, ref)


# --- Tile, DepthToSpace, SpaceToDepth, Trilu, ReverseSequence, CenterCropPad ------------------

def _one(op, inputs, inits=(), opset=19, threads=None, reference=False, **attrs):
    names = [n for n, _ in inputs] + [n for n, _ in inits]
    m = _model([helper.make_node(op, names, ['y'], **attrs)], inputs, ['y'], inits, opset)
    return _check(m, dict(inputs), threads, reference)


@pytest.mark.parametrize('shape,reps', [
    ((2, 3, 4, 5), [1, 2, 1, 3]),     # repeat axes between unrepeated ones
    ((2, 3, 4, 5), [2, 1, 2, 1]),     # the unrepeated tail joins the last repeated axis
    ((5,), [3]),
    ((2, 3), [0, 2]),                 # an empty output
    ((2, 3), [1, 1]),                 # a copy
])
def test_tile(shape, reps):
    _one('Tile', [('x', _data(shape, np.float32))], [('r', np.array(reps, np.int64))])


@pytest.mark.parametrize('dtype', [np.int64, np.bool_])
def test_tile_dtypes(dtype):
    _one('Tile', [('x', _data((1, 4, 3), dtype))], [('r', np.array([3, 1, 2], np.int64))], opset=13)


def test_tile_parallel(nthreads):
    _one('Tile', [('x', _data((8, 64, 64), np.float32))], [('r', np.array([1, 2, 2], np.int64))],
         threads=nthreads)


@pytest.mark.parametrize('mode', ['DCR', 'CRD'])
def test_depth_to_space(mode):
    _one('DepthToSpace', [('x', _data((2, 18, 3, 4), np.float32))], blocksize=3, mode=mode)


def test_depth_to_space_opsets_int_and_space_to_depth():
    _one('DepthToSpace', [('x', _data((1, 8, 2, 3), np.float32))], opset=1, blocksize=2)
    # onnxruntime's CPU provider has no int64 kernels for these: onnx.reference
    _one('DepthToSpace', [('x', _data((1, 8, 2, 3), np.int64))], opset=13, blocksize=2,
         mode='CRD', reference=True)
    _one('SpaceToDepth', [('x', _data((2, 3, 4, 6), np.float32))], opset=1, blocksize=2)
    _one('SpaceToDepth', [('x', _data((1, 2, 6, 3), np.int64))], opset=13, blocksize=3,
         reference=True)


def test_space_to_depth_crd_opset28():
    _one('SpaceToDepth', [('x', _data((2, 3, 4, 6), np.float32))], opset=28, blocksize=2,
         mode='CRD')
    _one('DepthToSpace', [('x', _data((2, 12, 2, 3), np.float32))], opset=28, blocksize=2,
         mode='CRD')


def test_depth_space_parallel(nthreads):
    """Above the parallel threshold: a super-resolution head (r = 3) and its inverse."""
    _one('DepthToSpace', [('x', _data((1, 18, 96, 96), np.float32))], blocksize=3,
         threads=nthreads)
    _one('SpaceToDepth', [('x', _data((1, 2, 288, 288), np.float32))], blocksize=3,
         threads=nthreads)


@pytest.mark.parametrize('upper,k', [(1, None), (1, 2), (0, -1), (0, 7), (1, -9)])
def test_trilu(upper, k):
    inits = [] if k is None else [('k', np.array(k, np.int64))]
    _one('Trilu', [('x', _data((2, 4, 6), np.float32))], inits, upper=upper)


def test_trilu_k_computed_and_dtypes():
    """k from a graph input (read at run time), int64 and bool data, a 2-D input."""
    for dtype in (np.int64, np.bool_):
        x = _data((5, 3), dtype)
        m = _model([helper.make_node('Trilu', ['x', 'k'], ['y'], upper=0)],
                   [('x', x), ('k', np.array(1, np.int64))], ['y'])
        for k in (1, -2):
            _check(m, {'x': x, 'k': np.array(k, np.int64)})


def test_trilu_empty_and_parallel(nthreads):
    _one('Trilu', [('x', _data((3, 0, 4), np.float32))])
    _one('Trilu', [('x', _data((4, 256, 256), np.float32))], [('k', np.array(1, np.int64))],
         threads=nthreads)


@pytest.mark.parametrize('time_axis', [0, 1])
def test_reverse_sequence(time_axis):
    x = _data((4, 3, 5) if time_axis == 0 else (3, 4, 5), np.float32)
    lens = np.array([4, 0, 2], np.int64)
    _one('ReverseSequence', [('x', x), ('l', lens)], time_axis=time_axis,
         batch_axis=1 - time_axis)


def test_reverse_sequence_int64_2d():
    _one('ReverseSequence', [('x', _data((3, 6), np.int64)), ('l', np.array([6, 1, 3], np.int64))],
         time_axis=1, batch_axis=0)


def test_reverse_sequence_bad_length_raises():
    x = _data((4, 2, 3), np.float32)
    m = _model([helper.make_node('ReverseSequence', ['x', 'l'], ['y'])],
               [('x', x), ('l', np.array([4, 1], np.int64))], ['y'])
    cm = jitort.compile(m)
    assert cm.fallback_nodes() == []
    with pytest.raises(Exception):
        cm.run(None, {'x': x, 'l': np.array([5, 1], np.int64)})


@pytest.mark.parametrize('sizes,axes', [([3, 2, 7, 4], None), ([8, 1], [-1, 1]), ([2, 5], [0, 3])])
def test_center_crop_pad(sizes, axes):
    kw = {} if axes is None else {'axes': axes}
    _one('CenterCropPad', [('x', _data((2, 3, 4, 5), np.float32))],
         [('s', np.array(sizes, np.int64))], **kw)


# --- EyeLike, Range, ConstantOfShape (on the data path: fed by graph inputs) -------------------

def test_eye_like():
    _one('EyeLike', [('x', _data((3, 5), np.float32))], k=1)
    _one('EyeLike', [('x', _data((4, 3), np.float32))], k=-1, dtype=7)   # int64
    _one('EyeLike', [('x', _data((2, 2), np.int32))], opset=22, k=3)     # an empty diagonal


@pytest.mark.parametrize('start,limit,delta', [
    (np.float32(1.5), np.float32(9.0), np.float32(0.7)),
    (np.int64(10), np.int64(-3), np.int64(-3)),
    (np.int32(0), np.int32(5), np.int32(1)),
    (np.int64(4), np.int64(4), np.int64(1)),      # empty
])
def test_range(start, limit, delta):
    _one('Range', [('a', np.array(start)), ('b', np.array(limit)), ('c', np.array(delta))])


def test_constant_of_shape():
    _one('ConstantOfShape', [('s', np.array([2, 3], np.int64))],
         value=helper.make_tensor('v', 7, [1], [5]))
    _one('ConstantOfShape', [('s', np.array([4], np.int64))])
    _one('ConstantOfShape', [('s', np.array([3, 0], np.int64))],
         value=helper.make_tensor('v', 1, [1], [2.5]))

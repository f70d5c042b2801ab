"""Elementwise ops of the fused-loop table (jitort/codegen/elementwise.py) added for issue 20:
Mod, BitShift, Bitwise*, integer Div and Sign, Celu, Mish, Swish, Shrink, IsInf, IsNaN, CastLike.
One small model per case, compiled by jitort in strict mode (nothing interpreted) and compared
with onnxruntime on the same inputs."""
import numba
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.helper import np_dtype_to_tensor_dtype as tt

import jitort

from .helpers import assert_outputs_close, called_names


def _run_both(nodes, inputs, out_dtype, opset=18, threads=1, outs=('y',)):
    vi = [helper.make_tensor_value_info(n, tt(a.dtype), a.shape) for n, a in inputs]
    vo = [helper.make_tensor_value_info(o, tt(np.dtype(out_dtype)), None) for o in outs]
    g = helper.make_graph(nodes, 'g', vi, vo)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 10
    feeds = dict(inputs)
    cm = jitort.compile(m, threads=threads, strict=True)
    got = cm.run(None, feeds)
    assert cm.fallback_nodes() == []
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(m.SerializeToString(), so,
                               providers=['CPUExecutionProvider']).run(None, feeds)
    assert_outputs_close(got, ref, rtol=1e-4, atol=1e-6)
    return got[0]


def _node(op, n_in=1, **attrs):
    return helper.make_node(op, ['a', 'b', 'c'][:n_in], ['y'], **attrs)


def _ints(shape, dtype, lo=-20, hi=21, seed=0, nonzero=False):
    x = np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)
    if nonzero:
        x[x == 0] = 3
    return x


def _f(shape, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize('dtype,fmod', [(np.int64, 0), (np.int32, 1), (np.int64, 1),
                                        (np.uint8, 0), (np.float32, 1), (np.float64, 1)])
def test_mod(dtype, fmod):
    if np.dtype(dtype).kind == 'f':
        a, b = _f((3, 4)).astype(dtype), (_f((4,), 1) + 0.5).astype(dtype)
    else:
        lo = 0 if np.dtype(dtype).kind == 'u' else -20
        a, b = _ints((3, 4), dtype, lo), _ints((4,), dtype, lo, seed=1, nonzero=True)
    _run_both([_node('Mod', 2, fmod=fmod)], [('a', a), ('b', b)], dtype, opset=13)


@pytest.mark.parametrize('dtype', [np.float32, np.float64, np.float16])
def test_mod_float_python_style(dtype):
    """Mod with fmod=0 on floats (opset 13's spec asks fmod=1; onnx.reference and BackendTest
    take it as np.mod): the sign of the divisor, signed zeros included, and inf/nan/0 edges,
    compared bit for bit (sign of zero, NaN position) with onnx.reference."""
    from onnx.reference import ReferenceEvaluator
    edge = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -7.25, np.inf, -np.inf, np.nan, 6.0], dtype)
    a = np.concatenate([np.repeat(edge, edge.size), _f((50,)).astype(dtype)])
    b = np.concatenate([np.tile(edge, edge.size), (_f((50,), 1) + 0.1).astype(dtype)])
    node = _node('Mod', 2, fmod=0)
    vi = [helper.make_tensor_value_info(n, tt(np.dtype(dtype)), a.shape) for n in 'ab']
    vo = [helper.make_tensor_value_info('y', tt(np.dtype(dtype)), None)]
    m = helper.make_model(helper.make_graph([node], 'g', vi, vo),
                          opset_imports=[helper.make_opsetid('', 13)])
    cm = jitort.compile(m, strict=True)
    with np.errstate(all='ignore'):
        got = cm.run(None, {'a': a, 'b': b})[0]
        ref = ReferenceEvaluator(m).run(None, {'a': a, 'b': b})[0]
    assert cm.fallback_nodes() == []
    assert got.dtype == ref.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))


@pytest.mark.parametrize('dtype', [np.int32, np.int64])
def test_int_div_truncates(dtype):
    a = np.array([7, -7, 7, -7, 0, 9], dtype)
    b = np.array([2, 2, -2, -2, 5, 3], dtype)
    _run_both([_node('Div', 2)], [('a', a), ('b', b)], dtype, opset=14)


@pytest.mark.parametrize('dtype,direction', [(np.uint8, 'LEFT'), (np.uint32, 'RIGHT'),
                                             (np.uint64, 'LEFT')])
def test_bitshift(dtype, direction):
    a = _ints((2, 5), dtype, 0, 200)
    b = _ints((5,), dtype, 0, 7, seed=1)
    _run_both([_node('BitShift', 2, direction=direction)], [('a', a), ('b', b)], dtype, opset=11)


@pytest.mark.parametrize('direction', ['LEFT', 'RIGHT'])
@pytest.mark.parametrize('dtype', [np.int8, np.int64, np.uint8, np.uint64])
def test_bitshift_opset28_signed_and_out_of_range(dtype, direction):
    """Opset 28: signed types (arithmetic right shift, left shift past the sign bit cut) and
    amounts that are negative or at least the width (the sign fill: -1 or 0), against
    onnx.reference (onnxruntime 1.32 implements BitShift for unsigned types only)."""
    from onnx.reference import ReferenceEvaluator
    bits = 8 * np.dtype(dtype).itemsize
    lo = 0 if np.dtype(dtype).kind == 'u' else -100
    a = _ints((4, 8), dtype, lo, 100)
    b = np.array([0, 1, 3, bits - 1, bits, bits + 5, 2, 1], dtype)
    if np.dtype(dtype).kind == 'i':
        b[6:] = (-1, -bits)
    g = helper.make_graph([_node('BitShift', 2, direction=direction)], 'g',
                          [helper.make_tensor_value_info('a', tt(a.dtype), a.shape),
                           helper.make_tensor_value_info('b', tt(b.dtype), b.shape)],
                          [helper.make_tensor_value_info('y', tt(a.dtype), None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 28)])
    m.ir_version = 10
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, {'a': a, 'b': b})
    assert cm.fallback_nodes() == []
    want = ReferenceEvaluator(m).run(None, {'a': a, 'b': b})
    assert_outputs_close(got, want, exact=True)


@pytest.mark.parametrize('op', ['BitwiseAnd', 'BitwiseOr', 'BitwiseXor'])
@pytest.mark.parametrize('dtype', [np.int32, np.uint8])
def test_bitwise(op, dtype):
    lo = 0 if np.dtype(dtype).kind == 'u' else -100
    a, b = _ints((3, 4), dtype, lo, 100), _ints((1, 4), dtype, lo, 100, seed=1)
    _run_both([_node(op, 2)], [('a', a), ('b', b)], dtype)


@pytest.mark.parametrize('dtype', [np.int64, np.uint8])
def test_bitwise_not(dtype):
    lo = 0 if np.dtype(dtype).kind == 'u' else -100
    _run_both([_node('BitwiseNot')], [('a', _ints((3, 4), dtype, lo, 100))], dtype)


def test_sign_int():
    _run_both([_node('Sign')], [('a', _ints((3, 4), np.int64))], np.int64, opset=13)


@pytest.mark.parametrize('op,attrs,opset', [
    ('Celu', {}, 12), ('Celu', {'alpha': 2.0}, 12), ('Mish', {}, 18),
    ('Shrink', {}, 9), ('Shrink', {'lambd': 1.5, 'bias': 0.25}, 9),
    ('Swish', {}, 24), ('Swish', {'alpha': 0.5}, 24)])
def test_activation(op, attrs, opset):
    x = _f((4, 33))
    x[0, :4] = [0.0, -100.0, 100.0, 25.0]
    _run_both([_node(op, **attrs)], [('a', x)], np.float32, opset=opset)


@pytest.mark.parametrize('alpha,dtype', [(1.0, np.float32), (0.5, np.float32), (1.702, np.float64)])
def test_swiglu(alpha, dtype):
    """SwiGLU (opset 28): Swish_alpha(A) * B, fused with the projection's bias Add before it
    into one loop; against onnx.reference (onnxruntime has no SwiGLU yet)."""
    from onnx.reference import ReferenceEvaluator
    t = tt(np.dtype(dtype))
    nodes = [helper.make_node('Add', ['a', 'c'], ['g']),
             helper.make_node('SwiGLU', ['g', 'b'], ['y'], alpha=alpha)]
    g = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info(k, t, s) for k, s in
                                       (('a', [2, 'S', 64]), ('b', [2, 'S', 64]), ('c', [64]))],
                          [helper.make_tensor_value_info('y', t, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 28)])
    m.ir_version = 10
    cm = jitort.compile(m, strict=True)
    for s in (5, 1):
        feeds = {'a': _f((2, s, 64)).astype(dtype), 'b': _f((2, s, 64), 1).astype(dtype),
                 'c': _f((64,), 2).astype(dtype)}
        feeds['a'][0, 0, :3] = [-100.0, 100.0, 0.0]
        assert_outputs_close(cm.run(None, feeds), ReferenceEvaluator(m).run(None, feeds),
                             rtol=1e-5, atol=1e-6)
    assert cm.fallback_nodes() == []
    assert len(called_names(cm)) == 1  # the Add and the SwiGLU: one fused loop


def test_swiglu_rejects_different_shapes():
    g = helper.make_graph([helper.make_node('SwiGLU', ['a', 'b'], ['y'])], 'g',
                          [helper.make_tensor_value_info('a', tt(np.dtype(np.float32)), [2, 4]),
                           helper.make_tensor_value_info('b', tt(np.dtype(np.float32)), [4])],
                          [helper.make_tensor_value_info('y', tt(np.dtype(np.float32)), None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 28)])
    m.ir_version = 10
    with pytest.raises(jitort.JitortError, match="same shape"):
        jitort.compile(m).run(None, {'a': _f((2, 4)), 'b': _f((4,))})


def test_mish_float64():
    _run_both([_node('Mish')], [('a', _f((5, 7)).astype(np.float64))], np.float64)


def test_shrink_int():
    _run_both([_node('Shrink', lambd=2.0, bias=1.0)], [('a', _ints((3, 5), np.int32, -5, 6))],
              np.int32)


@pytest.mark.parametrize('pos,neg', [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf(pos, neg):
    x = np.array([1.0, np.inf, -np.inf, np.nan, 0.0, -3.0], np.float32)
    _run_both([_node('IsInf', detect_positive=pos, detect_negative=neg)], [('a', x)], np.bool_,
              opset=20)


def test_isnan():
    x = np.array([1.0, np.inf, np.nan, -np.nan, 0.0], np.float64)
    _run_both([_node('IsNaN')], [('a', x)], np.bool_, opset=20)


@pytest.mark.parametrize('src,dst', [(np.float32, np.int64), (np.int32, np.float32),
                                     (np.float32, np.bool_)])
def test_castlike(src, dst):
    x = (_f((3, 4)) * 2).astype(src)
    t = np.zeros((2,), dst)
    nodes = [helper.make_node('CastLike', ['a', 't'], ['y'])]
    _run_both(nodes, [('a', x), ('t', t)], dst, opset=19)


def test_fused_chain_broadcast_and_empty():
    """Celu -> Mish -> Mul by a broadcast operand: one fused loop; then the same on an empty
    input."""
    nodes = [helper.make_node('Celu', ['a'], ['t'], alpha=0.5),
             helper.make_node('Mish', ['t'], ['u']),
             helper.make_node('Mul', ['u', 'b'], ['y'])]
    _run_both(nodes, [('a', _f((2, 3, 5))), ('b', _f((3, 1), 1))], np.float32)
    _run_both(nodes, [('a', _f((2, 0, 5))), ('b', _f((1, 1), 1))], np.float32)


@pytest.fixture(params=sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}))
def nthreads(request):
    old = numba.get_num_threads()
    numba.set_num_threads(request.param)
    yield request.param
    numba.set_num_threads(old)


def test_parallel(nthreads):
    nodes = [helper.make_node('Mish', ['a'], ['t']),
             helper.make_node('Mod', ['t', 'b'], ['y'], fmod=1)]
    _run_both(nodes, [('a', _f((64, 4096))), ('b', np.array([1.5], np.float32))], np.float32,
              threads=nthreads)




@pytest.mark.parametrize('opset,training', [(13, None), (12, False), (10, None)])
def test_dropout_mask(opset, training):
    """Inference Dropout whose mask is a graph output (the passes remove the others)."""
    from onnx import numpy_helper
    x = _f((3, 5))
    ins = ['a']
    inits = []
    if training is not None:
        ins += ['r', 't']
        inits = [numpy_helper.from_array(np.array(0.3, np.float32), 'r'),
                 numpy_helper.from_array(np.array(training), 't')]
    node = helper.make_node('Dropout', ins, ['y', 'm'])
    vi = [helper.make_tensor_value_info('a', tt(x.dtype), x.shape)]
    vo = [helper.make_tensor_value_info('y', tt(x.dtype), None),
          helper.make_tensor_value_info('m', tt(np.dtype(np.bool_)), None)]
    m = helper.make_model(helper.make_graph([node], 'g', vi, vo, initializer=inits),
                          opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, {'a': x})
    assert cm.fallback_nodes() == []
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=['CPUExecutionProvider']).run(None, {'a': x})
    np.testing.assert_array_equal(got[0], ref[0])
    assert got[1].dtype == ref[1].dtype == np.bool_
    np.testing.assert_array_equal(got[1], ref[1])


def test_training_dropout_ratio_and_mode_fed():
    """Dropout-13 with ratio and training_mode fed at run time: they key the plan; ratio 0 in
    training and any ratio in inference compile to the identity (mask all True); a nonzero
    ratio in training declines when planned and runs in the interpreter (a random mask)."""
    node = helper.make_node('Dropout', ['a', 'r', 't'], ['y', 'm'], seed=0)
    x = _f((3, 5))
    vi = [helper.make_tensor_value_info('a', tt(x.dtype), x.shape),
          helper.make_tensor_value_info('r', tt(np.dtype(np.float32)), []),
          helper.make_tensor_value_info('t', tt(np.dtype(np.bool_)), [])]
    vo = [helper.make_tensor_value_info('y', tt(x.dtype), None),
          helper.make_tensor_value_info('m', tt(np.dtype(np.bool_)), None)]
    m = helper.make_model(helper.make_graph([node], 'g', vi, vo),
                          opset_imports=[helper.make_opsetid('', 13)])
    m.ir_version = 8
    strict = jitort.compile(m, strict=True, tiered=False)
    for ratio, training in ((0.0, True), (0.5, False), (0.0, False)):
        y, mask = strict(a=x, r=np.float32(ratio), t=np.array(training))
        np.testing.assert_array_equal(y, x)
        assert mask.dtype == np.bool_ and mask.shape == x.shape and mask.all()
    assert strict.fallback_nodes() == []
    with pytest.raises(jitort.UnsupportedOp, match='nonzero ratio'):
        strict(a=x, r=np.float32(0.5), t=np.array(True))
    loose = jitort.compile(m, tiered=False)
    y, mask = loose(a=x, r=np.float32(0.5), t=np.array(True))
    np.testing.assert_allclose(y, np.where(mask, x * 2, 0), rtol=1e-6)


@pytest.mark.parametrize('base,exp', [(np.int64, np.int64), (np.int32, np.int64),
                                      (np.float32, np.int64), (np.int64, np.float32),
                                      (np.float32, np.float32)])
def test_pow_types(base, exp):
    a = np.array([[1, 2, 3, -2], [0, 5, 7, -3]], base)
    b = np.array([3, 2, 0, 3], exp)
    _run_both([_node('Pow', 2)], [('a', a), ('b', b)], base, opset=15)

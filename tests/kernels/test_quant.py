"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul,
ConvInteger, QLinearConv compiled by jitort (kernels/cpu/quant.py) against onnxruntime on the
same inputs; every model is compiled in strict mode, so nothing runs in the interpreter.
Integer outputs must be equal, float ones within rtol 1e-4."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.helper import np_dtype_to_tensor_dtype as tt

import jitort


def _model(node, inputs, inits=(), opset=13):
    vi = [helper.make_tensor_value_info(n, tt(a.dtype), a.shape) for n, a in inputs]
    init = [numpy_helper.from_array(np.asarray(a), n) for n, a in inits]
    outs = [onnx.ValueInfoProto(name=o) for o in node.output]
    g = helper.make_graph([node], 'g', vi, outs, initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8 if opset < 21 else 10
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    for o in m.graph.output:
        o.CopyFrom(inferred.get(o.name, o))
    return m


def check(node, inputs, inits=(), opset=13, threads=1):
    """Compile a one-node model with jitort (strict: nothing interpreted) and compare every
    output with onnxruntime's."""
    m = _model(node, inputs, inits, opset)
    cm = jitort.compile(m, threads=threads, strict=True)
    got = cm.run(None, dict(inputs))
    assert cm.fallback_nodes() == []
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=['CPUExecutionProvider'])
    ref = sess.run(None, dict(inputs))
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        g, r = np.asarray(g), np.asarray(r)
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
        if g.dtype.kind == 'f':
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, r)
    return got


def _f(*shape, scale=4.0, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _q(shape, dtype=np.uint8, seed=0, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return np.random.default_rng(seed).integers(lo, hi + 1, shape).astype(dtype)


# --- QuantizeLinear ------------------------------------------------------------------------------

def test_quantize_per_tensor_opset10_ties_and_saturation():
    # exact halves (round half to even before the odd zero point), saturation both ways
    x = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e6, -1e6, 0.0, 3.25, 127.5, -128.5]],
                 np.float32) * np.float32(0.5)
    check(helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y']), [('x', x)],
          [('s', np.float32(0.5)), ('z', np.uint8(3))], opset=10)
    check(helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y']), [('x', x)],
          [('s', np.float32(0.5)), ('z', np.int8(-3))], opset=10)


@pytest.mark.parametrize('case', ['no_zp', 'axis1_i8', 'axis_last_u8', 'axis0_1d_scale'])
def test_quantize_per_axis(case):
    x = _f(2, 3, 5)
    if case == 'no_zp':  # uint8 output, per-tensor scale as a 1-element 1-D tensor
        node, inits = helper.make_node('QuantizeLinear', ['x', 's'], ['y']), \
            [('s', np.array([0.07], np.float32))]
    elif case == 'axis1_i8':
        node = helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y'], axis=1)
        inits = [('s', np.array([0.05, 0.1, 0.2], np.float32)), ('z', np.array([0, 5, -7], np.int8))]
    elif case == 'axis_last_u8':
        node = helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y'], axis=-1)
        inits = [('s', np.linspace(0.02, 0.1, 5).astype(np.float32)),
                 ('z', np.array([128, 100, 3, 250, 0], np.uint8))]
    else:
        node = helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y'], axis=0)
        inits = [('s', np.array([0.03, 0.3], np.float32)), ('z', np.array([1, 2], np.uint8))]
    check(node, [('x', x)], inits)


def test_quantize_scale_as_input_and_empty():
    x = _f(4, 6)
    check(helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y'], axis=1),
          [('x', x), ('s', np.linspace(0.01, 0.2, 6).astype(np.float32)),
           ('z', np.arange(6, dtype=np.int8))])
    check(helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y']), [('x', _f(0, 3))],
          [('s', np.float32(0.1)), ('z', np.uint8(9))])


@pytest.mark.parametrize('dtype,axis,block', [(np.int8, 2, 3), (np.uint8, 0, 2),
                                              (np.int16, 1, 4), (np.uint16, -1, 5)])
def test_quantize_blocked_opset21(dtype, axis, block):
    x = _f(3, 6, 7, scale=40.0)
    shape = list(x.shape)
    shape[axis] = -(-shape[axis] // block)
    s = np.random.default_rng(1).uniform(0.01, 0.2, shape).astype(np.float32)
    z = _q(shape, dtype, seed=2, lo=0 if dtype in (np.uint8, np.uint16) else -20, hi=20)
    check(helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y'], axis=axis, block_size=block),
          [('x', x)], [('s', s), ('z', z)], opset=21)


def test_quantize_output_dtype_attr_opset21():
    check(helper.make_node('QuantizeLinear', ['x', 's'], ['y'], output_dtype=onnx.TensorProto.INT8),
          [('x', _f(5, 4))], [('s', np.float32(0.05))], opset=21)


def test_quantize_big_split(nthreads):
    x = _f(3, 256, 200)  # >= 128K elements: split over the threads
    check(helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y']), [('x', x)],
          [('s', np.float32(0.03)), ('z', np.uint8(128))], threads=nthreads)
    check(helper.make_node('QuantizeLinear', ['x', 's', 'z'], ['y'], axis=1), [('x', x)],
          [('s', np.linspace(0.01, 0.1, 256).astype(np.float32)), ('z', np.zeros(256, np.int8))],
          threads=nthreads)


# --- DequantizeLinear ----------------------------------------------------------------------------

@pytest.mark.parametrize('dtype', [np.uint8, np.int8, np.int32])
def test_dequantize_per_tensor(dtype):
    x = _q((3, 7), dtype, lo=-100000 if dtype == np.int32 else None,
           hi=100000 if dtype == np.int32 else None)
    zp = np.array(0 if dtype == np.int32 else 7, dtype)
    check(helper.make_node('DequantizeLinear', ['x', 's', 'z'], ['y']), [('x', x)],
          [('s', np.float32(0.037)), ('z', zp)], opset=10)
    check(helper.make_node('DequantizeLinear', ['x', 's'], ['y']), [('x', x)],
          [('s', np.float32(0.5))], opset=13)


@pytest.mark.parametrize('axis', [1, -1, 0])
def test_dequantize_per_axis(axis):
    x = _q((4, 3, 5), np.int8)
    d = x.shape[axis]
    check(helper.make_node('DequantizeLinear', ['x', 's', 'z'], ['y'], axis=axis), [('x', x)],
          [('s', np.linspace(0.01, 0.3, d).astype(np.float32)), ('z', _q((d,), np.int8, 3))])


@pytest.mark.parametrize('dtype,axis,block', [(np.uint8, 1, 4), (np.int8, 0, 3), (np.int16, 2, 2)])
def test_dequantize_blocked_opset21(dtype, axis, block):
    x = _q((5, 9, 4), dtype, seed=4)
    shape = list(x.shape)
    shape[axis] = -(-shape[axis] // block)
    s = np.random.default_rng(1).uniform(0.01, 0.2, shape).astype(np.float32)
    check(helper.make_node('DequantizeLinear', ['x', 's', 'z'], ['y'], axis=axis, block_size=block),
          [('x', x)], [('s', s), ('z', _q(shape, dtype, seed=5))], opset=21)


def test_dequantize_empty_and_big_split(nthreads):
    check(helper.make_node('DequantizeLinear', ['x', 's', 'z'], ['y']), [('x', _q((0, 5)))],
          [('s', np.float32(0.1)), ('z', np.uint8(1))])
    x = _q((2, 128, 640))
    check(helper.make_node('DequantizeLinear', ['x', 's', 'z'], ['y']), [('x', x)],
          [('s', np.float32(0.02)), ('z', np.uint8(128))], threads=nthreads)


# --- DynamicQuantizeLinear -----------------------------------------------------------------------

@pytest.mark.parametrize('case', ['mixed', 'positive', 'negative', 'zeros', 'empty'])
def test_dynamic_quantize(case):
    x = {'mixed': _f(3, 17), 'positive': np.abs(_f(40)) + 1, 'negative': -np.abs(_f(6, 5)) - 0.5,
         'zeros': np.zeros((4, 4), np.float32), 'empty': np.zeros((0, 3), np.float32)}[case]
    check(helper.make_node('DynamicQuantizeLinear', ['x'], ['y', 'ys', 'yz']), [('x', x)])


@pytest.mark.parametrize('shape', [(256, 700), (3, 33333)])
def test_dynamic_quantize_big_split(nthreads, shape):
    x = _f(*shape)
    x[1, 7] = -9.5  # the extremes in one chunk of the split, not the first
    check(helper.make_node('DynamicQuantizeLinear', ['x'], ['y', 'ys', 'yz']), [('x', x)],
          threads=nthreads)


def test_dynamic_quantize_chunks_done_by_one_worker_alone():
    """The split kernel's worker claims chunks of both passes from counters: one that runs
    alone (the other never started) does every chunk, with the result of the serial kernel."""
    from jitort.kernels.cpu import quant
    x = _f(7, 5001)
    x[6, 4999] = 40.0  # the maximum in the last chunk
    x = x.reshape(-1)
    ref = [np.empty(x.size, np.uint8), np.empty(1, np.float32), np.empty(1, np.uint8)]
    quant.dynamic_quantize(x, *ref)
    for nchunk in (1, 3, 8):
        got = [np.empty_like(r) for r in ref]
        quant._dyn_worker(x, *got, np.zeros((nchunk, 2), np.int32), np.zeros(3, np.int64),
                          nchunk)
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g, r)
    assert ref[0][-2] == 255 and np.count_nonzero(ref[0] == 255) == 1


# --- MatMulInteger / QLinearMatMul ---------------------------------------------------------------

def _mmi(a, b, za, zb, const_b=True):
    ins, inits = [('a', a)], []
    (inits if const_b else ins).append(('b', b))
    names = ['a', 'b']
    for nm, z in (('za', za), ('zb', zb)):
        if z is None:
            names.append('')
        else:
            names.append(nm)
            inits.append((nm, z))
    while names[-1] == '':
        names.pop()
    return helper.make_node('MatMulInteger', names, ['y']), ins, inits


@pytest.mark.parametrize('case', ['u8s8_const', 'u8u8_dynamic', 'per_col_zb', 'no_zp', 's8s8',
                                  'batched_b', 'vector_a', 'exact_f64'])
def test_matmul_integer(case):
    rng = np.random.default_rng(0)
    a, b = _q((2, 16, 48)), _q((48, 24), np.int8, 1)
    za, zb, const_b = np.uint8(131), np.int8(-2), True
    if case == 'u8u8_dynamic':
        b, zb, const_b = _q((48, 24), np.uint8, 1), np.uint8(100), False
    elif case == 'per_col_zb':
        zb = rng.integers(-4, 5, 24).astype(np.int8)
    elif case == 'no_zp':
        za = zb = None
    elif case == 's8s8':
        a, za = _q((2, 16, 48), np.int8), np.int8(5)
    elif case == 'batched_b':
        b, const_b = _q((2, 48, 24), np.int8, 1), False
    elif case == 'vector_a':
        a = _q((48,))
    elif case == 'exact_f64':  # K * 255 * 128 > 2**24: the float64 path
        a = np.full((3, 600), 255, np.uint8)
        a[1, ::3] = 0
        b, za, zb = _q((600, 5), np.int8, 1, lo=-128, hi=-120), np.uint8(0), np.int8(0)
    node, ins, inits = _mmi(a, b, za, zb, const_b)
    check(node, ins, inits)


def test_matmul_integer_threads(nthreads):
    # big enough for the gemm to split over the threads
    node, ins, inits = _mmi(_q((64, 96)), _q((96, 128), np.int8, 1), np.uint8(120), np.int8(1))
    check(node, ins, inits, threads=nthreads)


def test_matmul_integer_empty():
    node, ins, inits = _mmi(_q((0, 8)), _q((8, 4), np.int8), np.uint8(3), np.int8(1))
    check(node, ins, inits)
    # K == 0: all zeros (onnxruntime 1.32 returns uninitialized memory there)
    node, ins, inits = _mmi(_q((3, 0)), _q((0, 4), np.int8), np.uint8(3), np.int8(1))
    cm = jitort.compile(_model(node, ins, inits), strict=True)
    got = cm.run(None, dict(ins))[0]
    assert got.dtype == np.int32 and got.shape == (3, 4) and not got.any()


@pytest.mark.parametrize('m,k,n,pdt,vdt,per', [
    (13, 33, 70, np.uint8, np.int8, False), (6, 64, 64, np.uint8, np.int8, True),
    (1, 1, 1, np.int8, np.uint8, True), (7, 2, 65, np.int8, np.int8, False),
    (5, 3, 17, np.uint8, np.uint8, True), (20, 4000, 9, np.uint8, np.int8, False)])
def test_integer_gemm_exact(m, k, n, pdt, vdt, per):
    """kernels/cpu/qgemm.py against int64 numpy: every operand type (the int8 <-> uint8 flip
    with its zero point moved), per-row / per-column zero points, tiles cut at M, N and K
    (K % 4), and sums beyond float32's exact range (K 4000 of 255 x -128)."""
    from jitort.kernels.cpu import qgemm as Q
    rng = np.random.default_rng(m * 7 + k)
    i_p, i_v = np.iinfo(pdt), np.iinfo(vdt)
    p = rng.integers(i_p.min, i_p.max + 1, (m, k)).astype(pdt)
    v = rng.integers(i_v.min, i_v.max + 1, (k, n)).astype(vdt)
    if k == 4000:
        p[:], v[:] = 255, -128
    zp = rng.integers(i_p.min, i_p.max + 1, m if per else 1).astype(pdt)
    zv = rng.integers(i_v.min, i_v.max + 1, n if per else 1).astype(vdt)
    ref = ((p.astype(np.int64) - zp.astype(np.int64)[:, None])
           @ (v.astype(np.int64) - zv.astype(np.int64)[None, :]))
    fp, fv = pdt == np.int8, vdt == np.uint8      # P into uint8, V into int8
    sp, sv = Q.packed_sizes(m, k, n)
    pp, pv = np.empty(sp, np.uint8), np.empty(sv, np.uint8)
    rs, cs = np.empty(m, np.int32), np.empty(n, np.int32)
    Q.pack_p(p, fp, False, pp, rs)
    Q.pack_v(v, fv, True, pv, cs)
    c = np.empty((m, n), np.int32)
    Q.igemm(pp, rs, zp.astype(np.int32) + (128 if fp else 0), pv, cs,
            zv.astype(np.int32) - (128 if fv else 0), c, k, True)
    np.testing.assert_array_equal(c, ref.astype(np.int32))


@pytest.mark.parametrize('case', ['u8_b', 's8_a_odd'])
def test_matmul_integer_const_b_shapes(case, nthreads):
    """Constant B (the prepacked integer gemm where the host has VNNI): a uint8 B, int8 A,
    per-column B zero points, sizes that cut every tile (onnxruntime takes no per-row A zero
    points: test_integer_gemm_exact has them)."""
    rng = np.random.default_rng(5)
    if case == 'u8_b':
        a, b = _q((7, 37)), _q((37, 70), np.uint8, 1)
        za, zb = np.uint8(200), np.uint8(77)
    else:
        a, b = _q((13, 5), np.int8), _q((5, 3), np.int8, 1)
        za, zb = np.int8(-7), rng.integers(-128, 128, 3).astype(np.int8)
    node, ins, inits = _mmi(a, b, za, zb)
    check(node, ins, inits, threads=nthreads)


def _qlmm(a, sa, za, b, sb, zb, sy, zy, const_b=True):
    ins = [('a', a)] + ([] if const_b else [('b', b)])
    inits = [('sa', sa), ('za', za), ('sb', sb), ('zb', zb), ('sy', sy), ('zy', zy)]
    if const_b:
        inits.append(('b', b))
    return (helper.make_node('QLinearMatMul', ['a', 'sa', 'za', 'b', 'sb', 'zb', 'sy', 'zy'],
                             ['y']), ins, inits)


@pytest.mark.parametrize('case,opset', [('u8', 10), ('u8s8_percol', 21), ('s8', 21),
                                        ('u8_dynamic', 10), ('u8_one_row_odd', 10)])
def test_qlinear_matmul(case, opset):
    rng = np.random.default_rng(3)
    a = _q((2, 12, 40))
    sa, za = np.float32(0.02), np.uint8(128)
    b, sb, zb = _q((40, 20), np.uint8, 1), np.float32(0.01), np.uint8(120)
    sy, zy = np.float32(0.2), np.uint8(100)
    const_b = case != 'u8_dynamic'
    if case == 'u8s8_percol':
        b = _q((40, 20), np.int8, 1)
        sb = rng.uniform(0.002, 0.02, 20).astype(np.float32)
        zb = np.zeros(20, np.int8)
    elif case == 's8':
        a, za = _q((2, 12, 40), np.int8), np.int8(-3)
        b, zb = _q((40, 20), np.int8, 1), np.int8(2)
        zy = np.int8(-5)
    elif case == 'u8_one_row_odd':  # a single row of A, tiles cut in K and N
        a, b = _q((1, 1, 41)), _q((41, 67), np.uint8, 1)
    node, ins, inits = _qlmm(a, sa, za, b, sb, zb, sy, zy, const_b)
    check(node, ins, inits, opset=opset)


@pytest.mark.parametrize('op', ['MatMulInteger', 'QLinearMatMul'])
def test_integer_gemm_split_over_threads(op, nthreads):
    """Constant B with M * N * K over the parallel threshold (quant._QMM_PAR_MNK): at 2 threads
    the gemm runs as (panel, row chunk) tasks pulled by the workers, with QLinearMatMul's
    requantization per task; M, N and K cut every tile (100 = 16 tiles of 6 + 4 rows, 200 =
    3 panels of 64 + 8, K 150 = 37 steps of 4 + 2), a batch of 2, per-column scales."""
    from jitort.kernels.cpu import quant as QK
    rng = np.random.default_rng(11)
    a, b = _q((2, 100, 150)), _q((150, 200), np.int8, 1)
    assert 100 * 150 * 200 >= QK._QMM_PAR_MNK
    if op == 'MatMulInteger':
        node, ins, inits = _mmi(a, b, np.uint8(125), rng.integers(-3, 4, 200).astype(np.int8))
        check(node, ins, inits, threads=nthreads)
    else:
        sb = rng.uniform(0.0005, 0.002, 200).astype(np.float32)
        node, ins, inits = _qlmm(a, np.float32(0.02), np.uint8(128), b, sb, np.zeros(200, np.int8),
                                 np.float32(0.1), np.uint8(110))
        check(node, ins, inits, opset=21, threads=nthreads)


# --- ConvInteger / QLinearConv -------------------------------------------------------------------

def _conv_nodes(op, attrs, const_w=True, per_channel=False, bias=False, xdt=np.uint8,
                wdt=np.int8, ydt=np.uint8, shape=(1, 4, 9, 9), wshape=(6, 4, 3, 3)):
    rng = np.random.default_rng(7)
    x = _q(shape, xdt)
    w = _q(wshape, wdt, 1)
    m = wshape[0]
    zx = np.array(128 if xdt == np.uint8 else -2, xdt)
    zw = (rng.integers(-3, 4, m) if per_channel else np.array(1)).astype(wdt) \
        if wdt == np.int8 else (rng.integers(120, 130, m) if per_channel else np.array(127)).astype(wdt)
    ins = [('x', x)] + ([] if const_w else [('w', w)])
    inits = [] if not const_w else [('w', w)]
    if op == 'ConvInteger':
        inits += [('zx', zx), ('zw', zw)]
        return helper.make_node(op, ['x', 'w', 'zx', 'zw'], ['y'], **attrs), ins, inits
    sw = rng.uniform(0.002, 0.02, m).astype(np.float32) if per_channel else np.float32(0.01)
    inits += [('sx', np.float32(0.05)), ('zx', zx), ('sw', sw), ('zw', zw),
              ('sy', np.float32(0.3)), ('zy', np.array(100 if ydt == np.uint8 else -7, ydt))]
    names = ['x', 'sx', 'zx', 'w', 'sw', 'zw', 'sy', 'zy']
    if bias:
        inits.append(('b', rng.integers(-2000, 2000, m).astype(np.int32)))
        names.append('b')
    return helper.make_node(op, names, ['y'], **attrs), ins, inits


@pytest.mark.parametrize('attrs', [dict(pads=[1, 1, 1, 1]),
                                   dict(strides=[2, 2], pads=[0, 1, 1, 0], dilations=[1, 2]),
                                   dict(auto_pad='SAME_UPPER', group=2)])
def test_conv_integer(attrs):
    wshape = (6, 2, 3, 3) if attrs.get('group') else (6, 4, 3, 3)
    node, ins, inits = _conv_nodes('ConvInteger', attrs, wshape=wshape)
    check(node, ins, inits, opset=10)


def test_conv_integer_dynamic_w_1d():
    node, ins, inits = _conv_nodes('ConvInteger', dict(pads=[2, 1]), const_w=False,
                                   xdt=np.uint8, wdt=np.uint8, shape=(2, 3, 17),
                                   wshape=(5, 3, 4))
    check(node, ins, inits, opset=10)


@pytest.mark.parametrize('case', ['u8s8_bias_perchannel', 'u8u8', 's8s8_depthwise', 'dynamic_w'])
def test_qlinear_conv(case):
    kw = dict(attrs=dict(pads=[1, 1, 1, 1]))
    if case == 'u8s8_bias_perchannel':
        kw.update(per_channel=True, bias=True)
    elif case == 'u8u8':
        kw.update(wdt=np.uint8, attrs=dict(strides=[2, 2]))
    elif case == 's8s8_depthwise':
        kw.update(xdt=np.int8, ydt=np.int8, bias=True, attrs=dict(group=4, pads=[1, 1, 1, 1]),
                  wshape=(4, 1, 3, 3))
    else:
        kw.update(const_w=False, per_channel=True)
    node, ins, inits = _conv_nodes('QLinearConv', kw.pop('attrs'), **kw)
    check(node, ins, inits, opset=10)


def test_qlinear_conv_threads(nthreads):
    node, ins, inits = _conv_nodes('QLinearConv', dict(pads=[1, 1, 1, 1]), per_channel=True,
                                   bias=True, shape=(1, 16, 40, 40), wshape=(32, 16, 3, 3))
    check(node, ins, inits, opset=10, threads=nthreads)


def test_qlinear_conv_exact_f64():
    # K = 64 * 9 = 576 with |x - zx| = 255 and |w - zw| = 128: past float32's exact range
    x = np.full((1, 64, 5, 5), 255, np.uint8)
    x[0, ::2, 1:3] = 0
    w = np.full((3, 64, 3, 3), -128, np.int8)
    node = helper.make_node('ConvInteger', ['x', 'w', 'zx', 'zw'], ['y'], pads=[1, 1, 1, 1])
    check(node, [('x', x)], [('w', w), ('zx', np.uint8(0)), ('zw', np.int8(0))], opset=10)


@pytest.mark.parametrize('case', ['grouped_s8_dilated', 'u8w_zero_zp_1d', 'extremes',
                                  'stride2_1x1', 'empty_batch', 'odd_channels_zw',
                                  'odd_channels_zw_1x1'])
def test_qconv_integer_gemm(case, nthreads):
    """Constant-weight convolutions on the integer gemm (quant.qconv2d_i8, where the host has
    VNNI): int8 x flipped into uint8, grouped with 4+ channels per group, dilations, strides
    differing per axis, asymmetric pads, per-channel weight zero points (the ones row's column
    sums), uint8 weights whose zero point is 0 (-128 once flipped), 1-D, all-extreme values
    over K = 576, a 1x1 stride-2 (one phase plane used), an empty batch, 7 channels (the
    interleaved planes' padded channel group: zero weights, no ones in the zero-point row)
    with uint8 weights' per-channel zero points, strides 2 and 1, several 64-column panels,
    and as a 1x1 conv read from x itself (packed panels)."""
    if case == 'grouped_s8_dilated':
        node, ins, inits = _conv_nodes(
            'QLinearConv', dict(group=2, strides=[2, 1], dilations=[2, 1], pads=[2, 0, 1, 1]),
            per_channel=True, bias=True, xdt=np.int8, ydt=np.int8, shape=(2, 8, 13, 11),
            wshape=(10, 4, 3, 2))
    elif case == 'u8w_zero_zp_1d':
        x, w = _q((1, 5, 70)), _q((7, 5, 3), np.uint8, 1)
        node = helper.make_node('ConvInteger', ['x', 'w', 'zx', 'zw'], ['y'], pads=[1, 0])
        ins, inits = [('x', x)], [('w', w), ('zx', np.uint8(9)), ('zw', np.uint8(0))]
    elif case == 'extremes':
        x = np.full((1, 64, 5, 5), 255, np.uint8)
        x[0, ::2, 1:3] = 0
        w = np.full((8, 64, 3, 3), -128, np.int8)
        node = helper.make_node('ConvInteger', ['x', 'w', 'zx', 'zw'], ['y'], pads=[1, 1, 1, 1])
        ins, inits = [('x', x)], [('w', w), ('zx', np.uint8(0)), ('zw', np.int8(0))]
    elif case == 'odd_channels_zw':
        node, ins, inits = _conv_nodes('QLinearConv', dict(strides=[2, 1], pads=[1, 2, 0, 1]),
                                       per_channel=True, bias=True, wdt=np.uint8,
                                       shape=(2, 7, 19, 23), wshape=(9, 7, 3, 3))
    elif case == 'odd_channels_zw_1x1':
        node, ins, inits = _conv_nodes('QLinearConv', {}, per_channel=True, bias=True,
                                       wdt=np.uint8, shape=(2, 7, 11, 13), wshape=(9, 7, 1, 1))
    elif case == 'stride2_1x1':
        node, ins, inits = _conv_nodes('QLinearConv', dict(strides=[2, 2]), bias=True,
                                       shape=(1, 16, 15, 15), wshape=(12, 16, 1, 1))
    else:
        node, ins, inits = _conv_nodes('QLinearConv', dict(pads=[1, 1, 1, 1]), bias=True,
                                       shape=(0, 4, 9, 9))
    check(node, ins, inits, opset=10, threads=nthreads)


# --- host evaluation (constant folding) ----------------------------------------------------------

@pytest.mark.parametrize('opset', [13, 21])
def test_qdq_on_constants_folded_on_host(opset):
    # DequantizeLinear(QuantizeLinear(constant)) is evaluated on the host (onnx.reference has no
    # implementation before opset 19); the result feeds a compiled Add
    w = _f(4, 6)
    nodes = [helper.make_node('QuantizeLinear', ['w', 's', 'z'], ['q'], axis=1),
             helper.make_node('DequantizeLinear', ['q', 's', 'z'], ['dq'], axis=1),
             helper.make_node('Add', ['x', 'dq'], ['y'])]
    inits = [numpy_helper.from_array(w, 'w'),
             numpy_helper.from_array(np.linspace(0.02, 0.2, 6).astype(np.float32), 's'),
             numpy_helper.from_array(np.arange(-3, 3).astype(np.int8), 'z')]
    g = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info('x', onnx.TensorProto.FLOAT,
                                                                     (4, 6))],
                          [helper.make_tensor_value_info('y', onnx.TensorProto.FLOAT, (4, 6))],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8 if opset < 21 else 10
    x = _f(4, 6, seed=1)
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, {'x': x})[0]
    assert cm.fallback_nodes() == []
    ref = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider']).run(
        None, {'x': x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_matmul_integer_then_cast_chain():
    # quantize_dynamic's pattern: the int32 product dies into a fused Cast -> Mul (never written
    # in place over the int32 buffer: that stored ints read back as float bits), then a
    # Reshape -> Transpose into attention heads
    rng = np.random.default_rng(0)
    nodes = [helper.make_node('MatMulInteger', ['a', 'b', 'za', 'zb'], ['y']),
             helper.make_node('Cast', ['y'], ['yf'], to=onnx.TensorProto.FLOAT),
             helper.make_node('Mul', ['yf', 's'], ['m']),
             helper.make_node('Reshape', ['m', 'shp'], ['r']),
             helper.make_node('Transpose', ['r'], ['out'], perm=[0, 2, 1, 3])]
    inits = [numpy_helper.from_array(_q((32, 32), np.int8, 1), 'b'),
             numpy_helper.from_array(np.array(0, np.int8), 'zb'),
             numpy_helper.from_array(np.array(0.001, np.float32), 's'),
             numpy_helper.from_array(np.array([1, 16, 4, 8], np.int64), 'shp')]
    g = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info('a', onnx.TensorProto.UINT8, (1, 16, 32)),
                                       helper.make_tensor_value_info('za', onnx.TensorProto.UINT8, ())],
                          [helper.make_tensor_value_info('out', onnx.TensorProto.FLOAT, None)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])
    m.ir_version = 8
    feeds = {'a': rng.integers(0, 256, (1, 16, 32)).astype(np.uint8), 'za': np.array(120, np.uint8)}
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, feeds)[0]
    ref = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider']).run(
        None, feeds)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)

"""CumSum, CumProd, ArgMax, ArgMin, TopK, Hardmax compiled by jitort (kernels/cpu/scan.py)
against onnxruntime on the same inputs; every model is compiled in strict mode, so nothing runs
in the interpreter. The kernels are dtype-generic and each dtype of ArgMax/TopK costs ~5-10 s of
Numba compile cold, so those run on float32 and int64 only (CumSum also on int32 and float64)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.helper import np_dtype_to_tensor_dtype as tt

import jitort


def _model(node, inputs, inits=(), opset=17, n_out=1):
    vi = [helper.make_tensor_value_info(n, tt(a.dtype), a.shape) for n, a in inputs]
    init = [numpy_helper.from_array(np.asarray(a), n) for n, a in inits]
    outs = [onnx.ValueInfoProto(name=o) for o in node.output[:n_out]]
    g = helper.make_graph([node], 'g', vi, outs, initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    for o in m.graph.output:
        o.CopyFrom(inferred.get(o.name, o))
    return m


def run_both(node, inputs, inits=(), opset=17, n_out=1, threads=1):
    """(jitort outputs, onnxruntime outputs) of a one-node model; asserts nothing interpreted."""
    m = _model(node, inputs, inits, opset, n_out)
    cm = jitort.compile(m, threads=threads, strict=True)
    got = cm.run(None, dict(inputs))
    assert cm.fallback_nodes() == []
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=['CPUExecutionProvider'])
    ref = sess.run(None, dict(inputs))
    return got, ref


def _same(got, ref, rtol=1e-4):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        g, r = np.asarray(g), np.asarray(r)
        assert g.dtype == r.dtype and g.shape == r.shape, (g.dtype, g.shape, r.dtype, r.shape)
        if g.dtype.kind == 'f':
            np.testing.assert_allclose(g, r, rtol=rtol, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, r)


def _rn(*shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == 'f':
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-5, 6, shape).astype(dtype)


# --- CumSum / CumProd ---------------------------------------------------------------------------

@pytest.mark.parametrize('dtype,shape,axis,exclusive,reverse', [
    (np.float32, (2, 7, 5), 1, 0, 0),
    (np.float32, (2, 7, 5), -1, 1, 0),
    (np.float32, (3, 6), 0, 0, 1),
    (np.float32, (3, 6), 1, 1, 1),
    (np.float64, (4, 5), 1, 0, 1),
    (np.int32, (2, 9), 1, 0, 0),          # roberta: position ids from the int32 mask
    (np.int64, (2, 3, 4), 1, 1, 0),
    (np.float32, (2, 0, 3), 1, 0, 0),     # empty
    (np.float32, (8,), 0, 1, 1),
])
def test_cumsum(dtype, shape, axis, exclusive, reverse, nthreads):
    x = _rn(*shape, dtype=dtype)
    node = helper.make_node('CumSum', ['x', 'a'], ['y'], exclusive=exclusive, reverse=reverse)
    got, ref = run_both(node, [('x', x)], [('a', np.array(axis, np.int64))], threads=nthreads)
    _same(got, ref)


def test_cumsum_axis_int32_and_big_parallel():
    # int32 axis input, and enough planes for the prange path
    x = _rn(64, 300, 8)
    node = helper.make_node('CumSum', ['x', 'a'], ['y'], reverse=1)
    got, ref = run_both(node, [('x', x)], [('a', np.array([1], np.int32))], threads=2)
    _same(got, ref, rtol=1e-3)


def test_cumprod():
    if 'CumProd' not in {s.name for s in onnx.defs.get_all_schemas()}:
        pytest.skip('onnx has no CumProd')
    x = (_rn(3, 6) * 0.5 + 1).astype(np.float32)
    node = helper.make_node('CumProd', ['x', 'a'], ['y'], exclusive=1, reverse=1)
    m = _model(node, [('x', x)], [('a', np.array(1, np.int64))], opset=26)
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, {'x': x})[0]
    assert cm.fallback_nodes() == []
    ref = np.ones_like(x)
    ref[:, :-1] = np.cumprod(x[:, ::-1], axis=1)[:, ::-1][:, 1:]
    np.testing.assert_allclose(got, ref, rtol=1e-5)


# --- ArgMax / ArgMin ----------------------------------------------------------------------------

@pytest.mark.parametrize('op', ['ArgMax', 'ArgMin'])
@pytest.mark.parametrize('dtype,shape,axis,keepdims,last', [
    (np.float32, (3, 10), 1, 1, 0),
    (np.float32, (3, 10, 4), 1, 0, 1),
    (np.int64, (5, 4), 0, 1, 1),          # small ints: many ties
    (np.int64, (2, 3, 6), -1, 0, 0),
    (np.float32, (0, 5), 1, 1, 0),        # empty
    (np.int64, (4, 100), 1, 1, 1),        # long rows (eight running extremes), ties: last
    (np.int64, (3, 37), -1, 0, 0),        # long rows with a tail, ties: first
])
def test_argmax(op, dtype, shape, axis, keepdims, last, nthreads):
    x = _rn(*shape, dtype=dtype)
    node = helper.make_node(op, ['x'], ['y'], axis=axis, keepdims=keepdims, select_last_index=last)
    got, ref = run_both(node, [('x', x)], threads=nthreads)
    _same(got, ref)


@pytest.mark.slow  # compiles the prange variant (~8-15 s cold)
def test_argmax_opset11_and_big():
    x = _rn(256, 1000)
    node = helper.make_node('ArgMax', ['x'], ['y'], axis=1)
    _same(*run_both(node, [('x', x)], opset=11, threads=2))


@pytest.mark.parametrize('dtype', [np.float32, np.int64])
def test_argext3_all_four_comparisons(dtype):
    """argext3 directly: first / last maximum and minimum, contiguous rows shorter and longer
    than 16 (the eight-lane path, with a tail) and columns (inner > 1); small ints: many ties."""
    from jitort.kernels.cpu import scan
    rng = np.random.default_rng(1)
    for shape in [(3, 100, 1), (4, 37, 1), (2, 9, 1), (5, 16, 1), (3, 50, 5), (2, 1, 3)]:
        x = rng.integers(0, 4, shape).astype(dtype)
        for is_min in (0, 1):
            f = np.argmin if is_min else np.argmax
            for last in (0, 1):
                y = np.full((shape[0], shape[2]), -1, np.int64)
                scan.argext3(x, y, is_min, last)
                ref = shape[1] - 1 - f(x[:, ::-1], axis=1) if last else f(x, axis=1)
                np.testing.assert_array_equal(y, ref)


# --- TopK -----------------------------------------------------------------------------------------

@pytest.mark.parametrize('dtype,shape,k,axis,largest', [
    (np.float32, (4, 50), 5, -1, 1),
    (np.float32, (4, 50), 5, 1, 0),
    (np.float32, (3, 8, 6), 8, 1, 1),     # k == axis length, inner > 1
    (np.int64, (3, 20), 7, 1, 1),         # ties: lower index first
    (np.int64, (2, 70), 9, 1, 0),         # ties across skipped blocks of 16
    (np.int64, (3, 30), 20, 1, 0),        # k >= half the axis: a stable sort, ties
    (np.int64, (6, 4), 5, 0, 1),          # sort path over strided columns
    (np.int64, (20, 3), 4, 0, 0),
    (np.float32, (3, 9), 0, 1, 1),        # k = 0
    (np.float32, (2, 1, 5), 1, 2, 1),
])
def test_topk(dtype, shape, k, axis, largest, nthreads):
    x = _rn(*shape, dtype=dtype)
    node = helper.make_node('TopK', ['x', 'k'], ['v', 'i'], axis=axis, largest=largest)
    got, ref = run_both(node, [('x', x)], [('k', np.array([k], np.int64))], n_out=2,
                        threads=nthreads)
    _same(got, ref)


def test_topk_unsorted_and_opset1():
    x = _rn(6, 40, seed=3)
    node = helper.make_node('TopK', ['x', 'k'], ['v', 'i'], sorted=0)
    got, ref = run_both(node, [('x', x)], [('k', np.array([6], np.int64))], n_out=2)
    # order unspecified: compare as sets of (index, value) per row
    for g_v, g_i, r_v, r_i in zip(got[0], got[1], ref[0], ref[1]):
        assert sorted(zip(g_i.tolist(), g_v.tolist())) == sorted(zip(r_i.tolist(), r_v.tolist()))
    node = helper.make_node('TopK', ['x'], ['v', 'i'], k=3, axis=1)
    _same(*run_both(node, [('x', x)], n_out=2, opset=1))


@pytest.mark.slow  # compiles the prange variant (~8-15 s cold)
def test_topk_big_parallel():
    x = _rn(64, 2000, seed=1)
    node = helper.make_node('TopK', ['x', 'k'], ['v', 'i'])
    _same(*run_both(node, [('x', x)], [('k', np.array([10], np.int64))], n_out=2, threads=2))


# --- Hardmax --------------------------------------------------------------------------------------

@pytest.mark.parametrize('opset,shape,axis', [
    (13, (3, 4, 5), -1),
    (13, (3, 4, 5), 1),
    (11, (3, 4, 5), 1),     # 2-D coercion: rows of 4 * 5
    (11, (3, 4, 5), 0),
    (13, (2, 0, 3), 1),
    (13, (3, 41), 1),
])
def test_hardmax(opset, shape, axis):
    x = _rn(*shape)
    x.reshape(-1)[::7] = 1.5  # ties: the first maximum wins
    node = helper.make_node('Hardmax', ['x'], ['y'], axis=axis)
    _same(*run_both(node, [('x', x)], opset=opset))


@pytest.mark.parametrize('largest', [1, 0])
def test_topk_nan_ranks_above_numbers(largest):
    # onnxruntime ranks NaN above every number (first when largest, last when smallest)
    x = np.array([[1, np.nan, 3, 2] * 5 + [5] * 40], np.float32)
    node = helper.make_node('TopK', ['x', 'k'], ['v', 'i'], largest=largest)
    for k in (3, 30):
        got, ref = run_both(node, [('x', x)], [('k', np.array([k], np.int64))], n_out=2)
        np.testing.assert_array_equal(got[1], ref[1])
        np.testing.assert_array_equal(got[0], ref[0])  # NaNs compare equal here


def _dynamic(node, ins, inits=(), opset=17, n_out=1):
    """A one-node model with symbolic input dims: (jitort strict, onnxruntime) sessions."""
    vi = [helper.make_tensor_value_info(n, t, s) for n, t, s in ins]
    g = helper.make_graph([node], 'g', vi, [onnx.ValueInfoProto(name=o) for o in node.output[:n_out]],
                          initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    return (jitort.compile(m, strict=True),
            ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider']))


def test_one_driver_serves_new_shapes():
    """Symbolic dims: each new shape replays or re-plans the driver, including empty ones."""
    rng = np.random.default_rng(0)
    cm, sess = _dynamic(helper.make_node('TopK', ['x', 'k'], ['v', 'i']), [('x', 1, ['N', 'A'])],
                        [('k', np.array([3], np.int64))], n_out=2)
    for shape in [(2, 50), (5, 50), (1, 7), (3, 200)]:
        feeds = {'x': rng.random(shape).astype(np.float32)}
        _same(cm.run(None, feeds), sess.run(None, feeds))
    cm, sess = _dynamic(helper.make_node('CumSum', ['x', 'a'], ['y']), [('x', 1, ['N', 'A'])],
                        [('a', np.array(1, np.int64))])
    for shape in [(2, 50), (5, 50), (1, 1), (3, 0)]:
        feeds = {'x': rng.random(shape).astype(np.float32)}
        _same(cm.run(None, feeds), sess.run(None, feeds))
    cm, sess = _dynamic(helper.make_node('ArgMax', ['x'], ['y'], axis=1), [('x', 1, ['N', 'A', 'B'])])
    for shape in [(2, 5, 1), (2, 5, 3), (1, 40, 1), (3, 1, 2)]:
        feeds = {'x': rng.random(shape).astype(np.float32)}
        _same(cm.run(None, feeds), sess.run(None, feeds))


def test_scan3_rejects_non_contiguous_operands():
    """scan3 steps raw row pointers: a strided view (rejected when typed: the kernel reshapes
    its operands) or a shape mismatch raises instead of reading past the rows."""
    from numba.core.errors import TypingError
    from jitort.kernels.cpu import scan
    x = np.ones((2, 4, 6), np.float32)
    y = np.zeros((2, 4, 6), np.float32)
    scan.scan3(x, y, False, False, False)
    np.testing.assert_array_equal(y[:, -1], np.full((2, 6), 4.0, np.float32))
    with pytest.raises(TypingError):
        scan.scan3(np.ones((2, 6, 4), np.float32).transpose(0, 2, 1), y, False, False, False)
    with pytest.raises(ValueError, match="one shape"):
        scan.scan3(x, np.zeros((2, 4, 5), np.float32), False, False, False)

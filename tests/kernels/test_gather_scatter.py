"""GatherElements, GatherND, ScatterElements, Scatter, ScatterND, OneHot compiled by jitort
(kernels/cpu/gather_scatter.py and the kernels the lowerings generate) against onnxruntime on
the same inputs; models compile in strict mode, so nothing runs in the interpreter. Bad indices
raise IndexError."""
import numpy as np
import pytest
from onnx import helper

import jitort
from jitort.errors import InvalidInput
from tests.helpers import called_names

from test_scan import _model, _rn, _same, run_both


def _idx(shape, n, seed=1, dtype=np.int64):
    """Indices in [-n, n) (negative ones wrap)."""
    return np.random.default_rng(seed).integers(-n, n, shape).astype(dtype)


# --- GatherElements -------------------------------------------------------------------------------

@pytest.mark.parametrize('dshape,ishape,axis,dtype', [
    ((2, 16), (2, 16), 1, np.int64),          # roberta: position embeddings row ids
    ((3, 5, 4), (3, 7, 4), 1, np.float32),    # more indices than the axis holds
    ((3, 5, 4), (2, 5, 3), -1, np.float32),   # index dims smaller than the data's
    ((6, 4), (2, 4), 0, np.int32),
    ((5,), (9,), 0, np.float32),
    ((3, 5), (3, 0), 1, np.float32),          # empty indices
])
def test_gather_elements(dshape, ishape, axis, dtype, nthreads):
    x = _rn(*dshape, dtype=dtype)
    idx = _idx(ishape, dshape[axis], dtype=np.int32 if dtype == np.int32 else np.int64)
    node = helper.make_node('GatherElements', ['x', 'i'], ['y'], axis=axis)
    _same(*run_both(node, [('x', x), ('i', idx)], threads=nthreads))


def test_gather_elements_bad_index():
    x = _rn(3, 4)
    idx = np.array([[0, 4]] * 3, np.int64)
    m = _model(helper.make_node('GatherElements', ['x', 'i'], ['y'], axis=1), [('x', x), ('i', idx)])
    cm = jitort.compile(m, strict=True)
    with pytest.raises(InvalidInput):
        cm.run(None, {'x': x, 'i': idx})
    idx[1, 1] = -5
    with pytest.raises(InvalidInput):
        cm.run(None, {'x': x, 'i': idx})


@pytest.mark.parametrize('axis', [0, 1, 2])
def test_gather_elements_big_and_bad_index(axis):
    """Past _PAR_ELEMS at 2 threads the gather runs its first index dim in a prange and a bad
    index raises after the loop."""
    dshape = (16, 40, 30)
    x = _rn(*dshape)
    idx = _idx((16, 40, 30), dshape[axis], seed=5)
    node = helper.make_node('GatherElements', ['x', 'i'], ['y'], axis=axis)
    _same(*run_both(node, [('x', x), ('i', idx)], threads=2))
    cm = jitort.compile(_model(node, [('x', x), ('i', idx)]), strict=True, threads=2)
    cm.run(None, {'x': x, 'i': idx})
    assert any(c.startswith("k_gather_el3_par") for c in called_names(cm))
    for where in ((0, 0, 0), (15, 39, 29), (9, 3, 17)):
        bad = idx.copy()
        bad[where] = dshape[axis]
        with pytest.raises(InvalidInput):
            cm.run(None, {'x': x, 'i': bad})
    np.testing.assert_array_equal(cm.run(None, {'x': x, 'i': idx})[0],
                                  np.take_along_axis(x, np.where(idx < 0, idx + dshape[axis], idx),
                                                     axis))


# --- GatherND ---------------------------------------------------------------------------------------

@pytest.mark.parametrize('dshape,ishape,batch,dtype,opset', [
    ((4, 5, 6), (3, 2), 0, np.float32, 13),
    ((4, 5, 6), (2, 3, 1), 0, np.int64, 11),
    ((4, 5, 6), (7, 3), 0, np.float32, 13),      # full index: scalars out
    ((2, 5, 6), (2, 3, 1), 1, np.float32, 12),   # batch_dims
    ((2, 3, 5, 6), (2, 3, 4, 2), 2, np.float32, 13),
    ((4, 5), (0, 1), 0, np.float32, 13),         # empty indices
])
def test_gather_nd(dshape, ishape, batch, dtype, opset, nthreads):
    x = _rn(*dshape, dtype=dtype)
    k = ishape[-1]
    rng = np.random.default_rng(2)
    idx = np.stack([rng.integers(-dshape[batch + j], dshape[batch + j], ishape[:-1])
                    for j in range(k)], -1).astype(np.int64).reshape(ishape)
    node = helper.make_node('GatherND', ['x', 'i'], ['y'], **({'batch_dims': batch} if batch else {}))
    _same(*run_both(node, [('x', x), ('i', idx)], opset=opset, threads=nthreads))


def test_gather_nd_big_and_bad_index():
    x = _rn(512, 256)
    idx = _idx((300, 1), 512, seed=4)
    node = helper.make_node('GatherND', ['x', 'i'], ['y'])
    _same(*run_both(node, [('x', x), ('i', idx)], threads=2))
    m = _model(node, [('x', x), ('i', idx)])
    cm = jitort.compile(m, strict=True)
    bad = idx.copy()
    bad[7, 0] = 512
    with pytest.raises(InvalidInput):
        cm.run(None, {'x': x, 'i': bad})


# --- ScatterElements / Scatter ---------------------------------------------------------------------

def _unique_idx(ishape, n, axis, seed=1):
    """Indices without duplicates along ``axis`` (the order of duplicate writes is unspecified)."""
    rng = np.random.default_rng(seed)
    moved = np.empty(np.moveaxis(np.empty(ishape), axis, -1).shape, np.int64)
    for pos in np.ndindex(moved.shape[:-1]):
        moved[pos] = rng.permutation(n)[:moved.shape[-1]] - rng.integers(0, 2) * n
    return np.ascontiguousarray(np.moveaxis(moved, -1, axis))


@pytest.mark.parametrize('red,opset', [('none', 11), ('none', 18), ('add', 16), ('mul', 16),
                                       ('max', 18), ('min', 18)])
@pytest.mark.parametrize('dshape,ishape,axis,dtype', [
    ((4, 6), (3, 6), 0, np.float32),
    ((3, 7, 2), (2, 4, 2), -2, np.int64),
])
def test_scatter_elements(red, opset, dshape, ishape, axis, dtype, nthreads):
    x = _rn(*dshape, dtype=dtype)
    upd = _rn(*ishape, dtype=dtype, seed=5)
    a = axis % len(dshape)
    idx = (_unique_idx(ishape, dshape[a], a) if red == 'none'
           else _idx(ishape, dshape[a], seed=3))  # duplicates combine
    attrs = {'axis': axis} if red == 'none' else {'axis': axis, 'reduction': red}
    node = helper.make_node('ScatterElements', ['x', 'i', 'u'], ['y'], **attrs)
    _same(*run_both(node, [('x', x), ('i', idx), ('u', upd)], opset=opset, threads=nthreads))


def test_scatter_elements_edges():
    x = _rn(5, 3)
    # opset 9 Scatter, int32 indices
    idx = np.array([[4, 0, 2], [-1, 1, 0]], np.int32)
    upd = _rn(2, 3, seed=2)
    _same(*run_both(helper.make_node('Scatter', ['x', 'i', 'u'], ['y']),
                    [('x', x), ('i', idx), ('u', upd)], opset=9))
    # empty updates: the data copied through
    e = np.zeros((0, 3), np.int64)
    _same(*run_both(helper.make_node('ScatterElements', ['x', 'i', 'u'], ['y']),
                    [('x', x), ('i', e), ('u', np.zeros((0, 3), np.float32))], opset=13))
    # the data input dies at the scatter (written over in place): x + x -> scatter -> Neg
    m_nodes = [helper.make_node('Add', ['x', 'x'], ['t']),
               helper.make_node('ScatterElements', ['t', 'i', 'u'], ['s'], axis=0),
               helper.make_node('Neg', ['s'], ['y'])]
    import onnx
    g = helper.make_graph(m_nodes, 'g', [helper.make_tensor_value_info('x', 1, (5, 3)),
                                         helper.make_tensor_value_info('i', 7, (2, 3)),
                                         helper.make_tensor_value_info('u', 1, (2, 3))],
                          [onnx.ValueInfoProto(name='y')])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)])
    m.ir_version = 8
    cm = jitort.compile(m, strict=True)
    i64 = idx.astype(np.int64)
    got = -cm.run(None, {'x': x, 'i': i64, 'u': upd})[0]
    assert 'copy_flat' not in open(next(cm.plans()).source_path).read()  # scattered in place
    ref = 2 * x
    for r in range(2):
        for c in range(3):
            ref[i64[r, c], c] = upd[r, c]
    np.testing.assert_array_equal(got, ref)
    # out of range
    bad = i64.copy()
    bad[0, 0] = 5
    with pytest.raises(InvalidInput):
        cm.run(None, {'x': x, 'i': bad, 'u': upd})


# --- ScatterND ----------------------------------------------------------------------------------------

@pytest.mark.parametrize('red,opset', [('none', 11), ('add', 16), ('mul', 16), ('max', 18),
                                       ('min', 18)])
@pytest.mark.parametrize('dshape,ishape,dtype', [
    ((4, 5, 6), (2, 1), np.float32),      # whole slices
    ((4, 5, 6), (3, 2), np.int64),
    ((4, 5), (2, 3, 2), np.float32),      # scalars, batched indices
])
def test_scatter_nd(red, opset, dshape, ishape, dtype, nthreads):
    x = _rn(*dshape, dtype=dtype)
    k = ishape[-1]
    m = int(np.prod(ishape[:-1]))
    # distinct index tuples (duplicates are unspecified for 'none'), some negative
    flat = np.random.default_rng(3).permutation(int(np.prod(dshape[:k])))[:m]
    idx = np.stack(np.unravel_index(flat, dshape[:k]), -1).reshape(ishape).astype(np.int64)
    idx[..., 0] -= dshape[0] * (idx[..., 0] % 2)
    upd = _rn(*(ishape[:-1] + dshape[k:]), dtype=dtype, seed=6)
    attrs = {} if red == 'none' else {'reduction': red}
    node = helper.make_node('ScatterND', ['x', 'i', 'u'], ['y'], **attrs)
    _same(*run_both(node, [('x', x), ('i', idx), ('u', upd)], opset=opset, threads=nthreads))


def test_scatter_nd_duplicates_add_and_bad_index():
    x = _rn(4, 3)
    idx = np.array([[1], [1], [-4]], np.int64)
    upd = _rn(3, 3, seed=1)
    node = helper.make_node('ScatterND', ['x', 'i', 'u'], ['y'], reduction='add')
    _same(*run_both(node, [('x', x), ('i', idx), ('u', upd)], opset=16))
    cm = jitort.compile(_model(node, [('x', x), ('i', idx), ('u', upd)], opset=16), strict=True)
    idx[2, 0] = 4
    with pytest.raises(InvalidInput):
        cm.run(None, {'x': x, 'i': idx, 'u': upd})


# --- OneHot -------------------------------------------------------------------------------------------

@pytest.mark.parametrize('ishape,depth,axis,idt,vdt,ddt', [  # type triples onnxruntime has
    ((2, 5), 7, -1, np.int64, np.float32, np.int64),
    ((2, 5), 7, 1, np.int64, np.int64, np.int64),
    ((3,), 4, 0, np.int32, np.float32, np.float32),
    ((2, 3), 5, 0, np.float32, np.float32, np.float32),   # float indices are truncated
    ((0, 3), 5, -1, np.int64, np.float32, np.int64),      # empty
])
def test_onehot(ishape, depth, axis, idt, vdt, ddt, nthreads):
    idx = np.random.default_rng(0).integers(-depth - 2, depth + 2, ishape).astype(idt)  # some out of range
    vals = np.array([-1, 3], vdt)
    node = helper.make_node('OneHot', ['i', 'd', 'v'], ['y'], axis=axis)
    _same(*run_both(node, [('i', idx), ('v', vals)], [('d', np.array(depth, ddt))],
                    threads=nthreads))


def test_one_driver_serves_new_shapes():
    """Symbolic dims: each new shape replays or re-plans the driver, including empty ones."""
    from test_scan import _dynamic
    rng = np.random.default_rng(0)
    cm, sess = _dynamic(helper.make_node('ScatterND', ['x', 'i', 'u'], ['y']),
                        [('x', 1, ['N', 'A']), ('i', 7, ['M', 1]), ('u', 1, ['M', 'A'])])
    for n, a, m in [(4, 5, 2), (6, 5, 3), (2, 3, 0)]:
        feeds = {'x': rng.random((n, a)).astype(np.float32),
                 'i': rng.permutation(n)[:m].reshape(m, 1).astype(np.int64),
                 'u': rng.random((m, a)).astype(np.float32)}
        _same(cm.run(None, feeds), sess.run(None, feeds))
    cm, sess = _dynamic(helper.make_node('GatherND', ['x', 'i'], ['y']),
                        [('x', 1, ['N', 'A']), ('i', 7, ['M', 1])])
    for n, a, m in [(4, 5, 2), (6, 5, 3), (2, 3, 0), (1, 1, 1)]:
        feeds = {'x': rng.random((n, a)).astype(np.float32), 'i': rng.integers(0, n, (m, 1))}
        _same(cm.run(None, feeds), sess.run(None, feeds))
    cm, sess = _dynamic(helper.make_node('OneHot', ['i', 'd', 'v'], ['y']), [('i', 7, ['N'])],
                        [('d', np.array(5, np.int64)), ('v', np.array([0, 1], np.float32))])
    for n in [3, 7, 0, 1]:
        feeds = {'i': rng.integers(-5, 5, (n,))}
        _same(cm.run(None, feeds), sess.run(None, feeds))


def test_updates_that_do_not_fit_raise():
    from test_scan import _dynamic
    cm, _ = _dynamic(helper.make_node('ScatterND', ['x', 'i', 'u'], ['y']),
                     [('x', 1, ['N', 4]), ('i', 7, ['M', 1]), ('u', 1, ['M', 'K'])], opset=13)
    with pytest.raises(InvalidInput, match=r'updates \(2, 3\)'):
        cm.run(None, {'x': np.zeros((6, 4), np.float32), 'i': np.array([[1], [4]], np.int64),
                      'u': np.ones((2, 3), np.float32)})

"""Transpose: the last-two-axes swap by register tiles (kernels/cpu/transpose.py) and the
generated element loop for other permutations, against numpy and onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.helper import np_dtype_to_tensor_dtype as _tt

import jitort
from jitort.codegen.lowerings.data import _TRANSPOSE_PAR_ELEMS
from jitort.kernels.cpu import transpose as T
from tests.helpers import called_names

# batches, rows, columns around the tile width: whole tiles, partial edges, one row, empty
SHAPES = [(1, 480, 196), (2, 16, 16), (3, 17, 33), (1, 1, 5), (1, 40, 1), (0, 4, 4), (2, 0, 3),
          (1, 3136, 64), (4, 31, 47)]


@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('dtype', [np.float32, np.int32])
def test_transpose_last2_kernel(shape, dtype, nthreads):
    x = (np.random.default_rng(0).standard_normal(shape) * 100).astype(dtype)
    want = x.transpose(0, 2, 1)
    for fn in (T.transpose_last2, T.transpose_last2_par):
        y = np.full(want.shape, -1, dtype)
        fn(x, y)
        np.testing.assert_array_equal(y, want)


def test_transpose_last2_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="shapes"):
        T.transpose_last2(np.zeros((1, 4, 5), np.float32), np.zeros((1, 4, 5), np.float32))


def _model(shape, perm, dtype):
    node = helper.make_node('Transpose', ['x'], ['y'], perm=perm)
    return helper.make_model(helper.make_graph(
        [node], 'g', [helper.make_tensor_value_info('x', _tt(np.dtype(dtype)), shape)],
        [helper.make_tensor_value_info('y', _tt(np.dtype(dtype)), None)]),
        opset_imports=[helper.make_opsetid('', 17)])


@pytest.mark.parametrize('shape,perm', [
    ((1, 96, 28, 28), [0, 2, 3, 1]),     # NCHW -> NHWC: (1, 96, 784) -> (1, 784, 96)
    ((1, 28, 28, 96), [0, 3, 1, 2]),     # and back
    ((2, 4, 33, 17), [0, 1, 3, 2]),      # K^T of attention heads, partial tiles
    ((70, 300), [1, 0]),                 # 2-D
    ((3, 5, 7, 2), [2, 0, 1, 3]),        # not a last-two swap: the element loop
    ((600, 700), [1, 0]),                # big enough to split over the threads
    ((1, 64, 3136), [0, 2, 1]),          # split, few tile rows
])
@pytest.mark.parametrize('dtype', [np.float32, np.int32, np.int64])
def test_transpose_op_against_onnxruntime(shape, perm, dtype, nthreads):
    x = (np.random.default_rng(1).standard_normal(shape) * 100).astype(dtype)
    m = _model(shape, perm, dtype)
    cm = jitort.compile(m, threads=nthreads, strict=True)
    got = cm.run(None, {'x': x})[0]
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=['CPUExecutionProvider']).run(None, {'x': x})[0]
    np.testing.assert_array_equal(got, want)
    called = called_names(cm)
    tiled = dtype != np.int64 and perm not in ([2, 0, 1, 3],)
    assert any(c.startswith('transpose.transpose_last2') for c in called) == tiled
    if tiled:
        par = nthreads > 1 and x.size >= _TRANSPOSE_PAR_ELEMS
        assert ('transpose.transpose_last2_par' in called) == par


@pytest.mark.parametrize('rows,cols,s_ld,d_ld', [(16, 16, 16, 16), (40, 49, 60, 41),
                                                   (3, 100, 100, 5), (33, 7, 9, 40),
                                                   (1, 1, 1, 1), (17, 15, 17, 17)])
def test_transpose_block_strided(rows, cols, s_ld, d_ld):
    """transpose_block: dst[d_off + j * d_ld + i] = src[s_off + i * s_ld + j], register tiles
    and masked ones at the edges (arrays that end where the block does), the rest of dst
    untouched."""
    from jitort.kernels.cpu.transpose import transpose_block
    rng = np.random.default_rng(rows * cols)
    src = rng.standard_normal(5 + rows * s_ld).astype(np.float32)
    dst = np.full(7 + cols * d_ld, -1.0, np.float32)
    transpose_block(src, 5, s_ld, dst, 7, d_ld, rows, cols)
    want = np.full_like(dst, -1.0)
    a = src[5:5 + rows * s_ld].reshape(rows, s_ld)[:, :cols]
    view = want[7:7 + cols * d_ld].reshape(cols, d_ld)
    view[:, :rows] = a.T
    np.testing.assert_array_equal(dst, want)

"""Einsum compiled by jitort (jitort/codegen/lowerings/einsum.py: transposes + batched GEMM +
reductions) against onnxruntime on the same inputs, in strict mode (nothing interpreted)."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.helper import np_dtype_to_tensor_dtype as tt

import jitort


def _run_both(eq, arrays, threads=1, opset=12):
    names = [f'x{i}' for i in range(len(arrays))]
    vi = [helper.make_tensor_value_info(n, tt(a.dtype), a.shape) for n, a in zip(names, arrays)]
    node = helper.make_node('Einsum', names, ['y'], equation=eq)
    g = helper.make_graph([node], 'g', vi,
                          [helper.make_tensor_value_info('y', tt(arrays[0].dtype), None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    feeds = dict(zip(names, arrays))
    cm = jitort.compile(m, threads=threads, strict=True)
    got = cm.run(None, feeds)[0]
    assert cm.fallback_nodes() == []
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(m.SerializeToString(), so,
                               providers=['CPUExecutionProvider']).run(None, feeds)[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    # and numpy's einsum as a second reference
    np.testing.assert_allclose(got, np.einsum(eq, *arrays), rtol=1e-4, atol=1e-4)


def _r(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize('eq,shapes', [
    ('bij,bjk->bik', [(2, 3, 4), (2, 4, 5)]),
    ('bhqd,bhkd->bhqk', [(1, 2, 5, 8), (1, 2, 6, 8)]),          # attention scores (B^T)
    ('bhqk,bhkd->bhqd', [(1, 2, 5, 6), (1, 2, 6, 8)]),          # attention context
    ('bqhd,bkhd->bhqk', [(2, 5, 3, 4), (2, 6, 3, 4)]),          # heads in the middle: copies
    ('ij,jk->ik', [(3, 4), (4, 5)]),
    ('ij,kj->ik', [(3, 4), (5, 4)]),
    ('ji,jk->ik', [(4, 3), (4, 5)]),
    ('ij,jk->ki', [(3, 4), (4, 5)]),                            # transposed output: swap
    ('bij,bjk->bki', [(2, 3, 4), (2, 4, 5)]),
    ('bij,bjk->ikb', [(2, 3, 4), (2, 4, 5)]),                   # permuted output: scratch
    ('i,j->ij', [(3,), (4,)]),                                   # outer product
    ('bi,bi->b', [(3, 7), (3, 7)]),                              # batched dot
    ('ij,ij->', [(3, 4), (3, 4)]),
    ('bij,jk', [(2, 3, 4), (4, 5)]),                             # implicit output
    ('...ij,...jk->...ik', [(2, 3, 3, 4), (2, 3, 4, 5)]),        # ellipsis
    ('bnd,dh->bnh', [(2, 7, 6), (6, 5)]),                        # projection
    ('bij,bjk->bi', [(2, 3, 4), (2, 4, 5)]),                     # k summed in B only
    ('ijk->kji', [(2, 3, 4)]),                                   # permutation
    ('ijk->ik', [(2, 3, 4)]),                                    # sum
    ('ijk->ki', [(2, 3, 4)]),                                    # sum + permutation
    ('ij->', [(3, 4)]),
    ('bij,bjk->bik', [(2, 0, 4), (2, 4, 5)]),                    # empty
    ('bij,bjk->bik', [(2, 3, 0), (2, 0, 5)]),                    # empty contraction: zeros
])
def test_einsum(eq, shapes):
    _run_both(eq, [_r(*s, seed=i) for i, s in enumerate(shapes)])


def test_einsum_float64():
    _run_both('bhqd,bhkd->bhqk', [_r(1, 2, 5, 8, dtype=np.float64),
                                  _r(1, 2, 6, 8, seed=1, dtype=np.float64)])


def test_einsum_threads(nthreads):
    _run_both('bhqd,bhkd->bhqk', [_r(1, 4, 64, 32), _r(1, 4, 64, 32, seed=1)], threads=nthreads)


@pytest.mark.parametrize('eq,shapes', [('ii->i', [(4, 4)]), ('ii->', [(4, 4)]),
                                        ('bii->bi', [(2, 3, 3)]), ('iij,jk->ik', [(3, 3, 4), (4, 5)])])
def test_diagonal(eq, shapes):
    _run_both(eq, [_r(*s, seed=i) for i, s in enumerate(shapes)])


def test_three_operands_decline():
    """Three operands are declined at compile time: strict mode names the node."""
    with pytest.raises(Exception, match='Einsum'):
        _run_both('ij,jk,kl->il', [_r(2, 3), _r(3, 4, seed=1), _r(4, 5, seed=2)])

"""The threaded paths of the GEMM / Conv / pool / softmax kernels: shapes big enough to cross
the parallel thresholds, with odd sizes (blocks that do not divide M, N or OH), batch and
group edges, and the same results with 1 and 2 Numba threads."""
import numba
import numpy as np
import pytest
from numba import njit, prange

from jitort.kernels.cpu import conv as CV
from jitort.kernels.cpu import gemm as G
from jitort.kernels.cpu import pool as P
from jitort.kernels.cpu import softmax as S
from test_conv import _np_conv, _out_size

def _close(got, ref, dtype):
    rt = 2e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, ref, rtol=rt, atol=rt * 10)


# --- GEMM ------------------------------------------------------------------------------------
MM_CASES = [
    # ba, bb, bo, m, k, n
    (1, 1, 1, 129, 67, 257),      # rows and columns odd, above the FLOP threshold
    (1, 1, 1, 3, 300, 2001),      # few rows: column split
    (1, 1, 1, 1, 1024, 1024),     # vector x matrix (the matrix-vector path, _gemv_block)
    (1, 1, 1, 1, 130, 9000),      # ... wider than one pass of _GEMV_COLS columns
    (3, 3, 3, 1, 301, 70),        # ... batched, K not a multiple of 4
    (1, 3, 3, 1, 257, 101),       # ... a broadcast
    (1, 1, 1, 2001, 300, 3),      # few columns: row split
    (3, 1, 3, 70, 64, 90),        # collapsed to one (210, K) GEMM
    (3, 3, 3, 70, 64, 90),        # bo = 3 on 2 threads: batches split in blocks
    (1, 3, 3, 65, 64, 97),        # a broadcast
    (16, 16, 16, 33, 64, 40),     # many batches
    (2, 2, 2, 200, 0, 300),       # K = 0
    (1, 1, 1, 1, 1, 1),
    (2, 2, 2, 0, 5, 7),
]


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
@pytest.mark.parametrize('case', MM_CASES)
def test_matmul3d_parallel(nthreads, dtype, case):
    ba, bb, bo, m, k, n = case
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((ba, m, k)).astype(dtype)
    b = rng.standard_normal((bb, k, n)).astype(dtype)
    out = np.full((bo, m, n), np.nan, dtype)
    G.matmul3d(a, b, out)
    _close(out, np.matmul(a.astype(np.float64), b) * np.ones((bo, 1, 1)), dtype)


@pytest.mark.parametrize('act', [0, 1, 2, 6])
@pytest.mark.parametrize('case', [(1, 1, 1, 300, 70, 1100), (3, 3, 3, 50, 64, 301),
                                  (1, 1, 1, 5, 256, 3000), (2, 1, 2, 1, 259, 3001)])
def test_matmul3d_bias_act_parallel(nthreads, act, case):
    ba, bb, bo, m, k, n = case
    rng = np.random.default_rng(act)
    a = rng.standard_normal((ba, m, k)).astype(np.float32)
    b = rng.standard_normal((bb, k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    out = np.full((bo, m, n), np.nan, np.float32)
    G.matmul3d_bias_act(a, b, bias, out, act, -0.5, 0.5)
    ref = np.matmul(a.astype(np.float64), b) + bias
    if act == 1:
        ref = np.maximum(ref, 0)
    elif act == 2:
        from scipy.special import erf
        ref = 0.5 * ref * (1 + erf(ref / np.sqrt(2)))
    elif act == 6:
        ref = np.clip(ref, -0.5, 0.5)
    _close(out, ref, np.float32)


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
@pytest.mark.parametrize('ta', [False, True])
@pytest.mark.parametrize('tb', [False, True])
@pytest.mark.parametrize('cshape', ['none', 'full', 'row', 'col', 'scalar'])
@pytest.mark.parametrize('mkn', [(131, 77, 259), (2, 300, 1500), (1, 301, 1501)])
def test_gemm_parallel(nthreads, dtype, ta, tb, cshape, mkn):
    m, k, n = mkn
    rng = np.random.default_rng(3)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    cs = {'none': (1, 1), 'full': (m, n), 'row': (1, n), 'col': (m, 1), 'scalar': (1, 1)}
    c = rng.standard_normal(cs[cshape]).astype(dtype)
    has_c = cshape != 'none'
    out = np.full((m, n), np.nan, dtype)
    G.gemm(a, b, c, out, 0.5, -1.5, ta, tb, has_c)
    ref = 0.5 * ((a.T if ta else a).astype(np.float64) @ (b.T if tb else b))
    if has_c:
        ref = ref - 1.5 * c
    _close(out, ref, dtype)


def test_gemm_parallel_k0(nthreads):
    out = np.full((300, 400), np.nan, np.float32)
    c = np.full((1, 400), 2.0, np.float32)
    G.gemm(np.ones((300, 0), np.float32), np.ones((0, 400), np.float32), c, out, 1.0, 0.5,
           False, False, True)
    np.testing.assert_array_equal(out, 1.0)


def test_xgemm_leading_dims():
    """xgemm on sub-blocks (offsets, leading dimensions, alpha, beta, transposes)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((10, 12))
    b = rng.standard_normal((12, 9))
    c = rng.standard_normal((10, 9))

    @njit
    def run(a, b, c):
        # c[2:7, 3:8] = 2 * a[2:7, 1:5] @ b[4:8, 3:8] + 0.5 * c[2:7, 3:8]
        return G.xgemm(0, 0, 5, 5, 4, 2.0, a, 2 * 12 + 1, 12, b, 4 * 9 + 3, 9, 0.5, c,
                       2 * 9 + 3, 9)

    ref = c.copy()
    ref[2:7, 3:8] = 2 * a[2:7, 1:5] @ b[4:8, 3:8] + 0.5 * c[2:7, 3:8]
    assert run(a, b, c) == 0
    np.testing.assert_allclose(c, ref, rtol=1e-12)

    @njit
    def run_t(at, bt, c):
        return G.xgemm(1, 1, 10, 9, 12, 1.0, at, 0, 10, bt, 0, 12, 0.0, c, 0, 9)

    at, bt = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    assert run_t(at, bt, c) == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)


@njit(parallel=True)
def _count_tasks(n, nw):
    counter = np.zeros(1, np.int64)
    seen = np.zeros(n, np.int64)
    for wk in prange(nw):
        while True:
            t = G.next_task(counter)
            if t >= n:
                break
            seen[t] += 1
    return seen, G.num_threads()


def test_next_task_and_num_threads(nthreads):
    seen, nt = _count_tasks(1000, 4)
    np.testing.assert_array_equal(seen, 1)
    assert nt == nthreads


# --- Conv ------------------------------------------------------------------------------------
CONV_CASES = [
    # n, c, h, w, m, kh, kw, stride, pads(hb, wb, he, we), dil, group
    (1, 16, 37, 29, 24, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),   # OH not a block multiple
    (3, 8, 30, 30, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),    # odd batch
    (1, 3, 67, 67, 16, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), 1),    # 7x7/2 stem
    (1, 8, 40, 40, 12, 3, 3, (2, 3), (2, 1, 0, 2), (2, 1), 1),    # stride 3, dilation
    (2, 16, 30, 30, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 2),   # grouped
    (1, 64, 41, 43, 32, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),   # pointwise
    (3, 32, 20, 20, 16, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 2),   # grouped pointwise, batch
    (1, 32, 40, 40, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 32),  # depthwise
    (2, 24, 41, 39, 24, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 24),  # depthwise stride 2
    (1, 16, 33, 33, 16, 5, 5, (1, 1), (2, 2, 2, 2), (1, 1), 16),  # depthwise 5x5
    (1, 16, 33, 33, 16, 3, 3, (3, 1), (2, 2, 2, 2), (2, 2), 16),  # depthwise dilated
    (1, 16, 30, 30, 32, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 16),  # channel multiplier 2
    (1, 64, 14, 14, 96, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),   # small plane: split M
    (3, 32, 9, 11, 70, 3, 3, (2, 1), (1, 1, 1, 1), (1, 1), 1),    # small plane, batch, odd M
    (2, 32, 13, 13, 66, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 2),   # small plane, grouped
    (1, 300, 10, 10, 40, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # small plane in 2 chunks
    (2, 600, 9, 9, 64, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 2),    # chunks, batch, grouped
    (1, 700, 7, 7, 33, 5, 5, (1, 1), (2, 2, 2, 2), (1, 1), 1),    # 5x5: 3 chunks, odd M
    (1, 3, 60, 60, 64, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),    # short K: small-gemm rows
    (2, 16, 40, 40, 64, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),   # short K pointwise blocks
    (1, 320, 7, 7, 170, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),   # pointwise split by M, odd
    (1, 128, 8, 8, 200, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 2),   # ... grouped
    # flat im2col (conv._im2col_flat): row blocks and whole planes, stride 1 and 2
    (1, 512, 14, 14, 512, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 32),  # 16 channels per group
    (2, 256, 28, 28, 256, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 16),
    (1, 64, 30, 30, 64, 3, 3, (2, 2), (1, 0, 1, 1), (1, 1), 8),     # row blocks, uneven pads
]
# small planes with fewer (image, group) planes than threads, or an uneven few: at 2 threads
# the threads share each plane's im2col, then split its output channels (conv._plane_phased)
SHARED_PLANE_CASES = [
    (1, 64, 7, 7, 96, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),      # flat im2col, stride 1
    (1, 40, 14, 14, 256, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1),   # row im2col (flat wastes)
    (1, 128, 28, 28, 256, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1), 1),  # strided 1x1, flat phases
    (1, 48, 8, 8, 144, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 3),     # 3 groups: 3 planes in turn
    (3, 20, 9, 9, 70, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1),      # 3 images, odd M
]


def _conv_run(case, dtype, act=0, res=False, col_elems=None, seed=0):
    n, c, h, w, m, kh, kw, stride, pads, dil, group = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = (rng.standard_normal((m, c // group, kh, kw)) * 0.2).astype(dtype)
    b = rng.standard_normal(m).astype(dtype)
    oh = _out_size(h, kh, stride[0], pads[0], pads[2], dil[0])
    ow = _out_size(w, kw, stride[1], pads[1], pads[3], dil[1])
    out = np.full((n, m, oh, ow), np.nan, dtype)
    ne = col_elems if col_elems is not None else CV.conv2d_scratch_elems(c, kh, kw, oh, ow, group,
                                                                         None, m, stride, dil, w)
    col = np.full(ne, np.nan, dtype)
    r = rng.standard_normal(out.shape).astype(dtype)
    args = (stride[0], stride[1], pads[0], pads[1], dil[0], dil[1], group, True)
    if res:
        CV.conv2d_bias_add_act(x, wt, b, r, out, col, *args, act, 0.0, 0.0)
    elif act:
        CV.conv2d_bias_act(x, wt, b, out, col, *args, act, 0.0, 0.0)
    else:
        CV.conv2d(x, wt, b, out, col, *args)
    ref = _np_conv(x.astype(np.float64), wt.astype(np.float64), b.astype(np.float64), stride,
                   pads, dil, group)
    if res:
        ref = ref + r
    if act == 1:
        ref = np.maximum(ref, 0)
    return out, ref


@pytest.mark.parametrize('case', CONV_CASES)
def test_conv2d_parallel(nthreads, case):
    out, ref = _conv_run(case, np.float32)
    _close(out, ref, np.float32)


@pytest.mark.parametrize('case', [CONV_CASES[0], CONV_CASES[4], CONV_CASES[5], CONV_CASES[7],
                                  CONV_CASES[8], CONV_CASES[13], CONV_CASES[-2]])
def test_conv2d_parallel_res_relu(nthreads, case):
    out, ref = _conv_run(case, np.float32, act=1, res=True)
    _close(out, ref, np.float32)


@pytest.mark.parametrize('case', SHARED_PLANE_CASES)
@pytest.mark.parametrize('act,res', [(0, False), (1, True)])
def test_conv2d_shared_plane(nthreads, case, act, res):
    out, ref = _conv_run(case, np.float32, act=act, res=res)
    _close(out, ref, np.float32)


def test_conv2d_parallel_float64(nthreads):
    for case in (CONV_CASES[1], CONV_CASES[5], CONV_CASES[7]):
        out, ref = _conv_run(case, np.float64)
        _close(out, ref, np.float64)


@pytest.mark.parametrize('rows', [1, 3, 14])
@pytest.mark.parametrize('ci', [0, 12])
def test_conv2d_small_scratch(nthreads, rows, ci):
    """Less scratch than conv2d_scratch_elems asks for (e.g. a cache built with fewer
    threads): blocks and workers shrink, down to one output row (the small-plane path falls
    back to row blocks without a whole plane of scratch, one worker with one plane)."""
    case = CONV_CASES[ci]
    n, c, h, w, m, kh, kw = case[:7]
    ow = _out_size(w, kw, 1, 1, 1, 1)
    out, ref = _conv_run(case, np.float32, col_elems=c * kh * kw * ow * rows)
    _close(out, ref, np.float32)


def test_conv2d_scratch_elems_bounds():
    # never more than the full im2col matrix, at least one output row
    for (c, k, oh, ow, g) in [(64, 3, 56, 56, 1), (3, 7, 112, 112, 1), (512, 3, 7, 7, 1),
                              (4, 1, 1, 1, 1), (8, 3, 0, 0, 2)]:
        e = CV.conv2d_scratch_elems(c, k, k, oh, ow, g)
        kdim = c // g * k * k
        assert e >= max(1, kdim * ow)
        cap = 1 if oh * ow > CV._PLANE_MAX_S else max(1, numba.config.NUMBA_NUM_THREADS)
        assert e <= max(1, kdim * ow * max(oh, 1) * cap)
        # one worker: never more than one full matrix; a deep small plane in ~1 MB chunks
        e1 = CV.conv2d_scratch_elems(c, k, k, oh, ow, g, threads=1)
        assert max(1, kdim * ow) <= e1 <= max(1, kdim * ow * max(oh, 1))
        if 0 < oh * ow <= CV._PLANE_MAX_S:
            assert e1 <= max(CV._PLANE_CHUNK_ELEMS, k * k * oh * ow, kdim * ow * oh)


def test_flat_im2col_rule():
    # short output rows take the flat im2col where the gemm's extra columns are few per
    # output channel: grouped layers, and stride 1 with OW == W (no extra column at all)
    assert CV._flat_wins_py(16, 3, 7, 2, 2, 1, 14)         # 16 channels per group, 3x3/2
    assert CV._flat_wins_py(512, 3, 7, 1, 1, 1, 7)         # dense 3x3 'same' on 7x7
    assert not CV._flat_wins_py(512, 3, 7, 2, 2, 1, 14)    # dense 3x3/2: wq = 8 > OW = 7
    assert not CV._flat_wins_py(16, 3, 56, 1, 1, 1, 56)    # long rows: row-by-row im2col
    # the scratch asked for covers the flat task it enables, per worker
    need = CV.conv2d_scratch_elems(512, 3, 3, 7, 7, 32, 1, 512, (2, 2), (1, 1), 14)
    assert need >= CV._flat_cap_py(16, 16, 3, 3, 7, 7, 2, 2, 1, 1, 14)


def test_short_k_convolutions_take_small_gemm_blocks():
    # the blocks of the two short-K cases above stay within OpenBLAS's small-matrix size
    kdim, m = 27, 64
    assert CV._SMALL_MNK // (m * kdim) // 60 < 60  # several row blocks of the 60x60 plane
    assert 64 <= CV._SMALL_MNK // (64 * 16) < 1600  # several column blocks of the 40x40 plane


def test_conv2d_scratch_chunked_plane_is_small():
    # resnet18's stage-2..4 3x3 convs at batch 1: ~1 MB of float32 per worker, not the whole
    # im2col matrix (1152 x 784 = 3.6 MB at stage 2)
    for c, oh in [(128, 28), (256, 14), (512, 7)]:
        e1 = CV.conv2d_scratch_elems(c, 3, 3, oh, oh, 1, threads=1)
        assert e1 <= CV._PLANE_CHUNK_ELEMS + 9 * oh * oh
        assert CV.conv2d_scratch_elems(c, 3, 3, oh, oh, 1, threads=2) <= 2 * e1 or \
            numba.config.NUMBA_NUM_THREADS < 2


# --- pools, softmax --------------------------------------------------------------------------
@pytest.mark.parametrize('k,s,p,h', [(3, 2, 1, 57), (3, 1, 1, 30), (2, 2, 0, 41), (5, 3, 2, 40)])
def test_pools_parallel(nthreads, k, s, p, h, ort_node):
    x = np.random.default_rng(k).standard_normal((2, 17, h, h + 3)).astype(np.float32)
    oh = (h + 2 * p - k) // s + 1
    ow = (h + 3 + 2 * p - k) // s + 1
    out = np.full((2, 17, oh, ow), np.nan, np.float32)
    P.maxpool2d(x, out, k, k, s, s, p, p, 1, 1)
    ref = ort_node('MaxPool', [x], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    np.testing.assert_array_equal(out, ref)
    for inc in (0, 1):
        P.avgpool2d(x, out, k, k, s, s, p, p, bool(inc), p, p)
        ref = ort_node('AveragePool', [x], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                       count_include_pad=inc)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('n', [1, 7, 8, 9, 15, 16, 17, 1000])
def test_row_max(n):
    for pos in range(n if n < 20 else 0):  # the maximum in every accumulator lane and the tail
        x = -np.arange(n, dtype=np.float32)
        x[pos] = 5.0
        assert S.row_max(x) == 5.0
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    assert S.row_max(x) == x.max()
    x[n // 2] = np.nan                          # NaN skipped (softmax turns it into NaN later)
    assert S.row_max(x) == np.nanmax(x) if n > 1 else np.isneginf(S.row_max(x))
    assert np.isneginf(S.row_max(np.zeros(0, np.float32)))


def test_softmax_parallel(nthreads):
    x = (np.random.default_rng(0).standard_normal((300, 1001, 1)) * 4).astype(np.float32)
    x[7, 5, 0] = np.nan
    out = np.empty_like(x)
    S.softmax3d(x, out)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-7)
    assert np.isnan(out[7]).all()


def test_next_affine_order_and_claims():
    """sync.next_affine: a worker takes its own share in order, then the others' shares from
    their ends; a task claimed once is never handed out again."""
    from numba import njit

    from jitort.kernels.cpu.sync import next_affine

    @njit
    def drain(flags, wk, nw):
        got = []
        i = 0
        while True:
            t, i = next_affine(flags, wk, nw, i)
            if t < 0:
                return got
            got.append(t)

    flags = np.zeros(10, np.int64)
    assert drain(flags, 1, 3) == [3, 4, 5, 9, 8, 7, 6, 2, 1, 0]
    flags = np.zeros(10, np.int64)
    flags[[3, 9, 0]] = 1                      # taken by other workers already
    assert drain(flags, 1, 3) == [4, 5, 8, 7, 6, 2, 1]
    assert drain(flags, 0, 3) == []
    assert (flags >= 1).all()

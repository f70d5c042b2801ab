import numpy as np
import pytest

from jitort.kernels.cpu import pool as P

DTYPES = [np.float32, np.float64]


def _out(h, k, s, pb, pe, d, ceil):
    num = h + pb + pe - d * (k - 1) - 1
    o = (-(-num // s) if ceil else num // s) + 1
    if ceil and (o - 1) * s >= h + pb:   # last window must start inside input + begin pad
        o -= 1
    return o


POOL_CASES = [
    # h, w, kh, kw, sh, sw, pads(hb, wb, he, we), dil, ceil
    (7, 6, 3, 3, 1, 1, (1, 1, 1, 1), (1, 1), 0),
    (8, 9, 3, 2, 2, 2, (1, 0, 1, 1), (1, 1), 0),
    (9, 9, 3, 3, 2, 2, (1, 1, 1, 1), (1, 1), 1),
    (10, 7, 2, 3, 3, 2, (0, 1, 0, 1), (1, 1), 1),
    (5, 5, 2, 2, 2, 2, (0, 0, 0, 0), (1, 1), 1),
    (1, 1, 1, 1, 1, 1, (0, 0, 0, 0), (1, 1), 0),
    (9, 8, 3, 2, 1, 2, (2, 1, 2, 1), (2, 3), 0),     # dilation (maxpool only)
    # stride 1 on narrow planes: one flat loop per tap (pool._flat_rows)
    (7, 7, 3, 3, 1, 1, (0, 0, 0, 0), (1, 1), 0),     # in place, no padded copy
    (6, 31, 2, 4, 1, 1, (1, 2, 0, 1), (1, 1), 1),    # widest flat plane, ceil, uneven pads
    (8, 5, 3, 2, 1, 1, (1, 0, 1, 1), (2, 2), 0),     # dilation (maxpool only)
    (4, 40, 3, 3, 1, 1, (1, 1, 1, 1), (1, 1), 0),    # wide: per-row loops
    (11, 11, 3, 3, 2, 2, (0, 0, 0, 0), (1, 1), 1),   # 3x3 stride 2, in place, ceil (squeezenet)
    (12, 13, 3, 3, 2, 2, (0, 0, 1, 1), (1, 1), 0),   # 3x3 stride 2, end pads (inception)
    # one window over the whole plane: a global pool; and near misses that are not
    (7, 7, 7, 7, 1, 1, (0, 0, 0, 0), (1, 1), 0),
    (5, 3, 5, 3, 2, 2, (0, 0, 0, 0), (1, 1), 1),
    (7, 7, 7, 7, 1, 1, (0, 0, 1, 0), (1, 1), 0),     # an end pad: a 2x1 output
    (7, 7, 6, 7, 1, 1, (0, 0, 0, 0), (1, 1), 0),
    (6, 6, 7, 7, 1, 1, (0, 0, 1, 1), (1, 1), 0),     # end pads (inception v1's last pool)
    (5, 6, 7, 7, 1, 1, (1, 0, 1, 1), (1, 1), 0),     # begin and end pads
    # 2x2 stride 2: the taps in one pass (vgg, densenet, zfnet)
    (8, 10, 2, 2, 2, 2, (0, 0, 0, 0), (1, 1), 0),
    (7, 9, 2, 2, 2, 2, (1, 0, 0, 1), (1, 1), 1),
]


def _case(dtype, case, n=2, c=3, seed=0):
    h, w, kh, kw, sh, sw, pads, dil, ceil = case
    x = np.random.default_rng(seed).standard_normal((n, c, h, w)).astype(dtype)
    oh = _out(h, kh, sh, pads[0], pads[2], dil[0], ceil)
    ow = _out(w, kw, sw, pads[1], pads[3], dil[1], ceil)
    return x, np.full((n, c, oh, ow), np.nan, dtype)


def _ort32(ort_node, op, x, **attrs):
    """ORT has no double pools for all ops; run float32 and compare loosely for float64."""
    return ort_node(op, [x.astype(np.float32)], **attrs).astype(x.dtype)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', POOL_CASES)
def test_maxpool2d(dtype, case, ort_node):
    h, w, kh, kw, sh, sw, pads, dil, ceil = case
    x, out = _case(dtype, case)
    P.maxpool2d(x, out, kh, kw, sh, sw, pads[0], pads[1], dil[0], dil[1])
    ref = _ort32(ort_node, 'MaxPool', x, kernel_shape=[kh, kw], strides=[sh, sw],
                 pads=list(pads), dilations=list(dil), ceil_mode=ceil)
    np.testing.assert_allclose(out, ref, rtol=1e-6)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('case', [c for c in POOL_CASES if c[7] == (1, 1)])
@pytest.mark.parametrize('cip', [0, 1])
def test_avgpool2d(dtype, case, cip, ort_node):
    h, w, kh, kw, sh, sw, pads, dil, ceil = case
    x, out = _case(dtype, case)
    P.avgpool2d(x, out, kh, kw, sh, sw, pads[0], pads[1], cip, pads[2], pads[3])
    ref = _ort32(ort_node, 'AveragePool', x, kernel_shape=[kh, kw], strides=[sh, sw],
                 pads=list(pads), ceil_mode=ceil, count_include_pad=cip)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('shape,pads', [((1, 37, 7, 7), (1, 1, 1, 1)),    # 2 blocks of 16 + 5
                                         ((2, 20, 14, 13), (0, 1, 1, 0)),
                                         ((1, 3, 16, 16), (1, 1, 1, 1)),    # 256 outputs: the limit
                                         ((1, 3, 17, 16), (1, 1, 1, 1))])   # 272: per plane
@pytest.mark.parametrize('cip', [0, 1])
def test_avgpool2d_channel_blocks(nthreads, shape, pads, cip, ort_node):
    """Small planes sum their windows as a depthwise convolution over 16-channel blocks
    (pool._DW_SUM_MAX_S), then scale by the reciprocal counts."""
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    n, c, h, w = shape
    out = np.full((n, c, h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2), np.nan,
                  np.float32)
    P.avgpool2d(x, out, 3, 3, 1, 1, pads[0], pads[1], cip, pads[2], pads[3])
    ref = ort_node('AveragePool', [x], kernel_shape=[3, 3], pads=list(pads),
                   count_include_pad=cip)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_pool_big_parallel(ort_node):
    x = np.random.default_rng(1).standard_normal((1, 16, 64, 64)).astype(np.float32)
    out = np.empty((1, 16, 32, 32), np.float32)
    P.maxpool2d(x, out, 3, 3, 2, 2, 1, 1, 1, 1)
    ref = ort_node('MaxPool', [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0])
    np.testing.assert_array_equal(out, ref)
    P.avgpool2d(x, out, 3, 3, 2, 2, 1, 1, 0, 0, 0)
    ref = ort_node('AveragePool', [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('shape', [(2, 3, 5), (1, 1, 1), (2, 2, 0), (0, 3, 4), (4, 16, 2048)])
def test_global_pools(dtype, shape):
    x = np.random.default_rng(2).standard_normal(shape).astype(dtype)
    out = np.empty(shape[:2], dtype)
    P.global_avgpool(x, out)
    with np.errstate(invalid='ignore'):
        ref = x.sum(axis=2) / shape[2]
    np.testing.assert_allclose(out, ref, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)
    P.global_maxpool(x, out)
    ref = np.max(x, axis=2, initial=-np.inf)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('size', [1, 2, 3, 5])
def test_lrn(dtype, size, ort_node):
    x = np.random.default_rng(3).standard_normal((2, 6, 3, 4)).astype(dtype)
    out = np.empty_like(x)
    alpha, beta, bias = float(np.float32(1e-3)), 0.75, 1.5
    P.lrn(x.reshape(2, 6, 12), out.reshape(2, 6, 12), size, alpha, beta, bias)
    if size % 2:
        ref = _ort32(ort_node, 'LRN', x, size=size, alpha=alpha, beta=beta, bias=bias)
    else:   # ORT only supports odd sizes: numpy version of the ONNX formula
        sq = np.zeros_like(x, dtype=np.float64)
        for c in range(6):
            lo, hi = max(0, c - (size - 1) // 2), min(5, c + size // 2)
            sq[:, c] = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(axis=1)
        ref = x / (bias + alpha / size * sq) ** beta
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize('op', ['MaxPool', 'AveragePool'])
@pytest.mark.parametrize('threads', [1, 2])
def test_pool_planes_split_over_workers(op, threads, ort_node):
    """More planes than workers, not a multiple: each worker takes a range with one scratch."""
    import numba
    x = np.random.default_rng(4).standard_normal((3, 37, 14, 14)).astype(np.float32)
    out = np.full((3, 37, 14, 14), np.nan, np.float32)
    old = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        if op == 'MaxPool':
            P.maxpool2d(x, out, 3, 3, 1, 1, 1, 1, 1, 1)
        else:
            P.avgpool2d(x, out, 3, 3, 1, 1, 1, 1, 0, 1, 1)
    finally:
        numba.set_num_threads(old)
    ref = ort_node(op, [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('k,stride', [(3, 1), (3, 2), (2, 2)])
def test_maxpool_unrolled_skip_nan_like_the_generic_loop(k, stride):
    """The unrolled 3x3 paths (stride 2: rows first, then columns) and 2x2/2 skip NaN; an
    all-NaN window gives -inf. Reference: the maximum over each window's non-NaN values."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 9, 10)).astype(np.float32)
    x[0, 0, 2:5, 2:5] = np.nan                       # a whole window of NaN
    x[0, 1, rng.random((9, 10)) < 0.3] = np.nan      # scattered
    oh, ow = (9 - k) // stride + 1, (10 - k) // stride + 1
    out = np.empty((1, 2, oh, ow), np.float32)
    P.maxpool2d(x, out, k, k, stride, stride, 0, 0, 1, 1)
    ref = np.full_like(out, -np.inf)
    for i in range(oh):
        for j in range(ow):
            win = x[0, :, i * stride:i * stride + k, j * stride:j * stride + k].reshape(2, -1)
            for c in range(2):
                v = win[c][~np.isnan(win[c])]
                ref[0, c, i, j] = v.max() if v.size else -np.inf
    np.testing.assert_array_equal(out, ref)


_SEP_SHAPES = [(1, 5, 1, 1), (2, 3, 1, 6), (1, 4, 6, 1), (1, 3, 2, 2), (2, 7, 14, 14),
               (1, 19, 7, 7), (1, 3, 13, 12), (1, 2, 3, 16), (1, 2, 30, 29),
               (1, 3, 95, 94), (1, 2, 37, 41)]   # planes above one chunk; wide stride 2
_SEP_PADS = [(1, 1, 1, 1), (0, 0, 0, 0), (0, 0, 1, 1), (1, 0, 1, 0), (1, 1, 0, 0)]


def _sep_cases():
    for shape in _SEP_SHAPES:
        for s in (1, 2):
            for pads in _SEP_PADS:
                h, w = shape[2:]
                oh = (h + pads[0] + pads[2] - 3) // s + 1
                ow = (w + pads[1] + pads[3] - 3) // s + 1
                if oh >= 1 and ow >= 1:
                    yield shape, s, pads, oh, ow


@pytest.mark.parametrize('shape,s,pads,oh,ow', list(_sep_cases()))
@pytest.mark.parametrize('op', ['MaxPool', 'AveragePool'])
def test_pool_3x3_separable_path(nthreads, shape, s, pads, oh, ow, op, ort_node):
    """3x3 pools whose window centres lie in the plane run separably over chunks of planes
    (pool._sep3_pool; stride 2 columns first, pool._s2_range, every other column 16 outputs
    at a time: pool._row3_s2, 94- and 41-wide planes take one or two vectors and a tail).
    1-row, 1-column, 2x2
    planes, chunks of several planes and planes bigger than a chunk, every pad pattern, both
    strides, against onnxruntime; NaN in max is skipped."""
    n, c, h, w = shape
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    if op == 'MaxPool' and h * w > 1:
        x[0, 0, 0, 0] = np.nan                      # skipped (never alone in a window here)
    out = np.full((n, c, oh, ow), np.nan, np.float32)
    assert P._sep3_ok(h, w, oh, ow, 3, 3, s, s, pads[0], pads[1], 1, 1)
    if op == 'MaxPool':
        P.maxpool2d(x, out, 3, 3, s, s, pads[0], pads[1], 1, 1)
        xr = x.copy()
        xr[np.isnan(xr)] = -np.inf                  # the kernel's NaN rule, for onnxruntime
        ref = ort_node('MaxPool', [xr], kernel_shape=[3, 3], strides=[s, s], pads=list(pads))
        np.testing.assert_array_equal(out, ref)
    else:
        for cip in (0, 1):
            P.avgpool2d(x, out, 3, 3, s, s, pads[0], pads[1], cip, pads[2], pads[3])
            ref = ort_node('AveragePool', [x], kernel_shape=[3, 3], strides=[s, s],
                           pads=list(pads), count_include_pad=cip)
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('op', ['MaxPool', 'AveragePool'])
@pytest.mark.parametrize('wd', [40, 8, 5])
def test_pool_3x3_stride2_float64_vector_rows(nthreads, op, wd, ort_node):
    """float64 through the 16-output row vectors (pool._h3s2_max / _h3s2_avg), unpadded and
    padded, a plane of 40 columns (19-20 outputs: one vector and a tail); planes of one
    vector a row (8 and 5 columns: pool._s2_small_*)."""
    x = np.random.default_rng(6).standard_normal((2, 3, 9, wd))
    for p in (0, 1):
        oh, ow = (9 + 2 * p - 3) // 2 + 1, (wd + 2 * p - 3) // 2 + 1
        out = np.full((2, 3, oh, ow), np.nan)
        if op == 'MaxPool':
            P.maxpool2d(x, out, 3, 3, 2, 2, p, p, 1, 1)
            ref = ort_node('MaxPool', [x], kernel_shape=[3, 3], strides=[2, 2], pads=[p] * 4)
        else:  # (onnxruntime has no float64 AveragePool: the windows' means, pads excluded)
            P.avgpool2d(x, out, 3, 3, 2, 2, p, p, 0, p, p)
            xp = np.pad(x, [(0, 0), (0, 0), (p, p), (p, p)], constant_values=np.nan)
            ref = np.stack([np.stack([np.nanmean(xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3],
                                                 axis=(2, 3)) for j in range(ow)], -1)
                            for i in range(oh)], -2)
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_pool_3x3_separable_path_is_taken_where_it_wins():
    assert P._sep3_ok(14, 14, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1)       # inception's avg pools
    assert P._sep3_ok(7, 7, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1)
    assert P._sep3_ok(14, 14, 7, 7, 3, 3, 2, 2, 0, 0, 1, 1)         # small stride 2
    assert P._sep3_ok(112, 112, 56, 56, 3, 3, 2, 2, 1, 1, 1, 1)      # padded stride 2
    assert P._sep3_ok(111, 111, 55, 55, 3, 3, 2, 2, 0, 0, 1, 1)      # wide, unpadded
    assert not P._sep3_ok(9, 9, 9, 9, 3, 3, 1, 1, 1, 1, 2, 2)       # dilated
    assert not P._sep3_ok(9, 9, 11, 11, 3, 3, 1, 1, 2, 2, 1, 1)     # centres outside the plane
    assert not P._sep3_ok(9, 9, 7, 7, 5, 5, 1, 1, 0, 0, 1, 1)       # 5x5


def _pool5_cases():
    # (x shape, kernel, strides, begin pads, end pads, dilations)
    yield (1, 3, 16, 16, 16), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1)
    yield (2, 2, 7, 9, 11), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)
    yield (1, 2, 6, 8, 10), (2, 2, 2), (2, 2, 2), (0, 0, 0), (0, 0, 0), (1, 1, 1)
    yield (1, 2, 7, 9, 11), (3, 2, 4), (1, 2, 3), (1, 0, 2), (2, 1, 0), (1, 1, 1)
    yield (1, 1, 9, 10, 11), (3, 3, 3), (2, 1, 2), (2, 1, 0), (0, 2, 2), (2, 2, 1)
    yield (1, 2, 2, 3, 1), (3, 3, 3), (1, 2, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)


@pytest.mark.parametrize('shape,k,s,pb,pe,d', list(_pool5_cases()))
@pytest.mark.parametrize('op', ['MaxPool', 'AveragePool', 'LpPool'])
def test_pool5d_separable_matches_onnxruntime(nthreads, shape, k, s, pb, pe, d, op, ort_node):
    """3-D pools (pool._pool5_sep: the window's planes, then rows, then columns folded, three
    taps per pass where a window has them) at every clipping pattern: pads on either side,
    strides 1-3, dilations, windows that see one row, against onnxruntime."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    osz = [(shape[2 + i] + pb[i] + pe[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(3)]
    out = np.full(shape[:2] + tuple(osz), np.nan, np.float32)
    idx = np.zeros((1, 1, 1, 1, 1), np.int64)
    attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(pb) + list(pe))
    if op == 'MaxPool':
        runs = [(0, 0, 2, dict(attrs, dilations=list(d)))]
    elif op == 'AveragePool':
        if d != (1, 1, 1):
            pytest.skip("onnxruntime's AveragePool has no dilations")
        runs = [(1, cip, 2, dict(attrs, count_include_pad=cip)) for cip in (0, 1)]
    else:
        if d != (1, 1, 1):
            pytest.skip("onnxruntime's LpPool 3-D has no dilations")
        runs = [(2, 0, p, dict(attrs, p=p)) for p in (1, 2, 3)]
    for mode, cip, p, at in runs:
        P.pool5d(x, out, idx, mode, False, False, *k, *s, *pb, *pe, *d, bool(cip), p)
        ref = ort_node(op, [x], **at)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,ctm,ratio", [("avg", "half_pixel", 0), ("max", "half_pixel", 2),
                                            ("avg", "output_half_pixel", 2),
                                            ("max", "output_half_pixel", 0)])
def test_roi_align_vs_reference(mode, ctm, ratio):
    """RoiAlign-16 compiled (strict) against onnx.reference: boxes inside, across the border
    and outside the image, two images, sampling_ratio adaptive (0) and fixed."""
    from onnx import TensorProto as TP, helper
    from onnx.reference import ReferenceEvaluator
    import jitort
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    rois = np.array([[0, 0, 9, 9], [1.5, 2.2, 7.1, 8.9], [-3, -2, 4, 5], [8, 6, 30, 20],
                     [2, 2, 2.3, 2.1]], np.float32)
    batch = np.array([0, 1, 1, 0, 1], np.int64)
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], mode=mode,
                            coordinate_transformation_mode=ctm, output_height=3,
                            output_width=4, sampling_ratio=ratio, spatial_scale=0.75)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, x.shape),
                                        helper.make_tensor_value_info("rois", TP.FLOAT, [5, 4]),
                                        helper.make_tensor_value_info("b", TP.INT64, [5])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    cm = jitort.compile(m, strict=True)
    feeds = {"x": x, "rois": rois, "b": batch}
    got = cm.run(None, feeds)[0]
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    assert got.shape == want.shape == (5, 3, 3, 4) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert cm.fallback_nodes() == []
    if mode == "avg" and ratio == 0:
        with pytest.raises(jitort.errors.JitortError, match="batch index is out of range"):
            cm.run(None, dict(feeds, b=np.array([0, 1, 2, 0, 1], np.int64)))

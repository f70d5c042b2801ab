"""The CUDA convolution launchers (kernels/cuda/conv.py) called directly, on the tiled
implicit-GEMM kernel and the direct one, against a float64 numpy convolution.

Every operand sits at an offset inside a larger flat array whose other elements are NaN (a
read outside the operand poisons the result) or, for the output, a sentinel that must survive
(a write outside the output is caught). Shapes are tiny: the simulator runs one Python thread
per CUDA thread.
"""
import numpy as np
import pytest

RNG = np.random.default_rng(11)
SENTINEL = 12345.0


def _conv():
    from jitort.kernels.cuda import conv
    return conv


def _out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _reference(x, w, b, r, strides, pads, dils, group, code, alpha, beta):
    """float64 ``act(conv(x, w) + b + r)`` with symmetric pads."""
    n, c, h, wd = x.shape
    kout, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = strides, pads, dils
    oh, ow = _out_size(h, kh, sh, ph, dh), _out_size(wd, kw, sw, pw, dw)
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    kpg = kout // group
    y = np.zeros((n, kout, oh, ow))
    for k in range(kout):
        chans = slice(k // kpg * cg, (k // kpg + 1) * cg)
        for u in range(kh):
            for v in range(kw):
                patch = xp[:, chans, u * dh:u * dh + (oh - 1) * sh + 1:sh,
                           v * dw:v * dw + (ow - 1) * sw + 1:sw]
                y[:, k] += np.einsum("nchw,c->nhw", patch, w[k, :, u, v])
    if b is not None:
        y += b[None, :, None, None]
    if r is not None:
        y += r
    if code == 1:
        y = np.maximum(y, 0)
    elif code == 5:
        y = np.where(y >= 0, y, alpha * y)
    elif code == 6:
        y = np.clip(y, alpha, beta)
    return y


def _placed(cuda, a, off, fill, dtype):
    """``a`` flattened at element ``off`` of a device array padded with ``fill`` (5 after)."""
    flat = np.full(off + a.size + 5, fill, dtype)
    flat[off:off + a.size] = a.ravel()
    return cuda.to_device(flat)


def run_conv(cuda, xs, ws, strides=(1, 1), pads=(0, 0), dils=(1, 1), group=1, bias=True,
             res=False, code=0, alpha=0.0, beta=0.0, dtype=np.float32, offs=(0, 0, 0, 0, 0),
             tiled=True, launcher="bias_add_act"):
    """Run one launcher, check the kernel it picked (``tiled``) and its grid, and compare with
    the reference. ``offs``: the element offsets of x, w, b, r and y."""
    from jitort.kernels.cuda.launch import launch, recording
    conv = _conv()
    (n, c, h, wd), (kout, cg, kh, kw) = xs, ws
    assert cg == c // group and conv.use_tiled(c, kout, kh, kw, group) == tiled
    oh, ow = (_out_size(h, kh, strides[0], pads[0], dils[0]),
              _out_size(wd, kw, strides[1], pads[1], dils[1]))
    x, w = RNG.standard_normal(xs), RNG.standard_normal(ws)
    b = RNG.standard_normal(kout) if bias else None
    r = RNG.standard_normal((n, kout, oh, ow)) if res else None
    xo, wo, bo, ro, yo = offs
    dx, dwt = _placed(cuda, x, xo, np.nan, dtype), _placed(cuda, w, wo, np.nan, dtype)
    db = _placed(cuda, b, bo, np.nan, dtype) if bias else dwt
    dr = _placed(cuda, r, ro, np.nan, dtype) if res else None
    dy = _placed(cuda, np.full(n * kout * oh * ow, SENTINEL), yo, SENTINEL, dtype)
    geo = (n, c, h, wd, kout, kh, kw, oh, ow, *strides, *pads, *dils, group)
    with recording() as launches:
        if launcher == "bias_add_act":
            conv.conv2d_bias_add_act(dx, xo, dwt, wo, db, bo, dr if res else dy, ro if res else yo,
                                     dy, yo, *geo, bias, res, code, alpha, beta)
        elif launcher == "bias_act":
            conv.conv2d_bias_act(dx, xo, dwt, wo, db, bo, dy, yo, *geo, bias, code, alpha, beta)
        else:
            conv.conv2d(dx, xo, dwt, wo, db, bo, dy, yo, *geo, bias)
    ((kernel, grid, block, args),) = launches
    if tiled:
        assert kernel is conv._KERNELS[np.dtype(dtype)]
        assert grid == (-(-n * oh * ow // conv.TILE_P), -(-kout // group // conv.TILE_K), group)
        assert block == (conv.THREADS, conv.THREADS)
    else:
        assert kernel is conv._DIRECT[np.dtype(np.float64 if dtype == np.float64 else np.float32)]
    launch(kernel, grid, block, *args)
    got = dy.copy_to_host()
    want = _reference(x, w, b, r, strides, pads, dils, group, code, alpha, beta)
    size = want.size
    rtol, atol = (1e-4, 1e-5) if dtype == np.float32 else (1e-12, 1e-12)
    np.testing.assert_allclose(got[yo:yo + size].reshape(want.shape), want, rtol=rtol, atol=atol)
    assert (got[:yo] == SENTINEL).all() and (got[yo + size:] == SENTINEL).all()


@pytest.mark.parametrize("c,kout,kh,kw,group,want", [
    (4, 10, 3, 3, 1, True),     # 36 taps, 10 channels
    (16, 12, 1, 1, 1, True),    # a 1x1 with 16 input channels: exactly one chunk
    (8, 16, 3, 3, 2, True),     # groups of 4 channels in, 8 out
    (15, 12, 1, 1, 1, False),   # 15 taps: less than a chunk
    (1, 8, 3, 3, 1, False),     # a first layer on one channel: 9 taps
    (4, 7, 3, 3, 1, False),     # 7 output channels: under an eighth of the tile
    (8, 8, 3, 3, 8, False),     # depthwise
    (32, 32, 3, 3, 4, True),    # 8 in, 8 out per group
])
def test_selection_rule(c, kout, kh, kw, group, want):
    assert _conv().use_tiled(c, kout, kh, kw, group) == want


def test_tiled_3x3_pad_batch_partial_tiles(cuda):
    # 36 taps: chunks of 16, 16 and 4 (both tap buffers); 2 * 6 * 6 = 72 positions: a full
    # and a partial position tile; 10 channels: a partial channel tile; offsets everywhere
    run_conv(cuda, (2, 4, 6, 6), (10, 4, 3, 3), pads=(1, 1), offs=(3, 5, 2, 0, 7))


def test_tiled_stride2_dilation2_uneven_pads(cuda):
    run_conv(cuda, (1, 3, 8, 7), (9, 3, 3, 3), strides=(2, 2), pads=(2, 1), dils=(2, 2),
             offs=(1, 0, 0, 0, 4))


def test_tiled_groups(cuda):
    run_conv(cuda, (1, 8, 5, 5), (16, 4, 3, 3), pads=(1, 1), group=2, offs=(2, 3, 1, 0, 1))


def test_tiled_1x1_strided_no_bias_through_conv2d(cuda):
    run_conv(cuda, (2, 16, 5, 4), (12, 16, 1, 1), strides=(2, 1), bias=False, launcher="conv2d")


def test_tiled_two_channel_tiles(cuda):
    # 72 output channels: blockIdx.y = 1 covers channels 64..71
    run_conv(cuda, (1, 16, 3, 3), (72, 16, 1, 1), offs=(0, 9, 4, 0, 2))


def test_tiled_residual_relu_without_bias(cuda):
    run_conv(cuda, (1, 4, 5, 6), (8, 4, 2, 2), pads=(1, 0), bias=False, res=True, code=1,
             offs=(4, 1, 0, 6, 3))


def test_tiled_bias_act_leaky(cuda):
    run_conv(cuda, (1, 2, 6, 6), (8, 2, 3, 3), code=5, alpha=0.1, launcher="bias_act")


@pytest.mark.parametrize("code,alpha,beta", [(1, 0.0, 0.0), (6, -0.5, 0.75)])
def test_tiled_float64_residual(cuda, code, alpha, beta):
    run_conv(cuda, (1, 4, 4, 4), (8, 4, 2, 2), strides=(1, 2), pads=(1, 1), res=True, code=code,
             alpha=alpha, beta=beta, dtype=np.float64, offs=(1, 2, 3, 4, 5))


@pytest.mark.parametrize("xs,ws,group", [
    ((1, 4, 5, 5), (4, 1, 3, 3), 4),   # depthwise
    ((2, 1, 5, 4), (8, 1, 3, 3), 1),   # 9 taps
])
def test_direct_kernel_where_tiles_would_be_padding(cuda, xs, ws, group):
    run_conv(cuda, xs, ws, pads=(1, 1), group=group, res=True, code=1, offs=(1, 1, 1, 1, 1),
             tiled=False)


def test_compiled_conv_add_relu_runs_the_tiled_kernel(cuda):
    # through jitort.compile: Conv -> Add -> Relu becomes one FusedConv, whose launch (recorded
    # by the plan) is the tiled kernel's; the result matches onnxruntime
    import onnxruntime as ort
    from onnx import helper

    import jitort
    from tests.helpers import F32, make_model
    x = RNG.standard_normal((2, 4, 5, 5)).astype(np.float32)
    r = RNG.standard_normal((2, 8, 3, 3)).astype(np.float32)
    inits = {"w": RNG.standard_normal((8, 4, 3, 3)).astype(np.float32),
             "b": RNG.standard_normal(8).astype(np.float32)}
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2], pads=[1] * 4),
                    helper.make_node("Add", ["c", "r"], ["s"]),
                    helper.make_node("Relu", ["s"], ["y"])],
                   [("x", F32, [2, 4, 5, 5]), ("r", F32, [2, 8, 3, 3])], [("y", F32, None)], inits)
    cm = jitort.compile(m, device="cuda")
    assert cm.placement_counts() == {"cuda": 1}
    got = cm(x=x, r=r)[0]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, {"x": x, "r": r})[0], rtol=1e-4, atol=1e-5)
    (plan,) = cm.plans()
    assert [k for k, *_ in plan.local.bound.launches] == [_conv()._KERNELS[np.dtype(np.float32)]]

"""2-D convolution (NCHW, groups, strides, pads, dilations) with a fused epilogue.

Two kernels, one result. The direct kernel (``_conv_k``) runs one thread per output element
and reads every input and weight from global memory. The tiled kernel (``_KERNELS``) is an
implicit GEMM per group, ``Y[k, p] = sum_r W[k, r] * X_col[r, p]`` (k an output channel of the
group, p a flat (n, oy, ox) position, r a flat (channel, u, v) tap): a block stages a
``TILE_K x TILE_R`` weight tile and the gathered ``TILE_R x TILE_P`` input tile in shared
memory and each thread accumulates a ``REG x REG`` block of outputs in registers, so every
staged value is reused ``REG`` times per thread and ``TILE_K`` / ``TILE_P`` times per block.
Where NVIDIA's libraries serve, two more: cuDNN's convolution (``dnn``: its heuristics pick
the algorithm), and the images' im2col columns times the weight as strided-batched cuBLAS
products; each is followed by an epilogue kernel.

Which one runs is the choice ``cuda.conv`` (:func:`algorithm`): calibrated per shape bucket
on the GPU (``kernels.cuda.tunables``; ``jitort tune --device cuda``), else the default rule
:func:`default_algorithm`: where :func:`use_tiled` says a convolution is big enough for tiles
(each output sums at least one chunk of products, ``C / group * KH * KW >= 16``, and a group
has at least 8 output channels), cuDNN, else cuBLAS, else the tiled kernel, whichever serves
first; below that the tiles would be mostly padding, so depthwise and tiny convolutions stay
direct. A cuDNN without an algorithm for a convolution hands it to the rule's next pick.

``conv2d_bias_act`` fuses a bias and an activation (codes as ``mathfn.activations``'s ``act``),
``conv2d_bias_add_act`` a bias, a residual of the output's shape and an activation.
"""
import numpy as np
from numba import cuda

from . import blas, dnn, tunables
from .gemm import epilogue
from .launch import call, launch
from .mathfn import act_for, compute_type, conv_position, grid1

BLOCK = 128

# The tiled kernel: THREADS x THREADS threads, each computing REG x REG outputs (output channel
# k0 + ty + i * THREADS, position p0 + tx + j * THREADS: a warp's stores and shared reads are
# consecutive), over chunks of TILE_R taps.
THREADS = 16
REG = 4
TILE_K = THREADS * REG  # output channels per block
TILE_P = THREADS * REG  # output positions per block
TILE_R = 16  # taps per shared-memory chunk
NT = THREADS * THREADS
SW_COLS = TILE_K + 1  # the weight tile is stored [r][k]; +1 column spreads its stores' banks
W_LOADS = TILE_K * TILE_R // NT  # weight elements each thread stages per chunk
X_LOADS = TILE_R * TILE_P // NT  # input elements each thread stages per chunk
assert NT % TILE_R == 0 and NT % TILE_P == 0 and W_LOADS * NT == TILE_K * TILE_R

# Tiled when every output sums at least a full chunk of products and a group fills an eighth of
# a tile's channels: below that the tiles are mostly padding and the direct kernel wastes less.
TILED_MIN_TAPS = TILE_R
TILED_MIN_KOUT = 8
MAX_GRID_Z = 65535  # the groups run on the grid's z dimension


def use_tiled(c, kout, kh, kw, group) -> bool:
    """Whether ``conv2d_bias_add_act`` runs the tiled kernel (float32/float64 operands of one
    dtype) rather than the direct one, from the geometry alone."""
    return ((c // group) * kh * kw >= TILED_MIN_TAPS and kout // group >= TILED_MIN_KOUT
            and group <= MAX_GRID_Z)


def _make_direct(ft):
    """The direct kernel computing in ``ft`` (its activations' constants of that type)."""
    act = act_for(ft)
    zero = ft(0)  # the accumulator's start, typed (an int would promote it to float64)

    @cuda.jit
    def _conv_k(x, xo, w, wo, b, bo, r, ro, y, yo, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph,
                pw, dh, dw, group, has_bias, has_res, code, alpha, beta, total):
        i = cuda.grid(1)
        if i >= total:
            return
        ox, oy, k, n, cg, kg = conv_position(i, ow, oh, kout, c, group)
        g = k // kg
        acc = zero
        for cc in range(cg):
            ch = g * cg + cc
            for u in range(kh):
                iy = oy * sh - ph + u * dh
                if iy < 0 or iy >= h:
                    continue
                for v in range(kw):
                    ix = ox * sw - pw + v * dw
                    if ix < 0 or ix >= wd:
                        continue
                    acc += (x[xo + ((n * c + ch) * h + iy) * wd + ix]
                            * w[wo + ((k * cg + cc) * kh + u) * kw + v])
        if has_bias:
            acc += b[bo + k]
        if has_res:  # each thread reads its residual element before writing the same position
            acc += r[ro + i]
        y[yo + i] = act(acc, code, alpha, beta)
    return _conv_k


#: the direct kernel per compute type
_DIRECT = {np.dtype(t): _make_direct(t) for t in (np.float32, np.float64)}


def _make(dt):
    """The tiled kernel for one dtype (shared arrays need a dtype known when it compiles;
    float16 operands are staged and accumulated in float32).
    Grid: (position tiles, channel tiles of a group, groups); block: (THREADS, THREADS)."""
    dt = compute_type(dt)
    store = _make_store(act_for(dt))

    @cuda.jit
    def kern(x, xo, w, wo, b, bo, r, ro, y, yo, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw,
             dh, dw, group, has_bias, has_res, code, alpha, beta, npos):
        # one allocation per line: the simulator tells shared arrays apart by source line
        s_w = cuda.shared.array((TILE_R, SW_COLS), dtype=dt)
        s_x = cuda.shared.array((TILE_R, TILE_P), dtype=dt)
        s_tap = cuda.shared.array((2, 3, TILE_R), dtype=np.int64)
        acc = cuda.local.array((REG, REG), dtype=dt)
        ra = cuda.local.array(REG, dtype=dt)
        rb = cuda.local.array(REG, dtype=dt)
        _tiled(x, xo, w, wo, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group, npos,
               s_w, s_x, s_tap, acc, ra, rb)
        store(b, bo, r, ro, y, yo, kout, oh * ow, group, has_bias, has_res, code, alpha, beta,
              npos, acc)
    return kern


@cuda.jit(device=True)
def _taps(s_tap, buf, r0, red, t, kw, khw, h, wd, dh, dw):
    """Threads 0..TILE_R-1 tabulate taps ``r0 + t`` = (cc, u, v) into ``s_tap[buf]``: the
    input's offset from the window's corner, its row shift and its column shift (the gathers
    then divide nothing)."""
    rr = r0 + t
    if t < TILE_R and rr < red:
        cc = rr // khw
        u = (rr - cc * khw) // kw
        v = rr - cc * khw - u * kw
        s_tap[buf, 0, t] = (cc * h + u * dh) * wd + v * dw
        s_tap[buf, 1, t] = u * dh
        s_tap[buf, 2, t] = v * dw


@cuda.jit(device=True)
def _tiled(x, xo, w, wo, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group, npos,
           s_w, s_x, s_tap, acc, ra, rb):
    """This block's tile of ``W @ X_col`` for group ``blockIdx.z``, into each thread's ``acc``.
    Every thread reaches every ``syncthreads``: out-of-range loads stage zeros instead."""
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    t = ty * THREADS + tx
    g = cuda.blockIdx.z
    kpg, cg, khw = kout // group, c // group, kh * kw
    red = cg * khw
    # the weights this thread stages: tap r0 + rw of the block's channels kk0 + it * NT/TILE_R
    k0 = cuda.blockIdx.y * TILE_K
    rw, kk0 = t % TILE_R, t // TILE_R
    wrow = wo + (g * kpg + k0) * red + rw
    # the inputs: taps r0 + rx0 + it * NT/TILE_P of position p, the same p for every chunk
    px, rx0 = t % TILE_P, t // TILE_P
    p = cuda.blockIdx.x * TILE_P + px
    ohw = oh * ow
    nn = p // ohw
    oy = (p - nn * ohw) // ow
    iy0 = oy * sh - ph
    ix0 = (p - nn * ohw - oy * ow) * sw - pw
    xcorner = xo + ((nn * c + g * cg) * h + iy0) * wd + ix0  # x's index at tap (0, 0, 0)
    for i in range(REG):
        for j in range(REG):
            acc[i, j] = 0
    _taps(s_tap, 0, 0, red, t, kw, khw, h, wd, dh, dw)
    cuda.syncthreads()
    buf = 0
    for r0 in range(0, red, TILE_R):
        for it in range(W_LOADS):
            kk = kk0 + it * (NT // TILE_R)
            if k0 + kk < kpg and r0 + rw < red:
                s_w[rw, kk] = w[wrow + kk * red + r0]
            else:
                s_w[rw, kk] = 0
        for it in range(X_LOADS):
            rx = rx0 + it * (NT // TILE_P)
            iy = iy0 + s_tap[buf, 1, rx]
            ix = ix0 + s_tap[buf, 2, rx]
            if p < npos and r0 + rx < red and 0 <= iy < h and 0 <= ix < wd:
                s_x[rx, px] = x[xcorner + s_tap[buf, 0, rx]]
            else:
                s_x[rx, px] = 0
        # the next chunk's taps, into the other buffer: its last readers passed the last sync
        _taps(s_tap, 1 - buf, r0 + TILE_R, red, t, kw, khw, h, wd, dh, dw)
        cuda.syncthreads()
        for q in range(TILE_R):
            for i in range(REG):
                ra[i] = s_w[q, ty + i * THREADS]
                rb[i] = s_x[q, tx + i * THREADS]
            for i in range(REG):
                for j in range(REG):
                    acc[i, j] += ra[i] * rb[j]
        cuda.syncthreads()
        buf = 1 - buf


def _make_store(act):
    """The tiled kernel's store, applying ``act`` (one of ``mathfn.activations``)."""
    @cuda.jit(device=True)
    def _store(b, bo, r, ro, y, yo, kout, ohw, group, has_bias, has_res, code, alpha, beta, npos,
               acc):
        """The direct kernel's epilogue (bias, residual, act), on this thread's tile outputs
        (channel ``k0 + ty + i * THREADS`` of the group, position ``p0 + tx + j * THREADS``),
        stored NCHW."""
        kpg = kout // group
        kb = cuda.blockIdx.z * kpg
        k0 = cuda.blockIdx.y * TILE_K + cuda.threadIdx.y
        p0 = cuda.blockIdx.x * TILE_P + cuda.threadIdx.x
        for j in range(REG):
            p = p0 + j * THREADS
            if p < npos:
                nn = p // ohw
                base = (nn * kout + kb) * ohw + p - nn * ohw  # y's index at channel kb, position p
                for i in range(REG):
                    k = k0 + i * THREADS
                    if k < kpg:
                        o = base + k * ohw
                        v = acc[i, j]
                        if has_bias:
                            v += b[bo + kb + k]
                        if has_res:  # read before the same thread writes the same position
                            v += r[ro + o]
                        y[yo + o] = act(v, code, alpha, beta)
    return _store


_KERNELS = {np.dtype(t): _make(t) for t in (np.float16, np.float32, np.float64)}


@cuda.jit
def _im2col_k(x, xo, col, co, chw, h, wd, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, per_img,
              total):
    """``col[img, (cc, u, v), (oy, ox)] = x[img, cc, oy*sh - ph + u*dh, ox*sw - pw + v*dw]``
    (0 outside) for consecutive images (``chw`` input and ``per_img`` column elements each):
    per image, the (C*KH*KW, OH*OW) matrix a convolution is the product of W with."""
    i = cuda.grid(1)
    if i >= total:
        return
    img = i // per_img
    j = i - img * per_img
    ohw = oh * ow
    p = j % ohw
    r = j // ohw
    v = r % kw
    u = (r // kw) % kh
    cc = r // (kh * kw)
    oy = p // ow
    iy = oy * sh - ph + u * dh
    ix = (p - oy * ow) * sw - pw + v * dw
    if 0 <= iy < h and 0 <= ix < wd:
        col[co + i] = x[xo + img * chw + (cc * h + iy) * wd + ix]
    else:
        col[co + i] = 0


def pointwise(h, wd, kh, kw, oh, ow, sh, sw, ph, pw) -> bool:
    """A 1x1 convolution of stride 1 without padding: each image's input is already the
    (C, H*W) matrix of the product, no im2col needed."""
    return kh == kw == 1 and sh == sw == 1 and ph == pw == 0 and oh == h and ow == wd


def _products(w, wo, src, so, y, yo, imgs, group, kg, red_g, ohw):
    """``Y[i, g] (kg, OH*OW) = W[g] (kg, red_g) @ S[i, g] (red_g, OH*OW)`` for ``imgs``
    consecutive images i and the groups g, S the images' (C*KH*KW, OH*OW) column matrices in
    ``src`` (a group's rows consecutive): strided-batched cuBLAS calls batched over the images
    (a group's weight shared, batch stride 0) or, where the groups outnumber them, over the
    groups, one call per item of the other."""
    per_src, per_y = group * red_g * ohw, group * kg * ohw
    if imgs >= group:
        for g in range(group):
            call(blas.gemm_strided, *blas.strided(
                w, wo + g * kg * red_g, 0, red_g, 1, src, so + g * red_g * ohw, per_src, ohw, 1,
                y, yo + g * kg * ohw, imgs, kg, ohw, red_g, syb=per_y))
    else:
        for i in range(imgs):
            call(blas.gemm_strided, *blas.strided(
                w, wo, kg * red_g, red_g, 1, src, so + i * per_src, red_g * ohw, ohw, 1,
                y, yo + i * per_y, group, kg, ohw, red_g))


def _cublas(x, xo, w, wo, b, bo, r, ro, y, yo, n, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph,
            pw, dh, dw, group, has_bias, has_res, code, alpha, beta, col, colo, col_imgs):
    """A convolution as products through cuBLAS (:func:`_products`) of the weight with the
    images' im2col columns, made by ``_im2col_k`` in ``col`` (the caller's scratch,
    ``col_imgs`` images at a time) unless the convolution is pointwise (then each image is its
    own columns); then one epilogue kernel over every image (bias per row, residual, act)."""
    red, ohw, chw = c * kh * kw, oh * ow, c * h * wd
    kg, red_g = kout // group, red // group
    if pointwise(h, wd, kh, kw, oh, ow, sh, sw, ph, pw):
        _products(w, wo, x, xo, y, yo, n, group, kg, red_g, ohw)
    else:
        for img0 in range(0, n, col_imgs):
            g = min(col_imgs, n - img0)
            launch(_im2col_k, grid1(g * red * ohw, BLOCK), BLOCK, x, xo + img0 * chw, col,
                   colo, chw, h, wd, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, red * ohw,
                   g * red * ohw)
            _products(w, wo, col, colo, y, yo + img0 * kout * ohw, g, group, kg, red_g, ohw)
    epilogue(y, yo, r, ro, kout * ohw, ohw, 1, b, bo, n, kout, ohw, 1.0, 1.0, has_res, has_bias,
             True, code, alpha, beta)


ALGORITHMS = tunables.CONV_ALGORITHMS


def algorithms(x, w, y, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, group, col, *, n=1,
               dh=1, dw=1) -> tuple:
    """The ways this convolution can run here, in :data:`ALGORITHMS`' order: ``cudnn`` where
    cuDNN takes it (``dnn.takes``: the dtype, the sizes, symmetric pads); ``cublas`` where
    cuBLAS serves the dtype, a group has at least ``TILED_MIN_KOUT`` output channels (the
    lowering gives scratch for columns only then) and there is scratch for the columns or the
    convolution is pointwise; ``tiled`` where x, w and y share a float dtype it has a kernel
    for and the groups fit the grid; ``direct`` always."""
    same = x.dtype == w.dtype == y.dtype
    out = []
    if same and dnn.takes(y.dtype, n, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw,
                          group):
        out.append("cudnn")
    if (same and blas.library() is not None and y.dtype in blas.DTYPES
            and kout // group >= TILED_MIN_KOUT
            and (col is not None or pointwise(h, wd, kh, kw, oh, ow, sh, sw, ph, pw))):
        out.append("cublas")
    if same and y.dtype in _KERNELS and group <= MAX_GRID_Z:
        out.append("tiled")
    out.append("direct")
    return tuple(out)


def default_algorithm(applicable: tuple, c, kout, kh, kw, group) -> str:
    """The rule before calibration: where :func:`use_tiled` says so, cuDNN, cuBLAS or the
    tiled kernel, the first that serves; else the direct kernel."""
    if use_tiled(c, kout, kh, kw, group):
        for name in ("cudnn", "cublas", "tiled"):
            if name in applicable:
                return name
    return "direct"


def algorithm(can: tuple, dtype, n, c, kout, kh, kw, oh, ow, sh, group) -> str:
    """The choice ``cuda.conv`` among the applicable algorithms ``can`` (:func:`algorithms`):
    calibrated (float32, the dtype it is measured in), else the default rule."""
    default = default_algorithm(can, c, kout, kh, kw, group)
    if dtype != np.float32:
        return default
    bucket = tunables.conv_bucket(n, c, kout, kh, kw, oh, ow, sh, group)
    return tunables.decide("cuda.conv", bucket, can, default)


def conv2d_bias_add_act(x, xo, w, wo, b, bo, r, ro, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                        sh, sw, ph, pw, dh, dw, group, has_bias, has_res, code, alpha, beta,
                        col=None, colo=0, col_imgs=1, algo=None):
    """``y = act(conv(x, w) + b + r)``; ``r`` (used when ``has_res``) has ``y``'s shape.

    ``algo`` (one of :data:`ALGORITHMS`; calibration names it) or :func:`algorithm`'s pick:
    cuDNN, products through cuBLAS (``col``: scratch for the im2col columns of ``col_imgs``
    images, C*KH*KW*OH*OW elements each, unused by a pointwise convolution), the tiled kernel,
    or the direct one."""
    total = n * kout * oh * ow
    if not total:
        return

    def dnn_conv():  # cuDNN's descriptors and algorithm (CudnnError: none for this geometry)
        return dnn.conv(y.dtype, n, c, h, wd, kout, kh, kw, ph, pw, sh, sw, dh, dw, group, oh,
                        ow)

    if algo is None:
        can = algorithms(x, w, y, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, group, col,
                         n=n, dh=dh, dw=dw)
        without_dnn = tuple(a for a in can if a != "cudnn")
        if "cudnn" in can and not _dnn_aligned(x, xo, w, wo, y, yo):
            can = without_dnn
        algo = algorithm(can, y.dtype, n, c, kout, kh, kw, oh, ow, sh, group)
        if algo == "cudnn":
            try:
                op = dnn_conv()
            except dnn.CudnnError:  # no algorithm here: the rule's pick among the others
                algo = algorithm(without_dnn, y.dtype, n, c, kout, kh, kw, oh, ow, sh, group)
    elif algo == "cudnn":
        op = dnn_conv()
    dt = compute_type(y.dtype)
    if algo == "cudnn":
        call(dnn.forward, op, blas.address(x, xo), blas.address(w, wo), blas.address(y, yo),
             dnn.workspace(cuda, op.workspace))
        epilogue(y, yo, r, ro, kout * oh * ow, oh * ow, 1, b, bo, n, kout, oh * ow, 1.0, 1.0,
                 has_res, has_bias, True, code, alpha, beta)
    elif algo == "direct":
        launch(_DIRECT[np.dtype(dt)], grid1(total, BLOCK), BLOCK, x, xo, w, wo, b, bo, r, ro, y,
               yo, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group, has_bias,
               has_res, code, dt(alpha), dt(beta), total)
    elif algo == "cublas":
        _cublas(x, xo, w, wo, b, bo, r, ro, y, yo, n, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph,
                pw, dh, dw, group, has_bias, has_res, code, alpha, beta, col, colo,
                max(1, col_imgs))
    elif algo == "tiled":
        npos = n * oh * ow
        grid = ((npos + TILE_P - 1) // TILE_P, (kout // group + TILE_K - 1) // TILE_K, group)
        launch(_KERNELS[y.dtype], grid, (THREADS, THREADS), x, xo, w, wo, b, bo, r, ro, y, yo, c,
               h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, group, has_bias, has_res,
               code, dt(alpha), dt(beta), npos)
    else:
        raise ValueError(f"unknown convolution algorithm {algo!r}; known: {ALGORITHMS}")


def _dnn_aligned(x, xo, w, wo, y, yo) -> bool:
    """Whether the operands' addresses are 16-byte aligned, as cuDNN's vectorized kernels
    read them (a view into a concatenation or a split may start anywhere)."""
    return all(blas.address(a, o) % dnn.ALIGN == 0 for a, o in ((x, xo), (w, wo), (y, yo)))


def conv2d_bias_act(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                    sh, sw, ph, pw, dh, dw, group, has_bias, code, alpha, beta=0.0, col=None,
                    colo=0, col_imgs=1):
    conv2d_bias_add_act(x, xo, w, wo, b, bo, y, yo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                        sh, sw, ph, pw, dh, dw, group, has_bias, False, code, alpha, beta, col,
                        colo, col_imgs)


def conv2d(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
           sh, sw, ph, pw, dh, dw, group, has_bias, col=None, colo=0, col_imgs=1):
    conv2d_bias_act(x, xo, w, wo, b, bo, y, yo, n, c, h, wd, kout, kh, kw, oh, ow,
                    sh, sw, ph, pw, dh, dw, group, has_bias, 0, 0.0, 0.0, col, colo, col_imgs)

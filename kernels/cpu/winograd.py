"""3x3 convolution by Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray, 2015).

For a 3x3 kernel at stride 1, dilation 1, every 2x2 block of outputs (a *tile*) is
computed from its 4x4 input patch ``d`` as ``A^T [(G g G^T) * (B^T d B)] A``: 16 products per
tile and channel pair instead of 36. Summed over the input channels, the 16 elementwise
products become 16 independent gemms ``U_k (M, C) @ V_k (C, tiles)``, which BLAS runs; the
transforms around them are a few additions per element. That is 2.25x fewer multiply-adds than
im2col + gemm. The transform coefficients are 0, +-1 and +-1/2, so the result stays within a
few ulps of the direct sum (see tests/kernels/test_winograd.py). On big planes the kernel uses
F(4x4, 3x3) instead (6x6 patches, 36 gemms, 4x fewer multiply-adds than im2col, coefficients
up to 8 and 1/24: ~1e-5 relative error in float32); ``winograd_tile`` chooses.

Layouts (C-contiguous, float32 or float64, one dtype per call):
    x   (N, C, H, W)
    u   (16 or 36, M, C / groups)  ``winograd_weights(w, m)`` of the ONNX weight w (M, C /
                          groups, 3, 3), m = 2 or 4, computed once when the model is compiled;
                          the groups are C / u.shape[2] (each product gemm runs per group)
    b   (M,)              used only when has_bias
    res (N, M, OH, OW)    residual added before the activation, must not alias ``out``
    out (N, M, OH, OW)    OH/OW from the ONNX formulas for begin pads ph/pw (end pads implied)
    scr 1-D scratch, >= ``winograd_scratch_elems(...)`` elements

Work is split by blocks of tile rows of one image. A block's input patches are transformed
into ``V`` (a*a, C, tb) (a = 4 or 6, the patch size), the a*a gemms run into ``P`` (a*a, mb,
tb), and ``P`` is transformed back into the output rows, adding bias, residual and activation
while the rows are in cache. Where the blocks divide evenly over the threads, each block is a
task (``_wino_par``) with V and P in its worker's scratch. With fewer blocks than threads
(deep layers at batch 1: one block, 14x14 to 56x56 planes) or an uneven few, the threads
share each block (``_wino_phased``): the transform
by chunks of input channels into one V, then, once every chunk is done, the products by
chunks of output channels -- splitting only the output channels would make every thread
transform the whole block.
"""
import numpy as np
from numba import njit, prange

from .conv import _epi_args, _epilogue_row
from .gemm import (_ceil_div, count_done, eptr, num_threads, pull_tasks, scratch_workers,
                   xgemm)
from .sync import claim_below, wait_count

_FM = {'reassoc', 'contract', 'arcp'}

# Scratch elements per task for V and P together (2 MB of float32: the gemms read V and
# write P in L2; 4 MB for F(4x4, 3x3), whose 36 gemms are otherwise too narrow: 64x56x56 in
# one block of 210 columns instead of two of 105), and the fewest tiles per block unless the
# plane has fewer (gemm N).
_BLOCK_ELEMS = 1 << 19
_BLOCK_ELEMS_F4 = 1 << 20
_MIN_TILES = 96
# Chunks per thread of each phase when the threads share a block (``_wino_phased``): of its
# input channels (transform) and of its output channels (products).
_PHASE_CHUNKS = 2


# Where F(2x2, 3x3) beats im2col + gemm: from 8 input channels (fewer make 16 gemms with a
# tiny K) and 25 tiles per plane (fewer make the gemms too narrow).
_MIN_CHANNELS = 8
_MIN_TILES_PER_PLANE = 25
# F(4x4, 3x3): 36 gemms over a quarter of the tiles, 2.25 multiply-adds per output and channel
# pair instead of 4 (rounding ~10x F(2x2, 3x3)'s: ~1e-5 relative in float32). Its transforms
# cost about as much as its gemms, so it wins less than that, and only from 28x28 planes and
# 32 channels up (on 14x14 planes and at 16 channels F(2x2, 3x3) stays faster).
_MIN_TILES_F4 = 49
_MIN_CHANNELS_F4 = 32


def winograd_wins(C, M, OH, OW) -> bool:
    """Whether ``conv3x3_winograd`` is the faster kernel for this convolution (plain Python)."""
    th, tw = _tiles_py(OH, OW, 2)
    return C >= _MIN_CHANNELS and M >= 1 and th * tw >= _MIN_TILES_PER_PLANE


# Grouped 3x3 stride-1 convolutions: Winograd with its gemms per group beats conv_group /
# im2col from _GROUPED_MIN_CHANNELS channels per group, and from _GROUPED_MIN_CHANNELS_BIG_PLANE
# on planes of at least _GROUPED_BIG_PLANE (16 per group loses on small planes; 8 per group
# stays with conv_group).
_GROUPED_MIN_CHANNELS = 32
_GROUPED_MIN_CHANNELS_BIG_PLANE = 16
_GROUPED_BIG_PLANE = 28 * 28


def winograd_grouped_wins(CG, MG, OH, OW) -> bool:
    """Whether a grouped 3x3 stride-1 convolution with CG input and MG output channels per
    group runs as Winograd (its gemms per group) rather than ``conv_group`` / im2col (plain
    Python; ``winograd_wins`` must hold too)."""
    return CG >= _GROUPED_MIN_CHANNELS or (CG >= _GROUPED_MIN_CHANNELS_BIG_PLANE
                                           and OH * OW >= _GROUPED_BIG_PLANE)


def winograd_tile(C, M, OH, OW) -> int:
    """Output tile size for ``winograd_weights``: 4 (F(4x4, 3x3)) from _MIN_CHANNELS_F4 input
    channels on planes of at least _MIN_TILES_F4 4x4 tiles, else 2 (plain Python)."""
    th, tw = _tiles_py(OH, OW, 4)
    return 4 if C >= _MIN_CHANNELS_F4 and th * tw >= _MIN_TILES_F4 else 2


_G = {2: np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]]),
      4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                   [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])}
# F(4x4, 3x3) input and output transforms (interpolation points 0, +-1, +-2; Lavin & Gray)
_BT4 = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                 [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64)
_AT4 = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                 [0, 1, -1, 8, -8, 1]], np.float64)


def winograd_weights(w: np.ndarray, m: int = 2) -> np.ndarray:
    """U (a*a, M, C) = G g G^T for every 3x3 filter g of w (M, C, 3, 3), a = m + 2, computed
    in float64; ``m`` (2 or 4) is the output tile the kernel then uses."""
    g = np.asarray(w, np.float64)
    G = _G[m]
    u = np.einsum('ai,mcij,bj->abmc', G, g, G)
    a = m + 2
    return np.ascontiguousarray(u.reshape(a * a, w.shape[0], w.shape[1]).astype(w.dtype))


def _tiles_py(oh, ow, m):
    return (oh + m - 1) // m, (ow + m - 1) // m


def _block_rows_py(c, mb, th, tw, nk):
    """Tile rows per block: V and P within _BLOCK_ELEMS, at least _MIN_TILES tiles."""
    per_row = nk * (c + mb) * (tw + 1)
    rows = max((_BLOCK_ELEMS if nk == 16 else _BLOCK_ELEMS_F4) // per_row,
               -(-_MIN_TILES // (tw + 1)))
    return max(1, min(th, rows))


_block_rows = njit(cache=True)(_block_rows_py)


def _worker_elems(c, mb, nr, tw, m):
    return (m + 2) ** 2 * (c + mb) * nr * (tw + 1) + _tmp_elems_py(nr, tw, m)


def winograd_scratch_elems(C, M, OH, OW, threads=None, m=2):
    """Scratch elements ``conv3x3_winograd`` needs (plain Python, >= 1) with output tile ``m``:
    one task's V, P and row buffers per worker, ``threads`` workers at most (default
    NUMBA_NUM_THREADS)."""
    nt = scratch_workers(threads)
    th, tw = _tiles_py(OH, OW, m)
    nr = _block_rows_py(C, M, th, tw, (m + 2) ** 2)
    return max(1, _worker_elems(C, M, nr, tw, m) * nt)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _input_transform(x, xoff, c_n, c0, c1, h, wd, r_base, pw, nr, tw, v, tmp):
    """V[k, c, i*(tw+1) + t] (``v`` flat, rows of tb = nr*(tw+1)) = (B^T d B)[k] for the 4x4
    patch d at input rows r_base + 2i .. +3, columns 2t - pw .. +3 of channel c (zero outside
    the plane), for the channels c0 <= c < c1 of the c_n at element ``xoff`` of x; t = tw is a
    spare column (finite, never read back).

    Per channel, the padded rows are split by row and column parity into four planes (nr+1,
    tw+1): tile row i reads rows i and i + 1 of the even and odd planes, so with the spare
    column both passes are single flat unit-stride loops over the whole block that vectorize:
    the rows' combinations B^T d, then the columns'. Raw pointers throughout (no views)."""
    q1 = tw + 1
    pc = 2 * q1
    npl = (nr + 1) * q1                  # one parity plane
    tb = nr * q1
    ct = c_n * tb
    zero = v.dtype.type(0)
    xr = eptr(tmp, 0)                    # one padded row, pc
    pl = pc                              # 4 parity planes: (row parity * 2 + col parity)
    eb = pc + 4 * npl                    # 8 combination rows, tb + 1 each: kr * 2 + col parity
    hw = h * wd
    c_hi = min(pc, wd + pw)              # padded columns [pw, c_hi) come from the plane
    for c in range(c0, c1):
        for r in range(2 * nr + 2):
            ih = r_base + r
            de = eptr(tmp, pl + (2 * (r % 2)) * npl + (r // 2) * q1)
            do = eptr(tmp, pl + (2 * (r % 2) + 1) * npl + (r // 2) * q1)
            if ih < 0 or ih >= h:
                for q in range(q1):
                    de[q] = zero
                for q in range(q1):
                    do[q] = zero
                continue
            src = eptr(x, xoff + c * hw + ih * wd - pw)
            for j in range(min(pw, pc)):
                xr[j] = zero
            for j in range(pw, c_hi):
                xr[j] = src[j]
            for j in range(max(pw, c_hi), pc):
                xr[j] = zero
            for q in range(q1):
                de[q] = xr[2 * q]
                do[q] = xr[2 * q + 1]
        for cp in range(2):              # B^T d: (d0 - d2, d1 + d2, d2 - d1, d1 - d3)
            ev = eptr(tmp, pl + cp * npl)          # rows 2i (at f), 2i + 2 (at f + q1)
            od = eptr(tmp, pl + (2 + cp) * npl)    # rows 2i + 1, 2i + 3
            e0 = eptr(tmp, eb + cp * (tb + 1))
            e1 = eptr(tmp, eb + (2 + cp) * (tb + 1))
            e2 = eptr(tmp, eb + (4 + cp) * (tb + 1))
            e3 = eptr(tmp, eb + (6 + cp) * (tb + 1))
            for f in range(tb):
                e0[f] = ev[f] - ev[f + q1]
            for f in range(tb):
                e1[f] = od[f] + ev[f + q1]
            for f in range(tb):
                e2[f] = ev[f + q1] - od[f]
            for f in range(tb):
                e3[f] = od[f] - od[f + q1]
            e0[tb] = zero
            e1[tb] = zero
            e2[tb] = zero
            e3[tb] = zero
        for kr in range(4):              # (.) B: columns 2t .. 2t + 3 = e[t], o[t], e[t+1], o[t+1]
            e = eptr(tmp, eb + 2 * kr * (tb + 1))
            o = eptr(tmp, eb + (2 * kr + 1) * (tb + 1))
            v0 = eptr(v, 4 * kr * ct + c * tb)
            v1 = eptr(v, (4 * kr + 1) * ct + c * tb)
            v2 = eptr(v, (4 * kr + 2) * ct + c * tb)
            v3 = eptr(v, (4 * kr + 3) * ct + c * tb)
            for f in range(tb):
                v0[f] = e[f] - e[f + 1]
            for f in range(tb):
                v1[f] = o[f] + e[f + 1]
            for f in range(tb):
                v2[f] = e[f + 1] - o[f]
            for f in range(tb):
                v3[f] = o[f] - o[f + 1]


def _tmp_elems_py(nr, tw, m):
    """Per-worker elements of the transforms' row buffers (F(2x2): the output transform works
    in place in P; F(4x4): one output channel's row combinations)."""
    q1 = tw + 1
    if m == 2:
        return 2 * q1 + 4 * (nr + 1) * q1 + 8 * (nr * q1 + 1)
    return 4 * q1 + 16 * (nr + 1) * q1 + 24 * (nr * q1 + 1)   # >= the output's 24 * nr * q1


_tmp_elems = njit(cache=True)(_tmp_elems_py)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _output_transform(p, mb, nr, tw, out, ooff, oh_n, ow_n, oh0, b, m0, has_bias):
    """Rows oh0 .. oh0 + 2*nr (clipped to the plane) of output channels m0 .. m0 + mb, at
    element ``ooff`` (channel m0's plane) of ``out``: A^T P A of each tile, + bias. The rows'
    combinations A^T P overwrite P's first two rows of products in one flat pass over the
    task; each output row is then written from four of them."""
    q1 = tw + 1
    tb = nr * q1
    mt = mb * tb
    s = oh_n * ow_n
    tw_full = ow_n // 2
    odd = ow_n - 2 * tw_full
    for kc in range(4):                  # A^T P: (p0 + p1 + p2, p1 - p2 - p3) per column kc
        p0 = eptr(p, kc * mt)
        p1 = eptr(p, (4 + kc) * mt)
        p2 = eptr(p, (8 + kc) * mt)
        p3 = eptr(p, (12 + kc) * mt)
        for f in range(mt):
            p0[f] = p0[f] + p1[f] + p2[f]
        for f in range(mt):
            p1[f] = p1[f] - p2[f] - p3[f]
    for mi in range(mb):
        bv = b[m0 + mi] if has_bias else out.dtype.type(0)
        for i in range(nr):
            oh = oh0 + 2 * i
            j = mi * tb + i * q1
            for rr in range(2):
                if oh + rr >= oh_n:
                    break
                r0 = eptr(p, 4 * rr * mt + j)
                r1 = eptr(p, (4 * rr + 1) * mt + j)
                r2 = eptr(p, (4 * rr + 2) * mt + j)
                r3 = eptr(p, (4 * rr + 3) * mt + j)
                row = eptr(out, ooff + mi * s + (oh + rr) * ow_n)
                for t in range(tw_full):     # (.) A: (c0 + c1 + c2, c1 - c2 - c3)
                    row[2 * t] = r0[t] + r1[t] + r2[t] + bv
                    row[2 * t + 1] = r1[t] - r2[t] - r3[t] + bv
                if odd:
                    t = tw_full
                    row[2 * t] = r0[t] + r1[t] + r2[t] + bv


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _input_transform4(x, xoff, c_n, c0, c1, h, wd, r_base, pw, nr, tw, v, tmp):
    """F(4x4, 3x3): V[k, c, i*(tw+1) + t] = (B^T d B)[k] for the 6x6 patch d at input rows
    r_base + 4i .. +5, columns 4t - pw .. +5 of channel c (t = tw: a spare column).

    As in ``_input_transform``, with the padded rows split by row and column position mod 4
    into 16 planes (nr+1, tw+1): patch row a of tile row i is row i + a // 4 of phase a % 4, so
    each of the 6 row combinations (B^T d) per column phase, then each of the 36 column
    combinations, is one flat loop over the block (6 terms with the coefficients of _BT4)."""
    q1 = tw + 1
    pc = 4 * q1
    npl = (nr + 1) * q1
    tb = nr * q1
    ct = c_n * tb
    dt = v.dtype.type
    zero = dt(0)
    xr = eptr(tmp, 0)
    pl = pc                               # 16 planes: (row phase * 4 + column phase)
    eb = pc + 16 * npl                    # 24 rows of tb + 1: kr * 4 + column phase
    hw = h * wd
    c_hi = min(pc, wd + pw)
    q_lo = min(q1, (pw + 3) // 4)        # 4q >= pw
    q_hi = max(q_lo, min(q1, (c_hi - 3) // 4 if c_hi >= 3 else 0))   # 4q + 3 < c_hi
    for c in range(c0, c1):
        for r in range(4 * nr + 4):
            ih = r_base + r
            base = pl + 4 * (r % 4) * npl + (r // 4) * q1
            if ih < 0 or ih >= h:
                for cp in range(4):
                    d = eptr(tmp, base + cp * npl)
                    for q in range(q1):
                        d[q] = zero
                continue
            src = eptr(x, xoff + c * hw + ih * wd - pw)   # padded column j at src[j]
            d0 = eptr(tmp, base)
            d1 = eptr(tmp, base + npl)
            d2 = eptr(tmp, base + 2 * npl)
            d3 = eptr(tmp, base + 3 * npl)
            for q in range(q_lo, q_hi):    # all four columns 4q .. 4q + 3 inside the plane
                d0[q] = src[4 * q]
                d1[q] = src[4 * q + 1]
                d2[q] = src[4 * q + 2]
                d3[q] = src[4 * q + 3]
            for e in range(q_lo + q1 - q_hi):   # the edges: padding, the spare column
                q = e if e < q_lo else q_hi + e - q_lo
                for k in range(4):
                    j = 4 * q + k
                    xr[k] = src[j] if j >= pw and j < c_hi else zero
                d0[q] = xr[0]
                d1[q] = xr[1]
                d2[q] = xr[2]
                d3[q] = xr[3]
        for cp in range(4):               # B^T d: rows a = 0..5 are phases 0..3, then 0, 1 + q1
            p0 = eptr(tmp, pl + cp * npl)
            p1 = eptr(tmp, pl + (4 + cp) * npl)
            p2 = eptr(tmp, pl + (8 + cp) * npl)
            p3 = eptr(tmp, pl + (12 + cp) * npl)
            p4 = eptr(tmp, pl + cp * npl + q1)
            p5 = eptr(tmp, pl + (4 + cp) * npl + q1)
            for kr in range(6):
                a0, a1, a2 = dt(_BT4[kr, 0]), dt(_BT4[kr, 1]), dt(_BT4[kr, 2])
                a3, a4, a5 = dt(_BT4[kr, 3]), dt(_BT4[kr, 4]), dt(_BT4[kr, 5])
                e = eptr(tmp, eb + (kr * 4 + cp) * (tb + 1))
                for f in range(tb):
                    e[f] = (a0 * p0[f] + a1 * p1[f] + a2 * p2[f] + a3 * p3[f] + a4 * p4[f]
                            + a5 * p5[f])
                e[tb] = zero
        for kr in range(6):               # (.) B: columns b = 0..5 are e0..e3 at t, e0, e1 at t+1
            e0 = eptr(tmp, eb + kr * 4 * (tb + 1))
            e1 = eptr(tmp, eb + (kr * 4 + 1) * (tb + 1))
            e2 = eptr(tmp, eb + (kr * 4 + 2) * (tb + 1))
            e3 = eptr(tmp, eb + (kr * 4 + 3) * (tb + 1))
            e4 = eptr(tmp, eb + kr * 4 * (tb + 1) + 1)
            e5 = eptr(tmp, eb + (kr * 4 + 1) * (tb + 1) + 1)
            for kc in range(6):
                b0, b1, b2 = dt(_BT4[kc, 0]), dt(_BT4[kc, 1]), dt(_BT4[kc, 2])
                b3, b4, b5 = dt(_BT4[kc, 3]), dt(_BT4[kc, 4]), dt(_BT4[kc, 5])
                vo = eptr(v, (kr * 6 + kc) * ct + c * tb)
                for f in range(tb):
                    vo[f] = (b0 * e0[f] + b1 * e1[f] + b2 * e2[f] + b3 * e3[f] + b4 * e4[f]
                             + b5 * e5[f])


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _output_transform4(p, mb, nr, tw, out, ooff, oh_n, ow_n, oh0, b, m0, has_bias, tmp):
    """F(4x4, 3x3): rows oh0 .. oh0 + 4*nr (clipped) of output channels m0 .. m0 + mb: A^T P A
    of each tile, + bias. Per channel, the 24 row combinations A^T P go to ``tmp`` in flat
    loops over the block, then each output row is written from six of them."""
    q1 = tw + 1
    tb = nr * q1
    mt = mb * tb
    s = oh_n * ow_n
    dt = out.dtype.type
    tw_full = ow_n // 4
    rem = ow_n - 4 * tw_full
    for mi in range(mb):
        bv = b[m0 + mi] if has_bias else dt(0)
        j = mi * tb
        for kc in range(6):
            p0 = eptr(p, kc * mt + j)
            p1 = eptr(p, (6 + kc) * mt + j)
            p2 = eptr(p, (12 + kc) * mt + j)
            p3 = eptr(p, (18 + kc) * mt + j)
            p4 = eptr(p, (24 + kc) * mt + j)
            p5 = eptr(p, (30 + kc) * mt + j)
            for o in range(4):
                c0, c1, c2 = dt(_AT4[o, 0]), dt(_AT4[o, 1]), dt(_AT4[o, 2])
                c3, c4, c5 = dt(_AT4[o, 3]), dt(_AT4[o, 4]), dt(_AT4[o, 5])
                sk = eptr(tmp, (o * 6 + kc) * tb)
                for f in range(tb):
                    sk[f] = (c0 * p0[f] + c1 * p1[f] + c2 * p2[f] + c3 * p3[f] + c4 * p4[f]
                             + c5 * p5[f])
        for i in range(nr):
            for o in range(4):
                oh = oh0 + 4 * i + o
                if oh >= oh_n:
                    break
                r0 = eptr(tmp, (o * 6) * tb + i * q1)
                r1 = eptr(tmp, (o * 6 + 1) * tb + i * q1)
                r2 = eptr(tmp, (o * 6 + 2) * tb + i * q1)
                r3 = eptr(tmp, (o * 6 + 3) * tb + i * q1)
                r4 = eptr(tmp, (o * 6 + 4) * tb + i * q1)
                r5 = eptr(tmp, (o * 6 + 5) * tb + i * q1)
                row = eptr(out, ooff + mi * s + oh * ow_n)
                for t in range(tw_full):       # (.) A
                    row[4 * t] = r0[t] + r1[t] + r2[t] + r3[t] + r4[t] + bv
                    row[4 * t + 1] = r1[t] - r2[t] + dt(2) * (r3[t] - r4[t]) + bv
                    row[4 * t + 2] = r1[t] + r2[t] + dt(4) * (r3[t] + r4[t]) + bv
                    row[4 * t + 3] = r1[t] - r2[t] + dt(8) * (r3[t] - r4[t]) + r5[t] + bv
                if rem > 0:
                    t = tw_full
                    row[4 * t] = r0[t] + r1[t] + r2[t] + r3[t] + r4[t] + bv
                    if rem > 1:
                        row[4 * t + 1] = r1[t] - r2[t] + dt(2) * (r3[t] - r4[t]) + bv
                    if rem > 2:
                        row[4 * t + 2] = r1[t] + r2[t] + dt(4) * (r3[t] + r4[t]) + bv


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _wino_transform(x, n, c0, c1, ty0, nrr, tw, m, ph, pw, v, tmp):
    """Input channels c0 .. c1 of image n, tile rows ty0 .. ty0 + nrr, into V (``v``)."""
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    if m == 2:
        _input_transform(x, n * c_n * h * wd, c_n, c0, c1, h, wd, 2 * ty0 - ph, pw, nrr, tw, v,
                         tmp)
    else:
        _input_transform4(x, n * c_n * h * wd, c_n, c0, c1, h, wd, 4 * ty0 - ph, pw, nrr, tw,
                          v, tmp)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _wino_products(n, ty0, nrr, m0, mb, c_n, u, v, p, tmp, b, res, out, has_bias, has_res,
                   act, aa, ab):
    """Output channels m0 .. m0 + mb of tile rows ty0 .. ty0 + nrr of image n from that block's
    V (``c_n`` input channels): the a*a gemms into P, the output transform, then residual and
    activation. Grouped (u (a*a, M, C / groups)): each gemm per group the block meets, over
    that group's input channels."""
    cg = u.shape[2]
    nk = u.shape[0]
    m = 2 if nk == 16 else 4
    m_n = u.shape[1]
    mg = m_n // (c_n // cg)
    oh_n = out.shape[2]
    ow_n = out.shape[3]
    tw = (ow_n + m - 1) // m
    tb = nrr * (tw + 1)
    st = 0
    for k in range(nk):
        for g in range(m0 // mg, (m0 + mb - 1) // mg + 1):
            ga = max(m0, g * mg)
            gb = min(m0 + mb, (g + 1) * mg)
            st |= xgemm(0, 0, gb - ga, tb, cg, 1.0, u, (k * m_n + ga) * cg, cg, v,
                        (k * c_n + g * cg) * tb, tb, 0.0, p, (k * mb + ga - m0) * tb, tb)
    if st != 0:
        raise RuntimeError("BLAS gemm failed")
    s = oh_n * ow_n
    ooff = (n * m_n + m0) * s
    oh0 = m * ty0
    if m == 2:
        _output_transform(p, mb, nrr, tw, out, ooff, oh_n, ow_n, oh0, b, m0, has_bias)
    else:
        _output_transform4(p, mb, nrr, tw, out, ooff, oh_n, ow_n, oh0, b, m0, has_bias, tmp)
    if has_res or act != 0:
        of = out.reshape(-1)
        r0 = oh0 * ow_n
        r1 = min(oh_n, oh0 + m * nrr) * ow_n
        rf = res.reshape(-1)
        z = out.dtype.type(0)
        nn = r1 - r0
        for mi in range(mb):
            o = ooff + mi * s
            if act <= 1:  # none or relu: raw pointers, no per-channel array views
                d = eptr(of, o + r0)
                rp = eptr(rf, o + r0) if has_res else d
                for j in range(nn):
                    w = d[j] + (rp[j] if has_res else z)
                    d[j] = (z if w < z else w) if act == 1 else w
                continue
            _epilogue_row(of[o + r0:o + r1], z, False,
                          rf[o + r0:o + r1] if has_res else of[o + r0:o + r1], has_res,
                          act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _wino_task(t, nblk, nr, x, u, b, res, out, scr, ph, pw, has_bias, has_res, act, aa, ab):
    """Task t = n * nblk + blk: tile rows [blk*nr, ...) of image n, all output channels."""
    c_n = x.shape[1]
    nk = u.shape[0]
    m = 2 if nk == 16 else 4
    m_n = u.shape[1]
    th = (out.shape[2] + m - 1) // m
    tw = (out.shape[3] + m - 1) // m
    n = t // nblk
    ty0 = (t - n * nblk) * nr
    nrr = min(nr, th - ty0)
    if nrr <= 0:
        return
    tb = nrr * (tw + 1)
    vcap = nk * c_n * nr * (tw + 1)
    v = scr[:nk * c_n * tb]
    p = scr[vcap:vcap + nk * m_n * tb]
    tmp = scr[vcap + nk * m_n * nr * (tw + 1):]
    _wino_transform(x, n, np.int64(0), c_n, ty0, nrr, tw, m, ph, pw, v, tmp)
    _wino_products(n, ty0, nrr, np.int64(0), m_n, c_n, u, v, p, tmp, b, res, out, has_bias,
                   has_res, act, aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _wino_par(nw, ntask, nblk, nr, cap, x, u, b, res, out, scr, ph, pw, has_bias, has_res, act,
              aa, ab):
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        pull_tasks(counter, ntask, _wino_task, (nblk, nr, x, u, b, res, out,
                                                scr[wk * cap:(wk + 1) * cap], ph, pw, has_bias,
                                                has_res, act, aa, ab))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _phased_worker(nblk, nr, mbs, ccs, x, u, b, res, out, v, scw, ctr, ph, pw, has_bias,
                   has_res, act, aa, ab):
    """One worker of :func:`_wino_phased`. Per block s (image, tile rows) two phases: claim
    chunks of ``ccs`` input channels of the block's transform into the shared V (``ctr[0, s]``,
    done counted in ``ctr[1, s]``), wait for all of them, then claim output channel blocks of
    ``mbs`` (``ctr[2, s]``, done in ``ctr[3, s]``). Before block s + 1 overwrites V, every
    product of block s must be done. A worker waits only for chunks a running worker claimed,
    so one worker alone does everything: nothing can deadlock."""
    n_n, c_n = x.shape[0], x.shape[1]
    nk = u.shape[0]
    m = 2 if nk == 16 else 4
    m_n = u.shape[1]
    th = (out.shape[2] + m - 1) // m
    tw = (out.shape[3] + m - 1) // m
    ncc = _ceil_div(c_n, ccs)
    nmb = _ceil_div(m_n, mbs)
    for s in range(n_n * nblk):
        n = s // nblk
        ty0 = (s - n * nblk) * nr
        nrr = min(nr, th - ty0)
        tb = nrr * (tw + 1)
        if s > 0:
            wait_count(ctr[3], s - 1, nmb)
        j = claim_below(ctr[0], s, ncc)
        while j >= 0:
            _wino_transform(x, n, j * ccs, min(c_n, (j + 1) * ccs), ty0, nrr, tw, m, ph, pw, v,
                            scw)
            count_done(ctr[1], s)
            j = claim_below(ctr[0], s, ncc)
        wait_count(ctr[1], s, ncc)
        j = claim_below(ctr[2], s, nmb)
        while j >= 0:
            m0 = j * mbs
            mb = min(mbs, m_n - m0)
            _wino_products(n, ty0, nrr, m0, mb, c_n, u, v, scw[:nk * mb * tb],
                           scw[nk * mbs * tb:], b, res, out, has_bias, has_res, act, aa, ab)
            count_done(ctr[3], s)
            j = claim_below(ctr[2], s, nmb)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _wino_phased(nw, nblk, nr, mbs, ccs, vcap, wcap, x, u, b, res, out, scr, ctr, ph, pw,
                 has_bias, has_res, act, aa, ab):
    """Few blocks for many threads (a deep layer at batch 1): the workers share each block's
    transform and its products (:func:`_phased_worker`) instead of transforming one block
    twice. ``scr``: V of one block (``vcap`` elements), then ``wcap`` elements per worker;
    ``ctr`` (4, blocks) zeros."""
    v = scr[:vcap]
    for wk in prange(nw):
        _phased_worker(nblk, nr, mbs, ccs, x, u, b, res, out, v,
                       scr[vcap + wk * wcap:vcap + (wk + 1) * wcap], ctr, ph, pw, has_bias,
                       has_res, act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _winograd_core(x, u, b, res, out, scr, ph, pw, has_bias, has_res, act, aa, ab):
    n_n, c_n, h, wd = x.shape
    m_n = u.shape[1]
    oh_n = out.shape[2]
    ow_n = out.shape[3]
    if n_n == 0 or m_n == 0 or oh_n == 0 or ow_n == 0:
        return
    ph, pw = np.int64(ph), np.int64(pw)
    has_bias, has_res, act, aa, ab = _epi_args(has_bias, has_res, act, aa, ab)
    if c_n == 0:
        of = out.reshape(-1)
        for j in range(of.shape[0]):
            of[j] = 0
        for n in range(n_n):
            for m in range(m_n):
                row = out[n, m].reshape(-1)
                _epilogue_row(row, b[m] if has_bias else out.dtype.type(0), has_bias,
                              res[n, m].reshape(-1) if has_res else row, has_res, act, aa, ab)
        return
    nk = u.shape[0]
    if nk != 16 and nk != 36:
        raise ValueError("conv3x3_winograd: u must have 16 or 36 rows (winograd_weights)")
    cg = u.shape[2]
    if cg == 0 or c_n % cg != 0 or m_n % (c_n // cg) != 0 or out.shape[1] != m_n:
        raise ValueError("conv3x3_winograd: u (a*a, M, C / groups) does not match x and out")
    m = 2 if nk == 16 else 4
    th = (oh_n + m - 1) // m
    tw = (ow_n + m - 1) // m
    nth = num_threads()
    nr = _block_rows(c_n, m_n, th, tw, nk)
    nblk = _ceil_div(th, nr)
    q1 = tw + 1
    nb = n_n * nblk
    if (nth > 1 and 2 * nk * n_n * m_n * c_n * th * tw >= (1 << 21)
            and (nb < nth or (nb < 2 * nth and nb % nth != 0))):
        # Fewer blocks than threads, or too few to divide evenly (3 on 2 threads): whole
        # blocks as tasks would leave threads idle; share each block instead. (Blocks that
        # divide evenly stay whole: that is cheaper than sharing them.)
        nw = nth
        ccs = _ceil_div(c_n, _PHASE_CHUNKS * nw)
        mbs = _ceil_div(m_n, _PHASE_CHUNKS * nw)
        vcap = nk * c_n * nr * q1
        wcap = nk * mbs * nr * q1 + _tmp_elems(nr, tw, m)
        if scr.shape[0] >= vcap + nw * wcap:
            ctr = np.zeros((4, n_n * nblk), np.int64)
            _wino_phased(nw, nblk, nr, mbs, ccs, vcap, wcap, x, u, b, res, out, scr, ctr, ph,
                         pw, has_bias, has_res, act, aa, ab)
            return
    nw = nth if nth > 1 and 2 * nk * n_n * m_n * c_n * th * tw >= (1 << 21) else 1
    cap = nk * (c_n + m_n) * nr * q1 + _tmp_elems(nr, tw, m)
    ntask = nb
    nw = max(1, min(nw, ntask, scr.shape[0] // cap))
    if scr.shape[0] < cap:
        raise ValueError("conv3x3_winograd: scratch smaller than one task")
    if nw > 1:
        _wino_par(nw, ntask, nblk, nr, cap, x, u, b, res, out, scr, ph, pw, has_bias, has_res,
                  act, aa, ab)
    else:
        scw = scr[:cap]
        for t in range(ntask):
            _wino_task(t, nblk, nr, x, u, b, res, out, scw, ph, pw, has_bias, has_res, act, aa,
                       ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def conv3x3_winograd(x, u, b, res, out, scr, ph, pw, has_bias, has_res, act, alpha_act,
                     beta_act):
    """out = act(conv3x3(x, w) + b [+ res]) with u = winograd_weights(w, m), m = 2 or 4 (the
    output tile, told by u's 16 or 36 rows); see the module docstring. ``res`` is read only
    when has_res (pass ``out`` otherwise)."""
    _winograd_core(x, u, b, res, out, scr, np.int64(ph), np.int64(pw), bool(has_bias),
                   bool(has_res), np.int64(act), np.float64(alpha_act), np.float64(beta_act))

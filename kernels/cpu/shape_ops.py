"""CPU kernels: Pad (constant, reflect, edge, wrap), Tile, DepthToSpace, SpaceToDepth, Trilu, EyeLike, Range, ConstantOfShape, CenterCropPad, ReverseSequence. Imports nothing from jitort."""
import numpy as np
from numba import njit, prange

from .ptr import eptr


# --- Pad ---------------------------------------------------------------------------------------
# The lowering generates one loop nest per canonical rank (jitort/codegen/lowerings/shape_ops.py)
# and calls these two helpers for the index mapping and the rows of the last axis.
# Modes: 0 constant, 1 reflect, 2 edge, 3 wrap.

@njit(cache=True, error_model='numpy', inline='always')
def pad_src(i, n, mode):
    """Input index of the (possibly out-of-range) index ``i`` along an axis of ``n`` > 0
    elements: reflect (period 2n - 2, the edge not repeated), edge (clamped) or wrap. Pads
    shorter than the axis take no integer division (~40 cycles each)."""
    if mode == 2:
        return 0 if i < 0 else (n - 1 if i >= n else i)
    if mode == 1:
        if n == 1:
            return 0
        if i < 0:
            i = -i
        if i >= n:
            i = 2 * n - 2 - i
            if i < 0:  # pads longer than the axis: the reflection is periodic
                p = 2 * n - 2
                i = (2 * n - 2 - i) % p
                i = p - i if i >= n else i
        return i
    if i < 0:
        i += n
        if i < 0:
            i = i % n
    elif i >= n:
        i -= n
        if i >= n:
            i = i % n
    return i


@njit(cache=True, error_model='numpy', inline='always')
def pad_row(yr, xr, c, b, nl, yl, inner, val, mode):
    """One row of a Pad: ``yr`` holds ``yl`` blocks of ``inner`` elements, ``xr`` the input
    row, of which blocks c .. c + nl - 1 are left after cropping. Output block o takes that
    part's block o - b (b >= 0; the interior is one contiguous run), border blocks the constant
    ``val`` (mode 0) or the block ``pad_src`` names. Both rows C-contiguous; unsigned indices
    spare the interior copy Numba's negative-index check, which keeps it from vectorizing.
    Inlined into the generated loop nests: a call per row would cost more than the pad."""
    lo = min(b, yl)
    hi = max(min(yl, b + nl), lo)
    d0 = np.uint64(lo * inner)
    s0 = np.uint64((lo - b + c) * inner)
    for t in range(np.uint64((hi - lo) * inner)):
        yr[d0 + t] = xr[s0 + t]
    if mode == 0:
        for t in range(np.uint64(lo * inner)):
            yr[t] = val
        for t in range(np.uint64(hi * inner), np.uint64(yl * inner)):
            yr[t] = val
        return
    if inner == 1:
        for o in range(lo):
            yr[o] = xr[pad_src(o - b, nl, mode) + c]
        for o in range(hi, yl):
            yr[o] = xr[pad_src(o - b, nl, mode) + c]
        return
    for o in range(lo):
        d = np.uint64(o * inner)
        s = np.uint64((pad_src(o - b, nl, mode) + c) * inner)
        for t in range(np.uint64(inner)):
            yr[d + t] = xr[s + t]
    for o in range(hi, yl):
        d = np.uint64(o * inner)
        s = np.uint64((pad_src(o - b, nl, mode) + c) * inner)
        for t in range(np.uint64(inner)):
            yr[d + t] = xr[s + t]


# --- Trilu, EyeLike, Range, ConstantOfShape, ReverseSequence -------------------------------------

@njit(cache=True, error_model='numpy')
def trilu(x, y, k, upper):
    """y[b, i, j] = x[b, i, j] where j - i >= k (upper) or j - i <= k (lower), else 0.
    x, y (B, N, M) C-contiguous; each row is a kept run and a zeroed run."""
    nb, n, m = x.shape
    zero = y.dtype.type(0)
    for b in range(nb):
        for i in range(n):
            xr = x[b, i]
            yr = y[b, i]
            if upper:
                s = min(max(i + k, 0), m)  # keep j >= i + k
                for j in range(np.uint64(s)):
                    yr[j] = zero
                for j in range(np.uint64(s), np.uint64(m)):
                    yr[j] = xr[j]
            else:
                e = min(max(i + k + 1, 0), m)  # keep j <= i + k
                for j in range(np.uint64(e)):
                    yr[j] = xr[j]
                for j in range(np.uint64(e), np.uint64(m)):
                    yr[j] = zero


@njit(cache=True, error_model='numpy', parallel=True)
def trilu_par(x, y, k, upper):
    """:func:`trilu` with the (matrix, row) pairs in a prange, for big inputs."""
    nb, n, m = x.shape
    zero = y.dtype.type(0)
    for t in prange(nb * n):
        b = t // n
        i = t - b * n
        xr = x[b, i]
        yr = y[b, i]
        if upper:
            s = min(max(i + k, 0), m)
            for j in range(np.uint64(s)):
                yr[j] = zero
            for j in range(np.uint64(s), np.uint64(m)):
                yr[j] = xr[j]
        else:
            e = min(max(i + k + 1, 0), m)
            for j in range(np.uint64(e)):
                yr[j] = xr[j]
            for j in range(np.uint64(e), np.uint64(m)):
                yr[j] = zero


@njit(cache=True, error_model='numpy')
def eye(y, k):
    """y (N, M): ones on the k-th diagonal, zeros elsewhere."""
    n, m = y.shape
    for i in range(n):
        yr = y[i]
        for j in range(np.uint64(m)):
            yr[j] = 0
        j = i + k
        if 0 <= j < m:
            yr[j] = 1


@njit(cache=True, error_model='numpy')
def arange(y, start, delta):
    """y[i]: start, then delta added once per element (onnxruntime's Range accumulates, so
    float results match it bit for bit)."""
    v = start
    for i in range(y.shape[0]):
        y[i] = v
        v += delta


@njit(cache=True, error_model='numpy')
def fill(y, v):
    """y[:] = v on a flat C-contiguous view."""
    for i in range(np.uint64(y.shape[0])):
        y[i] = v


@njit(cache=True, error_model='numpy')
def reverse_sequence(x, lens, y, time_major):
    """ReverseSequence on (T, B, I) (time_major) or (B, T, I) views: the first lens[b] steps of
    sequence b reversed, the rest copied. Lengths outside [0, T] raise."""
    if time_major:
        nt, nb, inner = x.shape
    else:
        nb, nt, inner = x.shape
    for b in range(nb):
        if lens[b] < 0 or lens[b] > nt:
            raise ValueError("ReverseSequence: sequence_lens out of range")
    for b in range(nb):
        n = lens[b]
        for t in range(nt):
            s = n - 1 - t if t < n else t
            if time_major:
                yr = y[t, b]
                xr = x[s, b]
            else:
                yr = y[b, t]
                xr = x[b, s]
            for i in range(np.uint64(inner)):
                yr[i] = xr[i]


# --- DepthToSpace / SpaceToDepth: 6-D transposes -------------------------------------------------
# y (N, C, H, b, W, b) from x (N, b, b, C, H, W) (DCR) or (N, C, b, b, H, W) (CRD); SpaceToDepth
# is the inverse of DCR. The innermost loop runs along W on the side that is contiguous there.

@njit(cache=True, error_model='numpy')
def _check_c(x, y):
    if not (x.flags.c_contiguous and y.flags.c_contiguous):
        raise ValueError("DepthToSpace / SpaceToDepth: views must be C-contiguous")


@njit(cache=True, error_model='numpy')
def _space_plane(il, bl, n, c, crd, to_blocks):
    """(image, channel) plane (n, c) of a 6-D transpose between ``il`` (N, C, H, b, W, b),
    the side whose rows interleave b pixels, and ``bl`` (N, b, b, C, H, W) (DCR) or
    (N, C, b, b, H, W) (CRD): ``to_blocks`` (SpaceToDepth) bl's b rows (j) from each row (h,
    i) of il, else (DepthToSpace) the reverse. Each interleaved row is visited once for its b
    rows while it is in L1, through raw pointers (a row view per (i, j, h), each interleaved
    row visited b times, before)."""
    nc, nh, nb, nw = il.shape[1], il.shape[2], il.shape[3], il.shape[4]
    for h in range(nh):
        for i in range(nb):
            ir = eptr(il, (((n * nc + c) * nh + h) * nb + i) * nw * nb)
            for j in range(nb):
                if crd:
                    off = ((((n * nc + c) * nb + i) * nb + j) * nh + h) * nw
                else:
                    off = ((((n * nb + i) * nb + j) * nc + c) * nh + h) * nw
                br = eptr(bl, off)
                if to_blocks:
                    for w in range(nw):
                        br[w] = ir[w * nb + j]
                else:
                    for w in range(nw):
                        ir[w * nb + j] = br[w]


@njit(cache=True, error_model='numpy')
def space6(il, bl, crd, to_blocks):
    """DepthToSpace (``to_blocks`` False: il (N, C, H, b, W, b) from bl (N, b, b, C, H, W)
    (DCR) or (N, C, b, b, H, W) (CRD)) or SpaceToDepth (True: bl from il, DCR, or CRD from
    opset 28): every (image, channel) plane of :func:`_space_plane`, in turn."""
    _check_c(il, bl)
    for n in range(il.shape[0]):
        for c in range(il.shape[1]):
            _space_plane(il, bl, n, c, crd, to_blocks)


@njit(cache=True, error_model='numpy', parallel=True)
def space6_par(il, bl, crd, to_blocks):
    """:func:`space6` with the (image, channel) pairs in a prange."""
    _check_c(il, bl)
    nn, nc = il.shape[0], il.shape[1]
    for t in prange(nn * nc):
        n = t // nc
        _space_plane(il, bl, n, t - n * nc, crd, to_blocks)

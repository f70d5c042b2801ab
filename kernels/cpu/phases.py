"""CPU kernels: an input's zero-padded stride-phase planes, the operand layout of the
convolutions that read their taps in place (conv_implicit's and QLinearConv's implicit gemms,
conv_cvec's tiles, conv.py's flat depthwise stencil). Imports nothing from jitort.

Phase (a, e) of a plane holds its padded rows a, a + sh, ... and columns e, e + sw, ...: with
the input in that layout every tap of a strided convolution reads contiguous runs. Rows of
column stride 1 and 2 are written as masked vector copies (``qgemm.copy_pad`` / ``copy_pad2``
/ ``copy_pad2x``), the padding included; other strides element by element.
"""
import numpy as np
from numba import njit

from .gemm import eptr
from .mathfn import wide_vectors
from .qgemm import copy_pad, copy_pad2, copy_pad2x


@njit(cache=True, error_model='numpy')
def phase_planes(src, xb, fill, nc, h, w, sh, sw, ph, pw, dh, dw, kh, kw, hq, wq):
    """xb[(i*sh*sw + a*sw + e)*hq*wq + y*wq + x] = src[(i*h + y*sh + a - ph)*w + x*sw + e - pw]
    for the nc (h, w) planes i of the flat src (xb's element type), ``fill`` outside them, for
    the stride phases the taps use (``_phases_used``; the others are not written): the padded
    stride-phase planes the in-place tile operands read (QLinearConv's bytes, the float
    implicit-gemm convolutions')."""
    phases, geo = phase_layout(sh, sw, dh, dw, kh, kw, w, wq, pw)
    phase_planes_at(src, 0, xb, 0, fill, nc, h, w, sh, sw, ph, pw, hq, wq, phases, geo)


@njit(cache=True, error_model='numpy')
def phase_layout(sh, sw, dh, dw, kh, kw, w, wq, pw):
    """(phases, geo) for ``phase_planes_at``: the stride phases the taps use (a*sw + e, in
    increasing order) and per phase its row phase a, column phase e and the plane columns
    [x0, x1) inside the input, computed once per layer (their divisions per plane cost ~5 us
    on 512 planes)."""
    phases = _phases_used(sh, sw, dh, dw, kh, kw)
    npq = phases.shape[0]
    geo = np.empty((npq, 4), np.int64)
    for k in range(npq):
        e = phases[k] % sw
        x0, x1 = _col_range(w, wq, sw, pw, e)
        geo[k, 0], geo[k, 1], geo[k, 2], geo[k, 3] = phases[k] // sw, e, x0, x1
    return phases, geo


@njit(cache=True, error_model='numpy')
def phase_planes_at(src, soff, xb, doff, fill, nc, h, w, sh, sw, ph, pw, hq, wq, phases, geo):
    """``phase_planes`` of the planes at src[soff:] into xb[doff:] with ``phase_layout``'s
    (phases, geo)."""
    wide_vectors()
    npq = phases.shape[0]
    pq = hq * wq
    lanes = 64 // xb.itemsize
    # rows of strides 1 and 2 in masked vector copies (``_vec_rows``); at stride 2 with both
    # column phases used, each input row is loaded once for the pair
    pair = sw == 2 and npq >= 2 and phases[0] % 2 == 0 and phases[1] % 2 == 1
    mode = 0 if sw > 2 else (sw if not pair else 3)
    if mode > 0:
        # phase by phase, each over every plane in a loop of its own (the masks, the same for
        # every row, outside it; the mode a constant in each inlined copy)
        for k in range(0, npq, 2 if pair else 1):
            a, e, x0, x1 = geo[k, 0], geo[k, 1], geo[k, 2], geo[k, 3]
            d0 = doff + phases[k] * pq
            ce = soff + e - pw
            if mode == 1:
                _vec_rows(1, xb, d0, d0, sh * sw * pq, src, a - ph, ce, h, w, sh, 1, x0, x1, 0,
                          0, nc, hq, wq, lanes, fill)
            elif mode == 2:
                _vec_rows(2, xb, d0, d0, sh * sw * pq, src, a - ph, ce, h, w, sh, 2, x0, x1, 0,
                          0, nc, hq, wq, lanes, fill)
            else:
                _vec_rows(3, xb, d0, d0 + pq, sh * sw * pq, src, a - ph, ce, h, w, sh, 2, x0,
                          x1, geo[k + 1, 2], geo[k + 1, 3], nc, hq, wq, lanes, fill)
        return
    for bc in range(nc):
        for k in range(npq):
            a, e, x0, x1 = geo[k, 0], geo[k, 1], geo[k, 2], geo[k, 3]
            dst = eptr(xb, doff + (bc * sh * sw + phases[k]) * pq)
            for y in range(hq):
                r = y * sh + a - ph
                o = y * wq
                if not _pad_row(dst, o, r, h, wq, x0, x1, fill):
                    continue
                s_ = eptr(src, soff + (bc * h + r) * w + e - pw)
                for x in range(x0, x1):
                    dst[o + x] = s_[x * sw]


@njit(cache=True, error_model='numpy', inline='always')
def _vec_rows(mode, xb, d0, d1, dstep, src, ra, ce, h, w, sh, sw, x0, x1, x0b, x1b, nc, hq, wq,
              lanes, fill):
    """One phase (a pair of column phases into d0 and d1 with mode 3) of the nc planes, dstep
    apart, in masked vector copies: row y of plane i from source row i * h + y * sh + ra
    (``fill`` outside 0..h-1), columns from ce (element by element, short plane rows cost
    more than the convolution's own work on them)."""
    for i in range(nc):
        p0, p1 = d0 + i * dstep, d1 + i * dstep
        j = 0
        while j < wq:   # vectors of the rows, each over every row (its masks outside that loop)
            n = min(lanes, wq - j)
            for y in range(hq):
                r = y * sh + ra
                o = y * wq + j
                _vec_row(mode, xb, p0 + o, p1 + o, src, (i * h + r) * w + ce + sw * j, x0 - j,
                         x1 - j, x0b - j, x1b - j, n, fill, 0 <= r < h)
            j += lanes


@njit(cache=True, error_model='numpy', inline='always')
def _vec_row(mode, xb, d, d1, src, s, lo, hi, lo1, hi1, n, fill, ok):
    """One vector of a padded phase row (all ``fill`` unless ok): stride 1 (mode 1), stride 2
    (2), both stride-2 phases into d and d1 (3)."""
    if mode == 1:
        copy_pad(xb, d, src, s, lo, hi, n, fill, ok)
    elif mode == 2:
        copy_pad2(xb, d, src, s, lo, hi, n, fill, ok)
    else:
        copy_pad2x(xb, d, d1, src, s, lo, hi, lo1, hi1, n, fill, ok)


@njit(cache=True, error_model='numpy', inline='always')
def _col_range(w, wq, sw, pw, e):
    """(x0, x1): the plane columns x of phase e inside the input (0 <= x*sw + e - pw < w)."""
    x0 = min(max((pw - e + sw - 1) // sw, 0), wq)
    return x0, min(max((w - 1 + pw - e) // sw + 1, x0), wq)


@njit(cache=True, error_model='numpy', inline='always')
def _fill(d, i0, i1, v):
    for i in range(i0, i1):
        d[i] = v


@njit(cache=True, error_model='numpy', inline='always')
def _pad_row(d, o, r, h, wq, x0, x1, v):
    """Plane row at d[o:o + wq] for input row r: v where it is padding; False when all is."""
    if r < 0 or r >= h:
        _fill(d, o, o + wq, v)
        return False
    _fill(d, o, o + x0, v)
    _fill(d, o + x1, o + wq, v)
    return True


@njit(cache=True, error_model='numpy')
def _phases_used(sh, sw, dh, dw, kh, kw):
    """The stride phases (a, e) some tap reads, as a*sw + e in increasing order."""
    use_a = np.zeros(sh, np.bool_)
    use_e = np.zeros(sw, np.bool_)
    for i in range(kh):
        use_a[i * dh % sh] = True
    for j in range(kw):
        use_e[j * dw % sw] = True
    out = np.empty(sh * sw, np.int64)
    n = 0
    for a in range(sh):
        for e in range(sw):
            if use_a[a] and use_e[e]:
                out[n] = a * sw + e
                n += 1
    return out[:n]

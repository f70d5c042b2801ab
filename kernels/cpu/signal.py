"""Signal-processing kernels: DFT / STFT as a real GEMM against a twiddle matrix.

A DFT of rows of a (M, N, c) array (c = 1 real, 2 complex, interleaved) is one real matrix
product ``y (M, K*cout) = x (M, nuse*c) @ w (nuse*c, K*cout)``: the twiddle matrix ``w``, built
once at compile time by the lowering (``jitort.codegen.lowerings.signal.dft_matrix``), carries the sign, scaling, one-sided
truncation, inverse real output and the dft_length padding / truncation (only the first
``nuse`` input samples have rows). BLAS (``gemm.xgemm``) does the work on row blocks, one
``prange`` over blocks when the product is big.

All arrays C-contiguous float32 or float64 (one dtype per call).
"""

import math

import numpy as np
from numba import njit, prange

from .gemm import num_threads, xgemm

#: flops from which the framed transforms split over the threads (4x below its value under
#: Numba's TBB layer, as a region's cost fell: kernels/cpu/workers.py)
_PAR_MIN_FLOPS = 1 << 19
_ROW_BLOCK = 64


@njit(cache=True, parallel=True, error_model='numpy')
def _rows_par(xf, lda, w, yf, m, kd, nd, nb, bs):
    for b in prange(nb):
        r0 = b * bs
        r1 = min(m, r0 + bs)
        if r1 > r0:
            xgemm(0, 0, r1 - r0, nd, kd, 1.0, xf, r0 * lda, lda, w, 0, nd, 0.0, yf, r0 * nd, nd)


@njit(cache=True, error_model='numpy')
def dft_rows(x, w, y):
    """y (M, K, cout) = rows of x (M, N, c) times w (nuse*c, K*cout), nuse <= N: the first
    nuse samples of each row (the rest are truncated by dft_length; missing ones are zero)."""
    m = x.shape[0]
    lda = x.shape[1] * x.shape[2]
    kd, nd = w.shape
    if m == 0 or nd == 0:
        return
    yf = y.reshape(-1)
    if kd == 0:
        yf[:] = 0
        return
    xf = x.reshape(-1)
    nth = num_threads()
    if nth > 1 and m >= 2 * _ROW_BLOCK // 4 and 2 * m * kd * nd >= _PAR_MIN_FLOPS:
        nb = max(nth, min((m + _ROW_BLOCK - 1) // _ROW_BLOCK, 8 * nth))
        nb = ((nb + nth - 1) // nth) * nth
        bs = (m + nb - 1) // nb
        nb = (m + bs - 1) // bs
        _rows_par(xf, lda, w, yf, m, kd, nd, nb, bs)
    else:
        xgemm(0, 0, m, nd, kd, 1.0, xf, 0, lda, w, 0, nd, 0.0, yf, 0, nd)


@njit(cache=True, error_model='numpy')
def swap12(x, y):
    """y (A, C, B, D) = x (A, B, C, D) with axes 1 and 2 swapped."""
    a_n, b_n, c_n, d_n = x.shape
    for a in range(a_n):
        for b in range(b_n):
            for c in range(c_n):
                for d in range(d_n):
                    y[a, c, b, d] = x[a, b, c, d]


@njit(cache=True, error_model='numpy')
def stft_frames(x, win, step, fr):
    """fr (B, F, L, c) = frames of x (B, S, c) starting every ``step`` samples, times win (L,)
    (no window when win is empty)."""
    b_n, f_n, l_n, c_n = fr.shape
    use_w = win.shape[0] > 0
    for b in range(b_n):
        for f in range(f_n):
            s = f * step
            if use_w:
                for t in range(l_n):
                    wt = win[t]
                    for ch in range(c_n):
                        fr[b, f, t, ch] = x[b, s + t, ch] * wt
            else:
                for t in range(l_n):
                    for ch in range(c_n):
                        fr[b, f, t, ch] = x[b, s + t, ch]


# --- radix-2 FFT (power-of-two lengths) -------------------------------------------------------
_FFT_PAR_MIN = 1 << 17
_FFT_LANES = 8  # rows transformed together (one SIMD lane each)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _fft_rows(x, tw, rev, y, ndft, inverse, herm, r0, r1, re, im):
    """Rows [r0, r1) of x (M, N, c) -> y (M, K, cout) by an iterative radix-2 FFT of length
    ndft, ``_FFT_LANES`` rows at a time: the work rows ``re``/``im`` (ndft, lanes) hold one
    row per lane, so every butterfly is a vector operation across rows. herm: x holds the
    first bins of a Hermitian spectrum (inverse one-sided): the rest is mirrored, the real part
    written."""
    n_in, c = x.shape[1], x.shape[2]
    k_out, cout = y.shape[1], y.shape[2]
    lanes = re.shape[1]
    nuse = min(n_in, ndft)
    half_n = ndft // 2
    t0 = re.dtype.type
    scale = t0(1.0 / ndft if inverse else 1.0)
    sgn = 1.0 if inverse else -1.0
    for rb in range(r0, r1, lanes):
        nl = min(lanes, r1 - rb)
        for t in range(ndft):  # load in bit-reversed order
            rv = rev[t]
            for l in range(lanes):
                re[rv, l] = 0.0
                im[rv, l] = 0.0
            if herm:
                if t <= half_n:
                    if t < nuse:
                        for l in range(nl):
                            re[rv, l] = x[rb + l, t, 0]
                            im[rv, l] = x[rb + l, t, 1]
                elif ndft - t < nuse:
                    for l in range(nl):
                        re[rv, l] = x[rb + l, ndft - t, 0]
                        im[rv, l] = -x[rb + l, ndft - t, 1]
            elif t < nuse:
                for l in range(nl):
                    re[rv, l] = x[rb + l, t, 0]
                if c == 2:
                    for l in range(nl):
                        im[rv, l] = x[rb + l, t, 1]
        size = 2
        while size <= ndft:
            h = size // 2
            step = ndft // size
            for j in range(h):
                wr = t0(tw[0, j * step])
                wi = t0(sgn * tw[1, j * step])
                for st in range(0, ndft, size):
                    p = st + j
                    q = p + h
                    for l in range(lanes):
                        tr = wr * re[q, l] - wi * im[q, l]
                        ti = wr * im[q, l] + wi * re[q, l]
                        re[q, l] = re[p, l] - tr
                        im[q, l] = im[p, l] - ti
                        re[p, l] += tr
                        im[p, l] += ti
            size *= 2
        for l in range(nl):
            if cout == 2:
                for k in range(k_out):
                    y[rb + l, k, 0] = re[k, l] * scale
                    y[rb + l, k, 1] = im[k, l] * scale
            else:
                for k in range(k_out):
                    y[rb + l, k, 0] = re[k, l] * scale


@njit(cache=True, parallel=True, error_model='numpy')
def _fft_par(x, tw, rev, y, ndft, inverse, herm, nb):
    m = x.shape[0]
    bs = (m + nb - 1) // nb
    for b in prange(nb):
        re = np.empty((ndft, _FFT_LANES), y.dtype)
        im = np.empty((ndft, _FFT_LANES), y.dtype)
        _fft_rows(x, tw, rev, y, ndft, inverse, herm, b * bs, min(m, (b + 1) * bs), re, im)


@njit(cache=True, error_model='numpy')
def fft_rows(x, tw, y, ndft, inverse, herm):
    """y (M, K, cout) = the DFT of length ndft (a power of two) of rows of x (M, N, c), as
    ``dft_rows`` computes it, by a radix-2 FFT; tw (2, ndft/2) float64: cos / sin of
    2 pi j / ndft."""
    m = x.shape[0]
    if m == 0 or y.shape[1] == 0:
        return
    bits = 0
    while (1 << bits) < ndft:
        bits += 1
    rev = np.zeros(ndft, np.int64)
    for t in range(1, ndft):
        rev[t] = (rev[t >> 1] >> 1) | ((t & 1) << (bits - 1))
    nth = num_threads()
    if nth > 1 and m >= 2 and m * ndft * 8 >= _FFT_PAR_MIN:
        _fft_par(x, tw, rev, y, ndft, inverse, herm, min(m, 4 * nth))
    else:
        re = np.empty((ndft, _FFT_LANES), y.dtype)
        im = np.empty((ndft, _FFT_LANES), y.dtype)
        _fft_rows(x, tw, rev, y, ndft, inverse, herm, 0, m, re, im)


# --- window and mel-weight generators (when their inputs are not constants) -----------------
@njit(cache=True, error_model='numpy')
def window(y, kind, periodic):
    """y (n,) = Hann (kind 0), Hamming (1) or Blackman (2) window, periodic or symmetric
    (denominator n or n - 1), computed in float64 and cast to y's dtype."""
    n = y.shape[0]
    den = n if periodic else n - 1
    for i in range(n):
        a = 2.0 * math.pi * i / den
        if kind == 0:
            v = 0.5 - 0.5 * math.cos(a)
        elif kind == 1:
            v = 25.0 / 46.0 - (21.0 / 46.0) * math.cos(a)
        else:
            v = 0.42 - 0.5 * math.cos(a) + 0.08 * math.cos(2.0 * a)
        y[i] = v


@njit(cache=True, error_model='numpy')
def mel_weight_matrix(y, dft_length, sample_rate, lower_hz, upper_hz):
    """y (dft_length // 2 + 1, num_mel_bins) = triangular mel filters, peak 1, edges at mel
    steps between lower_hz and upper_hz (1-element arrays, read at run time); bin edges
    floor((dft_length + 1) * f / sample_rate); entries beyond the spectrum are dropped."""
    nspec, nmel = y.shape
    sr = np.float64(sample_rate.reshape(-1)[0])
    lo = np.float64(lower_hz.reshape(-1)[0])
    hi = np.float64(upper_hz.reshape(-1)[0])
    for i in range(nspec):
        for j in range(nmel):
            y[i, j] = 0
    lo_mel = 2595.0 * math.log1p(lo / 700.0) / math.log(10.0)
    hi_mel = 2595.0 * math.log1p(hi / 700.0) / math.log(10.0)
    step = (hi_mel - lo_mel) / (nmel + 2)
    edges = np.empty(nmel + 2, np.int64)
    for k in range(nmel + 2):
        f = 700.0 * math.expm1((k * step + lo_mel) / 2595.0 * math.log(10.0))
        edges[k] = np.int64(math.floor(((dft_length + 1) * f) / sr))
    for i in range(nmel):
        lo_b, c_b, hi_b = edges[i], edges[i + 1], edges[i + 2]
        if c_b - lo_b == 0:
            if 0 <= c_b < nspec:
                y[c_b, i] = 1
        else:
            for j in range(max(lo_b, 0), min(c_b + 1, nspec)):
                y[j, i] = (j - lo_b) / (c_b - lo_b)
        if hi_b - c_b > 0:
            for j in range(max(c_b, 0), min(hi_b, nspec)):
                y[j, i] = (hi_b - j) / (hi_b - c_b)

"""Signal-processing kernels: DFT / STFT as a real GEMM against a twiddle matrix.

A DFT of rows of a (M, N, c) array (c = 1 real, 2 complex, interleaved) is one real matrix
product ``y (M, K*cout) = x (M, nuse*c) @ w (nuse*c, K*cout)``: the twiddle matrix ``w``, built
once at compile time by the lowering (``jitort.codegen.lowerings.signal.dft_matrix``), carries the sign, scaling, one-sided
truncation, inverse real output and the dft_length padding / truncation (only the first
``nuse`` input samples have rows). BLAS (``gemm.xgemm``) does the work on row blocks, one
``prange`` over blocks when the product is big.

All arrays C-contiguous float32 or float64 (one dtype per call).
"""

from numba import njit, prange

from .gemm import num_threads, xgemm

_PAR_MIN_FLOPS = 1 << 21
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

"""CPU kernel: grouped 2-D convolution through a channels-last im2col (NCHW in and out).

For grouped convolutions (ResNeXt / RegNet: 8-64 channels per group, 3x3) on small planes the
NCHW im2col copies runs of OW = 7-28 elements, each with its own loop setup and bounds
arithmetic, which costs more than the gemm it feeds. Here each
task (image, group) first transposes the group's input channels to channels-last (H*W, Cg),
then builds the im2col matrix one output position at a time as KH*KW contiguous runs of Cg
values (or zeros where a tap falls in the padding), rows (position) x columns (kh, kw, c), and
multiplies it with the group's weights packed at compile time as (kh, kw, c) x Mg
(``pack_weights``): ``tile (P, Mg) = col (P, K) @ W_g (K, Mg)``, a plain (NN) BLAS gemm (BLAS
runs the transposed-B form, straight into NCHW, slower), and the tile goes
into the NCHW output transposed, with the bias; residual and activation then run on the rows.
Blocks of output positions keep each im2col block within ``_COL_BLOCK_ELEMS``.

Layouts: x (N, C, H, W); packed weights (group, KH*KW*Cg, Mg) flat; b (M,); res / out
(N, M, OH, OW).
Begin pads ``ph`` / ``pw``; end pads implied by OH / OW; strides and dilations >= 1. Float32
or float64, one dtype per call. Activation codes as in ``epilogue``. ``res`` must not alias
``out``. Imports nothing from jitort.
"""
import numpy as np
from numba import njit, prange

from .conv import _rows_epilogue
from .gemm import eptr, num_threads, pull_tasks, scratch_workers, xgemm

_FM = {'reassoc', 'contract', 'arcp'}

#: im2col elements per block of output positions (256 KB of float32)
_COL_BLOCK_ELEMS = 1 << 16
#: gemm flops from which the (image, group) tasks are split over threads (as conv.py's
#: independent groups; 1 MFLOP while a TBB region cost ~8 us, halved for jitort's pool)
_PAR_MIN_FLOPS = 1 << 19


#: when ``conv2d_grouped`` runs a grouped convolution instead of conv.py's NCHW im2col: output
#: planes of at most GROUPED_MAX_S positions and at least GROUPED_MIN_CG input channels per
#: group (shorter runs cost more than they save). ``python scripts/sweeps/sweep_conv_group.py`` (36
#: grouped 3x3 layers, 1 thread, both kernels alternating in one process, Xeon host,
#: 2026-11-27, two runs), grouped / im2col time: 7x7 and 8x8 outputs with 16-64 channels per
#: group 0.47-0.89 (stride 2 0.49-0.65); 14x14 outputs 0.93-1.34 at 16-64 channels, 28x28
#: 1.2-2.1; 8 channels per group 1.07-1.4 on 7x7 / 8x8, 4 per group 1.1-6.
GROUPED_MIN_CG = 16
GROUPED_MAX_S = 64


def grouped_wins(C, M, OH, OW, group) -> bool:
    """Whether ``conv2d_grouped`` is the kernel for this grouped convolution (plain Python;
    concrete sizes). Depthwise convolutions (one channel per group) have their own kernels."""
    return (1 < group and C % group == 0 and M % group == 0 and C // group >= GROUPED_MIN_CG
            and OH * OW <= GROUPED_MAX_S)


def pack_weights(w, group):
    """Weights (M, Cg, KH, KW) as (group, KH*KW*Cg, M/group) in (kh, kw, c) order, flat and
    contiguous (called by the compiler once per constant weight)."""
    w = np.asarray(w)
    m, cg, kh, kw = w.shape
    mg = m // group
    wg = w.reshape(group, mg, cg, kh, kw).transpose(0, 3, 4, 2, 1)  # g, kh, kw, c, m
    return np.ascontiguousarray(wg).reshape(-1)


def _block_pos_py(k, p):
    """Output positions per im2col block (>= 1, <= max(p, 1))."""
    return max(1, min(max(p, 1), _COL_BLOCK_ELEMS // max(1, k)))


_block_pos = njit(cache=True)(_block_pos_py)


def grouped_scratch_elems(C, H, W, KH, KW, OH, OW, M, group, threads=None):
    """Elements of ``conv2d_grouped``'s scratch (plain Python; sizes may be symbolic ints):
    per worker the group's channels-last input (H*W*Cg), one im2col block and its gemm tile."""
    nt = scratch_workers(threads)
    return nt * _per_worker_py(C // group, H * W, KH * KW * (C // group), OH * OW, M // group)


def _per_worker_py(cg, hw, k, s, mg):
    """Scratch elements of one worker (``_block_pos_py`` written out: a jitted function
    cannot call the plain-Python one)."""
    return hw * cg + max(1, min(max(s, 1), _COL_BLOCK_ELEMS // max(1, k))) * (k + mg)


_per_worker = njit(cache=True)(_per_worker_py)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _task(t, x, wp, b, res, out, xt, col, kh_n, kw_n, sh, sw, ph, pw, dh, dw, group, has_bias,
          has_res, act, aa, ab):
    """Task t = n * group + g: image n, group g, every block of output positions."""
    n_n, c_n, h, wd = x.shape
    m_n, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    cg = c_n // group
    mg = m_n // group
    k = kh_n * kw_n * cg
    hw = h * wd
    s = oh_n * ow_n
    n = t // group
    g = t - n * group
    z = x.dtype.type(0)
    # the group's channels, channels-last: xt[p * cg + c] = x[n, g * cg + c, p]
    for c in range(cg):
        xs = eptr(x, (n * c_n + g * cg + c) * hw)
        for p in range(hw):
            xt[p * cg + c] = xs[p]
    bp = _block_pos(k, s)
    tile = eptr(col, bp * k)
    for s0 in range(0, s, bp):
        s1 = min(s, s0 + bp)
        for q in range(s0, s1):
            oh = q // ow_n
            ow = q - oh * ow_n
            for i in range(kh_n):
                ih = oh * sh - ph + i * dh
                if ih < 0 or ih >= h:
                    d = eptr(col, (q - s0) * k + i * kw_n * cg)
                    for j in range(kw_n * cg):
                        d[j] = z
                    continue
                for jj in range(kw_n):
                    iw = ow * sw - pw + jj * dw
                    d = eptr(col, (q - s0) * k + (i * kw_n + jj) * cg)
                    if iw < 0 or iw >= wd:
                        for c in range(cg):
                            d[c] = z
                    else:
                        src = eptr(xt, (ih * wd + iw) * cg)
                        for c in range(cg):
                            d[c] = src[c]
        st = xgemm(0, 0, s1 - s0, mg, k, 1.0, col, 0, k, wp, g * k * mg, mg, 0.0, col, bp * k,
                   mg)
        if st != 0:
            raise RuntimeError("BLAS gemm failed")
        for m in range(mg):
            d = eptr(out, (n * m_n + g * mg + m) * s + s0)
            bv = b[g * mg + m] if has_bias else z
            for q in range(s1 - s0):
                d[q] = tile[q * mg + m] + bv
        _rows_epilogue(out, res, b, n, g * mg, (g + 1) * mg, s0, s1, False, has_res, act, aa,
                       ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _par(nw, ntask, per, x, wp, b, res, out, scr, kh_n, kw_n, sh, sw, ph, pw, dh, dw, group,
         has_bias, has_res, act, aa, ab):
    """nw workers, each with scratch scr[wk*per:(wk+1)*per], pull (image, group) tasks from a
    shared counter."""
    counter = np.zeros(1, np.int64)
    hwc = x.shape[2] * x.shape[3] * (x.shape[1] // group)
    for wk in prange(nw):
        xt = scr[wk * per:wk * per + hwc]
        col = scr[wk * per + hwc:(wk + 1) * per]
        pull_tasks(counter, ntask, _task, (x, wp, b, res, out, xt, col, kh_n, kw_n, sh, sw, ph,
                                           pw, dh, dw, group, has_bias, has_res, act, aa, ab))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def conv2d_grouped(x, wp, kh, kw, b, res, out, scr, sh, sw, ph, pw, dh, dw, group, has_bias,
                   has_res, act, alpha, beta):
    """out = act(conv(x, w) + b (+ res)) with ``wp = pack_weights(w, group)``, ``scr`` of at least
    ``grouped_scratch_elems`` elements for one worker (more workers where it holds more)."""
    _core(x, wp, np.int64(kh), np.int64(kw), b, res, out, scr, np.int64(sh), np.int64(sw),
          np.int64(ph), np.int64(pw), np.int64(dh), np.int64(dw), np.int64(group),
          bool(has_bias), bool(has_res), np.int64(act), np.float64(alpha), np.float64(beta))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _core(x, wp, kh_n, kw_n, b, res, out, scr, sh, sw, ph, pw, dh, dw, group, has_bias, has_res,
          act, aa, ab):
    n_n, c_n, h, wd = x.shape
    m_n, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    s = oh_n * ow_n
    if n_n * m_n * s == 0:
        return
    cg = c_n // group
    k = kh_n * kw_n * cg
    hwc = h * wd * cg
    per = _per_worker(cg, h * wd, k, s, m_n // group)
    if scr.shape[0] < per:
        raise ValueError("conv2d_grouped: scratch smaller than one worker's")
    ntask = n_n * group
    flops = 2.0 * n_n * m_n * k * s
    nw = min(num_threads(), ntask, scr.shape[0] // per)
    if nw > 1 and flops >= _PAR_MIN_FLOPS:
        _par(nw, ntask, per, x, wp, b, res, out, scr, kh_n, kw_n, sh, sw, ph, pw, dh, dw, group,
             has_bias, has_res, act, aa, ab)
        return
    xt = scr[:hwc]
    col = scr[hwc:per]
    for t in range(ntask):
        _task(t, x, wp, b, res, out, xt, col, kh_n, kw_n, sh, sw, ph, pw, dh, dw, group,
              has_bias, has_res, act, aa, ab)

"""2-D convolution (ONNX Conv, NCHW), optionally fused with bias, residual add, activation.

Layouts (all C-contiguous, float32 or float64, one dtype per call):
    x   (N, C, H, W)
    w   (M, C // group, KH, KW)
    b   (M,)                       used only when has_bias (else any 1-D dummy)
    res (N, M, OH, OW)             residual added before the activation (``*_add_act``)
    out (N, M, OH, OW)             preallocated; OH/OW come from the ONNX formulas
    col 1-D scratch, same dtype, >= conv2d_scratch_elems(C, KH, KW, OH, OW, group) elems
Begin pads are ``ph``/``pw``; end pads are implied by OH/OW: any input position outside
[0, H) x [0, W) reads as zero. Strides ``sh``/``sw`` >= 1, dilations ``dh``/``dw`` >= 1.

Paths (3x3 stride-1 convolutions with constant weights on planes big enough usually skip this
module: the code generator lowers them to ``winograd.conv3x3_winograd``):
* depthwise (group == C == M): per (image, channel) plane, a zero-padded copy split into
  its stride phases, on which every tap is one fixed offset, so the plane is one long
  vectorized loop (``_dw_flat``; 3x3 unrolled; 5x5 / 7x7 and stride-2 3x3-7x7 register-
  blocked over 4 output rows by ``_dw_rows``); bias, residual, activation fused; ``prange``
  over planes when big. Strided ones with short output rows (OW <= _DW_CB_MAX_OW): blocks of
  16 channels copied channels-last into a zero-padded scratch and computed with every tap
  vectorized across the block's channels, the result copied back to NCHW (``_dw_cblock``).
* pointwise (1x1, stride 1, no pad, OH == H, OW == W): BLAS gemm straight on the input,
  in column blocks of the spatial axis; split over output channels instead when threads share
  few images and a group has more output channels than positions (_PW_MSPLIT_MIN).
* small planes (OH*OW <= 1024, >= 32 output channels per group): tasks (image, group,
  block of output channels); each worker im2cols the whole plane into its slice of ``col``
  and runs one gemm per channel block (deep layers: the weights dominate, so they are split,
  not repacked per column block). A plane whose im2col matrix exceeds _PLANE_CHUNK_ELEMS is
  done in chunks of input channels (rows of the matrix), accumulating the gemms (beta = 1):
  the scratch stays ~1 MB per worker however deep the layer.
* short output rows (OW <= _FLAT_MAX_OW) where the gemm's extra columns cost little (few
  output channels per group: grouped convolutions, or OW == W at stride 1): the small-plane
  and row-block paths im2col "flat" (``_im2col_flat``): every im2col row is one contiguous
  copy, from the input plane itself at stride 1, else from the zero-padded stride phases of
  the input copied once; the gemm writes rows of wq >= OW columns into scratch and
  ``_flat_store`` compacts them into ``out`` with the epilogue.
* otherwise: tasks (image, group, block of output rows); each does im2col of its rows into a
  per-worker slice of ``col`` (~L2-sized, but at least _MIN_BLOCK_COLS output positions wide:
  narrower gemms run far below BLAS peak) and one BLAS gemm that writes the block in place in
  ``out`` (leading dimension OH*OW, see ``gemm.xgemm``).
Tasks are spread over ``prange`` workers (each with its own scratch slice) when the
convolution is big enough; a small plane whose (image, group) planes are fewer than the
threads (deep layers at batch 1) is shared instead (``_plane_phased``: its im2col by chunks of
input channels, then its output channels by blocks, in one parallel region). Bias, residual
and activation are applied to each block right after its gemm, while it is in cache. Activation codes are those of ``epilogue`` (0 none,
1 relu, 2 gelu, 3 sigmoid, 4 tanh, 5 leaky_relu(alpha_act), 6 clip(alpha_act, beta_act)).
"""
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from .epilogue import act_row
from .gemm import (_ceil_div, _gcd, count_done, eptr, num_threads, ogemm, pull_tasks,
                   scratch_workers, task_split, valid_range, xgemm)
from .mathfn import wide_vectors
from .phases import phase_layout, phase_planes_at
from .ptr import eptrs, loop_begin, loop_end
from .qgemm import masked_store, splat
from .sync import claim_below, wait_count

_FM = {'reassoc', 'contract', 'arcp'}


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _kw_ranges(kw_n, dw, pw, sw, wd, ow_n):
    """[lo, hi) of the valid output columns of each kernel column kw (``valid_range``), as
    (lo, hi) pairs: computed once per call, not per row and channel -- its two 64-bit
    divisions cost ~40 ns, more than copying a short row."""
    vr = np.empty(2 * kw_n, np.int64)
    for kw in range(kw_n):
        vr[2 * kw], vr[2 * kw + 1] = valid_range(kw * dw - pw, sw, wd, ow_n)
    return vr


# 2*M*K*S (flops) above which the gemm-based paths are split over threads; depthwise output
# elements * taps above which the planes are.
_PAR_MIN_FLOPS = 1 << 20
# ... when fewer (image, group) planes than threads make the threads split one plane's gemm
# (by columns or output channels): below it a parallel region costs more than the second
# thread saves (``scripts/sweeps/sweep_conv_split.py`` measures it; the threshold assumes jitort's
# pool, kernels/cpu/workers.py, whose regions are cheap).
# Independent planes (groups, images) split at any size above _PAR_MIN_FLOPS.
_PAR_MIN_FLOPS_SPLIT = 1 << 20
_PAR_MIN_DW = 1 << 15
# Depthwise convolutions are flat stencils over each padded plane (_dw_flat), except strided
# ones with at most _DW_CB_MAX_OW output columns: _DW_CB channels at a time, vectorized across
# channels (_dw_cblock), where the phase split's loops of a few elements cost more than the
# channels-last transposes.
_DW_CB = 16
_DW_CB_MAX_OW = 12
# Few output channels per group (an image head: 32 -> 3 channels 7x7, a 1-channel mask): the
# im2col copies kdim values per output position for only mg multiply-adds each, and BLAS runs
# an M < 8 gemm at a fraction of its speed. Up to _DIRECT_MAX_M output channels per group
# (output rows of at least _DIRECT_MIN_OW, unit column stride) the convolution is direct
# instead: each (input channel, kh, kw) tap adds a shifted input row times its weight into
# the mg output rows (_direct_rows; no scratch). A column stride other than 1 keeps im2col
# (strided loads make the direct form slower). Few input channels per group make the im2col
# cheap (kdim = cg*KH*KW copies per position), so direct also needs at least _DIRECT_MIN_CG
# input channels per group (grouped layers of 4 channels per group, ResNeXt's, stay im2col).
_DIRECT_MAX_M = 4
_DIRECT_MIN_OW = 16
_DIRECT_MIN_CG = 16
_DIRECT_ROWS = 4
# im2col block per task (elements; 512 KB of float32): the gemm reads it back from L2.
_COL_BLOCK_ELEMS = 1 << 17
# Pointwise: output elements per task (1 MB of float32: the epilogue pass stays in L2; fewer,
# larger gemms repack the weights less often).
_OUT_BLOCK_ELEMS = 1 << 18
# Pointwise convolutions split over threads by output channels (each worker packs only its
# share of the weights, all of the few columns) rather than by columns, when a group has at
# least as many output channels as output positions (small planes, wide layers) and at least
# 2 * _PW_MSPLIT_MIN of them (there the sgemm of an M-half runs faster than an N-half's).
_PW_MSPLIT_MIN = 32


# Output rows of at most _FLAT_MAX_OW positions are im2col'ed "flat" (``_im2col_flat``): the
# input planes are copied once, zero-padded and split into their stride phases, and every
# (channel, kh, kw) row of the im2col matrix is then one contiguous run of nr * wq elements
# (wq >= OW: the gemm computes (wq - OW) / wq extra columns, dropped when the block is
# compacted into ``out`` with the epilogue). The row-by-row im2col copies runs of OW elements,
# each with its own bounds arithmetic, which on short rows costs more than the gemm.
_FLAT_MAX_OW = 32
# ... and only where the gemm's extra columns cost less than the row-by-row copies saved: at
# most _FLAT_MAX_WASTE * OW extra multiply-adds per im2col element (mg * (wq - OW) <=
# _FLAT_MAX_WASTE * OW): wide layers on 7x7 planes lose more to the wasted columns than the
# flat copy saves.
_FLAT_MAX_WASTE = 32


# Output positions per im2col block at least (gemm N): sgemm on narrower blocks runs well below
# its speed.
_MIN_BLOCK_COLS = 224
# OpenBLAS (SkylakeX and later kernels) multiplies problems of M*N*K <= 1e6 with "small
# matrix" kernels that skip packing. For a short K (the im2col of a few channels: first
# layers, squeezenet's 16-channel expands) those run faster than the packed path, so
# pointwise convolutions with K <= _SMALL_K_PW get gemm blocks of that size.
_SMALL_MNK = 1000000
_SMALL_K_PW = 256
# For im2col gemms the small blocks pay only when K is tiny (a first layer's 3 channels, K =
# 27); at K = 144-147 (squeezenet's 16-channel 3x3 expands, 7x7 stem convs) blocks of whole
# rows at least _MIN_BLOCK_COLS wide are faster.
_SMALL_K = 32
# Planes of at most this many output positions (with at least _PLANE_MIN_M output channels
# per group) are im2col'ed whole, per worker, and split over output channels instead; in
# chunks of input channels when the whole matrix exceeds _PLANE_CHUNK_ELEMS (1 MB of float32).
_PLANE_MAX_S = 1024
_PLANE_MIN_M = 32
# Chunks per thread of each phase when the threads share a small plane (``_plane_phased``):
# of its input channels (im2col), of its output channels (gemm).
_PHASE_CHUNKS = 2
_PLANE_CHUNK_ELEMS = 1 << 18


def _block_rows_py(kdim, ow, oh):
    """Output rows per im2col block (>= 1, <= max(oh, 1))."""
    per_row = max(1, kdim * ow)
    rows = max(_COL_BLOCK_ELEMS // per_row, -(-_MIN_BLOCK_COLS // max(1, ow)))
    return max(1, min(max(oh, 1), rows))


def _plane_chunk_py(cg, khw, s):
    """Input channels per im2col chunk of a small plane (>= 1, <= max(cg, 1))."""
    return max(1, min(max(cg, 1), _PLANE_CHUNK_ELEMS // max(1, khw * s)))


_block_rows = njit(cache=True)(_block_rows_py)
_plane_chunk = njit(cache=True)(_plane_chunk_py)


def _flat_geom_py(nr, kh_n, kw_n, ow_n, sh, sw, dh, dw, wd):
    """(wq, hq) of the flat im2col for nr output rows: output (i, j) at column i * wq + j.
    Stride 1 with OW <= W: wq = W and hq = 0, each im2col row is copied straight from the
    input plane (no phase planes). Otherwise each of a channel's sh * sw stride phases is hq
    rows of wq elements (one slack row), see ``_im2col_flat``."""
    if sh == 1 and sw == 1 and ow_n <= wd:
        return wd, 0
    wp = (ow_n - 1) * sw + (kw_n - 1) * dw + 1
    return (wp + sw - 1) // sw, nr + ((kh_n - 1) * dh) // sh + 1


_flat_geom = njit(cache=True)(_flat_geom_py)


def _flat_cap_py(cg, mg, kh_n, kw_n, nr, ow_n, sh, sw, dh, dw, wd):
    """Scratch elements of one flat-im2col task over nr output rows: the im2col matrix
    (cg*kh*kw rows of nr*wq), the phase planes of cg channels and the gemm's output block
    (mg rows of nr*wq) before it is compacted into ``out``."""
    # (the geometry of _flat_geom_py written out: conv2d_scratch_elems calls this in Python
    # with the code generator's symbolic ints, which a jitted _flat_geom cannot take, and a
    # jitted function cannot call the plain-Python one)
    if sh == 1 and sw == 1 and ow_n <= wd:
        wq, hq = wd, 0
    else:
        wq = ((ow_n - 1) * sw + (kw_n - 1) * dw + sw) // sw
        hq = nr + ((kh_n - 1) * dh) // sh + 1
    nq = nr * wq
    return cg * kh_n * kw_n * nq + cg * sh * sw * hq * wq + mg * nq


def _flat_wins_py(mg, kw_n, ow_n, sh, sw, dw, wd):
    """Whether output rows of ow_n positions take the flat im2col (see _FLAT_MAX_OW)."""
    if sh == 1 and sw == 1 and ow_n <= wd:          # as _flat_cap_py
        wq = wd
    else:
        wq = ((ow_n - 1) * sw + (kw_n - 1) * dw + sw) // sw
    return 0 < ow_n <= _FLAT_MAX_OW and mg * (wq - ow_n) <= _FLAT_MAX_WASTE * ow_n


_flat_cap = njit(cache=True)(_flat_cap_py)
_flat_wins = njit(cache=True)(_flat_wins_py)


def conv2d_scratch_elems(C, KH, KW, OH, OW, group, threads=None, M=None, strides=(1, 1),
                         dilations=(1, 1), W=None):
    """Number of ``col`` scratch elements conv2d needs (plain Python, >= 1).

    One im2col block per worker; ``threads`` workers at most (default NUMBA_NUM_THREADS, the
    most Numba can run): a block of output rows, or for planes of at most _PLANE_MAX_S
    positions a chunk of the whole-plane matrix (at most _PLANE_CHUNK_ELEMS unless one input
    channel needs more), never more than the full (C/group*KH*KW, OH*OW) matrix per worker.
    The kernel copes with less (fewer workers, smaller blocks) down to one output row,
    kdim * OW elements. Given the output channels ``M`` (and the strides and dilations),
    rows of at most _FLAT_MAX_OW positions also get what the flat im2col needs (its
    matrix, the phase planes and the gemm block); without ``M`` the kernel uses the
    row-by-row im2col wherever the scratch is too small for the flat one. The input width
    ``W`` lets stride-1 rows use the flat im2col without phase planes (``_flat_geom_py``).
    """
    cg = C // group
    kdim = cg * KH * KW
    nt = scratch_workers(threads)
    rows = _block_rows_py(kdim, OW, OH)
    row_need = kdim * OW * min(max(OH, 1), rows * nt)
    if OH * OW <= _PLANE_MAX_S:
        kc = _plane_chunk_py(cg, KH * KW, OH * OW) * KH * KW
        # (row blocks serve planes with fewer than _PLANE_MIN_M channels per group: capped)
        need = max(1, kc * OH * OW * nt, min(row_need, _PLANE_CHUNK_ELEMS * nt), kdim * OW)
    else:
        need = max(1, row_need, kdim * OW * rows)
    (sh, sw), (dh, dw) = strides, dilations
    wd = -1 if W is None else W
    if M is not None and OH > 0 and kdim > 0 and _flat_wins_py(M // group, KW, OW, sh, sw, dw,
                                                               wd):
        mg = M // group
        flat = _flat_cap_py(cg, mg, KH, KW, max(1, min(OH, rows)), OW, sh, sw, dh, dw, wd)
        if OH * OW <= _PLANE_MAX_S:
            cc = _plane_chunk_py(cg, KH * KW, OH * OW)
            flat = max(flat, _flat_cap_py(cc, mg, KH, KW, OH, OW, sh, sw, dh, dw, wd))
        need = max(need, flat * nt)
    return need


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _im2col_rows(xg, col3, r0, kh_n, kw_n, sh, sw, ph, pw, dh, dw):
    """col3 (Cg*KH*KW, nr, OW) = im2col of output rows [r0, r0 + nr) from xg (Cg, H, W).

    Padding is handled per kernel column by the valid output range [ow0, ow1), so the inner
    loops are plain copies (contiguous when sw == 1) through raw pointers (``eptr``): no
    per-row array views, no wraparound checks.
    """
    cg, h, wd = xg.shape
    nr = col3.shape[1]
    ow_n = col3.shape[2]
    if sw == 2:
        _im2col_rows_s2(xg, col3, r0, kh_n, kw_n, sh, ph, pw, dh, dw)
        return
    vr = _kw_ranges(kw_n, dw, pw, sw, wd, ow_n)
    for c in range(cg):
        for kh in range(kh_n):
            for kw in range(kw_n):
                row = (c * kh_n + kh) * kw_n + kw
                off_w = kw * dw - pw
                ow0 = vr[2 * kw]
                ow1 = vr[2 * kw + 1]
                nv = ow1 - ow0
                for i in range(nr):
                    ih = (r0 + i) * sh - ph + kh * dh
                    d = eptr(col3, (row * nr + i) * ow_n)
                    if ih < 0 or ih >= h or nv <= 0:
                        for ow in range(ow_n):
                            d[ow] = 0
                        continue
                    for ow in range(ow0):
                        d[ow] = 0
                    dd = eptr(col3, (row * nr + i) * ow_n + ow0)
                    ss = eptr(xg, (c * h + ih) * wd + sw * ow0 + off_w)
                    if sw == 1:
                        for j in range(nv):
                            dd[j] = ss[j]
                    else:
                        for j in range(nv):
                            dd[j] = ss[sw * j]
                    for ow in range(ow1, ow_n):
                        d[ow] = 0


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _im2col_rows_s2(xg, col3, r0, kh_n, kw_n, sh, ph, pw, dh, dw):
    """_im2col_rows for column stride 2: each input row a tap reads is split once into its
    even and odd columns, and every kernel column then copies a contiguous run of one half
    (a strided read per tap made the stride-2 im2col ~2x slower than the stride-1 one)."""
    cg, h, wd = xg.shape
    nr = col3.shape[1]
    ow_n = col3.shape[2]
    ne = (wd + 1) // 2
    half = np.empty(wd + 1, xg.dtype)
    hp = eptr(half, 0)
    vr = _kw_ranges(kw_n, dw, pw, 2, wd, ow_n)
    for c in range(cg):
        for kh in range(kh_n):
            for i in range(nr):
                ih = (r0 + i) * sh - ph + kh * dh
                inside = 0 <= ih < h
                if inside:
                    src = eptr(xg, (c * h + ih) * wd)
                    for j in range(ne):
                        hp[j] = src[2 * j]
                    for j in range(wd - ne):
                        hp[ne + j] = src[2 * j + 1]
                for kw in range(kw_n):
                    row = (c * kh_n + kh) * kw_n + kw
                    d = eptr(col3, (row * nr + i) * ow_n)
                    off_w = kw * dw - pw
                    ow0 = vr[2 * kw]
                    ow1 = vr[2 * kw + 1]
                    if not inside or ow1 <= ow0:
                        for ow in range(ow_n):
                            d[ow] = 0
                        continue
                    for ow in range(ow0):
                        d[ow] = 0
                    # input column 2 * ow + off_w: even half at ow + off_w // 2, odd half at
                    # ow + (off_w - 1) // 2
                    base = off_w // 2 if off_w % 2 == 0 else ne + (off_w - 1) // 2
                    ss = eptr(half, base + ow0)
                    dd = eptr(col3, (row * nr + i) * ow_n + ow0)
                    for j in range(ow1 - ow0):
                        dd[j] = ss[j]
                    for ow in range(ow1, ow_n):
                        d[ow] = 0


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _im2col_flat_s1(xg, colw, coff, r0, nr, kh_n, kw_n, ph, pw, dh, dw):
    """``_im2col_flat`` at stride 1 with OW <= W: output (i, j) at column i * W + j, so tap
    (kh, kw) reads the input plane at a fixed offset (kh * dh - ph) * W + kw * dw - pw from
    it: one contiguous copy of the tap's valid rows, then the columns that wrapped around a
    row end (input column outside [0, W)) are zeroed, a few per row. Columns j >= OW are
    computed and dropped."""
    cg, h, wd = xg.shape
    nq = nr * wd
    hw = h * wd
    z = xg.dtype.type(0)
    for c in range(cg):
        for kh in range(kh_n):
            ro = kh * dh - ph
            ia = min(max(r0, -ro), r0 + nr)      # output rows whose input row is in [0, H)
            ib = max(ia, min(r0 + nr, h - ro))
            qa = (ia - r0) * wd
            qb = (ib - r0) * wd
            for kw in range(kw_n):
                co = kw * dw - pw
                d = eptr(colw, coff + ((c * kh_n + kh) * kw_n + kw) * nq)
                base = (r0 + ro) * wd + co       # input index of column q: base + q
                lo = min(max(qa, -base), qb)     # (never read outside the plane)
                hi = max(lo, min(qb, hw - base))
                for q in range(lo):
                    d[q] = z
                src = eptr(xg, c * hw + base)
                for q in range(lo, hi):
                    d[q] = src[q]
                for q in range(hi, nq):
                    d[q] = z
                if co < 0:                       # left columns read the previous row's end
                    nz = min(-co, wd)
                    for i in range(ia - r0, ib - r0):
                        for j in range(nz):
                            d[i * wd + j] = z
                elif co > 0:                     # right columns read the next row's start
                    j0 = max(0, wd - co)
                    for i in range(ia - r0, ib - r0):
                        for j in range(j0, wd):
                            d[i * wd + j] = z


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _im2col_flat(xg, colw, coff, poff, r0, nr, kh_n, kw_n, ow_n, sh, sw, ph, pw, dh, dw):
    """Flat im2col of output rows [r0, r0 + nr) from xg (Cg', H, W) into colw[coff:]:
    (Cg' * KH * KW) rows of nr * wq elements, output (i, j) at column i * wq + j.

    The channels' zero-padded input rows are first copied once into colw[poff:], split into
    stride phases (padded pixel (r0 * sh + rr * sh + a, jj * sw + b) goes to phase (a, b) at
    (rr, jj)). Tap (kh, kw) of output (i, j) then reads phase (kh * dh % sh, kw * dw % sw) at
    (i + kh * dh // sh, j + kw * dw // sw): the same offset from i * wq + j for every output,
    so each im2col row is one contiguous copy."""
    cg, h, wd = xg.shape
    wq, hq = _flat_geom(nr, kh_n, kw_n, ow_n, sh, sw, dh, dw, wd)
    pe = hq * wq
    nq = nr * wq
    z = xg.dtype.type(0)
    if hq == 0:
        _im2col_flat_s1(xg, colw, coff, r0, nr, kh_n, kw_n, ph, pw, dh, dw)
        return
    pz = eptr(colw, poff)
    for i in range(cg * sh * sw * pe):   # one contiguous fill: the padding stays zero
        pz[i] = z
    # input rows and columns that land in the phase planes (padded row R = ih + ph - r0 * sh
    # in [0, hq * sh), padded column J = j + pw in [0, wq * sw))
    ih0 = max(0, r0 * sh - ph)
    ih1 = min(h, r0 * sh - ph + hq * sh)
    j0 = max(0, -pw)
    j1 = min(wd, wq * sw - pw)
    if ih1 <= ih0 or j1 <= j0:
        ih1 = ih0
    jl = j0 + pw                         # [jl, jh): padded columns copied
    jh = j1 + pw
    t0 = (jl + 1) // 2                   # stride 2: whole (even, odd) pairs 2t, 2t + 1
    t1 = jh // 2
    # only the phases some tap reads are filled (a strided 1x1 reads one of sh * sw)
    rows_used = np.zeros(sh, np.bool_)
    for kh in range(kh_n):
        rows_used[(kh * dh) % sh] = True
    cols_used = 0
    for kw in range(kw_n):
        cols_used |= 1 << ((kw * dw) % sw) if sw <= 62 else 0
    both = sw == 2 and cols_used == 3
    for c in range(cg):
        r = ih0 + ph - r0 * sh
        a = r % sh
        rr = r // sh
        for ih in range(ih0, ih1):
            src = eptr(xg, (c * h + ih) * wd - pw)       # src[J]: padded column J
            d = eptr(colw, poff + (c * sh + a) * sw * pe + rr * wq)  # phase (a, 0), row rr
            if not rows_used[a]:
                pass
            elif sw == 1:
                for jj in range(jl, jh):
                    d[jj] = src[jj]
            elif sw == 2 and not both:
                f = 0 if cols_used == 1 else 1
                do = eptr(colw, poff + ((c * sh + a) * sw + f) * pe + rr * wq)
                for t in range((jl - f + 1) // 2, (jh - f + 1) // 2):
                    do[t] = src[2 * t + f]
            elif sw == 2:
                # both column phases in one pass (LLVM loads each pair of columns once)
                for t in range(t0, t1):
                    d[t] = src[2 * t]
                    d[pe + t] = src[2 * t + 1]
                if jl % 2 == 1:
                    d[pe + jl // 2] = src[jl]
                if jh % 2 == 1 and jh - 1 >= jl:
                    d[(jh - 1) // 2] = src[jh - 1]
            else:
                for jj in range(jl, jh):
                    d[(jj % sw) * pe + jj // sw] = src[jj]
            a += 1
            if a == sh:
                a = 0
                rr += 1
    for c in range(cg):
        for kh in range(kh_n):
            vr = kh * dh
            for kw in range(kw_n):
                vc = kw * dw
                src = eptr(colw, poff + ((c * sh + vr % sh) * sw + vc % sw) * pe
                           + (vr // sh) * wq + vc // sw)
                dst = eptr(colw, coff + ((c * kh_n + kh) * kw_n + kw) * nq)
                for q in range(nq):
                    dst[q] = src[q]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _flat_store(colw, toff, out, res, b, n, m0, m1, r0, nr, wq, has_bias, has_res, act, aa,
                ab):
    """Output channels [m0, m1) of image n from the flat gemm block colw[toff:] (row m - m0
    of nr * wq columns) into output rows [r0, r0 + nr), dropping the wq - OW extra columns of
    each row, with bias, residual and activation."""
    m_n = out.shape[1]
    oh_n, ow_n = out.shape[2], out.shape[3]
    s = oh_n * ow_n
    nq = nr * wq
    z = out.dtype.type(0)
    for m in range(m0, m1):
        src = eptr(colw, toff + (m - m0) * nq)
        off = (n * m_n + m) * s + r0 * ow_n
        d = eptr(out, off)
        rp = eptr(res, off) if has_res else d
        bv = b[m] if has_bias else z
        for i in range(nr):
            si = i * wq
            di = i * ow_n
            if act == 1:
                for j in range(ow_n):
                    v = src[si + j] + bv + (rp[di + j] if has_res else z)
                    d[di + j] = z if v < z else v
            else:
                for j in range(ow_n):
                    d[di + j] = src[si + j] + bv + (rp[di + j] if has_res else z)
        if act > 1:
            o1 = out.reshape(-1)
            act_row(o1[off:off + nr * ow_n], act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _epilogue_row(row, bv, has_bias, rrow, has_res, act, aa, ab):
    """row += bv (has_bias) + rrow (has_res), then activation ``act``; 1-D contiguous.
    Relu (the common case) is applied in the same pass as the additions."""
    n = row.shape[0]
    if act == 1:
        z = row.dtype.type(0)
        if has_res:
            for j in range(n):
                v = row[j] + bv + rrow[j]
                row[j] = z if v < z else v
        else:
            for j in range(n):
                v = row[j] + bv
                row[j] = z if v < z else v
        return
    if has_bias and has_res:
        for j in range(n):
            row[j] += bv + rrow[j]
    elif has_bias:
        for j in range(n):
            row[j] += bv
    elif has_res:
        for j in range(n):
            row[j] += rrow[j]
    if act != 0:
        act_row(row, act, aa, ab)


@njit(inline='always')
def _epi_args(has_bias, has_res, act, alpha, beta):
    """The epilogue flags and parameters in the types the inner kernels are compiled for, so
    literal arguments do not compile another specialization of them."""
    return bool(has_bias), bool(has_res), np.int64(act), np.float64(alpha), np.float64(beta)


@njit(inline='always')
def _span(blk, bs, n):
    """[lo, hi) of block ``blk`` of ``bs`` items among n (empty past the end)."""
    lo = blk * bs
    return lo, min(n, lo + bs)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _no_taps(out, b, res, s, has_bias, has_res, act, aa, ab):
    """out (N, M, ...) of a convolution without taps (no input channels or an empty kernel):
    the epilogue applied to zeros, one (image, channel) row of s outputs at a time."""
    n_n, m_n = out.shape[0], out.shape[1]
    o3 = out.reshape(n_n, m_n, s)
    r3 = res.reshape(res.shape[0], res.shape[1], s)
    for n in range(n_n):
        for m in range(m_n):
            row = o3[n, m]
            for j in range(s):
                row[j] = 0
            _epilogue_row(row, b[m] if has_bias else out.dtype.type(0), has_bias,
                          r3[n, m] if has_res else row, has_res, act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _direct_rows(x, w, out, n, g, r0, r1, sh, sw, ph, pw, dh, dw, group):
    """out[n, g*mg:(g+1)*mg, r0:r1] = the convolution of those rows, without im2col: per
    output row, each (input channel, kh, kw) tap adds its weight times the shifted input row
    into the group's output rows (which stay in L1)."""
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    m_n, cg, kh_n, kw_n = w.shape
    oh_n = out.shape[2]
    ow_n = out.shape[3]
    mg = m_n // group
    z = out.dtype.type(0)
    vr = _kw_ranges(kw_n, dw, pw, sw, wd, ow_n)
    for r in range(r0, r1):
        for mm in range(mg):
            d = eptr(out, ((n * m_n + g * mg + mm) * oh_n + r) * ow_n)
            for j in range(ow_n):
                d[j] = z
        for c in range(cg):
            for kh in range(kh_n):
                ih = r * sh - ph + kh * dh
                if ih < 0 or ih >= h:
                    continue
                xbase = ((n * c_n + g * cg + c) * h + ih) * wd
                for kw in range(kw_n):
                    off = kw * dw - pw
                    lo = vr[2 * kw]
                    nj = vr[2 * kw + 1] - lo
                    if nj <= 0:
                        continue
                    xp = eptr(x, xbase + lo * sw + off)
                    for mm in range(mg):
                        wv = w[g * mg + mm, c, kh, kw]
                        d = eptr(out, ((n * m_n + g * mg + mm) * oh_n + r) * ow_n + lo)
                        if sw == 1:
                            for j in range(nj):
                                d[j] += wv * xp[j]
                        else:
                            for j in range(nj):
                                d[j] += wv * xp[j * sw]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _conv_task(t, nb, bs, x, w, b, res, out, colw, last, sh, sw, ph, pw, dh, dw, group,
               has_bias, has_res, act, aa, ab, path, cc):
    """Task t = ((n * group + g) * nb + blk) of image n, group g; gemm in place into ``out``.

    path 0 (rows): output rows [blk * bs, ...), im2col of just those rows into colw.
    path 1 (pointwise): spatial columns [blk * bs, ...), gemm straight on x.
    path 4 (pointwise, split over output channels): output channels [blk * bs, ...) of the
    group, all columns, gemm straight on x.
    path 3 (direct): output rows [blk * bs, ...) by _direct_rows, no im2col (few output
    channels per group).
    path 2 (plane): output channels [blk * bs, ...) of the group; colw holds the im2col of
    the whole plane, rebuilt only when the worker's previous task (``last[0]``) was another
    (n, g) -- for small planes with big weights, where splitting the columns would make each
    task repack all the weights. With ``cc`` < C/group input channels per chunk the plane is
    im2col'ed chunk by chunk, each chunk's gemm accumulating into the block (no reuse).
    """
    n_n, c_n, h, wd = x.shape
    m_n, cg, kh_n, kw_n = w.shape
    oh_n = out.shape[2]
    ow_n = out.shape[3]
    s = oh_n * ow_n
    mg = m_n // group
    kdim = cg * kh_n * kw_n
    n, g, blk = task_split(t, nb, group)
    ng = t // nb  # the (image, group) plane whose im2col ``last`` remembers
    m0 = 0
    m1 = mg
    if path == 2 or path == 4 or path == 6:   # a block of the group's output channels
        m0, m1 = _span(blk, bs, mg)
        if m1 <= m0:
            return
        s0 = np.int64(0)  # (a literal 0 compiles _rows_epilogue once more)
        s1 = s
    if path == 3:
        r0, r1 = _span(blk, bs, oh_n)
        if r1 <= r0:
            return
        s0, s1 = r0 * ow_n, r1 * ow_n
        _direct_rows(x, w, out, n, g, r0, r1, sh, sw, ph, pw, dh, dw, group)
        st = 0
    elif path == 1:
        s0, s1 = _span(blk, bs, s)
        if s1 <= s0:
            return
        st = xgemm(0, 0, mg, s1 - s0, kdim, 1.0, w, g * mg * kdim, kdim,
                   x, (n * c_n + g * cg) * s + s0, s, 0.0, out, (n * m_n + g * mg) * s + s0, s)
    elif path == 4:
        st = xgemm(0, 0, m1 - m0, s, kdim, 1.0, w, (g * mg + m0) * kdim, kdim,
                   x, (n * c_n + g * cg) * s, s, 0.0, out, (n * m_n + g * mg + m0) * s, s)
    elif path == 2:
        khw = kh_n * kw_n
        st = 0
        for c0 in range(0, cg, cc):
            c1 = min(cg, c0 + cc)
            kr = (c1 - c0) * khw
            if cc < cg or last[0] != ng:
                col3 = colw[:kr * s].reshape(kr, oh_n, ow_n)
                _im2col_rows(x[n, g * cg + c0:g * cg + c1], col3, np.int64(0), kh_n, kw_n, sh,
                             sw, ph, pw, dh, dw)
                last[0] = ng
            st |= xgemm(0, 0, m1 - m0, s, kr, 1.0, w, (g * mg + m0) * kdim + c0 * khw, kdim,
                        colw, 0, s, 0.0 if c0 == 0 else 1.0, out,
                        (n * m_n + g * mg + m0) * s, s)
    elif path == 5 or path == 6:
        # flat im2col (_im2col_flat): colw = [im2col | phase planes | gemm block], the block
        # compacted into out with the epilogue by _flat_store
        if path == 5:
            r0 = blk * bs
            nr = min(oh_n, r0 + bs) - r0
            kc = cg
            if nr <= 0:
                return
        else:
            r0, nr = np.int64(0), oh_n
            kc = cc
        khw = kh_n * kw_n
        wq, hq = _flat_geom(nr, kh_n, kw_n, ow_n, sh, sw, dh, dw, wd)
        nq = nr * wq
        poff = kc * khw * nq
        toff = poff + kc * sh * sw * hq * wq
        st = 0
        for c0 in range(0, cg, kc):
            c1 = min(cg, c0 + kc)
            if path == 5 or kc < cg or last[0] != ng:
                _im2col_flat(x[n, g * cg + c0:g * cg + c1], colw, np.int64(0), poff, r0, nr, kh_n,
                             kw_n, ow_n, sh, sw, ph, pw, dh, dw)
                last[0] = ng
            st |= xgemm(0, 0, m1 - m0, nq, (c1 - c0) * khw, 1.0, w,
                        (g * mg + m0) * kdim + c0 * khw, kdim, colw, 0, nq,
                        0.0 if c0 == 0 else 1.0, colw, toff, nq)
        if st != 0:
            raise RuntimeError("BLAS gemm failed")
        _flat_store(colw, toff, out, res, b, n, g * mg + m0, g * mg + m1, r0, nr, wq,
                    has_bias, has_res, act, aa, ab)
        return
    else:
        r0, r1 = _span(blk, bs, oh_n)
        if r1 <= r0:
            return
        s0, s1 = r0 * ow_n, r1 * ow_n
        sb = s1 - s0
        col3 = colw[:kdim * sb].reshape(kdim, r1 - r0, ow_n)
        _im2col_rows(x[n, g * cg:(g + 1) * cg], col3, r0, kh_n, kw_n, sh, sw, ph, pw, dh, dw)
        # jitort's gemm (float32): the weights are read in place, the block's columns packed
        # once; on these layers (strided, 5x5, 7x7, dilated) it keeps up with the BLAS
        st = ogemm(0, 0, mg, sb, kdim, 1.0, w, g * mg * kdim, kdim,
                   colw, 0, sb, 0.0, out, (n * m_n + g * mg) * s + s0, s)
    if st != 0:
        raise RuntimeError("BLAS gemm failed")
    _rows_epilogue(out, res, b, n, g * mg + m0, g * mg + m1, s0, s1, has_bias, has_res, act, aa,
                   ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _rows_epilogue(out, res, b, n, ma, mb, s0, s1, has_bias, has_res, act, aa, ab):
    """Bias, residual and activation on output channels [ma, mb) of image n, positions
    [s0, s1) of each plane."""
    if not (has_bias or has_res or act != 0):
        return
    # rows through raw pointers: two array views per row (their reference counting) cost more
    # than the row's arithmetic on small planes
    m_n = out.shape[1]
    s = out.shape[2] * out.shape[3]
    nn = s1 - s0
    z = out.dtype.type(0)
    for m in range(ma, mb):
        off = (n * m_n + m) * s + s0
        bv = b[m] if has_bias else z
        d = eptr(out, off)
        rp = eptr(res, off) if has_res else d
        if act == 1:
            for j in range(nn):
                v = d[j] + bv + (rp[j] if has_res else z)
                d[j] = z if v < z else v
        elif act == 0:
            for j in range(nn):
                d[j] += bv + (rp[j] if has_res else z)
        else:
            o1 = out.reshape(-1)
            _epilogue_row(o1[off:off + nn], bv, has_bias,
                          res.reshape(-1)[off:off + nn] if has_res else o1[off:off + nn],
                          has_res, act, aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _conv_par(nw, ntask, nb, bs, x, w, b, res, out, col, cap, sh, sw, ph, pw, dh, dw, group,
              has_bias, has_res, act, aa, ab, path, cc):
    """nw workers, each with scratch col[wk*cap:(wk+1)*cap], pull tasks from a shared
    counter (dynamic scheduling, see ``gemm.next_task``)."""
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        last = np.full(1, -1, np.int64)
        pull_tasks(counter, ntask, _conv_task,
                   (nb, bs, x, w, b, res, out, col[wk * cap:(wk + 1) * cap], last, sh, sw, ph, pw,
                    dh, dw, group, has_bias, has_res, act, aa, ab, path, cc))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _plane_phased_worker(x, w, b, res, out, col, wblk, ctr, sh, sw, ph, pw, dh, dw, group,
                         has_bias, has_res, act, aa, ab, flat, ccs, mbs):
    """One worker of :func:`_plane_phased`. Per plane q = (image, group), two phases: claim
    chunks of ``ccs`` input channels of the plane's im2col into the shared ``col``
    (``ctr[0, q]``, done counted in ``ctr[1, q]``), wait for all of them, then claim blocks
    of ``mbs`` output channels (``ctr[2, q]``, done in ``ctr[3, q]``): one gemm each, then
    the epilogue (``flat``: the gemm block goes to ``wblk`` and ``_flat_store`` compacts it).
    The next plane's im2col waits until every block of this one is done. A worker waits
    only for chunks a running worker claimed: one worker alone does everything."""
    n_n = x.shape[0]
    m_n, cg, kh_n, kw_n = w.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    s = oh_n * ow_n
    mg = m_n // group
    khw = kh_n * kw_n
    kdim = cg * khw
    wq, hq = _flat_geom(oh_n, kh_n, kw_n, ow_n, sh, sw, dh, dw, x.shape[3])
    nq = oh_n * wq if flat else s
    poff = kdim * nq
    pe = hq * wq
    ncc = _ceil_div(cg, ccs)
    nmb = _ceil_div(mg, mbs)
    for q in range(n_n * group):
        n = q // group
        g = q - n * group
        if q > 0:
            wait_count(ctr[3], q - 1, nmb)
        j = claim_below(ctr[0], q, ncc)
        while j >= 0:
            c0, c1 = _span(j, ccs, cg)
            xg = x[n, g * cg + c0:g * cg + c1]
            if flat:
                _im2col_flat(xg, col, c0 * khw * nq, poff + c0 * sh * sw * pe, np.int64(0),
                             oh_n, kh_n, kw_n, ow_n, sh, sw, ph, pw, dh, dw)
            else:
                _im2col_rows(xg, col[c0 * khw * s:c1 * khw * s].reshape((c1 - c0) * khw, oh_n,
                                                                        ow_n),
                             np.int64(0), kh_n, kw_n, sh, sw, ph, pw, dh, dw)
            count_done(ctr[1], q)
            j = claim_below(ctr[0], q, ncc)
        wait_count(ctr[1], q, ncc)
        j = claim_below(ctr[2], q, nmb)
        while j >= 0:
            m0, m1 = _span(j, mbs, mg)
            if flat:
                st = xgemm(0, 0, m1 - m0, nq, kdim, 1.0, w, (g * mg + m0) * kdim, kdim, col, 0,
                           nq, 0.0, wblk, 0, nq)
            else:
                st = xgemm(0, 0, m1 - m0, s, kdim, 1.0, w, (g * mg + m0) * kdim, kdim, col, 0,
                           s, 0.0, out, (n * m_n + g * mg + m0) * s, s)
            if st != 0:
                raise RuntimeError("BLAS gemm failed")
            if flat:
                _flat_store(wblk, np.int64(0), out, res, b, n, g * mg + m0, g * mg + m1,
                            np.int64(0), oh_n, wq, has_bias, has_res, act, aa, ab)
            else:
                _rows_epilogue(out, res, b, n, g * mg + m0, g * mg + m1, np.int64(0), s, has_bias,
                               has_res, act, aa, ab)
            count_done(ctr[3], q)
            j = claim_below(ctr[2], q, nmb)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _plane_phased(nw, x, w, b, res, out, col, shared, wcap, ctr, sh, sw, ph, pw, dh, dw, group,
                  has_bias, has_res, act, aa, ab, flat, ccs, mbs):
    """Small planes with fewer (image, group) planes than threads (or an uneven few): the
    threads share each plane's im2col (``col[:shared]``) and split its output channels
    (:func:`_plane_phased_worker`; ``wcap`` elements of gemm block per worker after it)
    instead of each building the whole im2col for its block of output channels."""
    for wk in prange(nw):
        _plane_phased_worker(x, w, b, res, out, col[:shared],
                             col[shared + wk * wcap:shared + (wk + 1) * wcap], ctr, sh, sw, ph,
                             pw, dh, dw, group, has_bias, has_res, act, aa, ab, flat, ccs, mbs)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_flat_geom(kh_n, kw_n, oh_n, ow_n, sh, sw, dh, dw):
    """Layout of ``_dw_flat``'s scratch: (hp, wp, wq, pe) = rows and columns of the padded
    plane, the row length of its stride phases, elements per phase (one slack row)."""
    hp = (oh_n - 1) * sh + (kh_n - 1) * dh + 1
    wp = (ow_n - 1) * sw + (kw_n - 1) * dw + 1
    wq = (wp + sw - 1) // sw
    return hp, wp, wq, (oh_n + ((kh_n - 1) * dh) // sh + 1) * wq


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_flat_scratch(x, w, out, sh, sw, dh, dw):
    """Per-worker scratch of ``_dw_flat``: (phase planes, accumulator)."""
    kh_n, kw_n = w.shape[2], w.shape[3]
    oh_n, ow_n = out.shape[2], out.shape[3]
    hp, wp, wq, pe = _dw_flat_geom(kh_n, kw_n, oh_n, ow_n, sh, sw, dh, dw)
    # zeroed once: the phases the taps do not use and the slack past the planes are never
    # written, and the whole vectors of ``_dw_rows`` read them (into outputs dropped)
    return (np.zeros(sh * sw * pe + _DW_SLACK, x.dtype),
            np.empty(oh_n * wq + _DW_SLACK, x.dtype))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_flat_offsets(kh_n, kw_n, sh, sw, dh, dw, wq, pe):
    """Offsets of the taps (row-major) in ``_dw_flat``'s phase planes, from output
    i * wq + j: tap (kh, kw) reads phase (kh*dh % sh, kw*dw % sw) at
    (i + kh*dh // sh, j + kw*dw // sw)."""
    offs = np.empty(kh_n * kw_n, np.int64)
    for kh in range(kh_n):
        vr = kh * dh
        for kw in range(kw_n):
            vc = kw * dw
            offs[kh * kw_n + kw] = (((vr % sh) * sw + vc % sw) * pe + (vr // sh) * wq
                                    + vc // sw)
    return offs


#: output rows per pass of ``_dw_rows`` (each input row vector it loads serves up to this
#: many of them) and the square kernels / strides it has code for (no dilation)
_DW_ROWS = 4
_DW_ROWS_KS = ((3, 1), (5, 1), (7, 1), (3, 2), (5, 2), (7, 2))
# (``python scripts/sweeps/compare_depthwise.py`` compares it with onnxruntime)
#: kernel rows per pass of ``_dw_rows``, by (kernel, stride): a pass's weight broadcasts, the 4
#: accumulators and the input vector in the 32 vector registers (49 do not fit)
_DW_ROW_GROUPS = {(3, 1): ((0, 1, 2),), (5, 1): ((0, 1, 2, 3, 4),),
                  (7, 1): ((0, 1, 2), (3, 4), (5, 6)), (3, 2): ((0, 1, 2),),
                  (5, 2): ((0, 1, 2, 3, 4),), (7, 2): ((0, 2), (4, 6), (1, 3, 5))}
#: scratch elements past ``_dw_flat``'s planes and accumulator: ``_dw_rows`` computes whole
#: vectors, up to one vector past a row's last column
_DW_SLACK = 64


def _dw_uses(kk, ss, rr, grp):
    """(phase row a, phase column e, phase-plane row u, column m) -> [(output row r, kernel
    row, kernel column)] for the taps of kernel rows ``grp``: the input vectors one pass of
    ``_dw_rows`` loads, each once, and the products each one feeds (plain Python)."""
    uses = {}
    for r in range(rr):
        for ki in grp:
            for kj in range(kk):
                key = (ki % ss, kj % ss, r + ki // ss, kj // ss)
                uses.setdefault(key, []).append((r, ki, kj))
    return sorted(uses.items())


@intrinsic
def _dw_rows(typingctx, a, aoff, xz, xoff, wq, nq, w, woff, k, r_n, bias, stride, pe):
    """Register-blocked depthwise stencil on ``_dw_flat``'s flat padded stride-phase planes
    (no dilation, k x k and stride in _DW_ROWS_KS; phase (i, j) of the sh = sw = stride phases
    starts at xoff + (i*stride + j)*pe): for r < r_n (1.._DW_ROWS) and positions q in [0, nq)
    (whole vectors, the last one masked), a[aoff + r*wq + q] = bias + the sum over taps (ki,
    kj) of w[woff + ki*k + kj] * (phase (ki % stride, kj % stride) at row r + ki // stride,
    column q + kj // stride). Each input vector is loaded once and multiplied into every
    output row that uses it (stride 1, 7x7: 10 rows x 7 loads for 4 x 49 FMAs; the
    one-tap-group-per-pass loop loads 1.25 operands per FMA and reloads the accumulator)."""
    if not all(isinstance(t, types.Array) for t in (a, xz, w)):
        return None
    dt = a.dtype
    if dt not in (types.float32, types.float64) or xz.dtype != dt or w.dtype != dt:
        return None
    sig = types.void(a, aoff, xz, xoff, wq, nq, w, woff, k, r_n, bias, stride, pe)

    def codegen(context, builder, sig, args):
        a_, aoff_, xz_, xoff_, wq_, nq_, w_, woff_, k_, rn_, bias_, st_, pe_ = args
        at = sig.args
        i32, i64 = ir.IntType(32), ir.IntType(64)
        elt = context.get_value_type(dt)
        lanes = 16 if dt == types.float32 else 8
        vt = ir.VectorType(elt, lanes)
        suffix = f"v{lanes}f{32 if dt == types.float32 else 64}"
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3),
                                             f"llvm.fma.{suffix}")

        def as64(v, j):
            return context.cast(builder, v, at[j], types.int64)

        def ptr(j, arr, off):
            data = make_array(at[j])(context, builder, arr).data
            return builder.gep(data, [context.cast(builder, off, at[j + 1], types.intp)])

        abase, xbase, wbase = ptr(0, a_, aoff_), ptr(2, xz_, xoff_), ptr(6, w_, woff_)
        wq64, nq64, pe64 = as64(wq_, 4), as64(nq_, 5), as64(pe_, 12)
        bval = context.cast(builder, bias_, at[10], dt)

        lane_idx = ir.Constant(ir.VectorType(i64, lanes), list(range(lanes)))
        mstore = masked_store(builder, vt)
        key = builder.add(builder.add(builder.mul(as64(k_, 8), ir.Constant(i64, 8)),
                                      as64(rn_, 9)),
                          builder.mul(as64(st_, 11), ir.Constant(i64, 128)))
        exit_ = builder.append_basic_block("dw.exit")
        switch = builder.switch(key, exit_)
        for kk, ss in _DW_ROWS_KS:
            for rr in range(1, _DW_ROWS + 1):
                tag = f"{kk}x{rr}s{ss}"
                blk = builder.append_basic_block(f"dw.{tag}")
                switch.add_case(ir.Constant(i64, ss * 128 + kk * 8 + rr), blk)
                builder.position_at_end(blk)
                bv = splat(builder, bval, lanes)
                rows = [builder.mul(wq64, ir.Constant(i64, r)) for r in range(rr)]
                # one pass per group of kernel rows, so that the group's weights stay in
                # registers with the accumulators
                for gi, grp in enumerate(_DW_ROW_GROUPS[(kk, ss)]):
                    wts = {(ki, kj): splat(builder, builder.load(
                        builder.gep(wbase, [ir.Constant(i64, ki * kk + kj)])), lanes)
                        for ki in grp for kj in range(kk)}
                    uses = _dw_uses(kk, ss, rr, grp)
                    # a row's start (phase, row) outside the loop, its columns as constant
                    # displacements (a start per tap leaves 7x7 short of registers)
                    rowoff = {}
                    for key, _ in uses:
                        if key[:3] not in rowoff:
                            rowoff[key[:3]] = builder.add(
                                builder.mul(pe64, ir.Constant(i64, key[0] * ss + key[1])),
                                builder.mul(wq64, ir.Constant(i64, key[2])))
                    q, _, loop, after = loop_begin(builder, nq64, f"dw.loop.{tag}.{gi}",
                                                   f"dw.after.{tag}.{gi}")
                    dsts = [builder.bitcast(builder.gep(abase, [builder.add(rows[r], q)]),
                                            vt.as_pointer()) for r in range(rr)]
                    acc = ([bv] * rr if gi == 0 else
                           [builder.load(d, align=1) for d in dsts])
                    bases = {rk: builder.gep(xbase, [builder.add(ro, q)])
                             for rk, ro in rowoff.items()}
                    for key, prods in uses:
                        xv = builder.load(builder.bitcast(
                            builder.gep(bases[key[:3]], [ir.Constant(i64, key[3])]),
                            vt.as_pointer()), align=1)
                        for r, ki, kj in prods:
                            acc[r] = builder.call(fma, [wts[(ki, kj)], xv, acc[r]])
                    # the last vector of a row stops at nq: past it are the next row's
                    # first columns, which that row's own pass accumulates
                    left = builder.sub(nq64, q)
                    mask = builder.icmp_signed('<', lane_idx, splat(builder, left, lanes))
                    for r in range(rr):
                        builder.call(mstore, [acc[r], dsts[r], ir.Constant(i32, 1), mask])
                    loop_end(builder, q, lanes, nq64, loop, after)
                builder.branch(exit_)
        builder.position_at_end(exit_)
        return context.get_dummy_value()
    return sig, codegen


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_flat(p, x, w, b, res, out, xs, acc, offs, phases, geo, sh, sw, ph, pw, dh, dw,
             has_bias, has_res, act, aa, ab):
    """Depthwise plane p = n * C + c as one flat stencil.

    The zero-padded plane is split into its sh * sw stride phases (padded pixel (r, j) goes
    to phase (r % sh, j % sw) at (r // sh, j // sw)), each with rows of ``wq`` elements. In
    that layout tap (kh, kw) of output (i, j) reads the same offset from i * wq + j for
    every output (``_dw_flat_offsets``). So the whole plane is one loop over oh * wq
    positions (the wq - ow extra columns of each row are computed and dropped), long and
    contiguous whatever the plane's width and stride, where a row-by-row kernel runs loops
    of ow (7 or 14 in the corpus) and a channels-last one pays two transposes. Bias,
    residual and activation are applied while the rows are copied out. Every access goes
    through raw pointers off one base per buffer (no views: their reference counting costs
    more than a 7x7 plane's arithmetic), and no integer division runs per row."""
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    kh_n, kw_n = w.shape[2], w.shape[3]
    oh_n, ow_n = out.shape[2], out.shape[3]
    c = p % c_n
    hp, wp, wq, pe = _dw_flat_geom(kh_n, kw_n, oh_n, ow_n, sh, sw, dh, dw)
    # 512-bit vectors where the CPU has them (LLVM picks 256): the accumulation loops are
    # bound by vector width
    wide_vectors()
    z = x.dtype.type(0)
    xz = eptr(xs, 0)
    # the plane into its stride phases, padding included, as masked vector rows (element by
    # element, with the scratch zeroed first, this would be most of a stride-2 layer's time)
    phase_planes_at(x, p * h * wd, xs, 0, z, 1, h, wd, sh, sw, ph, pw, pe // wq, wq, phases,
                    geo)
    n_acc = oh_n * wq
    bv = b[c] if has_bias else z
    a = eptr(acc, 0)
    if (kh_n == kw_n and sh == sw and dh == 1 and dw == 1
            and ((sh == 1 and (kh_n == 3 or kh_n == 5 or kh_n == 7))
                 or (sh == 2 and (kh_n == 3 or kh_n == 5 or kh_n == 7)))):
        for r0 in range(0, oh_n, _DW_ROWS):
            _dw_rows(acc, r0 * wq, xs, r0 * wq, wq, wq, w, c * kh_n * kw_n, kh_n,
                     min(_DW_ROWS, oh_n - r0), bv, sh, pe)
    elif kh_n == 3 and kw_n == 3:
        o0, o1, o2, o3, o4 = offs[0], offs[1], offs[2], offs[3], offs[4]
        o5, o6, o7, o8 = offs[5], offs[6], offs[7], offs[8]
        w0, w1, w2 = w[c, 0, 0, 0], w[c, 0, 0, 1], w[c, 0, 0, 2]
        w3, w4, w5 = w[c, 0, 1, 0], w[c, 0, 1, 1], w[c, 0, 1, 2]
        w6, w7, w8 = w[c, 0, 2, 0], w[c, 0, 2, 1], w[c, 0, 2, 2]
        for q in range(n_acc):
            a[q] = (bv + w0 * xz[q + o0] + w1 * xz[q + o1] + w2 * xz[q + o2]
                    + w3 * xz[q + o3] + w4 * xz[q + o4] + w5 * xz[q + o5]
                    + w6 * xz[q + o6] + w7 * xz[q + o7] + w8 * xz[q + o8])
    else:
        # up to eight taps per pass over the accumulator (taps in row-major order, each at its
        # own offset): one pass per tap left 5x5 and 7x7 planes bound by the accumulator's
        # loads and stores (three memory operations per multiply-add)
        for q in range(n_acc):
            a[q] = bv
        wc = eptr(w, c * kh_n * kw_n)
        ntap = kh_n * kw_n
        t = 0
        while t < ntap:
            left = ntap - t
            o0, w0 = offs[t], wc[t]
            if left >= 8:
                o1, o2, o3 = offs[t + 1], offs[t + 2], offs[t + 3]
                o4, o5, o6, o7 = offs[t + 4], offs[t + 5], offs[t + 6], offs[t + 7]
                w1, w2, w3 = wc[t + 1], wc[t + 2], wc[t + 3]
                w4, w5, w6, w7 = wc[t + 4], wc[t + 5], wc[t + 6], wc[t + 7]
                for q in range(n_acc):
                    a[q] += (w0 * xz[q + o0] + w1 * xz[q + o1] + w2 * xz[q + o2]
                             + w3 * xz[q + o3] + w4 * xz[q + o4] + w5 * xz[q + o5]
                             + w6 * xz[q + o6] + w7 * xz[q + o7])
                t += 8
            elif left >= 4:
                o1, o2, o3 = offs[t + 1], offs[t + 2], offs[t + 3]
                w1, w2, w3 = wc[t + 1], wc[t + 2], wc[t + 3]
                for q in range(n_acc):
                    a[q] += (w0 * xz[q + o0] + w1 * xz[q + o1] + w2 * xz[q + o2]
                             + w3 * xz[q + o3])
                t += 4
            elif left >= 2:
                o1, w1 = offs[t + 1], wc[t + 1]
                for q in range(n_acc):
                    a[q] += w0 * xz[q + o0] + w1 * xz[q + o1]
                t += 2
            else:
                for q in range(n_acc):
                    a[q] += w0 * xz[q + o0]
                t += 1
    s = oh_n * ow_n
    ob = eptr(out, p * s)
    rb = eptr(res, p * s) if has_res else ob
    ai = 0
    oi = 0
    for i in range(oh_n):
        if act == 1:
            if has_res:
                for j in range(ow_n):
                    v = a[ai + j] + rb[oi + j]
                    ob[oi + j] = z if v < z else v
            else:
                for j in range(ow_n):
                    v = a[ai + j]
                    ob[oi + j] = z if v < z else v
        elif has_res:
            for j in range(ow_n):
                ob[oi + j] = a[ai + j] + rb[oi + j]
        else:
            for j in range(ow_n):
                ob[oi + j] = a[ai + j]
        ai += wq
        oi += ow_n
    if act > 1:
        act_row(out.reshape(-1)[p * s:(p + 1) * s], act, aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _dw_flat_par(nw, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa,
                 ab):
    """nw workers, each with its own scratch, pull (image, channel) planes from a shared
    counter."""
    nplane = x.shape[0] * x.shape[1]
    counter = np.zeros(1, np.int64)
    kh_n, kw_n = w.shape[2], w.shape[3]
    hp, wp, wq, pe = _dw_flat_geom(kh_n, kw_n, out.shape[2], out.shape[3], sh, sw, dh, dw)
    offs = _dw_flat_offsets(kh_n, kw_n, sh, sw, dh, dw, wq, pe)
    phases, geo = phase_layout(sh, sw, dh, dw, kh_n, kw_n, x.shape[3], wq, pw)
    for wk in prange(nw):
        xs, acc = _dw_flat_scratch(x, w, out, sh, sw, dh, dw)
        pull_tasks(counter, nplane, _dw_flat, (x, w, b, res, out, xs, acc, offs, phases, geo, sh,
                                               sw, ph, pw, dh, dw, has_bias, has_res, act, aa,
                                               ab))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_cblock(t, x, w, b, res, out, xt, wt, acc, sh, sw, ph, pw, dh, dw, has_bias,
               has_res, act, aa, ab):
    """Depthwise task t: image t // blocks, channels [c0, c0 + _DW_CB) (fewer in the last
    block), vectorized across the block's channels instead of along a plane's short rows.

    Scratch (per worker): ``xt`` the block's zero-padded input planes, channels last, split
    into ``sw`` column phases (padded column j is at phase j % sw, position j // sw, so every
    tap reads a contiguous run for stride 1 or 2 alike): sw * hp * wq * _DW_CB elements;
    ``wt`` each tap's weights repeated for every output column, then the bias likewise:
    (kh * kw + 1) * ow * _DW_CB; ``acc`` one output row: ow * _DW_CB (exactly: the activation
    runs over all of it; lanes past the block's channels are never copied out). Every loop
    indexes raw pointers (no array views, whose reference counting costs more than a 7x7
    plane's arithmetic)."""
    CB = _DW_CB
    c_n, h, wd = x.shape[1], x.shape[2], x.shape[3]
    kh_n, kw_n = w.shape[2], w.shape[3]
    oh_n, ow_n = out.shape[2], out.shape[3]
    nblk = (c_n + CB - 1) // CB
    n = t // nblk
    c0 = (t - n * nblk) * CB
    cb = min(CB, c_n - c0)
    hp = (oh_n - 1) * sh + (kh_n - 1) * dh + 1
    wp = (ow_n - 1) * sw + (kw_n - 1) * dw + 1
    wq = (wp + sw - 1) // sw
    zero = x.dtype.type(0)
    xz = eptr(xt, 0)
    for i in range(sw * hp * wq * CB):
        xz[i] = zero
    i0 = min(ph, hp)
    i1 = max(i0, min(hp, ph + h))
    j0 = min(pw, wp)
    j1 = max(j0, min(wp, pw + wd))
    hw = h * wd
    for i in range(i0, i1):
        src = eptr(x, (n * c_n + c0) * hw + (i - ph) * wd - pw)
        for f in range(sw):
            # padded columns j = jj * sw + f with j0 <= j < j1; all cb channels of each
            jj0 = (j0 - f + sw - 1) // sw if j0 > f else 0
            jj1 = (j1 - f + sw - 1) // sw if j1 > f else 0
            if cb == CB:  # full block: a constant trip count, unrolled into 16 moves
                for jj in range(jj0, jj1):
                    j = jj * sw + f
                    d = eptr(xt, ((f * hp + i) * wq + jj) * CB)
                    for ci in range(CB):
                        d[ci] = src[ci * hw + j]
            else:
                for jj in range(jj0, jj1):
                    j = jj * sw + f
                    d = eptr(xt, ((f * hp + i) * wq + jj) * CB)
                    for ci in range(cb):
                        d[ci] = src[ci * hw + j]
    kk = kh_n * kw_n
    L = ow_n * CB
    wz = eptr(wt, 0)
    for i in range((kk + 1) * L):  # lanes past the block's channels stay 0, bias row too
        wz[i] = zero
    for ci in range(cb):
        wc = eptr(w, (c0 + ci) * kk)
        for k in range(kk):
            wv = wc[k]
            wr = eptr(wt, k * L + ci)
            for p in range(ow_n):
                wr[p * CB] = wv
        if has_bias:  # the bias row, laid out like the accumulator (after the taps' rows)
            bv = b[c0 + ci]
            br = eptr(wt, kk * L + ci)
            for p in range(ow_n):
                br[p * CB] = bv
    s = oh_n * ow_n
    obase = (n * out.shape[1] + c0) * s
    a = eptr(acc, 0)
    brow = eptr(wt, kk * L)
    k3 = kh_n == 3 and kw_n == 3 and dh == 1 and dw == 1
    for oh in range(oh_n):
        # bias, residual and activation are applied to the channels-last accumulator row
        # (one vectorized pass for the whole block, not one short loop per channel)
        if k3:
            # 3x3: all nine taps in one pass per output column, the block's weights (the
            # first _DW_CB of each tap's row) and bias held across it: one store per output
            # instead of one load + store per tap
            i = oh * sh
            x0 = eptr(xt, (i * wq) * CB)
            x1 = eptr(xt, (((1 % sw) * hp + i) * wq + 1 // sw) * CB)
            x2 = eptr(xt, (((2 % sw) * hp + i) * wq + 2 // sw) * CB)
            x3 = eptr(xt, ((i + 1) * wq) * CB)
            x4 = eptr(xt, (((1 % sw) * hp + i + 1) * wq + 1 // sw) * CB)
            x5 = eptr(xt, (((2 % sw) * hp + i + 1) * wq + 2 // sw) * CB)
            x6 = eptr(xt, ((i + 2) * wq) * CB)
            x7 = eptr(xt, (((1 % sw) * hp + i + 2) * wq + 1 // sw) * CB)
            x8 = eptr(xt, (((2 % sw) * hp + i + 2) * wq + 2 // sw) * CB)
            w0, w1, w2, w3, w4, w5, w6, w7, w8 = eptrs(wt, 0, L, 9)
            for p in range(ow_n):
                o = p * CB
                for ll in range(CB):
                    q = o + ll
                    a[q] = (brow[ll] + w0[ll] * x0[q] + w1[ll] * x1[q] + w2[ll] * x2[q]
                            + w3[ll] * x3[q] + w4[ll] * x4[q] + w5[ll] * x5[q]
                            + w6[ll] * x6[q] + w7[ll] * x7[q] + w8[ll] * x8[q])
        else:
            if has_bias:
                for q in range(L):
                    a[q] = brow[q]
            else:
                for q in range(L):
                    a[q] = zero
            for kh in range(kh_n):
                i = oh * sh + kh * dh
                for kw in range(kw_n):
                    off = kw * dw
                    xv = eptr(xt, (((off % sw) * hp + i) * wq + off // sw) * CB)
                    wv = eptr(wt, (kh * kw_n + kw) * L)
                    for q in range(L):
                        a[q] += wv[q] * xv[q]
        if has_res:
            for ci in range(cb):
                rr = eptr(res, obase + ci * s + oh * ow_n)
                dst = eptr(acc, ci)
                for p in range(ow_n):
                    dst[p * CB] += rr[p]
        if act != 0:
            act_row(acc, act, aa, ab)
        for ci in range(cb):
            row = eptr(out, obase + ci * s + oh * ow_n)
            src = eptr(acc, ci)
            for p in range(ow_n):
                row[p] = src[p * CB]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_cblock_scratch(x, w, out, sh, sw, dh, dw):
    """Per-worker scratch of _dw_cblock: (xt, wt, acc)."""
    kh_n, kw_n = w.shape[2], w.shape[3]
    oh_n, ow_n = out.shape[2], out.shape[3]
    hp = (oh_n - 1) * sh + (kh_n - 1) * dh + 1
    wp = (ow_n - 1) * sw + (kw_n - 1) * dw + 1
    return (np.empty(sw * hp * ((wp + sw - 1) // sw) * _DW_CB, x.dtype),
            np.empty((kh_n * kw_n + 1) * ow_n * _DW_CB, x.dtype),
            np.empty(ow_n * _DW_CB, x.dtype))


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _dw_cb_par(nw, ntask, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act,
               aa, ab):
    """nw workers pull channel blocks from a shared counter."""
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        xt, wt, acc = _dw_cblock_scratch(x, w, out, sh, sw, dh, dw)
        pull_tasks(counter, ntask, _dw_cblock, (x, w, b, res, out, xt, wt, acc, sh, sw, ph, pw,
                                                dh, dw, has_bias, has_res, act, aa, ab))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _conv2d_core(x, w, b, res, out, col, sh, sw, ph, pw, dh, dw, group, has_bias, has_res,
                 act, alpha_act, beta_act):
    """Shared implementation; see module docstring for the contract. The wrappers pass
    ``np.int64(...)``/``np.float64(...)`` so that literal constants do not make Numba
    compile a separate (slow, ~10 s) specialization of this function per wrapper."""
    n_n, c_n, h, wd = x.shape
    m_n, cg, kh_n, kw_n = w.shape
    oh_n = out.shape[2]
    ow_n = out.shape[3]
    s = oh_n * ow_n
    if n_n == 0 or m_n == 0 or s == 0:
        return
    sh, sw, ph, pw = np.int64(sh), np.int64(sw), np.int64(ph), np.int64(pw)
    dh, dw = np.int64(dh), np.int64(dw)
    group = np.int64(group)
    has_bias, has_res, act, aa, ab = _epi_args(has_bias, has_res, act, alpha_act, beta_act)
    nth = num_threads()
    mg = m_n // group
    kdim = cg * kh_n * kw_n
    if group == c_n and group == m_n and kdim > 0 and sw > 1 and ow_n <= _DW_CB_MAX_OW:
        ntask = n_n * ((c_n + _DW_CB - 1) // _DW_CB)
        if nth > 1 and n_n * c_n * s * kh_n * kw_n >= _PAR_MIN_DW and ntask > 1:
            _dw_cb_par(min(nth, ntask), ntask, x, w, b, res, out, sh, sw, ph, pw, dh, dw,
                       has_bias, has_res, act, aa, ab)
        else:
            xt, wt, acc = _dw_cblock_scratch(x, w, out, sh, sw, dh, dw)
            for t in range(ntask):
                _dw_cblock(t, x, w, b, res, out, xt, wt, acc, sh, sw, ph, pw, dh, dw,
                           has_bias, has_res, act, aa, ab)
        return
    if group == c_n and group == m_n and kdim > 0:
        if nth > 1 and n_n * c_n * s * kh_n * kw_n >= _PAR_MIN_DW and n_n * c_n > 1:
            _dw_flat_par(min(nth, n_n * c_n), x, w, b, res, out, sh, sw, ph, pw, dh, dw,
                         has_bias, has_res, act, aa, ab)
        else:
            xs, acc = _dw_flat_scratch(x, w, out, sh, sw, dh, dw)
            hp, wp, wq, pe = _dw_flat_geom(kh_n, kw_n, oh_n, ow_n, sh, sw, dh, dw)
            offs = _dw_flat_offsets(kh_n, kw_n, sh, sw, dh, dw, wq, pe)
            phases, geo = phase_layout(sh, sw, dh, dw, kh_n, kw_n, wd, wq, pw)
            for p in range(n_n * c_n):
                _dw_flat(p, x, w, b, res, out, xs, acc, offs, phases, geo, sh, sw, ph, pw, dh,
                         dw, has_bias, has_res, act, aa, ab)
        return
    if kdim == 0:
        _no_taps(out, b, res, s, has_bias, has_res, act, aa, ab)
        return
    pointwise = (kh_n == 1 and kw_n == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0
                 and oh_n == h and ow_n == wd)
    n_img = n_n * group
    flops = 2 * n_n * m_n * kdim * s
    par = nth > 1 and flops >= _PAR_MIN_FLOPS and (n_img >= nth or flops >= _PAR_MIN_FLOPS_SPLIT)
    parts = 1
    if par and n_img < 4 * nth:
        parts = nth // _gcd(n_img, nth)
    cc = _plane_chunk(cg, kh_n * kw_n, s)
    plane = (not pointwise and s <= _PLANE_MAX_S and mg >= _PLANE_MIN_M and mg >= s
             and col.shape[0] >= cc * kh_n * kw_n * s)
    small = _SMALL_MNK // max(1, mg * kdim) if kdim <= _SMALL_K_PW else 0  # columns
    direct = (not pointwise and mg <= _DIRECT_MAX_M and ow_n >= _DIRECT_MIN_OW and sw == 1
              and cg >= _DIRECT_MIN_CG)
    if direct:
        path = 3
        bs = _DIRECT_ROWS
        extent = oh_n
        cap = 0
    elif pointwise and parts > 1 and mg >= s and mg >= 2 * _PW_MSPLIT_MIN:
        path = 4
        bs = mg
        extent = mg
        cap = 1
    elif pointwise:
        path = 1
        bs = max(16, min(s, _OUT_BLOCK_ELEMS // max(1, mg)))
        if small >= 64:
            bs = min(bs, small)
        extent = s
        cap = 1
    elif plane:
        path = 2
        bs = mg
        extent = mg
        cap = cc * kh_n * kw_n * s
    else:
        path = 0
        bs = _block_rows(kdim, ow_n, oh_n)
        if small >= ow_n and kdim <= _SMALL_K:
            bs = min(bs, small // ow_n)
        extent = oh_n
        cap = kdim * ow_n
    nb = _ceil_div(extent, bs)
    if parts > 1:
        nb = _ceil_div(max(nb, parts), parts) * parts
        nb = min(nb, extent)
    bs = _ceil_div(extent, nb)
    nb = _ceil_div(extent, bs)
    ntask = n_img * nb
    nw = min(nth, ntask) if par else 1
    if path == 0:
        avail = col.shape[0] // cap          # output rows of scratch
        if avail < 1:
            raise ValueError("conv2d: col scratch smaller than one output row")
        if avail < bs:                       # too little scratch for one block: shrink it
            bs = avail
            nb = _ceil_div(extent, bs)
            ntask = n_img * nb
        nw = max(1, min(nw, avail // bs))
        cap = cap * bs
    elif path == 2:
        nw = max(1, min(nw, col.shape[0] // cap))
    if path == 0 and _flat_wins(mg, kw_n, ow_n, sh, sw, dw, wd):
        fbs = bs
        fcap = _flat_cap(cg, mg, kh_n, kw_n, fbs, ow_n, sh, sw, dh, dw, wd)
        while fbs > 1 and fcap > col.shape[0]:
            fbs = (fbs + 1) // 2
            fcap = _flat_cap(cg, mg, kh_n, kw_n, fbs, ow_n, sh, sw, dh, dw, wd)
        if fcap <= col.shape[0]:
            path = 5
            bs = fbs
            cap = fcap
            nb = _ceil_div(oh_n, bs)
            ntask = n_img * nb
    elif path == 2 and _flat_wins(mg, kw_n, ow_n, sh, sw, dw, wd):
        fcap = _flat_cap(cc, bs, kh_n, kw_n, oh_n, ow_n, sh, sw, dh, dw, wd)
        if fcap <= col.shape[0]:
            path = 6
            cap = fcap
    if path >= 5:
        nw = max(1, min(min(nth, ntask) if par else 1, col.shape[0] // cap))
    if ((path == 2 or path == 6) and par and nth > 1 and cc >= cg
            and (n_img < nth or (n_img < 2 * nth and n_img % nth != 0))):
        # few planes: a block of output channels per task would make every thread build the
        # whole im2col; share it instead
        flat = path == 6
        wq, hq = _flat_geom(oh_n, kh_n, kw_n, ow_n, sh, sw, dh, dw, wd)
        nq = oh_n * wq if flat else s
        shared = kdim * nq + (cg * sh * sw * hq * wq if flat else 0)
        mbs = _ceil_div(mg, _PHASE_CHUNKS * nth)
        wcap = mbs * nq if flat else 0
        if col.shape[0] >= shared + nth * wcap:
            ctr = np.zeros((4, n_img), np.int64)
            _plane_phased(nth, x, w, b, res, out, col, shared, wcap, ctr, sh, sw, ph, pw, dh,
                          dw, group, has_bias, has_res, act, aa, ab, flat,
                          _ceil_div(cg, _PHASE_CHUNKS * nth), mbs)
            return
    if nw > 1:
        _conv_par(nw, ntask, nb, bs, x, w, b, res, out, col, cap, sh, sw, ph, pw, dh, dw,
                  group, has_bias, has_res, act, aa, ab, path, cc)
    else:
        colw = col[:cap]
        last = np.full(1, -1, np.int64)
        for t in range(ntask):
            _conv_task(t, nb, bs, x, w, b, res, out, colw, last, sh, sw, ph, pw, dh, dw,
                       group, has_bias, has_res, act, aa, ab, path, cc)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def conv2d(x, w, b, out, col, sh, sw, ph, pw, dh, dw, group, has_bias):
    """ONNX Conv: out = conv(x, w) + b. See module docstring for shapes."""
    _conv2d_core(x, w, b, out, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                 np.int64(0), np.int64(0), np.float64(0.0), np.float64(0.0))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def conv2d_bias_act(x, w, b, out, col, sh, sw, ph, pw, dh, dw, group, has_bias, act,
                    alpha_act, beta_act):
    """out = act(conv(x, w) + b); ``act`` code and params as in ``epilogue``."""
    _conv2d_core(x, w, b, out, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                 np.int64(0), np.int64(act), np.float64(alpha_act), np.float64(beta_act))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def conv2d_bias_add_act(x, w, b, res, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                        act, alpha_act, beta_act):
    """out = act(conv(x, w) + b + res); res (N, M, OH, OW) must not alias ``out``
    (the GEMM overwrites ``out`` before the residual is read)."""
    _conv2d_core(x, w, b, res, out, col, sh, sw, ph, pw, dh, dw, group, has_bias,
                 np.int64(1), np.int64(act), np.float64(alpha_act), np.float64(beta_act))


# --- 3-D convolution ---------------------------------------------------------------------
# x (N, C, D, H, W), w (M, C // group, KD, KH, KW), out / res (N, M, OD, OH, OW); ``col`` holds
# one im2col block per worker: conv3d_scratch_elems(...). Tasks (image, group, block of output
# rows of the flattened (OD, OH) axis): im2col of the block, one BLAS gemm into ``out`` in
# place (leading dimension OD*OH*OW), then bias / residual / activation on the block's rows.

def _block_rows3_py(kdim, ow, rows):
    per_row = max(1, kdim * ow)
    r = max(_COL_BLOCK_ELEMS // per_row, -(-_MIN_BLOCK_COLS // max(1, ow)))
    return max(1, min(max(rows, 1), r))


_block_rows3 = njit(cache=True)(_block_rows3_py)


def conv3d_scratch_elems(C, KD, KH, KW, OD, OH, OW, group, threads=None):
    """Elements of ``col`` conv3d needs (plain Python, >= 1): one block of output rows per
    worker (``threads`` workers at most, default NUMBA_NUM_THREADS)."""
    kdim = (C // group) * KD * KH * KW
    nt = scratch_workers(threads)
    return max(1, kdim * OW * _block_rows3_py(kdim, OW, OD * OH) * nt)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _im2col3(x, n, c0, cg, col, r0, nr, kd_n, kh_n, kw_n, od_n, oh_n, ow_n, sd, sh, sw, pd, ph,
             pw, dd, dh, dw):
    """col (cg*KD*KH*KW, nr*OW) = im2col of output rows [r0, r0 + nr) (flattened (OD, OH)).
    Per (kd, kh) tap and output row the source row is found once for all channels and kw
    taps; raw pointers throughout (no views, no per-element index arithmetic)."""
    d_n, h_n, w_n = x.shape[2], x.shape[3], x.shape[4]
    ncol = nr * ow_n
    kk = kd_n * kh_n * kw_n
    plane = d_n * h_n * w_n
    xb = (n * x.shape[1] + c0) * plane
    z = col.dtype.type(0)
    o_d = r0 // oh_n
    o_h = r0 - o_d * oh_n
    for i in range(nr):
        for kd in range(kd_n):
            i_d = o_d * sd - pd + kd * dd
            for kh in range(kh_n):
                i_h = o_h * sh - ph + kh * dh
                inside = 0 <= i_d < d_n and 0 <= i_h < h_n
                srow = xb + (i_d * h_n + i_h) * w_n
                for kw in range(kw_n):
                    off_w = kw * dw - pw
                    ow0, ow1 = valid_range(off_w, sw, w_n, ow_n)
                    if not inside:
                        ow0 = ow1 = 0
                    tap = (kd * kh_n + kh) * kw_n + kw
                    for c in range(cg):
                        d = eptr(col, (c * kk + tap) * ncol + i * ow_n)
                        for j in range(ow0):
                            d[j] = z
                        if ow1 > ow0:
                            s = eptr(x, srow + c * plane + sw * ow0 + off_w)
                            dd_ = eptr(col, (c * kk + tap) * ncol + i * ow_n + ow0)
                            if sw == 1:
                                for j in range(ow1 - ow0):
                                    dd_[j] = s[j]
                            else:
                                for j in range(ow1 - ow0):
                                    dd_[j] = s[sw * j]
                        for j in range(max(ow0, ow1), ow_n):
                            d[j] = z
        o_h += 1
        if o_h == oh_n:
            o_h = 0
            o_d += 1


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _conv3_task(t, nb, bs, x, w, b, res, out, colw, sd, sh, sw, pd, ph, pw, dd, dh, dw,
                group, has_bias, has_res, act, aa, ab):
    m_n, cg, kd_n, kh_n, kw_n = w.shape
    od_n, oh_n, ow_n = out.shape[2], out.shape[3], out.shape[4]
    rows = od_n * oh_n
    s = rows * ow_n
    mg = m_n // group
    kdim = cg * kd_n * kh_n * kw_n
    n, g, blk = task_split(t, nb, group)
    r0 = blk * bs
    r1 = min(rows, r0 + bs)
    if r1 <= r0:
        return
    s0 = r0 * ow_n
    nn = (r1 - r0) * ow_n
    _im2col3(x, n, g * cg, cg, colw, r0, r1 - r0, kd_n, kh_n, kw_n, od_n, oh_n, ow_n, sd, sh,
             sw, pd, ph, pw, dd, dh, dw)
    st = xgemm(0, 0, mg, nn, kdim, 1.0, w, g * mg * kdim, kdim, colw, 0, nn, 0.0, out,
               (n * m_n + g * mg) * s + s0, s)
    if st != 0:
        raise RuntimeError("BLAS gemm failed")
    if has_bias or has_res or act != 0:
        o1 = out.reshape(-1)
        r1d = res.reshape(-1)
        z = out.dtype.type(0)
        for mi in range(mg):
            m = g * mg + mi
            off = (n * m_n + m) * s + s0
            _epilogue_row(o1[off:off + nn], b[m] if has_bias else z, has_bias,
                          r1d[off:off + nn] if has_res else o1[off:off + nn], has_res, act,
                          aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _conv3_par(nw, ntask, nb, bs, x, w, b, res, out, col, cap, sd, sh, sw, pd, ph, pw, dd,
               dh, dw, group, has_bias, has_res, act, aa, ab):
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        pull_tasks(counter, ntask, _conv3_task,
                   (nb, bs, x, w, b, res, out, col[wk * cap:(wk + 1) * cap], sd, sh, sw, pd, ph,
                    pw, dd, dh, dw, group, has_bias, has_res, act, aa, ab))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def conv3d(x, w, b, res, out, col, sd, sh, sw, pd, ph, pw, dd, dh, dw, group, has_bias,
           has_res, act, alpha_act, beta_act):
    """ONNX Conv / FusedConv on 5-D arrays: out = act(conv(x, w) + b [+ res]); ``res`` must
    not alias ``out`` (pass ``out`` itself with has_res False)."""
    n_n = x.shape[0]
    m_n, cg, kd_n, kh_n, kw_n = w.shape
    od_n, oh_n, ow_n = out.shape[2], out.shape[3], out.shape[4]
    rows = od_n * oh_n
    s = rows * ow_n
    if n_n == 0 or m_n == 0 or s == 0:
        return
    sd, sh, sw = np.int64(sd), np.int64(sh), np.int64(sw)
    pd, ph, pw = np.int64(pd), np.int64(ph), np.int64(pw)
    dd, dh, dw = np.int64(dd), np.int64(dh), np.int64(dw)
    group = np.int64(group)
    has_bias, has_res, act, aa, ab = _epi_args(has_bias, has_res, act, alpha_act, beta_act)
    kdim = cg * kd_n * kh_n * kw_n
    if kdim == 0:
        _no_taps(out, b, res, s, has_bias, has_res, act, aa, ab)
        return
    nth = num_threads()
    bs = _block_rows3(kdim, ow_n, rows)
    par = nth > 1 and 2 * n_n * m_n * kdim * s >= _PAR_MIN_FLOPS
    n_img = n_n * group
    if par and n_img * _ceil_div(rows, bs) < 2 * nth:
        bs = max(1, _ceil_div(rows, _ceil_div(2 * nth, n_img)))
    per_row = kdim * ow_n
    avail = col.shape[0] // per_row
    if avail < 1:
        raise ValueError("conv3d: col scratch smaller than one output row")
    bs = min(bs, avail)
    nb = _ceil_div(rows, bs)
    ntask = n_img * nb
    nw = max(1, min(nth, ntask, avail // bs)) if par else 1
    cap = bs * per_row
    if nw > 1:
        _conv3_par(nw, ntask, nb, bs, x, w, b, res, out, col, cap, sd, sh, sw, pd, ph, pw, dd,
                   dh, dw, group, has_bias, has_res, act, aa, ab)
    else:
        colw = col[:cap]
        for t in range(ntask):
            _conv3_task(t, nb, bs, x, w, b, res, out, colw, sd, sh, sw, pd, ph, pw, dd, dh,
                        dw, group, has_bias, has_res, act, aa, ab)

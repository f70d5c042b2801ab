"""CPU kernel: float32 2-D convolution as an implicit gemm for few taps per output (``C * KH *
KW`` small: a network's stem, 3 channels in at 3x3-7x7 and stride 2, or small-channel layers),
NCHW in and out, group 1. Imports nothing from jitort.

im2col + BLAS handles these badly: K = C*KH*KW is 9-147, so the gemm is thin and its time goes
to building and reading a column matrix of KH*KW copies of the input. Here nothing is copied per
tap. The input is copied once per call into zero-padded phase planes (one per stride phase a tap
uses, ``xb[n, c, a, e, r, q] = x[n, c, r*sh + a - ph, q*sw + e - pw]``, hq x wq each), so that
for every tap (c, kh, kw) the outputs of a row read one contiguous run of a plane: output
(oh, ow) is column ``oh * wq + ow`` of a virtual grid as wide as a plane, and the tap's operand
for columns v..v+63 starts at a fixed offset from v (one offset per tap, a table). The micro-
kernel (``_ftile_off``, LLVM IR) computes a tile of 6 output channels x 64 grid columns in 24
zmm accumulators: per tap 6 weight broadcasts, 4 vector loads at the tap's offset, 24 FMAs.
The accumulators start from the bias; columns of the grid past OW are computed and dropped;
the activation runs on the tile (or, with a residual, on each output run after it is added). Tasks are (image, block of 16 panels of 64 grid
columns), each channel tile sweeping the block, pulled by the workers from a shared counter.

The same phase planes (``quant.phase_planes``) and micro-kernel loop (``qgemm.emit_tile``) as
the integer path of ``quant.qconv2d_i8``, with float32 FMAs.
"""
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .epilogue import act_row
from .gemm import eptr, next_task, num_threads
from .phases import phase_planes
from .ptr import outlined
from .qgemm import MR, NR, _ptr, copy_short, emit_tile, offset_vecs, splat

_FM = {'reassoc', 'contract', 'arcp'}


def ftile_off_function(module: ir.Module) -> ir.Function:
    """``_ftile_off``'s loop as a function of its own in ``module`` (``ptr.outlined``):
    ``void(<16 x float>* c, float* p, i64 kq, i64* offs, float* v, float* bias)``: MR x NR
    float32 accumulators starting from the bias, step q's vectors at element offs[q] of v."""
    i64, f32 = ir.IntType(64), ir.FloatType()
    v16, fp = ir.VectorType(f32, 16), f32.as_pointer()

    def emit(b, fargs):
        cb, pb, kq64, ob, vb, bb = fargs
        fma = cgutils.get_or_insert_function(b.module, ir.FunctionType(v16, [v16] * 3),
                                             "llvm.fma.v16f32")

        def init(r):
            return splat(b, b.load(b.gep(bb, [ir.Constant(i64, r)])), 16)
        emit_tile(b, cb, pb, kq64, [(ob, ir.Constant(i64, 1))],
                  lambda cur: offset_vecs(b, vb, cur, v16, 4), f32,
                  lambda acc, bc, vec: b.call(fma, [bc, vec, acc]), init)
    return outlined(module, "jitort.conv_implicit.ftile_off",
                    [v16.as_pointer(), fp, i64, i64.as_pointer(), fp, fp], emit)


@intrinsic
def _ftile_off(typingctx, c, coff, pp, poff, pv, voff, offs, kq, bias, boff):
    """c[coff : coff + MR*NR] (float32, row-major MR x NR) = bias[boff + r] + the sum over
    kq >= 1 steps q of pp[poff + q*MR + r] * pv[voff + offs[q] : + NR] (float32 arrays, offs
    int64 elements). Calls ``ftile_off_function``."""
    f32t = types.float32
    if not all(isinstance(a, types.Array) and a.dtype == f32t for a in (c, pp, pv, bias)):
        return None
    sig = types.void(c, coff, pp, poff, pv, voff, offs, kq, bias, boff)

    def codegen(context, builder, sig, args):
        c_, coff_, pp_, poff_, pv_, voff_, offs_, kq_, b_, boff_ = args
        i64, f32 = ir.IntType(64), ir.FloatType()
        builder.call(ftile_off_function(builder.module),
                     [_ptr(context, builder, sig.args[0], c_, coff_, ir.VectorType(f32, 16)),
                      _ptr(context, builder, sig.args[2], pp_, poff_, f32),
                      context.cast(builder, kq_, sig.args[7], types.int64),
                      _ptr(context, builder, sig.args[6], offs_, ir.Constant(i64, 0), i64),
                      _ptr(context, builder, sig.args[4], pv_, voff_, f32),
                      _ptr(context, builder, sig.args[8], b_, boff_, f32)])
        return context.get_dummy_value()
    return sig, codegen


#: taps per output (C*KH*KW) where the implicit gemm beats im2col + BLAS, and the smallest
#: output plane it is taken for: stems of a few channels and small K at stride 1 on big planes;
#: against Winograd (3x3 stride 1) up to 16 channels (K 144). ``python
#: scripts/sweeps/compare_conv_implicit.py`` measures both sides.
IMPLICIT_MIN_K = 27
IMPLICIT_MAX_K = 160
IMPLICIT_MAX_K_VS_WINOGRAD = 144
IMPLICIT_MIN_PLANE = 28 * 28


def implicit_wins(C, KH, KW, OH, OW, winograd_alt=False) -> bool:
    """Whether ``conv2d_implicit`` is the kernel for this float32 group-1 convolution (plain
    Python); ``winograd_alt``: the alternative is Winograd (else im2col + BLAS). Never for 1x1
    kernels: those are a plain BLAS gemm without im2col."""
    k = C * KH * KW
    top = IMPLICIT_MAX_K_VS_WINOGRAD if winograd_alt else IMPLICIT_MAX_K
    return KH * KW > 1 and IMPLICIT_MIN_K <= k <= top and OH * OW >= IMPLICIT_MIN_PLANE


def _geom(h, w, oh, ow, kh, kw, sh, sw, dh, dw):
    """(hq, wq): phase plane rows and columns (plain Python / njit)."""
    hp = (oh - 1) * sh + (kh - 1) * dh + 1
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    return (hp + sh - 1) // sh, (wp + sw - 1) // sw


_geom_nb = njit(cache=True)(_geom)


@njit(cache=True, error_model='numpy')
def tap_offsets(c_n, kh, kw, sh, sw, dh, dw, hq, wq):
    """Per tap (c, kh, kw), in that order: where its operand for output (0, 0) starts in an
    image's phase planes (``phase_planes`` layout, hq x wq each); output (oh, ow) reads at
    + oh * wq + ow. A 1x1 stride-1 layer gets c * hq * wq: its planes may be the input
    itself."""
    off = np.empty(c_n * kh * kw, np.int64)
    for c in range(c_n):
        for i in range(kh):
            for j in range(kw):
                a, e = i * dh % sh, j * dw % sw
                off[(c * kh + i) * kw + j] = (((c * sh + a) * sw + e) * hq + i * dh // sh) * wq \
                    + j * dw // sw
    return off


def implicit_scratch_elems(n, c, h, w, kh, kw, oh, ow, sh, sw, dh, dw):
    """float32 elements of ``conv2d_implicit``'s scratch: the phase planes plus NR of slack
    (the last panel reads past the last plane) (plain Python; sizes may be symbolic)."""
    hq, wq = _geom(h, w, oh, ow, kh, kw, sh, sw, dh, dw)
    return n * c * sh * sw * hq * wq + NR


def pack_weights(w):
    """Weights (M, C, KH, KW) as the broadcast operand of ``_ftile_off``: [tile][K][MR] float32
    with K ordered (c, kh, kw), rows past M zero (called by the compiler)."""
    m = w.shape[0]
    k = int(np.prod(w.shape[1:]))
    nt = (m + MR - 1) // MR
    p = np.zeros((nt * MR, k), np.float32)
    p[:m] = np.asarray(w, np.float32).reshape(m, k)
    return np.ascontiguousarray(p.reshape(nt, MR, k).transpose(0, 2, 1)).reshape(-1)


#: panels (of NR grid columns) per task, at most: the input rows they read stay in L2 while
#: each channel tile sweeps them (fewer panels when K steps of NR floats per panel would pass
#: _BLOCK_BYTES), and the tile's MR output planes are written as MR sequential streams (with
#: every tile per panel, 64 channels would mean 64 streams)
_PANELS_PER_TASK = 16
_BLOCK_BYTES = 1 << 19


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _block(t, nblk, ppt, npan, xb, img, off, pk, kk, b, res1, out1, m_n, oh_n, ow_n, tl, wq,
           has_res, act, alpha, beta):
    """Task t: image t // nblk, panels (NR grid columns each) of block t % nblk, every
    channel tile; out1 / res1 are the flat (N, M, OH, OW) arrays."""
    n = t // nblk
    p0 = (t - n * nblk) * ppt
    p1 = min(npan, p0 + ppt)
    plane = oh_n * ow_n
    for tile in range((m_n + MR - 1) // MR):
        for pn in range(p0, p1):
            v0 = pn * NR
            _ftile_off(tl, 0, pk, tile * kk * MR, xb, n * img + v0, off, kk, b, tile * MR)
            if not has_res and act != 0:  # the activation on the whole tile, then copies
                act_row(tl, act, alpha, beta)
            r0 = v0 // wq
            r1 = min(oh_n, (v0 + NR - 1) // wq + 1)
            for r in range(min(MR, m_n - tile * MR)):
                obase = (n * m_n + tile * MR + r) * plane
                for oh in range(r0, r1):
                    lo = max(v0, oh * wq)
                    hi = min(v0 + NR, oh * wq + ow_n)
                    if hi <= lo:
                        continue
                    o0 = obase + oh * ow_n + lo - oh * wq
                    # one masked vector copy per run: a view per run (NRT reference counting)
                    # or a loop of varying length cost more than the run
                    copy_short(out1, o0, tl, r * NR + lo - v0, hi - lo)
                    if has_res:
                        d = eptr(out1, o0)
                        rp = eptr(res1, o0)
                        for j in range(hi - lo):
                            d[j] += rp[j]
                        if act != 0:
                            act_row(out1[o0:o0 + hi - lo], act, alpha, beta)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _worker(counter, ntask, ppt, npan, xb, img, off, pk, kk, b, res, out, wq, has_res, act,
            alpha, beta):
    tl = np.empty(MR * NR, np.float32)
    m_n, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    out1 = out.reshape(out.size)
    res1 = res.reshape(res.size)
    t = next_task(counter)
    while t < ntask:
        _block(t, ntask // out.shape[0], ppt, npan, xb, img, off, pk, kk, b, res1, out1, m_n,
               oh_n, ow_n, tl, wq, has_res, act, alpha, beta)
        t = next_task(counter)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _implicit_par(nw, ntask, ppt, npan, xb, img, off, pk, kk, b, res, out, wq, has_res, act,
                  alpha, beta):
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        _worker(counter, ntask, ppt, npan, xb, img, off, pk, kk, b, res, out, wq, has_res, act,
                alpha, beta)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def conv2d_implicit(x, pk, kh, kw, b, res, out, scr, sh, sw, ph, pw, dh, dw, has_bias, has_res,
                    act, alpha, beta):
    """out = act(conv(x, w) + b (+ res)) for float32 x (N, C, H, W), out / res (N, M, OH, OW),
    weights packed by ``pack_weights`` (kh x kw kernels, group 1), strides sh / sw, begin pads
    ph / pw, dilations dh / dw; ``scr``: ``implicit_scratch_elems`` float32 elements; act codes
    as in ``epilogue``. res must not alias out. A thin wrapper: the core is typed with plain
    bool / int64 flags, so literal flags at the call sites do not compile one core each."""
    _implicit_core(x, pk, np.int64(kh), np.int64(kw), b, res, out, scr, np.int64(sh),
                   np.int64(sw), np.int64(ph), np.int64(pw), np.int64(dh), np.int64(dw),
                   bool(has_bias), bool(has_res), np.int64(act), np.float64(alpha),
                   np.float64(beta))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _implicit_core(x, pk, kh, kw, b, res, out, scr, sh, sw, ph, pw, dh, dw, has_bias, has_res,
                   act, alpha, beta):
    n_n, c_n, h, w = x.shape
    m_n, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    if n_n * m_n * oh_n * ow_n == 0:
        return
    hq, wq = _geom_nb(h, w, oh_n, ow_n, kh, kw, sh, sw, dh, dw)
    img = c_n * sh * sw * hq * wq
    xb = scr[:n_n * img + NR]
    xb[n_n * img:] = 0.0
    phase_planes(x.reshape(x.size), xb, np.float32(0.0), n_n * c_n, h, w, sh, sw, ph, pw, dh,
                 dw, kh, kw, hq, wq)
    kk = c_n * kh * kw
    bp = np.zeros((m_n + MR - 1) // MR * MR, np.float32)  # the tiles' first values
    if has_bias:
        bp[:m_n] = b
    off = tap_offsets(c_n, kh, kw, sh, sw, dh, dw, hq, wq)
    npan = ((oh_n - 1) * wq + ow_n + NR - 1) // NR
    ppt = max(1, min(_PANELS_PER_TASK, _BLOCK_BYTES // (kk * NR * 4)))
    ntask = n_n * ((npan + ppt - 1) // ppt)
    nw = max(1, min(num_threads(), ntask))
    if float(m_n) * float(n_n * npan * NR) * float(kk) < 1e6:
        nw = 1
    if nw == 1:
        counter = np.zeros(1, np.int64)
        _worker(counter, ntask, ppt, npan, xb, img, off, pk, kk, bp, res, out, wq, has_res, act,
                alpha, beta)
    else:
        _implicit_par(nw, ntask, ppt, npan, xb, img, off, pk, kk, bp, res, out, wq, has_res,
                      act, alpha, beta)

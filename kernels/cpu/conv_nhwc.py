"""Channels-last (NHWC) 2-D convolutions: depthwise and pointwise, with the conv epilogue.

A graph pass (``jitort.passes.layout``) runs chains of depthwise and pointwise convolutions
(MobileNet / EfficientNet / GhostNet blocks, with their elementwise ops, squeeze-excite pools
and channel concats) channels-last, with one transpose where a chain starts and ends, as
onnxruntime's NCHWc transformer does. Channels-last, a depthwise tap is one contiguous
multiply-add over the channels of a pixel, whatever the plane's size (the NCHW kernels pay
loop setup per row of 7-14 elements on small planes), and a pointwise convolution is one
plain gemm ``out (P, M) = x (P, C) @ w (C, M)`` over the P = N*H*W pixels. Undilated
float32 depthwise rows 3, 5 or 7 taps wide at column stride 1 or 2 run as register tiles of
up to 8 pixels x 16 channels (``_dw_tile``), the others tap by tap (``_dw_row``).

Layouts (C-contiguous, float32 or float64, one dtype per call):
    x   (N, H, W, C)
    w   (KH, KW, C // group, M)    "HWIO"; depthwise: (KH, KW, 1, C)
    b   (M,)                       used only when has_bias
    res (N, OH, OW, M)             residual added before the activation (has_res)
    out (N, OH, OW, M)
Begin pads ``ph``/``pw``; end pads implied by OH/OW; strides, dilations >= 1. Activation codes
are those of ``epilogue``.

``dwconv_staged`` runs the same register tiles on NCHW tensors (a depthwise convolution alone
in its region, which the layout pass leaves NCHW, and those outside any region whose channels
fill whole 16-channel groups): bands of rows of 16 channels at a time are transposed into a
worker's scratch as (rows, W, 16) blocks, the NCHW16c layout, and back.
"""
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from .epilogue import act_row
from .gemm import eptr, next_task, num_threads, pgemm, scratch_workers
from .mathfn import wide_vectors
from .ptr import eptrs, loop_begin, loop_end
from .qgemm import masked_load, masked_store, splat
from .sync import next_affine
from .transpose import transpose_block

_FM = {'reassoc', 'contract', 'arcp'}

# output elements * taps above which the depthwise rows are split over threads; gemm flops
# above which pointwise row blocks are (as one plane's gemm in kernels/cpu/conv.py)
_PAR_MIN_DW = 1 << 15
_PAR_MIN_FLOPS = 1 << 20
# the same for the register-tiled rows (``_dw_tile``, faster than the per-tap ones, so less
# work per output): below it a parallel region's launch and wake-up cost more than the second
# thread saves. It assumes jitort's pool (kernels/cpu/workers.py: no late join, cheap regions);
# ``python scripts/op_scaling.py -k depthwise`` measures it.
_PAR_MIN_DW_TILES = 1 << 19
# pointwise: output elements per row block (256 KB of float32: the epilogue pass stays in L2)
_PW_BLOCK_ELEMS = 1 << 16
#: pixel blocks of at most this many rows stream the weights instead of calling a gemm
_PW_STREAM_ROWS = 4


#: pixels per register tile of ``_dw_tile`` (at most) and the kernel widths it has code for
_TILE_PX = 8
_TILE_K = (3, 5, 7)


@intrinsic
def _dw_tile(typingctx, out, x, w, b, res, geo, c_n, k, r_n, kh_lo, kh_hi, p_lo, p_hi,
             has_bias, has_res, relu, stride):
    """r_n (1.._TILE_PX) consecutive output pixels of an undilated depthwise convolution k
    columns wide (k in _TILE_K) with column stride ``stride`` (1 or 2), float32, channels
    [0, c_n) in vectors of 16. ``geo`` = (ooff, ops, ocs, xoff, xps, xcs, rowst, woff, wcs,
    boff) places the operands: channel c of output pixel r at out[ooff + (c // 16) * ocs +
    r * ops + c % 16] (res alike), of input pixel p in kernel row kh at x[xoff + (c // 16) *
    xcs + kh * rowst + p * xps + c % 16], tap (kh, j) at w[woff + (kh*k + j) * wcs + c], bias
    at b[boff + c]: channels-last has xps = C and xcs = 16, channel blocks of 16 (NCHW16c)
    xps = 16 and xcs = the block's size. out = bias + the sum over kernel rows kh in [kh_lo,
    kh_hi) and columns j of tap (kh, j) times input pixel r*stride + j, where input pixel p
    counts only for p in [p_lo, p_hi) (the others are padding, never read: zeros instead),
    plus res (``has_res``), then Relu (``relu``). Per 16 channels the r_n accumulators and k
    weight vectors stay in registers; each input pixel vector is loaded once per kernel row
    for every output it feeds ((r_n - 1) * stride + k loads for r_n * k FMAs, where the
    per-pixel loop loads two operands per FMA and the output once per kernel row)."""
    arrs = (out, x, w, b, res)
    if not all(isinstance(a, types.Array) and a.dtype == out.dtype for a in arrs):
        return None
    if not (isinstance(geo, types.BaseTuple) and len(geo) == 10
            and all(isinstance(t, types.Integer) for t in geo.types)):
        return None
    sig = types.void(out, x, w, b, res, geo, c_n, k, r_n, kh_lo, kh_hi, p_lo, p_hi, has_bias,
                     has_res, relu, stride)
    if out.dtype != types.float32:   # typed for the other float dtypes, never called for them
        return sig, lambda context, builder, sig, args: context.get_dummy_value()

    def codegen(context, builder, sig, args):
        at = sig.args
        i32, i64 = ir.IntType(32), ir.IntType(64)
        f32 = ir.FloatType()
        v16 = ir.VectorType(f32, 16)

        def as64(j):
            return context.cast(builder, args[j], at[j], types.int64)

        def base(j):
            return make_array(at[j])(context, builder, args[j]).data

        g = [context.cast(builder, builder.extract_value(args[5], i), at[5].types[i],
                          types.int64) for i in range(10)]
        ooff, ops, ocs, xoff, xps, xcs, rowst64, woff, wcs, boff = g
        obase, rbase = builder.gep(base(0), [ooff]), builder.gep(base(4), [ooff])
        xbase, wbase, bbase = builder.gep(base(1), [xoff]), builder.gep(base(2), [woff]), \
            builder.gep(base(3), [boff])
        c64, khlo, khhi = as64(6), as64(9), as64(10)
        plo, phi_v = as64(11), as64(12)
        hb = context.cast(builder, args[13], at[13], types.boolean)
        hr = context.cast(builder, args[14], at[14], types.boolean)
        rl = context.cast(builder, args[15], at[15], types.boolean)
        mload, mstore = masked_load(builder, v16), masked_store(builder, v16)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [v16] * 3),
                                             "llvm.fma.v16f32")
        zero = ir.Constant(v16, None)
        zptr = cgutils.alloca_once_value(builder, zero)   # what a padded pixel reads
        lane = ir.Constant(ir.VectorType(i64, 16), list(range(16)))

        def vp(ptr, off):
            return builder.bitcast(builder.gep(ptr, [off]), v16.as_pointer())

        def ld(ptr, off, mask):
            return builder.call(mload, [vp(ptr, off), ir.Constant(i32, 4), mask, zero])

        key = builder.add(builder.add(builder.mul(as64(7), ir.Constant(i64, 16)), as64(8)),
                          builder.mul(as64(16), ir.Constant(i64, 256)))
        exit_ = builder.append_basic_block("dwt.exit")
        switch = builder.switch(key, exit_)
        rn64 = as64(8)
        for kk, rr, ss in [(kk, rr, ss) for ss in (1, 2) for kk in _TILE_K for rr in (7, 8)]:
            # code for tiles of 7 and of 8 pixels (every tile of rows of 7, 14, 28, 56, 112
            # pixels); the 8-pixel code serves the other widths too, its stores past r_n
            # skipped (a variant per width tripled the kernel library's compile time here)
            blk = builder.append_basic_block(f"dwt.{kk}x{rr}s{ss}")
            for r_case in ((7,) if rr == 7 else (1, 2, 3, 4, 5, 6, 8)):
                switch.add_case(ir.Constant(i64, ss * 256 + kk * 16 + r_case), blk)
            builder.position_at_end(blk)
            npx = (rr - 1) * ss + kk
            pok = [builder.and_(builder.icmp_signed('<=', plo, ir.Constant(i64, p)),
                                builder.icmp_signed('>', phi_v, ir.Constant(i64, p)))
                   for p in range(npx)]
            padr = [builder.select(pk, ir.Constant(i64, p), plo) for p, pk in enumerate(pok)]
            inner = builder.and_(builder.icmp_signed('<=', plo, ir.Constant(i64, 0)),
                                 builder.icmp_signed('>=', phi_v, ir.Constant(i64, npx)))
            cv, _, cl, cdone = loop_begin(builder, c64, f"dwt.c.{kk}x{rr}s{ss}",
                                          f"dwt.cdone.{kk}x{rr}s{ss}")
            cvec = builder.ashr(cv, ir.Constant(i64, 4))
            xc = builder.mul(cvec, xcs)
            oc = builder.mul(cvec, ocs)
            cmask = builder.icmp_signed('<', builder.add(lane, splat(builder, cv, 16)),
                                        splat(builder, c64, 16))
            bias = builder.select(hb, ld(bbase, cv, cmask), zero)
            # a whole vector of channels: unmasked loads through pointers stepped by the pixel
            # stride ("inner" when every pixel of the tile is inside the row; at the row's
            # ends ("edge") a padded pixel's pointer is switched to a vector of zeros on the
            # stack); the masked path (per-pixel addresses and masks, spilled to the stack)
            # only for the last, part-filled vector of channels. The edge path on every tile
            # would lose on small planes (every tile an edge one) and win on big ones, hence
            # the three.
            full = builder.icmp_signed('<=', builder.add(cv, ir.Constant(i64, 16)), c64)
            kpre = builder.block
            kdone = builder.append_basic_block(f"dwt.khdone.{kk}x{rr}s{ss}")
            kchoose = builder.append_basic_block(f"dwt.khsel.{kk}x{rr}s{ss}")
            builder.cbranch(builder.icmp_signed('<', khlo, khhi), kchoose, kdone)
            builder.position_at_end(kchoose)
            kedge = builder.append_basic_block(f"dwt.khe.{kk}x{rr}s{ss}")
            kmpre = builder.append_basic_block(f"dwt.khm.{kk}x{rr}s{ss}")
            ends = []
            for kind in ("inner", "edge", "masked"):
                kl = builder.append_basic_block(f"dwt.kh{kind}.{kk}x{rr}s{ss}")
                if kind == "inner":
                    chk = builder.append_basic_block(f"dwt.khc.{kk}x{rr}s{ss}")
                    builder.cbranch(full, chk, kmpre)
                    builder.position_at_end(chk)
                    builder.cbranch(inner, kl, kedge)
                    pre = chk
                elif kind == "edge":
                    builder.position_at_end(kedge)
                    builder.branch(kl)
                    pre = kedge
                else:
                    builder.position_at_end(kmpre)
                    xmask = [builder.and_(cmask, splat(builder, pk, 16)) for pk in pok]
                    builder.branch(kl)
                    pre = kmpre
                builder.position_at_end(kl)
                kh = builder.phi(i64)
                kh.add_incoming(khlo, pre)
                accs = []
                for _ in range(rr):
                    a = builder.phi(v16)
                    a.add_incoming(bias, pre)
                    accs.append(a)
                wrow = builder.add(builder.mul(builder.mul(kh, ir.Constant(i64, kk)), wcs), cv)
                xrow = builder.add(builder.mul(kh, rowst64), xc)
                if kind == "masked":
                    wv = [ld(wbase, builder.add(wrow, builder.mul(ir.Constant(i64, j), wcs)),
                             cmask) for j in range(kk)]
                else:
                    wp, wv = builder.gep(wbase, [wrow]), []
                    for j in range(kk):
                        wv.append(builder.load(builder.bitcast(wp, v16.as_pointer()), align=4))
                        wp = builder.gep(wp, [wcs])
                    xp = builder.gep(xbase, [xrow])
                new = list(accs)
                for p in range(npx):
                    if kind == "masked":
                        # a padded pixel's load is masked off entirely; its address stays on
                        # a pixel of the row (plo): a masked access whose lanes fall on a page
                        # that is not mapped (before or after the tensor's allocation) takes
                        # ~15x as long
                        xv = ld(xbase, builder.add(xrow, builder.mul(padr[p], xps)), xmask[p])
                    else:
                        pp = builder.bitcast(xp, v16.as_pointer())
                        if kind == "edge":
                            pp = builder.select(pok[p], pp, zptr)
                        xv = builder.load(pp, align=4)
                        xp = builder.gep(xp, [xps])
                    for j in range(kk):
                        r, rem = divmod(p - j, ss)
                        if rem == 0 and 0 <= r < rr:
                            new[r] = builder.call(fma, [xv, wv[j], new[r]])
                khn = builder.add(kh, ir.Constant(i64, 1))
                kend = builder.block
                kh.add_incoming(khn, kend)
                for a, nv in zip(accs, new):
                    a.add_incoming(nv, kend)
                builder.cbranch(builder.icmp_signed('<', khn, khhi), kl, kdone)
                ends.append((kend, new))
            builder.position_at_end(kdone)
            fin = []
            for j in range(rr):
                f = builder.phi(v16)
                f.add_incoming(bias, kpre)
                for kend, new in ends:
                    f.add_incoming(new[j], kend)
                fin.append(f)
            for r in range(rr):
                with builder.if_then(builder.icmp_signed('<', ir.Constant(i64, r), rn64),
                                     likely=True):
                    off = builder.add(builder.mul(ir.Constant(i64, r), ops), oc)
                    v = builder.select(hr, builder.fadd(fin[r], ld(rbase, off, cmask)), fin[r])
                    pos = builder.fcmp_ordered('>', v, zero)
                    v = builder.select(rl, builder.select(pos, v, zero), v)
                    builder.call(mstore, [v, vp(obase, off), ir.Constant(i32, 4), cmask])
            loop_end(builder, cv, 16, c64, cl, cdone)
            builder.branch(exit_)
        builder.position_at_end(exit_)
        return context.get_dummy_value()
    return sig, codegen


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_row_tiles(r, x, w, b, res, out, sh, sw, ph, pw, has_bias, has_res, act, aa, ab):
    """Output row r of an undilated float32 depthwise convolution with a 3-, 5- or 7-wide
    kernel and column stride 1 or 2, as ``_dw_tile`` register tiles of up to _TILE_PX pixels
    (padding read as zeros, no copy); other activations than Relu after."""
    n_h, n_w, c_n = x.shape[1], x.shape[2], x.shape[3]
    kh_n, kw_n = w.shape[0], w.shape[1]
    oh_n, ow_n = out.shape[1], out.shape[2]
    n = r // oh_n
    ih0 = (r - n * oh_n) * sh - ph
    kh_lo = max(0, -ih0)
    kh_hi = min(kh_n, n_h - ih0)
    seg = (ow_n + _TILE_PX - 1) // _TILE_PX
    mr = (ow_n + seg - 1) // seg
    for q0 in range(0, ow_n, mr):
        rn = min(mr, ow_n - q0)
        c0 = q0 * sw - pw
        geo = ((r * ow_n + q0) * c_n, c_n, 16, ((n * n_h + ih0) * n_w + c0) * c_n, c_n, 16,
               n_w * c_n, 0, c_n, 0)
        _dw_tile(out, x, w, b, res, geo, c_n, kw_n, rn, kh_lo, kh_hi, max(0, -c0),
                 min((rn - 1) * sw + kw_n, n_w - c0), has_bias, has_res, act == 1, sw)
    if act > 1:
        lo = ow_n * c_n
        act_row(out.reshape(-1)[r * lo:(r + 1) * lo], act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_row(r, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab):
    """Output row r = n * OH + oh of a depthwise convolution: the row (OW * C values) starts
    as the bias (or zero), and each tap adds its weights times the input row it reads, one
    contiguous run of C per output pixel (no bounds test inside: each tap's valid output
    columns are computed once)."""
    wide_vectors()
    n_h, n_w, c_n = x.shape[1], x.shape[2], x.shape[3]
    kh_n, kw_n = w.shape[0], w.shape[1]
    oh_n, ow_n = out.shape[1], out.shape[2]
    n = r // oh_n
    oh = r - n * oh_n
    lo = ow_n * c_n
    o = eptr(out, r * lo)
    z = out.dtype.type(0)
    if has_bias:
        for q in range(ow_n):
            oq = eptr(out, r * lo + q * c_n)
            for c in range(c_n):
                oq[c] = b[c]
    else:
        for q in range(lo):
            o[q] = z
    # each tap's valid output columns [q0, q1): input column q * sw + kw * dw - pw in [0, W);
    # between qa and qb all of a row's taps are valid: there the taps of one kernel row are
    # added in one pass (3, 5, 7 wide: one load and store of the output per kernel row, not
    # per tap)
    qa = 0
    qb = ow_n
    for kw in range(kw_n):
        off = kw * dw - pw
        q0 = 0 if off >= 0 else (-off + sw - 1) // sw
        q1 = min(ow_n, (n_w - off + sw - 1) // sw) if n_w > off else 0
        qa = max(qa, q0)
        qb = min(qb, q1)
    fuse = kw_n == 3 or kw_n == 5 or kw_n == 7
    if not fuse or qb < qa:
        qa = qb = 0
    cs = sw * c_n
    dc = dw * c_n
    ih0 = oh * sh - ph
    # 3x3 with all three input rows inside: the interior's nine taps in one pass (one load and
    # store of the output per pixel, not three)
    all9 = (kh_n == 3 and kw_n == 3 and qb > qa and ih0 >= 0 and ih0 + 2 * dh < n_h)
    if all9:
        rs = dh * n_w * c_n
        xb = (n * n_h + ih0) * n_w * c_n + (qa * sw - pw) * c_n
        w0, w1, w2, w3, w4, w5, w6, w7, w8 = eptrs(w, 0, c_n, 9)
        for q in range(qb - qa):
            oq = eptr(out, r * lo + (qa + q) * c_n)
            e = xb + q * cs
            x0, x1, x2 = eptrs(x, e, dc, 3)
            x3, x4, x5 = eptrs(x, e + rs, dc, 3)
            x6, x7, x8 = eptrs(x, e + 2 * rs, dc, 3)
            for c in range(c_n):
                oq[c] += (w0[c] * x0[c] + w1[c] * x1[c] + w2[c] * x2[c] + w3[c] * x3[c]
                          + w4[c] * x4[c] + w5[c] * x5[c] + w6[c] * x6[c] + w7[c] * x7[c]
                          + w8[c] * x8[c])
    for kh in range(kh_n):
        ih = ih0 + kh * dh
        if ih < 0 or ih >= n_h:
            continue
        xrow = (n * n_h + ih) * n_w * c_n
        for kw in range(kw_n):
            off = kw * dw - pw          # input column of output column q: q * sw + off
            q0 = 0 if off >= 0 else (-off + sw - 1) // sw
            q1 = min(ow_n, (n_w - off + sw - 1) // sw) if n_w > off else 0
            wv = eptr(w, (kh * kw_n + kw) * c_n)
            for q in range(q0, q1):
                if q == qa and qb > qa:   # the fused interior, done below
                    continue
                if qa < q < qb:
                    continue
                oq = eptr(out, r * lo + q * c_n)
                xq = eptr(x, xrow + (q * sw + off) * c_n)
                for c in range(c_n):
                    oq[c] += wv[c] * xq[c]
        if qb <= qa or all9:
            continue
        wk = (kh * kw_n) * c_n
        xb = xrow + (qa * sw - pw) * c_n
        ob = r * lo + qa * c_n
        if kw_n == 3:
            w0, w1, w2 = eptrs(w, wk, c_n, 3)
            for q in range(qb - qa):
                oq = eptr(out, ob + q * c_n)
                x0, x1, x2 = eptrs(x, xb + q * cs, dc, 3)
                for c in range(c_n):
                    oq[c] += w0[c] * x0[c] + w1[c] * x1[c] + w2[c] * x2[c]
        elif kw_n == 5:
            w0, w1, w2, w3, w4 = eptrs(w, wk, c_n, 5)
            for q in range(qb - qa):
                oq = eptr(out, ob + q * c_n)
                x0, x1, x2, x3, x4 = eptrs(x, xb + q * cs, dc, 5)
                for c in range(c_n):
                    oq[c] += (w0[c] * x0[c] + w1[c] * x1[c] + w2[c] * x2[c]
                              + w3[c] * x3[c] + w4[c] * x4[c])
        else:
            w0, w1, w2, w3, w4, w5, w6 = eptrs(w, wk, c_n, 7)
            for q in range(qb - qa):
                oq = eptr(out, ob + q * c_n)
                x0, x1, x2, x3, x4, x5, x6 = eptrs(x, xb + q * cs, dc, 7)
                for c in range(c_n):
                    oq[c] += (w0[c] * x0[c] + w1[c] * x1[c] + w2[c] * x2[c]
                              + w3[c] * x3[c] + w4[c] * x4[c] + w5[c] * x5[c]
                              + w6[c] * x6[c])
    if has_res:
        rr = eptr(res, r * lo)
        for q in range(lo):
            o[q] += rr[q]
    if act != 0:
        act_row(out.reshape(-1)[r * lo:(r + 1) * lo], act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_any_row(r, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab,
                tiles):
    if tiles:
        _dw_row_tiles(r, x, w, b, res, out, sh, sw, ph, pw, has_bias, has_res, act, aa, ab)
    else:
        _dw_row(r, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _dw_par(nw, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab,
            tiles):
    """nw workers pull output rows from a shared counter."""
    nrow = out.shape[0] * out.shape[1]
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        r = next_task(counter)
        while r < nrow:
            _dw_any_row(r, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act,
                        aa, ab, tiles)
            r = next_task(counter)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def dwconv_nhwc(x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, alpha_act,
                beta_act):
    """Depthwise convolution, channels-last (module docstring). ``res`` is read only when
    ``has_res`` (else pass ``out``); it must not alias ``out``."""
    nrow = out.shape[0] * out.shape[1]
    if nrow == 0 or out.shape[2] == 0 or out.shape[3] == 0:
        return
    sh, sw, ph, pw = np.int64(sh), np.int64(sw), np.int64(ph), np.int64(pw)
    dh, dw, act = np.int64(dh), np.int64(dw), np.int64(act)
    has_bias, has_res = bool(has_bias), bool(has_res)
    aa, ab = np.float64(alpha_act), np.float64(beta_act)
    kh_n, kw_n = w.shape[0], w.shape[1]
    oh_n, ow_n = out.shape[1], out.shape[2]
    # (a runtime flag, one build of _dw_run: literal True / False would compile it twice)
    tiles = (x.itemsize == 4 and (sw == 1 or sw == 2) and dh == 1 and dw == 1
             and (kw_n == 3 or kw_n == 5 or kw_n == 7))
    if tiles:
        _dw_run(x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab,
                tiles)
        return
    # few output columns with every tap inside the input (small planes, wide kernels: 7x7 on
    # a 7x7 plane has one): copy the input zero-padded once, so every column takes the fused
    # path of _dw_row, instead of one pass per tap on the edge columns
    inner = ow_n
    for kw in range(kw_n):
        off = kw * dw - pw
        lo = 0 if off >= 0 else (-off + sw - 1) // sw
        hi = min(ow_n, (x.shape[2] - off + sw - 1) // sw) if x.shape[2] > off else 0
        inner = min(inner, hi - lo)
    if (ph > 0 or pw > 0) and 2 * inner < ow_n:
        hp = (oh_n - 1) * sh + (kh_n - 1) * dh + 1
        wp = (ow_n - 1) * sw + (kw_n - 1) * dw + 1
        xp = np.zeros((x.shape[0], hp, wp, x.shape[3]), x.dtype)
        for n in range(x.shape[0]):
            for i in range(min(x.shape[1], hp - ph)):
                for j in range(min(x.shape[2], wp - pw)):
                    d = xp[n, ph + i, pw + j]
                    src = x[n, i, j]
                    for c in range(x.shape[3]):
                        d[c] = src[c]
        _dw_run(xp, w, b, res, out, sh, sw, np.int64(0), np.int64(0), dh, dw, has_bias, has_res,
                act, aa, ab, tiles)
    else:
        _dw_run(x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab, tiles)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dw_run(x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act, aa, ab, tiles):
    """Every output row, by ``_dw_row_tiles`` (``tiles``) or ``_dw_row``, over the threads
    when the work is big enough for the kernel in use."""
    nrow = out.shape[0] * out.shape[1]
    nth = num_threads()
    work = out.size * w.shape[0] * w.shape[1]
    if nth > 1 and nrow > 1 and work >= (_PAR_MIN_DW_TILES if tiles else _PAR_MIN_DW):
        _dw_par(min(nth, nrow), x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res,
                act, aa, ab, tiles)
    else:
        for r in range(nrow):
            _dw_any_row(r, x, w, b, res, out, sh, sw, ph, pw, dh, dw, has_bias, has_res, act,
                        aa, ab, tiles)


# --- depthwise on NCHW tensors through channels-last bands ---------------------------------

#: float32 elements of one 16-channel group's staged input and output rows of a band in
#: ``dwconv_staged`` (256 KB: they stay in L2 between the transposes and the tiles; 2^15 to
#: 2^18 gave the same times within this VM's noise on ``python scripts/sweeps/sweep_dw_staged.py``,
#: 15 layers of up to 56x56 inputs: staged / region 0.77-0.80 at 1 thread, 0.65-0.70 at 2,
#: geomeans, Zen 5, 2026-11-28)
_STAGE_ELEMS = 1 << 16
#: output elements * taps from which ``dwconv_staged`` splits its work over the threads
_PAR_MIN_STAGED = 1 << 17
#: the smallest output plane whose bands are split over the threads (two workers' bands
#: share each plane's cache line at their border, which costs more than the split saves on
#: small planes)
_STAGED_MIN_PLANE = 64
#: float32 elements kept free before, between and after a worker's two staged blocks: the
#: register tiles' masked accesses of a channel tail reach up to 15 lanes past a block
_STAGE_GUARD = 16
#: the fewest channels per block when ``staged_blocks`` splits the channels over the threads
_STAGED_MIN_BLOCK = 32


def staged_ok(dtype, kw, sw, dh, dw) -> bool:
    """Whether ``dwconv_staged`` takes a depthwise convolution: float32, undilated, a 3-, 5-
    or 7-wide kernel at column stride 1 or 2 (the register tiles' domain)."""
    return (np.dtype(dtype) == np.float32 and dh == 1 and dw == 1 and kw in _TILE_K
            and sw in (1, 2))


def staged_blocks(c, plane, threads) -> int:
    """Channel blocks of ``dwconv_staged``'s weights for ``threads`` threads: on output planes
    too small to split by rows (under _STAGED_MIN_PLANE), one per thread where the channels
    split evenly into blocks of whole 16-channel groups, at least _STAGED_MIN_BLOCK; else 1
    (bands of rows split the work: a channel split only pays where the planes are too small
    for bands)."""
    t = scratch_workers(threads)
    return (t if t > 1 and plane < _STAGED_MIN_PLANE and c % (16 * t) == 0
            and c // t >= _STAGED_MIN_BLOCK else 1)


def staged_weights(w, blocks):
    """(M, 1, KH, KW) depthwise weights -> ``dwconv_staged``'s (blocks, KH, KW, 1, M // blocks)."""
    m, _, kh, kw = w.shape
    cb = m // blocks
    hwio = np.ascontiguousarray(w.transpose(2, 3, 1, 0))          # (KH, KW, 1, M)
    return np.ascontiguousarray(hwio.reshape(kh, kw, 1, blocks, cb).transpose(3, 0, 1, 2, 4))


def _stage_rows_py(w, kh, sh, oh, ow):
    """Output rows per band of ``dwconv_staged``: as many as keep one 16-channel group's
    staged input and output rows within _STAGE_ELEMS (at least one)."""
    # ((rb - 1) * sh + kh) * w * 16 + rb * ow * 16 <= _STAGE_ELEMS
    rb = (_STAGE_ELEMS // 16 - (kh - sh) * w) // max(1, sh * w + ow)
    return max(1, min(oh, rb))


_stage_rows = njit(cache=True)(_stage_rows_py)


def _stage_worker_elems_py(w, kh, sh, ow, rb):
    """One worker's scratch in ``dwconv_staged``: a guard, one 16-channel group's staged input
    rows of a band of rb output rows, a guard, its staged output rows."""
    return ((rb - 1) * sh + kh) * w * 16 + rb * ow * 16 + 2 * _STAGE_GUARD


_stage_worker_elems = njit(cache=True)(_stage_worker_elems_py)


def dw_staged_scratch_elems(w, kh, sh, oh, ow, threads) -> int:
    """float32 scratch elements of ``dwconv_staged`` for ``threads`` workers (and the guard
    after the last worker's)."""
    rb = _stage_rows_py(w, kh, sh, oh, ow)
    return scratch_workers(threads) * _stage_worker_elems_py(w, kh, sh, ow, rb) + _STAGE_GUARD


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _staged_band(t, nb, rb, x, w, b, res, out, buf, sh, sw, ph, pw, has_bias, has_res, act,
                 aa, ab):
    """Task t = (image, band, channel block) of ``dwconv_staged``, 16 channels at a time: the
    band's input rows of the 16 channels transposed into buf as one (rows, W, 16) block (the
    NCHW16c layout: a tile's loads walk contiguous memory, and the next output row finds its
    input rows in L1), the output rows by ``_dw_tile``, the (rows, OW, 16) result transposed
    back into out (then residual and activation, when there is a residual)."""
    n_n, c_n, h_n, w_n = x.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    nblk, kh_n, kw_n, cb = w.shape[0], w.shape[1], w.shape[2], w.shape[4]
    blk = t % nblk
    tb = t // nblk
    n = tb // nb
    r0 = (tb - n * nb) * rb
    r1 = min(oh_n, r0 + rb)
    c0 = blk * cb
    s0 = max(0, r0 * sh - ph)
    nr = max(0, min(h_n, (r1 - 1) * sh - ph + kh_n) - s0)
    rmax = (rb - 1) * sh + kh_n
    g = _STAGE_GUARD
    x1 = x.reshape(x.size)
    o1 = out.reshape(out.size)
    wb = w[blk].reshape(kh_n * kw_n * cb)
    bb = b[c0:c0 + cb]   # (the tiles load the bias even when they do not add it)
    y0 = 2 * g + rmax * w_n * 16
    npx = (r1 - r0) * ow_n
    plane = oh_n * ow_n
    ih0 = r0 * sh - ph - s0          # staged row of output row r0's first tap (may be < 0)
    seg = (ow_n + _TILE_PX - 1) // _TILE_PX
    mr = (ow_n + seg - 1) // seg
    relu = act == 1 and not has_res
    for v0 in range(0, cb, 16):
        cn = min(16, cb - v0)
        transpose_block(x1, (n * c_n + c0 + v0) * h_n * w_n + s0 * w_n, h_n * w_n, buf, g, 16,
                        cn, nr * w_n)
        for r in range(r1 - r0):
            i0 = ih0 + r * sh
            kh_lo = max(0, -i0)
            kh_hi = min(kh_n, nr - i0)
            for q0 in range(0, ow_n, mr):
                rn = min(mr, ow_n - q0)
                cc = q0 * sw - pw
                geo = (y0 + (r * ow_n + q0) * 16, 16, 0, g + (i0 * w_n + cc) * 16, 16, 0,
                       w_n * 16, v0, cb, v0)
                _dw_tile(buf, buf, wb, bb, buf, geo, cn, kw_n, rn, kh_lo, kh_hi, max(0, -cc),
                         min((rn - 1) * sw + kw_n, w_n - cc), has_bias, False, relu, sw)
        base = (n * c_n + c0 + v0) * plane + r0 * ow_n
        transpose_block(buf, y0, 16, o1, base, plane, npx, cn)
        if has_res or act > 1:
            q1 = res.reshape(res.size)
            for c in range(cn):
                o = base + c * plane
                if has_res:
                    for j in range(npx):
                        o1[o + j] += q1[o + j]
                if act > 1 or (has_res and act != 0):
                    act_row(o1[o:o + npx], act, aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _staged_par(nw, ntask, nb, rb, x, w, b, res, out, scr, per, sh, sw, ph, pw, has_bias,
                has_res, act, aa, ab):
    flags = np.zeros(ntask, np.int64)
    for wk in prange(nw):
        buf = scr[wk * per:(wk + 1) * per + _STAGE_GUARD]
        i = 0
        while True:
            t, i = next_affine(flags, wk, nw, i)
            if t < 0:
                break
            _staged_band(t, nb, rb, x, w, b, res, out, buf, sh, sw, ph, pw, has_bias, has_res,
                         act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def dwconv_staged(x, w, b, res, out, scr, sh, sw, ph, pw, has_bias, has_res, act, alpha_act,
                  beta_act):
    """Depthwise convolution of NCHW float32 tensors (x (N, C, H, W), out / res (N, C, OH, OW),
    w (blocks, KH, KW, 1, C // blocks) from ``staged_weights``) by tasks of (image, band of
    output rows, block of channels): 16 channels at a time, a task's input rows are
    transposed into a worker's scratch as one (rows, W, 16) block (``dw_staged_scratch_elems``),
    run as ``_dw_tile`` register tiles and transposed back. What the layout pass's
    one-convolution region (transpose, ``dwconv_nhwc``, transpose) computes, with L2-sized
    transposes instead of whole-tensor ones, in one parallel region (``staged_ok``: the
    kernels it takes; begin pads ph / pw, end pads implied by OH / OW). Channels that do not
    fill their last 16-channel group leave its other lanes idle (``layout.staged_nchw``
    takes NCHW layers only with whole groups)."""
    n_n, c_n, h_n, w_n = x.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    nblk, kh_n, kw_n, cb = w.shape[0], w.shape[1], w.shape[2], w.shape[4]
    if n_n * c_n * oh_n * ow_n == 0:
        return
    if (w.shape[3] != 1 or nblk * cb != c_n or out.shape[1] != c_n or out.shape[0] != n_n
            or (has_bias and b.shape[0] != c_n) or x.itemsize != 4
            or (kw_n != 3 and kw_n != 5 and kw_n != 7) or sw < 1 or sw > 2 or sh < 1
            or (has_res and res.shape != out.shape)):
        raise ValueError("dwconv_staged: unsupported shapes")
    sh, sw, ph, pw = np.int64(sh), np.int64(sw), np.int64(ph), np.int64(pw)
    act = np.int64(act)
    aa, ab = np.float64(alpha_act), np.float64(beta_act)
    if not has_bias:
        b = np.zeros(c_n, x.dtype)   # the register tiles read C bias values either way
    rb = _stage_rows(w_n, kh_n, sh, oh_n, ow_n)
    per = _stage_worker_elems(w_n, kh_n, sh, ow_n, rb)
    if scr.shape[0] < per + _STAGE_GUARD:
        raise ValueError("dwconv_staged: scratch too small")
    nth = num_threads()
    par = nth > 1 and out.size * kh_n * kw_n >= _PAR_MIN_STAGED
    nb = (oh_n + rb - 1) // rb
    if par and n_n * nblk < nth:
        if oh_n * ow_n >= _STAGED_MIN_PLANE:
            # bands in a multiple of the threads (per image when fewer images than threads)
            k = (nth + n_n * nblk - 1) // (n_n * nblk)
            nb = (nb + k - 1) // k * k
            rb = (oh_n + nb - 1) // nb
            nb = (oh_n + rb - 1) // rb
        elif n_n * nblk * nb < 2:
            par = False
    ntask = n_n * nb * nblk
    nw = min(nth, ntask, (scr.shape[0] - _STAGE_GUARD) // per) if par else 1
    if nw > 1:
        _staged_par(nw, ntask, nb, rb, x, w, b, res, out, scr, per, sh, sw, ph, pw,
                    bool(has_bias), bool(has_res), act, aa, ab)
    else:
        for t in range(ntask):
            _staged_band(t, nb, rb, x, w, b, res, out, scr[:per + _STAGE_GUARD], sh, sw, ph,
                         pw, bool(has_bias), bool(has_res), act, aa, ab)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _pw_task(t, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab):
    """Pixels [t * rb, t * rb + rb) of a pointwise convolution: one gemm into ``out`` (onto
    the residual + bias when there is a residual), then bias and activation while the block
    is in cache."""
    wide_vectors()
    p_n = x.shape[0] * x.shape[1] * x.shape[2]
    c_n = x.shape[3]
    m_n = out.shape[3]
    p0 = t * rb
    p1 = min(p_n, p0 + rb)
    o = eptr(out, p0 * m_n)
    nel = (p1 - p0) * m_n
    beta = 0.0
    if has_res:
        rr = eptr(res, p0 * m_n)
        if has_bias:
            for p in range(p1 - p0):
                oq = eptr(out, (p0 + p) * m_n)
                rq = eptr(res, (p0 + p) * m_n)
                for m in range(m_n):
                    oq[m] = rq[m] + b[m]
        else:
            for q in range(nel):
                o[q] = rr[q]
        beta = 1.0
    if c_n == 0:
        if not has_res:
            for q in range(nel):
                o[q] = 0
            if has_bias:
                for p in range(p1 - p0):
                    oq = eptr(out, (p0 + p) * m_n)
                    for m in range(m_n):
                        oq[m] += b[m]
    else:
        if p1 - p0 <= _PW_STREAM_ROWS:
            # a few pixels (a batch-1 fully connected layer as a 1x1 convolution): stream the
            # weights once, row by row, into the block's output rows (a gemm would pack all
            # of them first, for a product the weights' size in memory dominates)
            if not has_res:
                for q in range(nel):
                    o[q] = 0
            xp = eptr(x, p0 * c_n)
            for c in range(c_n):
                wr = eptr(w, c * m_n)
                for p in range(p1 - p0):
                    xv = xp[p * c_n + c]
                    oq = eptr(out, (p0 + p) * m_n)
                    for m in range(m_n):
                        oq[m] += xv * wr[m]
        else:
            st = pgemm(0, 0, p1 - p0, m_n, c_n, 1.0, x, p0 * c_n, c_n, w, 0, m_n, beta, out,
                       p0 * m_n, m_n)
            if st != 0:
                raise RuntimeError("BLAS gemm failed")
        if has_bias and not has_res:
            for p in range(p1 - p0):
                oq = eptr(out, (p0 + p) * m_n)
                for m in range(m_n):
                    oq[m] += b[m]
    if act != 0:
        act_row(out.reshape(-1)[p0 * m_n:p1 * m_n], act, aa, ab)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _pw_par(nw, ntask, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab):
    counter = np.zeros(1, np.int64)
    for wk in prange(nw):
        t = next_task(counter)
        while t < ntask:
            _pw_task(t, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab)
            t = next_task(counter)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def pwconv_nhwc(x, w, b, res, out, has_bias, has_res, act, alpha_act, beta_act):
    """Pointwise (1x1, stride 1, no pad, one group) convolution, channels-last: out (P, M) =
    act(x (P, C) @ w (C, M) + b [+ res]) in row blocks of ~_PW_BLOCK_ELEMS outputs, over
    threads when the gemm is big enough. ``w`` is (1, 1, C, M)."""
    p_n = x.shape[0] * x.shape[1] * x.shape[2]
    m_n = out.shape[3]
    if p_n == 0 or m_n == 0:
        return
    has_bias, has_res, act = bool(has_bias), bool(has_res), np.int64(act)
    aa, ab = np.float64(alpha_act), np.float64(beta_act)
    nth = num_threads()
    rb = max(1, _PW_BLOCK_ELEMS // m_n)
    flops = 2 * p_n * m_n * x.shape[3]
    if nth > 1 and flops >= _PAR_MIN_FLOPS:
        # at least two blocks per worker so that an uneven last block does not idle one
        rb = max(8, min(rb, (p_n + 2 * nth - 1) // (2 * nth)))
    ntask = (p_n + rb - 1) // rb
    if nth > 1 and ntask > 1 and flops >= _PAR_MIN_FLOPS:
        _pw_par(min(nth, ntask), ntask, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab)
    else:
        for t in range(ntask):
            _pw_task(t, rb, x, w, b, res, out, has_bias, has_res, act, aa, ab)

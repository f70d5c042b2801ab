"""CPU kernel: float32 2-D convolution on small output planes with many output channels, as an
implicit gemm whose vector lanes run over output channels, NCHW in and out, any group count
(panels per group). Imports nothing from jitort.

Deep layers of a CNN (7x7 and 14x14 planes, 256-2048 channels) are gemms with few columns:
N = OH*OW = 49 or 196. im2col + BLAS runs them well below its speed at N = 48 or 64 (OpenBLAS's
column blocking: N = 49 is one column past a block), and
the "flat" im2col of ``conv`` adds the padding columns (N = 63 for a 3x3 layer on 7x7). Here the
output channels are the vector operand and the pixels the broadcast one, so N needs no rounding:
a tile is MR <= 8 consecutive output pixels of one row x 3 vectors of 16 output channels (21-24
zmm accumulators, ``_ctile``: per tap 3 vector loads of packed weights, MR broadcasts read
straight from the input's zero-padded column-phase planes at one offset per tap, and 3*MR FMAs).
No im2col: the input is copied once (``phase_planes``, masked vector rows) into planes of every
padded row split by column stride phase (``_cgeom``: a tile is one output row, so its pixels
are contiguous there and a row reads rows oh * sh + kh * dh in place); not at all for a 1x1
stride-1 unpadded layer, whose planes are the input itself.

Weights are packed at compile time as panels of PW = 48 output channels of a group,
[group][panel][K][48] with K ordered (c, kh, kw) (``pack_weights``). Tasks are (image, panel,
block of output rows), pulled by the workers from a shared counter; within a task the taps go in
blocks of KC, each block's weights (KC x 192 bytes) reused by every pixel tile of the task, the
tiles' partial sums kept in the worker's scratch between blocks. The accumulators start from the
bias; after the last block a tile is written transposed into the NCHW output with the residual
and Relu (``_transpose_store``; planes of 2^k floats through a staging block, STAGE_PLANE_DIV),
other activations then run over the task's output rows, channel by channel.
"""
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .conv_implicit import tap_offsets
from .epilogue import act_row
from .gemm import claim, count_done, eptr, next_task, num_threads, scratch_workers
from .phases import phase_planes
from .ptr import loop_begin, loop_end, loop_phis, loop_results
from .qgemm import _ptr, masked_load, masked_store, splat
from .sync import next_affine, wait_count

_FM = {'reassoc', 'contract', 'arcp'}

PW = 48          # output channels per weight panel: 3 vectors of 16
MAXR = 8         # pixels per tile, at most
PITCH = 64       # floats per pixel row of a tile in scratch
TILE = MAXR * PITCH
KC = 512         # taps per block
#: Output planes of a multiple of STAGE_PLANE_DIV floats (32x32, 64x64, 128x128, ...; 2 KB
#: apart or a multiple of it) with rows of at least STAGE_MIN_OW go through a staging block
#: ([PW][OW] in the worker's scratch, then one contiguous run per channel into the output):
#: written straight, a tile's 48 channel rows are 48 short stores a plane apart, on such planes
#: all in one or two sets of the 64-set L1. Other planes are written straight: the staging
#: copy costs about what a few taps do.
STAGE_MIN_OW = 16
STAGE_PLANE_DIV = 512


#: ``_ctile`` flags: write the tile into the NCHW output (else into the tile scratch), add the
#: residual there, apply Relu there
FINAL, ADD_RES, RELU = 1, 2, 4
#: tile widths (pixels) written into the output straight from the registers; the others go
#: back through the tile scratch to one shared write. 7 and 8 are every tile of rows of 7, 14,
#: 28, 56, 111, 112 pixels (``_row_tiles``); a stem's tiles (27 taps) are slower through the
#: shared write
_DIRECT_R = (7, 8)


def _transpose_store(builder, a, mask, v, nch, obase, plane, rbase, flags):
    """Store a tile's 16 output channels 16v.. (``a``: MAXR vectors, pixel r's 16 channels
    each) into the NCHW output: channel c's pixels (those ``mask`` keeps, <8 x i1>) at obase +
    (16v + c) * plane, for 16v + c < nch, plus the residual at the same place (``ADD_RES``),
    then Relu (``RELU``). Three rounds of two-input shuffles turn the 8 x 16 block into 8
    vectors of 2 channels x 8 pixels; each half goes out as one masked 8-lane store."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    f32 = ir.FloatType()
    v8 = ir.VectorType(f32, 8)

    def shuf(x, y, idx):
        return builder.shuffle_vector(x, y, ir.Constant(ir.VectorType(i32, 16), idx))
    # round 1: pixel pairs, channels 0-7 (lo) and 8-15 (hi), (c: r, r+1) per 2 lanes
    lo = [shuf(a[2 * p], a[2 * p + 1], [i // 2 + 16 * (i % 2) for i in range(16)])
          for p in range(4)]
    hi = [shuf(a[2 * p], a[2 * p + 1], [8 + i // 2 + 16 * (i % 2) for i in range(16)])
          for p in range(4)]
    # round 2: 4 pixels per channel, channels 0-3 / 4-7 of each half
    quads = []
    for half in (lo, hi):
        for q in range(2):
            x, y = half[2 * q], half[2 * q + 1]
            quads.append([shuf(x, y, [2 * j + e + (16 if e >= 2 else 0) - (2 if e >= 2 else 0)
                                      for j in range(j0, j0 + 4) for e in range(4)])
                          for j0 in (0, 4)])
    # quads[2*half + q][g]: channels 8*half + 4g .. +3, pixels 4q .. 4q+3 (4 lanes each)
    mload, mstore = masked_load(builder, v8), masked_store(builder, v8)
    add_res = builder.icmp_signed('!=', builder.and_(flags, ir.Constant(i64, ADD_RES)),
                                  ir.Constant(i64, 0))
    relu = builder.icmp_signed('!=', builder.and_(flags, ir.Constant(i64, RELU)),
                               ir.Constant(i64, 0))
    zero8 = ir.Constant(v8, None)
    for half in range(2):
        for g in range(2):
            x, y = quads[2 * half][g], quads[2 * half + 1][g]
            for pair in range(2):
                # channels 8*half + 4g + 2*pair (+1): 4 pixels from x, then 4 from y
                f = shuf(x, y, [8 * pair + 4 * cc + e + (16 if e >= 4 else 0) - (4 if e >= 4 else 0)
                                for cc in range(2) for e in range(8)])
                for cc in range(2):
                    ch = 16 * v + 8 * half + 4 * g + 2 * pair + cc
                    val = builder.shuffle_vector(f, f, ir.Constant(ir.VectorType(i32, 8),
                                                                   list(range(8 * cc, 8 * cc + 8))))
                    live = builder.icmp_signed('<', ir.Constant(i64, ch), nch)
                    with builder.if_then(live, likely=True):
                        off = builder.mul(ir.Constant(i64, ch), plane)
                        dst = builder.bitcast(builder.gep(obase, [off]), v8.as_pointer())
                        src = builder.bitcast(builder.gep(rbase, [off]), v8.as_pointer())
                        rv = builder.call(mload, [src, ir.Constant(i32, 4), mask, zero8])
                        val2 = builder.select(add_res, builder.fadd(val, rv), val)
                        pos = builder.fcmp_ordered('>', val2, zero8)
                        val3 = builder.select(relu, builder.select(pos, val2, zero8), val2)
                        builder.call(mstore, [val3, dst, ir.Constant(i32, 4), mask])


@intrinsic
def _ctile(typingctx, c, coff, xb, xoff, offs, ooff, kq, wt, woff, init, ioff, mode, mr, nv,
           out, oof, plane, res, flags, nch):
    """Tile of mr (1..MAXR) pixels x nv (1..3) vectors of 16 output channels, float32:
    acc[r][v] starts from init[ioff + 16v : +16] (mode 0) or from the tile c[coff + r*PITCH +
    16v : +16] (mode 1), then for kq >= 0 taps q: acc[r][v] += xb[xoff + offs[ooff + q] + r] *
    wt[woff + q*PW + 16v : +16]. Without ``FINAL`` in flags the accumulators go back to the
    tile; with it, channel ch < nch's mr values to out[oof + ch * plane :][:mr] (+ res at the
    same offsets with ``ADD_RES``; Relu with ``RELU``) and the tile is not written."""
    f32t = types.float32
    if not all(isinstance(a, types.Array) and a.dtype == f32t for a in (c, xb, wt, init, out,
                                                                         res)):
        return None
    if not (isinstance(offs, types.Array) and offs.dtype == types.int64):
        return None
    sig = types.void(c, coff, xb, xoff, offs, ooff, kq, wt, woff, init, ioff, mode, mr, nv,
                     out, oof, plane, res, flags, nch)

    def codegen(context, builder, sig, args):
        (c_, coff_, xb_, xoff_, offs_, ooff_, kq_, wt_, woff_, init_, ioff_, mode_, mr_, nv_,
         out_, oof_, plane_, res_, flags_, nch_) = args
        a_t = sig.args
        i64 = ir.IntType(64)
        f32 = ir.FloatType()
        v16 = ir.VectorType(f32, 16)

        def as64(v, k):
            return context.cast(builder, v, a_t[k], types.int64)

        cbase = _ptr(context, builder, a_t[0], c_, coff_, f32)
        xbase = _ptr(context, builder, a_t[2], xb_, xoff_, f32)
        obase = _ptr(context, builder, a_t[4], offs_, ooff_, i64)
        wbase = _ptr(context, builder, a_t[7], wt_, woff_, f32)
        ibase = _ptr(context, builder, a_t[9], init_, ioff_, f32)
        outbase = _ptr(context, builder, a_t[14], out_, oof_, f32)
        resbase = _ptr(context, builder, a_t[17], res_, oof_, f32)
        plane64, flags64, nch64 = as64(plane_, 16), as64(flags_, 18), as64(nch_, 19)
        kq64 = as64(kq_, 6)
        accum = builder.icmp_signed('!=', as64(mode_, 11), ir.Constant(i64, 0))
        final = builder.icmp_signed('!=', builder.and_(flags64, ir.Constant(i64, FINAL)),
                                    ir.Constant(i64, 0))
        key = builder.add(builder.mul(as64(mr_, 12), ir.Constant(i64, 4)), as64(nv_, 13))
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [v16] * 3),
                                             "llvm.fma.v16f32")

        def vptr(base, off):
            return builder.bitcast(builder.gep(base, [off]), v16.as_pointer())

        exit_ = builder.append_basic_block("ct.exit")
        switch = builder.switch(key, exit_)
        for r_n in range(1, MAXR + 1):
            for v_n in range(1, PW // 16 + 1):
                blk = builder.append_basic_block(f"ct.{r_n}x{v_n}")
                switch.add_case(ir.Constant(i64, r_n * 4 + v_n), blk)
                builder.position_at_end(blk)
                slots = [ir.Constant(i64, r * PITCH + v * 16) for r in range(r_n)
                         for v in range(v_n)]
                bias = [builder.load(vptr(ibase, ir.Constant(i64, v * 16)), align=4)
                        for v in range(v_n)]
                first = builder.block
                with builder.if_then(accum):   # the tile is read only when accumulating
                    own = [builder.load(vptr(cbase, s), align=4) for s in slots]
                    got = builder.block
                starts = []
                for j in range(len(slots)):
                    p = builder.phi(v16)
                    p.add_incoming(bias[j % v_n], first)
                    p.add_incoming(own[j], got)
                    starts.append(p)
                i, pre, loop, done = loop_begin(builder, kq64, f"ct.loop.{r_n}x{v_n}",
                                                f"ct.done.{r_n}x{v_n}")
                accs = loop_phis(builder, v16, starts, pre)
                xp = builder.gep(xbase, [builder.load(builder.gep(obase, [i]))])
                wrow = builder.gep(wbase, [builder.mul(i, ir.Constant(i64, PW))])
                wv = [builder.load(vptr(wrow, ir.Constant(i64, v * 16)), align=4)
                      for v in range(v_n)]
                new = []
                for r in range(r_n):
                    s = builder.load(builder.gep(xp, [ir.Constant(i64, r)]), align=4)
                    bc = splat(builder, s, 16)
                    for v in range(v_n):
                        new.append(builder.call(fma, [bc, wv[v], accs[r * v_n + v]]))
                end = loop_end(builder, i, 1, kq64, loop, done, zip(accs, new))
                fin = loop_results(builder, v16, starts, pre, new, end)
                if r_n in _DIRECT_R:
                    with builder.if_else(final) as (then, otherwise):
                        with then:
                            zero = ir.Constant(v16, None)
                            mask = ir.Constant(ir.VectorType(ir.IntType(1), 8),
                                               [r < r_n for r in range(8)])
                            for v in range(v_n):
                                rows = [fin[r * v_n + v] for r in range(r_n)]
                                _transpose_store(builder, rows + [zero] * (MAXR - r_n), mask,
                                                 v, nch64, outbase, plane64, resbase, flags64)
                        with otherwise:
                            for p, s in zip(fin, slots):
                                builder.store(p, vptr(cbase, s), align=4)
                else:
                    for p, s in zip(fin, slots):
                        builder.store(p, vptr(cbase, s), align=4)
                builder.branch(exit_)
        # the write into the output of the other tile shapes, shared (a copy per shape made
        # the kernel's compile tree 10.5 s, 5.6 s this way): the tile back from c, its first mr
        # pixels stored
        builder.position_at_end(exit_)
        mr64 = as64(mr_, 12)
        shared = builder.and_(final, builder.and_(
            builder.icmp_signed('!=', mr64, ir.Constant(i64, _DIRECT_R[0])),
            builder.icmp_signed('!=', mr64, ir.Constant(i64, _DIRECT_R[1]))))
        with builder.if_then(shared):
            lane = ir.Constant(ir.VectorType(i64, 8), list(range(8)))
            mask = builder.icmp_signed('<', lane, splat(builder, as64(mr_, 12), 8))
            for v in range(PW // 16):
                # (only the vectors the panel has: a 16-channel panel transposes one)
                with builder.if_then(builder.icmp_signed('<', ir.Constant(i64, 16 * v), nch64)):
                    rows = [builder.load(vptr(cbase, ir.Constant(i64, r * PITCH + v * 16)),
                                         align=4) for r in range(MAXR)]
                    _transpose_store(builder, rows, mask, v, nch64, outbase, plane64, resbase,
                                     flags64)
        return context.get_dummy_value()
    return sig, codegen


def pack_weights(w, group=1):
    """Weights (M, C / group, KH, KW) as ``_ctile``'s vector operand: per group, its M / group
    output channels in panels of PW, [group][panel][K][PW] float32 with K ordered (c, kh, kw),
    a panel's channels past the group's zero (called by the compiler)."""
    mg = w.shape[0] // group
    k = int(np.prod(w.shape[1:]))
    npg = (mg + PW - 1) // PW
    p = np.zeros((group, npg * PW, k), np.float32)
    p[:, :mg] = np.asarray(w, np.float32).reshape(group, mg, k)
    return np.ascontiguousarray(p.reshape(group * npg, PW, k).transpose(0, 2, 1)).reshape(-1)


def _tcap_py(oh, ow):
    """float32 elements of one worker's scratch: every pixel tile of a task's rows (partial
    sums between tap blocks) and the staging block (plain Python / njit)."""
    seg = (ow + MAXR - 1) // MAXR
    return oh * seg * TILE + PW * (ow + MAXR)


_tcap = njit(cache=True)(_tcap_py)


def _direct_py(kh, kw, sh, sw, ph, pw, oh, ow, h, w):
    """Whether the input planes are the phase planes already (1x1, stride 1, no padding)."""
    return kh == 1 and kw == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0 \
        and oh == h and ow == w


_direct = njit(cache=True)(_direct_py)


def _cgeom_py(h, w, oh, ow, kh, kw, sh, sw, dh, dw):
    """(hq, wq): rows and columns of each column phase of an input plane (plain Python /
    njit). A tile is one output row, so only the columns need splitting into stride phases
    (the tiles' pixels then contiguous): every padded row is kept (hq of them) and a row
    reads the rows oh * sh + kh * dh in place."""
    return (oh - 1) * sh + (kh - 1) * dh + 1, ((ow - 1) * sw + (kw - 1) * dw + sw) // sw


_cgeom = njit(cache=True)(_cgeom_py)


def _row_tiles_py(ow):
    """(pixel tiles per output row, pixels per tile <= MAXR) (plain Python / njit)."""
    seg = (ow + MAXR - 1) // MAXR
    return seg, (ow + seg - 1) // seg


_row_tiles = njit(cache=True)(_row_tiles_py)


def cvec_scratch_elems(n, c, h, w, kh, kw, oh, ow, sh, sw, dh, dw, threads=None):
    """float32 elements of ``conv2d_cvec``'s scratch: the phase planes (counted for a 1x1
    stride-1 layer too, which reads its input in place: the size must not depend on the
    pads), plus per worker (``threads``, default NUMBA_NUM_THREADS, at most that) the partial
    sums of a task's pixel tiles (plain Python; sizes may be symbolic)."""
    nt = scratch_workers(threads)
    hq, wq = _cgeom_py(h, w, oh, ow, kh, kw, sh, sw, dh, dw)
    planes = n * c * sw * hq * wq + MAXR
    return planes + nt * _tcap_py(oh, ow)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _task(t, npan, npg, nrb, rbs, xb, img, gimg, off, pk, kk, bp, res1, out1, tl, m_n, mg,
          oh_n, ow_n, rstep, has_res, act, alpha, beta):
    """Task t: image, panel of PW output channels (npg per group of mg channels), block of rbs
    output rows."""
    rb = t % nrb
    pn = (t // nrb) % npan
    n = t // (nrb * npan)
    r0 = rb * rbs
    r1 = min(oh_n, r0 + rbs)
    if r1 <= r0:
        return
    g = pn // npg
    p0 = (pn - g * npg) * PW
    m0 = g * mg + p0
    nch = min(PW, mg - p0)
    xbase = n * img + g * gimg
    nv = (nch + 15) // 16
    seg, mr = _row_tiles(ow_n)
    plane = oh_n * ow_n
    wbase = pn * kk * PW
    obase = (n * m_n + m0) * plane
    stage = ow_n >= STAGE_MIN_OW and plane % STAGE_PLANE_DIV == 0
    sst = ow_n + MAXR        # staged row stride (floats)
    stg = tl[tl.shape[0] - PW * sst:]
    relu = act == 1
    flags = FINAL | (0 if stage else (ADD_RES if has_res else 0) | (RELU if relu else 0))
    for k0 in range(0, kk, KC):
        kq = min(KC, kk - k0)
        last = k0 + KC >= kk
        for oh in range(r0, r1):
            for s in range(seg):
                ow0 = s * mr
                if stage:
                    dst, doff, dstride = stg, ow0, sst
                else:
                    dst, doff, dstride = out1, obase + oh * ow_n + ow0, plane
                _ctile(tl, ((oh - r0) * seg + s) * TILE, xb, xbase + oh * rstep + ow0, off, k0,
                       kq, pk, wbase + k0 * PW, bp, pn * PW, 0 if k0 == 0 else 1,
                       min(mr, ow_n - ow0), nv, dst, doff, dstride, res1 if not stage else stg,
                       flags if last else 0, nch)
            if stage and last:   # the row's channels, each one contiguous run into out
                for ch in range(nch):
                    o = obase + ch * plane + oh * ow_n
                    d = eptr(out1, o)
                    sp = eptr(stg, ch * sst)
                    if has_res:
                        rp = eptr(res1, o)
                        for j in range(ow_n):
                            d[j] = sp[j] + rp[j]
                    else:
                        for j in range(ow_n):
                            d[j] = sp[j]
                    if relu:
                        for j in range(ow_n):
                            d[j] = max(d[j], np.float32(0.0))
    if act > 1:
        for ch in range(nch):
            o0 = obase + ch * plane + r0 * ow_n
            act_row(out1[o0:o0 + (r1 - r0) * ow_n], act, alpha, beta)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _worker(counter, ntask, npan, npg, nrb, rbs, xb, img, gimg, off, pk, kk, bp, res, out,
            tl, mg, rstep, has_res, act, alpha, beta):
    m_n, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    out1 = out.reshape(out.size)
    res1 = res.reshape(res.size)
    t = next_task(counter)
    while t < ntask:
        _task(t, npan, npg, nrb, rbs, xb, img, gimg, off, pk, kk, bp, res1, out1, tl, m_n, mg,
              oh_n, ow_n, rstep, has_res, act, alpha, beta)
        t = next_task(counter)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _cvec_par(nw, ntask, npan, npg, nrb, rbs, xb, img, gimg, off, pk, kk, bp, res, out, tls,
              tcap, mg, rstep, has_res, act, alpha, beta, src, nc, h, w, sw, ph, pw, dh, dw,
              kh, kw, hq, wq):
    """The tiles over nw workers, each first in its own share (``sync.next_affine``), after
    the stride-phase copy of the nc input planes of src into xb in the same parallel region
    (nc = 0: the planes are read in place): the workers claim chunks of planes, count them
    done and wait for the last."""
    nch = min(nc, 4 * nw)
    per = (nc + nch - 1) // max(1, nch)
    nch = (nc + per - 1) // per if nc > 0 else 0
    pq = sw * hq * wq
    cnt = np.zeros(2, np.int64)
    flags = np.zeros(ntask, np.int64)
    m_n, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    out1 = out.reshape(out.size)
    res1 = res.reshape(res.size)
    for wk in prange(nw):
        while True:
            k = claim(cnt, 0)
            if k >= nch:
                break
            c0 = k * per
            c1 = min(nc, c0 + per)
            phase_planes(src[c0 * h * w:c1 * h * w], xb[c0 * pq:c1 * pq], np.float32(0.0),
                         c1 - c0, h, w, 1, sw, ph, pw, dh, dw, kh, kw, hq, wq)
            count_done(cnt, 1)
        wait_count(cnt, 1, nch)
        tl = tls[wk * tcap:(wk + 1) * tcap]
        i = 0
        while True:
            t, i = next_affine(flags, wk, nw, i)
            if t < 0:
                break
            _task(t, npan, npg, nrb, rbs, xb, img, gimg, off, pk, kk, bp, res1, out1, tl, m_n,
                  mg, oh_n, ow_n, rstep, has_res, act, alpha, beta)


#: below this many flops a convolution runs on one thread (4 MFLOP under Numba's TBB layer;
#: 1 MFLOP on jitort's pool, as conv.py's split, whose comment has the sweep)
_PAR_MIN_FLOPS = 1 << 20
#: phase-plane elements from which the copy is split over the threads by channels (it is
#: serial work before the tiles' parallel region: at 2 threads a strided grouped layer spent
#: a third of its time there)
_PAR_MIN_COPY = 1 << 15


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _planes_par(nw, src, xb, nc, h, w, sw, ph, pw, dh, dw, kh, kw, hq, wq):
    """``phase_planes`` of the nc (h, w) planes of src, in nw chunks of planes at once."""
    per = (nc + nw - 1) // nw
    pq = sw * hq * wq
    for k in prange(nw):
        c0 = k * per
        c1 = min(nc, c0 + per)
        if c1 > c0:
            phase_planes(src[c0 * h * w:c1 * h * w], xb[c0 * pq:c1 * pq], np.float32(0.0),
                         c1 - c0, h, w, 1, sw, ph, pw, dh, dw, kh, kw, hq, wq)


#: tasks per thread aimed at when splitting the panels into blocks of output rows
_TASKS_PER_THREAD = 8


@njit(cache=True, error_model='numpy', fastmath=_FM)
def conv2d_cvec(x, pk, kh, kw, b, res, out, scr, sh, sw, ph, pw, dh, dw, group, has_bias,
                has_res, act, alpha, beta):
    """out = act(conv(x, w) + b (+ res)) for float32 x (N, C, H, W), out / res (N, M, OH, OW),
    weights packed by ``pack_weights`` (kh x kw kernels, ``group`` groups), strides sh / sw,
    begin pads ph / pw, dilations dh / dw; ``scr``: ``cvec_scratch_elems`` float32 elements
    (for at least the current thread count); act codes as in ``epilogue``. res must not alias
    out. A thin wrapper over a core typed with plain int64 / bool / float64 (as
    ``conv2d_implicit``)."""
    _cvec_core(x, pk, np.int64(kh), np.int64(kw), b, res, out, scr, np.int64(sh),
               np.int64(sw), np.int64(ph), np.int64(pw), np.int64(dh), np.int64(dw),
               np.int64(group), bool(has_bias), bool(has_res), np.int64(act),
               np.float64(alpha), np.float64(beta))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _cvec_core(x, pk, kh, kw, b, res, out, scr, sh, sw, ph, pw, dh, dw, group, has_bias,
               has_res, act, alpha, beta):
    n_n, c_n, h, w = x.shape
    m_n, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    if n_n * m_n * oh_n * ow_n == 0:
        return
    if group < 1 or c_n % group != 0 or m_n % group != 0:
        raise ValueError("conv2d_cvec: channels not divisible by the group count")
    cg, mg = c_n // group, m_n // group
    kk = cg * kh * kw
    npg = (mg + PW - 1) // PW
    npan = group * npg
    if pk.shape[0] < npan * PW * kk:
        raise ValueError("conv2d_cvec: packed weights smaller than the convolution's")
    hq, wq = _cgeom(h, w, oh_n, ow_n, kh, kw, sh, sw, dh, dw)
    tcap = _tcap(oh_n, ow_n)
    planes = n_n * c_n * sw * hq * wq + MAXR
    if scr.shape[0] < planes + tcap:
        raise ValueError("conv2d_cvec: scratch too small")
    nc = n_n * c_n
    direct = _direct(kh, kw, sh, sw, ph, pw, oh_n, ow_n, h, w)
    if direct:
        xb = x.reshape(x.size)   # the planes are the input (hq, wq = h, w): read in place
    else:
        xb = scr[:planes]
        xb[planes - MAXR:] = 0.0
    img = c_n * sw * hq * wq
    gimg = cg * sw * hq * wq
    off = tap_offsets(cg, kh, kw, 1, sw, dh, dw, hq, wq)
    bp = np.zeros(npan * PW, np.float32)  # the tiles' first values, per panel
    if has_bias:
        for g in range(group):
            for j in range(mg):
                bp[(g * npg + j // PW) * PW + j % PW] = b[g * mg + j]
    nth = num_threads()
    flops = 2.0 * n_n * m_n * kk * oh_n * ow_n
    par = nth > 1 and flops >= _PAR_MIN_FLOPS
    nrb = 1
    if par and n_n * npan < _TASKS_PER_THREAD * nth:
        nrb = min(oh_n, (_TASKS_PER_THREAD * nth + n_n * npan - 1) // (n_n * npan))
    rbs = (oh_n + nrb - 1) // nrb
    nrb = (oh_n + rbs - 1) // rbs
    ntask = n_n * npan * nrb
    tls = scr[planes:]
    nw = min(nth, ntask, tls.shape[0] // tcap) if par else 1
    if nw > 1:
        # the phase copy and the tiles in one region (one region's launch, not two)
        ncopy = 0 if direct else nc
        _cvec_par(nw, ntask, npan, npg, nrb, rbs, xb, img, gimg, off, pk, kk, bp, res, out,
                  tls, tcap, mg, sh * wq, has_res, act, alpha, beta, x.reshape(x.size), ncopy,
                  h, w, sw, ph, pw, dh, dw, kh, kw, hq, wq)
        return
    if not direct:
        pw_n = min(nth, nc)
        if pw_n > 1 and float(nc) * hq * wq * sw >= _PAR_MIN_COPY:
            _planes_par(pw_n, x.reshape(x.size), xb, nc, h, w, sw, ph, pw, dh, dw, kh, kw, hq,
                        wq)
        else:
            phase_planes(x.reshape(x.size), xb, np.float32(0.0), nc, h, w, 1, sw, ph, pw, dh,
                         dw, kh, kw, hq, wq)
    counter = np.zeros(1, np.int64)
    _worker(counter, ntask, npan, npg, nrb, rbs, xb, img, gimg, off, pk, kk, bp, res, out,
            tls[:tcap], mg, sh * wq, has_res, act, alpha, beta)


#: The rule (``python scripts/sweeps/sweep_conv_cvec.py`` compares the kernels on group-1 layers):
#: taken for small planes with many output channels, where im2col's gemm has few columns (N =
#: 49 or, flat, 63), 3x3 stride 2, 1x7 / 7x1, 5x5, and 1x1 layers with K >= CVEC_MIN_K; against
#: the implicit gemm (stems of 8-16 input channels) only with CVEC_MIN_M_VS_IMPLICIT output
#: channels or more (a vector of 16 channels per 8 pixels has little to do per load).
#: Not taken: where Winograd is the other kernel (3x3 stride 1 on 14x14 and up), fewer than
#: 16 output channels (most lanes of a vector idle), and planes past CVEC_MAX_PLANE.
CVEC_MIN_M = 16
CVEC_MIN_M_VS_IMPLICIT = 32
CVEC_MIN_K = 64
CVEC_MAX_PLANE = 56 * 56


def cvec_wins(C, M, KH, KW, OH, OW, SH, SW, winograd_alt=False, implicit_alt=False,
              group=1) -> bool:
    """Whether ``conv2d_cvec`` is the kernel for this float32 convolution (plain Python; C and
    M count all groups); ``winograd_alt`` / ``implicit_alt``: the kernel taken otherwise is
    Winograd / the implicit gemm of ``conv_implicit``."""
    if group != 1:
        return _GROUPED_RULE(C // group, M // group, KH, KW, OH, OW, SH, SW, winograd_alt)
    if M < CVEC_MIN_M:
        return False
    if implicit_alt:
        return M >= CVEC_MIN_M_VS_IMPLICIT
    return (not winograd_alt and C * KH * KW >= CVEC_MIN_K and OH * OW <= CVEC_MAX_PLANE)



#: Grouped layers (``python scripts/sweeps/sweep_conv_cvec.py --only "g > 1"`` compares the kernels):
#: taken for grouped 3x3 layers of 16-32 channels per group and strided ones (the input's
#: stride phases are copied as masked vector rows, ``phases``); with fewer than 16 output
#: channels per group only on planes up to CVEC_GROUPED_HALF_MAX_PLANE (a vector of 16 lanes
#: half idle; conv_group's gemm does as well or better on bigger ones). Kept off: more than
#: CVEC_GROUPED_MAX_CG_VS_WINOGRAD channels per group where Winograd runs them, and grouped 1x1
#: layers with K < CVEC_GROUPED_MIN_K_1X1 (few taps do little for each transposed tile write).
CVEC_GROUPED_MAX_CG_VS_WINOGRAD = 32
CVEC_GROUPED_MIN_MG = 8
CVEC_GROUPED_HALF_MAX_PLANE = 14 * 14
CVEC_GROUPED_MIN_K_1X1 = 2 * CVEC_MIN_K


def _grouped_wins(CG, MG, KH, KW, OH, OW, SH, SW, winograd_alt) -> bool:
    k = CG * KH * KW
    if MG < CVEC_GROUPED_MIN_MG or k < CVEC_MIN_K or OH * OW > CVEC_MAX_PLANE:
        return False
    if KH * KW == 1 and k < CVEC_GROUPED_MIN_K_1X1:
        return False
    if MG < CVEC_MIN_M and OH * OW > CVEC_GROUPED_HALF_MAX_PLANE:
        return False
    if winograd_alt:
        return CG <= CVEC_GROUPED_MAX_CG_VS_WINOGRAD
    return True


_GROUPED_RULE = _grouped_wins

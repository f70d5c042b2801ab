"""CPU kernels: LSTM, GRU and RNN (input projection as one GEMM over all steps, then the
recurrence). Imports nothing from jitort.

Every entry point (``lstm``, ``gru``, ``rnn``) works in two phases:

1. The input projection of all time steps and both directions at once: one GEMM
   ``XW (rows, nd * G * H) = X (rows, I) @ W (nd * G * H, I)^T + bias`` through the GEMM
   library's task runner (BLAS, split over threads when big). ``rows`` are X's rows as stored:
   (t, b) for layout 0, (b, t) for layout 1. The bias folded in is Wb + Rb (GRU: Rb of the z and
   r gates only, and of h too unless ``linear_before_reset``).
2. The recurrence, per direction: each step one small product ``h (B, H) @ R^T (H, G * H)``
   (``_hgemm``: a k-unrolled vector loop over the pre-transposed weights ``rt`` for a few batch
   rows, BLAS gemm for more), then the gate math of every active batch row fused in one loop
   (default activations: polynomial sigmoid / tanh of ``mathfn``) or, for other activations,
   a few vectorized passes with the activation chosen outside each loop (``_act``).
   Bidirectional layers with two or more threads run their two directions in parallel.

Conventions shared by the three kernels (all arrays C-contiguous, one float dtype):
``x`` (X0, X1, I) as given; ``w`` (nd, G*H, I); ``wp`` W packed by ``pack_weights`` (float32
constant weights) or shape (0, 0, 0); ``rt`` (nd, H, G*H) = R transposed per direction; ``bias``
(nd, 2*G*H) or shape (1, 0) when absent; ``h0``/``c0`` like Y_h or shape (0, 0, 0) when absent;
``seqlen`` (B,) integers or shape (0,) when absent; ``y`` (T, nd, B, H) / (B, T, nd, H) and
``yh``/``yc`` (nd, B, H) / (B, nd, H) by ``layout``, shape all-0 when absent; ``ws`` a scratch of
``scratch_elems(...)`` elements. ``acts`` is a tuple of activation codes (ACT_*), G' per
direction (LSTM f, g, h; GRU f, g; RNN f; the lowering pads it to 6), ``alphas``/``betas``
float tuples of the same length.
``clip`` bounds every gate's pre-activation to [-clip, clip] (inf: no clip). With sequence
lengths, a batch row stops at its length: Y is 0 past it, Y_h / Y_c hold its last valid step's
state (0 for length 0), and the reverse direction runs from its last valid step back, as
onnxruntime does.
"""
import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload
from numba.np.arrayobj import make_array

from .gemm import _mm_run, claim, count_done, eptr, num_threads, xgemm
from .epilogue import (ACT_LEAKY_RELU as E_LEAKY_RELU, ACT_SIGMOID as E_SIGMOID,
                       ACT_TANH as E_TANH, act_row)
from .mathfn import fexp, fexpneg, flog, fsigmoid, ftanh
from .ptr import loop_begin, loop_end, loop_phis, loop_results
from .sync import wait_count

_FM = {'reassoc', 'contract', 'arcp'}

# activation codes (the lowering maps ONNX names to these)
ACT_SIGMOID = 0
ACT_TANH = 1
ACT_RELU = 2
ACT_LEAKY_RELU = 3
ACT_THRESHOLDED_RELU = 4
ACT_SCALED_TANH = 5
ACT_HARD_SIGMOID = 6
ACT_ELU = 7
ACT_SOFTSIGN = 8
ACT_SOFTPLUS = 9
ACT_AFFINE = 10
# epilogue's codes of ACT_SIGMOID, ACT_TANH, ACT_LEAKY_RELU (by index; -1: not there)
_EPILOGUE_ACT = (E_SIGMOID, E_TANH, -1, E_LEAKY_RELU)

# Batch rows from which a step's h @ R^T goes to BLAS gemm rather than the vector loop (which
# streams R^T once per batch row; BLAS packs it once per step).
_BLAS_MIN_ROWS = 4
# Multiply-adds per direction (T * B * H * G * H) from which two directions run on two threads.
_PAR_MIN_MACS = 1 << 16


def scratch_elems(seq, batch, hidden, gates, nd):
    """Scratch elements ``lstm``/``gru``/``rnn`` need: the projected inputs (seq*batch rows of
    nd*G*H, padded to whole panels), per direction the step product, the state (h, c) and a
    temporary row block."""
    gh = gates * hidden
    return (seq * batch * (nd * gh + PANEL) + nd * batch * (2 * gh + PANEL + 2 * hidden)
            + nd * gh + 64)


# --- the input projection: packed weights and a register-blocked micro-kernel ---------------
# X (M, K) @ W^T is a GEMM with few rows (T * B) and constant weights. BLAS packs all of W on
# every call; here W^T is packed once at compile time into panels of PANEL columns
# (``pack_weights``: (N / PANEL, K, PANEL), zero-padded), and ``_mkr`` computes an _MR x PANEL
# block of the output with its accumulators in vector registers over all of K.
_VW = 16 if llb.get_host_cpu_features().get('avx512f') else 8  # float32 lanes per vector
PANEL = 2 * _VW


def pack_weights(w):
    """(nd, N', K) weights -> W^T in panels (ceil(nd*N'/PANEL), K, PANEL), same dtype."""
    nd, n1, k = w.shape
    n = nd * n1
    wt = np.ascontiguousarray(w.reshape(n, k).T)
    np_ = -(-n // PANEL)
    out = np.zeros((np_, k, PANEL), w.dtype)
    for p in range(np_):
        c = wt[:, p * PANEL:(p + 1) * PANEL]
        out[p, :, :c.shape[1]] = c
    return out


def _panel_kernel(nrows, npanels, accumulate):
    """A register-blocked micro-kernel over ``nrows`` rows of x and ``npanels`` weight panels
    (2 * nrows * npanels vector accumulators, each x value broadcast once per k):

        out[ooff + r*ldo + g*ostride + (0..PANEL-1)] (+)= sum_k x[xoff + r*ldx + k]
                                                         * wp[woff + g*wstride + k*PANEL + ..]

    for k in [0, kc), added to ``out`` (``accumulate``) or written over it. No bounds checks:
    callers pass valid offsets. float32 (float64 works, at half speed)."""

    def kernel(typingctx, x, xoff, ldx, wp, woff, wstride, out, ooff, ldo, ostride, kc):
        if not all(isinstance(a, types.Array) for a in (x, wp, out)) or not (
                x.dtype == wp.dtype == out.dtype and x.dtype in (types.float32, types.float64)):
            return None
        sig = types.void(x, xoff, ldx, wp, woff, wstride, out, ooff, ldo, ostride, kc)

        def codegen(context, builder, sig, args):
            i64 = ir.IntType(64)
            tys = sig.args
            vty = ir.VectorType(context.get_value_type(tys[0].dtype), _VW)

            def c(v):
                return ir.Constant(i64, v)

            def data(k):
                return make_array(tys[k])(context, builder, args[k]).data

            def i(k):
                return context.cast(builder, args[k], tys[k], types.int64)

            def vptr(base, off):
                return builder.bitcast(builder.gep(base, [off]), vty.as_pointer())

            px, pw, po = data(0), data(3), data(6)
            xoff_, ldx_, woff_, ws_ = i(1), i(2), i(4), i(5)
            ooff_, ldo_, os_, kc_ = i(7), i(8), i(9), i(10)
            optrs = [vptr(po, builder.add(builder.add(ooff_, builder.mul(ldo_, c(r))),
                                          builder.add(builder.mul(os_, c(g)), c(h * _VW))))
                     for r in range(nrows) for g in range(npanels) for h in range(2)]
            zero = ir.Constant(vty, [0.0] * _VW)
            acc0 = ([builder.load(p, align=4) for p in optrs] if accumulate
                    else [zero] * len(optrs))
            xrows = [builder.gep(px, [builder.add(xoff_, builder.mul(ldx_, c(r)))])
                     for r in range(nrows)]
            wbase = [builder.add(woff_, builder.mul(ws_, c(g))) for g in range(npanels)]
            kk, pre, loop, done = loop_begin(builder, kc_, 'panel.loop', 'panel.done')
            accs = loop_phis(builder, vty, acc0, pre)
            elt = 'f32' if tys[0].dtype == types.float32 else 'f64'
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3),
                                                 f'llvm.fma.v{_VW}{elt}')
            zero_mask = ir.Constant(ir.VectorType(ir.IntType(32), _VW), [0] * _VW)
            kp = builder.mul(kk, c(PANEL))
            ws = []
            for g in range(npanels):
                base = builder.add(wbase[g], kp)
                ws.append([builder.load(vptr(pw, builder.add(base, c(h * _VW))), align=4)
                           for h in range(2)])
            new = []
            for r in range(nrows):
                xv = builder.load(builder.gep(xrows[r], [kk]), align=4)
                sp = builder.insert_element(ir.Constant(vty, ir.Undefined), xv,
                                            ir.Constant(ir.IntType(32), 0))
                sp = builder.shuffle_vector(sp, ir.Constant(vty, ir.Undefined), zero_mask)
                for g in range(npanels):
                    for h in range(2):
                        new.append(builder.call(fma, [sp, ws[g][h], accs[len(new)]]))
            end = loop_end(builder, kk, 1, kc_, loop, done, zip(accs, new))
            res = loop_results(builder, vty, acc0, pre, new, end)
            for p, v in zip(optrs, res):
                builder.store(v, p, align=4)
            return context.get_dummy_value()
        return sig, codegen
    kernel.__name__ = kernel.__qualname__ = f"_mk{nrows}x{npanels}{'_acc' if accumulate else ''}"
    return intrinsic(kernel)


#: rows x one panel, added to out: the input projection and the packed step product, _MR
#: rows at a time (2 * _MR accumulators: 24 of AVX-512's 32 vector registers, 12 of AVX2's
#: 16), then 4, then 1: the more rows per tile, the fewer times each weight panel is loaded.
_MR = 12 if _VW == 16 else 6
_mkr = _panel_kernel(_MR, 1, True)
_mk4 = _panel_kernel(4, 1, True)
_mk1 = _panel_kernel(1, 1, True)
_PROJ_ROWS = 4 * _MR  # rows of x a projection block keeps in cache while its panels pass
#: one row x four panels (a chunk's four gates), written over out: LSTM steps by chunks
_mk1x4 = _panel_kernel(1, 4, False)
#: four rows x two panels (two gates of a chunk), written over out: LSTM steps by chunks
_mk4x2 = _panel_kernel(4, 2, False)
#: GRU steps by chunks: one row x its three gates, four rows x one gate; without
#: linear_before_reset, z and r (one row x two gates) then the candidate (one row x one gate)
_mk1x3 = _panel_kernel(1, 3, False)
_mk4x1 = _panel_kernel(4, 1, False)
_mk1x2 = _panel_kernel(1, 2, False)
_mk1x1 = _panel_kernel(1, 1, False)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _panel_rows(x, xoff, ldx, wp, woff, out, ooff, ldo, nrows, kc):
    """out[ooff + r*ldo + (0..PANEL-1)] += x[xoff + r*ldx + (0..kc-1)] @ the panel at
    wp[woff] for r < nrows: _MR rows at a time, then 4, then one."""
    r = 0
    while r + _MR <= nrows:
        _mkr(x, xoff + r * ldx, ldx, wp, woff, 0, out, ooff + r * ldo, ldo, 0, kc)
        r += _MR
    while r + 4 <= nrows:
        _mk4(x, xoff + r * ldx, ldx, wp, woff, 0, out, ooff + r * ldo, ldo, 0, kc)
        r += 4
    while r < nrows:
        _mk1(x, xoff + r * ldx, 0, wp, woff, 0, out, ooff + r * ldo, 0, 0, kc)
        r += 1


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _proj_panels(x, wp, bsum, out, p0, p1):
    """out[:, p*PANEL:(p+1)*PANEL] = x @ (panel p) + bsum for panels p0..p1-1; out's rows are
    padded to whole panels, bsum covers the real columns."""
    m, k = x.shape
    ldo = out.shape[1]
    n = bsum.shape[0]
    zero = out.dtype.type(0.0)
    # raw pointers from the range's first column: indices offset by p0 kept Numba's
    # negative-index wraparound in these loops (scatters)
    c0 = p0 * PANEL
    nc = (p1 - p0) * PANEL
    nr = max(0, min(n - c0, nc))  # real columns of the range
    bs = eptr(bsum, c0)
    for r in range(m):
        row = eptr(out, r * ldo + c0)
        for j in range(nr):
            row[j] = bs[j]
        for j in range(nr, nc):
            row[j] = zero
    # row blocks of _PROJ_ROWS: their rows of x stay in cache while every panel passes
    for r0 in range(0, m, _PROJ_ROWS):
        r1 = min(m, r0 + _PROJ_ROWS)
        for p in range(p0, p1):
            _panel_rows(x, r0 * k, k, wp, p * k * PANEL, out, r0 * ldo + p * PANEL, ldo, r1 - r0, k)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _proj_par(x, wp, bsum, out, nw):
    npan = wp.shape[0]
    for t in prange(nw):
        p0 = t * npan // nw
        p1 = (t + 1) * npan // nw
        _proj_panels(x, wp, bsum, out, p0, p1)


# --- activations -------------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath=_FM)
def _act(v, code, alpha, beta):
    """v[:] = act(v) in place (1-D); the branch is outside each loop, so each loop vectorizes.
    Sigmoid, Tanh and LeakyRelu are the fused epilogues' (``epilogue.act_row``: the same
    functions, NaN kept)."""
    t_ = v.dtype.type
    n = v.shape[0]
    a = t_(alpha)
    b = t_(beta)
    zero = t_(0.0)
    one = t_(1.0)
    if code == ACT_SIGMOID or code == ACT_TANH or code == ACT_LEAKY_RELU:
        act_row(v, _EPILOGUE_ACT[code], alpha, beta)
    elif code == ACT_RELU or code == ACT_THRESHOLDED_RELU:
        # Relu: ThresholdedRelu at 0 (NaN -> 0)
        th = zero if code == ACT_RELU else a
        for j in range(n):
            x = v[j]
            v[j] = x if x > th else zero
    elif code == ACT_SCALED_TANH:
        for j in range(n):
            v[j] = a * ftanh(b * v[j])
    elif code == ACT_HARD_SIGMOID:
        for j in range(n):
            x = a * v[j] + b
            x = x if x > zero else zero
            v[j] = x if x < one else one
    elif code == ACT_ELU:
        for j in range(n):
            x = v[j]
            xn = x if x < zero else zero
            v[j] = x if x >= zero else a * (fexp(xn) - one)
    elif code == ACT_SOFTSIGN:
        for j in range(n):
            x = v[j]
            v[j] = x / (one + abs(x))
    elif code == ACT_SOFTPLUS:
        # max(x, 0) + log(1 + exp(-|x|)): no overflow for large x
        for j in range(n):
            x = v[j]
            m = x if x > zero else zero
            v[j] = m + flog(one + fexpneg(-abs(x)))
    elif code == ACT_AFFINE:
        for j in range(n):
            v[j] = a * v[j] + b
    else:
        raise ValueError("unknown RNN activation code")


# --- shared pieces ---------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath=_FM)
def _project(x, w, wp, bsum, xw):
    """xw[:, :nd*G*H] = x (rows, I) @ w (nd*G*H, I)^T + bsum (nd*G*H): with the packed panels
    ``wp`` (``pack_weights``) when given (float32 constant weights), else BLAS. xw's rows are
    padded to whole panels."""
    rows = xw.shape[0]
    ncol = bsum.shape[0]
    k = w.shape[2]
    if rows == 0 or ncol == 0:
        return
    if wp.shape[0] > 0:
        if wp.shape[1] != k or wp.shape[0] * PANEL > xw.shape[1] or wp.shape[0] * PANEL < ncol:
            raise ValueError("RNN: packed weights do not match the input")
        npan = wp.shape[0]
        nth = num_threads()
        if nth > 1 and npan > 1 and 2 * rows * k * ncol >= (1 << 21):
            _proj_par(x, wp, bsum, xw, min(nth, npan))
        else:
            _proj_panels(x, wp, bsum, xw, np.int64(0), npan)
        return
    if xw.shape[1] != ncol:
        raise ValueError("RNN: projection rows are padded only for packed weights")
    z2 = np.zeros((1, 1), xw.dtype)
    _mm_run(x.reshape(1, rows, k), w.reshape(1, ncol, k), xw.reshape(1, rows, ncol), bsum, z2,
            np.int64(0), np.int64(1), np.float64(1.0), np.float64(0.0), np.int64(1),
            np.int64(0), np.float64(0.0), np.float64(0.0), np.zeros(0, np.float32))


def pack_recurrence(r):
    """(nd, G*H, H) recurrence weights -> R^T of each direction in panels
    (nd, ceil(G*H/PANEL), H, PANEL), zero-padded."""
    return np.stack([pack_weights(r[d:d + 1]) for d in range(r.shape[0])])


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _hgemm_packed(a, aoff, lda, rp, d, c0, c1, out, nb):
    """out[d, b, panels covering c0:c1] = a[aoff + b*lda + (0..H-1)] @ R^T[d] for all nb batch
    rows (columns of those panels outside c0:c1 are overwritten too; out's rows are padded)."""
    hd = rp.shape[2]
    npan = rp.shape[1]
    ldo = out.shape[2]
    p0 = c0 // PANEL
    p1 = (c1 + PANEL - 1) // PANEL
    zero = out.dtype.type(0.0)
    for b in range(nb):
        o = eptr(out, (d * nb + b) * ldo + p0 * PANEL)
        for j in range((p1 - p0) * PANEL):
            o[j] = zero
    for p in range(p0, p1):
        _panel_rows(a, aoff, lda, rp, (d * npan + p) * hd * PANEL, out,
                    d * nb * ldo + p * PANEL, ldo, nb, hd)


@njit(inline='always')
def _vec_rows(o, h, rt, rbase, ldr, kdim, n):
    """o[0:n] = h[0:kdim] @ R (pointers o, h), row k of R at rt[rbase + k * ldr:][:n]: four
    rows of R per pass over o."""
    zero = rt.dtype.type(0.0)
    for j in range(n):
        o[j] = zero
    k = 0
    while k + 4 <= kdim:
        h0 = h[k]
        h1 = h[k + 1]
        h2 = h[k + 2]
        h3 = h[k + 3]
        r0 = eptr(rt, rbase + k * ldr)
        r1 = eptr(rt, rbase + (k + 1) * ldr)
        r2 = eptr(rt, rbase + (k + 2) * ldr)
        r3 = eptr(rt, rbase + (k + 3) * ldr)
        for j in range(n):
            o[j] += h0 * r0[j] + h1 * r1[j] + h2 * r2[j] + h3 * r3[j]
        k += 4
    while k < kdim:
        hk = h[k]
        rk = eptr(rt, rbase + k * ldr)
        for j in range(n):
            o[j] += hk * rk[j]
        k += 1


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _hgemm(a, d, rt, rp, c0, c1, out, rows, nrows):
    """out[d, b, c0:c1] = a[d, b, :] @ rt[d, :, c0:c1] for the batch rows ``rows[:nrows]``
    (all rows when ``nrows`` == out.shape[1])."""
    nb = out.shape[1]
    kdim = a.shape[2]
    gh = rt.shape[2]
    n = c1 - c0
    if n <= 0 or nrows == 0:
        return
    t_ = out.dtype.type
    if kdim == 0:
        for bi in range(nrows):
            o = out[d, rows[bi], c0:c1]
            for j in range(n):
                o[j] = t_(0.0)
        return
    # the packed panels (register-blocked, R^T in panel order) also for one to three rows:
    # they beat the vector loop below even at batch 1
    if nrows == nb and (rp.shape[0] > 0 or nrows >= _BLAS_MIN_ROWS):
        if rp.shape[0] > 0:
            _hgemm_packed(a, d * nb * kdim, kdim, rp, d, c0, c1, out, nb)
        else:
            xgemm(0, 0, nb, n, kdim, 1.0, a, d * nb * kdim, kdim, rt, d * kdim * gh + c0, gh,
                  0.0, out, d * nb * out.shape[2] + c0, out.shape[2])
        return
    # raw pointers (gemm.eptr): four row views per k step cost NRT reference counting, as
    # much as the step's arithmetic
    for bi in range(nrows):
        b = rows[bi]
        _vec_rows(eptr(out, (d * nb + b) * out.shape[2] + c0), eptr(a, (d * nb + b) * kdim), rt,
                  d * kdim * gh + c0, gh, kdim, n)


#: batch rows up to which a split LSTM step runs by chunks of hidden units in one parallel
#: region (_dir_panels) rather than a parallel launch per step
_PANEL_MAX_ROWS = 64

#: multiply-adds of one step's gate product (batch x H x gates*H) from which it is split over
#: the threads (a parallel launch must be small against the step; LSTM B=1, H=256 is 262K)
_STEP_PAR_MACS = 1 << 17


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _hgemm_par(nw, a, d, rt, rp, gh, out, rows, nrows):
    """``_hgemm`` over columns 0:gh split into nw ranges of whole panels (the packed path
    writes whole panels: ranges must not share one)."""
    npan = (gh + PANEL - 1) // PANEL
    for w in prange(nw):
        c0 = w * npan // nw * PANEL
        c1 = min(gh, (w + 1) * npan // nw * PANEL)
        _hgemm(a, d, rt, rp, c0, c1, out, rows, nrows)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dims(x, layout):
    """(T, B) of x by layout."""
    if layout == 0:
        return x.shape[0], x.shape[1]
    return x.shape[1], x.shape[0]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _lengths(seqlen, nb, nt):
    """Per-batch lengths (int64), checked to lie in [0, T]."""
    lens = np.empty(nb, np.int64)
    if seqlen.shape[0] == 0:
        for b in range(nb):
            lens[b] = nt
        return lens
    if seqlen.shape[0] != nb:
        raise ValueError("RNN: sequence_lens must have batch_size entries")
    for b in range(nb):
        v = np.int64(seqlen[b])
        if v < 0 or v > nt:
            raise ValueError("RNN: sequence_lens entries must lie in [0, seq_length]")
        lens[b] = v
    return lens


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _bias_sum(bias, nd, g, hd, skip_h):
    """Per direction Wb + Rb of every gate (G*H); with ``skip_h`` the last gate's Rb is left
    out (GRU with linear_before_reset adds it inside r * (...))."""
    gh = g * hd
    out = np.zeros(nd * gh, bias.dtype)
    if bias.shape[1] == 0:
        return out
    for d in range(nd):
        for j in range(gh):
            v = bias[d, j]
            if not (skip_h and j >= gh - hd):
                v += bias[d, gh + j]
            out[d * gh + j] = v
    return out


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _init_state(st, init, layout):
    """st (nd, B, H) = init (Y_h layout) or 0 when init is absent."""
    nd, nb, hd = st.shape
    t_ = st.dtype.type
    for d in range(nd):
        for b in range(nb):
            s = st[d, b]
            if init.shape[0] == 0:
                for j in range(hd):
                    s[j] = t_(0.0)
            else:
                src = init[d, b] if layout == 0 else init[b, d]
                for j in range(hd):
                    s[j] = src[j]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _store_state(st, out, lens, layout):
    """out (Y_h layout) = st, 0 for rows of length 0."""
    nd, nb, hd = st.shape
    t_ = st.dtype.type
    for d in range(nd):
        for b in range(nb):
            o = out[d, b] if layout == 0 else out[b, d]
            if lens[b] == 0:
                for j in range(hd):
                    o[j] = t_(0.0)
            else:
                s = st[d, b]
                for j in range(hd):
                    o[j] = s[j]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _store_y(y, d, t, b, h, layout):
    o = y[t, d, b] if layout == 0 else y[b, t, d]
    for j in range(h.shape[0]):
        o[j] = h[j]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _zero_tail(y, d, lens, nt, layout):
    """Y[t, d, b] = 0 for t >= lens[b]."""
    nb = lens.shape[0]
    t_ = y.dtype.type
    for b in range(nb):
        for t in range(lens[b], nt):
            o = y[t, d, b] if layout == 0 else y[b, t, d]
            for j in range(o.shape[0]):
                o[j] = t_(0.0)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _active(lens, s, rows):
    """rows[:n] = the batch rows still running at step s; returns n."""
    n = 0
    for b in range(lens.shape[0]):
        if s < lens[b]:
            rows[n] = b
            n += 1
    return n


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _xrow(t, b, nt, nb, layout):
    return t * nb + b if layout == 0 else b * nt + t


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _clip(v, c):
    v = c if v > c else v
    return -c if v < -c else v


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _views(ws, nt, nb, hd, g, nd, npan, npan_r):
    """Carve the scratch: xw (T*B, nd*G*H, or npan*PANEL with packed weights), hr (nd, B, G*H
    or npan_r*PANEL with packed recurrence weights), tmp (nd, B, G*H), h, c (nd, B, H)."""
    gh = g * hd
    ld = npan * PANEL if npan > 0 else nd * gh
    ldh = npan_r * PANEL if npan_r > 0 else gh
    if ld > nd * gh + PANEL or ldh > gh + PANEL:
        raise ValueError("RNN: packed weights do not match the hidden size")
    o = 0
    xw = ws[o:o + nt * nb * ld].reshape(nt * nb, ld)
    o += nt * nb * ld
    hr = ws[o:o + nd * nb * ldh].reshape(nd, nb, ldh)
    o += nd * nb * ldh
    tmp = ws[o:o + nd * nb * gh].reshape(nd, nb, gh)
    o += nd * nb * gh
    hs = ws[o:o + nd * nb * hd].reshape(nd, nb, hd)
    o += nd * nb * hd
    cs = ws[o:o + nd * nb * hd].reshape(nd, nb, hd)
    return xw, hr, tmp, hs, cs


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _start(x, w, wp, rt, rp, ws, seqlen, h0, layout, g):
    """The common start of a G-gate layer: (nd, H, T, B, xw, hr, tmp, h, c, lens), the views
    of :func:`_views` with the hidden state set from h0 (or zeros)."""
    nd = w.shape[0]
    hd = rt.shape[1]
    nt, nb = _dims(x, layout)
    xw, hr, tmp, hs, cs = _views(ws, nt, nb, hd, g, nd, wp.shape[0], rp.shape[1])
    lens = _lengths(seqlen, nb, nt)
    _init_state(hs, h0, layout)
    return nd, hd, nt, nb, xw, hr, tmp, hs, cs, lens


@njit(inline='always')
def _dir_setup(hs, xw, lens, y, clip):
    """What a direction's recurrence needs first: (B, T, H, a scratch list of active rows, the
    longest length, whether Y is wanted, the clip and 1 in the state's dtype)."""
    nb = hs.shape[1]
    nt = xw.shape[0] // nb if nb > 0 else 0
    maxlen = 0
    for b in range(nb):
        maxlen = max(maxlen, lens[b])
    t_ = hs.dtype.type
    return (nb, nt, hs.shape[2], np.empty(nb, np.int64), maxlen,
            y.shape[0] > 0 and y.shape[3] > 0, t_(clip), t_(1.0))


@njit(inline='always')
def _dir_row(bi, d, s, reverse, col, gw, xw, hr, hs, rows, lens, nt, layout):
    """Active row ``bi`` at step ``s``: its batch index, time, input products (the ``gw``
    columns from ``col``), recurrent products and state (views)."""
    b = rows[bi]
    t = lens[b] - 1 - s if reverse else s
    xr = xw[_xrow(t, b, nt, hs.shape[1], layout), col:col + gw]
    return b, t, xr, hr[d, b], hs[d, b]


# --- LSTM ------------------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath=_FM)
def _lstm_dir(d, reverse, xw, rt, rp, peep, hr, tmp, hs, cs, y, lens, layout, acts, alphas, betas,
              clip, input_forget, nw):
    """The recurrence of direction ``d`` (it indexes the weights and state; ``reverse``: run
    from each row's last valid step back); ``nw`` > 1: each step's gate product split over
    that many workers (``_hgemm_par``)."""
    _, nt, hd, rows, maxlen, has_y, cl, one = _dir_setup(hs, xw, lens, y, clip)
    gh = 4 * hd
    k = 3 * d
    fc, gc, hc = acts[k], acts[k + 1], acts[k + 2]
    fast = fc == ACT_SIGMOID and gc == ACT_TANH and hc == ACT_TANH
    has_p = peep.shape[1] > 0
    zp = np.zeros(hd, hs.dtype)
    for s in range(maxlen):
        na = _active(lens, s, rows)
        if nw > 1:
            _hgemm_par(nw, hs, d, rt, rp, gh, hr, rows, na)
        else:
            _hgemm(hs, d, rt, rp, np.int64(0), gh, hr, rows, na)
        for bi in range(na):
            b, t, xr, g, h = _dir_row(bi, d, s, reverse, d * gh, gh, xw, hr, hs, rows, lens, nt,
                                      layout)
            c = cs[d, b]
            pi = peep[d, 0:hd] if has_p else zp
            po = peep[d, hd:2 * hd] if has_p else zp
            pf = peep[d, 2 * hd:3 * hd] if has_p else zp
            xi, xo, xf, xc = xr[0:hd], xr[hd:2 * hd], xr[2 * hd:3 * hd], xr[3 * hd:gh]
            gi, go, gf, gc_ = g[0:hd], g[hd:2 * hd], g[2 * hd:3 * hd], g[3 * hd:gh]
            if fast:
                for j in range(hd):
                    cp = c[j]
                    vi = fsigmoid(_clip(xi[j] + gi[j] + pi[j] * cp, cl))
                    vf = fsigmoid(_clip(xf[j] + gf[j] + pf[j] * cp, cl))
                    vf = one - vi if input_forget else vf
                    vc = ftanh(_clip(xc[j] + gc_[j], cl))
                    cn = vf * cp + vi * vc
                    vo = fsigmoid(_clip(xo[j] + go[j] + po[j] * cn, cl))
                    c[j] = cn
                    h[j] = vo * ftanh(cn)
            else:
                tm = tmp[d, b]
                ti, to, tf, tc = tm[0:hd], tm[hd:2 * hd], tm[2 * hd:3 * hd], tm[3 * hd:gh]
                for j in range(hd):
                    cp = c[j]
                    ti[j] = _clip(xi[j] + gi[j] + pi[j] * cp, cl)
                    tf[j] = _clip(xf[j] + gf[j] + pf[j] * cp, cl)
                    tc[j] = _clip(xc[j] + gc_[j], cl)
                _act(ti, fc, alphas[k], betas[k])
                if input_forget:
                    for j in range(hd):
                        tf[j] = one - ti[j]
                else:
                    _act(tf, fc, alphas[k], betas[k])
                _act(tc, gc, alphas[k + 1], betas[k + 1])
                for j in range(hd):
                    cn = tf[j] * c[j] + ti[j] * tc[j]
                    c[j] = cn
                    to[j] = _clip(xo[j] + go[j] + po[j] * cn, cl)
                    tc[j] = cn
                _act(to, fc, alphas[k], betas[k])
                _act(tc, hc, alphas[k + 2], betas[k + 2])
                for j in range(hd):
                    h[j] = to[j] * tc[j]
            if has_y:
                _store_y(y, d, t, b, h, layout)
    if has_y:
        _zero_tail(y, d, lens, nt, layout)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _chunk_gates(g0, ng, d, j0, a, aoff, lda, rp, hr, rows, na):
    """hr[d, b, (g0 + g)*H + j0 : + PANEL] = a[aoff + b*lda : + H] @ (gate g0 + g's panel of
    the packed recurrence rp) for g < ng (1 to 4) and the active rows: while every row runs
    (rows = 0..nb-1) four rows by two gates at a time (then one gate), then one row by all
    ``ng`` gates (one broadcast of each x value for every gate's accumulators)."""
    nb = hr.shape[1]
    ldh = hr.shape[2]
    hd = rp.shape[2]
    woff = (d * rp.shape[1] + j0 // PANEL) * hd * PANEL + g0 * hd * hd
    r4 = na - na % 4 if na == nb else 0
    for b in range(0, r4, 4):
        o = (d * nb + b) * ldh + g0 * hd + j0
        g = 0
        while g + 2 <= ng:
            _mk4x2(a, aoff + b * lda, lda, rp, woff + g * hd * hd, hd * hd, hr, o + g * hd, ldh,
                   hd, hd)
            g += 2
        if g < ng:
            _mk4x1(a, aoff + b * lda, lda, rp, woff + g * hd * hd, 0, hr, o + g * hd, ldh, 0, hd)
    for bi in range(r4, na):
        b = rows[bi]
        xo = aoff + b * lda
        o = (d * nb + b) * ldh + g0 * hd + j0
        if ng == 4:
            _mk1x4(a, xo, 0, rp, woff, hd * hd, hr, o, 0, hd, hd)
        elif ng == 3:
            _mk1x3(a, xo, 0, rp, woff, hd * hd, hr, o, 0, hd, hd)
        elif ng == 2:
            _mk1x2(a, xo, 0, rp, woff, hd * hd, hr, o, 0, hd, hd)
        else:
            _mk1x1(a, xo, 0, rp, woff, 0, hr, o, 0, 0, hd)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _chunk_y(y, t, d, b, j0, j1, hn, layout):
    yo = y[t, d, b, j0:j1] if layout == 0 else y[b, t, d, j0:j1]
    for j in range(j1 - j0):
        yo[j] = hn[j]


@njit(inline='always')
def _chunk_row(bi, d, s, reverse, j0, gh, xw, hr, src, dst, lens, rows, layout):
    """Row ``bi`` of the active rows at step ``s``: its batch index b, time t, and pointers to
    unit j0 of its input products (gate stride hd, ``gh`` per direction), its recurrent
    products in ``hr``, its previous state ``src`` and its new state ``dst``."""
    nb, hd = src.shape[0], src.shape[1]
    b = rows[bi]
    t = lens[b] - 1 - s if reverse else s
    xr = eptr(xw, _xrow(t, b, xw.shape[0] // nb, nb, layout) * xw.shape[1] + d * gh + j0)
    g = eptr(hr, (d * nb + b) * hr.shape[2] + j0)
    return b, t, xr, g, eptr(src, b * hd + j0), eptr(dst, b * hd + j0)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _lstm_chunk(d, s, reverse, j0, j1, xw, rp, peep, src, dst, cs, hr, y, lens, rows, na, layout,
                cl, input_forget):
    """Hidden units j0:j1 (one panel, j0 a multiple of PANEL) of step ``s`` of direction ``d``
    for the active rows (default activations): their four gates' recurrent products from the
    whole previous state ``src`` (nb, H) against the packed recurrence ``rp`` (_chunk_gates), then
    the cell update into cs and ``dst`` (nb, H) and Y. ``peep`` (nd, 3H): zeros when the model
    has none."""
    nb, hd = cs.shape[1], cs.shape[2]
    one = cs.dtype.type(1.0)
    _chunk_gates(0, 4, d, j0, src, 0, hd, rp, hr, rows, na)
    for bi in range(na):
        b, t, xr, g, _, hn = _chunk_row(bi, d, s, reverse, j0, 4 * hd, xw, hr, src, dst, lens,
                                        rows, layout)
        c = eptr(cs, (d * nb + b) * hd + j0)
        pp = eptr(peep, d * peep.shape[1] + j0)
        for j in range(j1 - j0):
            cp = c[j]
            pi = pp[j]
            po = pp[hd + j]
            pf = pp[2 * hd + j]
            vi = fsigmoid(_clip(xr[j] + g[j] + pi * cp, cl))
            vf = fsigmoid(_clip(xr[2 * hd + j] + g[2 * hd + j] + pf * cp, cl))
            vf = one - vi if input_forget else vf
            vc = ftanh(_clip(xr[3 * hd + j] + g[3 * hd + j], cl))
            cn = vf * cp + vi * vc
            vo = fsigmoid(_clip(xr[hd + j] + g[hd + j] + po * cn, cl))
            c[j] = cn
            hn[j] = vo * ftanh(cn)
        if y.shape[0] > 0 and y.shape[3] > 0:
            _chunk_y(y, t, d, b, j0, j1, hn, layout)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _gru_chunk(d, s, reverse, j0, j1, xw, rp, rbh, src, dst, hr, y, lens, rows, na, layout, cl):
    """GRU (linear_before_reset, default activations) counterpart of :func:`_lstm_chunk`:
    units j0:j1 of step ``s``: the three gates' products (_chunk_gates), then z, r, the
    candidate and the new state into ``dst``, and Y."""
    hd = src.shape[1]
    one = src.dtype.type(1.0)
    _chunk_gates(0, 3, d, j0, src, 0, hd, rp, hr, rows, na)
    rb = eptr(rbh, d * hd + j0)
    for bi in range(na):
        b, t, xr, g, h, hn = _chunk_row(bi, d, s, reverse, j0, 3 * hd, xw, hr, src, dst, lens,
                                        rows, layout)
        for j in range(j1 - j0):
            z = fsigmoid(_clip(xr[j] + g[j], cl))
            r = fsigmoid(_clip(xr[hd + j] + g[hd + j], cl))
            c = ftanh(_clip(xr[2 * hd + j] + r * (g[2 * hd + j] + rb[j]), cl))
            hn[j] = (one - z) * c + z * h[j]
        if y.shape[0] > 0 and y.shape[3] > 0:
            _chunk_y(y, t, d, b, j0, j1, hn, layout)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _gru_phase_chunk(phase, d, s, reverse, j0, j1, xw, rp, src, dst, hr, y, lens, rows, na,
                     layout, cl):
    """GRU without linear_before_reset, units j0:j1 of step ``s`` in two phases. Phase 0: z and
    r from the whole previous state ``src``; z is kept in hr's z slot and r * h in its r slot.
    Phase 1, once every unit's phase 0 is done: the candidate's product (r * h) @ Rh, the
    candidate, the new state into ``dst`` and Y."""
    nb, hd = src.shape[0], src.shape[1]
    ldh = hr.shape[2]
    one = src.dtype.type(1.0)
    if phase == 0:
        _chunk_gates(0, 2, d, j0, src, 0, hd, rp, hr, rows, na)
    else:
        _chunk_gates(2, 1, d, j0, hr, d * nb * ldh + hd, ldh, rp, hr, rows, na)
    for bi in range(na):
        b, t, xr, g, h, hn = _chunk_row(bi, d, s, reverse, j0, 3 * hd, xw, hr, src, dst, lens,
                                        rows, layout)
        if phase == 0:
            for j in range(j1 - j0):
                z = fsigmoid(_clip(xr[j] + g[j], cl))
                r = fsigmoid(_clip(xr[hd + j] + g[hd + j], cl))
                g[j] = z
                g[hd + j] = r * h[j]
        else:
            for j in range(j1 - j0):
                z = g[j]
                c = ftanh(_clip(xr[2 * hd + j] + g[2 * hd + j], cl))
                hn[j] = (one - z) * c + z * h[j]
            if y.shape[0] > 0 and y.shape[3] > 0:
                _chunk_y(y, t, d, b, j0, j1, hn, layout)


def _first_phase(cell, d, s, reverse, xw, rp, src, dst, hr, y, lens, rows, na, layout, cl,
                 claims, done, unit, nchunk, maxlen):
    """Pure-Python stub; njit code gets :func:`_ov_first_phase`'s implementation."""
    raise NotImplementedError


def _cell_chunk(cell, d, s, reverse, j0, j1, xw, rp, aux, src, dst, cs, hr, y, lens, rows, na,
                layout, cl, input_forget):
    """Pure-Python stub; njit code gets :func:`_ov_cell_chunk`'s implementation."""
    raise NotImplementedError


def _cell_kind(cell):
    """The cell kind when the caller passes it as a literal (the LSTM), else None. Numba
    compiles both sides of ``if cell == 2:`` even for a literal ``cell`` (it does not prune
    branches on an integer literal's value), so the LSTM build would carry the GRU paths
    (~4 s of the library's compile time); these two overloads pick the path at typing time
    instead."""
    return cell.literal_value if isinstance(cell, types.IntegerLiteral) else None


@overload(_first_phase, prefer_literal=True)
def _ov_first_phase(cell, d, s, reverse, xw, rp, src, dst, hr, y, lens, rows, na, layout, cl,
                    claims, done, unit, nchunk, maxlen):
    """A GRU without linear_before_reset (cell 2): the first phase of step ``s``, every chunk's
    z and r, counted in ``claims[maxlen + s]`` / ``done[maxlen + s]``, then the wait for all of
    them. Other cells: nothing."""
    kind = _cell_kind(cell)
    if kind is not None and kind != 2:
        def none(cell, d, s, reverse, xw, rp, src, dst, hr, y, lens, rows, na, layout, cl,
                 claims, done, unit, nchunk, maxlen):
            return None
        return none

    def phase(cell, d, s, reverse, xw, rp, src, dst, hr, y, lens, rows, na, layout, cl,
              claims, done, unit, nchunk, maxlen):
        if cell != 2:
            return None
        hd = src.shape[1]
        while True:
            q = claim(claims, maxlen + s)
            if q >= nchunk:
                break
            j0 = q * unit
            _gru_phase_chunk(0, d, s, reverse, j0, min(hd, j0 + unit), xw, rp, src, dst, hr, y,
                             lens, rows, na, layout, cl)
            count_done(done, maxlen + s)
        wait_count(done, maxlen + s, nchunk)
        return None
    return phase


@overload(_cell_chunk, prefer_literal=True)
def _ov_cell_chunk(cell, d, s, reverse, j0, j1, xw, rp, aux, src, dst, cs, hr, y, lens, rows, na,
                   layout, cl, input_forget):
    """Units j0:j1 of step ``s``: LSTM (cell 0), GRU with linear_before_reset (1), the second
    phase of a GRU without (2)."""
    kind = _cell_kind(cell)
    if kind == 0:
        def lstm_(cell, d, s, reverse, j0, j1, xw, rp, aux, src, dst, cs, hr, y, lens, rows, na,
                  layout, cl, input_forget):
            _lstm_chunk(d, s, reverse, j0, j1, xw, rp, aux, src, dst, cs, hr, y, lens, rows, na,
                        layout, cl, input_forget)
        return lstm_

    def any_(cell, d, s, reverse, j0, j1, xw, rp, aux, src, dst, cs, hr, y, lens, rows, na,
             layout, cl, input_forget):
        if cell == 0:
            _lstm_chunk(d, s, reverse, j0, j1, xw, rp, aux, src, dst, cs, hr, y, lens, rows, na,
                        layout, cl, input_forget)
        elif cell == 1:
            _gru_chunk(d, s, reverse, j0, j1, xw, rp, aux, src, dst, hr, y, lens, rows, na,
                       layout, cl)
        else:
            _gru_phase_chunk(1, d, s, reverse, j0, j1, xw, rp, src, dst, hr, y, lens, rows, na,
                             layout, cl)
    return any_


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _cell_worker(cell, d, reverse, xw, rp, aux, hs, hb, cs, hr, y, lens, layout, cl,
                 input_forget, claims, done, unit, nchunk, maxlen):
    """One worker of :func:`_dir_panels` (``cell`` 0: LSTM, ``aux`` its peepholes; 1: GRU with
    linear_before_reset, ``aux`` the recurrence bias of h; 2: GRU without; ``cs`` unused by
    GRUs): each step, chunks of hidden units claimed from ``claims[s]`` until none is left,
    then a wait until every chunk of the step is done (``done[s]``) before the next step reads
    the new state. A GRU without linear_before_reset has two such phases a step (its
    candidate's product needs every unit's r * h): the first counts in ``claims[maxlen + s]``
    and ``done[maxlen + s]``. A chunk is only waited for once a running worker has claimed it,
    so a worker that runs alone (the other one not started, or started after the end) does
    every chunk itself: nothing can deadlock."""
    nb = hs.shape[1]
    hd = hs.shape[2]
    rows = np.empty(nb, np.int64)
    for s in range(maxlen):
        if s > 0:
            wait_count(done, s - 1, nchunk)
        na = _active(lens, s, rows)
        src = hs[d] if s == 0 else hb[(s - 1) % 2]
        _first_phase(cell, d, s, reverse, xw, rp, src, hb[s % 2], hr, y, lens, rows, na, layout,
                     cl, claims, done, unit, nchunk, maxlen)
        while True:
            q = claim(claims, s)
            if q >= nchunk:
                break
            j0 = q * unit
            _cell_chunk(cell, d, s, reverse, j0, min(hd, j0 + unit), xw, rp, aux, src,
                        hb[s % 2], cs, hr, y, lens, rows, na, layout, cl, input_forget)
            count_done(done, s)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _cell_workers(cell, d, reverse, xw, rp, aux, hs, hb, cs, hr, y, lens, layout, cl,
                  input_forget, claims, done, unit, nchunk, maxlen, nw):
    for w in prange(nw):
        _cell_worker(cell, d, reverse, xw, rp, aux, hs, hb, cs, hr, y, lens, layout, cl,
                     input_forget, claims, done, unit, nchunk, maxlen)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _dir_panels(cell, d, reverse, xw, rp, aux, hs, cs, hr, y, lens, layout, clip, input_forget,
                nw):
    """The recurrence of direction ``d`` of an LSTM (``cell`` 0) or a GRU with
    linear_before_reset (1) or without (2), default activations, H a multiple of PANEL, by
    chunks of one panel of hidden units (_lstm_chunk / _gru_chunk / _gru_phase_chunk's two
    phases); ``nw`` > 1: that many workers stay in
    one parallel region for all the steps (:func:`_cell_worker`), no parallel launch per
    step, so a step of ~10 us (batch 1, H 256) splits."""
    nb = hs.shape[1]
    hd = hs.shape[2]
    maxlen = np.int64(0)  # (a literal 0 here compiles _cell_workers once more)
    for b in range(nb):
        maxlen = max(maxlen, lens[b])
    unit = PANEL
    nchunk = hd // PANEL
    hb = np.empty((2, nb, hd), hs.dtype)
    claims = np.zeros(2 * maxlen, np.int64)  # (the second half: cell 2's first phase)
    done = np.zeros(2 * maxlen, np.int64)
    cl = hs.dtype.type(clip)
    if nw > 1:
        _cell_workers(cell, d, reverse, xw, rp, aux, hs, hb, cs, hr, y, lens, layout, cl,
                      input_forget, claims, done, unit, nchunk, maxlen, nw)
    else:
        _cell_worker(cell, d, reverse, xw, rp, aux, hs, hb, cs, hr, y, lens, layout, cl,
                     input_forget, claims, done, unit, nchunk, maxlen)
    for b in range(nb):  # each row's state after its last step
        if lens[b] > 0:
            last = hb[(lens[b] - 1) % 2, b]
            h = hs[d, b]
            for j in range(hd):
                h[j] = last[j]
    if y.shape[0] > 0 and y.shape[3] > 0:
        _zero_tail(y, d, lens, xw.shape[0] // nb, layout)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _lstm_par(xw, rt, rp, peep, hr, tmp, hs, cs, y, lens, layout, acts, alphas, betas, clip,
              input_forget):
    for d in prange(2):
        _lstm_dir(np.int64(d), d == 1, xw, rt, rp, peep, hr, tmp, hs, cs, y, lens, layout, acts,
                  alphas, betas, clip, input_forget, np.int64(1))


@njit(cache=True, error_model='numpy', fastmath=_FM)
def lstm(x, w, wp, rt, rp, bias, peep, h0, c0, seqlen, y, yh, yc, ws, layout, reverse, acts, alphas,
         betas, clip, input_forget):
    """ONNX LSTM (gates i, o, f, c); see the module docstring. ``reverse``: a one-direction
    layer that runs backwards."""
    nd, hd, nt, nb, xw, hr, tmp, hs, cs, lens = _start(x, w, wp, rt, rp, ws, seqlen, h0, layout,
                                                       4)
    _init_state(cs, c0, layout)
    bsum = _bias_sum(bias, nd, 4, hd, False)
    _project(x.reshape(nt * nb, x.shape[2]), w, wp, bsum, xw)
    if nd == 2 and num_threads() >= 2 and nt * nb * hd * 4 * hd >= _PAR_MIN_MACS:
        _lstm_par(xw, rt, rp, peep, hr, tmp, hs, cs, y, lens, layout, acts, alphas, betas, clip,
                  input_forget)
    else:
        # one direction (or too little work for one worker per direction): each step's gate
        # product over the threads when it is big enough to pay a parallel launch per step
        nw = min(num_threads(), (4 * hd + PANEL - 1) // PANEL)
        if nb * hd * 4 * hd < _STEP_PAR_MACS:
            nw = np.int64(1)  # (a literal 1 compiles _lstm_dir once more)
        # steps that split: chunks of hidden units claimed by workers that stay in one
        # parallel region (no launch per step); at one thread the per-step paths stay, which
        # are faster there
        panels = nw > 1 and nb <= _PANEL_MAX_ROWS and rp.shape[0] > 0 and hd % PANEL == 0
        for d in range(nd):
            k = 3 * d
            if (panels and acts[k] == ACT_SIGMOID and acts[k + 1] == ACT_TANH
                    and acts[k + 2] == ACT_TANH):
                pe = peep if peep.shape[1] > 0 else np.zeros((nd, 3 * hd), hs.dtype)
                _dir_panels(0, d, reverse != 0 or d == 1, xw, rp, pe, hs, cs, hr, y, lens,
                            layout, clip, input_forget, nw)
                continue
            _lstm_dir(d, reverse != 0 or d == 1, xw, rt, rp, peep, hr, tmp, hs, cs, y, lens, layout,
                      acts, alphas, betas, clip, input_forget, nw)
    if yh.shape[0] > 0:
        _store_state(hs, yh, lens, layout)
    if yc.shape[0] > 0:
        _store_state(cs, yc, lens, layout)


# --- GRU -------------------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath=_FM)
def _gru_dir(d, reverse, xw, rt, rp, rbh, hr, tmp, hs, y, lens, layout, acts, alphas, betas, clip,
             linear_before_reset):
    _, nt, hd, rows, maxlen, has_y, cl, one = _dir_setup(hs, xw, lens, y, clip)
    gh = 3 * hd
    k = 2 * d
    fc, gc = acts[k], acts[k + 1]
    fast = fc == ACT_SIGMOID and gc == ACT_TANH
    rb = rbh[d]
    for s in range(maxlen):
        na = _active(lens, s, rows)
        # z and r (and h's recurrent product when it comes before the reset)
        _hgemm(hs, d, rt, rp, np.int64(0), gh if linear_before_reset else 2 * hd, hr, rows, na)
        for bi in range(na):
            b, t, xr, g, h = _dir_row(bi, d, s, reverse, d * gh, gh, xw, hr, hs, rows, lens, nt,
                                      layout)
            tm = tmp[d, b]
            xz, xrr = xr[0:hd], xr[hd:2 * hd]
            gz, gr = g[0:hd], g[hd:2 * hd]
            tz, tr = tm[0:hd], tm[hd:2 * hd]
            if fast:
                for j in range(hd):
                    tz[j] = fsigmoid(_clip(xz[j] + gz[j], cl))
                    tr[j] = fsigmoid(_clip(xrr[j] + gr[j], cl))
            else:
                for j in range(hd):
                    tz[j] = _clip(xz[j] + gz[j], cl)
                    tr[j] = _clip(xrr[j] + gr[j], cl)
                _act(tz, fc, alphas[k], betas[k])
                _act(tr, fc, alphas[k], betas[k])
            if not linear_before_reset:
                # (r * h) @ Rh^T: the reset row goes where the product of h will be read
                rh = tm[2 * hd:gh]
                for j in range(hd):
                    rh[j] = tr[j] * h[j]
        if not linear_before_reset:
            _hgemm_rh(tmp, d, rt, rp, hd, hr, rows, na)
        for bi in range(na):
            b, t, xr, g, h = _dir_row(bi, d, s, reverse, d * gh, gh, xw, hr, hs, rows, lens, nt,
                                      layout)
            tm = tmp[d, b]
            xh = xr[2 * hd:gh]
            gh_ = g[2 * hd:gh]
            tz, tr, th = tm[0:hd], tm[hd:2 * hd], tm[2 * hd:gh]
            if linear_before_reset:
                for j in range(hd):
                    th[j] = _clip(xh[j] + tr[j] * (gh_[j] + rb[j]), cl)
            else:
                for j in range(hd):
                    th[j] = _clip(xh[j] + gh_[j], cl)
            if fast:
                for j in range(hd):
                    z = tz[j]
                    h[j] = (one - z) * ftanh(th[j]) + z * h[j]
            else:
                _act(th, gc, alphas[k + 1], betas[k + 1])
                for j in range(hd):
                    z = tz[j]
                    h[j] = (one - z) * th[j] + z * h[j]
            if has_y:
                _store_y(y, d, t, b, h, layout)
    if has_y:
        _zero_tail(y, d, lens, nt, layout)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _hgemm_rh(tmp, d, rt, rp, hd, hr, rows, na):
    """hr[d, b, 2H:3H] = tmp[d, b, 2H:3H] @ rt[d, :, 2H:3H] (GRU's (r * h) @ Rh^T)."""
    nb = tmp.shape[1]
    gh = 3 * hd
    ldh = hr.shape[2]
    if na == 0 or hd == 0:
        return
    if na >= _BLAS_MIN_ROWS and na == nb:
        if rp.shape[0] > 0:
            _hgemm_packed(tmp, d * nb * gh + 2 * hd, gh, rp, d, 2 * hd, gh, hr, nb)
        else:
            xgemm(0, 0, nb, hd, hd, 1.0, tmp, d * nb * gh + 2 * hd, gh, rt,
                  d * hd * gh + 2 * hd, gh, 0.0, hr, d * nb * ldh + 2 * hd, ldh)
        return
    for bi in range(na):
        b = rows[bi]
        _vec_rows(eptr(hr, (d * nb + b) * ldh + 2 * hd), eptr(tmp, (d * nb + b) * gh + 2 * hd),
                  rt, d * hd * gh + 2 * hd, gh, hd, hd)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _gru_par(xw, rt, rp, rbh, hr, tmp, hs, y, lens, layout, acts, alphas, betas, clip,
             linear_before_reset):
    for d in prange(2):
        _gru_dir(np.int64(d), d == 1, xw, rt, rp, rbh, hr, tmp, hs, y, lens, layout, acts, alphas,
                 betas, clip, linear_before_reset)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def gru(x, w, wp, rt, rp, bias, h0, seqlen, y, yh, ws, layout, reverse, acts, alphas, betas, clip,
        linear_before_reset):
    """ONNX GRU (gates z, r, h); see the module docstring."""
    nd, hd, nt, nb, xw, hr, tmp, hs, _, lens = _start(x, w, wp, rt, rp, ws, seqlen, h0, layout, 3)
    lbr = linear_before_reset != 0
    bsum = _bias_sum(bias, nd, 3, hd, lbr)
    rbh = np.zeros((nd, hd), x.dtype)
    if lbr and bias.shape[1] > 0:
        for d in range(nd):
            for j in range(hd):
                rbh[d, j] = bias[d, 5 * hd + j]
    _project(x.reshape(nt * nb, x.shape[2]), w, wp, bsum, xw)
    if nd == 2 and num_threads() >= 2 and nt * nb * hd * 3 * hd >= _PAR_MIN_MACS:
        _gru_par(xw, rt, rp, rbh, hr, tmp, hs, y, lens, layout, acts, alphas, betas, clip, lbr)
    else:
        # steps that split: chunks of hidden units in one parallel region (see lstm)
        nw = min(num_threads(), (3 * hd + PANEL - 1) // PANEL)
        if nb * hd * 3 * hd < _STEP_PAR_MACS:
            nw = np.int64(1)
        panels = nw > 1 and nb <= _PANEL_MAX_ROWS and rp.shape[0] > 0 and hd % PANEL == 0
        for d in range(nd):
            if panels and acts[2 * d] == ACT_SIGMOID and acts[2 * d + 1] == ACT_TANH:
                _dir_panels(1 if lbr else 2, d, reverse != 0 or d == 1, xw, rp, rbh, hs, hs, hr,
                            y, lens, layout, clip, False, nw)
                continue
            _gru_dir(d, reverse != 0 or d == 1, xw, rt, rp, rbh, hr, tmp, hs, y, lens, layout,
                     acts, alphas, betas, clip, lbr)
    if yh.shape[0] > 0:
        _store_state(hs, yh, lens, layout)


# --- RNN -------------------------------------------------------------------------------------
@njit(cache=True, error_model='numpy', fastmath=_FM)
def _rnn_dir(d, reverse, xw, rt, rp, hr, hs, y, lens, layout, acts, alphas, betas, clip):
    _, nt, hd, rows, maxlen, has_y, cl, _ = _dir_setup(hs, xw, lens, y, clip)
    fc = acts[d]
    for s in range(maxlen):
        na = _active(lens, s, rows)
        _hgemm(hs, d, rt, rp, np.int64(0), hd, hr, rows, na)
        for bi in range(na):
            b, t, xr, g, h = _dir_row(bi, d, s, reverse, d * hd, hd, xw, hr, hs, rows, lens, nt,
                                      layout)
            if fc == ACT_TANH:
                for j in range(hd):
                    h[j] = ftanh(_clip(xr[j] + g[j], cl))
            else:
                for j in range(hd):
                    h[j] = _clip(xr[j] + g[j], cl)
                _act(h, fc, alphas[d], betas[d])
            if has_y:
                _store_y(y, d, t, b, h, layout)
    if has_y:
        _zero_tail(y, d, lens, nt, layout)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _rnn_par(xw, rt, rp, hr, hs, y, lens, layout, acts, alphas, betas, clip):
    for d in prange(2):
        _rnn_dir(np.int64(d), d == 1, xw, rt, rp, hr, hs, y, lens, layout, acts, alphas, betas,
                 clip)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def rnn(x, w, wp, rt, rp, bias, h0, seqlen, y, yh, ws, layout, reverse, acts, alphas, betas, clip):
    """ONNX RNN (Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)); see the module docstring."""
    nd, hd, nt, nb, xw, hr, _, hs, _, lens = _start(x, w, wp, rt, rp, ws, seqlen, h0, layout, 1)
    bsum = _bias_sum(bias, nd, 1, hd, False)
    _project(x.reshape(nt * nb, x.shape[2]), w, wp, bsum, xw)
    if nd == 2 and num_threads() >= 2 and nt * nb * hd * hd >= _PAR_MIN_MACS:
        _rnn_par(xw, rt, rp, hr, hs, y, lens, layout, acts, alphas, betas, clip)
    else:
        for d in range(nd):
            _rnn_dir(d, reverse != 0 or d == 1, xw, rt, rp, hr, hs, y, lens, layout, acts, alphas,
                     betas, clip)
    if yh.shape[0] > 0:
        _store_state(hs, yh, lens, layout)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def transpose_r(r, rt):
    """rt[d] = r[d]^T: (nd, G*H, H) -> (nd, H, G*H), for recurrence weights that are not
    constants (constant ones are transposed once at compile time)."""
    nd, gh, hd = r.shape
    for d in range(nd):
        for i in range(gh):
            for k in range(hd):
                rt[d, k, i] = r[d, i, k]

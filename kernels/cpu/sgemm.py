"""jitort's own float32 gemm: a register-tiled micro-kernel (LLVM IR) under a blocked
macro-kernel. Imports nothing from jitort.

Why: OpenBLAS packs all of B on every call: on transformer-sized products it stays behind
onnxruntime's MLAS (which packs B -- the weights -- once, when the session is made), and on
products of a few rows the packing is most of the work; with B stored transposed (Gemm
transB=1, a PyTorch Linear) OpenBLAS is slower still. Here A is read
in place (a tile's MR rows are MR streams of its K-block: no packing of A), and B is either
packed once at compile time (``pack_b``, ``sgemm_packed``: constant weights) or a panel
K-block at a time per call (``sgemm_ptr``). ``scripts/sweeps/sweep_sgemm.py`` measures both against
the BLAS over rows x K x columns; the rules that pick them live with their callers
(``jitort/codegen/lowerings/matmul.py``, ``gemm.ogemm``).

Layout of packed B: panels of NR columns, each (K, NR) row-major, zero-padded past N:
``bp[p*K*NR + k*NR + j] = B[k, p*NR + j]``.

The micro-kernel (``_tile``) computes an MR x (VW*nvec) tile over ``kc`` steps in registers
(MR*NV accumulators: 24 zmm with AVX-512, 12 ymm with AVX2), one specialized loop per (rows,
vectors) shape of the edges, and stores it to a small buffer; the macro-kernel adds alpha *
tile into C (beta * C on the first K-block). Every element of C sums its K products in the
same order (K-blocks of KC, in order) whatever the blocking of the caller's tasks, so results
do not depend on the thread count.
"""
import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .ptr import eptr, outlined, tile_loop

_AVX512 = bool(llb.get_host_cpu_features().get('avx512f', False))
VW = 16 if _AVX512 else 8          # float32 lanes per vector register
NV = 4 if _AVX512 else 2           # vectors per tile row
NR = VW * NV                       # tile columns (64 / 16)
MR = 6                             # tile rows: MR * NV accumulators (24 of 32 zmm, 12 of 16 ymm)
KC = 256                           # K-block: a packed panel (KC x NR) is 64 KB with AVX-512
MC = 480                           # rows per M-block: its K-block of A (480 KB) stays in L2

_FM = {'reassoc', 'contract', 'arcp'}


def _emit_loop(builder, fma, vt, nv, tl, a, roffs, aks, bp, bp2, kc, mr, nvec):
    """The tile loop for fixed (mr, nvec) (``ptr.tile_loop``): kc >= 1 steps, then the
    accumulators stored to tl's rows (nv vectors apart). A is one pointer advancing aks
    elements per step, row r at the loop-invariant offset roffs[r]; B's panel pointers
    advance nv vectors per step. Vectors past nv (one row's pair of panels) come from the
    panel at bp2."""
    i64 = ir.IntType(64)
    step_b = ir.Constant(i64, nv)

    def load_vecs(cur):
        return [builder.load(builder.gep(cur[1 + v // nv], [ir.Constant(i64, v % nv)]),
                             align=4) for v in range(nvec)]

    def load_bcast(cur, r):
        return builder.load(builder.gep(cur[0], [roffs[r]]) if r else cur[0], align=4)

    def step(acc, bc, vec):
        return builder.call(fma, [bc, vec, acc])
    streams = [(a, aks), (bp, step_b)] + ([(bp2, step_b)] if nvec > nv else [])
    new = tile_loop(builder, kc, mr, nvec, vt, [ir.Constant(vt, None)] * mr, streams,
                    load_vecs, load_bcast, step, f"sg.{mr}.{nvec}")
    for r in range(mr):
        for v in range(nvec):
            builder.store(new[r * nvec + v],
                          builder.gep(tl, [ir.Constant(i64, r * nv + v)]), align=4)


def tile_function(module: ir.Module, vw: int = VW, nv: int = NV, mr: int = MR) -> ir.Function:
    """The micro-kernel as a function of its own in ``module`` (``ptr.outlined``: made once
    per module, never inlined): ``void(<vw x float>* tl, float* a, i64 ars, i64 aks, <vw x
    float>* b, <vw x float>* b2, i64 kc, i64 sel)``, sel = rows * 8 * nv + vectors. One loop
    per (rows, vectors) shape of the edges, and the pair of panels of one row (vectors 2 * nv,
    the second panel at b2). Parameterized by the vector width so that tests build it for
    any target (``tests/kernels/test_codegen_targets.py``)."""
    i64 = ir.IntType(64)
    f32 = ir.FloatType()
    vt = ir.VectorType(f32, vw)
    vp = vt.as_pointer()

    def emit(builder, args):
        tl, a, ars, aks, bp, bp2, kc, sel = args
        fn = builder.function
        roffs = [builder.mul(ars, ir.Constant(i64, r)) for r in range(mr)]
        fma = cgutils.get_or_insert_function(module, ir.FunctionType(vt, [vt] * 3),
                                             f"llvm.fma.v{vw}f32")
        out = fn.append_basic_block("sg.out")
        sw = builder.switch(sel, out)
        shapes = [(r, v) for r in range(1, mr + 1) for v in range(1, nv + 1)] + [(1, 2 * nv)]
        for rows, nvec in shapes:
            bb = fn.append_basic_block(f"sg.case.{rows}.{nvec}")
            sw.add_case(ir.Constant(i64, rows * 8 * nv + nvec), bb)
            builder.position_at_end(bb)
            _emit_loop(builder, fma, vt, nv, tl, a, roffs, aks, bp, bp2, kc, rows, nvec)
            builder.branch(out)
        builder.position_at_end(out)
    return outlined(module, f"jitort.sgemm.tile.{vw}x{nv}x{mr}",
                    [vp, f32.as_pointer(), i64, i64, vp, vp, i64, i64], emit)


@intrinsic
def _tile(typingctx, tl, a, aoff, ars, aks, bp, boff, bstride, kc, mr, nvec):
    """tl[r*NR + j] = sum over q < kc of a[aoff + r*ars + q*aks] * bp[boff + q*NR + j] for
    r < mr (1..MR), j < VW*nvec (nvec 1..NV); other entries of tl are left alone. One row
    (mr 1) also takes nvec 2*NV: a pair of panels, the second at bp[boff + bstride:] (a
    matrix-vector product reading two streams). tl, a, bp: float32 pointers; kc >= 1.
    Calls ``tile_function``."""
    f32p = types.CPointer(types.float32)
    if not (tl == f32p and a == f32p and bp == f32p):
        return None
    sig = types.void(tl, a, aoff, ars, aks, bp, boff, bstride, kc, mr, nvec)

    def codegen(context, builder, sig, args):
        tl_, a_, aoff_, ars_, aks_, bp_, boff_, bstride_, kc_, mr_, nvec_ = args
        i64 = ir.IntType(64)
        vp = ir.VectorType(ir.FloatType(), VW).as_pointer()

        def i(k, v):
            return context.cast(builder, v, sig.args[k], types.int64)

        b0 = builder.gep(bp_, [i(6, boff_)])
        sel = builder.add(builder.mul(i(9, mr_), ir.Constant(i64, 8 * NV)), i(10, nvec_))
        builder.call(tile_function(builder.module),
                     [builder.bitcast(tl_, vp), builder.gep(a_, [i(2, aoff_)]), i(3, ars_),
                      i(4, aks_), builder.bitcast(b0, vp),
                      builder.bitcast(builder.gep(b0, [i(7, bstride_)]), vp), i(8, kc_), sel])
        return context.get_dummy_value()
    return sig, codegen


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _pack(b, ldb, tb, k0, kc, j0, nv, bp_arr):
    """bp_arr[0 : kc*NR] = the panel B[k0:k0+kc, j0:j0+nv] as (kc, NR) rows; B (K, N) at
    pointer b with leading dimension ldb, or stored (N, K) when tb. Columns past nv are left
    as they are (their lanes are computed and never copied out)."""
    bp = eptr(bp_arr, 0)
    if tb:  # blocks of 16 k: each row's 64 bytes read once, written as 16 columns
        for q0 in range(0, kc, 16):
            q1 = min(kc, q0 + 16)
            for j in range(nv):
                src = (j0 + j) * ldb + k0
                for q in range(q0, q1):
                    bp[q * NR + j] = b[src + q]
    else:
        for q in range(kc):
            src = (k0 + q) * ldb + j0
            d = q * NR
            for j in range(nv):
                bp[d + j] = b[src + j]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _rows(m0, m1, kc, al, be, first, a, aoff, ars, aks, bp, boff, bstride, c, coff, ldc, nv,
          tl):
    """C rows m0..m1, columns coff..coff+nv (pointer c, leading dimension ldc) get alpha *
    A[rows, K-block] @ one packed panel's K-block (kc x NR at pointer bp + boff; nv up to
    2*NR for one row: the next panel's at bstride further); on the ``first`` K-block C is
    overwritten (beta == 0) or scaled by beta, else accumulated into."""
    nvec = (nv + VW - 1) // VW
    for i0 in range(m0, m1, MR):
        mr = min(MR, m1 - i0)
        _tile(tl, a, aoff + i0 * ars, ars, aks, bp, boff, bstride, kc, mr, nvec)
        for r in range(mr):
            d = coff + (i0 + r) * ldc
            s = r * NR
            if not first or be == 1:
                for j in range(nv):
                    c[d + j] += al * tl[s + j]
            elif be == 0:
                for j in range(nv):
                    c[d + j] = al * tl[s + j]
            else:
                for j in range(nv):
                    c[d + j] = be * c[d + j] + al * tl[s + j]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _macro(m, n, k, al, be, a, aoff, ars, aks, b, ldb, tb, bp, pbase0, pstride, c, coff, ldc,
           tl, bp_arr):
    """The loop nest of both entries: M-blocks, panels, K-blocks, each panel K-block swept
    over the M-block's rows while it is in L1 / L2. With ``b`` (a pointer, pstride 0) each
    panel K-block is packed into bp_arr first; else bp holds every panel (``pack_b``), panel
    p of this call at pbase0 + p * pstride."""
    for m0 in range(0, m, MC):
        m1 = min(m, m0 + MC)
        j0 = 0
        while j0 < n:
            # one row over prepacked panels: two panels per pass (two streams from memory:
            # a batch-1 fully connected layer is bandwidth-bound)
            w = 2 * NR if m1 - m0 == 1 and pstride != 0 and j0 + 2 * NR <= n else NR
            nv = min(w, n - j0)
            pbase = pbase0 + (j0 // NR) * pstride
            for k0 in range(0, k, KC):
                kc = min(KC, k - k0)
                if pstride == 0:
                    _pack(b, ldb, tb, k0, kc, j0, nv, bp_arr)
                    boff = 0
                else:
                    boff = pbase + k0 * NR
                _rows(m0, m1, kc, al, be, k0 == 0, a, aoff + k0 * aks, ars, aks, bp, boff,
                      pstride, c, coff + j0, ldc, nv, tl)
            j0 += w


@njit(cache=True, error_model='numpy', fastmath=_FM)
def sgemm_ptr(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """Row-major C (m, n) = alpha * op(A) @ op(B) + beta * C on float32 pointers (CBLAS
    semantics; m, n, k >= 1; beta == 0 never reads C). B is packed a panel K-block at a
    time."""
    bp_arr = np.empty(min(k, KC) * NR, np.float32)
    tl_arr = np.empty(MR * NR, np.float32)
    _macro(m, n, k, np.float32(alpha), np.float32(beta), a, 0, 1 if ta else lda,
           lda if ta else 1, b, ldb, tb, eptr(bp_arr, 0), 0, 0, c, 0, ldc, eptr(tl_arr, 0),
           bp_arr)
    bp_arr[0] = tl_arr[0]  # keeps both arrays alive past their raw pointers' last use


@njit(cache=True, error_model='numpy', fastmath=_FM)
def sgemm_packed(m, n, k, alpha, a_arr, aoff, ars, aks, bp_arr, p0, beta, c_arr, coff, ldc):
    """C (m, n) = alpha * A @ B + beta * C (beta == 0 never reads C) with B packed by
    ``pack_b`` from its first ``p0`` panels on (columns p0*NR .. p0*NR + n of the whole B,
    whose K is k). A: element (i, q) at a_arr.flat[aoff + i*ars + q*aks]; C: element (i, j)
    at c_arr.flat[coff + i*ldc + j]. float32 arrays of any shape (only their data is used);
    m, n, k >= 1. One row (m == 1) is a matrix-vector product streaming the panels."""
    tl_arr = np.empty(MR * NR, np.float32)
    bp = eptr(bp_arr, 0)
    _macro(m, n, k, np.float32(alpha), np.float32(beta), eptr(a_arr, 0), aoff, ars, aks, bp,
           0, False, bp, p0 * k * NR, k * NR, eptr(c_arr, 0), coff, ldc, eptr(tl_arr, 0),
           tl_arr)
    tl_arr[0] = 0  # keeps the scratch alive past its raw pointer's last use


def pack_b(b: np.ndarray) -> np.ndarray:
    """B (K, N) as the flat float32 panels ``sgemm_packed`` reads (numpy; compile time)."""
    k, n = b.shape
    npan = (n + NR - 1) // NR
    p = np.zeros((k, npan * NR), np.float32)
    p[:, :n] = b
    return np.ascontiguousarray(p.reshape(k, npan, NR).transpose(1, 0, 2)).reshape(-1)

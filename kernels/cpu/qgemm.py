"""CPU kernels: an exact 8-bit integer gemm (u8 x s8 -> int32) for MatMulInteger, QLinearMatMul,
ConvInteger and QLinearConv. Imports nothing from jitort.

    C[m, n] = sum_k (P[m, k] - zp[m]) * (V[k, n] - zv[n])          (int32, as onnxruntime)

P is the *broadcast* operand (rows m: MatMul's A, a convolution's weights), V the *vector*
operand (columns n: MatMul's B, a convolution's im2col columns); zp has 1 or M entries, zv 1 or
N. Either operand may be uint8 or int8: flipping the top bit (x ^ 0x80) maps int8 to uint8 with
the zero point moved by +128 (and uint8 to int8 by -128), so every product runs as unsigned x
signed bytes, the form of AVX-512 VNNI's ``vpdpbusd`` (64 byte products summed in groups of 4
into 16 int32 lanes, no saturation), and the zero points come back as rank-one corrections:

    C = S - zp[m] * colsum(V)[n] - zv[n] * rowsum(P)[m] + K * zp[m] * zv[n],   S = P @ V.

Micro-kernel (``_tile``, LLVM IR through ``numba.extending.intrinsic``): an MR x (NV * 16)
tile of S in 24 zmm accumulators over K in steps of 4; P packed as [tile][k/4][MR][4] bytes
(one 4-byte broadcast per row and step), V as [panel][k/4][NV*16][4] (NV 64-byte loads per
step); K, M and N padded with zeros. ``_tile_off`` reads V in place instead, NV*64 bytes at a
per-step offset from a table (a convolution's channel-interleaved input). Where the host has
no VNNI (llvmlite's host features), the same IR computes each ``vpdpbusd`` portably (widened
products summed in groups of 4); the callers keep their float gemm path there (``HAS_VNNI``).
"""
import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from .gemm import eptr
from .ptr import outlined, splat, tile_loop  # splat re-exported: kernels import it from here

_FEATURES = llvm.get_host_cpu_features()
HAS_VNNI = bool(_FEATURES.get('avx512vnni', False) and _FEATURES.get('avx512bw', False))

MR = 6       # rows of a tile (broadcast operand)
NV = 4       # 16-lane vectors per tile row: NR = 64 columns
NR = NV * 16


def _dpbusd(builder, acc, u8v, s8v):
    """acc + (groups of 4 of u8v * s8v), each operand <16 x i32> of packed bytes."""
    v16 = ir.VectorType(ir.IntType(32), 16)
    if HAS_VNNI:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [v16] * 3),
                                            "llvm.x86.avx512.vpdpbusd.512")
        return builder.call(fn, [acc, u8v, s8v])
    b64, i64x = ir.VectorType(ir.IntType(8), 64), ir.VectorType(ir.IntType(32), 64)
    p = builder.mul(builder.zext(builder.bitcast(u8v, b64), i64x),
                    builder.sext(builder.bitcast(s8v, b64), i64x))
    for q in range(4):
        part = builder.shuffle_vector(p, p, ir.Constant(ir.VectorType(ir.IntType(32), 16),
                                                       [4 * j + q for j in range(16)]))
        acc = builder.add(acc, part)
    return acc


def _ptr(context, builder, arrty, arr, off, elt):
    data = make_array(arrty)(context, builder, arr).data
    p = builder.gep(data, [context.cast(builder, off, types.int64, types.intp)])
    return builder.bitcast(p, elt.as_pointer())


def emit_tile(builder, cbase, pbase, kq64, vstreams, load_vecs, lane, step, init=None):
    """The tile loop over kq64 >= 1 steps: MR broadcasts of ``lane`` scalars from pbase ([kq][MR])
    times the NV vectors ``load_vecs(vcur)`` gives at the current pointers of ``vstreams``
    ((pointer, advance per step) pairs, ``ptr.tile_loop``), each product summed into its
    accumulator by ``step(acc, broadcast, vec)``; the MR*NV accumulators (16 lanes, zero or
    ``init(r)`` for row r at the start) then stored at cbase (``<16 x lane>*``). Shared by the
    integer tiles here and the float ones of ``conv_implicit``."""
    i64 = ir.IntType(64)
    v16 = ir.VectorType(lane, 16)
    starts = [ir.Constant(v16, None)] * MR if init is None else [init(r) for r in range(MR)]

    def load_bcast(cur, r):
        return builder.load(builder.gep(cur[0], [ir.Constant(i64, r)]), align=1)
    streams = [(pbase, ir.Constant(i64, MR))] + vstreams
    new = tile_loop(builder, kq64, MR, NV, v16, starts, streams,
                    lambda cur: load_vecs(cur[1:]), load_bcast, step, "qtile")
    for j, n in enumerate(new):
        builder.store(n, builder.gep(cbase, [ir.Constant(i64, j)]), align=4)


def offset_vecs(builder, base, cur, vt, align):
    """The NV vectors (type ``vt``) at ``base`` plus the element offset the table pointer
    ``cur[0]`` points at: V read in place at one offset per step (``tile_off_function``,
    ``conv_implicit.ftile_off_function``)."""
    i64 = ir.IntType(64)
    row = builder.bitcast(builder.gep(base, [builder.load(cur[0])]), vt.as_pointer())
    return [builder.load(builder.gep(row, [ir.Constant(i64, v)]), align=align)
            for v in range(NV)]


def _emit_tile(builder, cbase, pbase, kq64, vstreams, load_vecs, p_is_u8):
    """``emit_tile`` on packed bytes: steps of 4 byte products summed by ``vpdpbusd``."""
    def step(acc, bc, vec):
        return _dpbusd(builder, acc, bc, vec) if p_is_u8 else _dpbusd(builder, acc, vec, bc)
    emit_tile(builder, cbase, pbase, kq64, vstreams, load_vecs, ir.IntType(32), step)


_V16 = ir.VectorType(ir.IntType(32), 16)
_I64 = ir.IntType(64)


def tile_function(module: ir.Module, p_is_u8: bool) -> ir.Function:
    """``_tile``'s loop as a function of its own in ``module`` (``ptr.outlined``):
    ``void(<16 x i32>* c, i32* p, i64 kq, <16 x i32>* v)``, V packed ([kq][NR][4] bytes)."""
    def emit(b, fargs):
        cbase, pbase, kq64, vb = fargs

        def load_vecs(cur):
            return [b.load(b.gep(cur[0], [ir.Constant(_I64, v)]), align=1) for v in range(NV)]
        _emit_tile(b, cbase, pbase, kq64, [(vb, ir.Constant(_I64, NV))], load_vecs, p_is_u8)
    return outlined(module, f"jitort.qgemm.tile.{int(p_is_u8)}",
                    [_V16.as_pointer(), ir.IntType(32).as_pointer(), _I64, _V16.as_pointer()],
                    emit)


def tile_off_function(module: ir.Module) -> ir.Function:
    """``_tile_off``'s loop as a function of its own in ``module``: ``void(<16 x i32>* c,
    i32* p, i64 kq, i64* offs, i8* v)``, step q's vectors at byte ``offs[q]`` of v."""
    def emit(b, fargs):
        cbase, pbase, kq64, ob, vb = fargs
        _emit_tile(b, cbase, pbase, kq64, [(ob, ir.Constant(_I64, 1))],
                   lambda cur: offset_vecs(b, vb, cur, _V16, 1), False)
    return outlined(module, "jitort.qgemm.tile_off",
                    [_V16.as_pointer(), ir.IntType(32).as_pointer(), _I64,
                     _I64.as_pointer(), ir.IntType(8).as_pointer()], emit)


@intrinsic
def _tile(typingctx, c, coff, pp, poff, pv, voff, kq, bcast_u8):
    """c[coff : coff + MR*NR] (int32, row-major MR x NR) = the tile's S over kq >= 1 steps of
    4: pp[poff:] packed P ([kq][MR][4] bytes), pv[voff:] packed V ([kq][NR][4]). When
    ``bcast_u8`` (a literal) P holds the unsigned bytes, else V does. Calls
    ``tile_function``."""
    if not isinstance(bcast_u8, types.BooleanLiteral):
        return None
    p_is_u8 = bcast_u8.literal_value
    sig = types.void(c, coff, pp, poff, pv, voff, kq, bcast_u8)

    def codegen(context, builder, sig, args):
        c_, coff_, pp_, poff_, pv_, voff_, kq_, _ = args
        builder.call(tile_function(builder.module, p_is_u8),
                     [_ptr(context, builder, sig.args[0], c_, coff_, _V16),
                      _ptr(context, builder, sig.args[2], pp_, poff_, ir.IntType(32)),
                      context.cast(builder, kq_, sig.args[6], types.int64),
                      _ptr(context, builder, sig.args[4], pv_, voff_, _V16)])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _tile_off(typingctx, c, coff, pp, poff, pv, voff, offs, kq):
    """``_tile`` with V read in place: step q's NR columns of 4 unsigned bytes are the NR*4
    bytes at pv[voff + offs[q]:] (offs: int64 byte offsets, one per step), P ([kq][MR][4]
    signed bytes at pp[poff:]) as in ``_tile``. A convolution's channel-interleaved padded
    input is such a V, with one offset per (4 channels, tap) step: no im2col copy. Calls
    ``tile_off_function``."""
    sig = types.void(c, coff, pp, poff, pv, voff, offs, kq)

    def codegen(context, builder, sig, args):
        c_, coff_, pp_, poff_, pv_, voff_, offs_, kq_ = args
        builder.call(tile_off_function(builder.module),
                     [_ptr(context, builder, sig.args[0], c_, coff_, _V16),
                      _ptr(context, builder, sig.args[2], pp_, poff_, ir.IntType(32)),
                      context.cast(builder, kq_, sig.args[7], types.int64),
                      _ptr(context, builder, sig.args[6], offs_, ir.Constant(_I64, 0), _I64),
                      _ptr(context, builder, sig.args[4], pv_, voff_, ir.IntType(8))])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def copy_short(typingctx, d, doff, s, soff, n):
    """d.flat[doff : doff + n] = s.flat[soff : soff + n] for 0 <= n <= 64 (C-contiguous arrays of
    one dtype) as one masked vector load and store, without branches: copying short runs of
    varying length element by element (or in blocks and a remainder) mispredicts on each."""
    if not (isinstance(d, types.Array) and isinstance(s, types.Array) and d.dtype == s.dtype):
        return None
    sig = types.void(d, doff, s, soff, n)

    def codegen(context, builder, sig, args):
        elt = context.get_data_type(sig.args[0].dtype)
        vt = ir.VectorType(elt, 64)
        i32 = ir.IntType(32)
        nn = builder.trunc(context.cast(builder, args[4], sig.args[4], types.int64), i32)
        mask = builder.icmp_signed('<', ir.Constant(ir.VectorType(i32, 64), list(range(64))),
                                   splat(builder, nn, 64))
        ptrs = []
        for k in (0, 2):
            data = make_array(sig.args[k])(context, builder, args[k]).data
            p = builder.gep(data, [context.cast(builder, args[k + 1], sig.args[k + 1],
                                                types.intp)])
            ptrs.append(builder.bitcast(p, vt.as_pointer()))
        ld, st = masked_load(builder, vt), masked_store(builder, vt)
        v = builder.call(ld, [ptrs[1], ir.Constant(i32, 1), mask, ir.Constant(vt, None)])
        builder.call(st, [v, ptrs[0], ir.Constant(i32, 1), mask])
        return context.get_dummy_value()
    return sig, codegen


def _copy_pad_codegen(stride, both):
    """The code of ``copy_pad`` (stride 1), ``copy_pad2`` (stride 2) and ``copy_pad2x`` (both
    phases of stride 2, ``both``); args (d, doff, [doff1,] s, soff, lo, hi, [lo1, hi1,] n,
    fill)."""
    def codegen(context, builder, sig, args):
        at = sig.args
        elt = context.get_data_type(at[0].dtype)
        lanes = 512 // at[0].dtype.bitwidth
        wide = lanes * stride
        vt, wt = ir.VectorType(elt, lanes), ir.VectorType(elt, wide)
        i32 = ir.IntType(32)
        names = ['d', 'doff'] + (['doff1'] if both else []) + ['s', 'soff', 'lo', 'hi'] \
            + (['lo1', 'hi1'] if both else []) + ['n', 'fill', 'ok']
        k = {nm: j for j, nm in enumerate(names)}

        def arg32(nm):
            return builder.trunc(context.cast(builder, args[k[nm]], at[k[nm]], types.int64),
                                 i32)

        def below(n, v):
            return builder.icmp_signed('<', ir.Constant(ir.VectorType(i32, n), list(range(n))),
                                       splat(builder, v, n))

        # source lanes read: stride*i + e for lo <= i < hi, and the lanes between (inside the
        # source: a constant parity mask made LLVM's masked load 20-30% slower); with both
        # phases, the hull of the two ranges (each the source's valid columns of a parity)
        lo = builder.mul(arg32('lo'), ir.Constant(i32, stride))
        hi = builder.sub(builder.mul(arg32('hi'), ir.Constant(i32, stride)),
                         ir.Constant(i32, stride - 1))
        if both:
            smin = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i32, [i32, i32]), "llvm.smin.i32")
            smax = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i32, [i32, i32]), "llvm.smax.i32")
            lo = builder.call(smin, [lo, builder.add(builder.mul(arg32('lo1'),
                                                                 ir.Constant(i32, 2)),
                                                     ir.Constant(i32, 1))])
            hi = builder.call(smax, [hi, builder.mul(arg32('hi1'), ir.Constant(i32, 2))])
        rd = builder.and_(builder.not_(below(wide, lo)), below(wide, hi))
        # a row of padding: no lane read (a separate flag, so that the mask of lo / hi, the
        # same for every row of a plane, is computed once outside a caller's row loop)
        ok = builder.icmp_signed('!=', context.cast(builder, args[k['ok']], at[k['ok']],
                                                    types.int64), ir.Constant(ir.IntType(64), 0))
        rd = builder.and_(rd, splat(builder, ok, wide))
        fill = splat(builder, context.cast(builder, args[k['fill']], at[k['fill']],
                                            at[0].dtype), wide)

        def ptr(arr, off, ty):
            data = make_array(at[k[arr]])(context, builder, args[k[arr]]).data
            return builder.bitcast(builder.gep(data, [context.cast(
                builder, args[k[off]], at[k[off]], types.intp)]), ty.as_pointer())
        ld = masked_load(builder, wt)
        v = builder.call(ld, [ptr('s', 'soff', wt), ir.Constant(i32, 1), rd, fill])
        st = masked_store(builder, vt)
        wr = below(lanes, arg32('n'))
        for e, off in enumerate(['doff', 'doff1'] if both else ['doff']):
            ve = v
            if stride > 1:   # every stride-th lane from e (the padding lanes hold the fill)
                ve = builder.shuffle_vector(v, ir.Constant(wt, ir.Undefined),
                                            ir.Constant(ir.VectorType(i32, lanes),
                                                        [stride * j + e for j in range(lanes)]))
            builder.call(st, [ve, ptr('d', off, vt), ir.Constant(i32, 1), wr])
        return context.get_dummy_value()
    return codegen


def _copy_pad_typer(stride):
    def typer(typingctx, d, doff, s, soff, lo, hi, n, fill, ok):
        if not (isinstance(d, types.Array) and isinstance(s, types.Array)
                and d.dtype == s.dtype):
            return None
        return (types.void(d, doff, s, soff, lo, hi, n, fill, ok),
                _copy_pad_codegen(stride, False))
    typer.__name__ = typer.__qualname__ = "copy_pad" + ("" if stride == 1 else str(stride))
    return typer


def _copy_pad2x_typer(typingctx, d, doff, doff1, s, soff, lo, hi, lo1, hi1, n, fill, ok):
    if not (isinstance(d, types.Array) and isinstance(s, types.Array) and d.dtype == s.dtype):
        return None
    return (types.void(d, doff, doff1, s, soff, lo, hi, lo1, hi1, n, fill, ok),
            _copy_pad_codegen(2, True))


copy_pad = intrinsic(_copy_pad_typer(1))
copy_pad.__doc__ = """copy_pad(d, doff, s, soff, lo, hi, n, fill, ok): d.flat[doff + i] =
s.flat[soff + i] for lo <= i < hi if ok, else ``fill``, for 0 <= i < n <= 64 bytes (one vector;
C-contiguous arrays of one dtype): a zero-padded row as one masked load (the padding lanes not
read: soff + i may be outside s there) and one masked store."""
copy_pad2 = intrinsic(_copy_pad_typer(2))
copy_pad2.__doc__ = """copy_pad2(d, doff, s, soff, lo, hi, n, fill, ok): ``copy_pad`` from every
second source element, d.flat[doff + i] = s.flat[soff + 2i] for lo <= i < hi (a stride phase
of a padded row: one masked load of two vectors and a shuffle)."""
_copy_pad2x_typer.__name__ = _copy_pad2x_typer.__qualname__ = "copy_pad2x"
copy_pad2x = intrinsic(_copy_pad2x_typer)
copy_pad2x.__doc__ = """copy_pad2x(d, doff, doff1, s, soff, lo, hi, lo1, hi1, n, fill, ok):
both stride-2 phases of a padded row from one load, d.flat[doff + i] = s.flat[soff + 2i] for
lo <= i < hi and d.flat[doff1 + i] = s.flat[soff + 2i + 1] for lo1 <= i < hi1 (if ok), else
``fill``."""


def masked_load(builder, vt):
    """The declaration of ``llvm.masked.load`` for vector type vt: call it with (pointer to vt,
    i32 alignment, <n x i1> mask, passthrough vt)."""
    return cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vt, [vt.as_pointer(), ir.IntType(32),
                                             ir.VectorType(ir.IntType(1), vt.count), vt]),
        f"llvm.masked.load.{_vsuffix(vt)}.p0{_vsuffix(vt)}")


def masked_store(builder, vt):
    """The declaration of ``llvm.masked.store`` for vector type vt: call it with (vt, pointer
    to vt, i32 alignment, <n x i1> mask)."""
    return cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [vt, vt.as_pointer(), ir.IntType(32),
                                                        ir.VectorType(ir.IntType(1), vt.count)]),
        f"llvm.masked.store.{_vsuffix(vt)}.p0{_vsuffix(vt)}")


def _vsuffix(vt):
    return f"v{vt.count}{_suffix(vt.element)}"


def _suffix(elt):
    return f"i{elt.width}" if isinstance(elt, ir.IntType) else {"float": "f32",
                                                                 "double": "f64"}[str(elt)]


@njit(cache=True, error_model='numpy')
def packed_sizes(m, k, n):
    """Bytes of packed P and packed V for an (m, k) @ (k, n) product."""
    kq = (k + 3) // 4
    return ((m + MR - 1) // MR) * kq * MR * 4, ((n + NR - 1) // NR) * kq * NR * 4


@njit(cache=True, error_model='numpy')
def _row_sum(src, n, flip, to_signed):
    """Sum of n bytes at pointer src (^ 0x80 when ``flip``), read as int8 when ``to_signed``."""
    s = np.int32(0)
    if to_signed:
        for j in range(n):
            s += np.int32(np.int8(src[j] ^ flip))
    else:
        for j in range(n):
            s += np.int32(src[j] ^ flip)
    return s


@njit(cache=True, error_model='numpy')
def _pack_p_words(p32, m_n, kq, fx, o32):
    """``pack_p``'s layout for K a multiple of 4: word q of row m to o32[(t*kq + q)*MR + r]."""
    for t in range((m_n + MR - 1) // MR):
        for r in range(MR):
            m = t * MR + r
            d = eptr(o32, t * kq * MR + r)
            if m >= m_n:
                for q in range(kq):
                    d[q * MR] = 0
                continue
            src = eptr(p32, m * kq)
            for q in range(kq):
                d[q * MR] = src[q] ^ fx


@njit(cache=True, error_model='numpy')
def pack_p(p2, flip, to_signed, out, rowsum):
    """Pack P (M, K) of 8-bit integers, C-contiguous (their bytes ^ 0x80 when ``flip``) into
    out, and the row sums of the packed values (read as int8 when ``to_signed``) into rowsum
    (M,)."""
    m_n, k_n = p2.shape
    pu = p2.view(np.uint8)
    kq = (k_n + 3) // 4
    fx = np.uint8(0x80) if flip else np.uint8(0)
    if k_n % 4 == 0 and m_n > 0:  # whole 4-byte groups: moved as uint32 words
        _pack_p_words(pu.reshape(m_n * k_n).view(np.uint32), m_n, kq,
                      np.uint32(0x80808080) if flip else np.uint32(0), out.view(np.uint32))
        for m in range(m_n):
            rowsum[m] = _row_sum(eptr(pu, m * k_n), k_n, fx, to_signed)
        return
    o = eptr(out, 0)
    for t in range((m_n + MR - 1) // MR):
        base = t * kq * MR * 4
        for r in range(MR):
            m = t * MR + r
            if m >= m_n:
                for q in range(kq):
                    for j in range(4):
                        o[base + (q * MR + r) * 4 + j] = 0
                continue
            src = eptr(pu, m * k_n)
            rowsum[m] = _row_sum(src, k_n, fx, to_signed)
            for q in range(k_n // 4):
                d = base + (q * MR + r) * 4
                o[d] = src[4 * q] ^ fx
                o[d + 1] = src[4 * q + 1] ^ fx
                o[d + 2] = src[4 * q + 2] ^ fx
                o[d + 3] = src[4 * q + 3] ^ fx
            if k_n % 4:
                q = k_n // 4
                d = base + (q * MR + r) * 4
                for j in range(4):
                    o[d + j] = src[4 * q + j] ^ fx if 4 * q + j < k_n else 0


@njit(cache=True, error_model='numpy')
def pack_v(v2, flip, to_signed, out, colsum):
    """Pack V (K, N) of 8-bit integers, C-contiguous (their bytes ^ 0x80 when ``flip``) into
    out, and the column sums of the packed values (read as int8 when ``to_signed``) into
    colsum (N,)."""
    k_n, n_n = v2.shape
    vu = v2.view(np.uint8)
    kq = (k_n + 3) // 4
    fx = np.uint8(0x80) if flip else np.uint8(0)
    for j in range(n_n):
        colsum[j] = 0
    for k in range(k_n):
        src = eptr(vu, k * n_n)
        if to_signed:
            for j in range(n_n):
                colsum[j] += np.int32(np.int8(src[j] ^ fx))
        else:
            for j in range(n_n):
                colsum[j] += np.int32(src[j] ^ fx)
    o = eptr(out, 0)
    for pn in range((n_n + NR - 1) // NR):
        j0 = pn * NR
        w = min(NR, n_n - j0)
        for q in range(kq):
            d = (pn * kq + q) * NR * 4
            for e in range(4):
                k = 4 * q + e
                if k < k_n and w == NR:
                    src = eptr(vu, k * n_n + j0)
                    for j in range(NR):
                        o[d + 4 * j + e] = src[j] ^ fx
                else:
                    for j in range(NR):
                        o[d + 4 * j + e] = vu[k, j0 + j] ^ fx if k < k_n and j < w else 0


@njit(cache=True, error_model='numpy', inline='always')
def _igemm_part(pp, rowsum, zp, pv, colsum, zv, c2, k, bcast_u8, t0, t1, pn0, pn1):
    """``igemm`` over row tiles t0..t1-1 (MR rows each) and panels pn0..pn1-1 (NR columns)."""
    m_n, n_n = c2.shape
    kq = (k + 3) // 4
    tile = np.zeros(MR * NR, np.int32)
    per_p = zp.shape[0] > 1
    per_v = zv.shape[0] > 1
    for pn in range(pn0, pn1):
        j0 = pn * NR
        w = min(NR, n_n - j0)
        # the panel's columns as slices indexed from 0: with j0 from a caller's bound, LLVM
        # cannot see colsum[j0 + j] >= 0, keeps Numba's negative-index wraparound per element
        # and the epilogue stays scalar
        cs = colsum[j0:j0 + w]
        zvp = zv[j0:j0 + w] if per_v else zv
        for t in range(t0, t1):
            if kq > 0:
                if bcast_u8:
                    _tile(tile, 0, pp, t * kq * MR * 4, pv, pn * kq * NR * 4, kq, True)
                else:
                    _tile(tile, 0, pp, t * kq * MR * 4, pv, pn * kq * NR * 4, kq, False)
            for r in range(min(MR, m_n - t * MR)):
                m = t * MR + r
                a = np.int32(zp[m if per_p else 0])
                rs = rowsum[m]
                row = c2[m, j0:j0 + w]
                if per_v:
                    for j in range(w):
                        b = np.int32(zvp[j])
                        row[j] = tile[r * NR + j] - a * cs[j] - b * rs + k * a * b
                else:
                    b = np.int32(zv[0])
                    kab = k * a * b - b * rs
                    for j in range(w):
                        row[j] = tile[r * NR + j] - a * cs[j] + kab


@njit(cache=True, error_model='numpy')
def igemm(pp, rowsum, zp, pv, colsum, zv, c2, k, bcast_u8):
    """c2 (M, N) int32 = C (module doc) from packed P (``pack_p``: rowsum, zero points zp of 1
    or M entries, in the packed values' domain) and packed V (``pack_v``: colsum, zv of 1 or N
    entries); ``bcast_u8``: P holds the unsigned bytes."""
    m_n, n_n = c2.shape
    _igemm_part(pp, rowsum, zp, pv, colsum, zv, c2, k, bcast_u8, 0, (m_n + MR - 1) // MR, 0,
                (n_n + NR - 1) // NR)


@njit(cache=True, error_model='numpy')
def igemm_part(pp, rowsum, zp, pv, colsum, zv, c2, k, bcast_u8, t0, t1, pn0, pn1):
    """``igemm`` restricted to row tiles t0..t1-1 and panels pn0..pn1-1 of c2 (a parallel
    caller's task); the same code as ``igemm`` (inlined into both)."""
    _igemm_part(pp, rowsum, zp, pv, colsum, zv, c2, k, bcast_u8, t0, t1, pn0, pn1)

"""The scores of a linear model, ``x @ W.T + b``, a tile of rows at a time through registers.

A row of a classical-ML input is short (tens of features) and the classes few, so the dot
product of one row with one class is a handful of lanes followed by a horizontal sum: the
row-blocked loops of :mod:`.ml` are bound by those sums, not by memory or multiplies. Here a
tile of TW rows (TW = one vector of float32: 16 with AVX-512, else 8) is loaded as TW vectors
of TW features and transposed in registers (the shuffles of :mod:`.transpose`), so that each
vector then holds one feature of the TW rows: a class's scores for the whole tile are TW
multiply-adds of those vectors by broadcast weights, with no horizontal sum, and go out as
one vector store into a classes x rows block.
"""
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from .ptr import loop_begin, loop_end
from .qgemm import masked_load, splat
from .transpose import _TW, shuffle_rounds

#: rows per tile and features per chunk: float32 lanes of one vector on this host
TW = _TW


def make_block(scaled: bool, tw: int = TW):
    """The intrinsic ``f(x, xoff, ldx, m, nf, off, scale, wp, fpad, b, st)``: st[j, i] = b[j]
    + sum over k < nf of v(i, k) * wp[j, k] for rows i < m and classes j < b.shape[0], with
    v(i, k) = x[xoff + i*ldx + k], or (x - off[k]) * scale[k] (float32, as onnxruntime's
    Scaler) when ``scaled``. ``wp`` (and ``off`` / ``scale``) hold fpad >= nf columns, a
    multiple of ``tw``, zero past nf; st (2-D) holds at least m rounded up to tw columns
    (those past m are written with anything). Tiles of ``tw`` rows (a power of two, the
    lanes of the vectors: TW here; tests build others): whole tiles read whole chunks of tw
    features unmasked and only the last, partial chunk masked; the last, partial tile reads
    its rows masked."""
    def typer(typingctx, x, xoff, ldx, m, nf, off, scale, wp, fpad, b, st):
        arrs = (x, off, scale, wp, b, st)
        if not all(isinstance(a, types.Array) and a.dtype == types.float32 for a in arrs):
            return None
        sig = types.void(x, xoff, ldx, m, nf, off, scale, wp, fpad, b, st)

        def codegen(context, builder, sig, args):
            _emit_block(context, builder, sig, args, _Tile(builder, scaled, tw))
            return context.get_dummy_value()
        return sig, codegen
    return intrinsic(typer)


class _Tile:
    """The LLVM IR of one chunk of one tile: tw rows' tw features loaded (``masks``: None,
    or one <tw x i1> per row), transposed, scaled, and multiplied into every class's scores;
    ``p``: the intrinsic's arguments by name."""

    def __init__(self, builder, scaled, tw):
        self.b, self.scaled, self.tw, self.p = builder, scaled, tw, {}
        self.i64 = ir.IntType(64)
        self.vt = ir.VectorType(ir.FloatType(), tw)
        self.mload = masked_load(builder, self.vt)

    def c(self, v):
        return ir.Constant(self.i64, v)

    def chunk(self, row0, c0, sb, first, masks=None):
        """Features c0 .. c0 + tw of rows x[row0 + i*ldx] (i < tw) into st[:, sb:sb + tw];
        ``first``: an i1, the scores start from the biases instead of st."""
        bld, p, vt = self.b, self.p, self.vt
        rows = []
        for i in range(self.tw):
            ri = self.c(i) if masks is None or i == 0 else masks[1][i]
            ptr = bld.bitcast(bld.gep(p["x"], [bld.add(bld.add(row0, bld.mul(ri, p["ldx"])),
                                                       c0)]), vt.as_pointer())
            if masks is None:
                rows.append(bld.load(ptr, align=4))
            else:
                rows.append(bld.call(self.mload, [ptr, ir.Constant(ir.IntType(32), 4),
                                                  masks[0][i], ir.Constant(vt, None)]))
        self.classes(shuffle_rounds(bld, rows, self.tw // 2), self.tw, c0, sb, first)

    def narrow(self, row0, c0, sb, first, w, ctail):
        """The last ``ctail`` (<= w, w < tw a power of two) features, from c0, of the tile's
        rows: each of w vectors holds tw / w rows' w features (row v + s*w at lanes s*w ..),
        read as masked w-lane pieces, so that log2(w) shuffle rounds within the w-lane
        groups leave vector k holding feature c0 + k of rows 0 .. tw in order (a whole-width
        transpose would shuffle tw vectors log2(tw) times for these few features)."""
        bld, p = self.b, self.p
        f32, i32 = ir.FloatType(), ir.IntType(32)
        pt = ir.VectorType(f32, w)
        lanes = ir.Constant(ir.VectorType(self.i64, w), list(range(w)))
        pmask = bld.icmp_signed('<', lanes, splat(bld, ctail, w))
        mload = masked_load(bld, pt)
        vecs = []
        for v in range(w):
            pieces = []
            for s in range(self.tw // w):
                ptr = bld.gep(p["x"], [bld.add(bld.add(row0, bld.mul(self.c(v + s * w),
                                                                     p["ldx"])), c0)])
                pieces.append(bld.call(mload, [bld.bitcast(ptr, pt.as_pointer()),
                                               ir.Constant(i32, 4), pmask,
                                               ir.Constant(pt, None)]))
            while len(pieces) > 1:     # concatenated pairwise up to tw lanes
                n = pieces[0].type.count
                idx = ir.Constant(ir.VectorType(i32, 2 * n), list(range(2 * n)))
                pieces = [bld.shuffle_vector(a, b, idx)
                          for a, b in zip(pieces[::2], pieces[1::2])]
            vecs.append(pieces[0])
        self.classes(shuffle_rounds(bld, vecs, w // 2), w, c0, sb, first)

    def classes(self, t, nk, c0, sb, first):
        """st[j, sb:sb + tw] (+)= the sum over k < nk of t[k] * wp[j, c0 + k] for every class
        j (from b[j] when ``first``)."""
        bld, p, vt = self.b, self.p, self.vt
        if self.scaled:
            for k in range(nk):
                kk = bld.add(c0, self.c(k))
                o = bld.load(bld.gep(p["off"], [kk]))
                s = bld.load(bld.gep(p["scale"], [kk]))
                t[k] = bld.fmul(bld.fsub(t[k], splat(bld, o, self.tw)), splat(bld, s, self.tw))
        j, _, jloop, jdone = loop_begin(bld, p["nt"], "cls", "cls_done")
        dst = bld.bitcast(bld.gep(p["st"], [bld.add(sb, bld.mul(j, p["lds"]))]),
                          vt.as_pointer())
        bias = splat(bld, bld.load(bld.gep(p["b"], [j])), self.tw)
        acc = bld.select(first, bias, bld.load(dst, align=4))
        wrow = bld.add(bld.mul(j, p["fpad"]), c0)
        for k in range(nk):
            w = bld.load(bld.gep(p["wp"], [bld.add(wrow, self.c(k))]))
            acc = bld.fadd(acc, bld.fmul(t[k], splat(bld, w, self.tw), flags=('contract',)),
                           flags=('contract',))
        bld.store(acc, dst, align=4)
        loop_end(bld, j, 1, p["nt"], jloop, jdone)


def _emit_block(context, builder, sig, args, tile):
    tys = sig.args
    i64 = ir.IntType(64)

    def arg(k):
        return context.cast(builder, args[k], tys[k], types.int64)

    def arr(k):
        return make_array(tys[k])(context, builder, args[k])

    p = {name: arg(k) for name, k in (("xoff", 1), ("ldx", 2), ("m", 3), ("nf", 4),
                                      ("fpad", 8))}
    p.update({name: arr(k).data for name, k in (("x", 0), ("off", 5), ("scale", 6),
                                                ("wp", 7), ("b", 9), ("st", 10))})
    p["nt"] = builder.extract_value(arr(9).shape, 0)
    p["lds"] = builder.extract_value(arr(10).shape, 1)
    tile.p = p
    n = tile.tw
    c, tw = tile.c, ir.Constant(i64, n)
    lane = ir.Constant(ir.VectorType(i64, n), list(range(n)))
    nfull, ctail = builder.sdiv(p["nf"], tw), builder.srem(p["nf"], tw)
    ntiles, rem = builder.sdiv(p["m"], tw), builder.srem(p["m"], tw)
    tailmask = builder.icmp_signed('<', lane, splat(builder, ctail, n))
    tail_first = builder.icmp_signed('==', nfull, c(0))
    # whole tiles: whole chunks unmasked, then the partial chunk masked
    t, _, tloop, tdone = loop_begin(builder, ntiles, "tile", "tiles_done")
    sb = builder.mul(t, tw)
    row0 = builder.add(p["xoff"], builder.mul(sb, p["ldx"]))
    k, _, kloop, kdone = loop_begin(builder, nfull, "chunk", "chunks_done")
    tile.chunk(row0, builder.mul(k, tw), sb, builder.icmp_signed('==', k, c(0)))
    loop_end(builder, k, 1, nfull, kloop, kdone)
    c0 = builder.mul(nfull, tw)
    with builder.if_then(builder.icmp_signed('>', ctail, c(n // 2))):
        tile.chunk(row0, c0, sb, tail_first, ([tailmask] * n, [c(i) for i in range(n)]))
    w = n // 2
    while w >= 1:          # a tail of (w/2, w] features: the narrow transpose of width w
        inside = builder.and_(builder.icmp_signed('>', ctail, c(w // 2)),
                              builder.icmp_signed('<=', ctail, c(w)))
        with builder.if_then(inside):
            tile.narrow(row0, c0, sb, tail_first, w, ctail)
        w //= 2
    loop_end(builder, t, 1, ntiles, tloop, tdone)
    # the partial tile: rows past rem masked off (and read from row 0)
    with builder.if_then(builder.icmp_signed('>', rem, c(0))):
        sb = builder.mul(ntiles, tw)
        row0 = builder.add(p["xoff"], builder.mul(sb, p["ldx"]))
        nchunks = builder.sdiv(p["fpad"], tw)
        k, _, kloop, kdone = loop_begin(builder, nchunks, "pchunk", "pchunks_done")
        c0 = builder.mul(k, tw)
        cmask = builder.icmp_signed('<', lane, splat(builder, builder.sub(p["nf"], c0), n))
        masks, rows = [], []
        for i in range(n):
            ok = builder.icmp_signed('<', c(i), rem)
            masks.append(builder.and_(cmask, splat(builder, ok, n)))
            rows.append(builder.select(ok, c(i), c(0)))
        tile.chunk(row0, c0, sb, builder.icmp_signed('==', k, c(0)), (masks, rows))
        loop_end(builder, k, 1, nchunks, kloop, kdone)


_block_plain = make_block(False)
_block_scaled = make_block(True)


@njit(cache=True, error_model='numpy')
def scores_tiles(x, r0, m, off, scale, wp, b, st):
    """st[j, r] = b[j] + row r0 + r of x (through the Scaler when ``off`` is not empty) .
    W[j] for r < m, j < b.shape[0]; ``wp``: W zero-padded to wp.shape[1] columns (a
    multiple of TW), as ``off`` / ``scale`` when not empty; st's rows hold at least m rounded
    up to TW (the lanes past m are written with anything)."""
    ldx = x.shape[1]
    if off.shape[0]:
        _block_scaled(x, r0 * ldx, ldx, m, ldx, off, scale, wp, wp.shape[1], b, st)
    else:
        _block_plain(x, r0 * ldx, ldx, m, ldx, off, scale, wp, wp.shape[1], b, st)

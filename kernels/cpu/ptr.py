"""CPU kernels' raw element pointer (``eptr``), and the vector broadcast and counted loops of
their LLVM IR (``splat``, ``loop_begin`` / ``loop_end``, ``tile_loop``), in a module of its own
so that kernels that need nothing else from ``gemm`` (``scan``) do not share its cache closure.
Imports nothing from jitort.
"""
from llvmlite import ir
from numba import types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array


@intrinsic
def eptr(typingctx, arr, off):
    """Raw pointer (``CPointer(dtype)``) to element ``off`` of ``arr``'s data (any layout;
    ``off`` counts elements from the first one). Indexing it has no bounds or wraparound
    checks and creates no array views (whose NRT reference counting costs ~10 ns each), so
    short inner copy loops vectorize; the caller guarantees the range is valid."""
    if not isinstance(arr, types.Array) or not isinstance(off, types.Integer):
        return None
    sig = types.CPointer(arr.dtype)(arr, off)

    def codegen(context, builder, sig, args):
        data = make_array(sig.args[0])(context, builder, args[0]).data
        return builder.gep(data, [context.cast(builder, args[1], sig.args[1], types.intp)])
    return sig, codegen


@intrinsic
def eptrs(typingctx, arr, off, step, count):
    """The ``count`` (a constant) raw pointers ``eptr(arr, off + k * step)``, k < count, as a
    tuple: a stencil's taps or rows in one line."""
    if (not isinstance(arr, types.Array) or not isinstance(off, types.Integer)
            or not isinstance(step, types.Integer)
            or not isinstance(count, types.IntegerLiteral)):
        return None
    n = count.literal_value
    ptr = types.CPointer(arr.dtype)
    sig = types.UniTuple(ptr, n)(arr, off, step, count)

    def codegen(context, builder, sig, args):
        data = make_array(sig.args[0])(context, builder, args[0]).data
        o = context.cast(builder, args[1], sig.args[1], types.intp)
        st = context.cast(builder, args[2], sig.args[2], types.intp)
        ptrs = [builder.gep(data, [builder.add(o, builder.mul(st, ir.Constant(o.type, k)))])
                for k in range(n)]
        return context.make_tuple(builder, sig.return_type, ptrs)
    return sig, codegen


def splat(builder, x, n):
    """<n x type(x)> with every lane x (the broadcast the kernels' intrinsics build)."""
    vt = ir.VectorType(x.type, n)
    i32 = ir.IntType(32)
    return builder.shuffle_vector(builder.insert_element(ir.Constant(vt, ir.Undefined), x,
                                                         ir.Constant(i32, 0)),
                                  ir.Constant(vt, ir.Undefined),
                                  ir.Constant(ir.VectorType(i32, n), None))


def loop_begin(builder, n, loop_name, done_name):
    """Open a counted loop of LLVM IR: i = 0, step, ... while i < n (an i64 value), skipped
    when n <= 0. Returns (i, pre, loop, done): the counter's phi node, the block before the
    loop, the loop's first block (where the builder now stands) and the block after it;
    :func:`loop_end` closes it."""
    i64 = ir.IntType(64)
    pre = builder.block
    loop = builder.append_basic_block(loop_name)
    done = builder.append_basic_block(done_name)
    builder.cbranch(builder.icmp_signed('>', n, ir.Constant(i64, 0)), loop, done)
    builder.position_at_end(loop)
    i = builder.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), pre)
    return i, pre, loop, done


def loop_end(builder, i, step, n, loop, done, carried=()):
    """Close a loop of :func:`loop_begin`: i += step (a constant) and each (phi, value) of
    ``carried`` takes its next value, back to ``loop`` while i < n, then on at ``done``.
    Returns the loop's last block (where the values flowing out of it come from)."""
    inext = builder.add(i, ir.Constant(ir.IntType(64), step))
    end = builder.block
    i.add_incoming(inext, end)
    for phi, v in carried:
        phi.add_incoming(v, end)
    builder.cbranch(builder.icmp_signed('<', inext, n), loop, done)
    builder.position_at_end(done)
    return end


def loop_phis(builder, vt, starts, pre):
    """Phi nodes (type vt) in a loop's first block, one per value of ``starts`` (their values
    on entry from block ``pre``): the loop-carried values :func:`loop_end` updates."""
    out = []
    for s in starts:
        p = builder.phi(vt)
        p.add_incoming(s, pre)
        out.append(p)
    return out


def loop_results(builder, vt, starts, pre, last, end):
    """The values after a loop of :func:`loop_begin` (built at its ``done`` block): ``starts``
    where it was skipped (from ``pre``), else its ``last`` values (from ``end``)."""
    out = []
    for s, v in zip(starts, last):
        p = builder.phi(vt)
        p.add_incoming(s, pre)
        p.add_incoming(v, end)
        out.append(p)
    return out


def tile_loop(builder, n, rows, nvec, vt, starts, streams, load_vecs, load_bcast, step, name):
    """The register-tile loop of the kernels' micro-kernels (LLVM IR): ``n`` >= 1 steps (an
    i64 value), each broadcasting ``load_bcast(cur, r)`` for the ``rows`` rows and combining it
    with the ``nvec`` vectors ``load_vecs(cur)`` into accumulator (r, v) by ``step(acc,
    broadcast, vec)``; accumulators (vector type vt) start at ``starts[r]`` and live in phi
    nodes. Returns their final values, row-major (r * nvec + v).

    ``streams`` is a list of (pointer, advance) pairs: each pointer lives in a phi node and
    moves ``advance`` elements of its pointee type (an i64 value, loop-invariant) per step;
    ``cur`` is the list of their values at the current step, and the loads address
    ``cur[j]`` plus loop-invariant offsets only: the loop is written strength-reduced, as
    jitort's code is emitted without LLVM's loop strength reduction (``kernels._link``).
    Emit it into a function of its own (:func:`outlined`): inlined into a caller, it spills
    its accumulators (see there).

    Shared by the integer and float tiles of ``qgemm`` / ``conv_implicit`` and the float gemm
    of ``sgemm``."""
    i64 = ir.IntType(64)
    pre = builder.block
    loop = builder.append_basic_block(f"{name}.loop")
    done = builder.append_basic_block(f"{name}.done")
    builder.branch(loop)
    builder.position_at_end(loop)
    i = builder.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), pre)
    cur = []
    for p, _ in streams:
        q = builder.phi(p.type)
        q.add_incoming(p, pre)
        cur.append(q)
    accs = []
    for j in range(rows * nvec):
        a = builder.phi(vt)
        a.add_incoming(starts[j // nvec], pre)
        accs.append(a)
    vecs = load_vecs(cur)
    new = []
    for r in range(rows):
        bc = splat(builder, load_bcast(cur, r), vt.count)
        for v in range(nvec):
            new.append(step(accs[r * nvec + v], bc, vecs[v]))
    nxt = [builder.gep(q, [adv]) for q, (_, adv) in zip(cur, streams)]
    inext = builder.add(i, ir.Constant(i64, 1))
    end = builder.block
    i.add_incoming(inext, end)
    for q, v in zip(cur, nxt):
        q.add_incoming(v, end)
    for a, v in zip(accs, new):
        a.add_incoming(v, end)
    builder.cbranch(builder.icmp_signed('<', inext, n), loop, done)
    builder.position_at_end(done)
    return new


def outlined(module, name, argtypes, emit):
    """The function ``name`` of ``module`` (``void(argtypes)``), built on first use by
    ``emit(builder, args)``: internal, never inlined, its pointer arguments ``noalias``.
    The kernels' register tiles live in such functions so that their registers are allocated
    for the tile alone: inlined into a caller whose other values stay live around the loop
    (the C update's vectors of ``sgemm._rows``), the register allocator under Intel targets'
    scheduling models kept 4 of the float32 tile's 24 accumulators in registers and moved the
    rest through the stack at every step. One call per tile (kc steps) costs nothing
    measurable."""
    if name in module.globals:
        return module.globals[name]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), argtypes), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    for arg in fn.args:
        if isinstance(arg.type, ir.PointerType):
            arg.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    emit(builder, fn.args)
    builder.ret_void()
    return fn

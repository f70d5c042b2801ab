"""One lowering per op (or op family), registered by decorator.

A lowering receives the :class:`~jitort.codegen.cpu.Emitter` and the node; concrete shapes are in
``em.shape(v)``. It emits kernel calls on views reshaped to the kernel's fixed rank. It raises
:class:`~jitort.codegen.cpu.Unlowerable` for shapes it does not handle: the node then falls back
to the interpreter.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Node
from .cpu import Emitter, Unlowerable, lowering
from .elementwise import BOOL, FLOATS, NUMERIC, tname
from .symbolic import concrete

_F = tuple(FLOATS)
#: dtypes Numba can take as array arguments (float16, bfloat16, float8, int4, strings... cannot)
_PLAIN = tuple(NUMERIC) + (BOOL,)


def _prod(xs) -> int:
    return math.prod(xs)  # keeps symbolic sizes symbolic (see codegen/symbolic.py)


def _is_float(*vals) -> bool:
    return all(v is not None and v.dtype is not None and np.dtype(v.dtype) in _F for v in vals)


def _plain(n: Node) -> bool:
    """Every present input and output has a dtype the generated code can handle."""
    return all(v.dtype is not None and np.dtype(v.dtype) in _PLAIN
               for v in list(n.all_inputs()) + list(n.outputs) if v is not None)


def _float_io(n: Node) -> bool:
    return _is_float(n.inputs[0], *n.outputs[:1])


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _3d(shape, axis) -> tuple[int, int, int]:
    return _prod(shape[:axis]), shape[axis], _prod(shape[axis + 1:])


# --- views -------------------------------------------------------------------------------------

@lowering("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity",
          supports=_plain)
def lower_view(em: Emitter, n: Node) -> None:
    em.alias(n.outputs[0], n.inputs[0])


# --- matrix products ---------------------------------------------------------------------------

def _matmul_views(em: Emitter, n: Node):
    a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
    sa, sb = em.shape(a), em.shape(b)
    if len(sa) == 0 or len(sb) == 0:
        raise Unlowerable(n, "MatMul of a scalar")
    sa2 = (1,) + tuple(sa) if len(sa) == 1 else tuple(sa)
    sb2 = tuple(sb) + (1,) if len(sb) == 1 else tuple(sb)
    m, k = sa2[-2], sa2[-1]
    n_ = sb2[-1]
    ba, bb = sa2[:-2], sb2[:-2]
    if _prod(bb) == 1:  # weights-like B: one big GEMM over all rows of A
        av = f"{em.arr(a)}.reshape({em.tuple_expr((1, _prod(ba) * m, k))})"
        bv = f"{em.arr(b)}.reshape({em.tuple_expr((1, k, n_))})"
        yv = (1, _prod(ba) * m, n_)
    else:
        rank = max(len(ba), len(bb))
        ba_, bb_ = (1,) * (rank - len(ba)) + ba, (1,) * (rank - len(bb)) + bb
        if ba_ == bb_:
            batch = _prod(ba_)
            av = f"{em.arr(a)}.reshape({em.tuple_expr((batch, m, k))})"
            bv = f"{em.arr(b)}.reshape({em.tuple_expr((batch, k, n_))})"
        elif _prod(ba_) == 1:
            batch = _prod(bb_)
            av = f"{em.arr(a)}.reshape({em.tuple_expr((1, m, k))})"
            bv = f"{em.arr(b)}.reshape({em.tuple_expr((batch, k, n_))})"
        else:
            raise Unlowerable(n, f"MatMul batch broadcast {sa} x {sb}")
        yv = (batch, m, n_)
    return av, bv, yv


@lowering("MatMul", supports=lambda n: _is_float(n.inputs[0], n.inputs[1], n.outputs[0])
          and n.inputs[0].dtype == n.inputs[1].dtype)
def lower_matmul(em: Emitter, n: Node) -> None:
    av, bv, yshape = _matmul_views(em, n)
    y = em.out(n.outputs[0])
    em.call(f"_gemm.matmul3d({av}, {bv}, {y}.reshape({em.tuple_expr(yshape)}))")


#: Fused activations (``activation`` attribute of MatMulBias / FusedConv) -> the kernels' codes
#: (``kernels/cpu/epilogue.py``; Gelu is the erf form).
ACT_CODES = {"": 0, "Relu": 1, "Gelu": 2, "Sigmoid": 3, "Tanh": 4, "LeakyRelu": 5, "Clip": 6}


@lowering("MatMulBias", domain="jitort", supports=lambda n: _is_float(n.inputs[0], n.inputs[1])
          and n.attrs.get("activation", "") in ACT_CODES)
def lower_matmul_bias(em: Emitter, n: Node) -> None:
    av, bv, yshape = _matmul_views(em, n)
    bias = em.arr(n.inputs[2])
    y = em.out(n.outputs[0])
    act, alpha, beta = act_args(n)
    dt = tname(n.outputs[0].dtype)
    em.call(f"_gemm.matmul3d_bias_act({av}, {bv}, {bias}, {y}.reshape({em.tuple_expr(yshape)}), "
            f"{act}, {float_literal(alpha, dt)}, {float_literal(beta, dt)})")


@lowering("Gemm", supports=lambda n: _is_float(n.inputs[0], n.inputs[1], n.outputs[0])
          and all(v is None or v.dtype == n.inputs[0].dtype for v in n.inputs))
def lower_gemm(em: Emitter, n: Node) -> None:
    a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
    c = n.input(2)
    m, nn = em.shape(y)
    dt = tname(y.dtype)
    if c is not None:
        sc = em.shape(c)
        c2 = {0: (1, 1), 1: (1, sc[0] if sc else 1)}.get(len(sc), tuple(sc))
        cv = f"{em.arr(c)}.reshape({em.tuple_expr(c2)})"
    else:
        cv = f"np.zeros((1, 1), {dt})"
    yv = em.out(y)
    em.call(f"_gemm.gemm({em.arr(a)}, {em.arr(b)}, {cv}, {yv}, {dt}({float(n.attrs.get('alpha', 1.0))!r}), "
            f"{dt}({float(n.attrs.get('beta', 1.0))!r}), {bool(n.attrs.get('transA', 0))}, "
            f"{bool(n.attrs.get('transB', 0))}, {c is not None})")


# --- data movement -----------------------------------------------------------------------------

@lowering("Transpose", supports=_plain)
def lower_transpose(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    perm = list(n.attrs.get("perm", list(range(rank))[::-1]))
    # merge runs of input axes that stay adjacent and in order
    runs: list[list[int]] = []
    for p in perm:
        if runs and runs[-1][-1] + 1 == p:
            runs[-1].append(p)
        else:
            runs.append([p])
    order = sorted(range(len(runs)), key=lambda i: runs[i][0])  # run index by input position
    in_shape = [_prod([shape[a] for a in runs[i]]) for i in order]
    out_shape = [_prod([shape[a] for a in r]) for r in runs]
    if len(runs) == 1:
        yv = em.out(y)
        em.call(f"_data.copy_flat({em.arr(x)}.reshape(-1), {yv}.reshape(-1))")
        return
    r = len(runs)
    pos = {i: j for j, i in enumerate(order)}  # run i sits at input position pos[i]
    idx_in = ["" for _ in range(r)]
    for out_axis, run_i in enumerate(range(r)):
        idx_in[pos[run_i]] = f"i{out_axis}"
    lines = ["@njit(cache=True, error_model='numpy')", "def __KNAME__(y, x):"]
    ind = "    "
    for k in range(r):
        lines.append(f"{ind}for i{k} in range(y.shape[{k}]):")
        ind += "    "
    lines.append(f"{ind}y[{', '.join(f'i{k}' for k in range(r))}] = x[{', '.join(idx_in)}]")
    kname = em.kernel(f"k_transpose{r}", "\n".join(lines) + "\n")
    yv = em.out(y)
    em.call(f"{kname}({yv}.reshape({em.tuple_expr(out_shape)}), "
            f"{em.arr(x)}.reshape({em.tuple_expr(in_shape)}))")


@lowering("Gather", supports=lambda n: _plain(n)
          and np.dtype(n.inputs[1].dtype) in (np.dtype(np.int32), np.dtype(np.int64)))
def lower_gather(em: Emitter, n: Node) -> None:
    data, idx, y = n.inputs[0], n.inputs[1], n.outputs[0]
    shape = em.shape(data)
    if not shape:
        raise Unlowerable(n, "Gather on a scalar")
    axis = _axis(n.attrs.get("axis", 0), len(shape))
    o, a, i = _3d(shape, axis)
    k = _prod(em.shape(idx))
    yv = em.out(y)
    # decided once per node (memo) so the generated text does not change with the shapes
    if ("par", id(n)) not in em.memo:
        em.memo[("par", id(n))] = concrete(o * k * i) >= (1 << 16)  # once, not a guard
    par = "_par" if em.memo[("par", id(n))] else ""
    em.call(f"_data.gather3{par}({em.arr(data)}.reshape({em.tuple_expr((o, a, i))}), "
            f"{em.arr(idx)}.reshape({em.tuple_expr((k,))}), {yv}.reshape({em.tuple_expr((o, k, i))}))")


@lowering("Concat", supports=_plain)
def lower_concat(em: Emitter, n: Node) -> None:
    y = n.outputs[0]
    shape = em.shape(y)
    axis = _axis(n.attrs["axis"], len(shape))
    o, total, i = _3d(shape, axis)
    yv = em.out(y)
    y3 = f"{yv}.reshape({em.tuple_expr((o, total, i))})"
    off = 0
    for v in n.inputs:
        if v is None:
            continue
        a = em.shape(v)[axis]
        if a and em.embed.get(id(v), (None,))[0] is not y:  # embedded inputs are already there
            em.call(f"_data.copy3_into({em.arr(v)}.reshape({em.tuple_expr((o, a, i))}), {y3}, "
                    f"{em.dim(off)})")
        else:
            em.arr(v)  # record the read (keeps the shared buffer alive)
        off += a


@lowering("Split", supports=_plain)
def lower_split(em: Emitter, n: Node) -> None:
    x = n.inputs[0]
    shape = em.shape(x)
    axis = _axis(n.attrs.get("axis", 0), len(shape))
    o, total, i = _3d(shape, axis)
    x3 = f"{em.arr(x)}.reshape({em.tuple_expr((o, total, i))})"
    off = 0
    for v in n.outputs:
        a = em.shape(v)[axis]
        yv = em.out(v)
        em.call(f"_data.copy3_from({x3}, {yv}.reshape({em.tuple_expr((o, a, i))}), {em.dim(off)})")
        off += a


def slice_start_step(em, n: Node, shape) -> tuple[list, list]:
    """Per-axis start (clamped as ONNX says) and step of a Slice (opset >= 10) over ``shape``;
    the ends are implied by the inferred output shape. Shared by the CPU and CUDA lowerings."""
    vals = [None if v is None else (v.const if v.is_const else em.hostvals.get(id(v)))
            for v in n.inputs]
    if any(v is not None and vals[j] is None for j, v in enumerate(n.inputs[1:], 1)):
        raise Unlowerable(n, "Slice parameters are not known ahead")
    rank = len(shape)
    starts = vals[1].astype(np.int64).tolist()
    axes = vals[3].astype(np.int64).tolist() if len(vals) > 3 and vals[3] is not None else list(range(len(starts)))
    steps = vals[4].astype(np.int64).tolist() if len(vals) > 4 and vals[4] is not None else [1] * len(starts)
    start = [0] * rank
    step = [1] * rank
    for s, ax, st in zip(starts, axes, steps):
        ax = _axis(ax, rank)
        dim = shape[ax]
        if st == 0:
            raise Unlowerable(n, "Slice step 0")
        if s < 0:
            s += dim
        s = min(max(s, 0), dim) if st > 0 else min(max(s, -1), dim - 1)
        start[ax], step[ax] = s, st
    return start, step


@lowering("Slice", supports=lambda n: _plain(n) and n.since_version >= 10)
def lower_slice(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    start, step = slice_start_step(em, n, shape)
    out_shape = em.shape(y)
    sliced = [k for k in range(rank) if (start[k], step[k]) != (0, 1) or out_shape[k] != shape[k]]
    lines = ["@njit(cache=True, error_model='numpy')",
             f"def __KNAME__(y, x{''.join(f', s{k}, t{k}' for k in sliced)}):"]
    ind = "    "
    for k in range(rank):
        lines.append(f"{ind}for i{k} in range(y.shape[{k}]):")
        ind += "    "
    ix = ", ".join(f"s{k} + i{k} * t{k}" if k in sliced else f"i{k}" for k in range(rank))
    lines.append(f"{ind}y[{', '.join(f'i{k}' for k in range(rank))}{',' if rank == 1 else ''}] = x[{ix}{',' if rank == 1 else ''}]")
    if rank == 0:
        raise Unlowerable(n, "Slice of a scalar")
    kname = em.kernel(f"k_slice{rank}", "\n".join(lines) + "\n")
    args = "".join(f", {em.dim(start[k])}, {em.dim(step[k])}" for k in sliced)
    yv = em.out(y)
    em.call(f"{kname}({yv}, {em.arr(x)}{args})")


# --- normalization and softmax -----------------------------------------------------------------

@lowering("Softmax", "LogSoftmax", supports=_float_io)
def lower_softmax(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if rank == 0:
        raise Unlowerable(n, "Softmax of a scalar")
    if n.since_version >= 13:
        axis = _axis(n.attrs.get("axis", -1), rank)
        dims = _3d(shape, axis)
    else:
        axis = _axis(n.attrs.get("axis", 1), rank)
        dims = (_prod(shape[:axis]), _prod(shape[axis:]), 1)
    fn = "softmax3d" if n.op_type == "Softmax" else "logsoftmax3d"
    t = em.tuple_expr(dims)
    yv = em.out(y)
    em.call(f"_softmax.{fn}({em.arr(x)}.reshape({t}), {yv}.reshape({t}))")


def _ln_ok(n: Node) -> bool:
    return _float_io(n) and len(n.outputs) == 1 and all(
        v is None or v.dtype == n.inputs[0].dtype for v in n.inputs)


@lowering("LayerNormalization", supports=_ln_ok)
def lower_layernorm(em: Emitter, n: Node) -> None:
    x, scale, y = n.inputs[0], n.inputs[1], n.outputs[0]
    bias = n.input(2)
    shape = em.shape(x)
    axis = _axis(n.attrs.get("axis", -1), len(shape))
    outer, inner = _prod(shape[:axis]), _prod(shape[axis:])
    if _prod(em.shape(scale)) != inner or (bias is not None and _prod(em.shape(bias)) != inner):
        raise Unlowerable(n, "LayerNormalization scale/bias broadcast")
    dt = tname(y.dtype)
    t2 = em.tuple_expr((outer, inner))
    t1 = em.tuple_expr((inner,))
    sv = f"{em.arr(scale)}.reshape({t1})"
    bv = f"{em.arr(bias)}.reshape({t1})" if bias is not None else sv
    yv = em.out(y)
    em.call(f"_norm.layernorm2d({em.arr(x)}.reshape({t2}), {sv}, {bv}, {yv}.reshape({t2}), "
            f"{dt}({float(n.attrs.get('epsilon', 1e-5))!r}), {bias is not None})")


@lowering("BatchNormalization", supports=lambda n: _float_io(n) and len(n.outputs) == 1
          and not n.attrs.get("training_mode", 0) and all(_is_float(v) for v in n.inputs[1:5]))
def lower_batchnorm(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) < 2 or any(v.dtype != x.dtype for v in n.inputs[1:5]):
        raise Unlowerable(n, "BatchNormalization layout/dtypes")
    t3 = em.tuple_expr((shape[0], shape[1], _prod(shape[2:])))
    p = [em.arr(v) for v in n.inputs[1:5]]
    dt = tname(y.dtype)
    yv = em.out(y)
    em.call(f"_norm.batchnorm3d({em.arr(x)}.reshape({t3}), {', '.join(p)}, {yv}.reshape({t3}), "
            f"{dt}({float(n.attrs.get('epsilon', 1e-5))!r}))")


@lowering("InstanceNormalization", supports=_float_io)
def lower_instnorm(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) < 3 or any(v.dtype != x.dtype for v in n.inputs[1:3]):
        raise Unlowerable(n, "InstanceNormalization layout")
    t3 = em.tuple_expr((shape[0], shape[1], _prod(shape[2:])))
    dt = tname(y.dtype)
    yv = em.out(y)
    em.call(f"_norm.instancenorm3d({em.arr(x)}.reshape({t3}), {em.arr(n.inputs[1])}, "
            f"{em.arr(n.inputs[2])}, {yv}.reshape({t3}), {dt}({float(n.attrs.get('epsilon', 1e-5))!r}))")


# --- reductions --------------------------------------------------------------------------------

REDUCE_KIND = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3, "ReduceProd": 4,
               "ReduceL1": 5, "ReduceL2": 6, "ReduceLogSum": 7, "ReduceLogSumExp": 8,
               "ReduceSumSquare": 9}


def _axes_from_input(n: Node) -> bool:
    return n.since_version >= (13 if n.op_type == "ReduceSum" else 18)


@lowering(*REDUCE_KIND, supports=_float_io)
def lower_reduce(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if _axes_from_input(n):
        av = n.input(1)
        if av is None:
            axes = []
        else:
            val = av.const if av.is_const else em.hostvals.get(id(av))
            if val is None:
                raise Unlowerable(n, "reduction axes not known ahead")
            axes = val.astype(np.int64).reshape(-1).tolist()
    else:
        axes = list(n.attrs.get("axes", []))
    if not axes:
        if n.attrs.get("noop_with_empty_axes", 0):
            raise Unlowerable(n, "no-op reduction")
        axes = list(range(rank))
    axes = sorted({_axis(a, rank) for a in axes})
    if axes != list(range(axes[0], axes[-1] + 1)):
        raise Unlowerable(n, f"non-contiguous reduction axes {axes}")
    o, r, i = _prod(shape[:axes[0]]), _prod(shape[axes[0]:axes[-1] + 1]), _prod(shape[axes[-1] + 1:])
    yv = em.out(y)
    em.call(f"_reduce.reduce3d({em.arr(x)}.reshape({em.tuple_expr((o, r, i))}), "
            f"{yv}.reshape({em.tuple_expr((o, i))}), {REDUCE_KIND[n.op_type]})")


# --- convolution and pooling -------------------------------------------------------------------

def _conv_pads(n: Node, in_sp, k_sp, strides, dil, out_sp) -> list[int]:
    """Begin pads per spatial axis, resolving auto_pad."""
    auto = n.attrs.get("auto_pad", "NOTSET")
    r = len(in_sp)
    if auto in ("NOTSET", ""):
        pads = list(n.attrs.get("pads", [0] * (2 * r)))
        return pads[:r]
    if auto == "VALID":
        return [0] * r
    begins = []
    for ax in range(r):
        total = max(0, (out_sp[ax] - 1) * strides[ax] + (k_sp[ax] - 1) * dil[ax] + 1 - in_sp[ax])
        begins.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
    return begins


def _conv_ok(n: Node) -> bool:
    return _is_float(n.inputs[0], n.inputs[1], n.outputs[0]) and n.inputs[1].dtype == n.inputs[0].dtype \
        and (n.input(2) is None or n.inputs[2].dtype == n.inputs[0].dtype)


def _conv_geometry(em, n: Node):
    """Shapes as the 2-D kernels take them (a 1-D conv gets height 1), strides, dilations, begin
    pads and group of a Conv or FusedConv. Shared by the CPU and CUDA lowerings."""
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    xs, ws, ys = em.shape(x), em.shape(w), em.shape(y)
    if len(xs) not in (3, 4):
        raise Unlowerable(n, f"{len(xs) - 2}-D convolution")
    sp = len(xs) - 2
    strides = list(n.attrs.get("strides", [1] * sp))
    dil = list(n.attrs.get("dilations", [1] * sp))
    pads = _conv_pads(n, xs[2:], ws[2:], strides, dil, ys[2:])
    if sp == 1:  # 1-D as 2-D with height 1
        xs, ws, ys = xs[:2] + (1,) + xs[2:], ws[:2] + (1,) + ws[2:], ys[:2] + (1,) + ys[2:]
        strides, dil, pads = [1] + strides, [1] + dil, [0] + pads
    return tuple(xs), tuple(ws), tuple(ys), strides, dil, pads, int(n.attrs.get("group", 1))


def act_args(n: Node) -> tuple[int, float, float]:
    """(code, alpha, beta) of the fused activation of a MatMulBias or FusedConv node."""
    from ..interpreter.jitort_ops import fused_activation
    name, params = fused_activation(n)
    return ACT_CODES[name], params[0], params[1]


def float_literal(v: float, dt: str = "np.float64") -> str:
    """``v`` as generated code (``inf``/``nan`` have no Python literal)."""
    if math.isnan(v):
        return f"{dt}(np.nan)"
    if math.isinf(v):
        return f"{dt}({'-' if v < 0 else ''}np.inf)"
    return f"{dt}({v!r})"


def _use_winograd(em: Emitter, n: Node, xs4, ws4, ys4, strides, dil, group) -> int:
    """Winograd's output tile (2 or 4) for a 3x3 stride-1 convolution with constant weights on
    a plane where it wins (``kernels.cpu.winograd.winograd_wins`` / ``winograd_tile``), else 0.
    Decided once per node from the first shape, not guarded: the generated text must not
    change with the shapes (the kernel is correct for every shape, only its speed depends on
    them)."""
    key = ("winograd", id(n))
    if key not in em.memo:
        from jitort.kernels.cpu.winograd import winograd_tile, winograd_wins
        w = n.inputs[1]
        dims = [concrete(d) for d in (xs4[1], ys4[1], ys4[2], ys4[3])]
        ok = (w.is_const and tuple(ws4[2:]) == (3, 3) and list(strides) == [1, 1]
              and list(dil) == [1, 1] and group == 1
              and np.dtype(w.dtype) in (np.float32, np.float64) and winograd_wins(*dims))
        em.memo[key] = winograd_tile(*dims) if ok else 0
    return em.memo[key]


def _lower_conv2d(em: Emitter, n: Node, residual=None, act=(0, 0.0, 0.0)) -> None:
    """Emit one call of the CPU conv kernel for a Conv or FusedConv: plain ``conv2d``, or the
    variant applying bias (+ residual) + activation to each output block while it is in cache.
    The residual is read at this step and the output is a fresh buffer (never an in-place reuse,
    see ``Emitter.out``), so their lifetimes intersect and the planner never overlaps them:
    ``conv2d_bias_add_act`` requires that ``res`` not alias ``out``."""
    from jitort.kernels.cpu.conv import conv2d_scratch_elems
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    b = n.input(2)
    xs4, ws4, ys4, strides, dil, pads, group = _conv_geometry(em, n)
    c, kh, kw = xs4[1], ws4[2], ws4[3]
    oh, ow = ys4[2], ys4[3]
    # Winograd reads its own transformed weights: neither the im2col scratch nor the raw
    # weights are placed for it
    tile = _use_winograd(em, n, xs4, ws4, ys4, strides, dil, group)
    if not tile:
        col = em.scratch(max(1, conv2d_scratch_elems(c, kh, kw, oh, ow, group, em.threads)),
                         y.dtype)
    xv = f"{em.arr(x)}.reshape({em.tuple_expr(xs4)})"
    wv = None if tile else f"{em.arr(w)}.reshape({em.tuple_expr(ws4)})"
    bv = em.arr(b) if b is not None else f"np.zeros({ws4[0]}, {tname(y.dtype)})"
    rv = None if residual is None else f"{em.arr(residual)}.reshape({em.tuple_expr(ys4)}), "
    yv = em.out(y)
    if (residual is not None and id(y) not in em.embed  # (a Concat slice: its own bytes)
            and em.root.get(id(residual), -1) == em.root.get(id(y))):
        raise Unlowerable(n, "conv residual shares the output's buffer")  # never planned so
    y4 = f"{yv}.reshape({em.tuple_expr(ys4)})"
    code, alpha, beta = act
    epi = f"{code}, {float_literal(alpha)}, {float_literal(beta)}"
    if tile:
        from jitort.kernels.cpu.winograd import winograd_scratch_elems, winograd_weights
        u = em.derived_const(("winograd", tile, id(w.const)),
                             lambda: winograd_weights(w.const.reshape(ws4), tile))
        scr = em.scratch(winograd_scratch_elems(c, ws4[0], oh, ow, em.threads, tile), y.dtype)
        em.call(f"_wino.conv3x3_winograd({xv}, {u}, {bv}, {rv or y4 + ', '}{y4}, {scr}, "
                f"{em.dim(pads[0])}, {em.dim(pads[1])}, {b is not None}, {residual is not None}, {epi})")
        return
    args = ", ".join(em.dim(v) for v in (strides[0], strides[1], pads[0], pads[1], dil[0], dil[1]))
    if n.op_type == "Conv":
        em.call(f"_conv.conv2d({xv}, {wv}, {bv}, {y4}, {col}, {args}, {group}, {b is not None})")
        return
    if residual is None:
        em.call(f"_conv.conv2d_bias_act({xv}, {wv}, {bv}, {y4}, {col}, {args}, {group}, "
                f"{b is not None}, {epi})")
    else:
        em.call(f"_conv.conv2d_bias_add_act({xv}, {wv}, {bv}, {rv}{y4}, {col}, {args}, {group}, "
                f"{b is not None}, {epi})")


@lowering("Conv", supports=_conv_ok)
def lower_conv(em: Emitter, n: Node) -> None:
    _lower_conv2d(em, n)


def _fused_conv_ok(n: Node) -> bool:
    r = n.input(3)
    return (_conv_ok(n) and n.attrs.get("activation", "") in ACT_CODES
            and (r is None or (r.dtype == n.inputs[0].dtype and r.dtype == n.outputs[0].dtype)))


@lowering("FusedConv", domain="jitort", supports=_fused_conv_ok)
def lower_fused_conv(em: Emitter, n: Node) -> None:
    """``act(conv(x, W) + B [+ residual])`` (see ``passes.patterns.fuse_epilogues``); the shape
    pass has checked that the residual has the output's shape."""
    _lower_conv2d(em, n, n.input(3), act_args(n))


def _pool_ok(n: Node) -> bool:
    return _float_io(n) and len([o for o in n.outputs if o is not None]) == 1


def _pool_geometry(em: Emitter, n: Node):
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = em.shape(x), em.shape(y)
    if len(xs) != 4:
        raise Unlowerable(n, f"{len(xs) - 2}-D pooling")
    k = list(n.attrs["kernel_shape"])
    strides = list(n.attrs.get("strides", [1, 1]))
    dil = list(n.attrs.get("dilations", [1, 1]))
    pads_all = list(n.attrs.get("pads", [0, 0, 0, 0]))
    pads = _conv_pads(n, xs[2:], k, strides, dil, ys[2:])
    if n.attrs.get("auto_pad", "NOTSET") in ("NOTSET", ""):
        ends = pads_all[2:4]
    else:
        ends = [max(0, (ys[2 + a] - 1) * strides[a] + (k[a] - 1) * dil[a] + 1 - xs[2 + a]) - pads[a]
                for a in range(2)]
    return x, y, k, strides, dil, pads, ends


@lowering("MaxPool", supports=lambda n: _pool_ok(n) and n.attrs.get("storage_order", 0) == 0)
def lower_maxpool(em: Emitter, n: Node) -> None:
    x, y, k, s, dil, pads, _ = _pool_geometry(em, n)
    yv = em.out(y)
    args = ", ".join(em.dim(v) for v in (k[0], k[1], s[0], s[1], pads[0], pads[1], dil[0], dil[1]))
    em.call(f"_pool.maxpool2d({em.arr(x)}, {yv}, {args})")


@lowering("AveragePool", supports=lambda n: _pool_ok(n) and list(n.attrs.get("dilations", [1, 1])) == [1, 1])
def lower_avgpool(em: Emitter, n: Node) -> None:
    x, y, k, s, dil, pads, ends = _pool_geometry(em, n)
    yv = em.out(y)
    args = ", ".join(em.dim(v) for v in (k[0], k[1], s[0], s[1], pads[0], pads[1]))
    em.call(f"_pool.avgpool2d({em.arr(x)}, {yv}, {args}, "
            f"{bool(n.attrs.get('count_include_pad', 0))}, {em.dim(ends[0])}, {em.dim(ends[1])})")


@lowering("GlobalAveragePool", "GlobalMaxPool", supports=_float_io)
def lower_global_pool(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs = em.shape(x)
    if len(xs) < 3:
        raise Unlowerable(n, "global pooling needs N, C and spatial dims")
    fn = "global_avgpool" if n.op_type == "GlobalAveragePool" else "global_maxpool"
    yv = em.out(y)
    em.call(f"_pool.{fn}({em.arr(x)}.reshape({em.tuple_expr((xs[0], xs[1], _prod(xs[2:])))}), "
            f"{yv}.reshape({em.tuple_expr((xs[0], xs[1]))}))")


@lowering("LRN", supports=_float_io)
def lower_lrn(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs = em.shape(x)
    t3 = em.tuple_expr((xs[0], xs[1], _prod(xs[2:])))
    dt = tname(y.dtype)
    a = n.attrs
    yv = em.out(y)
    em.call(f"_pool.lrn({em.arr(x)}.reshape({t3}), {yv}.reshape({t3}), {int(a['size'])}, "
            f"{dt}({float(a.get('alpha', 1e-4))!r}), {dt}({float(a.get('beta', 0.75))!r}), "
            f"{dt}({float(a.get('bias', 1.0))!r}))")

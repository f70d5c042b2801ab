"""numpy fast paths for the common ops, shape-computation ops first.

Each builder reads attributes once and returns a closure ``run(inputs) -> [arrays]``. Results
match onnx.reference bit for bit on the dtypes they accept (see :mod:`.registry` for the
deferral rules). Outputs may be views of inputs (Reshape, Squeeze, Identity...), as in
onnx.reference: never write into an interpreter output in place.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import helper

from .. import ir
from .registry import Defer, fast, kind, std_or_defer

_asarray = np.asarray
_ndarray = np.ndarray


def _ints(a) -> list[int]:
    """A 0-d or 1-d integer tensor (or list attribute) as python ints."""
    if isinstance(a, _ndarray):
        if kind(a.dtype) not in "iu":
            raise Defer
        return a.reshape(-1).tolist()
    return [int(v) for v in a]


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _axes(axes: list[int], rank: int) -> list[int]:
    out = [_axis(a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axes {axes}")
    return out


def _in(node: ir.Node, i: int) -> bool:
    """Whether optional input ``i`` is present."""
    return node.input(i) is not None


# ---- shape-computation ops -----------------------------------------------------------------

@fast("Shape")
def _shape(node):
    start, end = node.attr("start", 0), node.attr("end")
    if start == 0 and end is None:
        return lambda a: [np.array(a[0].shape, np.int64)]

    def run(a):
        shape = a[0].shape
        r = len(shape)
        s = max(0, min(r, start + r if start < 0 else start))
        e = r if end is None else max(0, min(r, end + r if end < 0 else end))
        return [np.array(shape[s:e], np.int64)]
    return run


@fast("Size")
def _size(node):
    return lambda a: [np.array(a[0].size, np.int64)]


@fast("Identity")
def _identity(node):
    def run(a):
        if not isinstance(a[0], _ndarray):
            raise Defer  # sequences / optionals
        return [a[0]]
    return run


def _indexed(a, same_rank: bool = False) -> tuple:
    """(data, indices) of a Gather-like op; Defer unless the indices are integers (of the
    data's rank, with ``same_rank``)."""
    x, idx = a[0], a[1]
    if kind(idx.dtype) not in "iu" or same_rank and idx.ndim != x.ndim:
        raise Defer
    return x, idx


@fast("Gather")
def _gather(node):
    axis = node.attr("axis", 0)

    def run(a):
        x, idx = _indexed(a)
        return [_asarray(np.take(x, idx, axis=_axis(axis, x.ndim)))]
    return run


@fast("GatherElements", since=11)
def _gather_elements(node):
    axis = node.attr("axis", 0)

    def run(a):
        x, idx = _indexed(a, same_rank=True)
        ax = _axis(axis, x.ndim)
        grid = list(np.ogrid[tuple(slice(0, d) for d in idx.shape)]) if idx.ndim else []
        grid[ax] = idx
        return [_asarray(x[tuple(grid)])]
    return run


@fast("GatherND", since=11)
def _gather_nd(node):
    b = node.attr("batch_dims", 0)

    def run(a):
        x, idx = _indexed(a)
        if idx.ndim < 1 or idx.ndim <= b or tuple(idx.shape[:b]) != tuple(x.shape[:b]):
            raise Defer
        k = idx.shape[-1]
        if k == 0 or b + k > x.ndim:
            raise Defer
        if idx.size == 0:  # no index (an empty batch included, which onnx.reference fails)
            return [np.empty(idx.shape[:-1] + x.shape[b + k:], x.dtype)]
        dims = x.shape[b:b + k]
        nb = math.prod(x.shape[:b])
        ix = idx.reshape(nb, -1, k)
        flat = None  # row-major index into the k indexed dims, one column at a time
        for j in range(k):
            c = ix[..., j].astype(np.int64)
            lo, hi = int(c.min()), int(c.max())
            if lo < -dims[j] or hi >= dims[j]:
                raise Defer  # out of range: onnx.reference reports it
            if lo < 0:
                c = np.where(c < 0, c + dims[j], c)
            flat = c if flat is None else flat * dims[j] + c
        n = math.prod(dims)
        if nb > 1:
            flat = flat + (np.arange(nb, dtype=np.int64) * n)[:, None]
        out = x.reshape(nb * n, -1).take(flat.reshape(-1), axis=0)
        return [out.reshape(idx.shape[:-1] + x.shape[b + k:])]
    return run


@fast("Concat", since=4)
def _concat(node):
    axis = node.attr("axis")

    def run(a):
        dt = a[0].dtype
        for x in a:
            if x.dtype != dt:
                raise Defer
        return [np.concatenate(a, axis=_axis(axis, a[0].ndim))]
    return run


def _unsqueeze(x, axes):
    rank = x.ndim + len(axes)
    shape = list(x.shape)
    for ax in sorted(_axes(axes, rank)):
        shape.insert(ax, 1)
    return x.reshape(shape)


def _squeeze(x, axes):
    if axes is None or len(axes) == 0:
        return x.reshape([d for d in x.shape if d != 1])
    axes = _axes(axes, x.ndim)
    for ax in axes:
        if x.shape[ax] != 1:
            raise ValueError(f"cannot squeeze axis {ax} of shape {x.shape}")
    return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])


@fast("Unsqueeze")
def _unsqueeze_attr(node):
    axes = list(node.attr("axes", []))
    return lambda a: [_unsqueeze(a[0], axes)]


@fast("Unsqueeze", since=13)
def _unsqueeze_input(node):
    return lambda a: [_unsqueeze(a[0], _ints(a[1]))]


@fast("Squeeze")
def _squeeze_attr(node):
    axes = node.attr("axes")
    return lambda a: [_squeeze(a[0], axes)]


@fast("Squeeze", since=13)
def _squeeze_input(node):
    def run(a):
        return [_squeeze(a[0], None if len(a) < 2 or a[1] is None else _ints(a[1]))]
    return run


@fast("Reshape", since=5)
def _reshape(node):
    allowzero = node.attr("allowzero", 0) if node.since_version >= 14 else 0

    def run(a):
        x = a[0]
        shape = _ints(a[1])
        if not allowzero and 0 in shape:
            shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        if shape.count(-1) > 1 or any(d < -1 for d in shape):
            raise ValueError(f"invalid Reshape target {shape}")
        return [x.reshape(shape)]
    return run


def flat2d(x, axis: int):
    """``x`` as the 2-D [prod(shape[:axis]), prod(shape[axis:])] of Flatten (and of the
    softmaxes before opset 13); ``axis`` in [-rank, rank]."""
    ax = axis + x.ndim if axis < 0 else axis
    if not 0 <= ax <= x.ndim:
        raise ValueError(f"Flatten axis {axis} out of range for rank {x.ndim}")
    return x.reshape(math.prod(x.shape[:ax]), math.prod(x.shape[ax:]))


@fast("Flatten")
def _flatten(node):
    axis = node.attr("axis", 1)
    return lambda a: [flat2d(a[0], axis)]


@fast("Cast", since=6)
def _cast(node):
    try:
        to = np.dtype(helper.tensor_dtype_to_np_dtype(node.attr("to")))
    except Exception:
        return None
    if kind(to) == "-":
        return None  # strings, float8, int4, bfloat16: the reference knows their rounding rules

    def run(a):
        x = a[0]
        std_or_defer(x)
        return [x.astype(to)]
    return run


@fast("Slice")
def _slice_attr(node):
    starts, ends, axes = node.attr("starts"), node.attr("ends"), node.attr("axes")
    if starts is None or ends is None:
        return None
    return lambda a: [_slice(a[0], list(starts), list(ends), axes and list(axes), None)]


@fast("Slice", since=10)
def _slice_input(node):
    def run(a):
        axes = _ints(a[3]) if len(a) > 3 and a[3] is not None else None
        steps = _ints(a[4]) if len(a) > 4 and a[4] is not None else None
        return [_slice(a[0], _ints(a[1]), _ints(a[2]), axes, steps)]
    return run


def _slice(x, starts, ends, axes, steps):
    """ONNX Slice: negative starts/ends count from the end, then clamp to [0, dim] for a
    positive step and to [0, dim-1] (start) / [-1, dim-1] (end) for a negative one."""
    n = len(starts)
    if len(ends) != n or (axes is not None and len(axes) != n) or (steps is not None
                                                                   and len(steps) != n):
        raise ValueError("Slice: starts, ends, axes and steps differ in length")
    axes = _axes(axes, x.ndim) if axes is not None else list(range(n))
    index = [slice(None)] * x.ndim
    for i, ax in enumerate(axes):
        dim = x.shape[ax]
        step = 1 if steps is None else steps[i]
        s, e = starts[i], ends[i]
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if step > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            index[ax] = slice(s, e, step)
        elif step < 0:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
            index[ax] = slice(s, None if e < 0 else e, step)
        else:
            raise ValueError("Slice step cannot be 0")
    return np.ascontiguousarray(x[tuple(index)])


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@fast("Pad", since=11)
def _pad(node):
    """Pad with the pads as an input: negative pads crop (the reference fails on them), then
    numpy pads."""
    mode = node.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in _PAD_MODES:
        return None

    def run(a):
        x, pads = a[0], _ints(a[1])
        axes = _axes(_ints(a[3]), x.ndim) if len(a) > 3 and a[3] is not None else \
            list(range(x.ndim))
        if len(pads) != 2 * len(axes):
            raise ValueError(f"Pad: {len(pads)} pads for {len(axes)} axes")
        begin, end = [0] * x.ndim, [0] * x.ndim
        for i, ax in enumerate(axes):
            begin[ax], end[ax] = pads[i], pads[i + len(axes)]
        if min(begin + end) < 0:  # crop first, then pad what is left (onnxruntime's order)
            x = x[tuple(slice(-min(b, 0), d + min(e, 0)) for b, e, d in zip(begin, end, x.shape))]
        width = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
        if mode == "constant":
            v = a[2] if len(a) > 2 and a[2] is not None and a[2].size else 0
            return [np.pad(x, width, mode="constant", constant_values=np.asarray(v).item())]
        if x.size == 0:
            raise Defer
        return [np.pad(x, width, mode=_PAD_MODES[mode])]
    return run


@fast("Range", since=11)
def _range(node):
    def run(a):
        start, limit, delta = a
        dt = start.dtype
        if kind(dt) not in "iuf" or dt == np.float16:
            raise Defer  # float16/bfloat16 go through stash_type in the reference
        return [np.arange(start.item(), limit.item(), delta.item()).astype(dt)]
    return run


@fast("ConstantOfShape", since=9)
def _constant_of_shape(node):
    value = node.attr("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if value.size != 1:
        return None
    fill, dt = value.reshape(-1)[0], value.dtype

    def run(a):
        return [np.full(_ints(a[0]), fill, dtype=dt)]
    return run


@fast("Expand", since=8)
def _expand(node):
    def run(a):
        x = a[0]
        out = np.broadcast_shapes(x.shape, tuple(_ints(a[1])))
        return [np.array(np.broadcast_to(x, out))]
    return run


@fast("Transpose")
def _transpose(node):
    perm = node.attr("perm")

    def run(a):
        x = a[0]
        p = list(range(x.ndim))[::-1] if perm is None else perm
        return [np.ascontiguousarray(x.transpose(p))]
    return run


@fast("Tile", since=6)
def _tile(node):
    def run(a):
        x, reps = a[0], _ints(a[1])
        if len(reps) != x.ndim:
            raise ValueError(f"Tile: {len(reps)} repeats for rank {x.ndim}")
        return [np.tile(x, reps)]
    return run


@fast("Split", since=2)
def _split(node):
    axis = node.attr("axis", 0)
    n_out = len(node.outputs)
    split_attr = node.attr("split") if node.since_version < 13 else None
    num_outputs = node.attr("num_outputs") if node.since_version >= 18 else None

    def run(a):
        x = a[0]
        ax = _axis(axis, x.ndim)
        dim = x.shape[ax]
        if len(a) > 1 and a[1] is not None:
            sizes = _ints(a[1])
        elif split_attr:
            sizes = list(split_attr)
        else:
            n = num_outputs or n_out
            chunk = -(-dim // n)
            sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
            if sizes[-1] <= 0 and dim:
                raise Defer
        if len(sizes) != n_out or sum(sizes) != dim or min(sizes) < 0:
            raise ValueError(f"Split sizes {sizes} do not cover dim {dim} in {n_out} outputs")
        index = [slice(None)] * x.ndim
        outs, pos = [], 0
        for s in sizes:
            index[ax] = slice(pos, pos + s)
            outs.append(np.ascontiguousarray(x[tuple(index)]))
            pos += s
        return outs
    return run


# ---- elementwise ---------------------------------------------------------------------------

#: Above this many elements a one-element operand is worth special-casing: numpy's loops with a
#: broadcast (stride 0) operand run ~20x slower than its contiguous SIMD loops here (And of a
#: 0-d True with gpt2's (8, 1, 256, 256) mask: 0.5-0.8 ms vs 0.02 ms for two full arrays).
_BIG = 1 << 12


def _logical_with_constant(ufunc, x, y):
    """And / Or of a one-element operand with a big array (which must not be broadcast
    itself): the result is the array itself (outputs may alias inputs, see the module
    docstring), all True or all False; None otherwise."""
    if x.size == 1 and y.size >= _BIG and x.ndim <= y.ndim:
        c, big = bool(x.reshape(-1)[0]), y
    elif y.size == 1 and x.size >= _BIG and y.ndim <= x.ndim:
        c, big = bool(y.reshape(-1)[0]), x
    else:
        return None
    if (ufunc is np.logical_and) == c:  # And True / Or False: the array itself
        return big.astype(np.bool_, copy=False)
    return np.full(big.shape, c, np.bool_)  # And False / Or True


_COMPARE = (np.equal, np.less, np.greater, np.less_equal, np.greater_equal)
_NARROW = (np.int8, np.int16, np.int32)


def _narrow_ints(x, y):
    """Integer operands of a comparison that broadcasts them to a much larger result, cast
    to the narrowest signed type holding both (the answer is the same; numpy compares int8
    ~6x faster than int64 here: gpt2's (8,1,256,1) == (8,1,1,256) mask 0.10 vs 0.62 ms).
    None when not worth it or nothing narrower fits."""
    if kind(x.dtype) not in "iu" or x.size == 0 or y.size == 0:
        return None
    try:
        out = math.prod(np.broadcast_shapes(x.shape, y.shape))
    except ValueError:
        return None  # numpy reports it
    if out < _BIG or out < 8 * (x.size + y.size):
        return None  # scanning the operands for their range would cost what it saves
    lo = min(int(x.min()), int(y.min()))
    hi = max(int(x.max()), int(y.max()))
    for t in _NARROW:
        if t().itemsize >= x.dtype.itemsize:
            return None
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return x.astype(t), y.astype(t)
    return None


def _binary(ufunc, kinds="biuf"):
    compare = ufunc in _COMPARE

    def build(node):
        def run(a):
            x, y = a[0], a[1]
            if x.dtype != y.dtype or kind(x.dtype) not in kinds:
                raise Defer
            if ufunc is np.logical_and or ufunc is np.logical_or:
                r = _logical_with_constant(ufunc, x, y)
                if r is not None:
                    return [r]
            elif compare:
                narrow = _narrow_ints(x, y)
                if narrow is not None:
                    x, y = narrow
            return [_asarray(ufunc(x, y))]
        return run
    return build


fast("Add", since=7)(_binary(np.add, "iuf"))
fast("Sub", since=7)(_binary(np.subtract, "iuf"))
fast("Mul", since=7)(_binary(np.multiply, "iuf"))
fast("Equal", since=7)(_binary(np.equal))
fast("Less", since=7)(_binary(np.less, "iuf"))
fast("Greater", since=7)(_binary(np.greater, "iuf"))
fast("LessOrEqual", since=12)(_binary(np.less_equal, "iuf"))
fast("GreaterOrEqual", since=12)(_binary(np.greater_equal, "iuf"))
fast("And", since=7)(_binary(np.logical_and, "b"))
fast("Or", since=7)(_binary(np.logical_or, "b"))
fast("Xor", since=7)(_binary(np.logical_xor, "b"))


def _int_div(x, y):
    """Integer division truncating toward zero (C semantics), as ONNX and onnx.reference."""
    q = np.floor_divide(x, y)
    if kind(x.dtype) == "i":
        r = np.remainder(x, y)
        q = q + ((r != 0) & ((x < 0) ^ (y < 0))).astype(q.dtype)
    return q


@fast("Div", since=7)
def _div(node):
    def run(a):
        x, y = a[0], a[1]
        if x.dtype != y.dtype or kind(x.dtype) not in "iuf":
            raise Defer
        if kind(x.dtype) == "f":
            return [_asarray(np.divide(x, y))]
        with np.errstate(divide="ignore"):
            return [_asarray(_int_div(x, y)).astype(x.dtype, copy=False)]
    return run


@fast("Mod", since=10)
def _mod(node):
    ufunc = np.fmod if node.attr("fmod", 0) else np.mod
    return _binary(ufunc, "iuf")(node)


@fast("Pow", since=7)
def _pow(node):
    def run(a):
        x, y = a[0], a[1]
        std_or_defer(x, y)
        with np.errstate(all="ignore"):
            return [_asarray(np.power(x, y)).astype(x.dtype, copy=False)]
    return run


def _unary(fn, kinds="f"):
    def build(node):
        def run(a):
            x = a[0]
            if kind(x.dtype) not in kinds:
                raise Defer
            return [_asarray(fn(x)).astype(x.dtype, copy=False)]
        return run
    return build


def _sigmoid(x):
    e = np.exp(x)
    with np.errstate(all="ignore"):
        return np.where(x > 0, 1.0 / (1.0 + np.exp(-x)), e / (1.0 + e))


_erf = np.vectorize(math.erf, otypes=[np.float64])

fast("Neg", since=6)(_unary(np.negative, "if"))
fast("Abs", since=6)(_unary(np.absolute, "iuf"))
fast("Not")(_unary(np.logical_not, "b"))
fast("Relu", since=6)(_unary(lambda x: np.maximum(x, 0), "if"))
fast("Sigmoid", since=6)(_unary(_sigmoid))
fast("Tanh", since=6)(_unary(np.tanh))
fast("Erf", since=9)(_unary(_erf))


def _quiet(ufunc):
    def f(x):
        with np.errstate(all="ignore"):
            return ufunc(x)
    return f


fast("Sqrt", since=6)(_unary(_quiet(np.sqrt)))
fast("Exp", since=6)(_unary(_quiet(np.exp)))
fast("Log", since=6)(_unary(_quiet(np.log)))


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@fast("Where", since=9)
def _where(node):
    def run(a):
        c, x, y = a
        if c.dtype != np.bool_ or x.dtype != y.dtype:
            raise Defer
        if (x.size == 1 and y.size == 1 and c.size >= _BIG and x.ndim <= c.ndim
                and y.ndim <= c.ndim and x.dtype.itemsize in _UINT):
            # select between two constants bit by bit (exact for every value, NaN and -0.0
            # included): np.where with broadcast scalars runs ~3x slower on a big mask
            u = _UINT[x.dtype.itemsize]
            xb = x.reshape(-1).view(u)[0]
            yb = y.reshape(-1).view(u)[0]
            out = np.empty(c.shape, x.dtype)  # owns its memory: a plan keeps it as is
            r = out.view(u)  # 1 where c: * (x ^ y) ^ y gives x's bits there, y's elsewhere
            np.multiply(c, xb ^ yb, out=r, dtype=u)
            r ^= yb
            return [out]
        return [_asarray(np.where(c, x, y))]
    return run


def _variadic(ufunc):
    def build(node):
        def run(a):
            dt = a[0].dtype
            if kind(dt) not in "iuf" or any(x.dtype != dt for x in a):
                raise Defer
            if len(a) == 1:
                return [a[0].copy()]
            r = ufunc(a[0], a[1])
            for x in a[2:]:
                r = ufunc(r, x)
            return [_asarray(r)]
        return run
    return build


fast("Max", since=8)(_variadic(np.maximum))
fast("Min", since=8)(_variadic(np.minimum))
fast("Sum", since=8)(_variadic(np.add))


@fast("Mean", since=8)
def _mean(node):
    add = _variadic(np.add)(node)

    def run(a):
        if kind(a[0].dtype) != "f":
            raise Defer
        s = add(a)[0]
        return [_asarray(s / len(a)).astype(a[0].dtype, copy=False)]
    return run

"""numpy fast paths: reductions, softmax, matmul, cumulative sums (see :mod:`.numpy_ops`
for the conventions)."""
from __future__ import annotations

import numpy as np

from .numpy_ops import _axes, _axis, _ints, flat2d
from .registry import Defer, fast, kind

_asarray = np.asarray


# ---- reductions, softmax, matmul, cumsum ---------------------------------------------------

def _reduce(fn, kinds, axes_input_since):
    def build(node):
        keepdims = bool(node.attr("keepdims", 1))
        from_input = node.since_version >= axes_input_since
        noop = from_input and bool(node.attr("noop_with_empty_axes", 0))
        attr_axes = None if from_input else node.attr("axes")

        def run(a):
            x = a[0]
            if kind(x.dtype) not in kinds:
                raise Defer
            if from_input:
                axes = _ints(a[1]) if len(a) > 1 and a[1] is not None else []
            else:
                axes = list(attr_axes) if attr_axes is not None else []
            if not axes:
                if noop:
                    return [x]
                axes = None
            else:
                axes = tuple(_axes(axes, x.ndim))
            return [_asarray(fn(x, axes, keepdims))]
        return run
    return build


def _extremum(ufunc):
    def f(x, axes, keepdims):
        if x.size == 0:
            raise Defer  # identity elements for empty reductions: the reference's business
        return ufunc.reduce(x, axis=axes, keepdims=keepdims)
    return f


for _since, _name in ((1, "ReduceSum"), (13, "ReduceSum")):
    fast(_name, since=_since)(_reduce(
        lambda x, ax, k: np.sum(x, axis=ax, keepdims=k, dtype=x.dtype), "iuf", 13))


def _mean(x, axes, keepdims):
    """Sum over the count, an empty set giving 0 (onnxruntime's choice: the spec leaves it
    undefined, numpy gives NaN); integers divide truncating toward zero, as C does."""
    s = np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    count = max(1, x.size if axes is None else int(np.prod([x.shape[a] for a in axes])))
    if x.dtype.kind == "f":
        return s / x.dtype.type(count)
    q = np.abs(s) // count
    return np.where(s < 0, -q, q).astype(x.dtype)


for _since in (1, 18):
    fast("ReduceMean", since=_since)(_reduce(_mean, "iuf", 18))
    fast("ReduceProd", since=_since)(_reduce(
        lambda x, ax, k: np.prod(x, axis=ax, keepdims=k, dtype=x.dtype), "iuf", 18))
    fast("ReduceMax", since=_since)(_reduce(_extremum(np.maximum), "iuf", 18))
    fast("ReduceMin", since=_since)(_reduce(_extremum(np.minimum), "iuf", 18))


def _int_log(v, dt):
    """log of integer sums truncated to ``dt``, -inf and NaN as the type's minimum (what
    onnxruntime's conversion gives on x86)."""
    with np.errstate(all="ignore"):
        f = np.log(np.asarray(v, np.float64))
    return np.where(np.isfinite(f), np.trunc(f), np.iinfo(dt).min).astype(dt)


def _int_log_sum(x, axes, keepdims):
    return _int_log(np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype), x.dtype)


def _int_log_sum_exp(x, axes, keepdims):
    """onnxruntime's integer LogSumExp: each exp(v - max) truncated to the type (1 at the
    maximum, else 0) before the sum, so log(count of maxima) + max; an empty set: minimum."""
    if x.size == 0:
        shape = np.sum(x, axis=axes, keepdims=keepdims).shape
        return np.full(shape, np.iinfo(x.dtype).min, x.dtype)
    m = np.max(x, axis=axes, keepdims=True)
    count = np.sum(x == m, axis=axes, keepdims=keepdims)
    m = m if keepdims else np.squeeze(m, axis=axes)
    return (_int_log(count, x.dtype) + m).astype(x.dtype)


# opset 18's schema allows integers; onnx.reference refuses them (Log is float only)
for _since in (1, 18):
    fast("ReduceLogSum", since=_since)(_reduce(_int_log_sum, "iu", 18))
    fast("ReduceLogSumExp", since=_since)(_reduce(_int_log_sum_exp, "iu", 18))


def _softmax_along(x, axis):
    with np.errstate(all="ignore"):
        y = np.exp(x - x.max(axis=axis, keepdims=True))
        y /= y.sum(axis=axis, keepdims=True)
    return y


@fast("Softmax")
def _softmax_flat(node):
    """Opset < 13: coerce to 2-D [prod(shape[:axis]), prod(shape[axis:])], normalize rows."""
    axis = node.attr("axis", 1)

    def run(a):
        x = a[0]
        if kind(x.dtype) != "f" or x.size == 0:
            raise Defer
        flat = flat2d(x, _axis(axis, x.ndim) if x.ndim else 0)
        return [_softmax_along(flat, 1).reshape(x.shape).astype(x.dtype, copy=False)]
    return run


@fast("Softmax", since=13)
def _softmax(node):
    axis = node.attr("axis", -1)

    def run(a):
        x = a[0]
        if kind(x.dtype) != "f" or x.size == 0:
            raise Defer
        return [_softmax_along(x, _axis(axis, x.ndim)).astype(x.dtype, copy=False)]
    return run


@fast("MatMul")
def _matmul(node):
    def run(a):
        x, y = a[0], a[1]
        if x.dtype != y.dtype or kind(x.dtype) not in "iuf" or x.ndim == 0 or y.ndim == 0:
            raise Defer
        return [_asarray(np.matmul(x, y))]
    return run


@fast("CumSum", since=11)
def _cumsum(node):
    exclusive, reverse = node.attr("exclusive", 0), node.attr("reverse", 0)

    def run(a):
        x = a[0]
        if kind(x.dtype) not in "iuf":
            raise Defer
        ax_list = _ints(a[1])
        if len(ax_list) != 1 or a[1].ndim > 1:
            raise ValueError("CumSum axis must be a scalar")
        ax = _axis(ax_list[0], x.ndim)
        if reverse:
            x = np.flip(x, ax)
        res = np.cumsum(x, axis=ax, dtype=x.dtype)
        if exclusive:
            shifted = np.zeros_like(res)
            dst = [slice(None)] * x.ndim
            src = [slice(None)] * x.ndim
            dst[ax], src[ax] = slice(1, None), slice(0, -1)
            shifted[tuple(dst)] = res[tuple(src)]
            res = shifted
        if reverse:
            res = np.ascontiguousarray(np.flip(res, ax))
        return [res]
    return run

"""Shape functions: data movement (reshapes, Transpose, Concat, Split, Slice, Gather,
Identity)."""
from __future__ import annotations

from .core import (_axes, _axis, _fail, _get, _ints, _moved_input, _moved_ints, _need, _present,
                   _prod, _same_shape, register)


@register("Reshape", values=_moved_input(5))
def _reshape(node, shapes, values):
    x = shapes[0]
    target = list(_moved_ints(node, shapes, values, 5, "shape", ()))
    allowzero = node.attrs.get("allowzero", 0) if node.since_version >= 14 else 0
    out = []
    neg = -1
    known = 1
    for i, d in enumerate(target):
        if d == -1:
            if neg >= 0:
                raise _fail(node, f"target shape {target} has more than one -1", shapes)
            neg = i
            out.append(-1)
            continue
        if d == 0 and not allowzero:
            if i >= len(x):
                raise _fail(node, f"target shape {target}: 0 at index {i} has no input dim",
                            shapes)
            d = x[i]
        elif d < 0:
            raise _fail(node, f"target shape {target} has a negative dim", shapes)
        known *= d
        out.append(d)
    total = _prod(x)
    if neg >= 0:
        if known == 0:
            if total != 0 or allowzero:
                raise _fail(node, f"cannot infer -1 in target shape {target}", shapes)
            raise _fail(node, f"-1 in target shape {target} is ambiguous for an empty input",
                        shapes)
        if total % known:
            raise _fail(node, f"cannot reshape {total} elements into {target}", shapes)
        out[neg] = total // known
    elif known != total:
        raise _fail(node, f"cannot reshape {total} elements into {target}", shapes)
    return [tuple(out)]


@register("Flatten")
def _flatten(node, shapes, values):
    x = shapes[0]
    r = len(x)
    a = node.attrs.get("axis", 1)
    if a < -r or a > r:
        raise _fail(node, f"axis {a} out of range for rank {r}", shapes)
    if a < 0:
        a += r
    return [(_prod(x[:a]), _prod(x[a:]))]


@register("Squeeze", values=_moved_input(13, optional=True))
def _squeeze(node, shapes, values):
    x = shapes[0]
    axes = _moved_ints(node, shapes, values, 13, "axes", optional=True)
    if not axes:  # no axes (or an empty axes tensor, as onnxruntime reads it): all 1-dims
        return [tuple(d for d in x if d != 1)]
    ax = _axes(node, axes, len(x), shapes)
    for a in ax:
        if x[a] != 1:
            raise _fail(node, f"cannot squeeze axis {a} of size {x[a]}", shapes)
    return [tuple(d for i, d in enumerate(x) if i not in ax)]


@register("Unsqueeze", values=_moved_input(13))
def _unsqueeze(node, shapes, values):
    x = shapes[0]
    axes = _moved_ints(node, shapes, values, 13, "axes") or []
    r = len(x) + len(axes)
    ax = _axes(node, axes, r, shapes)
    out = []
    it = iter(x)
    for i in range(r):
        out.append(1 if i in ax else next(it))
    return [tuple(out)]


@register("Transpose")
def _transpose(node, shapes, values):
    x = shapes[0]
    perm = node.attrs.get("perm")
    r = len(x)
    if perm is None:
        return [x[::-1]]
    if len(perm) != r or sorted(perm) != list(range(r)):
        raise _fail(node, f"perm {list(perm)} is not a permutation of rank {r}", shapes)
    return [tuple(x[p] for p in perm)]


@register("Concat")
def _concat(node, shapes, values):
    ins = [s for s in shapes if s is not None]
    if not ins:
        raise _fail(node, "no inputs", shapes)
    first = ins[0]
    r = len(first)
    a = _axis(node, node.attrs.get("axis", 1), r, shapes)
    total = 0
    for s in ins:
        if len(s) != r:
            raise _fail(node, "inputs have different ranks", shapes)
        for i in range(r):
            if i != a and s[i] != first[i]:
                raise _fail(node, f"inputs differ along axis {i}", shapes)
        total += s[a]
    return [first[:a] + (total,) + first[a + 1:]]


def _split_values(node):
    if node.since_version >= 13:
        return _present(node, 1)
    if node.since_version < 2 and not node.attrs.get("split"):
        return _present(node, 1)  # Split-1 could take the sizes as a second input
    return ()


@register("Split", values=_split_values)
def _split(node, shapes, values):
    x = shapes[0]
    a = _axis(node, node.attrs.get("axis", 0), len(x), shapes)
    n = len(node.outputs)
    dim = x[a]
    split = _moved_ints(node, shapes, values, 13, "split", optional=True)
    if node.since_version < 2 and not split and _get(shapes, 1) is not None:
        split = _ints(_need(node, values, 1))  # opset 1: split attr or second input
    if split:
        if len(split) != n:
            raise _fail(node, f"split {split} has {len(split)} entries for {n} outputs", shapes)
        if sum(split) != dim or min(split) < 0:
            raise _fail(node, f"split {split} does not add up to dim {dim}", shapes)
    else:
        num = node.attrs.get("num_outputs") if node.since_version >= 18 else None
        if num is not None:
            if num != n:
                raise _fail(node, f"num_outputs={num} but the node has {n} outputs", shapes)
            chunk = -(-dim // n)
            split = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
            if split[-1] < 0:
                raise _fail(node, f"cannot split dim {dim} into {n} outputs", shapes)
        else:
            if dim % n:
                raise _fail(node, f"dim {dim} is not divisible into {n} equal parts", shapes)
            split = [dim // n] * n
    return [x[:a] + (s,) + x[a + 1:] for s in split]


def _slice_values(node):
    if node.since_version >= 10:
        return _present(node, 1, 2, 3, 4)
    return ()


@register("Slice", values=_slice_values)
def _slice(node, shapes, values):
    x = shapes[0]
    if node.since_version >= 10:
        starts = _ints(_need(node, values, 1))
        ends = _ints(_need(node, values, 2))
        axes = _ints(_need(node, values, 3)) if _get(shapes, 3) is not None else None
        steps = _ints(_need(node, values, 4)) if _get(shapes, 4) is not None else None
    else:
        at = node.attrs
        starts, ends, axes, steps = at.get("starts"), at.get("ends"), at.get("axes"), None
    n = len(starts)
    if len(ends) != n or (axes is not None and len(axes) != n) or \
            (steps is not None and len(steps) != n):
        raise _fail(node, "starts/ends/axes/steps have different lengths", shapes)
    r = len(x)
    if axes is None:
        axes = range(n)
        if n > r:
            raise _fail(node, f"{n} slice entries for rank {r}", shapes)
    else:
        axes = _axes(node, axes, r, shapes)
    out = list(x)
    for i, a in enumerate(axes):
        st = 1 if steps is None else steps[i]
        if st == 0:
            raise _fail(node, "slice step must not be 0", shapes)
        out[a] = slice_length(starts[i], ends[i], st, x[a])
    return [tuple(out)]


def slice_length(start: int, end: int, step: int, dim: int) -> int:
    """Elements a Slice takes from an axis of ``dim``: negative starts and ends count from the
    end, then clamp to [0, dim] for a positive step and to [0, dim-1] (start) / [-1, dim-1]
    (end) for a negative one. (Python's slices differ there: a start before the axis's first
    element, stepping backwards, takes nothing.)"""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return len(range(start, end, step))


@register("Gather")
def _gather(node, shapes, values):
    x, idx = shapes[0], shapes[1]
    a = _axis(node, node.attrs.get("axis", 0), len(x), shapes)
    return [x[:a] + tuple(idx) + x[a + 1:]]


@register("Identity")
def _identity(node, shapes, values):
    return _same_shape(node, shapes)

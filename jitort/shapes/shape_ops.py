"""Shape functions: shape manipulation, data movement, gather/scatter, generators."""
from __future__ import annotations

import math

import numpy as np

from .core import (_VALUE_INPUTS, _axes, _axis, _bcast2, _fail, _get, _ints, _need, _present, _prod, _rank_at_least, _scalar, _str, register)


@register("Reshape", values=lambda n: (1,) if n.since_version >= 5 else ())
def _reshape(node, shapes, values):
    x = shapes[0]
    if node.since_version >= 5:
        target = _ints(_need(node, values, 1))
    else:
        target = list(node.attrs.get("shape", ()))
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


@register("Squeeze", values=lambda n: _present(n, 1) if n.since_version >= 13 else ())
def _squeeze(node, shapes, values):
    x = shapes[0]
    if node.since_version >= 13:
        axes = _ints(_need(node, values, 1)) if _get(shapes, 1) is not None else None
    else:
        axes = node.attrs.get("axes")
    if not axes:  # no axes (or an empty axes tensor, as onnxruntime reads it): all 1-dims
        return [tuple(d for d in x if d != 1)]
    ax = _axes(node, axes, len(x), shapes)
    for a in ax:
        if x[a] != 1:
            raise _fail(node, f"cannot squeeze axis {a} of size {x[a]}", shapes)
    return [tuple(d for i, d in enumerate(x) if i not in ax)]


@register("Unsqueeze", values=lambda n: (1,) if n.since_version >= 13 else ())
def _unsqueeze(node, shapes, values):
    x = shapes[0]
    if node.since_version >= 13:
        axes = _ints(_need(node, values, 1))
    else:
        axes = node.attrs.get("axes") or []
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
    if node.since_version >= 13:
        split = _ints(_need(node, values, 1)) if _get(shapes, 1) is not None else None
    elif node.since_version >= 2:
        split = node.attrs.get("split")
    else:  # opset 1: split attr or second input
        split = node.attrs.get("split")
        if not split and _get(shapes, 1) is not None:
            split = _ints(_need(node, values, 1))
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
        out[a] = len(range(*slice(starts[i], ends[i], st).indices(x[a])))
    return [tuple(out)]


@register("Gather")
def _gather(node, shapes, values):
    x, idx = shapes[0], shapes[1]
    a = _axis(node, node.attrs.get("axis", 0), len(x), shapes)
    return [x[:a] + tuple(idx) + x[a + 1:]]


@register("GatherElements")
def _gather_elements(node, shapes, values):
    x, idx = shapes[0], shapes[1]
    if len(x) != len(idx):
        raise _fail(node, "data and indices must have the same rank", shapes)
    a = _axis(node, node.attrs.get("axis", 0), len(x), shapes)
    if any(idx[k] > x[k] for k in range(len(x)) if k != a):
        raise _fail(node, "indices dims must not exceed data dims off the axis", shapes)
    return [idx]


# CumSum/CumProd (shape function in .elementwise): the axis input is read on the host
_VALUE_INPUTS.update({"CumSum": (1,), "CumProd": (1,)})


@register("GatherND")
def _gather_nd(node, shapes, values):
    x, idx = shapes[0], shapes[1]
    b = node.attrs.get("batch_dims", 0)
    if len(idx) < 1 or len(x) < 1:
        raise _fail(node, "data and indices must have rank >= 1", shapes)
    k = idx[-1]
    if b >= min(len(x), len(idx)) or x[:b] != idx[:b]:
        raise _fail(node, f"batch_dims={b} do not match", shapes)
    if k > len(x) - b:
        raise _fail(node, f"indices last dim {k} > data rank {len(x)} - batch_dims {b}", shapes)
    return [tuple(idx[:-1]) + tuple(x[b + k:])]


@register("Expand", values=(1,))
def _expand(node, shapes, values):
    target = tuple(_ints(_need(node, values, 1)))
    for d in target:
        if d < 0:
            raise _fail(node, f"negative dim in target shape {target}", shapes)
    r = _bcast2(shapes[0], target)
    if r is None:
        raise _fail(node, f"cannot expand to {target}", shapes)
    return [r]


@register("Tile", values=(1,))
def _tile(node, shapes, values):
    x = shapes[0]
    reps = _ints(_need(node, values, 1))
    if len(reps) != len(x):
        raise _fail(node, f"repeats {reps} do not match rank {len(x)}", shapes)
    out = []
    for d, r in zip(x, reps):
        if r < 0:
            raise _fail(node, f"negative repeats {reps}", shapes)
        out.append(d * r)
    return [tuple(out)]


def _pad_values(node):
    if node.since_version >= 11:
        return _present(node, 1, 3)
    return ()


@register("Pad", values=_pad_values)
def _pad(node, shapes, values):
    x = shapes[0]
    r = len(x)
    if node.since_version >= 11:
        pads = _ints(_need(node, values, 1))
        axes = _ints(_need(node, values, 3)) if _get(shapes, 3) is not None else None
    else:
        pads = node.attrs.get("pads", node.attrs.get("paddings"))
        axes = None
    if axes is None:
        axes = range(r)
    else:
        axes = _axes(node, axes, r, shapes)
    na = len(axes)
    if len(pads) != 2 * na:
        raise _fail(node, f"pads {pads} must have {2 * na} entries", shapes)
    out = list(x)
    for i, a in enumerate(axes):
        d = x[a] + pads[i] + pads[i + na]
        if d < 0:
            raise _fail(node, f"pads {pads} make dim {a} negative", shapes)
        out[a] = d
    return [tuple(out)]


@register("CenterCropPad", values=(1,))
def _center_crop_pad(node, shapes, values):
    x = shapes[0]
    sizes = _ints(_need(node, values, 1))
    axes = node.attrs.get("axes")
    axes = range(len(x)) if axes is None else _axes(node, axes, len(x), shapes)
    if len(sizes) != len(axes):
        raise _fail(node, f"shape {sizes} does not match axes", shapes)
    out = list(x)
    for a, s in zip(axes, sizes):
        out[a] = s
    return [tuple(out)]


@register("Shape")
def _shape(node, shapes, values):
    r = len(shapes[0])
    if node.since_version >= 15:
        start = node.attrs.get("start", 0)
        end = node.attrs.get("end")
        return [(len(range(*slice(start, end).indices(r))),)]
    return [(r,)]


@register("Size")
def _size(node, shapes, values):
    return [()]


@register("ConstantOfShape", values=(0,))
def _constant_of_shape(node, shapes, values):
    out = tuple(_ints(_need(node, values, 0))) if shapes[0] != (0,) else ()
    for d in out:
        if d < 0:
            raise _fail(node, f"negative dim in shape {out}", shapes)
    return [out]


@register("Constant")
def _constant(node, shapes, values):
    at = node.attrs
    for key in ("value", "sparse_value"):
        v = at.get(key)
        if v is not None:
            return [tuple(int(d) for d in np.shape(v))]
    for key in ("value_floats", "value_ints", "value_strings"):
        v = at.get(key)
        if v is not None:
            return [(len(v),)]
    return [()]


@register("Range", values=(0, 1, 2))
def _range(node, shapes, values):
    start = _scalar(_need(node, values, 0))
    limit = _scalar(_need(node, values, 1))
    delta = _scalar(_need(node, values, 2))
    if delta == 0:
        raise _fail(node, "Range delta must not be 0", shapes)
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        n = -((start - limit) // delta)
    else:
        n = math.ceil((limit - start) / delta)
    return [(max(int(n), 0),)]


@register("HannWindow", "HammingWindow", "BlackmanWindow", values=(0,))
def _window(node, shapes, values):
    n = _ints(_need(node, values, 0))[0]
    if n < 0:
        raise _fail(node, f"negative window size {n}", shapes)
    return [(n,)]


@register("DepthToSpace")
def _depth_to_space(node, shapes, values):
    x = shapes[0]
    if len(x) != 4:
        raise _fail(node, "input must be 4-D", shapes)
    b = node.attrs.get("blocksize")
    if x[1] % (b * b):
        raise _fail(node, f"channels {x[1]} not divisible by blocksize^2 = {b * b}", shapes)
    return [(x[0], x[1] // (b * b), x[2] * b, x[3] * b)]


@register("SpaceToDepth")
def _space_to_depth(node, shapes, values):
    x = shapes[0]
    if len(x) != 4:
        raise _fail(node, "input must be 4-D", shapes)
    b = node.attrs.get("blocksize")
    if x[2] % b or x[3] % b:
        raise _fail(node, f"spatial dims not divisible by blocksize {b}", shapes)
    return [(x[0], x[1] * b * b, x[2] // b, x[3] // b)]


@register("OneHot", values=(1,))
def _one_hot(node, shapes, values):
    idx = shapes[0]
    depth = _scalar(_need(node, values, 1))
    depth = int(depth)
    if depth < 0:
        raise _fail(node, f"negative depth {depth}", shapes)
    r = len(idx) + 1
    a = _axis(node, node.attrs.get("axis", -1), r, shapes)
    return [idx[:a] + (depth,) + idx[a:]]


@register("Det")
def _det(node, shapes, values):
    x = _rank_at_least(node, shapes, 0, 2)
    if x[-1] != x[-2]:
        raise _fail(node, "Det needs square matrices", shapes)
    return [x[:-2]]


@register("DynamicQuantizeLinear")
def _dql(node, shapes, values):
    return [shapes[0], (), ()]


@register("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def _loss(node, shapes, values):
    red = _str(node.attrs.get("reduction"), "mean")
    loss = shapes[1] if red == "none" else ()
    out = [loss]
    if len(node.outputs) > 1:
        out.append(shapes[0])
    return out



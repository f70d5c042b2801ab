"""CUDA lowerings of data movement: views, Transpose, Concat, Split, Slice, Gather."""
from __future__ import annotations

from ...ir import Node
from ..cuda_emit import CudaEmitter, _data, _plain, _strides, lowering
from ..lowerings import _prod, slice_start_step
from ..lowerings.common import axis_dims, gather_dims, int_indices
from ..registry import Unlowerable


@lowering("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", supports=_plain)
def lower_view(em: CudaEmitter, n: Node) -> None:
    em.alias(n.outputs[0], n.inputs[0])


@lowering("Transpose", supports=_plain)
def lower_transpose(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    perm = list(n.attrs.get("perm", list(range(len(shape)))[::-1]))
    runs: list[list[int]] = []  # input axes that stay adjacent and in order merge
    for p in perm:
        if runs and runs[-1][-1] + 1 == p:
            runs[-1].append(p)
        else:
            runs.append([p])
    if len(runs) > 6:
        raise Unlowerable(n, "Transpose of more than 6 moving axis groups")
    xs = _strides(shape)
    out_shape = [_prod([shape[a] for a in r]) for r in runs]
    xstr = [xs[r[-1]] for r in runs]
    xv = em.read(x)
    em.call(_data.copy_nd, xv, em.sizes(xstr), em.write(y), em.sizes(_strides(out_shape)),
            em.sizes(out_shape))


@lowering("Concat", supports=_plain)
def lower_concat(em: CudaEmitter, n: Node) -> None:
    y = n.outputs[0]
    axis, (o, total, i) = axis_dims(em, n, y)
    parts = [(v, em.shape(v)[axis]) for v in n.inputs if v is not None]
    srcs = [em.read(v) for v, _ in parts]
    yv = em.write(y)
    start = 0
    for (v, a), s in zip(parts, srcs):
        if a:
            em.call(_data.copy_nd, s, em.sizes((a * i, i, 1)), yv.at(em.size(start * i)),
                    em.sizes((total * i, i, 1)), em.sizes((o, a, i)))
        start += a


@lowering("Split", supports=_plain)
def lower_split(em: CudaEmitter, n: Node) -> None:
    x = n.inputs[0]
    axis, (o, total, i) = axis_dims(em, n, x)
    xv = em.read(x)
    start = 0
    for v in n.outputs:
        a = em.shape(v)[axis]
        yv = em.write(v)
        if a:
            em.call(_data.copy_nd, xv.at(em.size(start * i)), em.sizes((total * i, i, 1)), yv,
                    em.sizes((a * i, i, 1)), em.sizes((o, a, i)))
        start += a


@lowering("Slice", supports=lambda n: _plain(n) and n.since_version >= 10)
def lower_slice(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if rank == 0 or rank > 6:
        raise Unlowerable(n, f"Slice of rank {rank}")
    start, step = slice_start_step(em, n, shape)  # the ends are in the inferred output shape
    xs = _strides(shape)
    out_shape = em.shape(y)
    xv = em.read(x)
    base = sum(st * s for st, s in zip(start, xs)) if _prod(out_shape) else 0
    em.call(_data.copy_nd, xv.at(em.size(base)), em.sizes([a * b for a, b in zip(xs, step)]),
            em.write(y), em.sizes(_strides(out_shape)), em.sizes(out_shape))


@lowering("Gather", supports=lambda n: _plain(n) and int_indices(n))
def lower_gather(em: CudaEmitter, n: Node) -> None:
    data, idx, y = n.inputs[0], n.inputs[1], n.outputs[0]
    o, a, k, i = gather_dims(em, n)
    dv, iv = em.read(data), em.read(idx)
    em.call(_data.gather3, dv, iv, em.write(y), *em.sizes((o, a, k, i)), em.error_flag())

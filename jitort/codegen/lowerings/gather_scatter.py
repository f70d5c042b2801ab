"""CPU lowerings: GatherElements, GatherND, ScatterElements, ScatterND, Scatter, OneHot.

Kernels: ``jitort.kernels.cpu.gather_scatter`` (alias ``_gs`` in generated drivers).
GatherElements and ScatterElements/Scatter get a kernel generated per rank, axis and reduction
(a loop nest over the indices, their dims may be smaller than the data's); GatherND, ScatterND
and OneHot call fixed-rank kernels on collapsed views. Scatters first copy the data input into
the output (or, when the data input dies here and shares its buffer with no other input, write
over it in place) and then apply the updates in index order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...errors import InvalidInput
from ...ir import Node
from ..calls import KernelModule, View
from ..registry import Unlowerable, lowering
from ..symbolic import concrete
from .common import _axis, _plain, _prod

if TYPE_CHECKING:
    from ..emitter import Emitter

_data = KernelModule("data")
_gs = KernelModule("gather_scatter")

_INT = (np.dtype(np.int32), np.dtype(np.int64))

#: ``reduction`` attribute -> the kernels' codes (kernels/cpu/gather_scatter.py)
_RED = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}

#: gathered elements from which GatherND runs its rows in a prange (GatherElements its first
#: index dim)
_PAR_ELEMS = 1 << 13


def _dims(shape) -> tuple[int, ...]:
    """A shape for a message (no guards recorded)."""
    return tuple(concrete(d) for d in shape)


def _str(v, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def _int_input(i: int):
    """Support predicate: plain dtypes and input ``i`` (the indices) int32/int64."""
    def pred(n: Node) -> bool:
        return (_plain(n) and len(n.inputs) > i and n.inputs[i] is not None
                and np.dtype(n.inputs[i].dtype) in _INT)
    return pred


def _reduction(n: Node) -> int:
    red = _str(n.attrs.get("reduction"), "none")
    if red not in _RED:
        raise Unlowerable(n, f"unknown reduction {red!r}")
    if red != "none" and np.dtype(n.outputs[0].dtype) == np.dtype(np.bool_):
        raise Unlowerable(n, f"reduction {red!r} on bool")  # onnxruntime has no such kernel
    return _RED[red]


def _scatter_supported(n: Node) -> bool:
    if not _int_input(1)(n):
        return False
    return _str(n.attrs.get("reduction"), "none") in _RED


def _copy_data(em: Emitter, n: Node, data, others) -> View:
    """Declare the scatter's output as a copy of ``data`` (emitted); write it over ``data``'s own
    buffer when it dies here and no other input (``others``) is a view of that buffer."""
    y = n.outputs[0]
    r = em.root.get(id(data))
    if (r is not None and em.can_donate(data, y)
            and all(v is None or em.root.get(id(v)) != r for v in others)):
        em.read(data)
        return em.write(y, reuse=data)
    src = em.read(data)
    yv = em.write(y)
    if _prod(em.shape(y)) != 0:
        em.call(_data.copy_flat, src.flat(), yv.flat())
    return yv


# --- GatherElements / ScatterElements ---------------------------------------------------------

def _elements_kernel(rank: int, axis: int, scatter: bool, reduction: int,
                     parallel: bool = False) -> str:
    """Source of a GatherElements (``y, x, idx``) or ScatterElements (``y, idx, upd``) kernel of
    rank ``rank``: loops over the indices' dims; the element's index along ``axis`` is checked
    (and wrapped) before it is used. A ``parallel`` gather runs its first index dim in a
    prange (a raise inside one would keep Numba from parallelizing it): an index out of range
    marks its row, and the kernel raises after the loop."""
    op = "ScatterElements" if scatter else "GatherElements"
    args = "y, idx, upd" if scatter else "y, x, idx"
    par = parallel and not scatter
    lines = [f"@njit(cache=True, error_model='numpy'{', parallel=True' if par else ''})",
             f"def __KNAME__({args}):", f"    n = {'y' if scatter else 'x'}.shape[{axis}]"]
    if par:
        lines.append("    bad = np.zeros(idx.shape[0], np.uint8)")
    ind = "    "
    for k in range(rank):
        rng = "prange" if par and k == 0 else "range"
        lines.append(f"{ind}for i{k} in {rng}(idx.shape[{k}]):")
        ind += "    "
    at = ", ".join(f"i{k}" for k in range(rank))
    tgt = ", ".join("j" if k == axis else f"i{k}" for k in range(rank))
    lines += [f"{ind}j = idx[{at}]",
              f"{ind}if j < 0:",
              f"{ind}    j += n"]
    if par:
        lines += [f"{ind}if j < 0 or j >= n:",
                  f"{ind}    bad[i0] = 1",
                  f"{ind}else:",
                  f"{ind}    y[{at}] = x[{tgt}]",
                  "    for i in range(bad.shape[0]):",
                  "        if bad[i]:",
                  f"            raise IndexError('{op}: index out of range')"]
        return "\n".join(lines) + "\n"
    lines += [f"{ind}if j < 0 or j >= n:",
              f"{ind}    raise IndexError('{op}: index out of range')"]
    if not scatter:
        lines.append(f"{ind}y[{at}] = x[{tgt}]")
    elif reduction == 0:
        lines.append(f"{ind}y[{tgt}] = upd[{at}]")
    elif reduction in (1, 2):
        lines.append(f"{ind}y[{tgt}] {'+' if reduction == 1 else '*'}= upd[{at}]")
    else:
        lines.append(f"{ind}y[{tgt}] = {'max' if reduction == 3 else 'min'}(y[{tgt}], upd[{at}])")
    return "\n".join(lines) + "\n"


@lowering("GatherElements", supports=_int_input(1))
def lower_gather_elements(em: Emitter, n: Node) -> None:
    x, idx, y = n.inputs[0], n.inputs[1], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if rank == 0:
        raise Unlowerable(n, "GatherElements on a scalar")
    axis = _axis(n.attrs.get("axis", 0), rank)
    yv = em.write(y)
    if _prod(em.shape(idx)) == 0:
        return
    if shape[axis] == 0:
        raise InvalidInput(f"{n.label}: indices into an empty axis")
    isz = em.shape(idx)
    par = em.split("gather_el_par", n, _prod(isz), _PAR_ELEMS, isz[0])
    kern = em.generated(f"k_gather_el{rank}{'_par' if par else ''}",
                        _elements_kernel(rank, axis, False, 0, par))
    xv = em.read(x)
    em.call(kern, yv, xv, em.read(idx))


@lowering("ScatterElements", "Scatter", supports=_scatter_supported)
def lower_scatter_elements(em: Emitter, n: Node) -> None:
    data, idx, upd = n.inputs[0], n.inputs[1], n.inputs[2]
    shape = em.shape(data)
    rank = len(shape)
    if rank == 0:
        raise Unlowerable(n, f"{n.op_type} on a scalar")
    axis = _axis(n.attrs.get("axis", 0), rank)
    ishape, ushape = em.shape(idx), em.shape(upd)
    if (len(ishape) != rank or tuple(ishape) != tuple(ushape)
            or any(ishape[k] > shape[k] for k in range(rank) if k != axis)):
        raise InvalidInput(f"{n.label}: indices {_dims(ishape)} / updates {_dims(ushape)} do not fit data {_dims(shape)}")
    red = _reduction(n)
    yv = _copy_data(em, n, data, (idx, upd))
    if _prod(ishape) == 0:
        return
    if shape[axis] == 0:
        raise InvalidInput(f"{n.label}: indices into an empty axis")
    kern = em.generated(f"k_scatter_el{rank}", _elements_kernel(rank, axis, True, red))
    iv = em.read(idx)
    em.call(kern, yv, iv, em.read(upd))


# --- GatherND / ScatterND -----------------------------------------------------------------------

@lowering("GatherND", supports=_int_input(1))
def lower_gather_nd(em: Emitter, n: Node) -> None:
    x, idx, y = n.inputs[0], n.inputs[1], n.outputs[0]
    xs, ishape = em.shape(x), em.shape(idx)
    b = int(n.attrs.get("batch_dims", 0))
    k = int(ishape[-1])  # the indices' tuple length shapes the kernel call (pinned)
    nb = _prod(xs[:b])
    dims = tuple(xs[b:b + k])
    inner = _prod(xs[b + k:])
    m = _prod(ishape[b:-1])
    yv = em.write(y)
    if nb * m * inner == 0:
        return
    if k and _prod(dims) == 0:
        raise InvalidInput(f"{n.label}: indices into an empty dim")
    par = em.split("gnd_par", n, nb * m * inner, _PAR_ELEMS, nb * m)
    xv = em.shaped(x, (nb, _prod(dims), inner))
    iv = em.shaped(idx, (nb, m, k))
    em.call(_gs.gather_nd3_par if par else _gs.gather_nd3, xv, iv,
            yv.reshape(em.sizes((nb, m, inner))), em.sizes(dims + (1,)))


@lowering("ScatterND", supports=_scatter_supported)
def lower_scatter_nd(em: Emitter, n: Node) -> None:
    data, idx, upd = n.inputs[0], n.inputs[1], n.inputs[2]
    xs, ishape, ushape = em.shape(data), em.shape(idx), em.shape(upd)
    if not ishape:
        raise InvalidInput(f"{n.label}: indices must have rank >= 1")
    k = int(ishape[-1])
    if k > len(xs) or tuple(ushape) != tuple(ishape[:-1]) + tuple(xs[k:]):
        raise InvalidInput(f"{n.label}: indices {_dims(ishape)} / updates {_dims(ushape)} do not fit data {_dims(xs)}")
    red = _reduction(n)
    yv = _copy_data(em, n, data, (idx, upd))
    dims = tuple(xs[:k])
    inner = _prod(xs[k:])
    m = _prod(ishape[:-1])
    if m * inner == 0:
        return
    if k and _prod(dims) == 0:
        raise InvalidInput(f"{n.label}: indices into an empty dim")
    y2 = yv.reshape(em.sizes((_prod(dims), inner)))
    iv = em.shaped(idx, (1, m, k))
    uv = em.shaped(upd, (m, inner))
    em.call(_gs.scatter_nd2, y2, iv, uv, em.sizes(dims + (1,)), em.size(red))


# --- OneHot -------------------------------------------------------------------------------------

@lowering("OneHot", supports=lambda n: _plain(n)
          and np.dtype(n.inputs[0].dtype) != np.dtype(np.bool_))
def lower_onehot(em: Emitter, n: Node) -> None:
    idx, vals, y = n.inputs[0], n.inputs[2], n.outputs[0]
    ys = em.shape(y)
    axis = _axis(n.attrs.get("axis", -1), len(ys))
    o, depth, i = _prod(ys[:axis]), ys[axis], _prod(ys[axis + 1:])
    if _prod(em.shape(vals)) != 2:
        raise InvalidInput(f"{n.label}: values must hold 2 elements (off, on)")
    yv = em.write(y)
    if o * depth * i == 0:
        return
    iv = em.shaped(idx, (o, i))
    em.call(_gs.onehot3, iv, yv.reshape(em.sizes((o, depth, i))), em.shaped(vals, (2,)))

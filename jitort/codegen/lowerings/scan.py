"""CPU lowerings: scans and selections: CumSum, CumProd, ArgMax, ArgMin, TopK, Hardmax.

Kernels: ``jitort.kernels.cpu.scan`` (alias ``_scan`` in generated drivers). Each op runs on the
rank-3 view ``(outer, axis, inner)`` of its input (Hardmax before opset 13: the 2-D coercion
``(prod(shape[:axis]), prod(shape[axis:]), 1)``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import Dim, Kernel, KernelModule
from ..registry import Unlowerable, lowering
from .common import _3d, _axis, _plain, host_value, softmax_dims

if TYPE_CHECKING:
    from ..emitter import Emitter

_scan = KernelModule("scan")

#: elements from which a scan / arg-reduction / TopK / Hardmax runs its outer planes (rows) in a
#: prange (a region on jitort's pool costs ~1 us; 16K elements take ~5-15 us serially)
_PAR_ELEMS = 1 << 14


def _pick(em: Emitter, n: Node, work, rows, serial: Kernel, par: Kernel) -> Kernel:
    """``par`` when the node runs its rows in a prange, else ``serial``: decided once per node
    (memo), so the generated text does not change with the shapes."""
    return par if em.split("scan_par", n, work, _PAR_ELEMS, rows) else serial


def _flag(em: Emitter, v) -> Dim:
    """A flag argument as a runtime int (``d`` slot): a literal True/False made Numba specialize
    the kernel on it, and the scan compiled that way ran 2.5x slower (measured)."""
    return em.size(1 if v else 0)


_NUM = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.uint32,
                                    np.uint64, np.int8, np.int16, np.uint8, np.uint16))


def _numeric_io(n: Node) -> bool:
    return _plain(n) and np.dtype(n.inputs[0].dtype) in _NUM


@lowering("CumSum", "CumProd", supports=_numeric_io)
def lower_cumsum(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    av = host_value(em, n, n.inputs[1])
    if av.size != 1:
        raise Unlowerable(n, "axis is not a scalar")
    axis = int(av.reshape(-1)[0])
    if rank == 0:
        raise Unlowerable(n, f"{n.op_type} of a scalar")  # onnxruntime rejects it too
    if not -rank <= axis < rank:
        raise Unlowerable(n, f"axis {axis} out of range for rank {rank}")
    axis = _axis(axis, rank)
    o, a, i = _3d(shape, axis)
    s3 = em.sizes((o, a, i))
    yv = em.write(y)
    fn = _pick(em, n, o * a * i, o, _scan.scan3, _scan.scan3_par)
    em.call(fn, em.read(x).reshape(s3), yv.reshape(s3), _flag(em, n.attrs.get("exclusive", 0)),
            _flag(em, n.attrs.get("reverse", 0)), _flag(em, n.op_type == "CumProd"))


@lowering("ArgMax", "ArgMin", supports=_numeric_io)
def lower_argmax(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if rank == 0:
        raise Unlowerable(n, f"{n.op_type} of a scalar")
    axis = _axis(n.attrs.get("axis", 0), rank)
    o, a, i = _3d(shape, axis)
    if a == 0 and o * i != 0:
        raise Unlowerable(n, f"{n.op_type} over an empty axis")
    yv = em.write(y)
    if o * i == 0:
        return
    fn = _pick(em, n, o * a * i, o, _scan.argext3, _scan.argext3_par)
    xv = em.shaped(x, (o, a, i))
    em.call(fn, xv, yv.reshape(em.sizes((o, i))), _flag(em, n.op_type == "ArgMin"),
            _flag(em, n.attrs.get("select_last_index", 0)))


@lowering("Hardmax", supports=_numeric_io)
def lower_hardmax(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) == 0:
        raise Unlowerable(n, "Hardmax of a scalar")
    o, a, i = softmax_dims(n, shape)
    yv = em.write(y)
    if o * a * i == 0:
        return
    idx = em.temp(o * i, np.int64)
    s3 = em.sizes((o, a, i))
    fn = _pick(em, n, o * a * i, o, _scan.hardmax3, _scan.hardmax3_par)
    em.call(fn, em.read(x).reshape(s3), yv.reshape(s3), idx.reshape(em.sizes((o, i))))


@lowering("TopK", supports=lambda n: _numeric_io(n)
          and np.dtype(n.outputs[1].dtype) == np.dtype(np.int64))
def lower_topk(em: Emitter, n: Node) -> None:
    x = n.inputs[0]
    vals, idx = n.outputs[0], n.outputs[1]
    shape = em.shape(x)
    rank = len(shape)
    if rank == 0:
        raise Unlowerable(n, "TopK of a scalar")
    axis = _axis(n.attrs.get("axis", -1), rank)
    o, a, i = _3d(shape, axis)
    k = em.shape(vals)[axis]
    largest = n.attrs.get("largest", 1) if n.since_version >= 11 else 1
    # ``sorted=0`` leaves the order unspecified: sorted output is one valid answer
    vv, iv = em.write(vals), em.write(idx)
    if o * k * i == 0:
        return
    fn = _pick(em, n, o * a * i, o, _scan.topk3, _scan.topk3_par)
    sk = em.sizes((o, k, i))
    xv = em.shaped(x, (o, a, i))
    em.call(fn, xv, vv.reshape(sk), iv.reshape(sk), _flag(em, largest))

"""CUDA lowerings of indexing ops: GatherElements, CumSum.

Without them a GPU model that uses these ops (a RoBERTa export has both) runs them on the CPU
backend, with a copy to the host and back around each. Their kernels:
``kernels/cuda/gather_scatter.py``, ``kernels/cuda/scan.py``. (Expand needs no lowering here:
it is in the elementwise table, fused like any broadcast.)
"""
from __future__ import annotations

import numpy as np

from ...ir import Node
from ..calls import KernelModule
from ..cuda_emit import CudaEmitter, _plain, _strides, lowering
from ..lowerings.common import _3d, _axis, host_value, int_indices
from ..registry import Unlowerable

_gs = KernelModule("gather_scatter", package="cuda")
_scan = KernelModule("scan", package="cuda")

#: The most dims a gather_elements call takes (kernels/cuda/gather_scatter.py).
_RANK = 6
#: The dtypes the CumSum kernel is compiled for (kernels/cuda/scan.py).
_SCAN = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))


@lowering("GatherElements", supports=lambda n: _plain(n) and int_indices(n))
def lower_gather_elements(em: CudaEmitter, n: Node) -> None:
    data, idx, y = n.inputs[0], n.inputs[1], n.outputs[0]
    shape, ishape = list(em.shape(data)), list(em.shape(idx))
    rank = len(shape)
    if rank == 0:
        raise Unlowerable(n, "GatherElements on a scalar")
    if rank > _RANK:
        raise Unlowerable(n, f"GatherElements of rank {rank} (at most {_RANK})")
    axis = _axis(int(n.attrs.get("axis", 0)), rank)
    xs = _strides(shape)
    astride = xs[axis]
    xs[axis] = 0  # the gathered axis is addressed by the index's value
    dv, iv = em.read(data), em.read(idx)
    em.call(_gs.gather_elements, dv, iv, em.write(y), em.sizes(ishape), em.sizes(xs),
            em.size(shape[axis]), em.size(astride), em.error_flag())


def _scan_supported(n: Node) -> bool:
    return (_plain(n) and np.dtype(n.inputs[0].dtype) in _SCAN and len(n.inputs) > 1
            and n.inputs[1] is not None and int_indices(n))


@lowering("CumSum", supports=_scan_supported)
def lower_cumsum(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    av = host_value(em, n, n.inputs[1], "axis")  # Unlowerable when not known at plan time
    if av.size != 1:
        raise Unlowerable(n, "axis is not a scalar")
    axis = int(av.reshape(-1)[0])
    if rank == 0:
        raise Unlowerable(n, "CumSum of a scalar")  # onnxruntime rejects it too
    if not -rank <= axis < rank:
        raise Unlowerable(n, f"axis {axis} out of range for rank {rank}")
    o, a, i = _3d(shape, _axis(axis, rank))
    xv = em.read(x)
    em.call(_scan.cumsum3, xv, em.write(y), *em.sizes((o, a, i)),
            em.size(1 if n.attrs.get("exclusive", 0) else 0),
            em.size(1 if n.attrs.get("reverse", 0) else 0))

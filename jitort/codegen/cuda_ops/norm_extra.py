"""CUDA lowerings of InstanceNormalization and LRN (``jitort.kernels.cuda.norm_extra``).

Without them a decoder's InstanceNormalizations and AlexNet-style LRNs ran on the CPU backend,
with a device-to-host and a host-to-device copy around each. Both view the input as
(N, C, spatial) as the CPU lowerings do.
"""
from __future__ import annotations

import numpy as np

from ...ir import Node
from ..calls import KernelModule
from ..cuda_emit import CudaEmitter, _is_float, _same_float, lowering
from ..lowerings import _prod
from ..registry import Unlowerable

_norm_extra = KernelModule("norm_extra", package="cuda")


@lowering("InstanceNormalization", supports=lambda n: _same_float(n) and len(n.outputs) == 1)
def lower_instancenorm(em: CudaEmitter, n: Node) -> None:
    x, scale, bias, y = n.inputs[0], n.inputs[1], n.inputs[2], n.outputs[0]
    shape = em.shape(x)
    if len(shape) < 2:
        raise Unlowerable(n, f"InstanceNormalization of a rank-{len(shape)} input")
    c = shape[1]
    if _prod(em.shape(scale)) != c or _prod(em.shape(bias)) != c:
        raise Unlowerable(n, "InstanceNormalization scale/B are not (C,)")
    xv, sv, bv = em.read(x), em.read(scale), em.read(bias)
    em.call(_norm_extra.instancenorm3d, xv, sv, bv, em.write(y),
            *em.sizes((shape[0], c, _prod(shape[2:]))), float(n.attrs.get("epsilon", 1e-5)))


def _lrn_ok(n: Node) -> bool:
    x, y = n.inputs[0], n.outputs[0]
    return _is_float(x, y) and np.dtype(x.dtype) == np.dtype(y.dtype)


@lowering("LRN", supports=_lrn_ok)
def lower_lrn(em: CudaEmitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    if len(shape) < 2:
        raise Unlowerable(n, f"LRN of a rank-{len(shape)} input")
    a = n.attrs
    size = int(a.get("size", 0))
    if size < 1:
        raise Unlowerable(n, f"LRN size {size}")
    xv = em.read(x)
    em.call(_norm_extra.lrn3d, xv, em.write(y),
            *em.sizes((shape[0], shape[1], _prod(shape[2:]), size)),
            float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0)))

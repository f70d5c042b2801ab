"""CUDA lowerings, one module per op family; each registers its ops with
:data:`jitort.codegen.cuda_emit.lowering` on import.

A lowering receives the :class:`~jitort.codegen.cuda_emit.CudaEmitter` and the node, reads
concrete shapes from ``em.shape(v)`` and emits calls of ``jitort.kernels.cuda`` (or launches of
generated kernels); it raises :class:`~jitort.codegen.registry.Unlowerable` for shapes it does
not handle, and the node falls back to the CPU backend.
"""
from ...families import import_families

#: The op-family modules, discovered and imported in name order (as the CPU's lowerings).
FAMILIES = import_families(__name__, __path__)

"""CPU lowerings, one module per op family; each registers its ops with
:func:`jitort.codegen.registry.lowering` on import.

A lowering receives the :class:`~jitort.codegen.emitter.Emitter` and the node; concrete shapes are in
``em.shape(v)``. It emits kernel calls on views reshaped to the kernel's fixed rank. It raises
:class:`~jitort.codegen.registry.Unlowerable` for shapes it does not handle: the node then falls
back to the interpreter. Kernel modules in ``kernels/cpu/`` carry the same family names.
"""
from . import (attention, conv, conv_transpose, data, einsum, gather_scatter, matmul, norm, pool,  # noqa: F401
               misc, quant, reduce, resize, rnn, scan, shape_ops, signal)
# shared with the CUDA lowerings
from .common import (ACT_CODES, _3d, _axis, _conv_pads, _prod, act_args,  # noqa: F401
                     float_literal)
from .conv import _conv_geometry  # noqa: F401
from .data import slice_start_step  # noqa: F401
from .reduce import REDUCE_KIND, _axes_from_input  # noqa: F401

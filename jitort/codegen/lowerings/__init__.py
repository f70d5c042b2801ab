"""CPU lowerings, one module per op family; each registers its ops with
:func:`jitort.codegen.registry.lowering` on import.

A lowering receives the :class:`~jitort.codegen.emitter.Emitter` and the node; concrete shapes are in
``em.shape(v)``. It emits kernel calls on views reshaped to the kernel's fixed rank. It raises
:class:`~jitort.codegen.registry.Unlowerable` for shapes it does not handle: the node then falls
back to the interpreter. Kernel modules in ``kernels/cpu/`` and shape functions in
``jitort/shapes/`` carry the same family names (``tests/test_families.py``).
"""
from ...families import import_families

#: Modules of this package that are not op families (shared helpers; they register nothing).
HELPERS = frozenset({"common"})
#: The op-family modules, discovered: every module of this package but the helpers, imported
#: in name order, so a new family module registers without any list edited.
FAMILIES = import_families(__name__, __path__, HELPERS)

# shared with the CUDA lowerings
from .common import ACT_CODES, _3d, _axis, _conv_pads, _prod, act_args  # noqa: E402,F401
from .common import _conv_geometry  # noqa: E402,F401
from .data import slice_start_step  # noqa: E402,F401
from .reduce import REDUCE_KIND, _axes_from_input  # noqa: E402,F401

"""Concrete shape inference: output shapes of one node from concrete input shapes.

At run time jitort plans every compiled node for each new set of input shapes, so this module is
pure Python on small tuples and lists and is written for speed (a few microseconds per node).

API
---
* :func:`infer` ``(node, shapes, values) -> list[tuple[int, ...]]``: one concrete shape per
  node output. ``shapes[i]`` is the shape of input ``i`` (``None`` for an omitted optional
  input); ``values[i]`` is the host-known value of input ``i`` or ``None``. Raises
  :class:`ShapeError` when the shapes contradict each other and ``NotImplementedError`` when the
  op has no shape function, is data-dependent, or needs a value that is ``None``.
* :func:`value_inputs` ``(node) -> tuple[int, ...]``: indices of the inputs whose *values* the
  shape function reads (per op and opset; only inputs that are present on the node).
* :func:`has_shape_fn` ``(node) -> bool``.
* :func:`broadcast_shapes` ``(*shapes) -> tuple[int, ...]``: numpy multidirectional broadcasting.

Data-dependent ops (``Compress``, ``NonZero``, ``Unique``, ``NonMaxSuppression``, ...) have no
shape function: their output shapes depend on the *contents* of their data inputs, so they
are not plannable ahead of execution. :func:`infer` raises ``NotImplementedError`` for them and
:func:`has_shape_fn` is ``False``.

Each op's shape function is in the module named like its lowering's family
(``jitort/codegen/lowerings/``, ``kernels/cpu/``); ops with no CPU lowering are in
:mod:`.elementwise` and :mod:`.shape_ops`. Shared rules are in :mod:`.core`.

The default ONNX domain (``""`` / ``"ai.onnx"``) is covered, and the ops jitort's own passes
create (domain ``"jitort"``: ``MatMulBias``, ``FusedConv``; see :mod:`jitort.passes.patterns` and :mod:`jitort.passes.epilogues`).
"""
from __future__ import annotations

from ..families import import_families
from .core import (DATA_DEPENDENT, ShapeError, ShapeFn, _JITORT_REGISTRY, _REGISTRY, _VALUE_INPUTS,  # noqa: F401
                   broadcast_shapes, has_shape_fn, infer, register, value_inputs)

#: Modules of this package that are not op families (they register nothing).
HELPERS = frozenset({"core"})
#: The op-family modules, discovered: every module of this package but the helpers. Each is
#: named like its family's lowering module (``jitort/codegen/lowerings/``) and registers its
#: shape functions on import, so a new family module needs no list edited.
FAMILIES = import_families(__name__, __path__, HELPERS)

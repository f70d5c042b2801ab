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

The default ONNX domain (``""`` / ``"ai.onnx"``) is covered, and the ops jitort's own passes
create (domain ``"jitort"``: ``MatMulBias``, ``FusedConv``; see :mod:`jitort.passes.patterns`).
"""
from __future__ import annotations

from .core import (DATA_DEPENDENT, ShapeError, ShapeFn, _JITORT_REGISTRY, _REGISTRY, _VALUE_INPUTS,  # noqa: F401
                   broadcast_shapes, has_shape_fn, infer, register, value_inputs)
# each family module registers its shape functions on import
from . import (attention, conv, elementwise, matmul, norm, reduce, resize, rnn,  # noqa: E402,F401
               shape_ops, signal)

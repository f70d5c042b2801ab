"""The fallback interpreter: runs any single node with numpy, one node at a time.

Three tiers:

* **fast paths** (:mod:`.numpy_ops`): plain numpy closures built once per node, for the ops
  that shape computations and small host-side glue use (Shape, Gather, Concat, Reshape,
  Slice, elementwise math, reductions...). A call costs a few microseconds.
* **jitort's own ops** (:mod:`.jitort_ops`): ``MatMulBias`` and ``FusedConv``, decomposed
  into the ONNX ops they replaced (for nodes a compiled backend declines, and for folding).
* **onnx.reference** (:mod:`.reference`): everything else, including subgraph ops
  (If/Loop/Scan read their outer-scope values from ``node.implicit``), ai.onnx.ml and the
  preview domains. A fast path that *defers* (unsupported dtype or form, or any error) hands
  the same call to the reference, built lazily on first need.

Values: tensors are numpy arrays (0-d arrays, never numpy scalars). Sequence- and
optional-typed values, which only the reference handles, pass through as the reference's
python objects (a ``list`` of arrays, or ``None`` for an empty optional). An omitted optional
output (empty name in the original NodeProto) may come back as ``None``. Outputs may be views
of inputs (as in onnx.reference): callers must not write into them in place.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx

from .. import ir
from ..errors import ExecutionError, UnsupportedOp
from . import numpy_ops  # noqa: F401  (registers the fast paths)
from . import numpy_conv  # noqa: F401  (Conv, ConvTranspose, pools)
from . import numpy_reduce  # noqa: F401  (reductions, softmax, matmul, cumsum)
from . import numpy_quant  # noqa: F401  (QLinearMatMul, QLinearConv)
from . import jitort_ops  # noqa: F401  (jitort's own ops: MatMulBias, FusedConv)
from .reference import ReferenceRunner
from .registry import lookup, registered_ops

__all__ = ["make_runner", "node_inputs", "supports", "registered_ops"]

Runner = Callable[[list], list]


def _since(node: ir.Node, opsets: dict[str, int]) -> int:
    """The node's schema since_version, resolved from ``opsets`` when the IR does not know it."""
    if node.since_version:
        return node.since_version
    version = opsets.get(node.domain)
    if version is None:
        return 0
    try:
        return onnx.defs.get_schema(node.op_type, version, node.domain).since_version
    except Exception:  # onnxruntime's com.microsoft ops have no onnx schema: the opset's
        return version if node.domain == "com.microsoft" else 0


def _fast_path(node: ir.Node, opsets: dict[str, int]) -> Runner | None:
    builder = lookup(node.domain, node.op_type, _since(node, opsets))
    if builder is None:
        return None
    try:
        return builder(node)
    except Exception:  # an odd attribute: leave the node to the reference
        return None


def _reference(node: ir.Node, opsets: dict[str, int]) -> ReferenceRunner:
    try:
        return ReferenceRunner(node, opsets)
    except Exception as e:
        dom = node.domain or "ai.onnx"
        raise UnsupportedOp(
            f"node {node.label}: no implementation of op {node.op_type!r} in domain {dom!r} "
            f"(opset {opsets.get(node.domain, '?')}): {type(e).__name__}: {e}") from None


def _failed(node: ir.Node, e: Exception) -> ExecutionError:
    dom = f"{node.domain}." if node.domain else ""
    return ExecutionError(f"node {node.label} ({dom}{node.op_type}) failed: "
                          f"{type(e).__name__}: {e}")


def make_runner(node: ir.Node, opsets: dict[str, int]) -> Runner:
    """Build a callable that runs ``node``.

    The callable takes the node's input arrays in order (``None`` for omitted optional
    inputs) followed by the arrays of ``node.implicit``, and returns a list with one numpy
    array per node output (exact ONNX dtype and shape; 0-d arrays, never scalars).

    Raises :class:`~jitort.errors.UnsupportedOp` at build time (naming the node and its
    op/domain) when nothing can run the node. Errors while running (bad shapes...) are
    re-raised as :class:`~jitort.errors.ExecutionError` naming the node.
    """
    opsets = {("" if d == "ai.onnx" else d): v for d, v in opsets.items()}
    fast_run = _fast_path(node, opsets)
    if fast_run is None:
        ref = _reference(node, opsets)

        def run_reference(args: list) -> list:
            try:
                return ref(args)
            except Exception as e:
                raise _failed(node, e) from e
        return run_reference

    lazy: list[ReferenceRunner] = []

    def run_fast(args: list) -> list:
        try:
            return fast_run(args)
        except Exception as e:
            first = e  # Defer, or an error the reference will report in its own words
        try:
            if not lazy:
                lazy.append(_reference(node, opsets))
        except UnsupportedOp:
            raise _failed(node, first) from first
        try:
            return lazy[0](args)
        except Exception as e:
            raise _failed(node, e) from e
    return run_fast


def node_inputs(node: ir.Node, env: dict) -> list:
    """What a :func:`make_runner` runner takes for ``node``: its inputs (None where omitted),
    then its implicit outer-scope values; constants from the IR, the rest from ``env``
    (value id -> array)."""
    ins = [None if v is None else (v.const if v.is_const else env[id(v)]) for v in node.inputs]
    ins += [v.const if v.is_const else env[id(v)] for v in node.implicit]
    return ins


def supports(node: ir.Node, opsets: dict[str, int]) -> bool:
    """Whether :func:`make_runner` can build a runner for ``node``."""
    try:
        make_runner(node, opsets)
    except UnsupportedOp:
        return False
    return True

"""16-bit floats (float16, bfloat16): ops without a 16-bit lowering compute in float32.

Generated code keeps float16 / bfloat16 values as their 2-byte words (uint16 views, see
``kernels/cpu/halfprec.py``). Three kinds of nodes touch them:

* elementwise ops (and Cast): the fused loops load-convert each 16-bit operand to float32,
  compute in float32 and round each node's result to 16 bits (``codegen/elementwise.py``);
* data movement (Reshape, Transpose, Gather, Concat, Slice, Split, Tile...): move the words
  themselves, no conversion;
* everything else (MatMul, Gemm, Conv, norms, Softmax, pooling, reductions...): this pass
  rewrites the node to compute in float32 between Casts -- ``Cast(to=FLOAT)`` on each 16-bit
  input (a constant is converted here, once), the node itself on float32 values, and
  ``Cast(to=FLOAT16|BFLOAT16)`` from a float32 copy of each 16-bit output -- so every op that
  compiles for float32 compiles for 16-bit floats without touching its lowering. The Casts
  are elementwise: fusion folds them into the neighbouring fused loops (a convert on load or
  on store), so they add no pass over memory of their own where a loop is next to them.

This is what onnxruntime's CPU provider does for ops without float16 kernels (it inserts
Casts around them). Rounding: a wrapped op accumulates in float32 and its result is rounded
to 16 bits once, where the Cast stores it; pattern passes run first (MatMul + bias Add,
Conv + activation...), so a fused node's epilogue runs in float32 before that one rounding.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

from ..codegen.elementwise import supports_elementwise
from ..ir import Graph, Node, Value, const_value

HALF = {np.dtype(np.float16): TensorProto.FLOAT16,
        np.dtype(ml_dtypes.bfloat16): TensorProto.BFLOAT16}

#: ops that move 16-bit words without arithmetic (their lowerings take the uint16 views), or
#: whose result type comes from an attribute or must not be computed in another precision
#: (Range's element count)
KEEP = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Gather",
        "Concat", "Split", "Slice", "Tile", "Expand", "Shape", "Size", "Cast", "CastLike",
        "ConstantOfShape", "Range", "If", "Loop", "Scan", "SequenceConstruct",
        "SequenceInsert", "SequenceAt", "ConcatFromSequence", "SplitToSequence", "Optional",
        "OptionalGetElement", "BitCast"}


def _half(v: Value | None) -> bool:
    return v is not None and v.dtype is not None and np.dtype(v.dtype) in HALF


#: matrix products and convolutions the CUDA backend computes on float16 operands itself
#: (cuBLAS on tensor cores, float32 accumulation): its pipeline keeps them
#: (:func:`keep_half_products`)
HALF_PRODUCTS = frozenset({("", "MatMul"), ("", "Gemm"), ("jitort", "MatMulBias"),
                           ("", "Conv"), ("jitort", "FusedConv")})


def _all_float16(n: Node) -> bool:
    vals = [v for v in list(n.inputs) + list(n.outputs) if v is not None]
    return all(v.dtype is not None and np.dtype(v.dtype) == np.float16 for v in vals)


def _needs_float32(n: Node, keep=frozenset()) -> bool:
    if n.domain not in ("", "jitort") or n.op_type in KEEP or n.implicit:
        return False
    if not any(_half(v) for v in list(n.inputs) + list(n.outputs)):
        return False
    if (n.domain, n.op_type) in keep and _all_float16(n):
        return False
    return not supports_elementwise(n)


def _cast(graph: Graph, x: Value, to: np.dtype, y: Value | None = None) -> Node:
    if y is None:
        y = Value(graph.fresh_name(x.name + "_f32"), np.dtype(to), x.shape)
    code = HALF.get(np.dtype(to), TensorProto.FLOAT)
    version = 13 if graph.opsets.get("", 17) >= 13 else 6
    node = Node("Cast", [x], [y], {"to": code}, name=graph.fresh_name("cast"),
                since_version=version)
    y.producer = node
    return node


def compute_16bit_in_float32(graph: Graph, keep=frozenset()) -> int:
    """Rewrite each node computing on 16-bit floats without a 16-bit lowering to compute in
    float32 between Casts (see the module docstring); ``keep``: (domain, op) pairs left on
    their float16 operands when every operand is float16. Returns the nodes rewritten."""
    f32 = np.dtype(np.float32)
    widened: dict[int, Value] = {}  # id(16-bit value) -> its float32 copy (one per value)
    out: list[Node] = []
    count = 0
    for n in graph.nodes:
        if not _needs_float32(n, keep):
            out.append(n)
            continue
        count += 1
        ins = []
        for v in n.inputs:
            if not _half(v):
                ins.append(v)
                continue
            w = widened.get(id(v))
            if w is None:
                if v.is_const:
                    w = const_value(graph.fresh_name(v.name + "_f32"), v.const.astype(f32))
                else:
                    cast = _cast(graph, v, f32)
                    out.append(cast)
                    w = cast.outputs[0]
                widened[id(v)] = w
            ins.append(w)
        n.inputs = ins
        out.append(n)
        for k, o in enumerate(n.outputs):
            if _half(o):
                wide = Value(graph.fresh_name(o.name + "_f32"), f32, o.shape)
                n.outputs[k] = wide
                wide.producer = n
                out.append(_cast(graph, wide, o.dtype, o))
    if count:
        graph.nodes = out
        graph.relink()
    return count


def keep_half_products(graph: Graph) -> int:
    """:func:`compute_16bit_in_float32` for the CUDA backend: float16 matrix products and
    convolutions stay float16 (``HALF_PRODUCTS``)."""
    return compute_16bit_in_float32(graph, HALF_PRODUCTS)

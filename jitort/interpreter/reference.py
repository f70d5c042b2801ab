"""Run one node on ``onnx.reference``: the fallback for everything without a fast path.

At build time the node becomes a one-node ModelProto whose graph inputs are the node's inputs
followed by its implicit (outer-scope) values, so If/Loop/Scan bodies find them in the
evaluator's context. A :class:`onnx.reference.ReferenceEvaluator` is constructed once per node;
running a node without a subgraph calls its op instance directly, skipping the evaluator's
per-run bookkeeping.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import ir
from .reference_fixes import FIXED_OPS


def node_proto(node: ir.Node, in_names: list[str], out_names: list[str]) -> onnx.NodeProto:
    """The node as a NodeProto reading ``in_names`` and writing ``out_names``."""
    if node.proto is not None:
        p = onnx.NodeProto()
        p.CopyFrom(node.proto)
        del p.input[:]
        del p.output[:]
        p.input.extend(in_names)
        p.output.extend(out_names)
        p.domain = node.domain
        return p
    attrs = {k: _attr_to_proto(node, k, v) for k, v in node.attrs.items()}
    return helper.make_node(node.op_type, in_names, out_names, name=node.name,
                            domain=node.domain or None, **attrs)


def _attr_to_proto(node: ir.Node, key: str, v: Any) -> Any:
    if isinstance(v, onnx.AttributeProto):
        return v
    if isinstance(v, np.ndarray):
        return numpy_helper.from_array(v)
    if isinstance(v, (np.integer, np.bool_, bool)):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, (list, tuple)):
        if not v:  # make_attribute cannot infer an empty list's type: ask the schema
            return helper.make_attribute(key, [], attr_type=_schema_attr_type(node, key))
        return [numpy_helper.from_array(x) if isinstance(x, np.ndarray)
                else int(x) if isinstance(x, (np.integer, np.bool_, bool))
                else float(x) if isinstance(x, np.floating) else x for x in v]
    return v


def _schema_attr_type(node: ir.Node, key: str) -> int:
    try:
        schema = onnx.defs.get_schema(node.op_type, max(node.since_version, 1), node.domain)
        return schema.attributes[key].type
    except Exception:
        return onnx.AttributeProto.INTS


def _value_info(name: str, v: ir.Value | None) -> onnx.ValueInfoProto:
    if v is None or v.dtype is None:
        return onnx.ValueInfoProto(name=name)
    try:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype))
    except Exception:
        return onnx.ValueInfoProto(name=name)
    shape = None if v.shape is None else [d if isinstance(d, (int, str)) else None for d in v.shape]
    return helper.make_tensor_value_info(name, elem, shape)


class ReferenceRunner:
    """Callable running one node on onnx.reference. Construction raises on unsupported ops
    (NotImplementedError / RuntimeError / TypeError from the evaluator)."""

    def __init__(self, node: ir.Node, opsets: dict[str, int]):
        from onnx.reference import ReferenceEvaluator

        self.n_in = len(node.inputs)
        self.n_out = len(node.outputs)
        proto_outs = list(node.proto.output) if node.proto is not None else None
        # Omitted optional outputs stay "" so the op sees them as absent.
        out_names = [("" if proto_outs is not None and i < len(proto_outs) and proto_outs[i] == ""
                      else o.name) for i, o in enumerate(node.outputs)]
        in_names = ["" if v is None else v.name for v in node.inputs]
        # Graph inputs: unique names, explicit inputs then implicit ones. ``self.slots`` maps
        # each graph input to the position in the runner's argument list that feeds it.
        graph_inputs, self.slots, seen = [], [], set()
        for i, v in enumerate(list(node.inputs) + list(node.implicit)):
            if v is None or v.name in seen:
                continue
            seen.add(v.name)
            graph_inputs.append(_value_info(v.name, v))
            self.slots.append((v.name, i))
        self.names = [n for n, _ in self.slots]
        self.out_pos = [i for i, n in enumerate(out_names) if n]
        graph_outputs = [onnx.ValueInfoProto(name=out_names[i]) for i in self.out_pos]
        p = node_proto(node, in_names, out_names)
        ops = dict(opsets)
        ops.setdefault(node.domain, 1 if node.domain else onnx.defs.onnx_opset_version())
        if (node.since_version and node.since_version > ops[node.domain]
                and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                            for a in p.attribute)):
            # a node the optimizer made in a newer form than the model's opset (the contrib
            # Gelus expand into opset 20's Gelu): run it at its own version
            ops[node.domain] = node.since_version
        model = helper.make_model(
            helper.make_graph([p], "jitort_node", graph_inputs, graph_outputs),
            opset_imports=[helper.make_opsetid(d, v) for d, v in ops.items()])
        # FIXED_OPS replace onnx.reference kernels that disagree with the ONNX spec (the
        # replacements reach If/Loop/Scan bodies too: new_ops propagate to subgraphs)
        self.evaluator = ReferenceEvaluator(model, new_ops=FIXED_OPS)
        inst = self.evaluator.rt_nodes_[0]
        # Direct call is equivalent to evaluator.run for ops that need no context (no subgraph,
        # no type-dependent function body resolved at run time).
        self.direct = None if inst.need_context() else inst

    def __call__(self, args: list) -> list:
        if self.direct is not None:
            res = self.direct.run(*args[:self.n_in])
            out = list(res)[:self.n_out]
            out += [None] * (self.n_out - len(out))
        else:
            feeds = {name: args[i] for name, i in self.slots}
            got = self.evaluator.run(None, feeds)
            out = [None] * self.n_out
            for pos, val in zip(self.out_pos, got):
                out[pos] = val
        return [_as_array(x) for x in out]


def _as_array(x: Any) -> Any:
    """numpy scalars and python numbers become 0-d arrays; sequences (lists), optionals
    (None) and arrays pass through unchanged."""
    if isinstance(x, np.ndarray) or x is None or isinstance(x, list):
        return x
    if isinstance(x, np.generic):
        return np.asarray(x)
    if isinstance(x, (bool, int, float, str)):
        return np.asarray(x)
    return x

"""Expansion of other domains' ops (onnxruntime's ``com.microsoft`` contrib ops) into default-
domain ONNX subgraphs that the rest of the pipeline fuses and the backends compile.

A module of :mod:`jitort.passes.expansions` registers one function per op::

    @expansion("com.microsoft", "BiasGelu")
    def _bias_gelu(b: Builder, n: Node):
        return [b.op("Gelu", [b.op("Add", [n.inputs[0], n.inputs[1]])])]

The function builds nodes through the :class:`Builder` and returns one value per output of
``n`` (``None`` for an output nobody reads), or raises :class:`Decline` (with the reason) when it
does not cover this node's attributes or inputs: the node then stays as it is, so partition
leaves it to the interpreter and ``compile(strict=True)`` names it in an ``UnsupportedOp``.
The expansions modules are discovered (no list to edit) on the pass's first run.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np
import onnx

from ..ir import Graph, Node, Value, const_value

log = logging.getLogger("jitort.passes")

#: (domain, op_type) -> expansion function ``fn(builder, node) -> list[Value | None]``
EXPANSIONS: dict[tuple[str, str], Callable[["Builder", Node], list]] = {}
_loaded = False


class Decline(Exception):
    """An expansion does not cover this node (the message says why); the node is kept."""


def expansion(domain: str, *op_types: str):
    """Decorator registering an expansion of ``domain``'s ``op_types``."""
    def deco(fn):
        for op in op_types:
            EXPANSIONS[(domain, op)] = fn
        return fn
    return deco


def load_expansions() -> None:
    """Import every module of :mod:`jitort.passes.expansions` once (they register)."""
    global _loaded
    if not _loaded:
        from ..families import import_families
        from . import expansions
        import_families(expansions.__name__, expansions.__path__)
        _loaded = True


def newest_since(op_type: str) -> int:
    """The since_version of the newest default-domain schema of ``op_type``."""
    return onnx.defs.get_schema(op_type, onnx.defs.onnx_opset_version(), "").since_version


class Builder:
    """Makes the nodes of one expansion (default domain, newest opset forms unless ``since``
    says otherwise) with fresh, typed values."""

    def __init__(self, g: Graph, node: Node):
        self.g, self.node, self.nodes = g, node, []

    def const(self, array, dtype=None) -> Value:
        arr = np.asarray(array, dtype=dtype)
        return const_value(self.g.fresh_name(f"{self.node.name or self.node.op_type}_c"), arr)

    def ints(self, *values: int) -> Value:
        """A 1-D int64 constant (axes, shapes, split sizes)."""
        return self.const(np.array(values, dtype=np.int64))

    def op(self, op_type: str, inputs: list[Value | None], attrs: dict[str, Any] | None = None,
           dtype=None, outputs: int = 1, since: int | None = None, shape=None) -> Any:
        """Append ``op_type(inputs)``; returns its output value (a list when ``outputs`` > 1).
        Outputs take ``dtype``, by default the type the op's schema gives them (Where's is
        its second input's, Less's bool, Shape's int64), else the first input's; and ``shape``
        (default unknown)."""
        hint = self.node.name or self.node.op_type
        outs = [Value(self.g.fresh_name(f"{hint}_{op_type}"),
                      None if dtype is None else np.dtype(dtype),
                      None if shape is None else tuple(shape)) for _ in range(outputs)]
        node = Node(op_type, list(inputs), outs, dict(attrs or {}), "",
                    f"{hint}/{op_type}{len(self.nodes)}",
                    since if since is not None else newest_since(op_type))
        if dtype is None:
            # The schema's typing first: the first input's dtype is wrong wherever the
            # output's type parameter is another input's or a fixed type, and backends
            # trust declared dtypes (a Where typed like its bool condition stores bools).
            _type_node(node)
            first = next((v.dtype for v in inputs if v is not None), None)
            for o in outs:
                o.dtype = first if o.dtype is None else o.dtype
        self.nodes.append(node)
        return outs[0] if outputs == 1 else outs


def used(g: Graph, v: Value | None, consumers) -> bool:
    """Whether ``v`` is read by a node or is a graph output."""
    return v is not None and (id(v) in consumers or id(v) in g.output_ids())


def expand_other_domains(g: Graph) -> int:
    """Replace every node with a registered expansion by the nodes its expansion makes."""
    load_expansions()
    if not any((n.domain, n.op_type) in EXPANSIONS for n in g.nodes):
        return 0
    consumers = g.consumers()
    new_nodes: list[Node] = []
    count = 0
    for n in g.nodes:
        _type_node(n)  # (its inputs may come from an expansion made just before)
        fn = EXPANSIONS.get((n.domain, n.op_type))
        made = None if fn is None else _expand_one(g, n, fn, consumers)
        if made is None:
            new_nodes.append(n)
            continue
        new_nodes.extend(made)
        count += 1
    if not count:
        return 0
    g.nodes = new_nodes
    g.relink()
    log.info("expanded other-domain ops: %d", count)
    return count


def _type_node(n: Node) -> None:
    """Type the default-domain outputs that onnx's inference left untyped because they follow
    an other-domain op (or were made before their inputs were typed): an output whose schema
    type parameter is an input's takes that input's dtype (MatMul, Add, Reshape, ...), one of a
    fixed type takes it (Less's bool); Cast's is its ``to``; Shape / Size give int64."""
    if n.domain or all(o.dtype is not None for o in n.outputs):
        return
    if n.op_type == "Cast" and "to" in n.attrs:
        n.outputs[0].dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(n.attrs["to"])))
        return
    if n.op_type in ("Shape", "Size"):
        n.outputs[0].dtype = np.dtype(np.int64)
        return
    try:
        schema = onnx.defs.get_schema(n.op_type, n.since_version or onnx.defs.onnx_opset_version())
    except Exception:
        return
    known = {}
    for formal, v in zip(schema.inputs, n.inputs):
        if v is not None and v.dtype is not None:
            known.setdefault(formal.type_str, v.dtype)
    for tc in schema.type_constraints:  # a parameter allowing one type (Less's T1: bool)
        if tc.type_param_str not in known and len(tc.allowed_type_strs) == 1:
            fixed = _tensor_type_dtype(tc.allowed_type_strs[0])
            if fixed is not None:
                known[tc.type_param_str] = fixed
    for formal, o in zip(schema.outputs, n.outputs):
        if o.dtype is None:
            o.dtype = known.get(formal.type_str, _tensor_type_dtype(formal.type_str))


def _tensor_type_dtype(type_str: str):
    """The numpy dtype of a schema type string ``tensor(bool)``; None for anything else."""
    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return None
    elem = getattr(onnx.TensorProto, type_str[len("tensor("):-1].upper(), None)
    if elem is None:
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    except (KeyError, TypeError, ValueError):
        return None


def _expand_one(g: Graph, n: Node, fn, consumers) -> list[Node] | None:
    b = Builder(g, n)
    try:
        results = list(fn(b, n))
    except Decline as e:
        log.info("not expanded: %s (%s): %s", n.label, n.op_type, e)
        return None
    for m in b.nodes:
        _type_node(m)
    results += [None] * (len(n.outputs) - len(results))
    made_ids = {id(o) for m in b.nodes for o in m.outputs}
    rename: dict[int, Value] = {}
    for orig, new in zip(n.outputs, results):
        if not used(g, orig, consumers):
            continue
        if new is None:
            log.info("not expanded: %s: output %s is read but not expanded", n.label, orig.name)
            return None
        if orig.dtype is None:
            orig.dtype = new.dtype
        if orig.shape is None:
            orig.shape = new.shape
        if id(new) in made_ids and id(new) not in rename:
            rename[id(new)] = orig  # the expansion's node writes the original value
        else:
            b.op("Identity", [new], since=newest_since("Identity"))
            rename[id(b.nodes[-1].outputs[0])] = orig
    for m in b.nodes:
        m.inputs = [rename.get(id(v), v) if v is not None else None for v in m.inputs]
        m.outputs = [rename.get(id(o), o) for o in m.outputs]
    return b.nodes

"""jitort's in-memory IR: a small, checkable graph of ONNX-like nodes.

Invariants (checked by :meth:`Graph.verify`):

* ``Graph.nodes`` is in topological order: every input of a node is a graph input, a constant,
  or an output of an earlier node (or an implicit outer-scope input of a subgraph node).
* Every value is produced at most once; ``Value.producer`` is that node (``None`` for graph
  inputs and constants).
* A constant value (``Value.const is not None``) is never produced by a node.

Shapes are tuples whose entries are ``int`` (static), ``str`` (a symbol such as ``"batch"``) or
``None`` (unknown); ``Value.shape is None`` means the rank itself is unknown.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from .errors import InvalidModel

Dim = int | str | None


@dataclass
class InputInfo:
    """What a graph input expects: name, dtype and shape (ints, symbol names or None); the
    entries of ``CompiledModel.inputs`` (here, not in :mod:`jitort.feeds`, so that a warm
    start lists them without loading the feed checks' dtypes)."""

    name: str
    dtype: np.dtype
    shape: tuple

    def __repr__(self) -> str:
        return f"InputInfo({self.name!r}, {np.dtype(self.dtype).name}, {list(self.shape)})"


@dataclass(eq=False)
class Value:
    """A tensor flowing through the graph."""

    name: str
    dtype: np.dtype | None = None
    shape: tuple[Dim, ...] | None = None
    const: np.ndarray | None = None
    producer: "Node | None" = field(default=None, repr=False)
    #: a sequence or optional value's ONNX ``TypeProto`` (``dtype`` is None for those), as
    #: declared or inferred at import; None for tensors and where unknown
    type_proto: Any = field(default=None, repr=False)

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def type_str(self) -> str:
        dt = "?" if self.dtype is None else np.dtype(self.dtype).name
        if self.shape is None:
            return f"{dt}[*]"
        return f"{dt}[{','.join('?' if d is None else str(d) for d in self.shape)}]"

    def __repr__(self) -> str:
        return f"%{self.name}:{self.type_str()}"


@dataclass(eq=False)
class Node:
    """One operation. ``inputs`` may hold ``None`` for omitted optional inputs.

    ``implicit`` lists outer-scope values read by subgraph attributes (If/Loop/Scan bodies);
    they count as inputs for scheduling and liveness.
    """

    op_type: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    name: str = ""
    since_version: int = 1
    implicit: list[Value] = field(default_factory=list)
    proto: Any = field(default=None, repr=False)  # the onnx NodeProto it came from, if unchanged

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def all_inputs(self) -> list[Value]:
        return [v for v in self.inputs if v is not None] + list(self.implicit)

    @property
    def label(self) -> str:
        return f"{self.op_type}({self.name})" if self.name else self.op_type

    def __repr__(self) -> str:
        return f"<Node {self.label}>"


class Graph:
    """A topologically ordered list of nodes with graph inputs and outputs."""

    def __init__(self, nodes: list[Node], inputs: list[Value], outputs: list[Value],
                 opsets: dict[str, int] | None = None, name: str = "graph"):
        self.nodes = nodes
        self.inputs = inputs
        self.outputs = outputs
        self.opsets = dict(opsets or {"": 17})
        self.name = name
        self._names = itertools.count()
        self.relink()

    # --- bookkeeping -------------------------------------------------------------------------
    def relink(self) -> None:
        """Recompute ``producer`` links after passes edited the node list."""
        for n in self.nodes:
            for o in n.outputs:
                o.producer = n

    def consumers(self) -> dict[int, list[Node]]:
        """Map ``id(value)`` -> nodes reading it (a node appears once per distinct value)."""
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            seen = set()
            for v in n.all_inputs():
                if id(v) not in seen:
                    seen.add(id(v))
                    out.setdefault(id(v), []).append(n)
        return out

    def output_ids(self) -> set[int]:
        return {id(v) for v in self.outputs}

    def fresh_name(self, hint: str) -> str:
        return f"{hint}__jit{next(self._names)}"

    def values(self) -> Iterable[Value]:
        seen = set()
        for v in itertools.chain(self.inputs, (x for n in self.nodes for x in n.all_inputs()),
                                 (o for n in self.nodes for o in n.outputs), self.outputs):
            if id(v) not in seen:
                seen.add(id(v))
                yield v

    def replace_uses(self, old: Value, new: Value) -> None:
        """Make every reader of ``old`` (nodes and graph outputs) read ``new`` instead."""
        for n in self.nodes:
            n.inputs = [new if v is old else v for v in n.inputs]
            n.implicit = [new if v is old else v for v in n.implicit]
        self.outputs = [new if v is old else v for v in self.outputs]

    def toposort(self) -> None:
        """Stable topological sort (keeps the current order where it is already valid)."""
        produced_by = {id(o): n for n in self.nodes for o in n.outputs}
        order, state = [], {}
        for root in self.nodes:
            if id(root) in state:
                continue
            stack = [(root, iter(root.all_inputs()))]
            state[id(root)] = 1
            while stack:
                node, it = stack[-1]
                for v in it:
                    p = produced_by.get(id(v))
                    if p is None:
                        continue
                    s = state.get(id(p))
                    if s == 1:
                        raise InvalidModel(f"graph has a cycle through node {p.label}")
                    if s is None:
                        state[id(p)] = 1
                        stack.append((p, iter(p.all_inputs())))
                        break
                else:
                    stack.pop()
                    state[id(node)] = 2
                    order.append(node)
        self.nodes = order
        self.relink()

    # --- checking and printing ----------------------------------------------------------------
    def verify(self) -> None:
        """Check the invariants in the module docstring; raise :class:`InvalidModel`."""
        defined = {id(v) for v in self.inputs}
        produced = set()
        for n in self.nodes:
            for v in n.all_inputs():
                if v.is_const or id(v) in defined:
                    continue
                raise InvalidModel(f"node {n.label} reads {v.name!r} before it is defined")
            for o in n.outputs:
                if id(o) in produced:
                    raise InvalidModel(f"value {o.name!r} is produced twice")
                if o.is_const:
                    raise InvalidModel(f"constant {o.name!r} is produced by node {n.label}")
                if o.producer is not n:
                    raise InvalidModel(f"value {o.name!r} has a stale producer link")
                produced.add(id(o))
                defined.add(id(o))
        for v in self.outputs:
            if not (v.is_const or id(v) in defined):
                raise InvalidModel(f"graph output {v.name!r} is never produced")

    def __str__(self) -> str:
        lines = [f"graph {self.name}({', '.join(map(repr, self.inputs))}) {{"]
        for n in self.nodes:
            args = ", ".join("_" if v is None else (f"${v.name}" if v.is_const else f"%{v.name}")
                             for v in n.inputs)
            attrs = "".join(f" {k}={_fmt_attr(v)}" for k, v in sorted(n.attrs.items()))
            outs = ", ".join(map(repr, n.outputs))
            lines.append(f"  {outs} = {n.op_type}({args}){attrs}")
        lines.append(f"  return {', '.join('%' + v.name for v in self.outputs)}")
        lines.append("}")
        return "\n".join(lines)


def _fmt_attr(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"tensor<{v.dtype.name}{list(v.shape)}>"
    if hasattr(v, "node"):  # GraphProto
        return "<graph>"
    return repr(v)


def const_value(name: str, array: np.ndarray) -> Value:
    """A constant value (initializer or folded result). Arrays are kept writeable."""
    arr = np.array(array, copy=True) if not array.flags.writeable else np.asarray(array)
    return Value(name, arr.dtype, tuple(int(d) for d in arr.shape), const=arr)

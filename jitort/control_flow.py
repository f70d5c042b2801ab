"""If / Loop / Scan / SequenceMap with compiled bodies.

A control-flow node's subgraphs are compiled through the same pipeline as a model (import,
passes, partition, lowering per shape signature, strict: nothing in a body may fall back),
each as a *body model*: the subgraph as a graph whose inputs are its formal inputs (a Loop's
iteration number, condition and carried values, a Scan's states and scan slices) followed by
the outer-scope values it reads; outer-scope constants become its initializers. The node is a
*control step* of the outer program (placement :data:`CONTROL`): it evaluates the condition,
trip count or sequence length and calls the body's compiled program.

Where values live: each body model has its own plans and workspace (one per thread, as a
model's), sized by the body's own memory plan; carried values and scan slices pass between
iterations as the arrays the body returns (its outputs, fresh arrays each iteration). A body is
planned per input-shape signature like any model, so a carried value whose shape changes
between iterations (a growing sequence) is planned again for each new shape (the generated
code is reused: sizes are read at run time). Scan outputs are stacked after the last
iteration; per-iteration elements whose shapes differ cannot be stacked and are declined with
:class:`UnsupportedOp` naming the output (the executor hands the node to the interpreter, or
refuses in strict mode).

Sequences and optionals (jitort/sequences.py) pass as they do between steps: a Python list
of arrays, None or the value; a body input declared of those types keeps its type.

A node whose body cannot be compiled (an op no backend claims, an outer-scope sequence, the
batched opset-8 Scan) stays on the interpreter, with the reason in ``fallback_reasons``.

Cost: an outer-scope constant a body reads is copied into that body's model (so its passes can
fold it and its lowerings prepack it); two branches reading the same large weights (a merged
decoder's with-past / without-past If) hold them once per branch.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import InvalidInput, UnsupportedOp
from .importer import _free_names
from .ir import Node, Value
from .partition import CONTROL, INTERP
from .sequences import claim as claim_sequences, copy_value, element_types, sequence

CONTROL_OPS = ("If", "Loop", "Scan", "SequenceMap")

#: ``(body model proto, names of its plan-time inputs) -> a compiled body model``
CompileBody = Callable[..., object]


def claim(graph, placement: dict, compile_body: CompileBody) -> tuple[dict, dict]:
    """Compile the bodies of every interpreted If / Loop / Scan / SequenceMap of ``graph``;
    each node whose bodies all compile is placed on :data:`CONTROL`, as are the sequence and
    optional ops (:func:`jitort.sequences.claim`). Returns ``(flows, reasons)``:
    ``id(node) -> flow`` (the step's callable) and ``node label -> why it stays interpreted``."""
    elem = element_types(graph)
    flows, reasons = claim_sequences(graph, placement, elem), {}
    for n in graph.nodes:
        if placement.get(id(n)) != INTERP or n.domain != "" or n.op_type not in CONTROL_OPS:
            continue
        try:
            flows[id(n)] = (SequenceMapFlow(n, graph.opsets, compile_body, elem)
                            if n.op_type == "SequenceMap"
                            else _FLOWS[n.op_type](n, graph.opsets, compile_body))
        except Exception as e:  # a body that cannot compile: the node stays interpreted
            reasons[n.label] = f"body not compiled: {type(e).__name__}: {e}"
            continue
        placement[id(n)] = CONTROL
    return flows, reasons


# --- body models -----------------------------------------------------------------------------

def _scope(node: Node) -> dict[str, tuple[Value, int]]:
    """Outer-scope name -> (its value, its position in the runner's arguments: the node's
    inputs, then ``node.implicit``). The importer listed ``implicit`` in this order of names;
    a pass may since have replaced a value by an equal one of another name."""
    names: list[str] = []
    for sg in _subgraphs(node):
        for name in sorted(_free_names(sg)):
            if name not in names:
                names.append(name)
    base = len(node.inputs)
    if len(names) != len(node.implicit):  # some name was not in scope at import: by name
        names = [v.name for v in node.implicit]
    return {name: (v, base + k) for k, (name, v) in enumerate(zip(names, node.implicit))}


def _subgraphs(node: Node) -> list:
    out = []
    for a in node.attrs.values():
        if isinstance(a, onnx.GraphProto):
            out.append(a)
        elif isinstance(a, list):
            out += [g for g in a if isinstance(g, onnx.GraphProto)]
    return out


def _tensor_type(dtype, shape) -> onnx.TypeProto:
    """A tensor type of ``dtype`` and ``shape``'s rank (every dim left open: a body is planned
    for the shapes it is called with)."""
    if dtype is None:
        raise UnsupportedOp("a value that is not a tensor (sequence, optional, map)")
    try:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except Exception:
        raise UnsupportedOp(f"element type {dtype} has no ONNX tensor type") from None
    return helper.make_tensor_type_proto(elem, None if shape is None else [None] * len(shape))


def _open_dims(vi: onnx.ValueInfoProto) -> None:
    if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
        for d in vi.type.tensor_type.shape.dim:
            d.Clear()


class Body:
    """One subgraph compiled as a model, and how a call's arguments feed it."""

    def __init__(self, node: Node, sg: onnx.GraphProto, formal: list, opsets: dict,
                 compile_body: CompileBody, plan_time: tuple = ()):
        """``formal``: (dtype, shape) for each formal input of ``sg`` (the types the node gives
        them); a declared type is kept, its dims opened. ``plan_time``: positions of formal
        inputs that may key the body's plans by value when it does not compile otherwise."""
        if len(sg.input) != len(formal):
            raise UnsupportedOp(f"{node.label}: body {sg.name!r} has {len(sg.input)} inputs, "
                                f"expected {len(formal)}")
        g = onnx.GraphProto()
        g.CopyFrom(sg)
        for vi, (dtype, shape) in zip(g.input, formal):
            if vi.type.WhichOneof("value") in ("sequence_type", "optional_type"):
                continue  # declared a sequence / optional: run by sequence steps in the body
            declared = vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type
            if declared:
                _open_dims(vi)
            else:
                vi.type.CopyFrom(_tensor_type(dtype, shape))
        scope = _scope(node)
        self.formal = [vi.name for vi in sg.input]
        self.outer: list[tuple[str, int]] = []  # (body input name, argument position)
        for name in sorted(_free_names(sg)):
            if name not in scope:
                raise UnsupportedOp(f"{node.label}: body reads {name!r}, not in scope")
            v, pos = scope[name]
            if v.is_const:
                if np.asarray(v.const).dtype == object:
                    raise UnsupportedOp(f"outer-scope constant {name!r} holds strings")
                g.initializer.append(numpy_helper.from_array(np.asarray(v.const), name))
            elif v.dtype is None and v.type_proto is not None:  # a sequence / optional
                g.input.append(helper.make_value_info(name, v.type_proto))
                self.outer.append((name, pos))
            else:
                g.input.append(helper.make_value_info(name, _tensor_type(v.dtype, v.shape)))
                self.outer.append((name, pos))
        model = helper.make_model(g, opset_imports=[helper.make_opsetid(d, ver)
                                                    for d, ver in opsets.items()])
        try:
            self.model = compile_body(model)
        except UnsupportedOp:
            if not plan_time:
                raise
            # a node of the body takes a value computed from the iteration number (a Slice's
            # starts): compute those on the host, one plan per iteration value
            self.model = compile_body(model, [self.formal[k] for k in plan_time])
        self.n_outputs = len(sg.output)
        self.label = node.label

    def feeds(self, args: list) -> dict:
        """The outer-scope part of a call's feeds."""
        return {name: args[pos] for name, pos in self.outer}

    def __call__(self, feeds: dict) -> list:
        return self.model.execute_compiled(feeds)

    def static_shape(self, k: int):
        """Output ``k``'s shape when the body's graph fixes it, else None."""
        shape = self.model.graph.outputs[k].shape
        return tuple(shape) if shape is not None and all(isinstance(d, int) for d in shape) \
            else None


def _contiguous(a: np.ndarray) -> np.ndarray:
    """``a`` C-contiguous, rank kept (``np.ascontiguousarray`` makes a 0-d array 1-d)."""
    return a if a.flags.c_contiguous else a.copy()


def _stack(label: str, name: str, elems: list, dtype, body: Body, k: int) -> np.ndarray:
    """Per-iteration values stacked on a new leading axis; different shapes are declined."""
    if not elems:
        shape = body.static_shape(k)
        return np.empty((0,) + (shape or ()), dtype)
    first = elems[0].shape
    for e in elems:
        if e.shape != first:
            raise UnsupportedOp(f"{label}: scan output {name!r} changes shape between "
                                f"iterations ({first} then {e.shape}); stacking needs one shape")
    return np.stack(elems, axis=0)


# --- the three ops ---------------------------------------------------------------------------

class IfFlow:
    def __init__(self, node: Node, opsets: dict, compile_body: CompileBody):
        self.node = node
        self.then = Body(node, node.attrs["then_branch"], [], opsets, compile_body)
        self.orelse = Body(node, node.attrs["else_branch"], [], opsets, compile_body)
        self.bodies = {"then_branch": self.then, "else_branch": self.orelse}
        if {self.then.n_outputs, self.orelse.n_outputs} != {len(node.outputs)}:
            raise UnsupportedOp(f"{node.label}: branch outputs do not match the node's")

    def __call__(self, args: list) -> list:
        body = self.then if bool(np.asarray(args[0]).reshape(-1)[0]) else self.orelse
        return body(body.feeds(args))


class LoopFlow:
    def __init__(self, node: Node, opsets: dict, compile_body: CompileBody):
        self.node = node
        carried = [(v.dtype, v.shape) for v in node.inputs[2:]]
        formal = [(np.int64, ()), (np.bool_, ())] + carried
        self.body = Body(node, node.attrs["body"], formal, opsets, compile_body, plan_time=(0,))
        self.bodies = {"body": self.body}
        self.n_carried = len(carried)
        self.n_scan = self.body.n_outputs - 1 - self.n_carried
        if self.n_scan < 0 or len(node.outputs) != self.n_carried + self.n_scan:
            raise UnsupportedOp(f"{node.label}: body outputs do not match the node's")

    def __call__(self, args: list) -> list:
        n_in = len(self.node.inputs)
        trip = None if args[0] is None else int(np.asarray(args[0]).reshape(-1)[0])
        cond = True if n_in < 2 or args[1] is None else bool(np.asarray(args[1]).reshape(-1)[0])
        carried = list(args[2:n_in])
        body, names = self.body, self.body.formal
        feeds = body.feeds(args)
        scans: list[list] = [[] for _ in range(self.n_scan)]
        i = 0
        while cond and (trip is None or i < trip):
            feeds[names[0]] = np.array(i, np.int64)
            feeds[names[1]] = np.array(cond)
            feeds.update(zip(names[2:], carried))
            outs = body(feeds)
            cond = bool(outs[0].reshape(-1)[0])
            carried = outs[1:1 + self.n_carried]
            for k in range(self.n_scan):
                scans[k].append(outs[1 + self.n_carried + k])
            i += 1
        if i == 0:  # the initial values, as values of their own
            carried = [copy_value(a) for a in carried]
        outs = self.node.outputs[self.n_carried:]
        return carried + [_stack(self.node.label, o.name, s, o.dtype, body, 1 + self.n_carried + k)
                          for k, (o, s) in enumerate(zip(outs, scans))]


def _axes(attrs: dict, key: str, n: int) -> list[int]:
    got = list(attrs.get(key) or [0] * n)
    if len(got) != n:
        raise UnsupportedOp(f"attribute {key} has {len(got)} entries, expected {n}")
    return got


class ScanFlow:
    def __init__(self, node: Node, opsets: dict, compile_body: CompileBody):
        if node.since_version and node.since_version < 9:
            raise UnsupportedOp("Scan-8 (batched, with sequence_lens) is not compiled")
        self.node = node
        m = int(node.attrs["num_scan_inputs"])
        self.n_state = len(node.inputs) - m
        self.in_dirs = _axes(node.attrs, "scan_input_directions", m)
        self.in_axes = _axes(node.attrs, "scan_input_axes", m)
        formal = [(v.dtype, v.shape) for v in node.inputs[:self.n_state]]
        for v, ax in zip(node.inputs[self.n_state:], self.in_axes):
            formal.append((v.dtype, None if v.shape is None else v.shape[1:]))
        self.body = Body(node, node.attrs["body"], formal, opsets, compile_body)
        self.bodies = {"body": self.body}
        k = len(node.outputs) - self.n_state
        self.out_dirs = _axes(node.attrs, "scan_output_directions", k)
        self.out_axes = _axes(node.attrs, "scan_output_axes", k)

    def __call__(self, args: list) -> list:
        n_in, s = len(self.node.inputs), self.n_state
        states = list(args[:s])
        seqs = []
        for x, d, ax in zip(args[s:n_in], self.in_dirs, self.in_axes):
            if not -x.ndim <= ax < x.ndim:
                raise InvalidInput(f"{self.node.label}: scan axis {ax} out of range for a "
                                   f"rank-{x.ndim} input")
            seq = np.moveaxis(x, ax, 0)
            seqs.append(seq[::-1] if d else seq)
        length = seqs[0].shape[0] if seqs else 0
        if any(q.shape[0] != length for q in seqs):
            raise InvalidInput(f"{self.node.label}: scan inputs have different sequence "
                               f"lengths {[q.shape[0] for q in seqs]}")
        body, names = self.body, self.body.formal
        feeds = body.feeds(args)
        elems: list[list] = [[] for _ in self.out_dirs]
        for t in range(length):
            feeds.update(zip(names[:s], states))
            feeds.update((nm, _contiguous(q[t, ...])) for nm, q in zip(names[s:], seqs))
            outs = body(feeds)
            states = outs[:s]
            for k, e in enumerate(elems):
                e.append(outs[s + k])
        if length == 0:
            states = [copy_value(a) for a in states]
        result = list(states)
        for k, (o, e) in enumerate(zip(self.node.outputs[s:], elems)):
            y = _stack(self.node.label, o.name, e[::-1] if self.out_dirs[k] else e, o.dtype,
                       body, s + k)
            ax = self.out_axes[k] % y.ndim
            result.append(np.ascontiguousarray(np.moveaxis(y, 0, ax)) if ax else y)
        return result


# --- SequenceMap: the body per element -------------------------------------------------------

class SequenceMapFlow:
    """SequenceMap: the body compiled as a model (:class:`Body`, as a Loop's), called once per
    element with the i-th element of each sequence input; tensor inputs go to every call."""

    def __init__(self, node: Node, opsets: dict, compile_body, elem: dict):
        self.node = node
        formal = []
        for v in node.inputs:
            if v.dtype is not None:
                formal.append((v.dtype, v.shape))
            else:  # a sequence: its elements' type, any rank (a declared body input wins)
                formal.append((elem.get(id(v)), None))
        self.body = Body(node, node.attrs["body"], formal, opsets, compile_body)
        self.bodies = {"body": self.body}
        #: input position -> element type of the sequence inputs whose type the model fixes
        self.elem = {k: elem[id(v)] for k, v in enumerate(node.inputs) if id(v) in elem}
        if self.body.n_outputs != len(node.outputs):
            raise UnsupportedOp(f"{node.label}: body outputs do not match the node's")

    def __call__(self, args: list) -> list:
        n_in = len(self.node.inputs)
        seqs = {k: sequence(self.node, args[k], f"input {k}", self.elem.get(k))
                for k in range(n_in) if k == 0 or isinstance(args[k], (list, tuple))}
        length = len(seqs[0])
        bad = {k: len(s) for k, s in seqs.items() if len(s) != length}
        if bad:
            raise InvalidInput(f"{self.node.label}: sequence inputs have different lengths "
                               f"(input 0: {length}, then {bad})")
        body, names = self.body, self.body.formal
        feeds = body.feeds(args)
        for k in range(n_in):
            if k not in seqs:
                feeds[names[k]] = args[k]
        outs: list[list] = [[] for _ in self.node.outputs]
        for i in range(length):
            for k, s in seqs.items():
                feeds[names[k]] = s[i]
            for acc, r in zip(outs, body(feeds)):
                acc.append(r)
        return outs


_FLOWS = {"If": IfFlow, "Loop": LoopFlow, "Scan": ScanFlow}

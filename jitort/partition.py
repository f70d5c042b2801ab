"""Partitioning, as ONNX Runtime's execution providers do it.

Every node gets one placement:

* ``HOST``: a shape computation (``Shape``/``Size``, or any node whose inputs are all constants or
  host values). Evaluated once per input-shape signature while planning, never per call.
* a backend name (``"cpu"``...): the first backend in preference order whose ``supports(node)``
  says yes. A node whose *value* inputs (a Reshape's target shape, a Slice's starts...) are
  computed by compiled kernels cannot be planned ahead and is left to the interpreter.
* ``INTERP``: everything else, run by the fallback interpreter.
* ``CONTROL``: set by the CPU runtime afterwards (:func:`jitort.control_flow.claim`) on an
  If / Loop / Scan whose bodies compiled; scheduled as a :class:`ControlStep`.
* ``DYNAMIC``: set by the CPU runtime afterwards (:func:`jitort.dynamic_ops.claim`) on an op
  whose output shape depends on its input values (NonZero, Unique...); scheduled as a
  :class:`DynamicStep`, its compiled kernels writing outputs sized at run time.

Consecutive host and compiled nodes form a :class:`Segment` (one generated driver); interpreter
nodes sit between segments.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .ir import Graph, Node, Value
from .shapes import value_inputs

HOST = "host"
INTERP = "interp"
#: an If / Loop / Scan whose bodies are compiled sub-programs (jitort/control_flow.py)
CONTROL = "control"
#: an op whose output shape depends on input values, run by compiled kernels between segments
#: (jitort/dynamic_ops.py)
DYNAMIC = "dynamic"

#: Host nodes producing more elements than this stay on the data path (planned per shape anyway).
SHAPE_OPS = {"Shape", "Size"}


class Backend(Protocol):
    name: str

    def supports(self, node: Node) -> bool: ...


@dataclass
class Segment:
    """A run of host and compiled nodes lowered into one driver."""

    nodes: list[Node]
    inputs: list[Value] = field(default_factory=list)  # non-constant values read from outside
    outputs: list[Value] = field(default_factory=list)  # values needed after the segment
    value_inputs: list[Value] = field(default_factory=list)  # inputs whose values key the plan
    arg_inputs: list[Value] = field(default_factory=list)  # inputs the driver reads (not only shapes)
    arg_outputs: list[Value] = field(default_factory=list)  # outputs the driver writes (not host values)
    # filled by the runtime: precomputed for the per-call fast path
    input_ids: list[int] = field(default_factory=list)
    arg_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    output_dtypes: list = field(default_factory=list)
    cb: object = None  # the constants arena (uint8 array)


@dataclass
class InterpStep:
    node: Node


@dataclass
class ControlStep(InterpStep):
    """A control-flow node run by the executor, calling its bodies' compiled programs (not a
    segment: like an interpreter step, its outputs land in ``env`` as arrays)."""


@dataclass
class DynamicStep(ControlStep):
    """An op whose output shape depends on its input values (jitort/dynamic_ops.py), run like a
    control step: its flow calls compiled kernels on the input arrays and its outputs, sized
    at run time, land in ``env``; the segments after it are planned per those shapes."""


def assign(graph: Graph, backends: list[Backend], plan_time=()) -> dict[int, str]:
    """Return ``id(node) -> placement``. ``plan_time``: graph inputs whose *values* key the
    plans like host values (a Loop body's iteration number: what it indexes is computed on the
    host, once per iteration value)."""
    placement: dict[int, str] = {}
    host_values: set[int] = {id(v) for v in plan_time} | _small_value_sources(graph, backends)
    for n in graph.nodes:
        ins = [v for v in n.inputs if v is not None]
        if not n.implicit and not _has_subgraph(n) and (
                n.op_type in SHAPE_OPS and n.domain == ""
                or (ins and all(v.is_const or id(v) in host_values for v in ins)
                    and _host_safe(n))):
            placement[id(n)] = HOST
            host_values.update(id(o) for o in n.outputs)
            continue
        placement[id(n)] = INTERP
        if _typed(n):
            for b in backends:
                if b.supports(n):
                    placement[id(n)] = b.name
                    break
    _compile_host_data(graph, placement, backends)
    # a compiled node whose value inputs come from compiled kernels cannot be planned ahead
    producer = {id(o): n for n in graph.nodes for o in n.outputs}
    for n in graph.nodes:
        p = placement[id(n)]
        if p in (HOST, INTERP):
            continue
        for i in value_inputs(n):
            v = n.input(i)
            if v is None or v.is_const:
                continue
            src = producer.get(id(v))
            if src is not None and placement[id(src)] not in (HOST, INTERP, CONTROL, DYNAMIC):
                placement[id(n)] = INTERP
                break
    return placement


#: A graph input of at most this many elements (static shape) whose values reach a value input
#: is a plan-time value (see :func:`_small_value_sources`).
SMALL_VALUE_INPUT = 64


def _small_value_sources(graph: Graph, backends: list[Backend]) -> set[int]:
    """Graph inputs (small, static shape) whose values a value input reads through a chain of
    computations: a window length Cast to float before a Range, a crop shape combined with
    ``Shape(x)`` into a Pad's pads. Read straight, such an input already keys the plan; through
    a compiled Cast or Max its value would come from a kernel and the consumer could not be
    planned. As a host value it keys the plan the same way and the chain runs on the host.
    Only chains the host can compute whole count (constants, Shape / Size, such inputs, through
    nodes without subgraphs or randomness); an input in any other chain stays data. An input
    read straight counts only when no backend compiles its reader (a float16 Range): the reader
    then runs on the host instead of the interpreter."""
    small = {id(v) for v in graph.inputs if not v.is_const and v.shape is not None
             and all(isinstance(d, int) for d in v.shape) and _count(v.shape) <= SMALL_VALUE_INPUT}
    # per value (in topological order): the small inputs it is computed from, None when the
    # host cannot compute it
    src: dict[int, frozenset | None] = {
        id(v): frozenset([id(v)]) if id(v) in small else None for v in graph.inputs}
    empty = frozenset()
    for n in graph.nodes:
        if n.op_type in SHAPE_OPS and n.domain == "":
            got = empty
        elif n.implicit or _has_subgraph(n) or not _host_safe(n):
            got = None
        else:
            got = empty
            for x in n.inputs:
                sx = empty if x is None or x.is_const else src.get(id(x))
                if sx is None:
                    got = None
                    break
                got = got | sx
        for o in n.outputs:
            src[id(o)] = got
    found: set[int] = set()
    for n in graph.nodes:
        compiled = None
        for i in value_inputs(n):
            v = n.input(i)
            if v is None or v.is_const:
                continue
            if id(v) in small:  # read straight: it keys the plan already, its reader
                if compiled is None:  # compiled, unless no backend takes the reader
                    compiled = _typed(n) and any(b.supports(n) for b in backends)
                if compiled:
                    continue
            found |= src.get(id(v)) or empty
    return found


def _count(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _compile_host_data(graph: Graph, placement: dict[int, str], backends: list[Backend]) -> None:
    """Hand host nodes that make *data* (not shapes) for compiled consumers to the backend when
    it can fuse them (``backend.fusible(node)``: elementwise).

    A causal attention mask is such a chain: Equal/LessOrEqual/And/Where over (B, 1, S, S) built
    from shape-derived ranges. On the host it is evaluated on every new shape and its
    temporaries -- four arrays of B*S*S elements -- are fresh pages each time (gpt2 at 8x256:
    ~3 ms of the planning of a new shape). Compiled, it is one fused loop over small host
    operands, rerun per call at memory speed, and its result lives in the workspace. Visited
    consumers first, so a whole chain moves; a node whose output is a graph output, is read by
    a host or interpreted node, or is a compiled node's value input stays on the host.
    """
    consumers: dict[int, list[tuple[Node, int]]] = {}
    for n in graph.nodes:
        for j, v in enumerate(list(n.inputs) + list(n.implicit)):  # j: the input position
            if v is not None:
                consumers.setdefault(id(v), []).append((n, j))
    outputs = {id(v) for v in graph.outputs}
    for n in reversed(graph.nodes):
        if placement[id(n)] != HOST or n.op_type in SHAPE_OPS:
            continue
        uses = [u for o in n.outputs for u in consumers.get(id(o), [])]
        if not uses or any(id(o) in outputs for o in n.outputs):
            continue
        for b in backends:
            fusible = getattr(b, "fusible", None)
            if fusible is None or not fusible(n) or not b.supports(n):
                continue
            if all(placement[id(c)] == b.name and j < len(c.inputs) and j not in value_inputs(c)
                   for c, j in uses):
                placement[id(n)] = b.name
            break


def _has_subgraph(n: Node) -> bool:
    return any(hasattr(a, "node") or (isinstance(a, list) and a and hasattr(a[0], "node"))
               for a in n.attrs.values())


def _host_safe(n: Node) -> bool:
    # sequences and optionals are made by control steps (jitort/sequences.py), not on the host
    return n.op_type not in {"RandomNormal", "RandomUniform", "RandomNormalLike",
                             "RandomUniformLike", "Multinomial", "Bernoulli",
                             "SequenceConstruct", "SequenceInsert", "SplitToSequence",
                             "Optional"}


#: ops whose lowerings skip an omitted output (the importer's untyped ``__unused_`` placeholder
#: for an empty name among the outputs, e.g. an LSTM's Y when only Y_h is wanted)
_SKIPS_OMITTED_OUTPUTS = {"LSTM", "GRU", "RNN", "Attention"}


def _typed(n: Node) -> bool:
    return all(v.dtype is not None for v in n.all_inputs()) and all(
        o.dtype is not None or (n.op_type in _SKIPS_OMITTED_OUTPUTS and n.domain == ""
                                and o.name.startswith("__unused_"))
        for o in n.outputs)


def schedule(graph: Graph, placement: dict[int, str]) -> list[Segment | InterpStep]:
    """Split the topological order into segments and interpreter steps."""
    steps: list[Segment | InterpStep] = []
    for n in graph.nodes:
        if placement[id(n)] == INTERP:
            steps.append(InterpStep(n))
        elif placement[id(n)] == CONTROL:
            steps.append(ControlStep(n))
        elif placement[id(n)] == DYNAMIC:
            steps.append(DynamicStep(n))
        elif steps and isinstance(steps[-1], Segment):
            steps[-1].nodes.append(n)
        else:
            steps.append(Segment([n]))
    # inputs/outputs of each segment
    later_reads: list[set[int]] = [set() for _ in steps]
    acc = {id(v) for v in graph.outputs}
    for i in range(len(steps) - 1, -1, -1):
        later_reads[i] = set(acc)
        step = steps[i]
        nodes = step.nodes if isinstance(step, Segment) else [step.node]
        for n in nodes:
            acc.update(id(v) for v in n.all_inputs())
    for i, step in enumerate(steps):
        if not isinstance(step, Segment):
            continue
        produced = {id(o) for n in step.nodes for o in n.outputs}
        seen = set()
        for n in step.nodes:
            vin = set(value_inputs(n)) if placement[id(n)] != HOST else set()
            for j, v in enumerate(n.inputs):
                if v is None or v.is_const or id(v) in produced:
                    continue
                if id(v) not in seen:
                    seen.add(id(v))
                    step.inputs.append(v)
                if (j in vin or placement[id(n)] == HOST and n.op_type not in SHAPE_OPS) \
                        and v not in step.value_inputs:
                    step.value_inputs.append(v)
        step.outputs = [o for n in step.nodes for o in n.outputs if id(o) in later_reads[i]]
        # tensors read only by host nodes (evaluated while planning) never reach the driver
        # (their dtype may be one Numba cannot type, e.g. float16); host-valued outputs travel
        # as plan exports, not arrays
        data_reads = {id(v) for n in step.nodes if placement[id(n)] != HOST
                      for v in n.all_inputs()}
        step.arg_inputs = [v for v in step.inputs if id(v) in data_reads]
        host_made = {id(o) for n in step.nodes if placement[id(n)] == HOST for o in n.outputs}
        step.arg_outputs = [v for v in step.outputs if id(v) not in host_made]
    return steps

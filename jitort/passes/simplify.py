"""Graph clean-up passes: identities, constant folding, CSE, dead code."""
from __future__ import annotations

import numpy as np

from ..errors import JitortError
from ..ir import Graph, Node, Value, const_value

#: Ops whose result is not a function of their inputs: never fold or merge them.
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Multinomial", "Bernoulli"}
#: Largest constant (elements) constant folding may create.
FOLD_LIMIT = 1 << 22


def _is_pure(n: Node) -> bool:
    return (n.op_type not in NONDETERMINISTIC and not n.implicit
            and not any(hasattr(a, "node") or (isinstance(a, list) and a and hasattr(a[0], "node"))
                        for a in n.attrs.values()))


def eliminate_identities(g: Graph) -> int:
    """Drop Identity, inference-mode Dropout and no-op Casts by rewiring their readers."""
    out_ids = g.output_ids()
    consumers = g.consumers()
    removed = 0
    keep = []
    for n in g.nodes:
        src = _identity_source(n, consumers)
        if src is None:
            keep.append(n)
            continue
        dst = n.outputs[0]
        if id(dst) in out_ids and (id(src) in out_ids or src in g.inputs):
            keep.append(n)  # an output that must stay a distinct tensor
            continue
        g.replace_uses(dst, src)
        removed += 1
    g.nodes = keep
    return removed


def sum_as_add(g: Graph) -> int:
    """A two-input Sum becomes an Add (the same broadcasting, from opset 8; Sum-6 required
    equal shapes), so that the Add patterns see it: some exporters write a residual
    connection as Sum (light ResNet-50: 16 Sum + Relu kernels, 0.87 ms a run at one thread,
    until ``fuse_epilogues`` folded them into the convolutions). A one-input Sum is an
    identity (``eliminate_identities``)."""
    count = 0
    opset = g.opsets.get("", 17)
    for i, n in enumerate(g.nodes):
        if n.op_type != "Sum" or n.domain or len(n.inputs) != 2 or None in n.inputs:
            continue
        g.nodes[i] = Node("Add", list(n.inputs), list(n.outputs), {}, "", n.name,
                          14 if opset >= 14 else 7)
        count += 1
    if count:
        g.relink()
    return count


def channel_prelu_slope(g: Graph) -> int:
    """PRelu before opset 7 whose 1-D constant slope of C values does not broadcast to X from
    the right (PyTorch's multi-parameter PReLU: X (N, C, ...), slope (C,)): the slope becomes
    that many values along the one dim of X of size C, (C, 1, ..., 1), the reading onnx.reference
    and onnxruntime give it. X needs a static shape; a slope matching no dim or several is
    left alone (the node then fails its shape check with a clear error)."""
    count = 0
    for n in g.nodes:
        if n.op_type != "PRelu" or n.domain or n.since_version >= 7 or len(n.inputs) != 2:
            continue
        x, slope = n.inputs
        if x is None or slope is None or not slope.is_const or slope.const.ndim != 1:
            continue
        if x.shape is None or not all(isinstance(d, int) for d in x.shape):
            continue
        c = slope.const.shape[0]
        if len(x.shape) < 2 or x.shape[-1] == c or c == 1:
            continue  # broadcasts from the right as it is
        at = [k for k, d in enumerate(x.shape) if d == c]
        if len(at) != 1:
            continue
        shape = [c if k == at[0] else 1 for k in range(at[0], len(x.shape))]
        n.inputs[1] = const_value(g.fresh_name(slope.name + "_channels"),
                                  slope.const.reshape(shape))
        count += 1
    return count


def _identity_source(n: Node, consumers) -> Value | None:
    if n.domain != "" or not n.inputs or n.inputs[0] is None:
        return None
    x = n.inputs[0]
    if n.op_type == "Identity" and x.dtype is not None:
        return x
    if n.op_type == "Dropout":
        mask_used = len(n.outputs) > 1 and consumers.get(id(n.outputs[1]))
        training = n.input(2)
        if mask_used or (training is not None and not (training.is_const and not training.const.any())):
            return None
        if n.attrs.get("is_test", 1) == 0 and n.since_version < 7:
            return None
        return x
    if n.op_type == "Cast" and x.dtype is not None and n.outputs[0].dtype == x.dtype:
        return x
    if (n.op_type == "Sum" and len(n.inputs) == 1 and x.dtype is not None
            and n.outputs[0].dtype == x.dtype):
        return x
    if n.op_type == "Transpose":
        q = _composed_perm(n)
        if q is not None and q == list(range(len(q))):  # a transpose undone by the next one
            return x.producer.inputs[0]
    return None


def _perm(n: Node) -> list[int] | None:
    p = n.attrs.get("perm")
    if p:
        return [int(v) for v in p]
    x = n.inputs[0]
    return None if x.shape is None else list(range(len(x.shape)))[::-1]


def _composed_perm(n: Node) -> list[int] | None:
    """The perm of ``n`` (a Transpose) applied straight to the input of the Transpose that
    produces its input, or None when its input is not a Transpose's."""
    t = n.inputs[0].producer
    if t is None or t.op_type != "Transpose" or t.domain or t.inputs[0] is None:
        return None
    p1, p2 = _perm(t), _perm(n)
    if p1 is None or p2 is None or len(p1) != len(p2):
        return None
    return [p1[k] for k in p2]


def fold_transposes(g: Graph) -> int:
    """Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2]) (and nothing at all when that
    is the identity: ``eliminate_identities``), e.g. a channels-last region's Transpose back
    to NCHW followed by an exporter's permute to NHWC. The inner Transpose stays while it has
    other readers."""
    count = 0
    for n in g.nodes:
        if n.op_type != "Transpose" or n.domain:
            continue
        q = _composed_perm(n)
        if q is None or q == list(range(len(q))):
            continue
        n.inputs = [n.inputs[0].producer.inputs[0]] + n.inputs[1:]
        n.attrs = dict(n.attrs, perm=q)
        n.proto = None
        count += 1
    return count


def fold_constants(g: Graph) -> int:
    """Evaluate nodes whose inputs are all constants (via the interpreter) into constants."""
    from ..interpreter import make_runner  # the interpreter is the reference for folding

    folded = 0
    keep = []
    repl: dict[int, Value] = {}  # folded value -> its constant (nodes are in topological order)
    for n in g.nodes:
        if repl:
            n.inputs = [repl.get(id(v), v) if v is not None else None for v in n.inputs]
            n.implicit = [repl.get(id(v), v) for v in n.implicit]
        ins = [v for v in n.inputs if v is not None]
        if not (_is_pure(n) and all(v.is_const for v in ins)
                and all(v.const.size <= FOLD_LIMIT for v in ins)):
            keep.append(n)
            continue
        try:
            results = make_runner(n, g.opsets)([None if v is None else v.const for v in n.inputs])
        except JitortError:
            keep.append(n)
            continue
        if not all(isinstance(r, np.ndarray) and r.dtype != object and r.size <= FOLD_LIMIT
                   for r in results):
            keep.append(n)
            continue
        for out, r in zip(n.outputs, results):
            repl[id(out)] = const_value(out.name, r)
        folded += 1
    g.nodes = keep
    if repl:  # one pass for the graph outputs (node inputs were rewritten on the way)
        g.outputs = [repl.get(id(v), v) for v in g.outputs]
    return folded


def eliminate_common_subexpressions(g: Graph) -> int:
    """Merge equal small constants, then nodes with the same op, inputs and attributes."""
    merged = 0
    by_bytes: dict[tuple, Value] = {}
    for n in g.nodes:
        for i, v in enumerate(n.inputs):
            if v is None or not v.is_const or v.const.size > 1024 or v.const.dtype == object:
                continue
            key = (v.const.dtype.str, v.const.shape, v.const.tobytes())
            first = by_bytes.setdefault(key, v)
            if first is not v:
                n.inputs[i] = first
                merged += 1
    seen: dict[tuple, Node] = {}
    keep = []
    for n in g.nodes:
        if not _is_pure(n):
            keep.append(n)
            continue
        key = (n.op_type, n.domain, n.since_version, tuple(id(v) for v in n.inputs),
               _attrs_key(n.attrs), len(n.outputs))
        other = seen.get(key)
        if other is None:
            seen[key] = n
            keep.append(n)
            continue
        for mine, theirs in zip(n.outputs, other.outputs):
            g.replace_uses(mine, theirs)
        merged += 1
    g.nodes = keep
    return merged


def _attrs_key(attrs: dict) -> tuple:
    items = []
    for k, v in sorted(attrs.items()):
        if isinstance(v, np.ndarray):
            v = (v.dtype.str, v.shape, v.tobytes())
        elif hasattr(v, "SerializeToString"):  # a TypeProto (Optional's type), a graph
            v = (type(v).__name__, v.SerializeToString())
        elif isinstance(v, list):
            v = tuple((x.dtype.str, x.shape, x.tobytes()) if isinstance(x, np.ndarray) else x
                      for x in v)
        items.append((k, v))
    return tuple(items)


def eliminate_dead_code(g: Graph) -> int:
    """Remove nodes none of whose outputs reach a graph output."""
    live = g.output_ids()
    keep = []
    for n in reversed(g.nodes):
        if any(id(o) in live for o in n.outputs):
            keep.append(n)
            live.update(id(v) for v in n.all_inputs())
    removed = len(g.nodes) - len(keep)
    g.nodes = keep[::-1]
    return removed

"""Epilogue fusion: what follows a GEMM or a convolution folded into its output pass.

The activations the fused kernels compute (``EPILOGUE_ACTIVATIONS`` and the formulas
exporters write for GELU, its tanh approximation and SiLU) are matched here; the rewrite
itself is :func:`fuse_epilogues` (``fuse_epilogues_half`` on the CUDA pipeline). Same safety
rule as :mod:`.patterns`: every intermediate removed has one reader and is not a graph
output.
"""
from __future__ import annotations

import logging

import numpy as np

from ..ir import Graph, Node, Value, const_value
from .patterns import _FLOATS, _HALF_FLOATS, JITORT_DOMAIN, _is_float_value, _single_use

log = logging.getLogger("jitort.passes")

#: Activations a fused epilogue applies (the kernels' ``epilogue`` codes; Gelu is the erf form;
#: Swish ``x * sigmoid(alpha * x)`` also as the Sigmoid + Mul that SiLU exports to).
EPILOGUE_ACTIVATIONS = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Gelu", "Swish",
                        "HardSigmoid", "HardSwish")
_SQRT2 = 1.4142135623730951
_SQRT2_PI = 0.7978845608028654  # GELU's tanh approximation: sqrt(2 / pi), and its cubic term
_GELU_CUBIC = 0.044715
#: Clip-6's defaults (attributes min/max): the float32 range, not infinity.
_CLIP6_MAX = float(np.finfo(np.float32).max)


def _scalar_const(v: Value | None, ref: Value) -> float | None:
    """The value of a one-element constant of ``ref``'s dtype that broadcasts against ``ref``
    without changing its shape (rank at most ``ref``'s), else None."""
    if v is None or not v.is_const or v.const.size != 1 or v.const.dtype != ref.dtype:
        return None
    if v.const.ndim and (ref.shape is None or v.const.ndim > len(ref.shape)):
        return None
    return float(v.const.reshape(-1)[0])


def _close(a: float | None, b: float, rtol: float = 1e-6) -> bool:
    return a is not None and abs(a - b) <= rtol * abs(b)


def _tolerance(v: Value) -> float:
    """How close a constant of ``v``'s dtype must be to a formula's constant: 1e-6, or the
    dtype's rounding where that is coarser (float16's 1/sqrt(2) is 1e-4 off)."""
    return max(1e-6, float(np.finfo(np.dtype(v.dtype)).eps))


def _user(g: Graph, v: Value, consumers, op: str) -> Node | None:
    """The only reader of ``v`` (not a graph output) if it is a default-domain ``op``."""
    u = _single_use(g, v, consumers)
    if u is None or u.op_type != op or u.domain or len(u.outputs) != 1:
        return None
    if u.outputs[0].dtype != v.dtype:
        return None
    return u


def _binary_other(n: Node, v: Value) -> Value | None:
    """The other operand of a two-input node reading ``v`` once, else None."""
    if len(n.inputs) != 2 or any(x is None for x in n.inputs):
        return None
    a, b = n.inputs
    if a is v and b is not v:
        return b
    if b is v and a is not v:
        return a
    return None


def _match_gelu_erf(g: Graph, y: Value, consumers) -> tuple[Node, list[Node]] | None:
    """``0.5 * y * (1 + Erf(y / sqrt(2)))`` as exporters write it (torch's nn.GELU: Div by
    sqrt(2) or Mul by 1/sqrt(2), Erf, Add 1, then the product of y, that and 0.5 in any
    association and operand order). Returns (last node, every node of the pattern)."""
    users = consumers.get(id(y), [])
    if len(users) != 2 or id(y) in g.output_ids():
        return None
    tol = _tolerance(y)

    def only(v: Value, node: Node) -> bool:  # v is read by ``node`` alone, not a graph output
        return _single_use(g, v, consumers) is node

    for scale, other in (users, users[::-1]):
        if scale.domain or len(scale.outputs) != 1 or len(scale.inputs) != 2:
            continue
        if scale.op_type == "Div" and scale.inputs[0] is y:
            if not _close(_scalar_const(scale.inputs[1], y), _SQRT2, tol):
                continue
        elif scale.op_type == "Mul":
            c = _binary_other(scale, y)
            if not _close(_scalar_const(c, y), 1 / _SQRT2, tol):
                continue
        else:
            continue
        erf = _user(g, scale.outputs[0], consumers, "Erf")
        add1 = erf and _user(g, erf.outputs[0], consumers, "Add")
        if not add1 or not _close(_scalar_const(_binary_other(add1, erf.outputs[0]), y), 1.0, tol):
            continue
        t = add1.outputs[0]  # 1 + erf(y / sqrt 2)
        if other.op_type != "Mul" or other.domain or len(other.outputs) != 1:
            continue
        o = _binary_other(other, y)
        if o is None:
            continue
        mid = other.outputs[0]
        pre = [scale, erf, add1]
        if o is t:  # (y * t) * 0.5
            last = _user(g, mid, consumers, "Mul")
            if last and only(t, other) and _close(
                    _scalar_const(_binary_other(last, mid), y), 0.5, tol):
                return last, pre + [other, last]
        elif _close(_scalar_const(o, y), 0.5, tol):  # (y * 0.5) * t
            last = _user(g, mid, consumers, "Mul")
            if last and _binary_other(last, mid) is t and only(t, last):
                return last, pre + [other, last]
        elif o.producer is not None and only(t, o.producer) and only(o, other):  # y * (t * 0.5)
            half = o.producer
            if (half.op_type == "Mul" and not half.domain and half.outputs == [o]
                    and _close(_scalar_const(_binary_other(half, t), y), 0.5, tol)):
                return other, pre + [half, other]
    return None


def _match_gelu_tanh(g: Graph, y: Value, consumers) -> list[Node] | None:
    """``0.5 * y * (1 + Tanh(sqrt(2/pi) * (y + 0.044715 * Pow(y, 3))))`` as GPT-2's exports
    write it (operands in any order; the 0.5 on y, on the sum, or on the product last). The
    nodes of the pattern, the last one producing the activated value; each intermediate read
    once and not a graph output."""
    users = consumers.get(id(y), [])
    if len(users) != 3 or id(y) in g.output_ids():
        return None
    tol = _tolerance(y)

    def scaled(v: Value, op: str, c: float) -> Node | None:  # the one ``op(v, c)`` reading v
        u = _user(g, v, consumers, op)
        if u is None:
            return None
        return u if _close(_scalar_const(_binary_other(u, v), y), c, tol) else None

    pow3 = next((u for u in users if u.op_type == "Pow" and not u.domain and len(u.inputs) == 2
                 and u.inputs[0] is y and _close(_scalar_const(u.inputs[1], y), 3.0, tol)),
                None)
    cube = pow3 and scaled(pow3.outputs[0], "Mul", _GELU_CUBIC)
    inner = cube and _user(g, cube.outputs[0], consumers, "Add")
    if not inner or inner not in users or _binary_other(inner, y) is not cube.outputs[0]:
        return None
    arg = scaled(inner.outputs[0], "Mul", _SQRT2_PI)
    th = arg and _user(g, arg.outputs[0], consumers, "Tanh")
    plus = th and scaled(th.outputs[0], "Add", 1.0)
    if not plus:
        return None
    pre = [pow3, cube, inner, arg, th, plus]
    t = plus.outputs[0]                          # 1 + tanh(...)

    def only(v: Value, node: Node) -> bool:     # v is read by ``node`` alone, not an output
        return _single_use(g, v, consumers) is node

    rest = [u for u in users if u is not pow3 and u is not inner]
    last_y = rest[0] if len(rest) == 1 else None
    if (last_y is None or last_y.op_type != "Mul" or last_y.domain
            or len(last_y.outputs) != 1 or last_y.outputs[0].dtype != y.dtype):
        return None
    o = _binary_other(last_y, y)
    if o is t:                                   # (y * t) * 0.5
        last = only(t, last_y) and scaled(last_y.outputs[0], "Mul", 0.5)
        return pre + [last_y, last] if last else None
    if _close(_scalar_const(o, y), 0.5, tol):    # (y * 0.5) * t
        last = _user(g, last_y.outputs[0], consumers, "Mul")
        if last and _binary_other(last, last_y.outputs[0]) is t and only(t, last):
            return pre + [last_y, last]
        return None
    half = scaled(t, "Mul", 0.5)                 # y * (t * 0.5)
    if half is not None and o is half.outputs[0] and only(o, last_y):
        return pre + [half, last_y]
    return None


def _match_silu(g: Graph, y: Value, consumers) -> list[Node] | None:
    """``Mul(y, Sigmoid(y))`` (either operand order), as torch exports ``nn.SiLU``: the
    Sigmoid and the Mul, the Sigmoid's output read by the Mul alone."""
    users = consumers.get(id(y), [])
    if len(users) != 2 or id(y) in g.output_ids():
        return None
    for sig, mul in (users, users[::-1]):
        if (sig.op_type == "Sigmoid" and not sig.domain and len(sig.outputs) == 1
                and _user(g, sig.outputs[0], consumers, "Mul") is mul
                and _binary_other(mul, y) is sig.outputs[0]
                and mul.outputs[0].dtype == y.dtype):
            return [sig, mul]
    return None


def _match_activation(g: Graph, y: Value, consumers, floats: tuple = _FLOATS
                      ) -> tuple[str, list[float], list[Node]] | None:
    """An activation applied to ``y`` alone that the fused epilogues compute:
    ``(name, [alpha, beta], nodes)``; the last of ``nodes`` produces the activated value."""
    if not _is_float_value(y, floats):
        return None
    gelu = _match_gelu_erf(g, y, consumers)
    if gelu is not None:
        return "Gelu", [0.0, 0.0], gelu[1]
    silu = _match_silu(g, y, consumers)
    if silu is not None:
        return "Swish", [1.0, 0.0], silu
    gelu_tanh = _match_gelu_tanh(g, y, consumers)
    if gelu_tanh is not None:
        return "GeluTanh", [0.0, 0.0], gelu_tanh
    a = _single_use(g, y, consumers)
    if (a is None or a.domain or a.op_type not in EPILOGUE_ACTIVATIONS or len(a.outputs) != 1
            or a.inputs[0] is not y or a.outputs[0].dtype != y.dtype):
        return None
    op = a.op_type
    if op in ("Relu", "Sigmoid", "Tanh"):
        return op, [0.0, 0.0], [a]
    if op == "Swish":
        return op, [float(a.attrs.get("alpha", 1.0)), 0.0], [a]
    if op == "HardSigmoid":
        return op, [float(a.attrs.get("alpha", 0.2)), float(a.attrs.get("beta", 0.5))], [a]
    if op == "HardSwish":
        return op, [0.0, 0.0], [a]
    if op == "LeakyRelu":
        return op, [float(a.attrs.get("alpha", 0.01)), 0.0], [a]
    if op == "Gelu":
        approx = a.attrs.get("approximate", "none")
        if approx not in ("none", "tanh"):
            return None
        return ("Gelu" if approx == "none" else "GeluTanh"), [0.0, 0.0], [a]
    # Clip: bounds are attributes before opset 11, optional constant inputs from 11 on
    if a.since_version < 11:
        lo = float(a.attrs.get("min", -_CLIP6_MAX))
        hi = float(a.attrs.get("max", _CLIP6_MAX))
    else:
        bounds = []
        for i, default in ((1, -np.inf), (2, np.inf)):
            v = a.input(i)
            if v is None:
                bounds.append(float(default))
                continue
            c = _scalar_const(v, y)
            if c is None:
                return None
            bounds.append(c)
        lo, hi = bounds
    if np.isnan(lo) or np.isnan(hi) or lo > hi:
        return None
    return op, [lo, hi], [a]


def _same_static_shape(a: Value, b: Value) -> bool:
    """Statically equal shapes: every dim the same int, or the same symbol."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return False
    return all(x is not None and type(x) is type(y) and x == y for x, y in zip(a.shape, b.shape))


def _conv_candidate(n: Node, floats: tuple = _FLOATS) -> bool:
    """A float Conv (1-D or 2-D) the fused CPU/CUDA kernels take."""
    if n.op_type != "Conv" or n.domain or len(n.outputs) != 1 or len(n.inputs) < 2:
        return False
    x, w, b = n.inputs[0], n.inputs[1], n.input(2)
    if not (_is_float_value(x, floats) and _is_float_value(n.outputs[0], floats)) or w is None:
        return False
    if w.shape is None or len(w.shape) not in (3, 4):
        return False
    return all(v is None or v.dtype == x.dtype for v in (w, b, n.outputs[0]))


def _gemm_is_matmul_bias(n: Node, floats: tuple = _FLOATS, trans_b: bool = False) -> bool:
    """Whether a ``Gemm`` is a ``jitort.MatMulBias``: A not transposed, alpha 1, B a constant
    matrix (``transB`` only where ``trans_b``: B is then copied transposed), C absent or a
    constant broadcast along the rows (a scalar, (N,) or (1, N)) with beta 1."""
    if n.op_type != "Gemm" or n.domain or len(n.outputs) != 1 or len(n.inputs) < 2:
        return False
    trans = n.attrs.get("transB", 0)
    a, b, c, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    if ((trans and not trans_b) or not _is_float_value(y, floats) or a is None
            or a.dtype != y.dtype or b is None or not b.is_const or b.const.ndim != 2
            or b.const.dtype != y.dtype or n.attrs.get("transA", 0)
            or float(n.attrs.get("alpha", 1.0)) != 1.0):
        return False
    if c is None:
        return True
    cols = b.const.shape[0 if trans else 1]
    return (c.is_const and c.const.dtype == y.dtype and c.const.ndim <= 2
            and float(n.attrs.get("beta", 1.0)) == 1.0
            and not (c.const.ndim == 2 and c.const.shape[0] != 1)
            and c.const.shape[-1:] in ((), (1,), (cols,)))


def _matmul_bias_inputs(g: Graph, n: Node) -> list[Value]:
    """The inputs ``[A, B, bias]`` of the MatMulBias a Gemm is (:func:`_gemm_is_matmul_bias`):
    B transposed and the bias broadcast to a row as constants of their own where needed."""
    a, b, c = n.inputs[0], n.inputs[1], n.input(2)
    w = b.const.T if n.attrs.get("transB", 0) else b.const
    cols = w.shape[1]
    bias = (np.zeros(cols, w.dtype) if c is None
            else np.broadcast_to(c.const.reshape(-1), (cols,)))
    w_v = b if w is b.const else const_value(g.fresh_name(b.name), np.ascontiguousarray(w))
    return [a, w_v, const_value(g.fresh_name(f"{n.name or 'gemm'}_bias"),
                                np.ascontiguousarray(bias))]


def _through_reshape(g: Graph, y: Value, consumers, claimed: set, floats: tuple):
    """``(reshape, activation)`` where ``y``'s one reader is a Reshape whose output is
    activated (elementwise, so the activation may run before the Reshape), else None."""
    r = _single_use(g, y, consumers)
    if (r is None or r.op_type != "Reshape" or r.domain or r.inputs[0] is not y
            or id(r) in claimed or len(r.outputs) != 1):
        return None
    act = _match_activation(g, r.outputs[0], consumers, floats)
    return None if act is None else (r, act)


def _product_epilogue(g: Graph, n: Node, gemm: bool, consumers, claimed: set,
                      floats: tuple) -> tuple[list, list] | None:
    """``(matched nodes, nodes in their place)`` for a MatMulBias without activation, or a
    Gemm that is one (``gemm``), followed by an activation, maybe across a Reshape; None
    where nothing follows."""
    if n.attrs.get("activation", ""):
        return None
    y = n.outputs[0]
    via = None
    act = _match_activation(g, y, consumers, floats)
    if act is None:
        via, act = _through_reshape(g, y, consumers, claimed, floats) or (None, None)
    if act is None or any(id(m) in claimed for m in act[2]):
        return None
    name, params, chain = act
    ins, attrs = (_matmul_bias_inputs(g, n), {}) if gemm else (list(n.inputs), dict(n.attrs))
    attrs.update(activation=name, activation_params=params)
    out = chain[-1].outputs[0]
    mid = out if via is None else Value(g.fresh_name(y.name), y.dtype, y.shape)
    fused = [Node("MatMulBias", ins, [mid], attrs, JITORT_DOMAIN, n.name,
                  1 if gemm else n.since_version)]
    if via is not None:  # the Reshape moves after the activation, same shape input
        fused.append(Node("Reshape", [mid] + via.inputs[1:], [out], dict(via.attrs),
                          via.domain, via.name, via.since_version))
        chain = [via] + chain
    return [n] + chain, fused


def _conv_epilogue(g: Graph, n: Node, consumers, claimed: set,
                   floats: tuple) -> tuple[list, list] | None:
    """``(matched nodes, [FusedConv])`` for a Conv (or a residual-only FusedConv) followed by
    a residual Add and/or an activation; None where neither follows."""
    y = n.outputs[0]
    chain = [n]
    residual = None
    add = _single_use(g, y, consumers) if n.op_type == "Conv" else None
    if (add is not None and add.op_type == "Add" and not add.domain
            and len(add.outputs) == 1 and id(add) not in claimed):
        other = _binary_other(add, y)
        if (other is not None and other.dtype == y.dtype and _same_static_shape(other, y)
                and add.outputs[0].dtype == y.dtype):
            residual = other
            chain.append(add)
    act = _match_activation(g, chain[-1].outputs[0], consumers, floats)
    if act is not None and any(id(m) in claimed for m in act[2]):
        act = None
    if residual is None and act is None:
        return None
    name, params, tail = act if act is not None else ("", [0.0, 0.0], [])
    chain += tail
    if n.op_type == "FusedConv":  # a residual-only FusedConv gains its activation
        ins = list(n.inputs)
    else:
        ins = [n.inputs[0], n.inputs[1], n.input(2)] + ([residual] if residual else [])
    attrs = dict(n.attrs, activation=name, activation_params=params)
    return chain, [Node("FusedConv", ins, [chain[-1].outputs[0]], attrs, JITORT_DOMAIN,
                        n.name, 1)]


def fuse_epilogues(g: Graph, floats: tuple = _FLOATS, gemm_trans_b: bool = False) -> int:
    """Fold what follows a GEMM or a convolution into its output pass (the kernels' epilogue).

    * ``Conv [-> Add(conv, residual)] [-> activation]`` -> ``jitort.FusedConv(x, W, B,
      [residual])`` with the Conv's attributes plus ``activation`` and ``activation_params``
      (``[alpha, beta]``: LeakyRelu's slope, Clip's bounds). The residual must have statically
      the conv output's shape (no broadcast) and dtype.
    * ``jitort.MatMulBias`` (no activation yet) ``-> activation`` -> the same node with
      ``activation`` set; a ``Gemm`` that is a MatMulBias (:func:`_gemm_is_matmul_bias`)
      likewise, when an activation follows it. A ``Reshape`` between the product and the
      activation stays, after the fused node (GPT-2's linears: Gemm, Reshape, GELU). A Gemm
      reading B transposed (torch's Linear) only where ``gemm_trans_b`` (the CUDA pipeline,
      where the fusion saves a kernel launch and a pass over the output; on the CPU the
      elementwise fuser already runs the activation cache-hot, and the weight's transposed
      copy would cost compile time and memory).

    Activations: Relu, LeakyRelu, Clip (constant bounds), Sigmoid, Tanh, Gelu (the opset-20 op
    with ``approximate="none"``, or the erf formula torch exports), GeluTanh (GELU's tanh
    approximation: the op with ``approximate="tanh"``, or GPT-2's formula), Swish (the
    opset-24 op, or SiLU's ``Mul(y, Sigmoid(y))``), HardSigmoid, HardSwish. Every
    intermediate must have one reader and not be a graph output; the fused node takes the last
    node's place in the order and produces its output value, so output names stay.
    ``floats``: the dtypes fused (float32 and float64; :func:`fuse_epilogues_half` adds
    float16).
    """
    consumers = g.consumers()
    claimed: set[int] = set()
    replace: dict[int, list] = {}  # id(last node of a pattern) -> the nodes in its place
    for n in g.nodes:
        if id(n) in claimed:
            continue
        gemm = _gemm_is_matmul_bias(n, floats, gemm_trans_b)
        if (n.op_type == "MatMulBias" and n.domain == JITORT_DOMAIN) or gemm:
            found = _product_epilogue(g, n, gemm, consumers, claimed, floats)
        elif _conv_candidate(n, floats) or (n.op_type == "FusedConv" and n.domain == JITORT_DOMAIN
                                            and not n.attrs.get("activation", "")):
            found = _conv_epilogue(g, n, consumers, claimed, floats)
        else:
            continue
        if found is not None:
            chain, fused = found
            claimed.update(id(m) for m in chain)
            replace[id(chain[-1])] = fused
    if not replace:
        return 0
    nodes = []
    for n in g.nodes:
        if id(n) in replace:
            nodes.extend(replace[id(n)])
        elif id(n) not in claimed:
            nodes.append(n)
    g.nodes = nodes
    g.relink()
    log.info("fused epilogues: %d", len(replace))
    return len(replace)


def fuse_epilogues_half(g: Graph) -> int:
    """:func:`fuse_epilogues` for the CUDA pipeline: float16 convolutions and products too
    (bias, residual and activation computed in float32 on the accumulator, one rounding to
    float16 at the store, where the unfused graph rounds after each op), and Gemms reading B
    transposed."""
    return fuse_epilogues(g, _HALF_FLOATS, gemm_trans_b=True)

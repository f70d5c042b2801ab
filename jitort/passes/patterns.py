"""Pattern rewrites: Pad folding into Conv/pool pads, Conv+BatchNormalization folding, MatMul+Add -> Gemm-like, epilogue fusion
(bias, residual Add and activation folded into the GEMM/Conv output pass).

Each rewrite follows ORT's safety rule: the intermediate being removed must have exactly one
consumer and must not be a graph output.
"""
from __future__ import annotations

import logging

import numpy as np

from ..ir import Graph, Node, Value, const_value

log = logging.getLogger("jitort.passes")

#: Custom ops created by rewrites live in this domain; the CPU backend always claims them.
JITORT_DOMAIN = "jitort"


def auto_pad(n: Node) -> str:
    """A Conv / pool node's ``auto_pad`` as a str (onnx gives bytes or str; "NOTSET" when
    absent)."""
    a = n.attrs.get("auto_pad", "NOTSET")
    return a.decode() if isinstance(a, bytes) else a


def _single_use(g: Graph, v: Value, consumers) -> Node | None:
    users = consumers.get(id(v), [])
    if len(users) != 1 or id(v) in g.output_ids():
        return None
    return users[0]


def _drop_nodes(g: Graph, drop: set[int], count: int, what: str) -> int:
    """After a pass rewrote ``count`` matches: the graph without the nodes in ``drop`` (ids),
    relinked, and the count logged as ``what``; returns ``count``."""
    if count:
        g.nodes = [n for n in g.nodes if id(n) not in drop]
        g.relink()
        log.info("%s: %d", what, count)
    return count


def fold_conv_batchnorm(g: Graph) -> int:
    """Conv(x, W, b) -> BatchNormalization(scale, B, mean, var) becomes Conv(x, W', b')."""
    consumers = g.consumers()
    drop: set[int] = set()
    count = 0
    for conv in g.nodes:
        if conv.op_type != "Conv" or conv.domain or len(conv.outputs) != 1:
            continue
        w, b = conv.input(1), conv.input(2)
        if w is None or not w.is_const or (b is not None and not b.is_const):
            continue
        if w.const.dtype not in (np.float32, np.float64):
            continue
        bn = _single_use(g, conv.outputs[0], consumers)
        if (bn is None or bn.op_type != "BatchNormalization" or bn.domain or len(bn.outputs) != 1
                or bn.inputs[0] is not conv.outputs[0] or bn.attrs.get("training_mode", 0)):
            continue
        params = bn.inputs[1:5]
        if len(params) != 4 or not all(p is not None and p.is_const for p in params):
            continue
        scale, bias, mean, var = (p.const.astype(np.float64) for p in params)
        eps = float(bn.attrs.get("epsilon", 1e-5))
        m = w.const.shape[0]
        if any(a.shape != (m,) for a in (scale, bias, mean, var)):
            continue
        factor = scale / np.sqrt(var + eps)
        new_w = (w.const.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.const.ndim - 1)))
        old_b = b.const.astype(np.float64) if b is not None else np.zeros(m)
        new_b = (old_b - mean) * factor + bias
        dt = w.const.dtype
        w2 = const_value(g.fresh_name(w.name), new_w.astype(dt))
        b2 = const_value(g.fresh_name(f"{conv.name or 'conv'}_bias"), new_b.astype(dt))
        conv.inputs = [conv.inputs[0], w2, b2]
        conv.proto = None
        g.replace_uses(bn.outputs[0], conv.outputs[0])
        drop.add(id(bn))
        count += 1
    if count:
        g.nodes = [n for n in g.nodes if id(n) not in drop]
        log.info("fused Conv+BN: %d", count)
    return count


def _pad_fold_params(pad: Node) -> tuple[list[int], float, int] | None:
    """(pads, constant value, rank) of a constant-mode Pad whose pads, value and axes are
    constants, with the axes resolved to a full ``[begins..., ends...]`` list; else None."""
    mode = pad.attrs.get("mode", "constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant" or len(pad.outputs) != 1:
        return None
    x = pad.inputs[0]
    if pad.since_version >= 11:
        pv, cv = pad.input(1), pad.input(2)
        av = pad.input(3) if pad.since_version >= 18 else None
        if pv is None or not pv.is_const or any(v is not None and not v.is_const for v in (cv, av)):
            return None
        pads = [int(p) for p in pv.const.reshape(-1)]
        if cv is not None and cv.const.size > 1:
            return None
        value = float(cv.const.reshape(-1)[0]) if cv is not None and cv.const.size else 0.0
        axes = None if av is None else [int(a) for a in av.const.reshape(-1)]
    else:
        pads = [int(p) for p in pad.attrs.get("pads", pad.attrs.get("paddings", []))]
        value = float(pad.attrs.get("value", 0.0))
        axes = None
    if axes is None:
        rank = len(pads) // 2
    else:
        if x.shape is None:
            return None
        rank = len(x.shape)
        if len(pads) != 2 * len(axes) or any(not -rank <= a < rank for a in axes):
            return None
        full = [0] * (2 * rank)
        for i, a in enumerate(axes):
            full[a % rank], full[a % rank + rank] = pads[i], pads[i + len(axes)]
        pads = full
    if len(pads) != 2 * rank or (x.shape is not None and len(x.shape) != rank):
        return None
    return pads, value, rank


def fold_pad_into_conv(g: Graph) -> int:
    """A constant-mode Pad that only pads spatial axes, by non-negative amounts, folds into the
    ``pads`` attribute of the Conv / jitort.FusedConv / AveragePool (count_include_pad=1, no
    ceil_mode) reading it when the pad value is 0, or of a MaxPool when it is -inf (pads shorter
    than the window) -- what onnxruntime does with the explicit Pad that TensorFlow exports put
    before a stride-2 conv (MobileNetV2, EfficientNet). The consumer's auto_pad must be NOTSET
    and the Pad output read by it alone, not a graph output."""
    consumers = g.consumers()
    drop: set[int] = set()
    count = 0
    for pad in g.nodes:
        if pad.op_type != "Pad" or pad.domain:
            continue
        got = _pad_fold_params(pad)
        if got is None:
            continue
        pads, value, rank = got
        user = _single_use(g, pad.outputs[0], consumers)
        if (user is None or rank < 3 or user.inputs[0] is not pad.outputs[0]
                or any(v is pad.outputs[0] for v in user.inputs[1:])):
            continue
        x = pad.inputs[0]
        if not _is_float_value(x) or x.dtype != pad.outputs[0].dtype:
            continue
        if any(p < 0 for p in pads) or pads[0] or pads[1] or pads[rank] or pads[rank + 1]:
            continue
        at = user.attrs
        if auto_pad(user) not in ("NOTSET", ""):
            continue
        if user.op_type == "Conv" and not user.domain or (user.op_type == "FusedConv"
                                                          and user.domain == JITORT_DOMAIN):
            ok = value == 0.0
        elif user.op_type == "AveragePool" and not user.domain:
            ok = value == 0.0 and at.get("count_include_pad", 0) == 1 and not at.get("ceil_mode", 0)
        elif user.op_type == "MaxPool" and not user.domain:
            k = list(at.get("kernel_shape", []))
            ok = (value == float("-inf") and len(user.outputs) == 1 and len(k) == rank - 2
                  and all(pads[2 + a] < k[a] and pads[rank + 2 + a] < k[a]
                          for a in range(rank - 2)))
        else:
            ok = False
        if not ok:
            continue
        sp = rank - 2
        old = list(at.get("pads", [0] * (2 * sp)))
        if len(old) != 2 * sp:
            continue
        new = [old[a] + pads[2 + a] for a in range(sp)] + [old[sp + a] + pads[rank + 2 + a]
                                                          for a in range(sp)]
        user.attrs = dict(at, pads=new)
        user.inputs = [x] + list(user.inputs[1:])
        user.proto = None
        drop.add(id(pad))
        count += 1
    return _drop_nodes(g, drop, count, "folded Pad into Conv/pool pads")


def _per_channel(c: np.ndarray, m: int, rank: int) -> np.ndarray | None:
    """The (m,) vector of a constant that broadcasts over a conv output (N, m, spatial...) of
    ``rank`` dims along the channel axis only (scalar, (m, 1, 1), (1, m, 1, 1)...), else None."""
    if c.ndim > rank:
        return None
    full = c.reshape((1,) * (rank - c.ndim) + c.shape)
    if full.shape[0] != 1 or full.shape[1] not in (1, m) or any(d != 1 for d in full.shape[2:]):
        return None
    return np.broadcast_to(full.reshape(-1), (m,)) if full.shape[1] == 1 else full.reshape(m)


def fold_conv_affine(g: Graph) -> int:
    """Conv(x, W, b) -> Mul by / Add of a per-channel constant becomes Conv(x, W', b').

    What exporters leave of a BatchNormalization written as its arithmetic (inception_v2's
    Conv -> BN -> Mul(scale) -> Add(shift) -> Relu): folded into the weights and bias, the
    Relu is left to meet the conv in ``fuse_epilogues``. Runs until no chain remains.
    """
    count = 0
    while True:
        consumers = g.consumers()
        drop: set[int] = set()
        for conv in g.nodes:
            if conv.op_type != "Conv" or conv.domain or len(conv.outputs) != 1 or id(conv) in drop:
                continue
            w, b = conv.input(1), conv.input(2)
            y = conv.outputs[0]
            if (w is None or not w.is_const or (b is not None and not b.is_const)
                    or w.const.dtype not in (np.float32, np.float64) or y.shape is None):
                continue
            op = _single_use(g, y, consumers)
            if op is None or op.op_type not in ("Mul", "Add") or op.domain or len(op.inputs) != 2:
                continue
            other = op.inputs[1] if op.inputs[0] is y else op.inputs[0]
            if other is y or not other.is_const or other.const.dtype != w.const.dtype:
                continue
            m = w.const.shape[0]
            vec = _per_channel(other.const, m, len(y.shape))
            if vec is None:
                continue
            vec = vec.astype(np.float64)
            old_b = b.const.astype(np.float64) if b is not None else np.zeros(m)
            dt = w.const.dtype
            if op.op_type == "Mul":
                new_w = w.const.astype(np.float64) * vec.reshape((-1,) + (1,) * (w.const.ndim - 1))
                w = const_value(g.fresh_name(w.name), new_w.astype(dt))
                new_b = old_b * vec
            else:
                new_b = old_b + vec
            b2 = const_value(g.fresh_name(f"{conv.name or 'conv'}_bias"), new_b.astype(dt))
            conv.inputs = [conv.inputs[0], w, b2]
            conv.outputs = [op.outputs[0]]  # (keeps the name a graph output may have)
            conv.proto = None
            drop.add(id(op))
        if not drop:
            break
        count += len(drop)
        g.nodes = [n for n in g.nodes if id(n) not in drop]
        g.relink()
    if count:
        log.info("folded per-channel Mul/Add into Conv: %d", count)
    return count


#: the dtypes the fusions take: float32 and float64 ...
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: ... and on the CUDA pipeline float16 too (its kernels compute a float16 node's epilogue in
#: float32 and round once, at the store)
_HALF_FLOATS = (np.dtype(np.float16),) + _FLOATS


def fuse_matmul_add(g: Graph, floats: tuple = _FLOATS) -> int:
    """MatMul(x, W) + bias (bias broadcast over the last axis only) -> jitort.MatMulBias.

    ``W`` is a 2-D weight and ``bias`` a constant of shape (N,) (or (1, .., N)); the result has
    the MatMul's shape, so the rewrite is shape-safe for any batch dims of ``x``. ``floats``:
    the dtypes fused (float32 and float64; :func:`fuse_matmul_add_half` adds float16).
    """
    consumers = g.consumers()
    drop: set[int] = set()
    count = 0
    for mm in g.nodes:
        if mm.op_type != "MatMul" or mm.domain or id(mm) in drop:
            continue
        w = mm.input(1)
        if w is None or w.shape is None or len(w.shape) != 2 or w.dtype not in floats:
            continue
        add = _single_use(g, mm.outputs[0], consumers)
        if add is None or add.op_type != "Add" or add.domain or len(add.inputs) != 2:
            continue
        other = add.inputs[1] if add.inputs[0] is mm.outputs[0] else add.inputs[0]
        if other is mm.outputs[0] or not other.is_const or other.const.dtype != w.dtype:
            continue
        n_cols = w.shape[1]
        bias = other.const
        if bias.size != n_cols or (bias.ndim and bias.shape[-1] != n_cols) or bias.ndim > 2:
            continue
        b = const_value(g.fresh_name(other.name), bias.reshape(n_cols))
        fused = Node("MatMulBias", [mm.inputs[0], w, b], [add.outputs[0]], {"activation": ""},
                     JITORT_DOMAIN, mm.name or add.name, 1)
        idx = g.nodes.index(add)
        g.nodes[idx] = fused
        drop.add(id(mm))
        count += 1
    return _drop_nodes(g, drop, count, "fused MatMul+Add")


# --- epilogue fusion ---------------------------------------------------------------------------

#: Activations a fused epilogue applies (the kernels' ``epilogue`` codes; Gelu is the erf form;
#: Swish ``x * sigmoid(alpha * x)`` also as the Sigmoid + Mul that SiLU exports to).
EPILOGUE_ACTIVATIONS = ("Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Gelu", "Swish",
                        "HardSigmoid", "HardSwish")
_SQRT2 = 1.4142135623730951
_SQRT2_PI = 0.7978845608028654  # GELU's tanh approximation: sqrt(2 / pi), and its cubic term
_GELU_CUBIC = 0.044715
#: Clip-6's defaults (attributes min/max): the float32 range, not infinity.
_CLIP6_MAX = float(np.finfo(np.float32).max)


def _is_float_value(v: Value | None, floats: tuple = _FLOATS) -> bool:
    return v is not None and v.dtype is not None and np.dtype(v.dtype) in floats


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


def _gemm_as_matmul_bias(g: Graph, n: Node, floats: tuple = _FLOATS,
                         trans_b: bool = False) -> list[Value] | None:
    """The inputs ``[A, B, bias]`` of the ``jitort.MatMulBias`` a ``Gemm`` is, or None: A not
    transposed, alpha 1, B a constant matrix (``transB`` only where ``trans_b``: B is then
    copied transposed), C absent or a constant broadcast along the rows (a scalar, (N,) or
    (1, N)) with beta 1."""
    if n.op_type != "Gemm" or n.domain or len(n.outputs) != 1 or len(n.inputs) < 2:
        return None
    if n.attrs.get("transB", 0) and not trans_b:
        return None
    a, b, c, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    if (not _is_float_value(y, floats) or a is None or a.dtype != y.dtype or b is None
            or not b.is_const or b.const.ndim != 2 or b.const.dtype != y.dtype
            or n.attrs.get("transA", 0) or float(n.attrs.get("alpha", 1.0)) != 1.0):
        return None
    w = b.const.T if n.attrs.get("transB", 0) else b.const
    cols = w.shape[1]
    if c is None:
        bias = np.zeros(cols, w.dtype)
    else:
        if (not c.is_const or c.const.dtype != y.dtype or c.const.ndim > 2
                or float(n.attrs.get("beta", 1.0)) != 1.0):
            return None
        if c.const.ndim == 2 and c.const.shape[0] != 1 or c.const.shape[-1:] not in ((), (1,),
                                                                                      (cols,)):
            return None
        bias = np.broadcast_to(c.const.reshape(-1), (cols,))
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


def fuse_epilogues(g: Graph, floats: tuple = _FLOATS, gemm_trans_b: bool = False) -> int:
    """Fold what follows a GEMM or a convolution into its output pass (the kernels' epilogue).

    * ``Conv [-> Add(conv, residual)] [-> activation]`` -> ``jitort.FusedConv(x, W, B,
      [residual])`` with the Conv's attributes plus ``activation`` and ``activation_params``
      (``[alpha, beta]``: LeakyRelu's slope, Clip's bounds). The residual must have statically
      the conv output's shape (no broadcast) and dtype.
    * ``jitort.MatMulBias`` (no activation yet) ``-> activation`` -> the same node with
      ``activation`` set; a ``Gemm`` that is a MatMulBias (:func:`_gemm_as_matmul_bias`)
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
    replace: dict[int, Node] = {}  # id(last node of a pattern) -> the fused node
    for n in g.nodes:
        if id(n) in claimed:
            continue
        gemm = (None if n.op_type != "Gemm"
                else _gemm_as_matmul_bias(g, n, floats, gemm_trans_b))
        if (n.op_type == "MatMulBias" and n.domain == JITORT_DOMAIN) or gemm is not None:
            if n.attrs.get("activation", ""):
                continue
            y = n.outputs[0]
            via = None
            act = _match_activation(g, y, consumers, floats)
            if act is None:
                via, act = _through_reshape(g, y, consumers, claimed, floats) or (None, None)
            if act is None or any(id(m) in claimed for m in act[2]):
                continue
            name, params, chain = act
            if gemm is None:
                ins, attrs = list(n.inputs), dict(n.attrs)
            else:
                ins, attrs = gemm, {}
            attrs.update(activation=name, activation_params=params)
            out = chain[-1].outputs[0]
            mid = out if via is None else Value(g.fresh_name(y.name), y.dtype, y.shape)
            fused = Node("MatMulBias", ins, [mid], attrs, JITORT_DOMAIN, n.name,
                         1 if gemm is not None else n.since_version)
            if via is not None:  # the Reshape moves after the activation, same shape input
                fused = [fused, Node("Reshape", [mid] + via.inputs[1:], [out], dict(via.attrs),
                                     via.domain, via.name, via.since_version)]
                chain = [via] + chain
            chain = [n] + chain
        elif _conv_candidate(n, floats) or (n.op_type == "FusedConv" and n.domain == JITORT_DOMAIN
                                            and not n.attrs.get("activation", "")):
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
                continue
            name, params, tail = act if act is not None else ("", [0.0, 0.0], [])
            chain += tail
            if n.op_type == "FusedConv":  # a residual-only FusedConv gains its activation
                ins = list(n.inputs)
            else:
                ins = [n.inputs[0], n.inputs[1], n.input(2)] + ([residual] if residual else [])
            attrs = dict(n.attrs, activation=name, activation_params=params)
            fused = Node("FusedConv", ins, [chain[-1].outputs[0]], attrs, JITORT_DOMAIN,
                         n.name, 1)
        else:
            continue
        claimed.update(id(m) for m in chain)
        replace[id(chain[-1])] = fused
    if not replace:
        return 0
    nodes = []
    for n in g.nodes:
        if id(n) in replace:
            got = replace[id(n)]
            nodes.extend(got if isinstance(got, list) else [got])
        elif id(n) not in claimed:
            nodes.append(n)
    g.nodes = nodes
    g.relink()
    log.info("fused epilogues: %d", len(replace))
    return len(replace)


def fuse_matmul_add_half(g: Graph) -> int:
    """:func:`fuse_matmul_add` for the CUDA pipeline: float16 MatMul + Add too (its GEMM
    takes float16 MatMulBias, the bias added in float32 before the one rounding)."""
    return fuse_matmul_add(g, _HALF_FLOATS)


def fuse_epilogues_half(g: Graph) -> int:
    """:func:`fuse_epilogues` for the CUDA pipeline: float16 convolutions and products too
    (bias, residual and activation computed in float32 on the accumulator, one rounding to
    float16 at the store, where the unfused graph rounds after each op), and Gemms reading B
    transposed."""
    return fuse_epilogues(g, _HALF_FLOATS, gemm_trans_b=True)


def subsample_strided_pointwise(g: Graph) -> int:
    """A 1x1 Conv / jitort.FusedConv with a stride above 1 and no padding reads one input
    position in ``sh * sw``: it becomes a strided Slice (the subsampled input, contiguous) and
    the same convolution at stride 1, which runs as one gemm on the subsampled planes
    (:mod:`jitort.kernels.cpu.conv`'s pointwise path) instead of an im2col per block of output
    rows. The Slice is the opset-13 form whatever the model's opset (the IR keeps each node's
    own version; the backends and the interpreter go by it). ResNet-style downsampling
    shortcuts: 256 -> 512 1x1/2 on 56x56 1.31 -> 1.02 of onnxruntime's time at one thread,
    512 -> 1024 on 28x28 1.25 -> 1.04 (``scripts/compare_conv_shapes.py``)."""
    count = 0
    new_nodes: list[Node] = []
    for n in g.nodes:
        new_nodes.append(n)
        if not (n.op_type == "Conv" and not n.domain
                or n.op_type == "FusedConv" and n.domain == JITORT_DOMAIN):
            continue
        x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
        if (x.shape is None or y.shape is None or len(x.shape) != 4
                or len(y.shape) != 4 or w.shape is None or tuple(w.shape[2:]) != (1, 1)
                or not _is_float_value(x)):
            continue
        at = n.attrs
        if auto_pad(n) not in ("NOTSET", "", "VALID"):
            continue
        strides = [int(s) for s in at.get("strides", [1, 1])]
        if len(strides) != 2 or strides == [1, 1] or any(p != 0 for p in at.get("pads", [0] * 4)):
            continue
        xs = Value(g.fresh_name(x.name + "_sub"), x.dtype, (x.shape[0], x.shape[1], y.shape[2],
                                                            y.shape[3]))
        big = np.iinfo(np.int64).max
        ins = [x, const_value(g.fresh_name("starts"), np.zeros(2, np.int64)),
               const_value(g.fresh_name("ends"), np.array([big, big], np.int64)),
               const_value(g.fresh_name("axes"), np.array([2, 3], np.int64)),
               const_value(g.fresh_name("steps"), np.array(strides, np.int64))]
        new_nodes.insert(len(new_nodes) - 1, Node("Slice", ins, [xs], {}, "",
                                                  g.fresh_name("subsample"), 13))
        n.inputs = [xs] + list(n.inputs[1:])
        n.attrs = dict(at, strides=[1, 1])
        n.proto = None
        count += 1
    if count:
        g.nodes = new_nodes
        g.relink()
        log.info("strided 1x1 convolutions on a subsampled input: %d", count)
    return count

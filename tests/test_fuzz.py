"""Differential fuzzing: random small graphs, jitort vs onnxruntime (onnx.reference as fallback).

The generator draws from a small vocabulary of *structures* (an elementwise chain with
broadcasting, a reduction, MatMul/Gemm, Conv/pooling, one shape op followed by elementwise
work, Softmax/LayerNormalization, float16 graphs, quantized ones, upsampling, the optimizer's
patterns, gathers / scatters / TopK / CumSum / Einsum) and varies their shapes (size-1 and size-0 dims included),
attributes and values. Each new structure costs Numba a compile (~0.3-1 s), cached on disk in
``~/.cache/jitort``; a fixed CI budget with ``derandomize=True`` replays the same examples,
so reruns only load kernels. ``scripts/fuzz.py --examples 1000`` runs the full campaign.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import TIERS, run_tier

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
MS = "com.microsoft"
OPSET = 17
#: examples per CI run (``JITORT_FUZZ_EXAMPLES`` overrides)
CI_EXAMPLES = int(os.environ.get("JITORT_FUZZ_EXAMPLES", "300"))


@dataclass
class Case:
    """One random graph: its nodes, inputs, initializers and feeds, and how to compare."""

    kind: str
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)    # (name, elem_type, shape)
    outputs: list = field(default_factory=list)   # (name, elem_type)
    init: dict = field(default_factory=dict)
    feeds: dict = field(default_factory=dict)
    atol: float = 1e-5
    rtol: float = 1e-4
    ort_rewrites: bool = True  # compare with onnxruntime's optimized graph (its default)
    ort: bool = True  # False: onnx.reference only (onnxruntime would kill the process)

    def model(self):
        g = helper.make_graph(
            self.nodes, "fuzz",
            [helper.make_tensor_value_info(n, t, s) for n, t, s in self.inputs],
            [helper.make_tensor_value_info(n, t, None) for n, t in self.outputs],
            [numpy_helper.from_array(np.asarray(a), n) for n, a in self.init.items()])
        opsets = [helper.make_opsetid("", OPSET)]
        if any(n.domain == MS for n in self.nodes):
            opsets.append(helper.make_opsetid(MS, 1))
        return helper.make_model(g, opset_imports=opsets)

    def describe(self) -> str:
        nodes = "; ".join(f"{n.op_type}({', '.join(n.input)})->{', '.join(n.output)}"
                          + "".join(f" {a.name}={helper.get_attribute_value(a)}" for a in n.attribute)
                          for n in self.nodes)
        feeds = ", ".join(f"{k}{v.dtype.name}{list(v.shape)}" for k, v in self.feeds.items())
        init = ", ".join(f"{k}={v.tolist() if v.size <= 8 else list(v.shape)}" for k, v in self.init.items())
        return f"[{self.kind}] {nodes} | feeds {feeds} | init {init}"


# --- drawing helpers ------------------------------------------------------------------------
def _dims(draw, rank: int, zero: bool, choices=(1, 2, 3, 4, 7)) -> list[int]:
    pool = list(choices) + ([0, 0] if zero else [])
    return [draw(st.sampled_from(pool)) for _ in range(rank)]


def _values(rng, shape, dtype=np.float32, positive=False, away_from_zero=False):
    if dtype == np.int64:
        return rng.integers(-5, 6, shape).astype(np.int64)
    v = rng.standard_normal(shape).astype(np.float32)
    if positive:
        v = np.abs(v) + np.float32(0.1)
    elif away_from_zero:
        v = np.where(v < 0, v - 0.5, v + 0.5).astype(np.float32)
    return v


def _broadcast_partner(draw, shape: list[int]) -> list[int]:
    """A shape broadcastable with ``shape``: a suffix of it with some dims set to 1."""
    k = draw(st.integers(0, len(shape)))
    part = shape[len(shape) - k:]
    return [1 if draw(st.booleans()) and draw(st.booleans()) else d for d in part]


BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min"]
UNARY = ["Relu", "Tanh", "Sigmoid", "Abs", "Neg", "Exp", "Erf", "Floor", "LeakyRelu",
         "Softplus", "Sqrt", "Reciprocal", "Elu", "HardSigmoid", "Sin"]
INT_BINARY = ["Add", "Sub", "Mul", "Max", "Min"]


def _unary(op: str, x: str, y: str):
    if op == "Sqrt":  # keep the domain: sqrt(|x|)
        return [helper.make_node("Abs", [x], [y + "_a"]), helper.make_node("Sqrt", [y + "_a"], [y])]
    if op == "Reciprocal":
        return [helper.make_node("Abs", [x], [y + "_a"]), helper.make_node("Softplus", [y + "_a"], [y + "_p"]),
                helper.make_node("Reciprocal", [y + "_p"], [y])]
    return [helper.make_node(op, [x], [y])]


def _maybe_relu(draw, c):
    """Half the time a Relu after the output ``y`` (an epilogue for the fusions to take)."""
    if draw(st.booleans()):
        c.nodes.append(helper.make_node("Relu", ["y"], ["z"]))
        c.outputs = [("z", F32)]
    return c


# --- structures -------------------------------------------------------------------------------
@st.composite
def elementwise(draw, rng, zero):
    c = Case("elementwise")
    rank = draw(st.integers(0, 4))
    xs = _dims(draw, rank, zero)
    ys = _broadcast_partner(draw, xs)
    if draw(st.booleans()):
        xs, ys = ys, xs
    is_int = draw(st.integers(0, 7)) == 0
    dt, et = (np.int64, I64) if is_int else (np.float32, F32)
    b1 = draw(st.sampled_from(INT_BINARY if is_int else BINARY))
    c.inputs = [("x", et, xs), ("y", et, ys)]
    c.feeds = {"x": _values(rng, xs, dt), "y": _values(rng, ys, dt, away_from_zero=b1 == "Div")}
    c.nodes = [helper.make_node(b1, ["x", "y"], ["t"])]
    if is_int:
        c.nodes.append(helper.make_node(draw(st.sampled_from(["Abs", "Neg"])), ["t"], ["u"]))
    else:
        c.nodes += _unary(draw(st.sampled_from(UNARY)), "t", "u")
    last = "u"
    if draw(st.booleans()):  # a second binary op, reading a graph input again
        b2 = draw(st.sampled_from(INT_BINARY if is_int else ["Add", "Mul", "Sub", "Max"]))
        c.nodes.append(helper.make_node(b2, [last, draw(st.sampled_from(["x", "y"]))], ["v"]))
        last = "v"
    c.outputs = [(last, et)]
    if draw(st.booleans()):  # an intermediate is also an output (fused group with two exits)
        c.outputs.append(("t", et))
    return c


REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
          "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"]


@st.composite
def reduction(draw, rng, zero):
    c = Case("reduction")
    rank = draw(st.integers(1, 4))
    xs = _dims(draw, rank, zero)
    op = draw(st.sampled_from(REDUCE))
    axes = sorted(draw(st.sets(st.integers(-rank, rank - 1), min_size=0, max_size=rank)),
                  key=lambda a: a % rank)
    axes = list({a % rank: a for a in axes}.values())
    keep = draw(st.sampled_from([0, 1]))
    if op in ("ReduceMax", "ReduceMin", "ReduceLogSumExp") and any(
            xs[a % rank] == 0 for a in (axes or range(rank))):
        xs = [d or 1 for d in xs]  # empty max/min: onnxruntime and ONNX disagree (-inf vs error)
    c.inputs = [("x", F32, xs)]
    c.feeds = {"x": _values(rng, xs)}
    pre = draw(st.sampled_from([None, "Exp", "Abs", "Relu"]))
    src = "x"
    if pre:
        c.nodes.append(helper.make_node(pre, ["x"], ["p"]))
        src = "p"
    if op == "ReduceSum":
        ins = [src]
        if axes:
            c.init["axes"] = np.array(axes, np.int64)
            ins.append("axes")
        c.nodes.append(helper.make_node(op, ins, ["y"], keepdims=keep))
    else:
        attrs = {"keepdims": keep}
        if axes:
            attrs["axes"] = axes
        c.nodes.append(helper.make_node(op, [src], ["y"], **attrs))
    if op == "ReduceProd":
        c.atol = 1e-4
    c.outputs = [("y", F32)]
    if draw(st.booleans()):
        c.nodes.append(helper.make_node("Neg", ["y"], ["z"]))
        c.outputs = [("z", F32)]
    return c


@st.composite
def matmul(draw, rng, zero):
    c = Case("matmul")
    m, k, n = (draw(st.sampled_from([1, 2, 3, 5, 8, 17] + ([0] if zero else []))) for _ in range(3))
    if draw(st.integers(0, 3)) == 0:  # Gemm
        ta, tb = draw(st.booleans()), draw(st.booleans())
        a_s, b_s = ([k, m] if ta else [m, k]), ([n, k] if tb else [k, n])
        alpha, beta = draw(st.sampled_from([1.0, 0.5, -2.0])), draw(st.sampled_from([1.0, 0.25]))
        c.inputs = [("a", F32, a_s)]
        c.feeds = {"a": _values(rng, a_s)}
        c.init = {"b": _values(rng, b_s)}
        ins = ["a", "b"]
        if draw(st.booleans()):
            c.init["c"] = _values(rng, draw(st.sampled_from([[n], [1, n], [m, n], [1]])))
            ins.append("c")
        c.nodes = [helper.make_node("Gemm", ins, ["y"], transA=int(ta), transB=int(tb), alpha=alpha, beta=beta)]
    else:
        batch = _dims(draw, draw(st.integers(0, 2)), zero, (1, 2, 3))
        bb = _broadcast_partner(draw, batch) if draw(st.booleans()) else []
        a_s = batch + [m, k] if draw(st.integers(0, 5)) else [k]
        b_s = bb + [k, n] if draw(st.integers(0, 5)) else [k]
        c.inputs = [("a", F32, a_s)]
        c.feeds = {"a": _values(rng, a_s)}
        if draw(st.booleans()):
            c.init = {"b": _values(rng, b_s)}
        else:
            c.inputs.append(("b", F32, b_s))
            c.feeds["b"] = _values(rng, b_s)
        c.nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
        if len(b_s) >= 2 and draw(st.booleans()):  # bias + activation: MatMulBias fusion
            c.init["bias"] = _values(rng, [n])
            c.nodes += [helper.make_node("Add", ["y", "bias"], ["yb"]),
                        helper.make_node(draw(st.sampled_from(["Relu", "Tanh", "Sigmoid"])), ["yb"], ["z"])]
            c.outputs = [("z", F32)]
    c.outputs = c.outputs or [("y", F32)]
    c.atol = 1e-4
    return c


@st.composite
def conv(draw, rng, zero):
    c = Case("conv")
    nb = draw(st.sampled_from([1, 2] + ([0] if zero else [])))
    ch = draw(st.integers(1, 4))
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    xs = [nb, ch, h, w]
    c.inputs = [("x", F32, xs)]
    c.feeds = {"x": _values(rng, xs)}
    kind = draw(st.sampled_from(["Conv", "Conv", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool"]))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    pads = [draw(st.integers(0, min(1, kh - 1))), draw(st.integers(0, min(1, kw - 1)))] * 2
    dil = [draw(st.integers(1, 2)), draw(st.integers(1, 2))] if kind == "Conv" else [1, 1]
    # the dilated window must fit the padded input
    while (kh - 1) * dil[0] + 1 > h + pads[0] + pads[2]:
        kh, dil[0] = (kh - 1, dil[0]) if dil[0] == 1 else (kh, 1)
    while (kw - 1) * dil[1] + 1 > w + pads[1] + pads[3]:
        kw, dil[1] = (kw - 1, dil[1]) if dil[1] == 1 else (kw, 1)
    if kind == "Conv":
        group = draw(st.sampled_from([1, ch]))
        mo = group * draw(st.integers(1, 3))
        c.init["w"] = _values(rng, [mo, ch // group, kh, kw])
        ins = ["x", "w"]
        if draw(st.booleans()):
            c.init["b"] = _values(rng, [mo])
            ins.append("b")
        c.nodes = [helper.make_node("Conv", ins, ["y"], kernel_shape=[kh, kw], strides=stride,
                                    pads=pads, dilations=dil, group=group)]
        c.atol = 1e-4
    elif kind == "GlobalAveragePool":
        c.nodes = [helper.make_node(kind, ["x"], ["y"])]
    else:
        extra = {"count_include_pad": draw(st.sampled_from([0, 1]))} if kind == "AveragePool" else {}
        c.nodes = [helper.make_node(kind, ["x"], ["y"], kernel_shape=[kh, kw], strides=stride,
                                    pads=pads, **extra)]
    c.outputs = [("y", F32)]
    return _maybe_relu(draw, c)


SHAPE_OPS = ["Transpose", "Reshape", "Flatten", "Concat", "Slice", "Unsqueeze", "Squeeze",
             "Expand", "Gather", "Split", "Tile"]


@st.composite
def shape_op(draw, rng, zero):
    c = Case("shape")
    rank = draw(st.integers(1, 4))
    xs = _dims(draw, rank, zero)
    op = draw(st.sampled_from(SHAPE_OPS))
    c.inputs = [("x", F32, xs)]
    c.feeds = {"x": _values(rng, xs)}
    outs = ["y"]
    if op == "Transpose":
        perm = draw(st.permutations(list(range(rank))))
        c.nodes = [helper.make_node(op, ["x"], ["y"], perm=list(perm))]
    elif op == "Reshape":
        size = int(np.prod(xs))
        new = list(reversed(xs)) if draw(st.booleans()) else [size]
        if size and len(new) > 1 and draw(st.booleans()):
            new[draw(st.integers(0, len(new) - 1))] = -1
        c.init["s"] = np.array(new, np.int64)
        c.nodes = [helper.make_node(op, ["x", "s"], ["y"])]
    elif op == "Flatten":
        c.nodes = [helper.make_node(op, ["x"], ["y"], axis=draw(st.integers(-rank, rank)))]
    elif op == "Concat":
        ax = draw(st.integers(-rank, rank - 1))
        ys = list(xs)
        ys[ax] = draw(st.sampled_from([1, 2, 3] + ([0] if zero else [])))
        c.inputs.append(("x2", F32, ys))
        c.feeds["x2"] = _values(rng, ys)
        c.nodes = [helper.make_node(op, ["x", "x2"], ["y"], axis=ax)]
    elif op == "Slice":
        axes = sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=rank)))
        starts, ends, steps = [], [], []
        for a in axes:
            step = draw(st.sampled_from([1, 1, 2, -1, 3]))
            s0 = draw(st.integers(-xs[a] - 2, xs[a] + 2))
            e0 = draw(st.sampled_from([draw(st.integers(-xs[a] - 2, xs[a] + 2)), 2 ** 62, -(2 ** 62)]))
            starts.append(s0), ends.append(e0), steps.append(step)
        for name, v in (("st", starts), ("en", ends), ("ax", axes), ("sp", steps)):
            c.init[name] = np.array(v, np.int64)
        c.nodes = [helper.make_node(op, ["x", "st", "en", "ax", "sp"], ["y"])]
    elif op == "Unsqueeze":
        c.init["ax"] = np.array([draw(st.integers(-rank - 1, rank))], np.int64)
        c.nodes = [helper.make_node(op, ["x", "ax"], ["y"])]
    elif op == "Squeeze":
        ones = [i for i, d in enumerate(xs) if d == 1]
        ins = ["x"]
        if ones and draw(st.booleans()):
            c.init["ax"] = np.array([draw(st.sampled_from(ones))], np.int64)
            ins.append("ax")
        c.nodes = [helper.make_node(op, ins, ["y"])]
    elif op == "Expand":
        base = [1 if draw(st.booleans()) else d for d in xs]
        c.inputs = [("x", F32, base)]
        c.feeds = {"x": _values(rng, base)}
        c.init["s"] = np.array(_dims(draw, draw(st.integers(0, 1)), zero) + xs, np.int64)
        c.nodes = [helper.make_node(op, ["x", "s"], ["y"])]
    elif op == "Gather":
        ax = draw(st.integers(-rank, rank - 1))
        d = xs[ax]
        if d == 0:
            c.inputs = [("x", F32, xs)]
            xs[ax] = 2
            c.feeds = {"x": _values(rng, xs)}
            d = 2
        idx_shape = _dims(draw, draw(st.integers(0, 2)), zero, (1, 2, 3))
        c.init["i"] = rng.integers(-d, d, idx_shape).astype(np.int64)
        c.inputs = [("x", F32, xs)]
        c.nodes = [helper.make_node(op, ["x", "i"], ["y"], axis=ax)]
    elif op == "Split":
        ax = draw(st.integers(-rank, rank - 1))
        d = xs[ax]
        a = draw(st.integers(0, d))
        c.init["sp"] = np.array([a, d - a], np.int64)
        c.nodes = [helper.make_node(op, ["x", "sp"], ["y", "y2"], axis=ax)]
        outs = ["y", "y2"]
    elif op == "Tile":
        c.init["r"] = np.array([draw(st.integers(1, 3)) for _ in range(rank)], np.int64)
        c.nodes = [helper.make_node(op, ["x", "r"], ["y"])]
    c.outputs = [(o, F32) for o in outs]
    if draw(st.booleans()):  # elementwise work on the result (views, strides, aliasing)
        c.nodes.append(helper.make_node(draw(st.sampled_from(["Relu", "Neg", "Sigmoid"])), ["y"], ["z"]))
        c.outputs[0] = ("z", F32)
    return c


@st.composite
def normalization(draw, rng, zero):
    c = Case("norm")
    rank = draw(st.integers(1, 4))
    xs = _dims(draw, rank, zero, (1, 2, 3, 5, 8))
    op = draw(st.sampled_from(["Softmax", "LogSoftmax", "LayerNormalization"]))
    ax = draw(st.integers(-rank, rank - 1))
    c.inputs = [("x", F32, xs)]
    c.feeds = {"x": _values(rng, xs) * np.float32(draw(st.sampled_from([1, 10])))}
    if op == "LayerNormalization":
        ns = xs[ax % rank:]
        c.init = {"g": _values(rng, ns), "b": _values(rng, ns)}
        c.nodes = [helper.make_node(op, ["x", "g", "b"], ["y"], axis=ax, epsilon=1e-5)]
        c.atol = 1e-4
    else:
        c.nodes = [helper.make_node(op, ["x"], ["y"], axis=ax)]
    c.outputs = [("y", F32)]
    return c


F16 = TensorProto.FLOAT16


@st.composite
def half(draw, rng, zero):
    """A float32 graph of another structure in float16 (as a float16 file is): its inputs,
    initializers and outputs; tolerances of a few float16 ulps, scaled by the largest input
    (jitort rounds once per fused group, onnxruntime per op)."""
    c = draw(draw(st.sampled_from([elementwise, reduction, matmul, normalization]))(rng, zero))
    if any(t != F32 for _, t, _ in c.inputs) or any(t != F32 for _, t in c.outputs):
        return c  # an integer graph stays as drawn
    c.kind = f"half {c.kind}"
    c.inputs = [(n, F16, s) for n, _, s in c.inputs]
    c.outputs = [(n, F16) for n, _ in c.outputs]
    c.init = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in c.init.items()}
    c.feeds = {k: v.astype(np.float16) for k, v in c.feeds.items()}
    scale = max([float(np.abs(v).max(initial=0)) for v in c.feeds.values()] + [1.0])
    c.rtol, c.atol = 4e-3, 2e-3 * scale
    return c


U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32


def _qtype(draw):
    """(ONNX type, numpy type, lowest, highest) of an 8-bit quantized tensor."""
    if draw(st.booleans()):
        return U8, np.uint8, 0, 255
    return I8, np.int8, -128, 127


def _qscale(draw, rng, shape=()):
    """Scales: a power of two (so that x / scale is exact and ties test the rounding) or
    random."""
    if draw(st.booleans()):
        return np.full(shape, 2.0 ** -draw(st.integers(3, 6)), np.float32)
    return (rng.random(shape) * 0.05 + 0.005).astype(np.float32)


def _quantize_dequantize(draw, rng, zero, c):
    et, dt, lo, hi = _qtype(draw)
    rank = draw(st.integers(1, 4))
    xs = _dims(draw, rank, zero)
    attrs, qshape = {}, ()
    if draw(st.booleans()):  # per axis
        ax = draw(st.integers(-rank, rank - 1))
        xs[ax] = xs[ax] or 2
        attrs, qshape = {"axis": ax}, (xs[ax],)
    scale = _qscale(draw, rng, qshape)
    zp = rng.integers(lo, hi + 1, qshape).astype(dt)
    x = _values(rng, xs) * np.float32(3)
    if scale.size and draw(st.booleans()):  # exact ties: (k + 1/2) * scale
        s = scale if not attrs else np.expand_dims(scale, tuple(
            d for d in range(rank) if d != attrs["axis"] % rank))
        x = ((np.floor(x / s) + np.float32(0.5)) * s).astype(np.float32)
    c.inputs, c.feeds, c.init = [("x", F32, xs)], {"x": x}, {"s": scale, "z": zp}
    c.nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
               helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs)]
    c.outputs = [("q", et), ("y", F32)]


def _mkn(draw, zero):
    """Sizes of an integer product: K never 0 (onnxruntime 1.32 leaves MatMulInteger's and
    QLinearMatMul's output uninitialized then; jitort writes the zero point)."""
    m, n = (draw(st.sampled_from([1, 2, 3, 5, 16] + ([0] if zero else []))) for _ in range(2))
    return m, draw(st.sampled_from([1, 2, 3, 5, 16])), n


def _qlinear_matmul(draw, rng, zero, c):
    et, dt, lo, hi = _qtype(draw)
    m, k, n = _mkn(draw, zero)
    a_s = _dims(draw, draw(st.integers(0, 1)), zero, (1, 2, 3)) + [m, k]
    c.inputs = [("a", et, a_s)]
    c.feeds = {"a": rng.integers(lo, hi + 1, a_s).astype(dt)}
    c.init = {"as": _qscale(draw, rng), "az": np.array(rng.integers(lo, hi + 1), dt),
              "b": rng.integers(lo, hi + 1, (k, n)).astype(dt), "bs": _qscale(draw, rng),
              "bz": np.array(rng.integers(lo, hi + 1), dt),
              "ys": np.float32(draw(st.sampled_from([0.5, 2.0, 7.3]))),
              "yz": np.array(rng.integers(lo, hi + 1), dt)}
    c.nodes = [helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                                ["y"])]
    c.outputs = [("y", et)]
    c.atol = 1  # requantization: a float multiplier, ties may round either way


def _matmul_integer(draw, rng, zero, c):
    m, k, n = _mkn(draw, zero)
    _, bdt, blo, bhi = _qtype(draw)
    c.inputs = [("a", U8, [m, k])]
    c.feeds = {"a": rng.integers(0, 256, (m, k)).astype(np.uint8)}
    bz_shape = (n,) if draw(st.booleans()) else ()
    c.init = {"b": rng.integers(blo, bhi + 1, (k, n)).astype(bdt),
              "az": np.array(rng.integers(0, 256), np.uint8),
              "bz": rng.integers(blo, bhi + 1, bz_shape).astype(bdt)}
    c.nodes = [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])]
    c.outputs = [("y", I32)]


def _qlinear_conv(draw, rng, zero, c):
    et, dt, lo, hi = _qtype(draw)
    nb, ch = draw(st.sampled_from([1, 2] + ([0] if zero else []))), draw(st.integers(1, 4))
    h, w = draw(st.integers(3, 8)), draw(st.integers(3, 8))
    group = draw(st.sampled_from([1, ch]))
    mo = group * draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    xs = [nb, ch, h, w]
    per_channel = draw(st.booleans())
    c.inputs = [("x", et, xs)]
    c.feeds = {"x": rng.integers(lo, hi + 1, xs).astype(dt)}
    c.init = {"xs": _qscale(draw, rng), "xz": np.array(rng.integers(lo, hi + 1), dt),
              "w": rng.integers(-127, 128, (mo, ch // group, kh, kw)).astype(np.int8),
              "ws": _qscale(draw, rng, (mo,) if per_channel else ()),
              "wz": np.zeros((mo,) if per_channel else (), np.int8),
              "ys": np.float32(draw(st.sampled_from([0.25, 1.0, 3.1]))),
              "yz": np.array(rng.integers(lo, hi + 1), dt)}
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if draw(st.booleans()):
        c.init["b"] = rng.integers(-500, 500, (mo,)).astype(np.int32)
        ins.append("b")
    pads = [draw(st.integers(0, 1))] * 4
    c.nodes = [helper.make_node("QLinearConv", ins, ["y"], kernel_shape=[kh, kw], pads=pads,
                                strides=[draw(st.integers(1, 2))] * 2, group=group)]
    c.outputs = [("y", et)]
    c.atol = 1


def _dynamic_quantize(draw, rng, zero, c):
    xs = _dims(draw, draw(st.integers(1, 3)), False)
    c.inputs = [("x", F32, xs)]
    c.feeds = {"x": _values(rng, xs) * np.float32(draw(st.sampled_from([1, 10])))
               + np.float32(draw(st.sampled_from([0, 2])))}
    c.nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yz"])]
    c.outputs = [("y", U8), ("ys", F32), ("yz", U8)]
    c.atol = 1


@st.composite
def quantized(draw, rng, zero):
    """What quantized models hold: QDQ pairs (per tensor and per axis, exact ties),
    QLinearMatMul, MatMulInteger, QLinearConv (per-channel weights), DynamicQuantizeLinear."""
    c = Case("quantized")
    build = draw(st.sampled_from([_quantize_dequantize, _qlinear_matmul, _matmul_integer,
                                  _qlinear_conv, _dynamic_quantize]))
    build(draw, rng, zero, c)
    c.kind = f"quantized {build.__name__.strip('_')}"
    return c


def _conv_transpose(draw, rng, zero, c, xs):
    ch = xs[1]
    group = draw(st.sampled_from([1, ch]))
    mo = draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    strides = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    dil = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    # output padding below the stride (onnxruntime's bound), pads below the dilated kernel
    outpad = [draw(st.integers(0, s - 1)) for s in strides]
    pads = [draw(st.integers(0, (k - 1) * d)) for k, d in ((kh, dil[0]), (kw, dil[1]))] * 2
    c.init["w"] = _values(rng, [ch, mo, kh, kw])
    ins = ["x", "w"]
    if draw(st.booleans()):
        c.init["b"] = _values(rng, [mo * group])
        ins.append("b")
    c.nodes = [helper.make_node("ConvTranspose", ins, ["y"], kernel_shape=[kh, kw],
                                strides=strides, pads=pads, dilations=dil, group=group,
                                output_padding=outpad)]
    c.atol = 1e-4


_RESIZE_MODES = [("nearest", "asymmetric", "floor"),
                 ("nearest", "half_pixel", "round_prefer_floor"),
                 ("nearest", "align_corners", "round_prefer_ceil"), ("linear", "half_pixel", None),
                 ("linear", "align_corners", None), ("linear", "asymmetric", None),
                 ("linear", "pytorch_half_pixel", None), ("cubic", "half_pixel", None),
                 ("cubic", "align_corners", None)]


def _resize(draw, rng, zero, c, xs):
    mode, ctm, nearest = draw(st.sampled_from(_RESIZE_MODES))
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if nearest:
        attrs["nearest_mode"] = nearest
    if mode == "cubic":
        attrs["cubic_coeff_a"] = draw(st.sampled_from([-0.75, -0.5]))
    c.init["roi"] = np.zeros(0, np.float32)
    if draw(st.booleans()):
        c.init["sc"] = np.array([1, 1] + [draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]))
                                          for _ in range(2)], np.float32)
        c.nodes = [helper.make_node("Resize", ["x", "roi", "sc"], ["y"], **attrs)]
    else:
        c.init["sz"] = np.array(xs[:2] + [draw(st.integers(1, 12)) for _ in range(2)], np.int64)
        c.nodes = [helper.make_node("Resize", ["x", "roi", "", "sz"], ["y"], **attrs)]
    c.atol = 1e-4


def _pad(draw, rng, zero, c, xs):
    mode = draw(st.sampled_from(["constant", "reflect", "edge"]))
    limit = [d - 1 if mode == "reflect" else 3 for d in xs[2:]]  # reflect: below the dim
    pads = [0, 0] + [draw(st.integers(0, max(0, m))) for m in limit]
    pads = pads + [0, 0] + [draw(st.integers(0, max(0, m))) for m in limit]
    if mode == "constant" and draw(st.booleans()):
        pads[2] = -min(xs[2] - 1, 1)  # a negative pad crops
    c.init["p"] = np.array(pads, np.int64)
    ins = ["x", "p"]
    if mode == "constant":
        c.init["v"] = np.array(draw(st.sampled_from([0.0, -1.5])), np.float32)
        ins.append("v")
    c.nodes = [helper.make_node("Pad", ins, ["y"], mode=mode)]


@st.composite
def upsample(draw, rng, zero):
    """What decoders and segmentation heads hold: ConvTranspose (strides, dilations, output
    padding, groups), Resize (nearest / linear / cubic under each coordinate transformation,
    by scales or sizes) and Pad (constant with a crop, reflect, edge)."""
    c = Case("upsample")
    xs = [draw(st.sampled_from([1, 2] + ([0] if zero else []))), draw(st.integers(1, 3)),
          draw(st.integers(2, 6)), draw(st.integers(2, 6))]
    c.inputs = [("x", F32, xs)]
    c.feeds = {"x": _values(rng, xs)}
    build = draw(st.sampled_from([_conv_transpose, _resize, _pad]))
    build(draw, rng, zero, c, xs)
    c.kind = f"upsample {build.__name__.strip('_')}"
    c.outputs = [("y", F32)]
    return _maybe_relu(draw, c)


def _const(c, name, value):
    c.init[name] = np.asarray(value, np.float32)
    return name


def _layer_norm_decomposed(draw, rng, zero, c):
    """ReduceMean / Sub / Pow / ReduceMean / Add / Sqrt / Div / Mul / Add, as exporters write
    LayerNorm, and near misses that are not one (another exponent, a non-last axis)."""
    xs = [draw(st.integers(1, 3)), draw(st.integers(1, 5)),
          draw(st.sampled_from([1, 4, 8, 16]))]
    axis = draw(st.sampled_from([-1, -1, -1, 1]))
    c.inputs, c.feeds = [("x", F32, xs)], {"x": _values(rng, xs) * np.float32(3)}
    expo = draw(st.sampled_from([2.0, 2.0, 4.0]))  # a fourth moment: positive, not a variance
    gshape = draw(st.sampled_from([[xs[-1]], [1, 1, xs[-1]], []])) if axis == -1 else []
    mk = helper.make_node
    c.nodes = [mk("ReduceMean", ["x"], ["m"], axes=[axis], keepdims=1),
               mk("Sub", ["x", "m"], ["d"]),
               mk("Pow", ["d", _const(c, "e", expo)], ["d2"]),
               mk("ReduceMean", ["d2"], ["v"], axes=[axis], keepdims=1),
               mk("Add", ["v", _const(c, "eps", draw(st.sampled_from([1e-5, 1e-12, 0.1])))],
                  ["ve"]),
               mk("Sqrt", ["ve"], ["sd"]), mk("Div", ["d", "sd"], ["n"]),
               mk("Mul", ["n", _const(c, "g", _values(rng, gshape))], ["ng"]),
               mk("Add", ["ng", _const(c, "b", _values(rng, gshape))], ["y"])]
    c.atol = 1e-3


def _gelu_decomposed(draw, rng, zero, c):
    """The erf and tanh GELUs as exporters write them, and one with a wrong constant."""
    xs = _dims(draw, draw(st.integers(1, 3)), zero)
    c.inputs, c.feeds = [("x", F32, xs)], {"x": _values(rng, xs) * np.float32(2)}
    mk = helper.make_node
    half = draw(st.sampled_from([0.5, 0.5, 0.6]))
    if draw(st.booleans()):  # erf form, by a division or a multiplication
        if draw(st.booleans()):
            first = mk("Div", ["x", _const(c, "r2", 1.4142135)], ["t"])
        else:
            first = mk("Mul", ["x", _const(c, "r2", 0.70710677)], ["t"])
        c.nodes = [first, mk("Erf", ["t"], ["e"]),
                   mk("Add", ["e", _const(c, "one", 1.0)], ["p"]),
                   mk("Mul", ["x", "p"], ["q"]), mk("Mul", ["q", _const(c, "h", half)], ["y"])]
    else:  # tanh form
        c.nodes = [mk("Pow", ["x", _const(c, "three", 3.0)], ["x3"]),
                   mk("Mul", ["x3", _const(c, "k", 0.044715)], ["kx3"]),
                   mk("Add", ["x", "kx3"], ["in"]),
                   mk("Mul", ["in", _const(c, "s", 0.7978846)], ["sin"]),
                   mk("Tanh", ["sin"], ["th"]), mk("Add", ["th", _const(c, "one", 1.0)], ["p"]),
                   mk("Mul", [_const(c, "h", half), "x"], ["hx"]), mk("Mul", ["hx", "p"], ["y"])]


def _attention(draw, rng, zero, c):
    """Multi-head self-attention as exporters write it: projections, heads split by Reshape
    and Transpose, scaled scores (Mul or Div), an optional additive mask, Softmax, the
    weighted sum and the heads merged back."""
    b, seq = draw(st.integers(1, 2)), draw(st.sampled_from([1, 3, 8]))
    heads, d = draw(st.integers(1, 3)), draw(st.sampled_from([2, 4, 8]))
    e = heads * d
    mk = helper.make_node
    c.inputs, c.feeds = [("x", F32, [b, seq, e])], {"x": _values(rng, [b, seq, e])}
    c.init["split"] = np.array([0, 0, heads, d], np.int64)
    c.init["merge"] = np.array([0, 0, e], np.int64)
    for n in "qkv":
        c.init[f"w{n}"] = _values(rng, [e, e]) * np.float32(0.5)
        c.nodes += [mk("MatMul", ["x", f"w{n}"], [f"{n}p"]),
                    mk("Reshape", [f"{n}p", "split"], [f"{n}h"]),
                    mk("Transpose", [f"{n}h"], [f"{n}t"],
                       perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
    scale = draw(st.sampled_from([d ** -0.5, 0.3]))
    by_mul = draw(st.booleans())
    c.nodes += [mk("MatMul", ["qt", "kt"], ["s0"]),
                mk("Mul" if by_mul else "Div",
                   ["s0", _const(c, "sc", scale if by_mul else 1 / scale)], ["s"])]
    last = "s"
    if draw(st.booleans()):
        c.init["mask"] = np.where(rng.random((b, 1, 1, seq)) < 0.3, -1e4, 0).astype(np.float32)
        c.nodes.append(mk("Add", ["s", "mask"], ["sm"]))
        last = "sm"
    c.nodes += [mk("Softmax", [last], ["p"], axis=draw(st.sampled_from([-1, -1, -1, 2]))),
                mk("MatMul", ["p", "vt"], ["o"]),
                mk("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
                mk("Reshape", ["ot", "merge"], ["y"])]
    c.atol = 1e-4


def _conv_batch_norm(draw, rng, zero, c):
    """Conv -> BatchNormalization (-> Relu): the Conv+BN fold, with a bias or without."""
    nb, ch, mo = draw(st.sampled_from([1, 2])), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    xs = [nb, ch, draw(st.integers(3, 7)), draw(st.integers(3, 7))]
    k = draw(st.sampled_from([1, 3]))
    c.inputs, c.feeds = [("x", F32, xs)], {"x": _values(rng, xs)}
    c.init = {"w": _values(rng, [mo, ch, k, k]), "s": _values(rng, [mo]),
              "bb": _values(rng, [mo]), "mu": _values(rng, [mo]),
              "var": _values(rng, [mo], positive=True)}
    ins = ["x", "w"]
    if draw(st.booleans()):
        c.init["cb"] = _values(rng, [mo])
        ins.append("cb")
    mk = helper.make_node
    c.nodes = [mk("Conv", ins, ["cv"], kernel_shape=[k, k], pads=[k // 2] * 4),
               mk("BatchNormalization", ["cv", "s", "bb", "mu", "var"], ["y"],
                  epsilon=draw(st.sampled_from([1e-5, 1e-3])))]
    c.atol = 1e-4


@st.composite
def patterns(draw, rng, zero):
    """Subgraphs the optimizer rewrites (LayerNorm, GELU, attention, Conv+BN), as exporters
    write them, with near misses it must leave alone."""
    c = Case("patterns", ort_rewrites=False)  # the rewrites under test are jitort's
    build = draw(st.sampled_from([_layer_norm_decomposed, _gelu_decomposed, _attention,
                                  _conv_batch_norm]))
    build(draw, rng, zero, c)
    c.kind = f"patterns {build.__name__.strip('_')}"
    c.outputs = [("y", F32)]
    return _maybe_relu(draw, c)


def _feed(c, rng, name, shape, **kw):
    """A float32 graph input ``name`` of ``shape``, fed random values; returns the name."""
    c.inputs.append((name, F32, list(shape)))
    c.feeds[name] = _values(rng, shape, **kw)
    return name


def _const_or_fed(draw, c, name, value):
    """``value`` (float32 or int64) as an initializer (constant-folded paths) or as a feed
    (run-time checks); returns the name."""
    if draw(st.booleans()):
        c.init[name] = value
    else:
        c.inputs.append((name, I64 if value.dtype == np.int64 else F32, list(value.shape)))
        c.feeds[name] = value
    return name


def _indices(rng, d, shape):
    """int64 indices into an axis of length d (negative ones too), of ``shape``."""
    return rng.integers(-d, d, shape).astype(np.int64) if d else np.zeros(shape, np.int64)


def _gather_elements(draw, rng, zero, c, xs):
    ax = draw(st.integers(-len(xs), len(xs) - 1))
    d = xs[ax]
    ishape = [draw(st.integers(0 if zero else 1, k)) for k in xs]
    ishape[ax] = draw(st.integers(0 if zero else 1, 4)) if d else 0
    _const_or_fed(draw, c, "i", _indices(rng, d, ishape))
    c.nodes = [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=ax)]


def _scatter_elements(draw, rng, zero, c, xs):
    ax = draw(st.integers(-len(xs), len(xs) - 1))
    d = xs[ax]
    reduction = draw(st.sampled_from(["none", "add", "mul"]))
    ishape = [draw(st.integers(0 if zero else 1, k)) for k in xs]
    if reduction == "none":  # distinct indices along the axis: duplicates are unspecified
        k = draw(st.integers(0 if zero else 1, d)) if d else 0
        ishape[ax] = k
        perm = np.argsort(rng.random(ishape[:ax % len(xs)] + [d] + ishape[ax % len(xs) + 1:]),
                          axis=ax)
        idx = np.take(perm, np.arange(k), axis=ax).astype(np.int64)
        idx = np.where(rng.random(idx.shape) < 0.3, idx - d, idx)  # some negative
    else:
        ishape[ax] = draw(st.integers(0, 4)) if d else 0
        idx = _indices(rng, d, ishape)
    _const_or_fed(draw, c, "i", idx)
    _feed(c, rng, "u", idx.shape)
    c.nodes = [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=ax,
                                reduction=reduction)]


def _nd_indices(rng, xs, k, lead, distinct):
    """``lead`` + [k] indices into the first k dims of xs, some negative; distinct rows when
    asked (ScatterND without a reduction)."""
    count = int(np.prod(lead)) if lead else 1
    space = int(np.prod(xs[:k])) if k else 1
    if distinct:
        count = min(count, space)
        lead = [count]
        flat = rng.permutation(space)[:count]
    else:
        flat = rng.integers(0, max(space, 1), count)
    idx = np.stack(np.unravel_index(flat, xs[:k]), -1) if k else np.zeros((count, 0), np.int64)
    idx = np.where(rng.random(idx.shape) < 0.3, idx - np.array(xs[:k], np.int64), idx)
    return idx.reshape(list(lead) + [k]).astype(np.int64)


def _gather_nd(draw, rng, zero, c, xs):
    batch = draw(st.integers(0, min(1, len(xs) - 1)))
    k = draw(st.integers(1, len(xs) - batch))
    lead = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    if 0 in xs[batch:batch + k]:
        return _gather_elements(draw, rng, zero, c, xs)  # no index into an empty axis
    if batch:
        rows = [_nd_indices(rng, xs[1:], k, lead, False) for _ in range(xs[0])]
        idx = np.stack(rows) if rows else np.zeros([0] + lead + [k], np.int64)
    else:
        idx = _nd_indices(rng, xs, k, lead, False)
    _const_or_fed(draw, c, "i", idx)
    c.nodes = [helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch)]


def _scatter_nd(draw, rng, zero, c, xs):
    reduction = draw(st.sampled_from(["none", "add", "mul"]))
    k = draw(st.integers(1, len(xs)))
    if 0 in xs[:k]:
        return _gather_elements(draw, rng, zero, c, xs)
    lead = [draw(st.integers(1, 4))]
    idx = _nd_indices(rng, xs, k, lead, reduction == "none")
    _const_or_fed(draw, c, "i", idx)
    _feed(c, rng, "u", list(idx.shape[:-1]) + xs[k:])
    c.nodes = [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)]


def _topk(draw, rng, zero, c, xs):
    ax = draw(st.integers(-len(xs), len(xs) - 1))
    k = draw(st.integers(0, xs[ax]))
    c.init["k"] = np.array([k], np.int64)
    c.nodes = [helper.make_node("TopK", ["x", "k"], ["y", "yi"], axis=ax,
                                largest=int(draw(st.booleans())), sorted=1)]
    c.outputs = [("y", F32), ("yi", I64)]


def _cumsum(draw, rng, zero, c, xs):
    c.init["a"] = np.array(draw(st.integers(-len(xs), len(xs) - 1)), np.int64)
    c.nodes = [helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=int(draw(st.booleans())),
                                reverse=int(draw(st.booleans())))]


def _arg(draw, rng, zero, c, xs):
    ax = draw(st.integers(-len(xs), len(xs) - 1))
    if xs[ax] == 0:
        return _cumsum(draw, rng, zero, c, xs)
    op = draw(st.sampled_from(["ArgMax", "ArgMin"]))
    if draw(st.booleans()):  # ties: values from a few levels
        c.feeds["x"] = np.round(c.feeds["x"]).astype(np.float32)
    c.nodes = [helper.make_node(op, ["x"], ["y"], axis=ax, keepdims=int(draw(st.booleans())),
                                select_last_index=int(draw(st.booleans())))]
    c.outputs = [("y", I64)]


def _trilu(draw, rng, zero, c, xs):
    if len(xs) < 2:
        return _cumsum(draw, rng, zero, c, xs)
    c.init["k"] = np.array(draw(st.integers(-3, 3)), np.int64)
    c.nodes = [helper.make_node("Trilu", ["x", "k"], ["y"], upper=int(draw(st.booleans())))]


#: Einsum equations of the kinds exporters write (attention, bilinear forms, reductions,
#: transposes, batch diagonals), each with a function giving its second operand's shape
_EINSUM = [("ij,jk->ik", 2, lambda s, d: [s[1], d]), ("bij,bjk->bik", 3, lambda s, d: [s[0], s[2], d]),
           ("bhqd,bhkd->bhqk", 4, lambda s, d: [s[0], s[1], d, s[3]]),
           ("ij,ij->i", 2, lambda s, d: list(s)), ("ij->ji", 2, None), ("bij->bj", 3, None),
           ("i,i->", 1, lambda s, d: list(s)), ("bi,bj->bij", 2, lambda s, d: [s[0], d]),
           ("...ij,...jk->...ik", 3, lambda s, d: [s[0], s[2], d]), ("bii->bi", 3, None)]


def _einsum(draw, rng, zero, c, xs):
    eq, rank, other = draw(st.sampled_from(_EINSUM))
    xs = _dims(draw, rank, zero, (1, 2, 3, 5))
    if eq == "bii->bi":
        xs[2] = xs[1]
    c.inputs = [("x", F32, xs)]
    c.feeds = {"x": _values(rng, xs)}
    ins = ["x"]
    if other is not None:
        ins.append(_feed(c, rng, "x2", other(xs, draw(st.sampled_from([1, 2, 4] + (
            [0] if zero else []))))))
    c.nodes = [helper.make_node("Einsum", ins, ["y"], equation=eq)]
    c.atol = 1e-4
    # onnxruntime 1.32 dies of SIGFPE on a 4-D batched product over an empty axis
    c.ort = not (rank == 4 and 0 in xs)


def _one_node_case(draw, rng, zero, kind, ranks, dims, builders):
    """A case of one float32 input x drawn with a rank in ``ranks`` and sides from ``dims``,
    output y, completed by one of ``builders`` (which may replace inputs and outputs)."""
    c = Case(kind)
    xs = _dims(draw, draw(st.integers(*ranks)), zero, dims)
    c.inputs = [("x", F32, xs)]
    c.feeds = {"x": _values(rng, xs)}
    c.outputs = [("y", F32)]
    draw(st.sampled_from(builders))(draw, rng, zero, c, xs)
    c.kind = f"{kind} {c.nodes[0].op_type}"
    return c


@st.composite
def indexing(draw, rng, zero):
    """Gathers and scatters (element-wise and N-d, with negative indices, reductions, indices
    constant or fed), TopK, CumSum, ArgMax / ArgMin (ties), Trilu and Einsum."""
    c = _one_node_case(draw, rng, zero, "indexing", (1, 4), (1, 2, 3, 5),
                       [_gather_elements, _scatter_elements, _gather_nd, _scatter_nd, _topk,
                        _cumsum, _arg, _trilu, _einsum])
    return _maybe_relu(draw, c) if c.outputs == [("y", F32)] else c


def _gelus(draw, rng, zero, c, xs):
    op = draw(st.sampled_from(["Gelu", "FastGelu", "BiasGelu", "QuickGelu"]))
    ins = ["x"]
    if op == "BiasGelu" or op == "FastGelu" and draw(st.booleans()):
        ins.append(_const_or_fed(draw, c, "b", _values(rng, xs[-1:])))
    attrs = {"alpha": draw(st.sampled_from([1.0, 1.702, -0.5]))} if op == "QuickGelu" else {}
    c.nodes = [helper.make_node(op, ins, ["y"], domain=MS, **attrs)]


def _fused_matmul(draw, rng, zero, c, xs):
    ta, tb = int(draw(st.booleans())), int(draw(st.booleans()))
    batch = _dims(draw, draw(st.integers(0, 2)), zero, (1, 2, 3))
    m, k, n = (draw(st.sampled_from([1, 2, 5, 8] + ([0] if zero else []))) for _ in range(3))
    a = batch + ([k, m] if ta else [m, k])
    b = (batch if draw(st.booleans()) else []) + ([n, k] if tb else [k, n])
    c.inputs, c.feeds = [], {}
    _feed(c, rng, "x", a)
    _const_or_fed(draw, c, "w", _values(rng, b))
    c.nodes = [helper.make_node("FusedMatMul", ["x", "w"], ["y"], domain=MS, transA=ta,
                                transB=tb, alpha=draw(st.sampled_from([1.0, 0.5, -2.0])))]
    c.atol = 1e-4


def _skip_norms(draw, rng, zero, c, xs):
    op = draw(st.sampled_from(["SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                               "SimplifiedLayerNormalization"]))
    h = xs[-1] = draw(st.sampled_from([1, 4, 16, 33]))
    xs = xs if len(xs) >= 2 else [2] + xs
    c.inputs, c.feeds = [], {}
    _feed(c, rng, "x", xs)
    c.init["g"] = _values(rng, [h])
    eps = draw(st.sampled_from([1e-5, 1e-12]))
    if op == "SimplifiedLayerNormalization":  # onnxruntime's, in the default domain
        c.nodes = [helper.make_node(op, ["x", "g"], ["y"], epsilon=eps, axis=-1)]
        return
    skip = xs if draw(st.booleans()) else xs[-2:]
    ins = ["x", _feed(c, rng, "s", skip), "g"]
    # the optional beta (SkipLayerNormalization's) and bias: an omitted one before a given one
    # keeps its slot ("")
    opt = (["be" if draw(st.booleans()) else ""] if op == "SkipLayerNormalization" else [])
    opt.append("bi" if draw(st.booleans()) else "")
    for name in filter(None, opt):
        c.init[name] = _values(rng, [h])
    while opt and not opt[-1]:
        opt.pop()
    ins += opt
    outs = ["y", "", "", "sum"] if draw(st.booleans()) else ["y"]
    c.nodes = [helper.make_node(op, ins, outs, domain=MS, epsilon=eps)]
    if len(outs) > 1:
        c.outputs = [("y", F32), ("sum", F32)]
    c.atol = 1e-4


def _rotary(draw, rng, zero, c, xs):
    b, s, n = draw(st.integers(1, 2)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    hd = draw(st.sampled_from([2, 4, 8]))
    four = draw(st.booleans())
    xs = [b, n, s, hd] if four else [b, s, n * hd]
    c.inputs, c.feeds = [], {}
    _feed(c, rng, "x", xs)
    maxpos = s + draw(st.integers(0, 4))
    ang = np.arange(maxpos)[:, None] / 10000 ** (np.arange(hd // 2) / (hd // 2))[None]
    c.init["cos"], c.init["sin"] = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    pos = (rng.integers(0, maxpos, (b, s)) if draw(st.booleans())
           else np.array([draw(st.integers(0, maxpos - s))]))
    c.init["pos"] = pos.astype(np.int64)
    attrs = {"interleaved": int(draw(st.booleans()))}
    if not four:
        attrs["num_heads"] = n
    c.nodes = [helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
                                **attrs)]


def _qlinear_unary_binary(draw, rng, zero, c, xs):
    op = draw(st.sampled_from(["QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu"]))
    dt, et = draw(st.sampled_from([(np.uint8, TensorProto.UINT8), (np.int8, TensorProto.INT8)]))
    info = np.iinfo(dt)

    def q(name, shape):
        c.inputs.append((name, et, list(shape)))
        c.feeds[name] = rng.integers(info.min, info.max + 1, shape).astype(dt)
        c.init[name + "_s"] = np.array(draw(st.sampled_from([0.02, 0.05, 0.125])), np.float32)
        c.init[name + "_z"] = np.array(rng.integers(info.min // 2, info.max // 2 + 1), dt)
        return [name, name + "_s", name + "_z"]
    c.inputs, c.feeds = [], {}
    ins = q("a", xs)
    if op in ("QLinearAdd", "QLinearMul"):
        ins += q("b", _broadcast_partner(draw, xs))
    c.init["y_s"] = np.array(draw(st.sampled_from([0.05, 0.1, 0.004])), np.float32)
    c.init["y_z"] = np.array(rng.integers(info.min // 2, info.max // 2 + 1), dt)
    attrs = {"alpha": draw(st.sampled_from([0.1, 0.01]))} if op == "QLinearLeakyRelu" else {}
    c.nodes = [helper.make_node(op, ins + ["y_s", "y_z"], ["y"], domain=MS, **attrs)]
    c.outputs = [("y", et)]
    # exact, but for QLinearAdd: onnxruntime's x86 kernel rounds a float32 sum formed in
    # another order (one step apart at some ties; jitort's interpreter tier
    # and compiled tier agree with each other exactly)
    c.atol, c.rtol = (1 if op == "QLinearAdd" else 0), 0


@st.composite
def contrib(draw, rng, zero):
    """onnxruntime's contrib ops that its transformer optimizer and quantizer write: the GELU
    family, FusedMatMul, the skip / simplified LayerNorms, RotaryEmbedding, QLinearAdd / Mul /
    Sigmoid / LeakyRelu."""
    return _one_node_case(draw, rng, zero, "contrib", (1, 3), (1, 2, 3, 8),
                          [_gelus, _fused_matmul, _skip_norms, _rotary, _qlinear_unary_binary])


STRUCTURES = [elementwise, reduction, matmul, conv, shape_op, normalization, half, quantized,
              upsample, patterns, indexing, contrib]


@st.composite
def cases(draw, structures=None):
    seed = draw(st.integers(0, 2 ** 32 - 1))
    zero = draw(st.integers(0, 3)) == 0  # size-0 dims allowed in about one graph in four
    structure = draw(st.sampled_from(structures or STRUCTURES))
    return draw(structure(np.random.default_rng(seed), zero))


# --- the differential check -------------------------------------------------------------------
class Mismatch(AssertionError):
    pass


def reference(model, feeds, ort_rewrites: bool = True, use_ort: bool = True):
    """onnxruntime's outputs, or onnx.reference's where onnxruntime refuses; None if both do.
    ``ort_rewrites=False``: onnxruntime without its graph rewrites (for graphs that test
    jitort's: onnxruntime 1.32's LayerNorm fusion takes ``Pow(d, 3)`` or ``Pow(d, 4)`` for a
    variance). ``use_ort=False``: onnx.reference only."""
    try:
        if not use_ort:
            raise RuntimeError("onnxruntime not asked")
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 4
        if not ort_rewrites:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"]).run(None, feeds), "ort"
    except Exception:
        pass
    try:
        from onnx.reference import ReferenceEvaluator
        with np.errstate(all="ignore"):  # 0/0 on empty tensors, as onnxruntime
            return ReferenceEvaluator(model).run(None, feeds), "onnx.reference"
    except Exception:
        return None, None


def check(case: Case, debug: bool = False, tier: str = "compiled") -> str:
    """Run ``case`` on jitort's ``tier`` and compare; returns what it compared against."""
    import jitort
    model = case.model()
    want, ref = reference(model, case.feeds, case.ort_rewrites, case.ort)
    try:
        got = run_tier(model, case.feeds, tier, debug)
    except jitort.JitortError as e:
        if want is None:
            return "both refused"  # an invalid graph: refusing it with a jitort error is right
        raise Mismatch(f"jitort raised {type(e).__name__}: {e}\n{case.describe()}") from e
    except Exception as e:
        raise Mismatch(f"jitort crashed with {type(e).__name__}: {e}\n{case.describe()}") from e
    if want is None:
        return "jitort only"
    if not len(got) == len(want) == len(case.outputs):
        raise Mismatch(f"{len(got)} outputs from jitort, {len(want)} from {ref}, "
                       f"{len(case.outputs)} in the graph\n{case.describe()}")
    for (name, _), g, w in zip(case.outputs, got, want):
        w = np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            raise Mismatch(f"output {name}: jitort {g.dtype}{g.shape} vs {ref} {w.dtype}{w.shape}\n"
                           f"{case.describe()}")
        try:
            np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol, equal_nan=True)
        except AssertionError as e:
            raise Mismatch(f"output {name} differs from {ref}: {str(e)[:1500]}\n{case.describe()}") from None
    return ref


def run_campaign(examples: int, *, seed: int | None = None, derandomize: bool = False,
                 debug: bool = False, failures: list | None = None, on_example=None,
                 tier: str = "compiled", structures: list | None = None):
    """Run ``examples`` hypothesis examples; returns a Counter (examples, and per reference).

    With ``failures`` (a list) mismatches are collected there and the campaign goes on;
    without, the first one is raised (and shrunk by hypothesis).
    """
    from collections import Counter
    stats = Counter()

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(cases(structures))
    def prop(case):
        stats["examples"] += 1
        try:
            stats[check(case, debug, tier)] += 1
        except Mismatch as e:
            if failures is None:
                raise
            stats["failed"] += 1
            failures.append(str(e))
        if on_example:
            on_example(stats)

    if seed is not None:
        from hypothesis import seed as hseed
        prop = hseed(seed)(prop)
    prop()
    return stats


@pytest.mark.parametrize("tier", TIERS)
def test_fuzz_against_onnxruntime(tier):
    stats = run_campaign(CI_EXAMPLES, derandomize=True, tier=tier)
    print(dict(stats))
    assert stats["examples"] >= CI_EXAMPLES * 0.9
    assert stats["ort"] + stats["onnx.reference"] >= stats["examples"] * 0.8, stats


@pytest.mark.parametrize("structure", STRUCTURES, ids=lambda s: s.__name__)
def test_every_structure_generates_valid_graphs(structure):
    """The generator itself: most drawn graphs are valid for onnxruntime (else the fuzz is empty)."""
    @settings(max_examples=25, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 2 ** 32 - 1), st.data())
    def prop(seed, data):
        case = data.draw(structure(np.random.default_rng(seed), False))
        want, ref = reference(case.model(), case.feeds)
        counts[ref] = counts.get(ref, 0) + 1
    counts: dict = {}
    prop()
    assert counts.get("ort", 0) >= 20, counts

"""Layout: run chains of depthwise and pointwise convolutions channels-last (NHWC).

On small planes the NCHW depthwise kernels spend more on loop setup per row of 7-14 pixels than
on arithmetic; channels-last, every tap is one contiguous multiply-add over a pixel's channels
and a pointwise convolution is a plain gemm (``kernels/cpu/conv_nhwc.py``). onnxruntime gets
the same from its NCHWc transformer: the layout is decided for a region of the graph, with one
reorder where it starts and one where it ends, not by each kernel.

The pass finds the connected regions of 4-D nodes that can run channels-last — depthwise and
pointwise Conv / FusedConv, elementwise ops (constant operands are permuted, size-1 ones
broadcast alike in both layouts), Concat, keepdims reductions and global pools over known axes
— joined by the non-constant 4-D tensors between them, and converts each region that holds a
depthwise convolution (the op that gains; a region of pointwise convolutions alone would only
add transposes). Convolutions become ``jitort.FusedConvNHWC`` with HWIO weights; a tensor that
enters a region gets one Transpose to NHWC, one that leaves it (or is a graph output) one back
to NCHW, keeping its name. Dense and grouped convolutions, pools and everything else stay NCHW.
A region of one depthwise convolution that ``conv_nhwc.dwconv_staged`` can run stays NCHW too
(``staged_depthwise``): that kernel stages bands of rows channels-last itself.

``JITORT_LAYOUT=nchw`` (``Options.layout``) turns the pass off (for comparisons): the pipeline
leaves it out (:func:`jitort.passes.run_pipeline`). The CUDA backend's pipeline does
not include it.
"""
from __future__ import annotations

import logging

import numpy as np

from ..disjoint import DisjointSets
from ..ir import Graph, Node, Value, const_value
from .patterns import JITORT_DOMAIN, auto_pad

log = logging.getLogger("jitort.passes")

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]
#: NCHW axis -> its position in NHWC
_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}

_ELEMENTWISE = {
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "Cast", "Ceil",
    "Celu", "Clip", "Cos", "Cosh", "Div", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu",
    "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN",
    "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg",
    "Not", "Or", "PRelu", "Pow", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid",
    "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Swish", "Tan",
    "Tanh", "ThresholdedRelu", "Where", "Xor",
}
#: Convolutions run channels-last only on output planes of at most this many pixels. Measured
#: 2026-11-26 at 1 thread (Zen 5) on a sweep of depthwise / pointwise layer shapes (planes
#: 1-112, 8-960 channels, kernels 1-7, strides 1-2: ``scripts/sweeps/compare_conv_layouts.py``, first
#: taken over the 61 distinct shapes of GhostNet's layers),
#: channels-last kernel time / NCHW kernel time: planes 7x7 and 14x14 (and 14x14 outputs of
#: stride-2 depthwise on 28x28) 0.16-0.99 for depthwise, 0.64-1.05 for pointwise except
#: 1.16-1.27 where only 56 output channels; 28x28: depthwise 0.91-2.66 and pointwise 1.0-1.5;
#: 56x56 and 112x112 with 8-48 channels: 0.8-5.5 (a pixel's few channels are a short vector,
#: where NCHW rows are long, and a pointwise gemm with 8-24 output columns runs far below
#: BLAS peak).
MAX_PLANE = 256
#: Depthwise convolutions whose channels fill whole 16-lane vectors run channels-last on
#: larger planes too, up to DW_MAX_PLANE outputs, since the register-tiled channels-last
#: kernel (``conv_nhwc._dw_tile``, 8 pixels x 16 channels). ``python scripts/sweeps/sweep_dw_layout.py``
#: (one-depthwise models, the two layout transposes included; 1 thread, Zen 5, 2026-11-27,
#: seventh session), channels-last / NCHW time onto 28x28 outputs: stride 1 with 32-240
#: channels 0.72-0.90 (16 channels 1.10, 72 -- a half vector left -- 1.07-1.13); stride 2
#: with 96-240 channels 0.81-0.96 (32-64 channels 0.97-1.09, 72 1.67); onto 56x56 1.03-1.40
#: (48-144 channels), not taken. At 2 threads the taken shapes are even (0.98-1.02).
DW_MAX_PLANE = 28 * 28
DW_LANES = 16
DW_MIN_CHANNELS = {1: 32, 2: 96}   # by stride
_REDUCE = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceL1",
           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}
_GLOBAL_POOL = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}


def _rank4(v: Value | None) -> bool:
    return v is not None and v.shape is not None and len(v.shape) == 4


def _size1(v: Value) -> bool:
    return v.shape is not None and len(v.shape) <= 4 and all(d == 1 for d in v.shape)


def _float(v: Value | None) -> bool:
    return v is not None and v.dtype is not None and np.dtype(v.dtype) in (
        np.dtype(np.float32), np.dtype(np.float64))


def _plain_conv2d(n: Node) -> bool:
    """A Conv / FusedConv over 4-D float tensors with constant 4-D weights (and a 1-D bias) of
    the input's dtype and explicit pads: what the channels-last kernels and
    ``conv_nhwc.dwconv_staged`` take."""
    if not ((n.op_type == "Conv" and not n.domain)
            or (n.op_type == "FusedConv" and n.domain == JITORT_DOMAIN)):
        return False
    x, w = n.inputs[0], n.input(1)
    if not (_rank4(x) and _rank4(n.outputs[0]) and w is not None and w.is_const
            and w.const.ndim == 4 and _float(x) and w.dtype == x.dtype
            and n.outputs[0].dtype == x.dtype):
        return False
    b = n.input(2)
    if b is not None and not (b.dtype == x.dtype and b.shape is not None and len(b.shape) == 1):
        return False
    return auto_pad(n) in ("NOTSET", "VALID")


def _staged_kernel(n: Node) -> bool:
    """Whether ``conv_nhwc.dwconv_staged``'s register tiles take the depthwise convolution n
    (its kernel width, column stride and dilations: ``staged_ok``)."""
    from jitort.kernels.cpu.conv_nhwc import staged_ok
    w = n.inputs[1].const
    strides = list(n.attrs.get("strides") or [1, 1])
    dil = list(n.attrs.get("dilations") or [1, 1])
    return (len(strides) == 2 and len(dil) == 2
            and staged_ok(n.inputs[0].dtype, int(w.shape[3]), int(strides[1]), int(dil[0]),
                          int(dil[1])))


def conv_kind(n: Node) -> str:
    """"depthwise", "pointwise" or "" for a Conv / FusedConv this pass can run channels-last."""
    if not _plain_conv2d(n):
        return ""
    x, w = n.inputs[0], n.input(1)
    m, cg, kh, kw = w.const.shape
    group = int(n.attrs.get("group", 1))
    c = x.shape[1]
    oh, ow = n.outputs[0].shape[2:]
    if not (isinstance(oh, int) and isinstance(ow, int)):
        return ""
    kind = _kind(n, m, cg, kh, kw) if c == m or group == 1 else ""
    if oh * ow <= MAX_PLANE or (kind == "depthwise" and _wide_depthwise(n, m, oh * ow)):
        return kind
    return ""


def _wide_depthwise(n: Node, m, plane) -> bool:
    """Whether a depthwise convolution above MAX_PLANE outputs still runs channels-last
    (DW_MAX_PLANE)."""
    strides = list(n.attrs.get("strides") or [1, 1])
    need = DW_MIN_CHANNELS.get(max(strides))
    return (plane <= DW_MAX_PLANE and need is not None and m >= need and m % DW_LANES == 0
            and strides[0] == strides[1])


def staged_depthwise(n: Node) -> bool:
    """Whether a depthwise convolution that would run channels-last in a region of its own
    stays NCHW, for ``conv_nhwc.dwconv_staged``: it transposes bands of rows into 16-channel
    blocks in a worker's scratch and runs the same register tiles, in one parallel region
    where the region's two whole-tensor transposes and the kernel took three (``python
    scripts/sweeps/sweep_dw_staged.py``, 15 layers, Zen 5: 0.77-0.80x the region's time at 1
    thread, 0.65-0.70x at 2, geomeans over four runs, 2026-11-28)."""
    return conv_kind(n) == "depthwise" and _staged_kernel(n)


def staged_nchw(n: Node) -> bool:
    """Whether a depthwise convolution on NCHW tensors (one the pass leaves NCHW: planes above
    DW_MAX_PLANE, fewer channels than DW_MIN_CHANNELS) runs as ``conv_nhwc.dwconv_staged``
    instead of the NCHW kernels: float32 with constant weights, the register tiles' kernels
    (``staged_ok``), channels that fill whole DW_LANES-channel groups (the staged rows are
    blocks of 16 channels: a part-filled one computes and moves idle lanes), and not a 3x3
    stride-1 layer onto more than DW_MAX_PLANE outputs (the NCHW kernels' fused nine-tap rows
    are as fast there). ``python scripts/sweeps/sweep_dw_nchw_staged.py`` (41 layers: 8-120 channels
    x 3x3/1, 3x3/2, 5x5/1 x 28x28 / 56x56 inputs, 1 thread, Zen 5, 2026-11-28): whole groups
    0.75-0.90x the NCHW kernels' time but 1.01-1.09x for 3x3/1 onto 56x56; part-filled groups
    0.73-2.15x (8 and 24 channels 0.97-2.15, 56x56 planes 0.90-1.55)."""
    if not _plain_conv2d(n):
        return False
    c, (m, cg, kh, kw) = n.inputs[0].shape[1], n.inputs[1].const.shape
    oh, ow = n.outputs[0].shape[2:]
    strides = list(n.attrs.get("strides") or [1, 1])
    big_3x3 = (kh == kw == 3 and strides == [1, 1] and not (
        isinstance(oh, int) and isinstance(ow, int) and oh * ow <= DW_MAX_PLANE))
    return (isinstance(c, int) and c == m == int(n.attrs.get("group", 1)) and cg == 1
            and c % DW_LANES == 0 and not big_3x3 and _staged_kernel(n))


def nhwc_kind(n: Node) -> str:
    """"depthwise" or "pointwise" for a jitort.FusedConvNHWC (HWIO weights), else ""."""
    w = n.input(1)
    if w is None or w.shape is None or len(w.shape) != 4:
        return ""
    kh, kw, cg, m = w.shape
    return _kind(n, m, cg, kh, kw)


def _kind(n: Node, m, cg, kh, kw) -> str:
    """The kind of a convolution with ``m`` output channels and ``cg`` input channels per
    group (a depthwise one must also have as many input channels as outputs)."""
    group = int(n.attrs.get("group", 1))
    if group > 1 and cg == 1 and group == m:
        return "depthwise"
    pads = list(n.attrs.get("pads") or [0] * 4)
    if (group == 1 and (kh, kw) == (1, 1) and list(n.attrs.get("strides") or [1, 1]) == [1, 1]
            and not any(pads)):
        return "pointwise"
    return ""


def _const_axes(n: Node) -> list[int] | None:
    """A reduction's axes (attribute, or constant input 1 from opset 18), or None if unknown."""
    if len(n.inputs) > 1 and n.inputs[1] is not None:
        a = n.inputs[1]
        return [int(v) for v in a.const.reshape(-1)] if a.is_const else None
    axes = n.attrs.get("axes")
    return None if axes is None else [int(v) for v in axes]


def _convertible(n: Node) -> bool:
    if conv_kind(n):
        return True
    if n.domain or not n.outputs or not all(_rank4(o) for o in n.outputs):
        return False
    op = n.op_type
    if op in _ELEMENTWISE:
        return all(v is None or _rank4(v) or v.is_const and (v.shape is not None
                                                            and len(v.shape) <= 4)
                   or _size1(v) for v in n.inputs) and not n.implicit
    if op == "Concat":
        return all(_rank4(v) for v in n.inputs) and int(n.attrs.get("axis", 0)) in range(-4, 4)
    if op in _GLOBAL_POOL:
        return _rank4(n.inputs[0])
    if op in _REDUCE:
        axes = _const_axes(n)
        return (_rank4(n.inputs[0]) and int(n.attrs.get("keepdims", 1)) == 1 and bool(axes)
                and not int(n.attrs.get("noop_with_empty_axes", 0)))
    return False


def _permute_const(v: Value, g: Graph) -> Value:
    a = v.const
    a4 = a.reshape((1,) * (4 - a.ndim) + a.shape)
    return const_value(g.fresh_name(v.name + "_nhwc"), np.ascontiguousarray(a4.transpose(TO_NHWC)))


def convert_to_channels_last(g: Graph) -> int:
    """Rewrite every convertible region holding a depthwise convolution (module docstring);
    returns the number of regions converted."""
    nodes = g.nodes
    ok = [_convertible(n) for n in nodes]
    if not any(ok[i] and conv_kind(n) == "depthwise" for i, n in enumerate(nodes)):
        return 0
    index = {id(n): i for i, n in enumerate(nodes)}
    consumers = g.consumers()
    region = _regions(nodes, ok, index, consumers)
    outputs = g.output_ids()
    twins = _Twins(g)
    count = 0
    for i, n in enumerate(nodes):
        if not region[i]:
            twins.nodes.append(n)
            continue
        count += 1
        outs = []
        for o in n.outputs:
            t = Value(g.fresh_name(o.name + "_nhwc"), o.dtype, tuple(o.shape[p] for p in TO_NHWC))
            outs.append(t)
        twins.nodes.append(_nhwc_node(g, n, outs, twins))
        for o, t in zip(n.outputs, outs):
            twins.cl[id(o)] = t
            readers = consumers.get(id(o), [])
            if id(o) in outputs or any(not region[index[id(r)]] for r in readers):
                twins.nodes.append(Node("Transpose", [t], [o], {"perm": list(TO_NCHW)}, "",
                                        g.fresh_name("to_nchw"), 1))
    g.nodes = twins.nodes
    g.relink()
    log.info("channels-last regions: %d nodes", count)
    return count


def _regions(nodes: list[Node], ok: list[bool], index: dict, consumers: dict) -> list[bool]:
    """Per node, whether it is converted: the connected components of convertible nodes
    (linked through non-constant 4-D values) that hold a depthwise convolution, except a
    depthwise convolution alone in its component that dwconv_staged takes in NCHW."""
    sets = DisjointSets(len(nodes))
    find = sets.find
    for i, n in enumerate(nodes):
        if not ok[i]:
            continue
        for v in n.inputs:
            if v is None or v.is_const or not _rank4(v) or v.producer is None:
                continue
            j = index.get(id(v.producer))
            if j is not None and ok[j]:
                sets.union(i, j)
    size: dict[int, int] = {}
    for i in range(len(nodes)):
        if ok[i]:
            size[find(i)] = size.get(find(i), 0) + 1
    keep = {find(i) for i, n in enumerate(nodes) if ok[i] and conv_kind(n) == "depthwise"
            and not (size[find(i)] == 1 and staged_depthwise(n)
                     and not _transposed_around(n, consumers))}
    return [ok[i] and find(i) in keep for i in range(len(nodes))]


def _transposed_around(n: Node, consumers: dict) -> bool:
    """The model's own permutes meet the region's transposes (and cancel) around n."""
    src = n.inputs[0].producer
    return ((src is not None and src.op_type == "Transpose"
             and list(src.attrs.get("perm", [])) == TO_NCHW)
            or any(r.op_type == "Transpose" and list(r.attrs.get("perm", [])) == TO_NHWC
                   for r in consumers.get(id(n.outputs[0]), [])))


class _Twins:
    """The rewritten node list and the NHWC twin of each NCHW value a region reads."""

    def __init__(self, g: Graph):
        self.g = g
        self.cl: dict[int, Value] = {}  # id(NCHW value) -> its NHWC twin
        self.nodes: list[Node] = []

    def nhwc(self, v: Value) -> Value:
        """The NHWC twin of a 4-D value read in a region (a Transpose in, made once)."""
        t = self.cl.get(id(v))
        if t is None:
            g = self.g
            t = Value(g.fresh_name(v.name + "_nhwc"), v.dtype,
                      tuple(v.shape[p] for p in TO_NHWC))
            self.nodes.append(Node("Transpose", [v], [t], {"perm": list(TO_NHWC)}, "",
                                   g.fresh_name("to_nhwc"), 1))
            self.cl[id(v)] = t
        return t

    def operand(self, v: Value | None) -> Value | None:
        """An elementwise operand in NHWC: constants permuted, 4-D values through their twin."""
        if v is None:
            return None
        if v.is_const:
            return _permute_const(v, self.g) if v.shape is not None and len(v.shape) >= 1 \
                and not _size1(v) else v
        if _rank4(v):
            return self.nhwc(v)
        return v   # size 1: the same in both layouts


def _nhwc_node(g: Graph, n: Node, outs: list[Value], twins: _Twins) -> Node:
    """The NHWC form of region node ``n``, writing ``outs`` (its inputs' twins made first)."""
    nhwc = twins.nhwc
    if conv_kind(n):
        w = n.inputs[1]
        hwio = const_value(g.fresh_name(w.name + "_hwio"),
                           np.ascontiguousarray(w.const.transpose(2, 3, 1, 0)))
        ins = [nhwc(n.inputs[0]), hwio, n.input(2)]
        if n.input(3) is not None:
            ins.append(nhwc(n.inputs[3]))
        attrs = {k: v for k, v in n.attrs.items() if k != "kernel_shape"}
        attrs.setdefault("activation", "")
        attrs.setdefault("activation_params", [0.0, 0.0])
        return Node("FusedConvNHWC", ins, outs, attrs, JITORT_DOMAIN, n.name, 1)
    if n.op_type in _GLOBAL_POOL:
        return _reduce_node(g, _GLOBAL_POOL[n.op_type], nhwc(n.inputs[0]), outs, [1, 2], n)
    if n.op_type in _REDUCE:
        axes = sorted(_AXIS[a % 4] for a in _const_axes(n))
        return _reduce_node(g, n.op_type, nhwc(n.inputs[0]), outs, axes, n)
    if n.op_type == "Concat":
        return Node("Concat", [nhwc(v) for v in n.inputs], outs,
                    dict(n.attrs, axis=_AXIS[int(n.attrs.get("axis", 0)) % 4]), "", n.name,
                    n.since_version)
    return Node(n.op_type, [twins.operand(v) for v in n.inputs], outs, dict(n.attrs), n.domain,
                n.name, n.since_version)


def _reduce_node(g: Graph, op: str, x: Value, outs: list[Value], axes: list[int], n: Node) -> Node:
    """``op`` over ``axes`` with keepdims, in the graph's opset form (axes an input from 18 on,
    13 for ReduceSum)."""
    opset = g.opsets.get("", 17)
    since = 13 if op == "ReduceSum" else 18
    attrs = {"keepdims": 1}
    if opset >= since:
        ax = const_value(g.fresh_name("axes"), np.array(axes, np.int64))
        return Node(op, [x, ax], outs, attrs, "", n.name, since)
    return Node(op, [x], outs, dict(attrs, axes=axes), "", n.name, 13 if op != "ReduceSum" else 11)

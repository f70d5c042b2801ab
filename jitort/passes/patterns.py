"""Pattern rewrites: Pad folding into Conv/pool pads, Conv+BatchNormalization folding, MatMul+Add -> Gemm-like,
strided pointwise convolutions on a subsampled input (epilogue fusion: :mod:`.epilogues`).

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


def _is_float_value(v: Value | None, floats: tuple = _FLOATS) -> bool:
    return v is not None and v.dtype is not None and np.dtype(v.dtype) in floats


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


def fuse_matmul_add_half(g: Graph) -> int:
    """:func:`fuse_matmul_add` for the CUDA pipeline: float16 MatMul + Add too (its GEMM
    takes float16 MatMulBias, the bias added in float32 before the one rounding)."""
    return fuse_matmul_add(g, _HALF_FLOATS)


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

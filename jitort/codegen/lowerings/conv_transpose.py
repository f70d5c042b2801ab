"""CPU lowerings: ConvTranspose (1-D, 2-D, 3-D; groups, strides, dilations, pads, output_padding).

Kernels: ``jitort.kernels.cpu.conv_transpose`` (alias ``_convt`` in generated drivers).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, Zeros
from ..registry import Unlowerable, lowering
from .common import _is_float, _prod

if TYPE_CHECKING:
    from ..emitter import Emitter

_convt = KernelModule("conv_transpose")


def _convt_ok(n: Node) -> bool:
    x, w, b = n.inputs[0], n.inputs[1], n.input(2)
    return (_is_float(x, w, n.outputs[0]) and w.dtype == x.dtype
            and (b is None or b.dtype == x.dtype))


def convt_begin_pads(n: Node, in_sp, k_sp, strides, dil, out_sp) -> list:
    """Begin pads per spatial axis as onnxruntime resolves them: explicit ``pads`` unless
    ``output_shape`` is given or auto_pad is SAME_*, in which case the total padding
    ``(in - 1) * s + output_padding + (k - 1) * d + 1 - out`` is split with the odd element
    at the end for SAME_UPPER and at the begin otherwise (SAME_LOWER, or output_shape
    without auto_pad), as onnxruntime 1.31 does (checked in tests/kernels/test_conv_transpose)."""
    at = n.attrs
    nd = len(in_sp)
    auto = at.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    opad = list(at.get("output_padding") or [0] * nd)
    if not at.get("output_shape") and auto not in ("SAME_UPPER", "SAME_LOWER"):
        if auto == "VALID":
            return [0] * nd
        return list(at.get("pads") or [0] * (2 * nd))[:nd]
    begins = []
    for a in range(nd):
        total = ((in_sp[a] - 1) * strides[a] + opad[a] + (k_sp[a] - 1) * dil[a] + 1
                 - out_sp[a])
        if total < 0:
            total = 0
        begins.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
    return begins


@lowering("ConvTranspose", supports=_convt_ok)
def lower_conv_transpose(em: Emitter, n: Node) -> None:
    from jitort.kernels.cpu.conv_transpose import convt_scratch_elems
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    b = n.input(2)
    xs, ws, ys = em.shape(x), em.shape(w), em.shape(y)
    nd = len(xs) - 2
    if nd not in (1, 2, 3) or len(ws) != len(xs) or len(ys) != len(xs):
        raise Unlowerable(n, f"{nd}-D transposed convolution")
    group = int(n.attrs.get("group", 1))
    if group < 1 or xs[1] != ws[0] or xs[1] % group or ys[1] != ws[1] * group or ys[0] != xs[0]:
        raise Unlowerable(n, f"inconsistent shapes X {xs}, W {ws}, Y {ys}, group {group}")
    if b is not None and tuple(em.shape(b)) != (ys[1],):
        raise Unlowerable(n, f"bias shape {em.shape(b)} is not ({ys[1]},)")
    k = list(ws[2:])
    ka = n.attrs.get("kernel_shape")
    if ka and list(ka) != [int(v) for v in k]:
        raise Unlowerable(n, f"kernel_shape {list(ka)} differs from W's {k}")
    strides = list(n.attrs.get("strides") or [1] * nd)
    dil = list(n.attrs.get("dilations") or [1] * nd)
    if len(strides) != nd or len(dil) != nd or min(strides + dil) < 1:
        raise Unlowerable(n, f"strides {strides} / dilations {dil}")
    pads = convt_begin_pads(n, xs[2:], k, strides, dil, ys[2:])
    pad3 = [0] * (3 - nd)
    one3 = [1] * (3 - nd)
    xs5 = tuple(xs[:2]) + tuple(one3) + tuple(xs[2:])
    ws5 = tuple(ws[:2]) + tuple(one3) + tuple(ws[2:])
    ys5 = tuple(ys[:2]) + tuple(one3) + tuple(ys[2:])
    strides, dil, pads = one3 + strides, one3 + dil, pad3 + list(pads)
    cg = xs[1] // group
    col = em.temp(max(1, convt_scratch_elems(cg, ws[1], _prod(k), xs5[2] * xs5[3], xs5[4],
                                             em.threads)), y.dtype)
    bv = em.read(b) if b is not None else Zeros(np.dtype(y.dtype).name, (1,))
    yv = em.write(y)
    em.call(_convt.convt3d, em.shaped(x, xs5), em.shaped(w, ws5), bv, yv.reshape(em.sizes(ys5)),
            col, *em.sizes((*strides, *pads, *dil)), em.size(group), b is not None)


def _host_ints(em: Emitter, n: Node, i: int, what: str) -> list:
    v = n.inputs[i]
    val = v.const if v.is_const else em.hostvals.get(id(v))
    if val is None:
        raise Unlowerable(n, f"{what} is not known at plan time")
    return [int(t) for t in val.reshape(-1)]


@lowering("Col2Im", supports=lambda n: _is_float(n.inputs[0], n.outputs[0]))
def lower_col2im(em: Emitter, n: Node) -> None:
    """Col2Im (opset 18): the scatter-add of blocks into an image, 1-D/2-D/3-D, as
    ``conv_transpose.col2im3d`` on (N, C, KD, KH, KW, L) / (N, C, D, H, W) views."""
    x, y = n.inputs[0], n.outputs[0]
    xs, ys = em.shape(x), em.shape(y)
    image = _host_ints(em, n, 1, "image_shape")
    block = _host_ints(em, n, 2, "block_shape")
    nd = len(image)
    if nd not in (1, 2, 3) or len(block) != nd or len(xs) != 3:
        raise Unlowerable(n, f"{nd}-D Col2Im")
    strides = list(n.attrs.get("strides") or [1] * nd)
    dil = list(n.attrs.get("dilations") or [1] * nd)
    pads = list(n.attrs.get("pads") or [0] * (2 * nd))
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd or min(strides + dil) < 1:
        raise Unlowerable(n, "strides / dilations / pads do not match the image's rank")
    grid = []
    for a in range(nd):
        span = image[a] + pads[a] + pads[a + nd] - (dil[a] * (block[a] - 1) + 1)
        if span < 0:
            raise Unlowerable(n, f"block larger than the padded image along axis {a}")
        grid.append(span // strides[a] + 1)
    if _prod(grid) != xs[2] or _prod(block) * ys[1] != xs[1]:
        raise Unlowerable(n, f"input {xs} does not match blocks {block} over a {grid} grid")
    one, zero = [1] * (3 - nd), [0] * (3 - nd)
    k3, g3 = one + block, one + grid
    xv = em.shaped(x, (xs[0], ys[1], *k3, xs[2]))
    yv = em.write(y).reshape(em.sizes((ys[0], ys[1], *(one + list(ys[2:])))))
    args = em.sizes((*g3, *(one + strides), *(zero + pads[:nd]), *(one + dil)))
    em.call(_convt.col2im3d, xv, yv, *args)

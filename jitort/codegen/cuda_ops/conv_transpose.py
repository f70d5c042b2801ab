"""CUDA lowering of 2-D ConvTranspose (``jitort.kernels.cuda.conv_transpose``).

Without it a decoder's upsampling ConvTranspose ran on the CPU backend, with copies to the host
and back around it. The output's size comes from the shape pass (strides, pads,
output_padding or output_shape), the begin pads from the CPU lowering's
:func:`~jitort.codegen.lowerings.conv_transpose.convt_begin_pads`, so both backends agree.
Refused (the node stays on the CPU): 1-D/3-D, auto_pad SAME_UPPER/SAME_LOWER, inconsistent
shapes or attributes.
"""
from __future__ import annotations

from ...ir import Node
from ..calls import KernelModule
from ..cuda_emit import CudaEmitter, _same_float, lowering
from ..lowerings.conv_transpose import convt_begin_pads
from ..registry import Unlowerable

_conv_transpose = KernelModule("conv_transpose", package="cuda")


def _auto_pad(n: Node) -> str:
    auto = n.attrs.get("auto_pad", "NOTSET")
    return auto.decode() if isinstance(auto, bytes) else auto


def _geometry(em: CudaEmitter, n: Node):
    """(xs, ws, ys, strides, dilations, begin pads, group), or Unlowerable."""
    x, w, b, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    xs, ws, ys = em.shape(x), em.shape(w), em.shape(y)
    if len(xs) != 4 or len(ws) != 4 or len(ys) != 4:
        raise Unlowerable(n, f"{len(xs) - 2}-D transposed convolution")
    auto = _auto_pad(n)
    if auto not in ("NOTSET", "VALID", ""):
        raise Unlowerable(n, f"ConvTranspose auto_pad {auto}")
    group = int(n.attrs.get("group", 1))
    if group < 1 or xs[1] != ws[0] or xs[1] % group or ys[1] != ws[1] * group or ys[0] != xs[0]:
        raise Unlowerable(n, f"inconsistent shapes X {xs}, W {ws}, Y {ys}, group {group}")
    if b is not None and tuple(em.shape(b)) != (ys[1],):
        raise Unlowerable(n, f"bias shape {em.shape(b)} is not ({ys[1]},)")
    ka = n.attrs.get("kernel_shape")
    if ka and [int(v) for v in ka] != [int(v) for v in ws[2:]]:
        raise Unlowerable(n, f"kernel_shape {list(ka)} differs from W's {list(ws[2:])}")
    strides = [int(v) for v in n.attrs.get("strides") or [1, 1]]
    dil = [int(v) for v in n.attrs.get("dilations") or [1, 1]]
    if len(strides) != 2 or len(dil) != 2 or min(strides + dil) < 1:
        raise Unlowerable(n, f"strides {strides} / dilations {dil}")
    pads = n.attrs.get("pads")
    if pads and len(pads) != 4:
        raise Unlowerable(n, f"pads {list(pads)}")
    begin = convt_begin_pads(n, xs[2:], ws[2:], strides, dil, ys[2:])
    return xs, ws, ys, strides, dil, [int(p) for p in begin], group


@lowering("ConvTranspose", supports=_same_float)
def lower_conv_transpose(em: CudaEmitter, n: Node) -> None:
    x, w, b, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    xs, ws, ys, strides, dil, pads, group = _geometry(em, n)
    xv, wv = em.read(x), em.read(w)
    bv = em.read(b) if b is not None else wv
    geo = (xs[0], xs[1], xs[2], xs[3], ys[1], ws[2], ws[3], ys[2], ys[3], strides[0],
           strides[1], pads[0], pads[1], dil[0], dil[1], group)
    em.call(_conv_transpose.conv_transpose2d, xv, wv, bv, em.write(y), *em.sizes(geo),
            b is not None)

"""CPU lowerings: reductions."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..registry import Unlowerable, lowering
from .common import (_axis, _float_io, _prod)

if TYPE_CHECKING:
    from ..cpu import Emitter


REDUCE_KIND = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3, "ReduceProd": 4,
               "ReduceL1": 5, "ReduceL2": 6, "ReduceLogSum": 7, "ReduceLogSumExp": 8,
               "ReduceSumSquare": 9}


def _axes_from_input(n: Node) -> bool:
    return n.since_version >= (13 if n.op_type == "ReduceSum" else 18)


@lowering(*REDUCE_KIND, supports=_float_io)
def lower_reduce(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    if _axes_from_input(n):
        av = n.input(1)
        if av is None:
            axes = []
        else:
            val = av.const if av.is_const else em.hostvals.get(id(av))
            if val is None:
                raise Unlowerable(n, "reduction axes not known ahead")
            axes = val.astype(np.int64).reshape(-1).tolist()
    else:
        axes = list(n.attrs.get("axes", []))
    if not axes:
        if n.attrs.get("noop_with_empty_axes", 0):
            raise Unlowerable(n, "no-op reduction")
        axes = list(range(rank))
    axes = sorted({_axis(a, rank) for a in axes})
    if axes != list(range(axes[0], axes[-1] + 1)):
        raise Unlowerable(n, f"non-contiguous reduction axes {axes}")
    o, r, i = _prod(shape[:axes[0]]), _prod(shape[axes[0]:axes[-1] + 1]), _prod(shape[axes[-1] + 1:])
    yv = em.out(y)
    em.call(f"_reduce.reduce3d({em.arr(x)}.reshape({em.tuple_expr((o, r, i))}), "
            f"{yv}.reshape({em.tuple_expr((o, i))}), {REDUCE_KIND[n.op_type]})")

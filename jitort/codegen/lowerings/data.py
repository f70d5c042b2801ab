"""CPU lowerings: views and data movement: Reshape-likes, Transpose, Gather, Concat, Split, Slice."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule
from ..registry import Unlowerable, lowering
from ..symbolic import concrete
from .common import _axis, _prod, _words, axis_dims, gather_dims, int_indices, loop_copy_kernel

if TYPE_CHECKING:
    from ..emitter import Emitter

_data = KernelModule("data")
_tr = KernelModule("transpose")


@lowering("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity",
          supports=_words)
def lower_view(em: Emitter, n: Node) -> None:
    em.alias(n.outputs[0], n.inputs[0])



#: elements from which a last-two-axes transpose splits over the threads (``python
#: scripts/sweeps/sweep_split.py``, split / serial at 2 threads on jitort's pool, Zen 5 VM,
#: 2026-11-28: 31-33K 0.87-0.98, 50K 0.94, 94-98K 0.54-0.76, 200K+ 0.53-0.71; under TBB
#: 94K had taken 26 -> 27 us and this was 128K)
_TRANSPOSE_PAR_ELEMS = 1 << 15


@lowering("Transpose", supports=_words)
def lower_transpose(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    perm = list(n.attrs.get("perm", list(range(rank))[::-1]))
    # merge runs of input axes that stay adjacent and in order
    runs: list[list[int]] = []
    for p in perm:
        if runs and runs[-1][-1] + 1 == p:
            runs[-1].append(p)
        else:
            runs.append([p])
    order = sorted(range(len(runs)), key=lambda i: runs[i][0])  # run index by input position
    in_shape = [_prod([shape[a] for a in runs[i]]) for i in order]
    out_shape = [_prod([shape[a] for a in r]) for r in runs]
    if len(runs) == 1:
        yv = em.write(y)
        em.call(_data.copy_flat, em.read(x).flat(), yv.flat())
        return
    r = len(runs)
    pos = {i: j for j, i in enumerate(order)}  # run i sits at input position pos[i]
    if (np.dtype(x.dtype).itemsize == 4 and pos[r - 2] == r - 1 and pos[r - 1] == r - 2
            and all(pos[i] == i for i in range(r - 2))):
        # the last two (merged) axes swap: NCHW <-> NHWC, K^T, 2-D: tiles through registers
        bsz = _prod(in_shape[:r - 2])
        x3 = em.sizes((bsz, in_shape[r - 2], in_shape[r - 1]))
        y3 = em.sizes((bsz, in_shape[r - 1], in_shape[r - 2]))
        par = em.split("transpose_par", n, _prod(shape), _TRANSPOSE_PAR_ELEMS)
        fn = _tr.transpose_last2_par if par else _tr.transpose_last2
        xv = em.read(x).reshape(x3)
        em.call(fn, xv, em.write(y).reshape(y3))
        return
    idx_in = ["" for _ in range(r)]
    for out_axis, run_i in enumerate(range(r)):
        idx_in[pos[run_i]] = f"i{out_axis}"
    kern = loop_copy_kernel(em, f"k_transpose{r}", r, idx_in)
    yv = em.write(y).reshape(em.sizes(out_shape))
    em.call(kern, yv, em.shaped(x, in_shape))


@lowering("Gather", supports=lambda n: _words(n) and int_indices(n))
def lower_gather(em: Emitter, n: Node) -> None:
    data, idx, y = n.inputs[0], n.inputs[1], n.outputs[0]
    o, a, k, i = gather_dims(em, n)
    yv = em.write(y)
    # decided once per node (memo) so the generated text does not change with the shapes
    if ("par", id(n)) not in em.memo:
        em.memo[("par", id(n))] = concrete(o * k * i) >= (1 << 16)  # once, not a guard
    fn = _data.gather3_par if em.memo[("par", id(n))] else _data.gather3
    dv = em.shaped(data, (o, a, i))
    em.call(fn, dv, em.shaped(idx, (k,)), yv.reshape(em.sizes((o, k, i))))


@lowering("Concat", supports=_words)
def lower_concat(em: Emitter, n: Node) -> None:
    y = n.outputs[0]
    axis, (o, total, i) = axis_dims(em, n, y)
    y3 = em.write(y).reshape(em.sizes((o, total, i)))
    off = 0
    for v in n.inputs:
        if v is None:
            continue
        a = em.shape(v)[axis]
        if a and em.embed.get(id(v), (None,))[0] is not y:  # embedded inputs are already there
            em.call(_data.copy3_into, em.shaped(v, (o, a, i)), y3, em.size(off))
        else:
            em.read(v)  # record the read (keeps the shared buffer alive)
        off += a


@lowering("Split", supports=_words)
def lower_split(em: Emitter, n: Node) -> None:
    x = n.inputs[0]
    axis, (o, total, i) = axis_dims(em, n, x)
    x3 = em.shaped(x, (o, total, i))
    off = 0
    for v in n.outputs:
        a = em.shape(v)[axis]
        yv = em.write(v).reshape(em.sizes((o, a, i)))
        em.call(_data.copy3_from, x3, yv, em.size(off))
        off += a


def slice_start_step(em, n: Node, shape) -> tuple[list, list]:
    """Per-axis start (clamped as ONNX says) and step of a Slice (opset >= 10) over ``shape``;
    the ends are implied by the inferred output shape. Shared by the CPU and CUDA lowerings."""
    vals = [None if v is None else (v.const if v.is_const else em.hostvals.get(id(v)))
            for v in n.inputs]
    if any(v is not None and vals[j] is None for j, v in enumerate(n.inputs[1:], 1)):
        raise Unlowerable(n, "Slice parameters are not known ahead")
    rank = len(shape)
    starts = vals[1].astype(np.int64).tolist()
    axes = vals[3].astype(np.int64).tolist() if len(vals) > 3 and vals[3] is not None else list(range(len(starts)))
    steps = vals[4].astype(np.int64).tolist() if len(vals) > 4 and vals[4] is not None else [1] * len(starts)
    start = [0] * rank
    step = [1] * rank
    for s, ax, st in zip(starts, axes, steps):
        ax = _axis(ax, rank)
        dim = shape[ax]
        if st == 0:
            raise Unlowerable(n, "Slice step 0")
        if s < 0:
            s += dim
        s = min(max(s, 0), dim) if st > 0 else min(max(s, 0), dim - 1)
        start[ax], step[ax] = s, st
    return start, step


@lowering("Slice", supports=lambda n: _words(n) and n.since_version >= 10)
def lower_slice(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    shape = em.shape(x)
    rank = len(shape)
    start, step = slice_start_step(em, n, shape)
    out_shape = em.shape(y)
    sliced = [k for k in range(rank) if (start[k], step[k]) != (0, 1) or out_shape[k] != shape[k]]
    lines = ["@njit(cache=True, error_model='numpy')",
             f"def __KNAME__(y, x{''.join(f', s{k}, t{k}' for k in sliced)}):"]
    ind = "    "
    for k in range(rank):
        lines.append(f"{ind}for i{k} in range(y.shape[{k}]):")
        ind += "    "
    ix = ", ".join(f"s{k} + i{k} * t{k}" if k in sliced else f"i{k}" for k in range(rank))
    lines.append(f"{ind}y[{', '.join(f'i{k}' for k in range(rank))}{',' if rank == 1 else ''}] = x[{ix}{',' if rank == 1 else ''}]")
    if rank == 0:
        raise Unlowerable(n, "Slice of a scalar")
    kern = em.generated(f"k_slice{rank}", "\n".join(lines) + "\n")
    args = [em.size(v) for k in sliced for v in (start[k], step[k])]
    yv = em.write(y)
    em.call(kern, yv, em.read(x), *args)

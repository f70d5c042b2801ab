"""Fusion of elementwise chains into groups sharing one iteration space (both backends),
and the placement of Concat inputs inside their Concat's output."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..ir import Node, Value
from .elementwise import Operand, collapse
from .registry import Unlowerable
from .symbolic import same_shape

if TYPE_CHECKING:
    from .emitter import Emitter

#: Most ops in one fused kernel (compile time grows linearly with statements).
MAX_GROUP = 64


@dataclass
class Group:
    nodes: list[Node] = field(default_factory=list)
    shape: tuple = ()
    unit: tuple | None = None  # which of the shape's size-1 dims stay 1 for every input shape


def fused_steps(nodes: list[Node], shapes: dict, is_elementwise, unit: dict | None,
                outputs) -> list[tuple]:
    """The steps of a segment: ``(item, outside)`` per fused :class:`Group` or single node, in
    order; ``outside(v)`` (groups only, else None) tells whether a group member's result is
    read after the group (by a later step or as one of the segment's ``outputs``)."""
    readers: dict[int, list[Node]] = {}
    for n in nodes:
        for v in n.all_inputs():
            readers.setdefault(id(v), []).append(n)
    out_ids = {id(v) for v in outputs}
    steps = []
    for item in group_nodes(nodes, shapes, is_elementwise, unit):
        if not isinstance(item, Group):
            steps.append((item, None))
            continue
        members = {id(n) for n in item.nodes}

        def outside(v, members=members):
            return id(v) in out_ids or any(id(r) not in members for r in readers.get(id(v), []))
        steps.append((item, outside))
    return steps


def group_nodes(nodes: list[Node], shapes: dict, is_elementwise,
                unit: dict | None = None) -> list[Group | Node]:
    """Greedy fusion of elementwise nodes into groups that share one iteration space.

    A node joins the group of one of its producers when its output has the group's shape (and
    the same probed unit dims, ``unit``: a (1, S) mask and a (B, S) tensor at B=1 stay apart,
    so B=1 and B>1 group alike), the group has room, and no other input depends on the group
    (which would make a cycle).
    """
    unit = unit or {}
    group_of: dict[int, int] = {}  # id(value) -> index of the group that produced it
    anc: dict[int, int] = {}  # id(value) -> bitset of groups it depends on
    items: list[Group | Node] = []
    for n in nodes:
        dep = 0
        for v in n.all_inputs():
            dep |= anc.get(id(v), 0)
        if not is_elementwise(n):
            items.append(n)
            for o in n.outputs:
                anc[id(o)] = dep
            continue
        out_shape = shapes[id(n.outputs[0])]
        out_unit = unit.get(id(n.outputs[0]))
        target = None
        for v in n.inputs:
            g = group_of.get(id(v)) if v is not None else None
            if g is None or g == target:
                continue
            grp = items[g]
            if (grp.unit != out_unit or len(grp.nodes) >= MAX_GROUP
                    or not same_shape(grp.shape, out_shape)):
                continue
            # any input not from g that depends on g would close a cycle
            if any(group_of.get(id(x)) != g and anc.get(id(x), 0) >> g & 1
                   for x in n.all_inputs()):
                continue
            target = g
            break
        if target is None:
            items.append(Group([n], out_shape, out_unit))
            target = len(items) - 1
        else:
            items[target].nodes.append(n)
        group_of[id(n.outputs[0])] = target
        anc[id(n.outputs[0])] = dep | (1 << target)
    _fold_feeder_groups(items, group_of, anc)
    return _toposort_items([it for it in items if not (isinstance(it, Group) and not it.nodes)])


def _fold_feeder_groups(items: list, group_of: dict, anc: dict) -> None:
    """Merge a group into the one group that reads all its outputs.

    Greedy joining leaves side branches such as ``x * 0.5`` in GELU as their own kernel when
    the final Mul joins that branch rather than the main chain. Moving the feeder's nodes to the
    front of its consumer is always acyclic when the feeder's outputs are read only by that
    consumer and the feeder's inputs do not depend on the consumer.
    """
    readers: dict[int, set[int]] = {}
    for i, it in enumerate(items):
        for n in (it.nodes if isinstance(it, Group) else [it]):
            for v in n.all_inputs():
                readers.setdefault(id(v), set()).add(i)
    for h, grp in enumerate(items):
        if not isinstance(grp, Group) or not grp.nodes:
            continue
        members = {id(o) for n in grp.nodes for o in n.outputs}
        users: set[int] = set()
        for n in grp.nodes:
            users |= readers.get(id(n.outputs[0]), set()) - {h}
        if len(users) != 1:
            continue
        t = next(iter(users))
        tgt = items[t]
        if (not isinstance(tgt, Group) or tgt.unit != grp.unit
                or len(tgt.nodes) + len(grp.nodes) > MAX_GROUP or not same_shape(tgt.shape, grp.shape)):
            continue
        ext = [v for n in grp.nodes for v in n.all_inputs() if id(v) not in members]
        if any(anc.get(id(v), 0) >> t & 1 for v in ext):
            continue
        tgt.nodes[:0] = grp.nodes
        grp.nodes = []
        for v in members:
            group_of[v] = t
        for k, bits in anc.items():  # whatever depended on the feeder now depends on t
            if bits >> h & 1:
                anc[k] = bits | (1 << t)
        for r in readers.values():
            if h in r:
                r.discard(h)
                r.add(t)


def _toposort_items(items: list[Group | Node]) -> list[Group | Node]:
    """Order fused groups and single nodes so every item follows the producers of its inputs.

    A group is a unit: it runs once all its external inputs exist, which may be later than the
    position of its first member in the original order.
    """
    owner: dict[int, int] = {}
    for i, it in enumerate(items):
        for n in (it.nodes if isinstance(it, Group) else [it]):
            for o in n.outputs:
                owner[id(o)] = i
    deps: list[set[int]] = []
    for i, it in enumerate(items):
        d = set()
        for n in (it.nodes if isinstance(it, Group) else [it]):
            for v in n.all_inputs():
                j = owner.get(id(v))
                if j is not None and j != i:
                    d.add(j)
        deps.append(d)
    users: list[list[int]] = [[] for _ in items]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    pending = [len(d) for d in deps]
    ready = [i for i, p in enumerate(pending) if p == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(items[i])
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(items):
        raise RuntimeError("fusion produced a cycle")  # the cycle check in group_nodes prevents it
    return order


def concat_placements(items, shapes, em: Emitter, placement) -> dict[int, tuple[Value, int]]:
    """Concat inputs that can be produced directly inside the Concat's output buffer.

    Eligible: the Concat joins slices that are contiguous in its output (everything before the
    axis has extent 1), the input is produced by a compiled item of this segment (not a view,
    not a segment input/output, not a host value), and it is not already embedded elsewhere.
    Chained concats nest (DenseNet's growing features live in one buffer): no copies, and the
    inputs need no buffers of their own. Readers of an embedded input just read its slice.
    """
    from ..partition import HOST
    produced = {}
    for it in items:
        for n in (it.nodes if isinstance(it, Group) else [it]):
            if n.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity") and n.domain == "":
                continue  # views alias their source's buffer
            for o in n.outputs:
                produced[id(o)] = n
    embed: dict[int, tuple[Value, int]] = {}
    for it in items:
        if isinstance(it, Group) or it.op_type != "Concat" or it.domain != "":
            continue
        y = it.outputs[0]
        if id(y) in em.out_index or id(y) in em.hostvals:
            continue
        shape = shapes[id(y)]
        axis = it.attrs["axis"] + (len(shape) if it.attrs["axis"] < 0 else 0)
        unit = em.memo.get("unit_dims", {}).get(id(y), (False,) * len(shape))
        if not all(unit[:axis]):  # must be 1 for every input shape, so the text stays stable
            continue
        inner = math.prod(shape[axis + 1:]) * np.dtype(y.dtype).itemsize
        off = 0
        seen = set()
        for v in it.inputs:
            if v is None:
                continue
            a = shapes[id(v)][axis] if not v.is_const else v.const.shape[axis]
            if (id(v) in produced and id(v) not in embed and id(v) not in seen
                    and id(v) not in em.out_index and placement.get(id(produced[id(v)])) != HOST
                    and v.dtype == y.dtype and a > 0):
                embed[id(v)] = (y, off * inner)
            seen.add(id(v))
            off += a
    em.embed_parents = {id(p) for p, _ in embed.values()}
    return embed


def group_operands(grp: Group, consumers_outside):
    """What a fused kernel for ``grp`` reads and writes (shared by the CPU and CUDA backends).

    Returns ``(operands, ops, temp_dtypes, outs)``: the values read from outside the group;
    per node ``(node, refs, index)`` where a ref >= 0 is an earlier node's result and -1-j is
    operand j; the dtype of every node's result; the nodes whose results leave the group.
    """
    produced = {id(n.outputs[0]): i for i, n in enumerate(grp.nodes)}
    operands: list[Value] = []
    op_index: dict[int, int] = {}
    ops = []
    temp_dtypes = []
    for i, n in enumerate(grp.nodes):
        refs = []
        for v in (n.inputs[:1] if n.op_type in ("Expand", "CastLike") else n.inputs):
            if v is None:
                refs.append(None)
            elif id(v) in produced:
                refs.append(produced[id(v)])
            else:
                if id(v) not in op_index:
                    op_index[id(v)] = len(operands)
                    operands.append(v)
                refs.append(-1 - op_index[id(v)])
        ops.append((n, refs, i))
        temp_dtypes.append(np.dtype(n.outputs[0].dtype))
    outs = [i for i, n in enumerate(grp.nodes) if consumers_outside(n.outputs[0])]
    return operands, ops, temp_dtypes, outs or [len(grp.nodes) - 1]


def collapse_group(em: Emitter, grp: Group, operands):
    """The iteration space of ``grp``'s kernel, collapsed (:func:`elementwise.collapse`), and
    its operands' broadcast flags (shared by the CPU and CUDA backends).

    Returns ``(extents, flags, opnds)``: the collapsed dims, per operand which of them it
    broadcasts along, and per operand its :class:`Operand`.
    """
    rank = len(grp.shape)
    unit = em.memo.get("unit_dims", {})
    out_unit = unit.get(id(grp.nodes[-1].outputs[0]), (False,) * rank)
    hints = []
    for v in operands:
        s = em.shape(v)
        # a dim that is 1 for every input shape (probed), or one the operand lacks entirely,
        # is a broadcast even when the output happens to be 1 there too
        u = (True,) * (rank - len(s)) + (tuple(x == 1 for x in s) if v.is_const
                                          else unit.get(id(v), (False,) * len(s)))
        hints.append(tuple(u[k] and not out_unit[k] for k in range(rank)))
    try:
        extents, flags = collapse(grp.shape, [em.shape(v) for v in operands], hints)
    except ValueError as e:
        raise Unlowerable(grp.nodes[0], str(e)) from None
    return extents, flags, [Operand(np.dtype(v.dtype), f) for v, f in zip(operands, flags)]

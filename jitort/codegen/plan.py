"""A segment's plan for one input-shape signature, its recording for later shapes, and the
layout of its buffers (the ``d`` array: sizes, then every row's byte range)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..planner import Buffer, MemoryPlan, plan_memory
from . import native
from .emitter import Row
from .symbolic import Tape

if TYPE_CHECKING:
    from .emitter import Emitter


@dataclass
class Plan:
    """Everything a call needs for one input-shape signature of one segment."""

    driver: Callable
    d: np.ndarray
    o: np.ndarray
    pb: tuple  # the bytes of each host value the driver reads (its h* arguments)
    ws_bytes: int
    memory: MemoryPlan
    out_shapes: list[tuple]
    exports: dict[int, np.ndarray]  # host values needed after the segment
    kernel_names: list[str]
    source_path: str
    new_modules: int
    #: profile mode only: one entry per driver chunk (= one step), see jitort/profiling.py
    parts: list | None = None
    #: the driver calls a kernel module that can reach the BLAS (``kernels.cpu.blas.calls_blas``):
    #: the runtime pins numpy's OpenBLAS to one thread around it
    uses_blas: bool = True
    #: kernel-library call sites of the driver, and their addresses once linked in this
    #: process (``fp``, see jitort/codegen/native.py)
    n_sites: int = 0
    fp: np.ndarray | None = None
    #: the views the driver's call sites build from ``d`` (``native.rewrite_calls``)
    views: list = field(default_factory=list)
    #: the driver's kernel calls in order (:class:`~jitort.codegen.calls.Call`)
    calls: list = field(default_factory=list)
    #: whether float16 / bfloat16 arguments travel as uint16 views (``feeds.storage_views``):
    #: found at the first call (None until then); a replay shares its recording's driver, and
    #: so its argument dtypes, and inherits it
    half: bool | None = None


#: Recordings kept per segment (one per distinct lowering outcome: structure, unit dims...).
MAX_RECORDS = 8


class Recording:
    """One lowering, kept so that later shapes with the same structure skip the lowerings.

    Holds the generated driver (the text is shape-independent) and a replay function compiled
    from the lowering's :class:`~jitort.codegen.symbolic.Tape`: new shapes -> the sizes in
    ``d`` and the byte size of every row, or None when a guard fails.
    """

    def __init__(self, seg, tape: Tape, em: Emitter, plan: Plan, unit: dict):
        self.seg = seg
        self.unit = unit
        self.rows = [Row(r.kind, 0, r.begin, r.end, None, r.fixed, r.vid, r.label) for r in em.rows]
        self.n_dims = len(em.dims)
        self.fn = tape.compile(list(em.dims) + [r.nbytes for r in em.rows])
        #: the tape and what ``fn`` evaluates (the dims, then every row's byte size)
        self.tape, self.outputs = tape, list(em.dims) + [r.nbytes for r in em.rows]
        #: the closed-form plan (codegen/family.py), set by the segment compiler where it applies
        self.family = None
        self.hostvals = dict(tape.hostvals)
        self.plan = plan
        self.orders = [plan.memory.choice]  # placement orders that won, most recent first

    def replay(self, unit: dict, shapes: dict, hostvals: dict) -> Plan | None:
        if unit != self.unit:
            return None
        vals = self.replay_values(shapes, hostvals)
        if vals is None:
            return None
        k = self.n_dims
        hosts = [None if r.vid is None else hostvals[r.vid] for r in self.rows]
        d, o, pb, mem = layout(self.rows, vals[:k], vals[k:], hosts, self.orders)
        promote(self.orders, mem.choice)  # sizes change with the shape; the winners rarely do
        check_views(self.plan.views, d, mem, pb, self.seg, shapes)
        return self.make_plan(d, pb, mem, [shapes[id(v)] for v in self.seg.arg_outputs],
                              hostvals)

    def replay_values(self, shapes: dict, hostvals: dict) -> list | None:
        """The sizes in ``d`` then every row's byte size for ``shapes``; None when a host value
        a lowering read has other contents, or a guard fails."""
        for vid, data in self.hostvals.items():
            a = hostvals.get(vid)
            if a is None or (a.tobytes() if hasattr(a, "tobytes") else repr(a).encode()) != data:
                return None
        return self.fn(shapes)

    def make_plan(self, d, pb: tuple, mem, out_shapes: list, hostvals: dict) -> Plan:
        """A plan sharing this recording's driver, with new sizes ``d``."""
        p, seg = self.plan, self.seg
        exports = {id(v): hostvals[id(v)] for v in seg.outputs if id(v) in hostvals}
        return Plan(p.driver, d, d.reshape(-1)[self.n_dims:].reshape(-1, 2), pb,
                    mem.workspace_bytes, mem, out_shapes, exports, p.kernel_names,
                    p.source_path, 0, uses_blas=p.uses_blas, n_sites=p.n_sites, fp=p.fp,
                    views=p.views, calls=p.calls, half=p.half)


def host_bytes(host) -> np.ndarray:
    """The bytes of a host value, as the driver's ``h*`` argument: the array itself when it
    owns its (contiguous) memory -- the host computed it for this plan, nothing else writes
    it -- else a copy (a view may alias a caller's input, which the caller may change)."""
    host = np.asarray(host)
    if not (host.flags.owndata and host.flags.c_contiguous):
        host = np.array(host, order="C")
    return host.reshape(-1).view(np.uint8)


def check_views(views: list, d: np.ndarray, mem, pb: tuple, seg, shapes) -> None:
    """Check a plan's sizes against the views its driver builds (``native.check_views``):
    each buffer's and argument array's byte size."""
    if not views:
        return
    nbytes = {"ws": mem.workspace_bytes, **{f"h{k}": b.nbytes for k, b in enumerate(pb)}}
    for pre, vals in (("x", seg.arg_inputs), ("y", seg.arg_outputs)):
        for i, v in enumerate(vals):
            item = np.dtype(v.dtype).itemsize
            nbytes[f"{pre}{i}"] = math.prod(shapes[id(v)]) * item
            nbytes[f"{pre}{i}.item"] = item
    native.check_views(views, d, nbytes)


def promote(mru: list, choice) -> None:
    """Move ``choice`` (a :attr:`~jitort.planner.MemoryPlan.choice`) to the front of the
    most-recently-used list ``mru``, which keeps the last eight."""
    if choice in mru:
        mru.remove(choice)
    mru.insert(0, choice)
    del mru[8:]


def layout(rows: list[Row], dims: list[int], sizes: list[int], hosts: list,
            prefer: list | None = None):
    """``d``, ``o``, the host values' bytes (``pb``) and the memory plan from concrete dims
    and row sizes.

    Workspace rows are placed by liveness (``prefer``: the placement orders to try first, see
    :func:`~jitort.planner.plan_memory`), host-value rows span their own array, constant rows
    keep the offsets the constants arena gave them.
    """
    bufs = [Buffer(i, sizes[i], r.begin, max(r.begin, r.end)) for i, r in enumerate(rows)
            if r.kind == "ws"]
    mem = plan_memory(bufs, prefer)
    mem.labels = {b.key: rows[b.key].label for b in bufs}
    o = np.zeros((max(len(rows), 1), 2), np.int64)
    for b in bufs:
        o[b.key] = (b.offset, b.offset + b.size)
    pb = []
    for i, r in enumerate(rows):
        if r.kind == "pb":
            o[i] = (0, sizes[i])
            pb.append(host_bytes(hosts[i]))
        elif r.kind == "cb":
            o[i] = r.fixed
    pb = tuple(pb)
    d = np.concatenate([np.array(dims, np.int64), o.reshape(-1)])  # sizes, then offsets
    return d, o, pb, mem

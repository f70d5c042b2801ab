"""The CPU backend: lowers a segment into a generated driver module calling Numba kernels.

Lowering happens per input-shape signature (``SegmentCompiler.plan``), but the generated text
does not depend on the concrete sizes: every size that can vary is read from the ``d`` array at
run time and every buffer offset from the ``o`` array, so a new shape that keeps the same
structure produces byte-identical source, hits the module cache and compiles nothing.

Driver signature (one Python->native transition per call)::

    call(ws, cb, d, h0, h1, ..., x0, x1, ..., y0, y1, ...)

``ws`` the workspace (uint8), ``cb`` the constants arena (uint8), ``d`` int64: the sizes, then
the ``[start, end)`` byte range of every buffer; ``h*`` the host values the segment reads (each
the bytes of its own array: a plan keeps the arrays the host computed instead of copying them
into one buffer, which for gpt2's (8, 1, 256, 256) mask was 2 MB of fresh pages per new
shape); ``x*`` the segment's inputs and ``y*`` its outputs (fresh arrays the caller owns).
"""
from __future__ import annotations

import gc
import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..ir import Node, Value
from ..planner import ALIGN, Buffer, MemoryPlan, align, plan_memory
from . import module as modmgr
from . import lowerings  # noqa: F401 (each family registers its lowerings on import)
from . import native
from .registry import (KERNEL_MODULES, LOWER, SUPPORT, Unlowerable, lowering,  # noqa: F401
                       registry)
from .calls import (FLAT, Call, Dim, Generated, KernelModule, Offset, Slots, View, check_arg, prod_expr,
                    render_direct, render_native, sum_expr)
from .symbolic import GuardedHostvals, Sym, SymShapes, Tape, concrete, same_shape
from .elementwise import (EXPR, FLOATS, Operand, collapse, kernel_source, supports_elementwise,
                          tname)

_data = KernelModule("data")

#: Elementwise work below this many elements runs serially (16K floats: ~3-10 us of work; a
#: region on jitort's pool costs ~1 us, 4x lower than when this was 64K under TBB).
PARALLEL_MIN = 1 << 14
#: Most ops in one fused kernel (compile time grows linearly with statements).
MAX_GROUP = 64


class CpuBackend:
    """Claims the nodes the CPU code generator can lower."""

    name = "cpu"

    def supports(self, node: Node) -> bool:
        if supports_elementwise(node):
            return True
        pred = SUPPORT.get((node.domain, node.op_type))
        return bool(pred and pred(node))

    def fusible(self, node: Node) -> bool:
        """Lowered into fused elementwise loops (see partition._compile_host_data)."""
        return supports_elementwise(node)


# --- the emitter -----------------------------------------------------------------------------

@dataclass
class Row:
    """One row of the ``o`` array: a buffer in the workspace (``ws``), a host value (``pb``: its
    own ``h*`` argument, offsets 0 and its size) or the constants arena (``cb``, ``fixed``
    offsets)."""

    kind: str
    nbytes: int
    begin: int = 0
    end: int = 0
    host: np.ndarray | None = None
    fixed: tuple[int, int] | None = None
    vid: int | None = None  # the host value a ``pb`` row holds (refetched when replaying)
    label: str = ""  # the value (or "scratch") it holds, for memory reports


class Emitter:
    """Builds one driver's body for one signature. Deterministic: same structure, same text.

    Array names are *declared* (``self.decls``: name -> expression) rather than emitted, so a
    chunk of the driver can re-declare exactly the views it uses. Every size and offset goes
    through the ``d`` and ``o`` arrays: literal ints passed to an njit function would make Numba
    compile one specialization per literal value.
    """

    #: the model's thread count (None: as many as Numba runs); per-worker scratch is sized by it
    threads: int | None = None

    def __init__(self, seg, shapes, hostvals, consts: "ConstArena", memo: dict):
        self.seg, self.shapes, self.hostvals, self.consts, self.memo = seg, shapes, hostvals, consts, memo
        self.calls: list[tuple[int, str]] = []  # (step, line)
        self.decls: dict[str, str] = {}
        self.decl_views: dict[str, View] = {}  # declared name -> its view
        self.views: dict[int, View] = {}  # id(value) -> its array as a call argument
        self.dims: list[int] = []
        self.rows: list[Row] = []
        self.names: dict[int, str] = {}
        self.derived: dict[tuple, str] = {}  # derived_const key -> name
        self.root: dict[int, int] = {}  # id(value) -> row backing it (through aliases)
        self.kernels: dict[str, str] = {}  # module name -> source
        self.step = 0
        self.last_use: dict[int, int] = {}
        self.embed: dict[int, tuple[Value, int]] = {}  # Concat input -> (Concat output, offset)
        self.embed_parents: set[int] = set()
        self.inplace = 0  # outputs written over a dying operand's buffer
        self.notes: dict[int, str] = {}  # step -> the ONNX node(s) it runs (driver comments)
        self.in_index = {id(v): i for i, v in enumerate(seg.arg_inputs)}
        self.out_index = {id(v): i for i, v in enumerate(seg.arg_outputs)}
        self._count = 0

    # sizes ---------------------------------------------------------------------------------
    def size(self, n: int) -> Dim:
        """A size (or integer parameter) in generated code: a slot of the ``d`` array."""
        self.dims.append(n if isinstance(n, Sym) else int(n))  # a Sym keeps its provenance
        return Dim(len(self.dims) - 1)

    def sizes(self, shape) -> tuple[Dim, ...]:
        return tuple(self.size(n) for n in shape)

    def dim(self, n: int) -> str:
        return repr(self.size(n))

    def shape_expr(self, v: Value, shape=None) -> str:
        shape = self.shape(v) if shape is None else shape
        return self.tuple_expr(shape)

    def tuple_expr(self, sizes) -> str:
        return "(" + "".join(self.dim(n) + ", " for n in sizes) + ")"

    def shape(self, v: Value) -> tuple[int, ...]:
        if v.is_const:
            return v.const.shape
        return self.shapes[id(v)]

    # arrays ----------------------------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def _row_view(self, buf: str, row: int, dtype, shape, start=()) -> View:
        """A view of row ``row`` of buffer ``buf`` (``start``: sizes added to its offset)."""
        first = (Offset(row, False), *start)
        end = (*first, self.size(math.prod(shape) * np.dtype(dtype).itemsize)) if start \
            else (Offset(row, True),)
        return View(buf, np.dtype(dtype).name, first, end,
                    tuple((self.size(n),) for n in shape))

    def _bind(self, prefix: str, view: View) -> str:
        """Declare a fresh name for a row's view; returns the name.

        The declaration's text serves lowerings that still build their calls as text
        (transitional); ``decl_views`` maps the name back to the view."""
        def term(t):
            return f"o[{t.row}, {int(t.end)}]" if isinstance(t, Offset) else repr(t)
        helper = self.kernel(*_view_source(view.dtype, len(view.sizes)))
        dims = "".join(", " + repr(p[0]) for p in view.sizes)
        name = self._fresh(prefix)
        self.decls[name] = (f"{helper}({view.base}, {' + '.join(map(term, view.start))}, "
                            f"{' + '.join(map(term, view.end))}{dims})")
        self.decl_views[name] = view
        return name

    def read(self, v: Value) -> View:
        """``v``'s array as a kernel-call argument; records the read."""
        self.arr(v)
        return self.views[id(v)]

    def shaped(self, v: Value, shape) -> View:
        """``v``'s array read as ``shape`` (same element count)."""
        return self.read(v).reshape(self.sizes(shape))

    def write(self, v: Value, reuse: Value | None = None) -> View:
        """The array ``v`` is written into at this step (see :meth:`out`)."""
        self.out(v, reuse)
        return self.views[id(v)]

    def temp(self, nelems: int, dtype) -> View:
        """Scratch space for this step only."""
        name = self.scratch(nelems, dtype)
        return self.decl_views[name]

    def constant(self, key, make) -> View:
        """A constant computed from the model's constants (see :meth:`derived_const`)."""
        return self.decl_views[self.derived_const(key, make)]

    def generated(self, prefix: str, source: str) -> Generated:
        """A kernel generated for this model (see :meth:`kernel`)."""
        return Generated(self.kernel(prefix, source))

    def arr(self, v: Value) -> str:
        """Expression of ``v``'s array, declaring a view on first use; records the read."""
        name = self.names.get(id(v))
        if name is None:
            if id(v) in self.in_index:
                name = f"x{self.in_index[id(v)]}"
            elif id(v) in self.out_index:
                name = f"y{self.out_index[id(v)]}"
            elif v.is_const:
                name = self._const_view(v.const)
            elif id(v) in self.hostvals:
                # the contents travel as an ``h*`` argument (no decision depends on them): raw
                # access, and the shape from the shape pass so that the size stays symbolic
                host = np.ascontiguousarray(dict.get(self.hostvals, id(v)))
                shape = self.shape(v)
                k = sum(row.kind == "pb" for row in self.rows)
                r = self._row("pb", math.prod(shape) * host.dtype.itemsize, host)
                self.rows[r].vid = id(v)
                name = self._bind("p", self._row_view(f"h{k}", r, host.dtype, shape))
            else:
                raise KeyError(f"value {v.name!r} read before it is produced")
            self.names[id(v)] = name
            self.views[id(v)] = self.decl_views.get(name) or View(name, None)
        r = self.root.get(id(v))
        if r is not None:
            self.rows[r].end = self.step
        return name

    def _const_view(self, arr: np.ndarray) -> str:
        start, end = self.consts.place(arr)
        r = self._row("cb", end - start)
        self.rows[r].fixed = (start, end)
        return self._bind("c", self._row_view("cb", r, arr.dtype, arr.shape))

    def derived_const(self, key, make) -> str:
        """View of a constant computed at compile time from the model's constants (``make()``:
        prepacked weights), made once per ``key`` and segment (the memo outlives re-lowerings
        for new shapes, so the constants arena does not grow with them)."""
        name = self.derived.get(key)
        if name is None:
            arr = self.memo.get(key)
            if arr is None:
                arr = self.memo[key] = np.ascontiguousarray(make())
            name = self.derived[key] = self._const_view(arr)
        return name

    def can_donate(self, src: Value, dst: Value) -> bool:
        """May ``dst`` be written in place over ``src``'s buffer at this step?

        Only for kernels that read each element before writing the same element (fused
        elementwise loops, non-broadcast operand): ``src`` must live in the workspace, have the
        same byte size, and neither it nor any other view of its buffer be read after this step.
        """
        r = self.root.get(id(src))
        if r is None or id(dst) in self.out_index or self.rows[r].kind != "ws":
            return False
        nbytes = math.prod(self.shape(dst)) * np.dtype(dst.dtype).itemsize
        if self.rows[r].nbytes != nbytes or np.dtype(src.dtype).itemsize != np.dtype(dst.dtype).itemsize:
            return False
        sharing = [k for k, row in self.root.items() if row == r]
        return all(self.last_use.get(k, -1) <= self.step for k in sharing)

    def _parent_row(self, v: Value) -> int:
        """The workspace row of a Concat output, created at its first embedded child."""
        r = self.root.get(id(v))
        if r is None:
            dt = np.dtype(v.dtype)
            r = self._row("ws", math.prod(self.shape(v)) * dt.itemsize)
            self.rows[r].label = v.name
            self.root[id(v)] = r
        return r

    def _embedded(self, v: Value) -> tuple[int, int]:
        """Row and byte offset of ``v`` inside the (outermost) Concat output holding it."""
        parent, off = self.embed[id(v)]
        if id(parent) in self.embed:
            r, base = self._embedded(parent)
            return r, base + off
        return self._parent_row(parent), off

    def out(self, v: Value, reuse: Value | None = None) -> str:
        """Declare the array ``v`` is written into at this step (over ``reuse``'s buffer if given)."""
        if id(v) in self.out_index:
            name = f"y{self.out_index[id(v)]}"
        elif id(v) in self.embed:  # written straight into its slice of a Concat output
            r, off = self._embedded(v)
            shape = self.shape(v)
            name = self._bind("v", self._row_view("ws", r, v.dtype, shape, (self.size(off),)))
            self.root[id(v)] = r
        elif id(v) in self.embed_parents:  # a Concat output whose inputs were written in place
            r = self._embedded(v)[0] if id(v) in self.embed else self._parent_row(v)
            name = self._bind("v", self._row_view("ws", r, v.dtype, self.shape(v)))
        elif reuse is not None:
            r = self.root[id(reuse)]
            name = self._bind("v", self._row_view("ws", r, v.dtype, self.shape(v)))
            self.root[id(v)] = r
            self.inplace += 1
        else:
            dt = np.dtype(v.dtype)
            shape = self.shape(v)
            r = self._row("ws", math.prod(shape) * dt.itemsize)
            self.rows[r].label = v.name
            name = self._bind("v", self._row_view("ws", r, dt, shape))
            self.root[id(v)] = r
        self.names[id(v)] = name
        self.views[id(v)] = self.decl_views.get(name) or View(name, None)
        return name

    def alias(self, dst: Value, src: Value) -> None:
        """``dst`` is ``src`` reshaped (a view, no copy) -- or a copy if ``dst`` is an output."""
        s = self.arr(src)
        if id(dst) in self.out_index:
            self.call(_data.copy_flat, self.read(src).flat(), self.write(dst).flat())
            return
        name = self._fresh("v")
        view = self.views[id(src)].reshape(self.sizes(self.shape(dst)))
        self.decls[name] = f"{s}.reshape(({''.join(repr(p[0]) + ', ' for p in view.sizes)}))"
        self.decl_views[name] = view
        self.names[id(dst)] = name
        self.views[id(dst)] = view
        if id(src) in self.root:
            self.root[id(dst)] = self.root[id(src)]

    def split(self, kind: str, node, work, threshold: int, units=2) -> bool:
        """Whether ``node`` runs its kernel's prange variant: the model has more than one
        thread, ``work`` is at least ``threshold`` and there are ``units`` >= 2 independent
        pieces. Decided once per node (``memo``) from the first shapes it is planned for, so
        the generated text does not change with the shapes (speed only, not a guard)."""
        key = (kind, id(node))
        if key not in self.memo:
            self.memo[key] = (self.threads != 1 and concrete(work) >= threshold
                              and concrete(units) >= 2)
        return self.memo[key]

    def scratch(self, nelems: int, dtype) -> str:
        dt = np.dtype(dtype)
        r = self._row("ws", nelems * dt.itemsize)
        self.rows[r].label = "scratch"
        return self._bind("s", self._row_view("ws", r, dt, (nelems,)))

    def _row(self, kind: str, nbytes: int, host=None) -> int:
        self.rows.append(Row(kind, nbytes, self.step, self.step, host))
        return len(self.rows) - 1

    def call(self, callee, *args) -> None:
        """Emit ``callee(*args)`` at this step: a :class:`~jitort.codegen.calls.Kernel` or
        :class:`~jitort.codegen.calls.Generated` and its arguments (see calls.py), or
        (transitional) one line of driver text."""
        if isinstance(callee, str) and not args:
            self.calls.append((self.step, callee))
            return
        check_arg(args)
        self.calls.append((self.step, Call(callee, args)))

    def kernel(self, prefix: str, source: str) -> str:
        """Register a generated kernel (deduplicated by text); returns its function name."""
        key = (prefix, source)
        got = _KERNEL_NAMES.get(key)
        if got is None:
            # the header is hashed too: it names the kernel library code the text compiles with
            name = modmgr.module_name(prefix, modmgr.header(["mathfn"])
                                      + source.replace("__KNAME__", prefix))
            got = _KERNEL_NAMES[key] = (name, source.replace("__KNAME__", name))
        self.kernels[got[0]] = got[1]
        return got[0]

    def view_expr(self, v: View, slots: Slots) -> str:
        """``v`` as a driver expression built by generated helpers (debug and direct-call
        drivers, and views a call-site spec cannot spell)."""
        if v.dtype is None:  # an argument array
            if v.sizes is None:
                e = v.base
            elif v.sizes == FLAT:
                e = f"{self.kernel('flat', _FLAT_SOURCE)}({v.base})"
            else:
                rs = self.kernel(f"rs_{len(v.sizes)}", _reshape_helper_source(len(v.sizes)))
                e = f"{rs}({v.base}{''.join(', ' + prod_expr(p, slots) for p in v.sizes)})"
        else:
            helper = self.kernel(*_view_source(v.dtype, len(v.sizes)))
            e = (f"{helper}({v.base}, {sum_expr(v.start, slots)}, {sum_expr(v.end, slots)}"
                 f"{''.join(', ' + prod_expr(p, slots) for p in v.sizes)})")
        return e + "[0]" if v.scalar else e

    def next_step(self) -> None:
        self.step += 1


_KERNEL_NAMES: dict[tuple[str, str], tuple[str, str]] = {}
_VIEW_SOURCES: dict[tuple, tuple[str, str]] = {}


def _view_source(dtype, rank: int) -> tuple[str, str]:
    key = (dtype, rank)
    src = _VIEW_SOURCES.get(key)
    if src is None:
        dt = np.dtype(dtype)
        src = _VIEW_SOURCES[key] = (f"view_{dt.name}_{rank}", _view_helper_source(dt, rank))
    return src


def _view_helper_source(dt: np.dtype, rank: int) -> str:
    dims = [f"n{k}" for k in range(rank)]
    shape = "(" + "".join(f"{d}, " for d in dims) + ")"
    return (f"@njit(cache=True, error_model='numpy')\n"
            f"def __KNAME__(buf, start, end{''.join(', ' + d for d in dims)}):\n"
            f"    return buf[start:end].view({tname(dt)}).reshape({shape})\n")


def _reshape_helper_source(rank: int) -> str:
    dims = [f"n{k}" for k in range(rank)]
    shape = "(" + "".join(f"{d}, " for d in dims) + ")"
    return (f"@njit(cache=True, error_model='numpy')\n"
            f"def __KNAME__(a{''.join(', ' + d for d in dims)}):\n"
            f"    return a.reshape({shape})\n")


_FLAT_SOURCE = ("@njit(cache=True, error_model='numpy')\n"
                "def __KNAME__(a):\n"
                "    return a.reshape(a.size)\n")


class ConstArena:
    """All constants a segment's kernels read, packed once into one aligned uint8 buffer."""

    def __init__(self):
        self.parts: list[tuple[int, np.ndarray]] = []
        self.index: dict[int, tuple[int, int]] = {}
        self.size = 0
        self.buffer = np.zeros(0, np.uint8)

    def place(self, arr: np.ndarray) -> tuple[int, int]:
        got = self.index.get(id(arr))
        if got is None:
            a = np.ascontiguousarray(arr)
            start = align(self.size)
            got = (start, start + a.nbytes)
            self.size = got[1]
            self.parts.append((start, a))
            self.index[id(arr)] = got
        return got

    def materialize(self) -> np.ndarray:
        if self.buffer.size < self.size:
            buf = aligned_empty(self.size)
            for start, a in self.parts:
                buf[start:start + a.nbytes] = a.reshape(-1).view(np.uint8)
            self.buffer = buf
        return self.buffer


def aligned_empty(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + nbytes]


# --- fusion of elementwise chains ------------------------------------------------------------

@dataclass
class Group:
    nodes: list[Node] = field(default_factory=list)
    shape: tuple = ()
    unit: tuple | None = None  # which of the shape's size-1 dims stay 1 for every input shape


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
    import heapq
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


def _concat_placements(items, shapes, em: "Emitter", placement) -> dict[int, tuple[Value, int]]:
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


def lower_group(em: Emitter, grp: Group, consumers_outside) -> None:
    """Emit one fused elementwise kernel for ``grp`` and its call."""
    operands, ops, temp_dtypes, outs = group_operands(grp, consumers_outside)
    out_shape = grp.shape
    rank = len(out_shape)
    hints = []
    unit = em.memo.get("unit_dims", {})
    out_unit = unit.get(id(grp.nodes[-1].outputs[0]), (False,) * rank)
    for v in operands:
        s = em.shape(v)
        # a dim that is 1 for every input shape (probed), or one the operand lacks entirely,
        # is a broadcast even when the output happens to be 1 there too
        u = (True,) * (rank - len(s)) + (tuple(x == 1 for x in s) if v.is_const
                                          else unit.get(id(v), (False,) * len(s)))
        hints.append(tuple(u[k] and not out_unit[k] for k in range(rank)))
    try:
        extents, flags = collapse(out_shape, [em.shape(v) for v in operands], hints)
    except ValueError as e:
        raise Unlowerable(grp.nodes[0], str(e)) from None
    parallel = em.split("par", grp.nodes[0], math.prod(concrete(n) for n in out_shape),
                        PARALLEL_MIN, extents[0])
    opnds = [Operand(np.dtype(v.dtype), f) for v, f in zip(operands, flags)]
    prefix = "k_" + "_".join(dict.fromkeys(n.op_type.lower() for n in grp.nodes[:4]))
    ext = em.tuple_expr(extents)
    ext_vals = ext[1:-1].split(", ")[:-1] if ext != "()" else []
    args = []
    taken: set[int] = set()
    inplace: dict[int, int] = {}  # output position -> operand written over in place
    for k, i in enumerate(outs):
        y = grp.nodes[i].outputs[0]
        donor = None if id(y) in em.embed or id(y) in em.embed_parents else next(
            (j for j, (v, f) in enumerate(zip(operands, flags))
             if not any(f) and em.can_donate(v, y) and em.root[id(v)] not in taken
             # the kernel stores through the operand's own (typed) view: same dtype only
             and np.dtype(v.dtype) == np.dtype(y.dtype)), None)
        if donor is not None:
            taken.add(em.root[id(operands[donor])])
            inplace[k] = donor
        reuse = None if donor is None else operands[donor]
        args.append(f"{em.out(y, reuse=reuse)}.reshape({ext})")
    for v, f in zip(operands, flags):
        shp = "(" + "".join(("1" if b else e) + ", " for b, e in zip(f, ext_vals)) + ")"
        args.append(f"{em.arr(v)}.reshape({shp})")
    src = kernel_source("__KNAME__", ops, opnds, outs, len(extents), parallel,
                        temp_dtypes, inplace=inplace)
    kname = em.kernel(prefix, src)
    em.call(f"{kname}({', '.join(args)})")


# --- segment compilation ---------------------------------------------------------------------

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


#: Recordings kept per segment (one per distinct lowering outcome: structure, unit dims...).
MAX_RECORDS = 8


class _Record:
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
        self.hostvals = dict(tape.hostvals)
        self.plan = plan
        self.orders = [plan.memory.choice]  # placement orders that won, most recent first

    def replay(self, unit: dict, shapes: dict, hostvals: dict) -> Plan | None:
        if unit != self.unit:
            return None
        for vid, data in self.hostvals.items():
            a = hostvals.get(vid)
            if a is None or (a.tobytes() if hasattr(a, "tobytes") else repr(a).encode()) != data:
                return None
        vals = self.fn(shapes)
        if vals is None:
            return None
        k = self.n_dims
        hosts = [None if r.vid is None else hostvals[r.vid] for r in self.rows]
        d, o, pb, mem = _layout(self.rows, vals[:k], vals[k:], hosts, self.orders)
        _promote(self.orders, mem.choice)  # sizes change with the shape; the winners rarely do
        p, seg = self.plan, self.seg
        _check_views(p.views, d, mem, pb, seg, shapes)
        exports = {id(v): hostvals[id(v)] for v in seg.outputs if id(v) in hostvals}
        return Plan(p.driver, d, o, pb, mem.workspace_bytes, mem,
                    [shapes[id(v)] for v in seg.arg_outputs], exports, p.kernel_names,
                    p.source_path, 0, uses_blas=p.uses_blas, n_sites=p.n_sites, fp=p.fp,
                    views=p.views)


#: Entries of a segment's shape-inference memo before it is cleared (each is a few shapes).
_INFER_MEMO_MAX = 1 << 14


class _Unhashable(Exception):
    pass


def _plain(v):
    """An attribute value as a hashable key (raises _Unhashable for anything else)."""
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray) and v.size <= 64:
        return (v.dtype.str, v.shape, v.tobytes())
    raise _Unhashable


def _infer_signature(n: Node):
    """What a node's shape function may read besides its input shapes: the op, its version,
    attributes, input/output counts, and (as positions) the inputs whose *values* it reads.
    Nodes with equal signatures -- the same op in every layer of a transformer -- share
    memoized inference results: gpt2 has 153 compiled nodes but 31 distinct inferences per
    shape. None (no sharing, no memo) when an attribute is not a plain value."""
    from ..shapes import value_inputs
    try:
        attrs = tuple(sorted((k, _plain(v)) for k, v in n.attrs.items()))
    except _Unhashable:
        return None
    return ((n.domain, n.op_type, n.since_version, len(n.inputs), len(n.outputs), attrs),
            tuple(i for i in value_inputs(n) if i < len(n.inputs)))


def _value_key(v):
    """A host/constant value read by a shape function, as part of a memo key."""
    if v is None:
        return None
    v = np.asarray(v)
    return (v.dtype.str, v.shape, v.tobytes())


class SegmentCompiler:
    """Plans one segment per signature; keeps the decisions that make generated text stable."""

    def __init__(self, seg, placement: dict[int, str], host_runner, infer_shapes,
                 debug: bool = False, threads: int | None = None):
        self.seg = seg
        self.debug = debug  # bounds-checked modules under their own names (see _kernel_module)
        self.threads = threads  # the model's thread count (None: Numba's); sizes scratch rows
        self.placement = placement
        self.host_runner = host_runner
        self.infer = infer_shapes
        self.consts = ConstArena()
        self.memo: dict = {}
        self.records: list[_Record] = []  # most recent first
        self._program: list | None = None  # see _shape_pass
        self._sigs: list | None = None  # per program entry: see _infer_signature
        self._infer_memo: dict = {}  # (signature, input shapes, value keys) -> output shapes
        self._unit_cache: dict = {}  # see _probe_unit_dims: ambiguous inputs -> (1s seen, answer)
        self.replays = 0  # plans built by replaying a recording (for tests and reports)

    def _node_program(self) -> list:
        """The per-node work of the shape pass that does not depend on the shapes, done once:
        (node, mode, inputs (a const as a 1-tuple, else the value id), output ids). ``mode`` is
        0 for a compiled node, 1 for a host node whose values some shape depends on, 2 for a
        host node producing data only (the probe pass infers its shapes instead of running it).
        """
        from ..partition import HOST
        from ..shapes import value_inputs
        seg = self.seg
        host = [self.placement[id(n)] == HOST for n in seg.nodes]
        needed: set[int] = set()  # value ids whose *values* decide some shape
        for n, h in zip(reversed(seg.nodes), reversed(host)):
            if h and any(id(o) in needed for o in n.outputs) and n.op_type not in ("Shape", "Size"):
                needed.update(id(v) for v in n.inputs if v is not None)
            for i in value_inputs(n):
                v = n.input(i)
                if v is not None:
                    needed.add(id(v))
        return [(n, 0 if not h else 1 if any(id(o) in needed for o in n.outputs) else 2,
                 [None if v is None else (v.const,) if v.is_const else id(v) for v in n.inputs],
                 [id(o) for o in n.outputs]) for n, h in zip(seg.nodes, host)]

    def _shape_pass(self, in_shapes: dict, in_values: dict, probe: bool = False):
        """Shapes of every value (and host values) for the segment's input shapes/values.
        ``probe``: shapes only -- host nodes that make data, not shapes, are not run."""
        prog = self._program
        if prog is None:
            prog = self._program = self._node_program()
        shapes = dict(in_shapes)
        hostvals = dict(in_values)
        get_value = hostvals.get

        def shape_of(v):
            return v.const.shape if v.is_const else shapes[id(v)]

        def value_of(v):
            return v.const if v.is_const else get_value(id(v))

        def values(ins):  # a node's input values (None where not known on the host)
            return [None if x is None else x[0] if type(x) is tuple else get_value(x) for x in ins]

        sigs = self._sigs
        if sigs is None:
            sigs = self._sigs = [_infer_signature(n) for n, _, _, _ in prog]
        memo = self._infer_memo
        if len(memo) > _INFER_MEMO_MAX:
            memo.clear()
        compiled = []
        infer = self.infer
        for (n, mode, ins, outs), sig in zip(prog, sigs):
            out_shapes = None
            if mode == 0 or (mode == 2 and probe):  # shapes by inference
                in_shapes_ = [None if x is None else x[0].shape if type(x) is tuple else shapes[x]
                              for x in ins]
                vals = None
                key = None
                if sig is not None:  # memoized by signature (values only where they are read)
                    if sig[1]:
                        vals = values(ins)
                        key = (sig[0], tuple(in_shapes_),
                               tuple([_value_key(vals[i]) for i in sig[1]]))
                    else:
                        key = (sig[0], tuple(in_shapes_))
                    out_shapes = memo.get(key)
                if out_shapes is None:
                    if vals is None:
                        vals = values(ins)
                    try:
                        out_shapes = tuple([tuple(map(int, sh)) for sh in infer(n, in_shapes_, vals)])
                    except NotImplementedError as e:  # no shape function, or a value not known
                        if mode == 0:
                            raise Unlowerable(n, str(e)) from None
                    except Exception:  # a probed host node inference cannot follow: run it
                        if mode == 0:
                            raise
                    else:
                        if key is not None:
                            memo[key] = out_shapes
            if out_shapes is None:  # a host node: run it
                for o, r in zip(outs, self.host_runner(n, shape_of, value_of)):
                    hostvals[o] = r
                    shapes[o] = r.shape
                continue
            for o, sh in zip(outs, out_shapes):
                shapes[o] = sh
            if mode == 0:
                compiled.append(n)
        return shapes, hostvals, compiled

    def _probe_unit_dims(self, env, shapes) -> dict[int, tuple[bool, ...]]:
        """Which size-1 dims stay 1 when the symbolic input dims change.

        Re-runs the (cheap, pure-Python) shape pass with every non-static input dim that is 1
        now set to 2. A dim that is 1 in both passes is a true broadcast dim; one that changes
        is a batch-like dim that happens to be 1 now. This keeps the generated text (and so the
        compiled code) the same for B=1 and B=8 without a full symbolic shape algebra.
        """
        seg = self.seg
        probe_in = {}
        for v in seg.inputs:
            real = env[id(v)].shape
            static = v.shape if (v.shape is not None and len(v.shape) == len(real)) else (None,) * len(real)
            probe_in[id(v)] = tuple(2 if n == 1 and not isinstance(st, int) else n
                                    for n, st in zip(real, static))
        ones = {key: tuple([n == 1 for n in real]) for key, real in shapes.items()}
        pattern = tuple(probe_in[id(v)] != env[id(v)].shape for v in seg.inputs)
        if not any(pattern):
            return ones  # no symbolic dim is 1: nothing is ambiguous, every 1 is a broadcast
        # A new shape whose values have their 1s exactly where those of an earlier probed
        # shape with the same ambiguous inputs had them (gpt2 at B=1: every S) gets that
        # probe's answer. Never wrong: a dim called a broadcast is 1 now, and one called
        # batch-like but 1 now is handled as a size; at worst a text is not shared.
        cached = self._unit_cache.get(pattern)
        if cached is not None and cached[0] == ones:
            return cached[1]
        try:
            probe, _, _ = self._shape_pass(probe_in, {id(v): env[id(v)] for v in seg.value_inputs},
                                           probe=True)
        except Exception:  # the model rejects the probe shapes: keep what earlier plans saw
            return self.memo.get("unit_dims", {})
        unit = {}
        for key, real in shapes.items():
            other = probe.get(key)
            if other is not None and len(other) == len(real):
                unit[key] = tuple([a == 1 and b == 1 for a, b in zip(real, other)])
        self._unit_cache[pattern] = (ones, unit)
        return unit

    def plan(self, env: dict[int, np.ndarray]) -> Plan:
        """The plan for the shapes (and host values) in ``env``: replayed when a recording of
        an earlier lowering applies (sizes only, ~0.1 ms), else lowered (and recorded).

        The garbage collector is paused meanwhile: a full collection over the process's heap
        (Numba's and onnx's objects) costs milliseconds, as much as the planning itself, and
        planning makes few cycles.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._plan(env)
        finally:
            if was_enabled:
                gc.enable()

    def _plan(self, env: dict[int, np.ndarray]) -> Plan:
        seg = self.seg
        shapes, hostvals, compiled = self._shape_pass(
            {id(v): env[id(v)].shape for v in seg.inputs},
            {id(v): env[id(v)] for v in seg.value_inputs})
        unit = self._probe_unit_dims(env, shapes)
        if self.profiler is None:
            for rec in self.records:
                plan = rec.replay(unit, shapes, hostvals)
                if plan is not None:
                    self.replays += 1
                    return plan
        self.memo["unit_dims"] = unit
        tape = Tape()
        em, exports = self._lower(compiled, SymShapes(shapes, tape), GuardedHostvals(hostvals, tape))
        plan = self._finish(em, shapes, exports)
        if self.profiler is None:
            self.records.insert(0, _Record(self.seg, tape, em, plan, unit))
            del self.records[MAX_RECORDS:]
        return plan

    def _lower(self, compiled: list[Node], shapes, hostvals):
        """Run the lowerings of the compiled nodes (on symbolic shapes while recording)."""
        seg = self.seg
        em = Emitter(seg, shapes, hostvals, self.consts, self.memo)
        em.threads = self.threads
        readers: dict[int, list[Node]] = {}
        for n in compiled:
            for v in n.all_inputs():
                readers.setdefault(id(v), []).append(n)
        out_ids = {id(v) for v in seg.outputs}
        items = group_nodes(compiled, shapes, supports_elementwise, self.memo.get("unit_dims"))
        last_use: dict[int, int] = {}
        for step, item in enumerate(items):
            for n in (item.nodes if isinstance(item, Group) else [item]):
                for v in n.all_inputs():
                    last_use[id(v)] = step
        for v in seg.outputs:
            last_use[id(v)] = len(items)
        em.last_use = last_use
        em.embed = _concat_placements(items, shapes, em, self.placement)
        for item in items:
            em.notes[em.step] = _node_note(item.nodes if isinstance(item, Group) else [item])
            if isinstance(item, Group):
                members = {id(n) for n in item.nodes}

                def outside(v, members=members):
                    return id(v) in out_ids or any(id(r) not in members for r in readers.get(id(v), []))
                lower_group(em, item, outside)
            else:
                fn = LOWER.get((item.domain, item.op_type))
                if fn is None:
                    raise Unlowerable(item, "no lowering")
                fn(em, item)
            em.next_step()
        # segment outputs that are host values travel to the environment directly
        exports = {id(v): dict.get(hostvals, id(v)) for v in seg.outputs if id(v) in hostvals}
        outs_needed = seg.arg_outputs
        for v in outs_needed:  # an output nobody wrote (e.g. produced by a host node) is a bug
            if id(v) not in em.names:
                raise Unlowerable(seg.nodes[-1], f"segment output {v.name} not produced")
        return em, exports

    #: A :class:`jitort.profiling.Profiler` when compiled with ``profile=True``: then every
    #: step (one fused group or node) gets its own driver chunk, timed one by one. The
    #: non-profile text does not depend on this.
    profiler = None

    def _finish(self, em: Emitter, shapes, exports) -> Plan:
        seg = self.seg
        _rewrite_reshapes(em)
        _rewrite_offsets(em)
        n_host = sum(r.kind == "pb" for r in em.rows)
        params = ", ".join(["ws", "cb", "d", "fp"] + [f"h{k}" for k in range(n_host)]
                           + [f"x{i}" for i in range(len(seg.arg_inputs))]
                           + [f"y{i}" for i in range(len(seg.arg_outputs))])
        calls = _annotated(em.calls, em.notes)
        if self.profiler is None:
            chunks = _chunks(calls)
        else:
            chunk_steps, chunks = _step_chunks(calls)
        parts = []
        # kernel-library and fused-kernel calls go through the fp table (codegen/native.py)
        n_sites, fused = 0, {k for k in em.kernels if k.startswith("k_")}
        views: list = []  # the views call sites build (checked against each plan's sizes)
        slots = Slots(len(em.dims))
        for i, lines in enumerate(chunks):
            lines, n_sites, made = self._render(em, lines, fused, n_sites, slots)
            views += made
            used = _declared_closure(em.decls, lines)
            body = [f"    {n} = {em.decls[n]}" for n in em.decls if n in used]
            body += [f"    {line}" for line in lines]
            parts += ["", "", f"@njit({DRIVER_FLAGS}{DEBUG_FLAGS if self.debug else ''})",
                      f"def part{i}({params}):", *body,
                      "    return 0"]
        if len(chunks) == 1:
            parts += ["", "", "call = part0"]
        else:  # a few Python->native transitions, much cheaper to compile than one huge function
            parts += ["", "", f"def call({params}):"]
            parts += [f"    part{i}({params})" for i in range(len(chunks))]
            parts += ["    return 0"]
        body = "\n".join(parts)
        # generated kernels and helpers the text still calls (call sites build most views)
        em.kernels = {k: v for k, v in em.kernels.items() if re.search(rf"\b{k}\b", body)}
        imports = sorted(em.kernels)
        sfx = DEBUG_SUFFIX if self.debug else ""
        libs = sorted(a for a in set(re.findall(r"(?<![\w.])(_[a-z_]+)\.", body)) if a in KERNEL_MODULES)
        # The argument types are part of the text: a driver module is compiled for one
        # signature, so its fp table (one kernel overload per call site) fits every call.
        argtypes = ", ".join(f"{np.dtype(v.dtype).name}[{len(shapes[id(v)])}]"
                             for v in [*seg.arg_inputs, *seg.arg_outputs])
        src = "\n".join([
            modmgr.header([KERNEL_MODULES[a] for a in libs]).rstrip(),
            f"# arguments: {argtypes}",
            "import math",
            "import numpy as np",
            "from numba import njit",
            *(["from jitort.codegen.native import native_call as _nc"] if n_sites else []),
            *[f"from jitort.kernels.cpu import {KERNEL_MODULES[a]} as {a}" for a in libs],
            *[f"from {modmgr.PACKAGE}.{k}{sfx} import {k}" for k in imports],
            *parts,
            "",
        ])
        new = 0
        for name, ksrc in em.kernels.items():
            if name + sfx not in modmgr._loaded:
                new += 1
            modmgr.load(name + sfx, _kernel_module(ksrc, self.debug))
        # call-site keys: a hash of the text around them (the module's name hashes the result)
        src = src.replace(_DRIVER_KEY, modmgr.module_name("sites", src))
        dname = modmgr.module_name("driver", src)
        if dname not in modmgr._loaded:
            new += 1
        mod = modmgr.load(dname, src)
        d, o, pb, mem = _layout(em.rows, [concrete(n) for n in em.dims],
                                [concrete(r.nbytes) for r in em.rows], [r.host for r in em.rows],
                                self.memo.get("orders"))
        _promote(self.memo.setdefault("orders", []), mem.choice)
        _check_views(views, d, mem, pb, seg, shapes)
        out_shapes = [shapes[id(v)] for v in seg.arg_outputs]
        from ..kernels.cpu.blas import calls_blas
        uses_blas = any(calls_blas(KERNEL_MODULES[a]) for a in libs)
        if self.profiler is None:
            return Plan(mod.call, d, o, pb, mem.workspace_bytes, mem,
                        out_shapes, exports, imports, mod.__file__, new, uses_blas=uses_blas,
                        n_sites=n_sites, views=views)
        parts = self.profiler.parts(self, [getattr(mod, f"part{i}") for i in range(len(chunks))],
                                    chunks, chunk_steps, shapes)
        return Plan(self.profiler.driver(parts), d, o, pb, mem.workspace_bytes, mem,
                    out_shapes, exports, imports, mod.__file__, new, parts, uses_blas=uses_blas,
                    n_sites=n_sites, views=views)


    def _render(self, em: Emitter, lines: list, fused: set, k: int, slots: Slots):
        """A chunk's statements as driver text: kernel calls through the ``fp`` table (call
        sites numbered from ``k``), or direct (``JITORT_DIRECT_CALLS``). Returns the lines,
        the next site number and the views the call sites build."""
        out, views, pending = [], [], []

        def helper(v):
            return em.view_expr(v, slots)

        def flush(k):  # lines of text from lowerings that still build their calls as text
            if pending and not native.DIRECT_CALLS:
                got, k, made = native.rewrite_calls(pending, KERNEL_MODULES, fused, _DRIVER_KEY, k,
                                                    None if self.debug else em.decls)
                out.extend(got)
                views.extend(made)
            else:
                out.extend(pending)
            pending.clear()
            return k

        for line in lines:
            if isinstance(line, str):
                pending.append(line)
                continue
            k = flush(k)
            if native.DIRECT_CALLS:
                out.append(render_direct(line, _ALIASES, helper))
                continue
            text, made = render_native(line, f"{_DRIVER_KEY}:{k}", slots, _ALIASES, helper,
                                       fold_views=not self.debug)
            out.append(text)
            views += made
            k += 1
        return out, flush(k), views


_ALIASES = {m: a for a, m in KERNEL_MODULES.items()}


def _host_bytes(host) -> np.ndarray:
    """The bytes of a host value, as the driver's ``h*`` argument: the array itself when it
    owns its (contiguous) memory -- the host computed it for this plan, nothing else writes
    it -- else a copy (a view may alias a caller's input, which the caller may change)."""
    host = np.asarray(host)
    if not (host.flags.owndata and host.flags.c_contiguous):
        host = np.array(host, order="C")
    return host.reshape(-1).view(np.uint8)


def _check_views(views: list, d: np.ndarray, mem, pb: tuple, seg, shapes) -> None:
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


def _promote(mru: list, choice) -> None:
    """Move ``choice`` (a :attr:`~jitort.planner.MemoryPlan.choice`) to the front of the
    most-recently-used list ``mru``, which keeps the last eight."""
    if choice in mru:
        mru.remove(choice)
    mru.insert(0, choice)
    del mru[8:]


def _layout(rows: list[Row], dims: list[int], sizes: list[int], hosts: list,
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
            pb.append(_host_bytes(hosts[i]))
        elif r.kind == "cb":
            o[i] = r.fixed
    pb = tuple(pb)
    d = np.concatenate([np.array(dims, np.int64), o.reshape(-1)])  # sizes, then offsets
    return d, o, pb, mem


#: Driver flags. (``_dbg_optnone`` would cut ~30 % of its compile time but makes Numba refuse
#: to cache the function, so the driver is optimized like everything else.)
DRIVER_FLAGS = "cache=True, error_model='numpy'"
#: stands for the driver's call-site key prefix until the text around it is hashed
_DRIVER_KEY = "@DRIVER@"
#: Debug mode (``jitort.compile(m, debug=True)``): generated code checks every index. The flag is
#: written into the text (Numba's cache does not key on flags) and debug kernel modules get
#: their own names, so debug and normal builds never share a module or a cache entry.
DEBUG_FLAGS = ", boundscheck=True"
DEBUG_SUFFIX = "_bc"
#: Kernel calls per driver chunk: Numba's compile time grows superlinearly with function size.
CHUNK_CALLS = 24

_RESHAPE = re.compile(r"(\b[a-z]\w*)\.reshape\(\(([^()]*)\)\)")
_FLAT = re.compile(r"(\b[a-z]\w*)\.reshape\(-1\)")
_NAME = re.compile(r"\b([cvps]\d+)\b")
_STRING = re.compile(r'"[^"]*"')


_OFFSET = re.compile(r"\bo\[(\d+), ([01])\]")


def _rewrite_offsets(em: Emitter) -> None:
    """Byte ranges live after the sizes in ``d`` (one array argument fewer per call)."""
    base = len(em.dims)
    sub = lambda m: f"d[{base + 2 * int(m.group(1)) + int(m.group(2))}]"  # noqa: E731
    em.decls = {k: _OFFSET.sub(sub, v) for k, v in em.decls.items()}
    em.calls = [(step, _OFFSET.sub(sub, line) if isinstance(line, str) else line)
                for step, line in em.calls]


_REWRITES: dict = {}


def _rewrite_reshapes(em: Emitter) -> None:
    """Turn ``x.reshape((a, b, ))`` into calls of small generated helpers (``rs_2(x, a, b)``).

    Inline ``.reshape``/``.view`` cost Numba ~3x more to compile than a call to a helper
    compiled once; literal sizes become ``d`` slots so no literal specializations arise.
    """
    def sub(m):
        args = [a.strip() for a in m.group(2).split(",") if a.strip()]
        args = [em.dim(int(a)) if a.lstrip("-").isdigit() else a for a in args]
        helper = em.kernel(f"rs_{len(args)}", _reshape_helper_source(len(args)))
        return f"{helper}({m.group(1)}{''.join(', ' + a for a in args)})"

    def rewrite(text):
        text = _RESHAPE.sub(sub, text)
        if _FLAT.search(text):
            flat = em.kernel("flat", _FLAT_SOURCE)
            text = _FLAT.sub(lambda m: f"{flat}({m.group(1)})", text)
        return text

    # the text is the same for every signature with this structure: rewrite it once
    key = (tuple(em.calls), tuple(em.decls.items()), len(em.dims))
    hit = _REWRITES.get(key)
    if hit is not None:
        em.calls, em.decls, extra_dims, helpers = hit
        em.dims.extend(extra_dims)
        em.kernels.update(helpers)
        return
    n0, k0 = len(em.dims), set(em.kernels)
    em.calls = [(step, rewrite(line) if isinstance(line, str) else line) for step, line in em.calls]
    em.decls = {k: rewrite(v) for k, v in em.decls.items()}
    if len(_REWRITES) > 256:
        _REWRITES.clear()
    _REWRITES[key] = (em.calls, em.decls, em.dims[n0:],
                      {k: v for k, v in em.kernels.items() if k not in k0})


def _node_note(nodes: list[Node]) -> str:
    """The comment above a step's calls in a driver: the ONNX node(s) it runs."""
    text = "; ".join(n.label for n in nodes)  # "Op(name)"
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 160 else text[:157] + "..."


def _annotated(calls: list[tuple[int, str]], notes: dict[int, str]) -> list[tuple[int, str]]:
    """``calls`` with a ``# <node(s)>`` comment line before the first call of each step, so that
    a reader of a driver knows which layer a line runs."""
    out: list[tuple[int, str]] = []
    last = None
    for step, line in calls:
        if step != last and step in notes:
            out.append((step, "# " + notes[step]))
        out.append((step, line))
        last = step
    return out


def _chunks(calls: list[tuple[int, str]]) -> list[list[str]]:
    """Split the call lines into chunks of at most CHUNK_CALLS, cutting between steps
    (comment lines do not count)."""
    chunks: list[list[str]] = [[]]
    count = 0
    last_step = None
    for step, line in calls:
        if count >= CHUNK_CALLS and step != last_step:
            chunks.append([])
            count = 0
        chunks[-1].append(line)
        count += not (isinstance(line, str) and line.startswith("#"))
        last_step = step
    if not chunks[-1]:
        chunks[-1].append("pass")
    return chunks


def _step_chunks(calls: list[tuple[int, str]]) -> tuple[list[int | None], list[list[str]]]:
    """Profile mode: one chunk per step (its step index alongside), so each can be timed."""
    steps: list[int | None] = []
    chunks: list[list[str]] = []
    for step, line in calls:
        if not steps or steps[-1] != step:
            steps.append(step)
            chunks.append([])
        chunks[-1].append(line)
    if not chunks:
        return [None], [["pass"]]
    return steps, chunks


def _declared_closure(decls: dict[str, str], lines: list[str]) -> set[str]:
    """Names declared in ``decls`` that ``lines`` need, including the views they derive from."""
    need: set[str] = set()
    todo = [n for line in lines if not line.startswith("#")
            for n in _NAME.findall(_STRING.sub('""', line))]  # not inside a call's spec
    while todo:
        n = todo.pop()
        if n in need or n not in decls:
            continue
        need.add(n)
        todo += _NAME.findall(decls[n])
    return need


_KERNEL_PRELUDE = """import math
import numpy as np
from numba import njit, prange
from jitort.kernels.cpu import mathfn as _m


"""


#: Debug kernels: the same text under an ``njit`` that adds ``boundscheck=True``.
_DEBUG_PRELUDE = (_KERNEL_PRELUDE.replace("from numba import njit,", "from numba import njit as _njit,")
                  + "def njit(*args, **flags):  # jitort debug mode: bounds-checked\n"
                    "    return _njit(*args, boundscheck=True, **flags)\n\n\n")


def _kernel_module(src: str, debug: bool = False) -> str:
    return modmgr.header(["mathfn"]) + (_DEBUG_PRELUDE if debug else _KERNEL_PRELUDE) + src


"""The emitter: a lowering's view of the driver it contributes to.

One :class:`Emitter` builds the kernel calls of one segment for one input-shape signature.
Every size and byte offset goes through the ``d`` array (literal ints passed to an njit
function would make Numba compile one specialization per value), every buffer is a row of the
workspace, the constants arena or a host value, and every array argument is a
:class:`~jitort.codegen.calls.View` of one of them. Lowerings emit
:class:`~jitort.codegen.calls.Call` objects through :meth:`Emitter.call`; the driver text is
rendered at the end (:mod:`jitort.codegen.assembly`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..ir import Value
from ..planner import ALIGN, align
from . import module as modmgr
from .calls import FLAT, Call, Dim, Generated, KernelModule, Offset, Slots, View, check_arg, prod_expr, sum_expr
from .symbolic import Sym, concrete
from .elementwise import storage_dtype, tname

_data = KernelModule("data")


def kernel_library_modules(src: str) -> list[str]:
    """The kernel modules generated kernel text imports: mathfn, and the 16-bit float
    (kernels/cpu/halfprec.py, ``_h``) or low-precision (lowprec.py, ``_l``) conversions only
    where it calls them."""
    return (["mathfn"] + (["halfprec"] if "_h." in src else [])
            + (["lowprec"] if _LOWP_CALL.search(src) else []))


_LOWP_CALL = re.compile(r"(?<![\w.])_l\.")


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


def recorded_read(em, v: Value, first_view):
    """``em``'s view of ``v`` (made by ``first_view(v)`` on the first read), the read recorded:
    the workspace row backing ``v`` lives to the current step. ``read`` of the CPU and CUDA
    emitters (``views``, ``root``, ``rows``, ``step``)."""
    view = em.views.get(id(v))
    if view is None:
        view = em.views[id(v)] = first_view(v)
    r = em.root.get(id(v))
    if r is not None:
        em.rows[r].end = em.step
    return view


class Emitter:
    """Builds one driver's kernel calls for one signature. Deterministic: the same structure
    gives the same calls, hence the same driver text.

    Every size and offset goes through the ``d`` array (:class:`~jitort.codegen.calls.Dim`,
    :class:`~jitort.codegen.calls.Offset`): literal ints passed to an njit function would make
    Numba compile one specialization per literal value.
    """

    #: the model's thread count (None: as many as Numba runs); per-worker scratch is sized by it
    threads: int | None = None
    #: the compile's :class:`jitort.options.Options` (None: read from the environment)
    options = None

    def __init__(self, seg, shapes, hostvals, consts: "ConstArena", memo: dict):
        self.seg, self.shapes, self.hostvals, self.consts, self.memo = seg, shapes, hostvals, consts, memo
        self.calls: list[tuple[int, Call]] = []  # (step, call)
        self.views: dict[int, View] = {}  # id(value) -> its array as a call argument
        self.dims: list[int] = []
        self.rows: list[Row] = []
        self.derived: dict = {}  # constant() key -> its view
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

    # sizes ---------------------------------------------------------------------------------
    def size(self, n: int) -> Dim:
        """A size (or integer parameter) in generated code: a slot of the ``d`` array."""
        self.dims.append(n if isinstance(n, Sym) else int(n))  # a Sym keeps its provenance
        return Dim(len(self.dims) - 1)

    def sizes(self, shape) -> tuple[Dim, ...]:
        return tuple(self.size(n) for n in shape)

    def shape(self, v: Value) -> tuple[int, ...]:
        if v.is_const:
            return v.const.shape
        return self.shapes[id(v)]

    # arrays ----------------------------------------------------------------------------------
    def _row_view(self, buf: str, row: int, dtype, shape, start=()) -> View:
        """A view of row ``row`` of buffer ``buf`` (``start``: sizes added to its offset)."""
        first = (Offset(row, False), *start)
        end = (*first, self.size(math.prod(shape) * np.dtype(dtype).itemsize)) if start \
            else (Offset(row, True),)
        # (float16 / bfloat16 are handed to the generated code as their uint16 words)
        return View(buf, storage_dtype(dtype).name, first, end,
                    tuple((self.size(n),) for n in shape))

    def read(self, v: Value) -> View:
        """``v``'s array as a kernel-call argument; records the read."""
        return recorded_read(self, v, self._first_view)

    def _first_view(self, v: Value) -> View:
        if id(v) in self.in_index:
            return View(f"x{self.in_index[id(v)]}", None)
        if id(v) in self.out_index:
            return View(f"y{self.out_index[id(v)]}", None)
        if v.is_const:
            return self._const_view(v.const)
        if id(v) in self.hostvals:
            # the contents travel as an ``h*`` argument (no decision depends on them): raw
            # access, and the shape from the shape pass so that the size stays symbolic
            host = np.ascontiguousarray(dict.get(self.hostvals, id(v)))
            shape = self.shape(v)
            k = sum(row.kind == "pb" for row in self.rows)
            r = self._row("pb", math.prod(shape) * host.dtype.itemsize, host)
            self.rows[r].vid = id(v)
            return self._row_view(f"h{k}", r, host.dtype, shape)
        raise KeyError(f"value {v.name!r} read before it is produced")

    def shaped(self, v: Value, shape) -> View:
        """``v``'s array read as ``shape`` (same element count)."""
        return self.read(v).reshape(self.sizes(shape))

    def produced(self, v: Value) -> bool:
        """Whether some step wrote (or aliased) ``v``."""
        return id(v) in self.views

    def generated(self, prefix: str, source: str) -> Generated:
        """A kernel generated for this model (see :meth:`kernel`)."""
        return Generated(self.kernel(prefix, source))

    def _const_view(self, arr: np.ndarray) -> View:
        start, end = self.consts.place(arr)
        r = self._row("cb", end - start)
        self.rows[r].fixed = (start, end)
        return self._row_view("cb", r, arr.dtype, arr.shape)

    def constant(self, key, make) -> View:
        """A constant computed at compile time from the model's constants (``make()``:
        prepacked weights), made once per ``key`` and segment (the memo outlives re-lowerings
        for new shapes, so the constants arena does not grow with them)."""
        view = self.derived.get(key)
        if view is None:
            arr = self.memo.get(key)
            if arr is None:
                arr = self.memo[key] = np.ascontiguousarray(make())
            view = self.derived[key] = self._const_view(arr)
        return view

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

    def write(self, v: Value, reuse: Value | None = None) -> View:
        """The array ``v`` is written into at this step (over ``reuse``'s buffer if given)."""
        if id(v) in self.out_index:
            view = View(f"y{self.out_index[id(v)]}", None)
        elif id(v) in self.embed:  # written straight into its slice of a Concat output
            r, off = self._embedded(v)
            view = self._row_view("ws", r, v.dtype, self.shape(v), (self.size(off),))
            self.root[id(v)] = r
        elif id(v) in self.embed_parents:  # a Concat output whose inputs were written in place
            r = self._embedded(v)[0] if id(v) in self.embed else self._parent_row(v)
            view = self._row_view("ws", r, v.dtype, self.shape(v))
        elif reuse is not None:
            r = self.root[id(reuse)]
            view = self._row_view("ws", r, v.dtype, self.shape(v))
            self.root[id(v)] = r
            self.inplace += 1
        else:
            dt = np.dtype(v.dtype)
            shape = self.shape(v)
            r = self._row("ws", math.prod(shape) * dt.itemsize)
            self.rows[r].label = v.name
            view = self._row_view("ws", r, dt, shape)
            self.root[id(v)] = r
        self.views[id(v)] = view
        return view

    def alias(self, dst: Value, src: Value) -> None:
        """``dst`` is ``src`` reshaped (a view, no copy) -- or a copy if ``dst`` is an output."""
        view = self.read(src)
        if id(dst) in self.out_index:
            self.call(_data.copy_flat, view.flat(), self.write(dst).flat())
            return
        self.views[id(dst)] = view.reshape(self.sizes(self.shape(dst)))
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

    def temp(self, nelems: int, dtype) -> View:
        """Scratch space for this step only."""
        dt = np.dtype(dtype)
        r = self._row("ws", nelems * dt.itemsize)
        self.rows[r].label = "scratch"
        return self._row_view("ws", r, dt, (nelems,))

    def _row(self, kind: str, nbytes: int, host=None) -> int:
        self.rows.append(Row(kind, nbytes, self.step, self.step, host))
        return len(self.rows) - 1

    def call(self, callee, *args) -> None:
        """Emit ``callee(*args)`` at this step: a :class:`~jitort.codegen.calls.Kernel` or
        :class:`~jitort.codegen.calls.Generated` and its arguments (see calls.py)."""
        check_arg(args)
        self.calls.append((self.step, Call(callee, args)))

    def kernel(self, prefix: str, source: str) -> str:
        """Register a generated kernel (deduplicated by text); returns its function name."""
        key = (prefix, source)
        got = _KERNEL_NAMES.get(key)
        if got is None:
            # the header is hashed too: it names the kernel library code the text compiles with
            mods = kernel_library_modules(source)
            name = modmgr.module_name(prefix, modmgr.header(mods)
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

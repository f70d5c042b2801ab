"""The kernel-call IR: what a lowering emits, as objects, and how a driver renders it.

A lowering does not write driver text. It emits :class:`Call` objects through
``Emitter.call(kernel, *args)``: the callee is a :class:`Kernel` of the kernel library (named
through a :class:`KernelModule` handle, so ``_norm.layernorm2d`` in a lowering is a reference a
reader and a test can follow) or a :class:`Generated` kernel made for this model; the arguments
are :class:`View` (an array: a typed, C-contiguous view of the workspace, the constants arena, a
host value or an argument array, with sizes read from the ``d`` array), :class:`Dim` (a size
read from ``d``), :class:`Scalar` (a typed constant), :class:`Zeros` (an empty placeholder
array), plain Python literals and tuples of these.

The driver text is rendered once, at the end (:func:`render_call`), by the backend's module
assembly: a call through the function-pointer table (``native_call``), whose views are built by
the call site from a spec string, or (debug and ``JITORT_DIRECT_CALLS`` modes) a direct call
whose views are built by small generated helpers. Nothing parses driver text back.

The CUDA backend's calls use the same :class:`Call` and :class:`Kernel` (of the
``jitort.kernels.cuda`` library), with its own arguments (:class:`DeviceView`,
:class:`DeviceArray`) and launches of generated kernels (:class:`Launch`); its renderer is
:mod:`jitort.codegen.cuda_render`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Kernel:
    """A function of the kernel library: ``jitort.kernels.<package>.<module>.<name>`` (the
    package: ``cpu``, or ``cuda`` for the CUDA backend's library)."""

    module: str
    name: str
    package: str = "cpu"

    @property
    def path(self) -> str:
        """The module that defines it: ``jitort.kernels.cpu.norm``."""
        return f"jitort.kernels.{self.package}.{self.module}"

    def __repr__(self) -> str:
        if self.package != "cpu":
            return f"{self.package}.{self.module}.{self.name}"
        return f"{self.module}.{self.name}"


class KernelModule:
    """A lowering's handle on a kernel-library module: ``_norm = KernelModule("norm")``, then
    ``_norm.layernorm2d`` is that :class:`Kernel`; ``package="cuda"`` names a module of the
    CUDA library. Nothing is imported until a driver runs, so lowering modules stay cheap to
    import."""

    __slots__ = ("module", "package")

    def __init__(self, module: str, package: str = "cpu"):
        self.module = module
        self.package = package

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("__"):
            raise AttributeError(name)
        return Kernel(self.module, name, self.package)


@dataclass(frozen=True)
class Generated:
    """A kernel generated for this model (``Emitter.kernel``'s name: fused loops, transposes)."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Dim:
    """A size or integer parameter, read from slot ``slot`` of the ``d`` array at run time (a
    literal would make Numba compile one specialization per value)."""

    slot: int

    def __repr__(self) -> str:
        return f"d[{self.slot}]"


@dataclass(frozen=True)
class Offset:
    """The start (``end=False``) or end byte of buffer row ``row``; its ``d`` slot is known
    only once every size is (the rows' byte ranges follow the sizes in ``d``)."""

    row: int
    end: bool


#: ``View.sizes`` of an argument array flattened to one dimension of its element count
FLAT = "#"


@dataclass(frozen=True)
class View:
    """An array argument: a C-contiguous view of ``base``.

    ``base``: ``ws`` (workspace), ``cb`` (constants), ``h<k>`` (a host value's bytes) or an
    argument array ``x<i>`` / ``y<i>``. Byte buffers carry the element ``dtype``, the view's
    byte range (``start``, ``end``: sums of :class:`Dim` / :class:`Offset`) and ``sizes``, one
    product of :class:`Dim` per dimension. An argument array has ``dtype`` None (its own),
    ``end`` None and ``sizes`` None (as it is), :data:`FLAT`, or products of :class:`Dim`.
    ``scalar``: the argument is element 0 of the view.
    """

    base: str
    dtype: str | None
    start: tuple = ()
    end: tuple | None = None
    sizes: tuple | str | None = None
    scalar: bool = False

    def reshape(self, dims) -> "View":
        """The same bytes as ``dims`` (a tuple of :class:`Dim`, see ``Emitter.sizes``)."""
        if not all(isinstance(n, Dim) for n in dims):
            raise TypeError(f"View.reshape takes Dim sizes, got {dims!r}")
        return replace(self, sizes=tuple((n,) for n in dims), scalar=False)

    def flat(self) -> "View":
        """The view as one dimension."""
        if self.sizes is None or self.sizes == FLAT:
            return replace(self, sizes=FLAT, scalar=False)
        return replace(self, sizes=(tuple(f for p in self.sizes for f in p),), scalar=False)

    def item(self) -> "View":
        """Element 0 of the view, passed as a scalar."""
        return replace(self, scalar=True)


@dataclass(frozen=True)
class Scalar:
    """A constant of a given numpy type (``np.float32(0.5)`` in the driver)."""

    dtype: str
    value: float | int | bool


@dataclass(frozen=True)
class Zeros:
    """An empty (or small zero) array of ``dtype`` and ``shape``: a placeholder for an
    optional operand the kernel does not read."""

    dtype: str
    shape: tuple = (0,)

    def __post_init__(self):
        # a literal in the driver text: a symbolic size is pinned to its value here
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))


# --- CUDA arguments and callees (rendered by :mod:`jitort.codegen.cuda_render`) ------------

@dataclass(frozen=True)
class DeviceView:
    """A CUDA kernel's operand: a flat device array and an element offset, passed as the two
    arguments ``array, offset``. ``array``: ``X[i]`` / ``Y[i]`` (a segment input / output),
    ``C[k]`` (a constant uploaded once) or ``w_<dtype>`` (the workspace as that dtype); the
    offset is workspace buffer ``row``'s element offset ``o[row]`` (None: 0) plus ``shift``
    (sizes read from ``d``)."""

    array: str
    row: int | None = None
    shift: tuple[Dim, ...] = ()

    def at(self, dim: Dim) -> "DeviceView":
        """The view ``dim`` elements further on."""
        return replace(self, shift=(*self.shift, dim))


@dataclass(frozen=True)
class DeviceArray:
    """A driver argument passed whole to a CUDA kernel (the error flag ``E``)."""

    name: str


@dataclass(frozen=True)
class Launch:
    """A launch of a generated CUDA kernel, ``kernel[grid, block](...)``: ``grid`` blocks (a
    size read from ``d``) of ``block`` threads."""

    kernel: Generated
    grid: Dim
    block: int

    def __repr__(self) -> str:
        return f"{self.kernel.name}[{self.grid!r}, {self.block}]"


@dataclass(frozen=True)
class Call:
    """One statement of a driver: ``callee(*args)``."""

    callee: Kernel | Generated | Launch
    args: tuple


def check_arg(a) -> None:
    """Raise TypeError for an argument the renderer cannot spell."""
    if isinstance(a, tuple):
        for x in a:
            check_arg(x)
    elif not (a is None or isinstance(a, (View, Dim, Scalar, Zeros, bool, int, float, str))):
        raise TypeError(f"kernel-call argument of type {type(a).__name__}: {a!r}")


# --- rendering -----------------------------------------------------------------------------

def _num(dtype: str, v) -> str:
    if isinstance(v, float) and math.isnan(v):
        return f"np.{dtype}(np.nan)"
    if isinstance(v, float) and math.isinf(v):
        return f"np.{dtype}({'-' if v < 0 else ''}np.inf)"
    return f"np.{dtype}({v!r})"


def literal(a, expr: Callable) -> str:
    """An argument that is not folded into a call site's spec, as a driver expression
    (``expr`` renders a :class:`View`)."""
    if isinstance(a, View):
        return expr(a)
    if isinstance(a, Dim):
        return repr(a)
    if isinstance(a, tuple):
        return "(" + "".join(literal(x, expr) + ", " for x in a) + ")"
    if isinstance(a, Scalar):
        return _num(a.dtype, a.value)
    if isinstance(a, Zeros):
        return f"np.zeros({a.shape!r}, np.{a.dtype})"
    if isinstance(a, float) and not math.isfinite(a):
        return _num("float64", a)
    return repr(a)


class Slots:
    """Resolves :class:`Dim` and :class:`Offset` to ``d`` slots once the sizes are final
    (``n_dims``): row ``r``'s byte range follows the sizes, at ``n_dims + 2r`` and ``+1``."""

    def __init__(self, n_dims: int):
        self.n_dims = n_dims

    def __call__(self, x) -> int:
        if isinstance(x, Dim):
            return x.slot
        return self.n_dims + 2 * x.row + int(x.end)


def sum_expr(terms, slots: Slots) -> str:
    return " + ".join(f"d[{slots(t)}]" for t in terms) or "0"


def prod_expr(factors, slots: Slots) -> str:
    return " * ".join(f"d[{slots(t)}]" for t in factors) or "1"


def spec_item(v: View, buf: int, slots: Slots) -> str | None:
    """``v`` as a call-site spec item (``native.parse_spec``), None if it has no spelling
    there (an argument array as it is, a rank-0 view's element)."""
    if v.sizes is None or (v.scalar and not v.sizes):
        return None
    if v.sizes == FLAT:
        sizes = "#"
    else:
        sizes = ",".join("*".join(str(slots(f)) for f in p) for p in v.sizes) or "-"
        if any(not p for p in v.sizes):
            return None  # an empty product has no spelling
    start = "+".join(str(slots(t)) for t in v.start) or "-"
    return f"{'e' if v.scalar else 'v'}{buf}:{v.dtype or '-'}:{start}:{sizes}"


def checked_view(v: View, slots: Slots) -> dict:
    """What ``native.check_views`` checks of a view a call site builds."""
    return {"base": v.base, "dtype": v.dtype, "scalar": v.scalar,
            "start": tuple(slots(t) for t in v.start),
            "end": None if v.end is None else tuple(slots(t) for t in v.end),
            "sizes": ((-1,),) if v.sizes == FLAT else tuple(tuple(slots(f) for f in p)
                                                            for p in v.sizes),
            "item": None if v.dtype is None else np.dtype(v.dtype).itemsize}


def alias(module: str) -> str:
    """The name a driver imports kernel-library module ``module`` under."""
    return "_" + module


def callee_text(callee, aliases: Callable[[str], str] = alias) -> str:
    """``_module.name`` for a library kernel, the function's name for a generated one."""
    if isinstance(callee, Kernel):
        return f"{aliases(callee.module)}.{callee.name}"
    return callee.name


def render_native(call: Call, key: str, slots: Slots, aliases: Callable[[str], str],
                  helper_expr: Callable, fold_views: bool = True) -> tuple[str, list[dict]]:
    """``call`` as a :func:`~jitort.codegen.native.native_call` statement: sizes and (with
    ``fold_views``) views go into the spec, built by the call site; everything else travels
    in the ``rest`` tuple as an expression (``helper_expr`` renders a view that the spec
    cannot spell). Returns the statement and the views the call site builds."""
    bufs: list[str] = []
    spec: list[str] = []
    rest: list[str] = []
    made: list[dict] = []
    for a in call.args:
        if isinstance(a, Dim):
            spec.append(f"s{a.slot}")
            continue
        if isinstance(a, View) and fold_views:
            buf = bufs.index(a.base) if a.base in bufs else len(bufs)
            item = spec_item(a, buf, slots)
            if item is not None:
                if buf == len(bufs):
                    bufs.append(a.base)
                spec.append(item)
                made.append(checked_view(a, slots))
                continue
        spec.append(f"a{len(rest)}")
        rest.append(literal(a, helper_expr))
    tup = lambda xs: "(" + "".join(f"{x}, " for x in xs).rstrip() + ")" if xs else "()"  # noqa: E731
    return (f'_nc({callee_text(call.callee, aliases)}, "{key}", fp, d, {tup(bufs)}, '
            f'"{";".join(spec)}", {tup(rest)})'), made


def render_direct(call: Call, aliases: Callable[[str], str], helper_expr: Callable) -> str:
    """``call`` as a plain call (the kernel linked into the driver)."""
    args = ", ".join(literal(a, helper_expr) for a in call.args)
    return f"{callee_text(call.callee, aliases)}({args})"

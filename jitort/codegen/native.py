"""Kernel-library calls from generated drivers through a table of function pointers.

When one Numba function calls another, Numba links the callee's LLVM module into the caller's
and optimizes and emits the whole again: every driver that calls ``conv2d`` re-optimized and
re-emitted the convolution kernel's six paths (resnet18's driver: 12 s of LLVM time for a
dozen lines of calls, bert's four driver chunks 2-7 s each). Drivers call the kernel library
through :func:`native_call` instead: at typing time it resolves the kernel's signature (loading
it from Numba's cache like any call), at lowering time it emits an indirect call through an
address read from the ``fp`` array the driver receives, so nothing is linked and the driver
compiles in well under a second. The addresses are only known at run time in each process,
which keeps the driver's machine code cacheable: :func:`link` fills ``fp`` before a driver's
first call.

A call site also builds its array arguments: a view of the workspace, of the constants or of
an argument array, at an offset and with sizes read from ``d``, is described in the call's spec
string and made by the call (a few loads and multiplies), so each kernel call is one driver
statement. Spelled as view and reshape helper calls with ``d[i]`` sizes, bert's driver was
~1,300 ``d[i]`` reads and ~400 helper calls, 35 s of Numba typing and lowering; as specs,
79 statements and 3-5 s. The sizes are checked against each plan before it runs
(:func:`check_views`).

What each call site calls (kernel and argument types) is recorded while the driver is typed
and written beside the generated module (``<module>.part<i>.sigs``), because a driver loaded
from Numba's cache is not typed again. A driver function that is cached without its record
(a process killed in between) is typed once more by an uncached copy, to recover the record.
"""
from __future__ import annotations

import functools
import importlib
import math
import os
import pickle
import tempfile
import threading
from pathlib import Path

import numpy as np
from numba import types
from numba.core import cgutils
from numba.np import numpy_support
from numba.extending import intrinsic

from .. import options
from ..errors import ExecutionError

#: ``JITORT_DIRECT_CALLS=1``: drivers call kernels directly (linked into them, as before the
#: table; slower to compile), for comparisons and as a way around a problem with the table
DIRECT_CALLS = options.read("direct_calls")

#: (driver's site prefix, call-site index) -> (kernel module, kernel name, argument types),
#: recorded by :func:`native_call`'s typer in this process
_RECORDS: dict[tuple[str, int], tuple[str, str, tuple]] = {}
#: set by :func:`infer_records` while it types a driver: the call sites' records go into
#: ``_INFER["records"]`` and no kernel is compiled
_INFER: dict = {}
#: (driver module name, argument types) -> its ``fp`` table, once linked in this process
_TABLES: dict[tuple, np.ndarray] = {}
_lock = threading.RLock()


@intrinsic
def native_call(typingctx, kernel, key, fp, d, bufs, spec, rest):
    """``kernel(*args)`` through the address ``fp[k]`` (``key`` = "prefix:k" names the site).

    The arguments are described by ``spec`` (a string literal, :func:`parse_spec`): each is
    either an element of the tuple ``rest`` or an array *built here* -- a C-contiguous view of
    one of the arrays in ``bufs`` at a byte offset and with sizes read from ``d``. A driver
    statement used to spell those views as calls of small generated helpers with ``d[i]``
    sizes (``rs_3(v25, d[164], d[165], d[166])``, ``v25 = view_float32_4(ws, d[960], ...)``):
    Numba spent ~10 ms lowering each ``d[i]`` and more on each helper call, bert's driver ~35 s
    in all. Built here, a call site is one statement whatever its arguments."""
    if not isinstance(kernel, types.Dispatcher) or not isinstance(key, types.StringLiteral) \
            or not isinstance(spec, types.StringLiteral):
        return None
    items = parse_spec(spec.literal_value)
    bases = tuple(bufs.types) if isinstance(bufs, types.BaseTuple) else ()
    typed = _site_types(items, bases, tuple(rest.types) if isinstance(rest, types.BaseTuple) else ())
    if typed is None:
        return None
    argtys, viewtys = typed
    # the argument types as a direct call would see them (literals included), then made
    # plain where the kernel cannot tell (below), so a kernel resolves to the same overload
    # and the same cache entry for every call site whose arrays and scalars agree
    kernel_ty, disp = kernel, kernel.dispatcher
    from ..library import forward, plain_args, recipe_type
    # a thin wrapper (conv2d -> _conv2d_core) is skipped: its target is called directly, so
    # the target's code is not linked into and emitted again with the wrapper
    fwd = None if DIRECT_CALLS else forward(disp)
    recipe = fwd[1] if fwd else tuple(("arg", i) for i in range(len(argtys)))
    if fwd:
        disp = fwd[0]
        kernel = types.Dispatcher(disp)
    srctys = tuple(recipe_type(r, argtys) for r in recipe)
    # a literal whose value the kernel only converts is passed plain: one compilation for
    # every value instead of one per value (jitort.library.literal_free)
    calltys = plain_args(disp, srctys)
    prefix, k = key.literal_value.rsplit(":", 1)
    k = int(k)
    sig = (kernel_ty, key, fp, d, bufs, spec, rest)
    if _INFER.get("records") is not None:  # typing only (infer_records): compile nothing
        _, folded = disp._compiler.fold_argument_types(calltys, {})
        _INFER["records"][k] = (disp.py_func.__module__, disp.py_func.__name__, tuple(folded))
        return types.none(*sig), lambda *a: None
    csig = typingctx.resolve_function_type(kernel, calltys, {})
    if csig is None:
        return None
    _RECORDS[(prefix, k)] = (disp.py_func.__module__, disp.py_func.__name__, tuple(csig.args))

    codegen = _site_codegen(items, argtys, viewtys, bases, recipe, srctys, csig, k)
    return csig.return_type(*sig), codegen



def _site_types(items: tuple, bases: tuple, restys: tuple):
    """The argument types a call site passes (views built here: their array types, elements of
    ``rest``, ``d`` slots) and, per item, the array a view item builds (None for others); None
    when a view's base is not a C-contiguous array."""
    argtys, viewtys = [], []
    for it in items:
        if it[0] in "as":
            argtys.append(restys[it[1]] if it[0] == "a" else types.int64)
            viewtys.append(None)
            continue
        base = bases[it[1]]
        if not isinstance(base, types.Array) or base.layout != "C":
            return None
        dt = base.dtype if it[2] is None else numpy_support.from_dtype(np.dtype(it[2]))
        viewtys.append(types.Array(dt, len(it[4]), "C", readonly=not base.mutable))
        argtys.append(dt if it[0] == "e" else viewtys[-1])
    return tuple(argtys), viewtys


def _site_codegen(items, argtys, viewtys, bases, recipe, srctys, csig, k: int):
    """The lowering of one call site: build its arguments, load ``fp[k]``, call through it."""
    from ..library import recipe_type

    def value(context, builder, vals, r):
        if r[0] == "arg":
            return vals[r[1]]
        if r[0] == "const":  # a literal's data model is its value type's
            return context.get_constant(types.unliteral(recipe_type(r, argtys)), r[1])
        return context.cast(builder, value(context, builder, vals, r[2]),
                            types.unliteral(recipe_type(r[2], argtys)), r[1])

    def codegen(context, builder, signature, llargs):
        fpa, da, bufv, restv = llargs[2], llargs[3], llargs[4], llargs[6]
        dptr = context.make_array(signature.args[3])(context, builder, da).data
        vals = []
        for it, ty, vty in zip(items, argtys, viewtys):
            if it[0] == "a":
                vals.append(builder.extract_value(restv, it[1]))
            elif it[0] == "s":
                vals.append(_element(context, builder, dptr, it[1]))
            else:
                view = _build_view(context, builder, bases[it[1]],
                                   builder.extract_value(bufv, it[1]), dptr, it, vty)
                if it[0] == "e":  # element 0 of the view (check_views: it has one)
                    data = context.make_array(vty)(context, builder, view).data
                    view = context.unpack_value(builder, ty, data)
                vals.append(view)
        vals = [value(context, builder, vals, r) for r in recipe]
        vals = [v if ft == tt else context.cast(builder, v, ft, tt)
                for v, ft, tt in zip(vals, srctys, csig.args)]
        fpp = context.make_array(signature.args[2])(context, builder, fpa).data
        fpv = _element(context, builder, fpp, k)
        fnty = context.call_conv.get_function_type(csig.return_type, csig.args)
        fn = builder.inttoptr(fpv, fnty.as_pointer())
        status, res = context.call_conv.call_function(builder, fn, csig.return_type, csig.args,
                                                      vals)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return res
    return codegen


def _build_view(context, builder, basety, baseval, dptr, item, outty):
    """The array struct of view ``item`` (:func:`parse_spec`) of ``baseval``: its data at
    the byte offset given by the ``d`` slots, its sizes products of ``d`` slots, C strides;
    it has no meminfo of its own (NRT null: the base outlives the call). Sharing the base's
    would make every array a kernel passes to a helper, or views, an atomic increment and
    decrement of one counter (all workspace views share the workspace's), ~5-10 ns each on
    one thread and a cache line bounced between the cores when two threads do it: a
    depthwise layer of 16 channels on a 28x28 plane spent 40% of its time in them."""
    from numba.np.arrayobj import populate_array
    intp = context.get_value_type(types.intp)

    def slot(i):
        return _element(context, builder, dptr, i)

    base = context.make_array(basety)(context, builder, baseval)
    data = base.data
    if item[3]:
        off = slot(item[3][0])
        for i in item[3][1:]:
            off = builder.add(off, slot(i))
        data = builder.gep(builder.bitcast(data, cgutils.voidptr_t), [off])
    data = builder.bitcast(data, context.get_data_type(outty.dtype).as_pointer())
    shape = []
    for prod in item[4]:
        if prod == (-1,):  # the base flattened
            shape.append(base.nitems)
            continue
        n = slot(prod[0])
        for i in prod[1:]:
            n = builder.mul(n, slot(i))
        shape.append(n)
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(
        context.get_data_type(outty.dtype)))
    strides = [itemsize] * len(shape)
    for j in range(len(shape) - 2, -1, -1):
        strides[j] = builder.mul(strides[j + 1], shape[j + 1])
    ary = context.make_array(outty)(context, builder)
    populate_array(ary, data=data, shape=cgutils.pack_array(builder, shape, intp),
                   strides=cgutils.pack_array(builder, strides, intp), itemsize=itemsize,
                   meminfo=None, parent=base.parent)
    return ary._getvalue()


def _element(context, builder, ptr, i: int):
    """``ptr[i]`` for a constant index (``d`` and ``fp`` hold int64)."""
    return builder.load(builder.gep(ptr, [context.get_constant(types.intp, i)]))


@functools.lru_cache(maxsize=4096)
def parse_spec(spec: str) -> tuple:
    """A call site's argument description, ``;``-separated items in argument order:

    * ``a<k>``: element k of the ``rest`` tuple -> ``("a", k)``;
    * ``s<i>``: the size ``d[i]`` -> ``("s", i)``;
    * ``v<b>:<dtype>:<start>:<sizes>``: a C-contiguous view of ``bufs[b]`` (dtype ``-``: the
      base's own), its data ``start`` bytes in (``+``-joined ``d`` slots, ``-``: none), its
      sizes ``,``-joined, each a ``*``-joined product of ``d`` slots (``-``: rank 0; ``#``:
      the base's element count, slot -1) -> ``("v", b, dtype, start slots, sizes)``;
    * ``e<b>:...``: element 0 of that view, a scalar -> ``("e", b, ...)``."""
    out = []
    for item in spec.split(";") if spec else ():
        if item[0] in "as":
            out.append((item[0], int(item[1:])))
            continue
        b, dt, start, sizes = item[1:].split(":")
        out.append((item[0], int(b), None if dt == "-" else dt,
                    () if start == "-" else tuple(int(i) for i in start.split("+")),
                    () if sizes == "-" else tuple(
                        (-1,) if p == "#" else tuple(int(i) for i in p.split("*"))
                        for p in sizes.split(","))))
    return tuple(out)


def check_views(views: list, d: np.ndarray, nbytes: dict[str, int]) -> None:
    """Check the views a driver builds (``calls.render_native``) against a plan's sizes ``d``
    before any runs: each spans exactly its byte range, inside its buffer (``nbytes``: the
    size of each buffer or argument array by name, where known). Numba would not check.
    Runs for every new input shape: plain ints (numpy scalars cost bert's 257 views 8 ms)."""
    d = d.tolist()
    for v in views:
        base = v["base"]
        if v["sizes"] == ((-1,),):  # an argument array flattened: fits by construction
            if v.get("scalar") and nbytes.get(base, 1) == 0:
                raise ExecutionError(f"driver reads element 0 of an empty {base}")
            continue
        count = math.prod(d[i] for p in v["sizes"] for i in p)
        if v.get("scalar") and count < 1:
            raise ExecutionError(f"driver reads element 0 of an empty view of {base}")
        if v["end"] is None:  # an argument array reshaped
            if base in nbytes and count * nbytes[base + ".item"] != nbytes[base]:
                raise ExecutionError(f"driver view of {base}: {count} elements, the array has "
                                     f"{nbytes[base] // nbytes[base + '.item']}")
            continue
        start, end = sum(d[i] for i in v["start"]), sum(d[i] for i in v["end"])
        item = v["item"]
        if start < 0 or end - start != count * item or end > nbytes.get(base, end):
            raise ExecutionError(f"driver view of {base}[{start}:{end}] as {count} x "
                                 f"{v['dtype']}: does not fit its range")


# --- sidecar records ----------------------------------------------------------------------
def _sigs_path(mod, part: str) -> Path:
    return Path(mod.__file__).with_name(f"{mod.__name__.rsplit('.', 1)[-1]}.{part}.sigs")


def _keys(mod, part: str) -> list[tuple[str, int]]:
    """The call-site keys of driver function ``part``: (the driver's prefix, site number),
    from the table the driver module carries (``SITES``, see codegen/assembly.py)."""
    prefix, parts = mod.SITES
    return [(prefix, k) for k in parts[part]]


def _read(path: Path):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:  # absent or damaged: recovered by typing again
        return None


def _write(path: Path, recs: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".sigs")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(recs, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def records_exist(mod, part: str) -> bool:
    return _sigs_path(mod, part).exists()


def compile_part(mod, part: str, sig: tuple) -> dict:
    """Compile (or load from the cache) driver function ``part`` of ``mod`` for ``sig`` and
    return its call sites' records, writing them beside the module when typed here."""
    disp = getattr(mod, part)
    keys = _keys(mod, part)
    with _lock:
        disp.compile(sig)
        recs = {k: _RECORDS.get((p, k)) for p, k in keys}
        if all(r is not None for r in recs.values()):
            if not records_exist(mod, part):
                _write(_sigs_path(mod, part), recs)
            return recs
        saved = _read(_sigs_path(mod, part))
        if saved is not None and all(k in saved for _, k in keys):
            return saved
        # cached machine code without its record: type an uncached copy to recover it
        from numba import njit
        njit(error_model="numpy")(disp.py_func).compile(sig)
        recs = {k: _RECORDS[(p, k)] for p, k in keys}
        _write(_sigs_path(mod, part), recs)
        return recs


def infer_records(mod, part: str, sig: tuple) -> dict:
    """The call-site records of driver function ``part`` of ``mod`` for argument types
    ``sig`` by type inference alone: no kernel is compiled and nothing is cached, so the
    kernels a driver needs can be compiled (in parallel processes) before the driver.

    Types in a typing context of its own, new each time: the intrinsic's typing results are
    cached per context, and these (returning ``none`` without compiling the kernel) must
    never serve a real compilation, nor a later call here (whose typer would not run)."""
    from numba.core import compiler, typing
    from numba.core.registry import cpu_target
    with _lock:
        flags = compiler.Flags()
        flags.nrt = True
        flags.no_cpython_wrapper = True
        flags.error_model = "numpy"
        _INFER["records"] = recs = {}
        try:
            compiler.compile_extra(typing.Context(), cpu_target.target_context,
                                   getattr(mod, part).py_func, sig, None, flags, {},
                                   pipeline_class=_type_only())
        except Exception:  # a pipeline without lowering ends asking for the compile result
            if not _INFER.get("typed"):
                raise
        finally:
            _INFER.pop("records", None)
            _INFER.pop("typed", None)
    return recs


_PIPELINE: list = []


def _type_only():
    """A Numba compiler class whose pipeline stops after type inference (then marks
    ``_INFER["typed"]``)."""
    if _PIPELINE:
        return _PIPELINE[0]
    from numba.core import compiler
    from numba.core.compiler_machinery import AnalysisPass, register_pass
    from numba.core.typed_passes import NopythonTypeInference
    from numba.core.untyped_passes import (FixupArgs, IRProcessing, TranslateByteCode,
                                           WithLifting)

    @register_pass(mutates_CFG=False, analysis_only=True)
    class Typed(AnalysisPass):
        _name = "jitort_typed"

        def __init__(self):
            AnalysisPass.__init__(self)

        def run_pass(self, state):
            _INFER["typed"] = True
            return False

    class TypeOnly(compiler.CompilerBase):
        def define_pipelines(self):
            pm = compiler.PassManager("jitort_type_only")
            for cls, what in ((TranslateByteCode, "bytecode"), (FixupArgs, "args"),
                              (IRProcessing, "ir"), (WithLifting, "with"),
                              (NopythonTypeInference, "types"), (Typed, "typed")):
                pm.add_pass(cls, what)
            pm.finalize()
            return [pm]
    _PIPELINE.append(TypeOnly)
    return TypeOnly


def driver_module(plan):
    """The loaded generated module of ``plan``'s driver (None if not loaded here)."""
    from . import module as modmgr
    return modmgr._loaded.get(Path(plan.source_path).stem)


def part_names(mod) -> list[str]:
    return sorted(mod.SITES[1], key=lambda a: int(a[4:]))


def link(mod, n_sites: int, args: list) -> np.ndarray:
    """The ``fp`` table of driver module ``mod`` (``n_sites`` call sites) for the types of
    ``args`` (a call's arguments, ``fp`` included), its functions compiled or loaded for them.
    Once per driver and argument types in a process: a plan keeps its table."""
    from numba import typeof
    name = mod.__name__.rsplit(".", 1)[-1]
    sig = tuple(typeof(a) for a in args)
    with _lock:
        table = _TABLES.get((name, sig))
        if table is not None:
            return table
        table = np.zeros(max(n_sites, 1), np.int64)
        for part in part_names(mod):
            for k, (kmod, kname, argtys) in compile_part(mod, part, sig).items():
                table[k] = address(kmod, kname, argtys)
        if n_sites and not table[:n_sites].all():
            raise ExecutionError(f"driver {name}: a kernel call site has no address")
        _TABLES[(name, sig)] = table
        return table


def address(kmod: str, kname: str, argtys: tuple) -> int:
    """Address of the native entry of kernel ``kmod.kname`` compiled for ``argtys``."""
    disp = getattr(importlib.import_module(kmod), kname)
    disp.compile(argtys)
    cres = disp.overloads[tuple(argtys)]
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)

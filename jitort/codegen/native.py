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

What each call site calls (kernel and argument types) is recorded while the driver is typed
and written beside the generated module (``<module>.part<i>.sigs``), because a driver loaded
from Numba's cache is not typed again. A driver function that is cached without its record
(a process killed in between) is typed once more by an uncached copy, to recover the record.
"""
from __future__ import annotations

import importlib
import os
import pickle
import re
import tempfile
import threading
from pathlib import Path

import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..errors import ExecutionError

#: ``JITORT_DIRECT_CALLS=1``: drivers call kernels directly (linked into them, as before the
#: table; slower to compile), for comparisons and as a way around a problem with the table
DIRECT_CALLS = os.environ.get("JITORT_DIRECT_CALLS", "0") not in ("0", "")

#: (driver's site prefix, call-site index) -> (kernel module, kernel name, argument types),
#: recorded by :func:`native_call`'s typer in this process
_RECORDS: dict[tuple[str, int], tuple[str, str, tuple]] = {}
#: set by :func:`infer_records` while it types a driver: the call sites' records go into
#: ``_INFER["records"]`` and no kernel is compiled
_INFER: dict = {}
#: (driver module name, argument types) -> its ``fp`` table, once linked in this process
_TABLES: dict[tuple, np.ndarray] = {}
_lock = threading.RLock()

#: a call-site key in generated text: ``"<prefix>:<k>"`` (the prefix is unique to the driver)
_KEY = re.compile(r'_nc\([\w.]+, "(\w+):(\d+)"')


@intrinsic
def native_call(typingctx, kernel, key, fpk, args):
    """``kernel(*args)`` through the address ``fpk``; ``key`` ("prefix:k") names the site."""
    if not isinstance(kernel, types.Dispatcher) or not isinstance(key, types.StringLiteral):
        return None
    # the argument types as a direct call would see them (literals included), then made
    # plain where the kernel cannot tell (below), so a kernel resolves to the same overload
    # and the same cache entry for every call site whose arrays and scalars agree
    argtys = tuple(args.types) if isinstance(args, types.BaseTuple) else ()
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
    if _INFER.get("records") is not None:  # typing only (infer_records): compile nothing
        _, folded = disp._compiler.fold_argument_types(calltys, {})
        _INFER["records"][int(k)] = (disp.py_func.__module__, disp.py_func.__name__,
                                     tuple(folded))
        return types.none(kernel_ty, key, fpk, args), lambda *a: None
    csig = typingctx.resolve_function_type(kernel, calltys, {})
    if csig is None:
        return None
    _RECORDS[(prefix, int(k))] = (disp.py_func.__module__, disp.py_func.__name__, tuple(csig.args))
    n = len(argtys)

    def value(context, builder, vals, r):
        if r[0] == "arg":
            return vals[r[1]]
        if r[0] == "const":  # a literal's data model is its value type's
            return context.get_constant(types.unliteral(recipe_type(r, argtys)), r[1])
        return context.cast(builder, value(context, builder, vals, r[2]),
                            types.unliteral(recipe_type(r[2], argtys)), r[1])

    def codegen(context, builder, signature, llargs):
        fpv, tup = llargs[2], llargs[3]
        vals = [builder.extract_value(tup, i) for i in range(n)]
        vals = [value(context, builder, vals, r) for r in recipe]
        vals = [v if ft == tt else context.cast(builder, v, ft, tt)
                for v, ft, tt in zip(vals, srctys, csig.args)]
        fnty = context.call_conv.get_function_type(csig.return_type, csig.args)
        fn = builder.inttoptr(fpv, fnty.as_pointer())
        status, res = context.call_conv.call_function(builder, fn, csig.return_type, csig.args,
                                                      vals)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return res
    return csig.return_type(kernel_ty, key, fpk, args), codegen


_CALL = re.compile(r"^(\s*)((?:_[a-z_]+\.)?\w+)\((.*)\)\s*$")


def rewrite_calls(lines: list[str], modules, kernels, placeholder: str,
                  start: int) -> tuple[list[str], int]:
    """Driver lines with each statement-level call of a kernel-library function
    (``_mod.fn(args)``, ``_mod`` in ``modules``) or of a generated kernel (a name in
    ``kernels``) turned into a :func:`native_call` through ``fp[k]``, k counting from
    ``start``; returns the lines and the next k."""
    out, k = [], start
    for line in lines:
        m = _CALL.match(line)
        callee = m and m.group(2)
        if not callee or not (callee in kernels or callee.split(".")[0] in modules
                              and "." in callee):
            out.append(line)
            continue
        ind, _, args = m.groups()
        tup = f"({args},)" if args.strip() else "()"
        out.append(f'{ind}_nc({callee}, "{placeholder}:{k}", fp[{k}], {tup})')
        k += 1
    return out, k


# --- sidecar records ----------------------------------------------------------------------
def _sigs_path(mod, part: str) -> Path:
    return Path(mod.__file__).with_name(f"{mod.__name__.rsplit('.', 1)[-1]}.{part}.sigs")


def _keys(disp) -> list[tuple[str, int]]:
    import inspect
    return [(p, int(k)) for p, k in _KEY.findall(inspect.getsource(disp.py_func))]


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
    keys = _keys(disp)
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
    return sorted((a for a in vars(mod) if re.fullmatch(r"part\d+", a)), key=lambda a: int(a[4:]))


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

"""Compile each big library function once: callers reference it instead of re-emitting it.

Numba links a callee's whole LLVM module into every caller (as ``linkonce_odr`` copies) and
optimizes and emits it again there, at every call level: ``winograd._wino_task`` was emitted
by itself, by the parfor body calling it, by ``_wino_par`` and by ``_winograd_core``, its
transforms once more below it. Most of the kernel library's compile time (162 s of 162 s for
the Winograd entry, where 52 s is the code compiled once) was that repetition.

Installed by :func:`install`, which the kernel library's entry point (``kernels.install``, run
once when ``jitort.kernels`` is imported) calls (``JITORT_KERNEL_LINK=copy`` keeps Numba's way):
patches of Numba's linking, naming and caching. Each replaces a Numba internal: they were
checked against the Numba versions in :data:`CHECKED` (the table in :func:`_patches` names the
range for each), and :func:`install` warns when the running Numba is outside it.

* **Linking** (:func:`_module_for_linking`): a function of the kernel library (module-level
  dispatcher of ``jitort.kernels.cpu``, disk cache on, one of its compiled overloads) of at least
  :data:`MIN_INSTRUCTIONS` LLVM instructions is linked ``available_externally``: LLVM may still
  inline it (it would not: it is too big), but emits no code for it; the caller's object calls
  the symbol that the callee's own, already loaded, code defines. Smaller functions stay
  ``linkonce_odr`` copies (inlined where LLVM likes, as before).
* **Names** (:func:`_from_function`): Numba puts a per-process compile counter in every
  mangled name; a library function gets a fixed one instead, so the symbol a cached caller
  names is the one any process's build of that callee (same source, argument types and
  flags) defines; the fastmath flags print in sorted order (Numba printed the set, whose
  order changes with each process's string hashing). Without it, two processes of ``jitort
  warmup --library --jobs 2`` that both compiled ``act_row`` left half the library naming a
  build the cache no longer held.
* **Loading** (:func:`_rebuild`): each cached object carries the list of such symbols it
  calls (:func:`_reduce`) and is only loaded after the functions it names are: each is looked up by its mangled name (module and
  function), and its dispatcher's cached overloads are loaded until one defines that name.
  When none does (a callee's cache entry is gone or from another build), the caller's cache
  entry counts as missing and the caller is compiled again, never loaded with an unresolved
  symbol (LLVM would end the process).

A callee without its own ``fastmath`` or ``error_model`` takes its caller's (Numba's flag
inheritance), and the flags are part of the name while Numba's cache keeps one build per
argument types: a cached caller that needs the other variant is compiled again (correct, only
slower). Assumes one dispatcher per library function (``njit`` applied once, at module
level): a second dispatcher of the same function compiled for the same types would define the
same symbol. :func:`mode` is part of every kernel cache key (``kernels/_cache``), so caches
written with and without these patches are never mixed.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
import warnings

import llvmlite.binding as ll
import numba
from numba.core import caching, codegen
from numba.core.bytecode import FunctionIdentity
from numba.core.cpu_options import FastMathOptions

#: functions at least this big (LLVM instructions, optimized) are linked by reference
MIN_INSTRUCTIONS = 400
_PREFIX = "_ZN6jitort7kernels3cpu"
_MODULES = "jitort.kernels.cpu."
_NAME = re.compile(r"(\d+)")
_orig_module_for_linking = codegen.CPUCodeLibrary._get_module_for_linking


def mode() -> str:
    """How library callees are linked: ``"link 2"`` (by name, this module) or ``"copy"``; with
    `` nolsr`` when jitort's code is emitted without loop strength reduction (:func:`lsr`)."""
    link = "copy" if os.environ.get("JITORT_KERNEL_LINK", "").lower() == "copy" else "link 2"
    return link if lsr() else link + " nolsr"


def lsr() -> bool:
    """Whether LLVM's loop strength reduction runs when jitort's code is emitted
    (``JITORT_KERNEL_LSR=1``); by default it does not (see :func:`_finalize_specific`)."""
    return os.environ.get("JITORT_KERNEL_LSR", "").lower() in ("1", "on", "true", "yes")


class StaleLink(Exception):
    """A cached object calls a library function whose compiled code is not available."""


def _split(name: str):
    """(module, function) of a Numba-mangled name ``_ZN<len><id>...`` of a module-level
    function, else None."""
    if not name.startswith("_ZN"):
        return None
    parts, i = [], 3
    while i < len(name) and name[i].isdigit():
        m = _NAME.match(name, i)
        n = int(m.group(1))
        i = m.end()
        parts.append(name[i:i + n])
        i += n
    if i >= len(name) or name[i] not in "BE" or len(parts) < 2 \
            or any(not p.isidentifier() for p in parts):
        return None  # nested or escaped (closures, generated names): not ours to find
    return ".".join(parts[:-1]), parts[-1]


def _dispatcher(name: str, load: bool = False):
    """The cached module-level dispatcher a library function's mangled name belongs to."""
    where = _split(name)
    if where is None:
        return None
    modname, fn = where
    mod = sys.modules.get(modname)
    if mod is None and load:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            return None
    disp = getattr(mod, fn, None) if mod is not None else None
    return disp if _disk_cached(disp) else None


def _disk_cached(disp) -> bool:  # NullCache: a later process could not load it
    return isinstance(getattr(disp, "_cache", None), caching.Cache)


def _defined(disp, name: str) -> bool:
    return any(getattr(c.fndesc, "mangled_name", None) == name
               for c in list(disp.overloads.values()))


def _size(fn) -> int:
    return sum(1 for b in fn.blocks for _ in b.instructions)


def _module_for_linking(self):
    """``CPUCodeLibrary._get_module_for_linking`` (a copy of the module with its functions
    ``linkonce_odr``) with the big library functions ``available_externally`` instead."""
    fresh = self._shared_module is None
    mod = _orig_module_for_linking(self)
    if fresh and mod is not self._final_module:  # Numba's own copy, made just now
        for fn in mod.functions:
            if fn.linkage == ll.Linkage.linkonce_odr and fn.name.startswith(_PREFIX) \
                    and _size(fn) >= MIN_INSTRUCTIONS:
                disp = _dispatcher(fn.name)
                if disp is not None and _defined(disp, fn.name):
                    fn.linkage = "available_externally"
    return mod


def needs(module, own: str) -> list[str]:
    """The library functions a module calls without containing their code (``own``, its
    own function, linked ``available_externally`` for its callers, aside)."""
    return [fn.name for fn in module.functions
            if fn.name.startswith(_PREFIX) and fn.name != own
            and (fn.is_declaration or fn.linkage == ll.Linkage.available_externally)]


def ensure(name: str) -> None:
    """Load the compiled library function ``name`` (its cached overloads, in turn) or raise
    :class:`StaleLink`."""
    disp = _dispatcher(name, load=True)
    if disp is None:
        raise StaleLink(f"{name}: no cached library function of that name")
    if _defined(disp, name):
        return
    try:
        index = disp._cache._cache_file._load_index()
    except Exception as e:  # noqa: BLE001 - unreadable: the caller is compiled again
        raise StaleLink(f"{name}: {e}") from e
    magic = disp.targetctx.codegen().magic_tuple()
    for key in list(index):
        sig = key[0]
        if key[1] != magic or any(sig == s for s in disp.overloads):
            continue
        if not _loading:  # a caller's load refreshed it already (~7 ms a time)
            disp.targetctx.refresh()
        try:
            cres = disp._cache._load_overload(sig, disp.targetctx)
        except Exception as e:  # noqa: BLE001 - the caller is compiled again, and with it
            # the callee, whose own (guarded) load then reports the damaged file
            raise StaleLink(f"{name}: {type(e).__name__}: {e}") from e
        if cres is not None:  # as Dispatcher.compile does on a cache hit
            disp.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            disp.add_overload(cres)
            if _defined(disp, name):
                return
    raise StaleLink(f"{name}: the cache holds another build of it")


#: the id in the mangled name of a library function (Numba numbers every compilation from 1)
STABLE_UID = 0
_orig_from_function = FunctionIdentity.from_function.__func__


def _from_function(cls, pyfunc):
    """``FunctionIdentity.from_function`` giving a kernel-library function (module level,
    disk-cached dispatcher) a name that is the same in every process: a caller cached against
    one process's build of a callee then runs against any build of it (same source, argument
    types and flags), also when two compile processes both built it."""
    self = _orig_from_function(cls, pyfunc)
    mod, name = self.module, self.func_qualname
    if self.modname.startswith(_MODULES) and "." not in name:
        disp = getattr(mod, name, None)
        if getattr(disp, "py_func", None) is self.func and _disk_cached(disp):
            self.unique_id = STABLE_UID
            self.unique_name = f"{name}${STABLE_UID}"
    return self


def _derive(self):  # IR derived from a function (lifted loops): a fresh id, as before
    return _orig_from_function(type(self), self.func)


_orig_reduce = caching.CompileResultCacheImpl.reduce
_orig_rebuild = caching.CompileResultCacheImpl.rebuild
_orig_load = caching.Cache._load_overload
_NEEDS = "jitort.needs"
_loading: list = []  # the cached objects being loaded (under Numba's compiler lock)


def _reduce(self, cres):
    """``CompileResultCacheImpl.reduce`` with the library functions the object calls (its own
    aside) appended: loading it need not parse its module to find them."""
    payload = _orig_reduce(self, cres)
    names = tuple(needs(cres.library._get_module_for_linking(), cres.fndesc.mangled_name))
    return (*payload, (_NEEDS, names))


def _rebuild(self, target_context, payload):
    """``CompileResultCacheImpl.rebuild``: the library functions a cached object calls are
    loaded first."""
    last, names = payload[-1], ()
    if isinstance(last, tuple) and len(last) == 2 and last[0] == _NEEDS:
        names, payload = last[1], payload[:-1]
    # else written without these patches (not a kernel cache: those are keyed by mode()), so
    # with every callee copied in: nothing to load first
    _loading.append(names)
    try:
        for name in names:
            ensure(name)
    finally:
        _loading.pop()
    return _orig_rebuild(self, target_context, payload)


def _load_overload(self, sig, target_context):
    try:
        return _orig_load(self, sig, target_context)
    except StaleLink:
        return None  # compiled again against the callees this process has


def _fastmath_encode(self) -> str:
    """``FastMathOptions.encode`` in sorted order: Numba prints the set, whose order follows
    Python's per-process string hashing, and the text is part of every mangled name."""
    return "{" + ", ".join(repr(f) for f in sorted(self.flags)) + "}" if self.flags else "set()"


#: mangled-name prefixes of jitort's code: the kernel library and generated modules
_OURS = ("_ZN6jitort7kernels", "_ZN10jitort_gen")
_orig_finalize_specific = codegen.JITCodeLibrary._finalize_specific


def _finalize_specific(self):
    """Numba's machine-code emission of a code library, without LLVM's loop strength
    reduction when the library defines jitort code. LSR was most of the code generator's time
    on the kernel library (the Winograd entry: 13.8 of 27.7 s at its core) and its loops,
    written over raw pointers with explicit offsets, do not need it (runtime A/B in the
    README's cold-start section). The option is LLVM's process-wide ``-disable-lsr``, set for
    this emission only, so other Numba code in the process compiles as before."""
    if lsr() or not any(not fn.is_declaration and fn.name.startswith(_OURS)
                        for fn in self._final_module.functions):
        return _orig_finalize_specific(self)
    ll.set_option("jitort", "-disable-lsr=true")
    try:
        return _orig_finalize_specific(self)
    finally:
        ll.set_option("jitort", "-disable-lsr=false")


#: Numba releases (major, minor), inclusive, that every patch below was checked against: the
#: kernel tests run on 0.68.1, and the source of each function replaced (or wrapped) is the same
#: from 0.60.0 to 0.68.1 but where :func:`_patches` says otherwise, and so is the mangling
#: :func:`_split` reads (itanium_mangler.py has an extra branch for the experimental type
#: system in 0.61-0.64; the default type codes are the same). ``pyproject.toml`` pins
#: ``numba>=0.60``.
CHECKED = ((0, 60), (0, 68))


def numba_version() -> tuple[int, int]:
    """The running Numba's (major, minor)."""
    parts = re.findall(r"\d+", numba.__version__)[:2]
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


def check_numba(what: str) -> bool:
    """Whether the running Numba lies in :data:`CHECKED`; else a ``RuntimeWarning`` naming
    ``what`` (the patches run anyway: Numba's internals may still match)."""
    lo, hi = CHECKED
    if lo <= numba_version() <= hi:
        return True
    warnings.warn(f"jitort.kernels: {what} replace Numba internals checked against Numba "
                  f"{lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}, not {numba.__version__}; if kernels "
                  "fail to compile or load, set JITORT_KERNEL_LINK=copy (and report it)",
                  RuntimeWarning, stacklevel=3)
    return False


def _patches(link: bool):
    """(owner, attribute, replacement) of each patch; ``link``: the linking ones too. All checked
    against Numba 0.60-0.68 (:data:`CHECKED`)."""
    table = [
        # 0.60-0.68: JITCodeLibrary._finalize_specific emits the object code (its body changed
        # in 0.62, timings only; wrapped, not copied)
        (codegen.JITCodeLibrary, "_finalize_specific", _finalize_specific),
    ]
    if link:
        table += [
            # 0.60-0.68: FastMathOptions.encode prints the flag set into mangled names
            (FastMathOptions, "encode", _fastmath_encode),
            # 0.60-0.68: CPUCodeLibrary._get_module_for_linking copies the module with its
            # functions linkonce_odr (uses _shared_module / _final_module)
            (codegen.CPUCodeLibrary, "_get_module_for_linking", _module_for_linking),
            # 0.60-0.68: CompileResultCacheImpl.reduce / rebuild: the cached payload tuple
            (caching.CompileResultCacheImpl, "reduce", _reduce),
            (caching.CompileResultCacheImpl, "rebuild", _rebuild),
            # 0.60-0.68: FunctionIdentity.from_function (classmethod) sets unique_id /
            # unique_name; derive() builds a lifted loop's identity from it
            (FunctionIdentity, "from_function", classmethod(_from_function)),
            (FunctionIdentity, "derive", _derive),
            # 0.60-0.68: Cache._load_overload, under Cache.load_overload's guard
            (caching.Cache, "_load_overload", _load_overload),
        ]
    return table


_installed = False


def install() -> None:
    """Install the patches (:func:`_patches`), once per process: repeated calls do nothing.
    Called by ``kernels.install`` before any kernel is defined or loaded; code compiled or
    loaded before it keeps Numba's own linking. Warns (:func:`check_numba`) when the running
    Numba lies outside :data:`CHECKED`; raises ``RuntimeError`` when an internal it replaces is
    missing (JITORT_KERNEL_LINK=copy then leaves all but the LSR patch out)."""
    global _installed
    if _installed:
        return
    link = not mode().startswith("copy") and not getattr(codegen.CPUCodeLibrary, "_jitort_link",
                                                         False)  # (a reloaded copy of this module)
    table = _patches(link)
    check_numba("kernels._link's patches")
    missing = [f"{owner.__name__}.{attr}" for owner, attr, _ in table if not hasattr(owner, attr)]
    if missing:
        raise RuntimeError(f"jitort.kernels: Numba {numba.__version__} has no {', '.join(missing)}"
                           " (kernels/_link.py patches them; checked against Numba "
                           f"{CHECKED[0][0]}.{CHECKED[0][1]}-{CHECKED[1][0]}.{CHECKED[1][1]}); "
                           "JITORT_KERNEL_LINK=copy keeps Numba's own linking")
    for owner, attr, new in table:
        setattr(owner, attr, new)
    if link:
        codegen.CPUCodeLibrary._jitort_link = True
    _installed = True

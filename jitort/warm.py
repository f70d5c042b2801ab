"""Warm start: a compiled program found in the on-disk cache by the model's bytes.

``jitort.compile`` comes here first. A model whose program is one compiled segment (no
interpreted node, no value-dependent plan, no float16 data, no ZipMap output) has, after its
first compiled call, a *snapshot* written to ``$JITORT_CACHE_DIR/warm-<gen hash>/<key>.pkl``:
the generated driver's text, the segment's constant buffer and each plan made so far (sizes,
host values, workspace size, output shapes). A later ``compile`` of the same bytes with the same
options finds it and returns a :class:`WarmModel` that runs those plans directly: onnx is not
imported, the graph is not parsed, no pass runs and nothing is planned; the driver and its
kernels load from Numba's caches as they would for the full model.

The key (:func:`snapshot_key`) hashes the model's bytes, the compile options, jitort's own
sources (``jitort/`` and the kernel library), the versions of Python, numpy, Numba and onnx,
the CPU as Numba's code generator targets it, this machine's calibration decisions and every
``JITORT_*`` / ``NUMBA_*`` environment variable: a change of any of them misses. External
data files are recorded with their hashes in the snapshot and checked at load.

A :class:`WarmModel` answers what a user of a :class:`~jitort.CompiledModel` touches from the
snapshot: ``options``, ``strict``, ``debug``, ``threads``, ``device``, ``tier``, ``profiler``,
``inputs``, ``input_names``, ``output_names``, calls, ``run``, ``wait_compiled``, ``prepare`` for
a snapshot's shapes and ``end_profiling``. Anything else -- a shape no plan covers, a feed that
is not a C-contiguous array of the input's dtype, an output subset, any other attribute of a full
:class:`~jitort.CompiledModel` (``graph``, ``pass_report``, ``placement``, ``summary()``,
``plans()``, ``workspace_bytes``, ...) -- compiles the model the usual way (the generated code
still comes from the caches) and is answered by it from then on.
"""
from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import JitortError, run_driver

log = logging.getLogger("jitort.cache")

#: bumped when the snapshot's layout changes (old files then miss)
FORMAT = 1

#: compile options a snapshot may be made for (others, e.g. ``profile`` or
#: ``example_shapes``, always compile the usual way); ``tiered`` is left out of the key: a
#: warm model runs compiled from its first call either way
_OPTIONS = {"threads": None, "base_dir": None, "optimize": True, "strict": None, "tiered": None,
            "debug": False, "profile": False, "example_shapes": None, "backends": ("cpu",)}
_NOT_IN_KEY = ("tiered",)


def compile(model: Any, *, threads: int | None = None, base_dir=None, optimize: bool = True,
            device: str = "cpu", **kwargs):
    """:func:`jitort.compile`: the :class:`WarmModel` of a snapshot when the cache has one for
    this model and these options, else the full compile (which writes a snapshot after its
    first compiled call when the program qualifies)."""
    options = dict(threads=threads, base_dir=base_dir, optimize=optimize, **kwargs)
    key = snapshot_key(model, options) if device == "cpu" else None
    if key is not None:
        snap = _load(key)
        if snap is not None:
            return WarmModel(model, options, snap)
    from .runtime import compile as full_compile
    cm = full_compile(model, device=device, **options)
    if key is not None and _qualifies(cm):
        _Recorder(cm, key)
    return cm


def compile_count() -> int:
    """Numba compilations in this process so far (cache loads excluded)."""
    from .codegen import module as modmgr
    return modmgr.compiles()


# --- the key ---------------------------------------------------------------------------------
def snapshot_key(model: Any, options: dict) -> str | None:
    """The snapshot's name for ``model`` (a path or bytes) compiled with ``options``; None
    when no snapshot is made for it."""
    if set(options) - set(_OPTIONS) or any(
            options.get(k, v) != v for k, v in _OPTIONS.items()
            if k in ("debug", "profile", "example_shapes")) or tuple(
            options.get("backends", ("cpu",))) != ("cpu",):
        return None
    if isinstance(model, (str, os.PathLike)):
        try:
            data = Path(model).read_bytes()
        except OSError:
            return None  # the full compile names the problem
        base = options.get("base_dir") or Path(model).resolve().parent
    elif isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        base = options.get("base_dir") or os.getcwd()
    else:
        return None  # an onnx.ModelProto: onnx is loaded anyway
    opts = sorted((k, repr(v)) for k, v in options.items() if k not in _NOT_IN_KEY)
    h = hashlib.sha256(f"jitort warm {FORMAT} {opts!r} {os.path.abspath(base)}".encode())
    h.update(_environment())
    h.update(data)
    return h.hexdigest()[:40]


def _environment() -> bytes:
    """Everything besides the model and the options that may change its program."""
    from . import options, tuning
    parts = [_sources_hash(), _versions(), _target()]
    parts += sorted(f"{k}={v}" for k, v in options.variables(("JITORT_", "NUMBA_")).items())
    try:
        parts.append(hashlib.sha256(tuning.decisions_path().read_bytes()).hexdigest())
    except OSError:
        parts.append("no decisions")
    return "\n".join(parts).encode()


_memo: dict = {}


def _sources_hash() -> str:
    """jitort's sources and the kernel library's: passes, lowerings and kernels decide the
    program a snapshot holds."""
    if "sources" not in _memo:
        import importlib.util
        h = hashlib.sha256()
        roots = [Path(__file__).parent,
                 *map(Path, importlib.util.find_spec("jitort.kernels").submodule_search_locations)]
        for root in roots:
            for p in sorted(root.rglob("*.py")):
                h.update(str(p.relative_to(root)).encode())
                h.update(p.read_bytes())
        _memo["sources"] = h.hexdigest()
    return _memo["sources"]


def _versions() -> str:
    import importlib.metadata
    import platform

    import numba
    try:
        onnx_version = importlib.metadata.version("onnx")
    except importlib.metadata.PackageNotFoundError:
        onnx_version = None
    return (f"python {platform.python_version()} numpy {np.__version__} numba "
            f"{numba.__version__} onnx {onnx_version}")


def _target() -> str:
    """The CPU as Numba compiles for it: triple, CPU name and features."""
    from numba.core.registry import cpu_target
    return repr(cpu_target.target_context.codegen().magic_tuple())


# --- the snapshot ----------------------------------------------------------------------------
def _path(key: str) -> Path:
    from .codegen import module as modmgr
    return modmgr.cache_dir() / f"warm-{modmgr.gen_hash()}" / f"{key}.pkl"


def _load(key: str) -> dict | None:
    try:
        with open(_path(key), "rb") as f:
            snap = pickle.load(f)
        if snap.get("format") != FORMAT:
            return None
    except Exception:  # absent or damaged: the full compile writes it again
        return None
    for path, digest in snap["external"]:
        try:
            if hashlib.sha256(Path(path).read_bytes()).hexdigest() != digest:
                return None
        except OSError:
            return None
    return snap


def _qualifies(cm) -> bool:
    """Whether ``cm``'s program can be snapshotted: one compiled segment taking the graph
    inputs, in order, and writing every output (the executor's fast path), no ZipMap, no half
    floats."""
    fast = getattr(cm, "_fast", None)  # (segment, output positions, key order, argument order)
    return (fast is not None and fast[2] is None and fast[3] is None
            and not getattr(cm, "_zipmaps", None)
            and getattr(cm, "profiler", None) is None
            and not any(np.dtype(i.dtype).kind == "f" and np.dtype(i.dtype).itemsize == 2
                        or np.dtype(i.dtype).kind not in "fiub" for i in cm.inputs))


class _Recorder:
    """Writes ``cm``'s snapshot after its first call that ran compiled (wrapping the instance's
    ``_execute`` until then)."""

    def __init__(self, cm, key: str):
        self.cm, self.key = cm, key
        self.lock = threading.Lock()
        cm._execute = self

    def __call__(self, feeds, output_names):
        cm = self.cm
        out = type(cm)._execute(cm, feeds, output_names)
        if cm.tier == "compiled" and self.lock.acquire(blocking=False):
            try:
                if cm.__dict__.get("_execute") is self:
                    del cm._execute
                    save(cm, self.key)
            except Exception as e:  # a cache not written costs the next start, no more
                log.warning("warm-start snapshot not written: %s: %s", type(e).__name__, e)
            finally:
                self.lock.release()
        return out


def save(cm, key: str) -> bool:
    """Write the snapshot of ``cm`` (a :class:`CompiledModel` that has run compiled) under
    ``key``; False when its program does not qualify (any more)."""
    if not _qualifies(cm):
        return False
    seg, pos = cm._fast[:2]
    plans = {}
    for shapes, plan in seg.plans.items():
        if plan.exports or plan.parts is not None or seg.value_inputs:
            return False
        name = Path(plan.source_path).stem
        plans[shapes] = dict(driver=name, source=Path(plan.source_path).read_text("utf-8"),
                             d=plan.d, pb=plan.pb, ws_bytes=plan.ws_bytes,
                             out_shapes=plan.out_shapes, uses_blas=plan.uses_blas,
                             n_sites=plan.n_sites)
    if not plans or any(o.kind == "f" and o.itemsize == 2 for o in seg.output_dtypes):
        return False
    snap = dict(format=FORMAT, external=_external_files(cm),
                inputs=[(i.name, np.dtype(i.dtype).str, tuple(i.shape)) for i in cm.inputs],
                outputs=list(cm.output_names), threads=cm.threads, pin_blas=cm._pin_blas,
                cb=seg.cb, out_dtypes=[d.str for d in seg.output_dtypes], pos=pos, plans=plans)
    path = _path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pkl")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # atomic: readers see no half-written snapshot
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def _external_files(cm) -> list[tuple[str, str]]:
    """(absolute path, sha256) of each external data file of ``cm``'s model."""
    source = cm._source
    if not isinstance(source, str):
        return []  # bytes: external data relative to base_dir, recorded the same way below
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors
    proto = onnx.load(source, load_external_data=False)
    base = cm._options.get("base_dir") or os.path.dirname(source)
    files = set()
    for t in _get_all_tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            files.add(os.path.abspath(os.path.join(base, ExternalDataInfo(t).location)))
    return [(p, hashlib.sha256(Path(p).read_bytes()).hexdigest()) for p in sorted(files)]


# --- running ---------------------------------------------------------------------------------
class WarmModel:
    """A compiled model rebuilt from its snapshot: calls with the snapshot's input shapes run its
    driver; everything else goes to the full :class:`~jitort.CompiledModel`, compiled on first
    need (see the module's docstring). Callable; thread-safe.

    Its own attributes hold what the full model's would: ``options`` (the
    :class:`jitort.Options` of this compile), ``strict``, ``debug``, ``threads``, ``inputs``
    (:class:`jitort.ir.InputInfo` each), ``input_names``, ``output_names``, ``device``,
    ``tier`` and ``profiler`` (None: profiled models are never snapshotted)."""

    device = "cpu"
    tier = "compiled"
    profiler = None

    def __init__(self, model: Any, options: dict, snap: dict):
        from . import pinning, tuning
        from .ir import InputInfo
        from .options import for_compile
        tuning.ensure_background()
        tuning.apply_runtime()
        pinning.load_numba_registries()  # before Numba loads the driver: no scipy.linalg
        self._model, self._options = model, options
        #: the settings of this compile, as :attr:`CompiledModel.options`
        self.options = for_compile(strict=options.get("strict"), tiered=options.get("tiered"))
        self.strict = self.options.strict
        self.debug = bool(options.get("debug", False))
        self.inputs = [InputInfo(n, np.dtype(dt), sh) for n, dt, sh in snap["inputs"]]
        self.input_names = [i.name for i in self.inputs]
        self.output_names = list(snap["outputs"])
        self.threads = snap["threads"]
        self._snap = snap
        self._out_dtypes = [np.dtype(d) for d in snap["out_dtypes"]]
        self._lock = threading.RLock()
        self._tls = threading.local()
        self._linked: dict = {}   # shapes -> (driver, fp)
        self._full_model = None

    # the session API; anything else is the full model's
    def __call__(self, *args, **kwargs) -> list:
        if not kwargs and len(args) == len(self.inputs):
            out = self._try(dict(zip(self.input_names, args)))
            if out is not None:
                return out
        return self._full()(*args, **kwargs)

    def run(self, output_names, feeds, run_options=None) -> list:
        if output_names is None and isinstance(feeds, dict):
            out = self._try(feeds)
            if out is not None:
                return out
        return self._full().run(output_names, feeds, run_options)

    def wait_compiled(self, timeout: float | None = None) -> bool:
        return True

    def prepare(self, shapes: dict[str, Sequence[int]]) -> None:
        """:meth:`CompiledModel.prepare`: shapes a snapshot plan covers load its code now
        (one call on zeros); others prepare the full model."""
        if set(shapes) == set(self.input_names) and self._full_model is None:
            feeds = {i.name: np.zeros(tuple(shapes[i.name]), i.dtype) for i in self.inputs}
            if self._try(feeds) is not None:
                return
        self._full().prepare(shapes)

    def end_profiling(self, path=None) -> str:
        raise JitortError("compile the model with profile=True to profile it")

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_full_model", "_snap", "_model", "_options"):
            raise AttributeError(name)
        return getattr(self._full(), name)

    def __reduce__(self):
        from . import serialize
        source = (os.path.abspath(self._model) if isinstance(self._model, (str, os.PathLike))
                  else bytes(self._model))
        return serialize.rebuild, (source, dict(self._options), "cpu")

    def _full(self):
        """The full :class:`CompiledModel` (compiled once; the code comes from the caches)."""
        with self._lock:
            if self._full_model is None:
                from .runtime import compile as full_compile
                self._full_model = full_compile(self._model, **self._options)
            return self._full_model

    def _try(self, feeds: dict) -> list | None:
        """The outputs of a call whose feeds have a snapshot plan's shapes; None otherwise."""
        if self._full_model is not None or len(feeds) != len(self.inputs):
            return None
        arrays = []
        for spec in self.inputs:
            a = feeds.get(spec.name)
            if type(a) is not np.ndarray or a.dtype != spec.dtype or not a.flags.c_contiguous:
                return None
            arrays.append(a)
        shapes = tuple(a.shape for a in arrays)
        plan = self._snap["plans"].get(shapes)
        if plan is None:
            return None
        return self._call(shapes, plan, arrays)

    def _abandon(self, e: Exception) -> None:
        """The snapshot's code cannot be loaded (a damaged or missing cache file): every call
        goes to the full model from now on, which checks and rewrites the cached files."""
        import warnings
        from .codegen.module import CacheWarning
        warnings.warn(f"jitort cache: warm snapshot unusable ({type(e).__name__}: {e}); "
                      "compiling the model", CacheWarning, stacklevel=4)
        self._snap = {**self._snap, "plans": {}}

    def _call(self, shapes: tuple, plan: dict, arrays: list) -> list | None:
        from .pinning import pinned
        outs = [np.empty(s, dt) for s, dt in zip(plan["out_shapes"], self._out_dtypes)]
        ws = getattr(self._tls, "ws", None)
        if ws is None or ws.size < plan["ws_bytes"]:
            ws = self._tls.ws = _aligned_empty(max(plan["ws_bytes"], 64))
        cb, d, pb = self._snap["cb"], plan["d"], plan["pb"]
        with pinned(self.threads, plan["uses_blas"] or self._snap["pin_blas"]):
            try:
                driver, fp = self._link(shapes, plan, [ws, cb, d, *pb, *arrays, *outs])
            except Exception as e:  # noqa: BLE001 - any failure to load means: not usable
                self._abandon(e)
                return None
            run_driver(driver, ws, cb, d, fp, *pb, *arrays, *outs)
        pos = self._snap["pos"]
        return outs if pos is None else [outs[k] for k in pos]

    def _link(self, shapes: tuple, plan: dict, args: list):
        """The driver of ``plan`` and its kernel address table (loaded once per plan)."""
        with self._lock:
            linked = self._linked.get(shapes)
            if linked is None:
                from .codegen import module as modmgr
                from .codegen import native
                mod = modmgr.load(plan["driver"], plan["source"])
                fp0 = np.zeros(1, np.int64)
                fp = native.link(mod, plan["n_sites"], [*args[:3], fp0, *args[3:]])
                linked = self._linked[shapes] = (mod.call, fp)
            return linked


def _aligned_empty(nbytes: int, align: int = 64) -> np.ndarray:
    raw = np.empty(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]

"""Tiered execution: a first result in seconds, the compiled program when it is ready.

Compiling a model's generated code with Numba takes seconds to minutes on a cold machine (the
kernel library too when its cache is empty). A tiered :class:`~jitort.CompiledModel` does not
make its caller wait for that:

* **Tier 0** runs the optimized graph in the numpy interpreter (:mod:`jitort.interpreter`, with
  its im2col/window paths for convolutions and pools): no model-specific compilation at all.
* On the first call (at ``compile()`` already when every input shape is fixed) the compiled
  program runs once in *probe* mode, in the calling thread: each segment's plan is made
  (cheap) and run when its driver is in Numba's on-disk cache. A warm cache thus switches at
  once (the call returns the compiled program's result, after about a second of loading).
* At the first driver that is not cached the probe stops, and a background thread starts
  **separate processes** (``python -m jitort.tiering K JOBS LOG``, the job on stdin) that compile the program for
  those inputs, each a share of the driver functions, writing the generated modules and
  Numba's machine code into the cache (Numba compiles holding the GIL, so a thread would stall
  the callers); meanwhile calls run on tier 0. The thread then loads the program from the
  cache, runs it once on the same inputs, and **switches** the model to it: a call reads the
  tier once when it starts, so every call runs wholly on one tier, also with other threads
  calling.

The background process outlives its parent if the parent exits first, so that the next process
finds the cache warm (Numba writes its index and data files by atomic rename: a process killed
at any point leaves no damaged entry). A compilation that fails leaves the model on tier 0 and
warns (:class:`TieringWarning`) on the next call or :meth:`~jitort.CompiledModel.wait_compiled`.

Turn it off with ``compile(model, tiered=False)`` or ``JITORT_TIERED=0``; profiled models and
models that the interpreter cannot run whole are never tiered.
"""
from __future__ import annotations

import logging
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from .errors import JitortError
from .interpreter import make_runner, node_inputs

log = logging.getLogger("jitort.tiering")

#: environment variable: ``0`` turns tiering off by default (``compile(tiered=...)`` overrides)
ENV = "JITORT_TIERED"


class TieringWarning(UserWarning):
    """The background compilation failed: the model keeps running on the interpreter tier."""


class _NotCached(Exception):
    """Raised inside a probe run: this plan's driver would have to be compiled."""


def enabled_by_default() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off", "")


class Tiering:
    """The interpreter tier of one model and the background switch to its compiled tier."""

    def __init__(self, cm):
        self.cm = cm
        g = cm.graph
        self.nodes = list(g.nodes)
        # builds every runner now: raises UnsupportedOp when the interpreter lacks an op
        self.runners = [make_runner(n, g.opsets) for n in self.nodes]
        keep = {id(v) for v in g.outputs}
        last: dict[int, int] = {}
        for i, n in enumerate(self.nodes):
            for v in n.all_inputs():
                if not v.is_const:
                    last[id(v)] = i
        self.free_after: list[list[int]] = [[] for _ in self.nodes]
        for vid, i in last.items():
            if vid not in keep:
                self.free_after[i].append(vid)
        self.state = "interpreter"  # -> "compiling" -> "compiled" | "failed"
        self.error: BaseException | None = None
        self._warned = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self.starting = False  # a first call has begun probing the cache
        #: whether the background needed a compile process (False: everything was cached)
        self.compiled_in_child: bool | None = None

    # --- tier 0 ----------------------------------------------------------------------------
    def call(self, feeds: dict, output_names) -> list[np.ndarray]:
        cm = self.cm
        arrays = cm._validate(feeds)
        if self._thread is None:
            outs = self.start(arrays, output_names)
            if outs is not None:  # everything was cached: this call ran compiled
                return outs
        elif self.state == "failed":
            self._warn_once()
        env = dict(zip(cm._input_ids, arrays))
        _numpy_blas_pin()
        try:
            self.interpret(env)
        finally:
            _numpy_blas_unpin()
        return cm._collect(env, output_names, fresh=False)

    def interpret(self, env: dict, free: bool = True) -> dict:
        """Run every node on ``env`` (value id -> array, the graph inputs set); with ``free``,
        values are dropped after their last reader (only the graph outputs remain)."""
        for node, run, drop in zip(self.nodes, self.runners, self.free_after):
            outs = run(node_inputs(node, env))
            for o, r in zip(node.outputs, outs):
                if o is not None:
                    env[id(o)] = r
            if free:
                for vid in drop:
                    env.pop(vid, None)
        return env

    # --- background ------------------------------------------------------------------------
    def start(self, arrays: list, output_names=None) -> list | None:
        """Probe the cache for these inputs in the calling thread; when every driver is cached,
        switch now and return the compiled program's outputs. Otherwise start the background
        compile and return None (once per model)."""
        cm = self.cm
        with self._lock:
            if self._thread is not None:
                return None
            self.starting = True
            feeds = dict(zip(cm.input_names, arrays))
            try:
                # loads what is cached and runs it; stops at the first driver to compile
                cm._tls.probe = True
                outs = cm._execute_compiled(feeds, output_names)
            except _NotCached:
                outs = None
            finally:
                cm._tls.probe = False
            if outs is not None:
                self.compiled_in_child = False
                self._thread = threading.current_thread()
                self._switch()
                self._done.set()
                return outs
            self.compiled_in_child = True
            self.state = "compiling"
            copies = {n: np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                      for n, a in feeds.items()}
            self._thread = threading.Thread(target=self._background, args=(copies,),
                                            name="jitort-tiering", daemon=True)
            self._thread.start()
            return None

    def _switch(self) -> None:
        self.state = "compiled"
        self.cm._tier0 = None  # calls that start from now on run compiled

    def _background(self, feeds: dict) -> None:
        cm = self.cm
        try:
            compile_in_process(cm, feeds)
            cm._execute_compiled(feeds, None)  # from the cache now: loads, runs once
            self._switch()
        except BaseException as e:  # noqa: BLE001 - reported to the caller, tier 0 goes on
            self.error = e
            self.state = "failed"
            log.warning("background compilation failed, staying on the interpreter: %s", e)
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the compiled tier runs (True) or the background failed (False, with a
        :class:`TieringWarning`); ``timeout`` seconds at most (then False)."""
        if self._thread is None and self.starting:  # a first call is probing the cache
            with self._lock:
                pass
        if self._thread is None:
            raise JitortError("nothing is compiling yet: call the model once (or compile it "
                              "with example_shapes) so that the input shapes are known")
        self._done.wait(timeout)
        if self.state == "failed":
            self._warn_once()
        return self.state == "compiled"

    def _warn_once(self) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"jitort: compiling the model failed, it keeps running on the "
                          f"interpreter tier: {self.error}", TieringWarning, stacklevel=4)


# numpy's own OpenBLAS runs one thread during interpreter-tier calls: the compile processes
# hold the other cores, and OpenBLAS threads waiting for a busy core made densenet121's
# interpreted call 5x slower (1.3-2.6 s against 0.27-0.40 s with one thread)
_blas = {"depth": 0, "saved": None, "fns": None}
_blas_lock = threading.Lock()


def _numpy_blas_fns():
    if _blas["fns"] is None:
        try:
            from .kernels.cpu.blas import _numpy_openblas
            found = _numpy_openblas()
            _blas["fns"] = (found[1], found[2]) if found else ()
        except Exception:  # pragma: no cover - another BLAS: leave it alone
            _blas["fns"] = ()
    return _blas["fns"]


def _numpy_blas_pin() -> None:
    fns = _numpy_blas_fns()
    if not fns:
        return
    with _blas_lock:
        if _blas["depth"] == 0:
            _blas["saved"] = fns[1]()
            if _blas["saved"] != 1:
                fns[0](1)
        _blas["depth"] += 1


def _numpy_blas_unpin() -> None:
    fns = _numpy_blas_fns()
    if not fns:
        return
    with _blas_lock:
        _blas["depth"] -= 1
        if _blas["depth"] == 0 and _blas["saved"] not in (None, 1):
            fns[0](_blas["saved"])


def plan_cached(plan) -> bool:
    """Whether every Numba function of ``plan``'s driver module has an entry in the on-disk
    cache (so running it loads machine code instead of compiling)."""
    from .codegen import native
    mod = native.driver_module(plan)
    if mod is None:
        return False
    parts = native.part_names(mod)
    return bool(parts) and all(_dispatcher_cached(getattr(mod, p))
                               and native.records_exist(mod, p) for p in parts)


def _dispatcher_cached(disp) -> bool:
    cache = getattr(disp, "_cache", None)
    impl = getattr(cache, "_cache_file", None)
    if impl is None:
        return False
    try:
        return bool(impl._load_index())
    except Exception:  # an unreadable index: not usable, let the compile process redo it
        return False


# --- the compile process ----------------------------------------------------------------------
def compile_jobs() -> int:
    """Compile processes to start: ``JITORT_COMPILE_JOBS``, else the CPUs this process may use
    (at most 4: each also loads the model and Numba)."""
    env = os.environ.get("JITORT_COMPILE_JOBS")
    if env:
        return max(1, int(env))
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(4, n))


def compile_in_process(cm, feeds: dict, jobs: int | None = None) -> None:
    """Compile ``cm``'s program for ``feeds`` in ``jobs`` child processes (into the on-disk
    cache), each taking a share of the driver functions; raise
    :class:`JitortError` with the tail of a process's log when one fails."""
    from . import serialize
    from .codegen import module as modmgr
    jobs = compile_jobs() if jobs is None else jobs
    _, (source, options, device) = serialize.reduce(cm)
    options = dict(options, tiered=False, example_shapes=None, profile=False)
    work = modmgr.cache_dir() / "tiering"
    work.mkdir(parents=True, exist_ok=True)
    # the job goes through each child's stdin (no file to leave behind if this process dies)
    stem = f"{os.getpid()}-{time.monotonic_ns()}"
    sync = work / f"sync-{stem}"  # the children's steps (library kernels before drivers)
    sync.mkdir()
    job = pickle.dumps({"source": source, "options": options, "device": device, "feeds": feeds,
                        "sync": str(sync)}, protocol=pickle.HIGHEST_PROTOCOL)
    env = dict(os.environ, **{ENV: "0"})
    logs = [str(work / f"compile-{stem}-{k}.log") for k in range(jobs)]
    procs = []
    try:
        for k, logpath in enumerate(logs):
            with open(logpath, "wb") as logf:
                # its own session: a Ctrl-C in the caller's terminal does not kill it half-way,
                # and it finishes filling the cache if the caller exits first
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "jitort.tiering", str(k), str(jobs), logpath],
                    stdin=subprocess.PIPE, stdout=logf, stderr=logf, env=env,
                    start_new_session=True))
        cm._tiering_child = procs[0]  # tests kill it through this
        cm._tiering_children = procs
        for p in procs:
            try:
                p.stdin.write(job)
                p.stdin.close()
            except BrokenPipeError:  # it died already: its exit status tells
                pass
        failed = [(k, rc) for k, rc in enumerate(p.wait() for p in procs) if rc != 0]
        if failed:
            k, rc = failed[0]
            tail = Path(logs[k]).read_text(errors="replace")[-2000:]
            raise JitortError(f"the compile process exited with status {rc}: {tail.strip()}")
    finally:
        for p in logs:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        if all(p.poll() is not None for p in procs):  # else the children still use it
            shutil.rmtree(sync, ignore_errors=True)


def driver_parts(cm, feeds: dict) -> list:
    """Plan every segment of ``cm`` for ``feeds`` (the interpreter gives the values between
    segments): ``(module, driver function name, argument types)`` of each driver function,
    for the exact argument types a call passes."""
    import numba
    from .codegen import native
    from .codegen.cpu import aligned_empty
    from .partition import InterpStep
    env = dict(zip(cm._input_ids, cm._validate(feeds)))
    segs = [seg for seg in cm.steps if not isinstance(seg, InterpStep)]
    # the values a segment's plan and call read; when the inputs are all of them (a wholly
    # compiled model) nothing is interpreted (bert, resnet18: 0.4-1.7 s of a compile process)
    need = {id(v) for seg in segs for v in [*seg.inputs, *seg.value_inputs]}
    need.update(i for seg in segs for i in seg.arg_ids)
    if not need <= env.keys():
        Tiering(cm).interpret(env, free=False)
    parts = []
    for seg in segs:
        plan = cm._compilers[id(seg)].plan(env)
        cb = cm._compilers[id(seg)].consts.materialize()
        outs = [np.empty(sh, dt) for sh, dt in zip(plan.out_shapes, seg.output_dtypes)]
        args = [aligned_empty(max(plan.ws_bytes, 64)), cb, plan.d,
                np.zeros(max(plan.n_sites, 1), np.int64), *plan.pb,
                *[env[i] for i in seg.arg_ids], *outs]
        sig = tuple(numba.typeof(a) for a in args)
        mod = native.driver_module(plan)
        parts += [(mod, p, sig) for p in native.part_names(mod)]
    return parts


def compile_share(cm, feeds: dict, k: int, jobs: int, sync: str | None = None) -> int:
    """In a compile process: plan every segment for ``feeds`` and compile this process's share
    of the driver functions (:func:`_share`). With ``sync`` (a folder shared by the ``jobs``
    processes) the library kernels the drivers call and the cache lacks are compiled first,
    shared out between the processes (:func:`_kernels_first`). Returns how many driver
    functions it compiled."""
    from .codegen import native
    parts = driver_parts(cm, feeds)
    mine = [parts[i] for i in _share(parts, jobs)[k]]
    if sync is not None and jobs > 1 and not _library_warm(parts):
        _kernels_first(mine, k, jobs, Path(sync))
    for mod, part, sig in mine:
        native.compile_part(mod, part, sig)  # writes the call sites' record beside it
    return len(mine)


def _library_warm(parts: list) -> bool:
    """Whether every library entry known for the kernels the drivers name (jitort's list and
    the cache's records) is in Numba's cache: then the drivers are typed straight away (typing
    them twice would cost more than what is left to compile)."""
    import inspect
    import re
    from . import library
    names = set()
    for mod, part, _ in parts:
        src = inspect.getsource(getattr(mod, part).py_func)
        for alias, k in set(re.findall(r"_nc\((\w+)\.(\w+),", src)):
            disp = getattr(mod, alias).__dict__.get(k)
            fwd = library.forward(disp) if disp is not None else None
            fn = (fwd[0] if fwd else disp).py_func
            names.add(f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}")
    if not names:
        return True
    es = [e for e in library.entries() if e.kernel in names]
    return {e.kernel for e in es} >= names and all(library.is_cached(e) for e in es)


def _kernels_first(mine: list, k: int, jobs: int, sync: Path) -> None:
    """Compile the library entries the program's drivers need and the cache lacks, split
    between the ``jobs`` compile processes, before any process types a driver (which would
    compile the kernels it calls one after the other, and in every process that calls them).

    Each process types its own driver functions without compiling kernels
    (:func:`~jitort.codegen.native.infer_records`) and writes the uncached entries to
    ``sync/need-k``; when all have (nobody compiles before that, so every process sees the
    same list) each compiles its share (:func:`jitort.library.split`, deterministic) and
    writes ``sync/done-k``; drivers wait for every ``done``. A process that fails still
    writes its files; waits end after ``_SYNC_WAIT_S`` (then the drivers compile what is
    missing themselves)."""
    from . import library
    from .codegen import native
    need: set = set()
    try:  # best effort: whatever fails here, the drivers' typing compiles it
        for mod, part, sig in mine:
            for rec in native.infer_records(mod, part, sig).values():
                e = library.from_record(*rec)
                if e is not None and not library.is_cached(e):
                    need.add(e.text())
    except Exception as e:  # noqa: BLE001
        log.warning("typing the drivers for their kernels failed: %s", e)
    _sync_write(sync / f"need-{k}", "\n".join(sorted(need)))
    try:
        _sync_wait(sync, "need", jobs)
        union = set()
        for j in range(jobs):
            path = sync / f"need-{j}"
            if path.exists():
                union |= {ln for ln in path.read_text().splitlines() if ln}
        todo = [library.Entry.parse(t) for t in sorted(union)]
        for e in library.split(todo, jobs)[k] if todo else []:
            library.compile_entry(e)
    except Exception as e:  # noqa: BLE001
        log.warning("compiling the library kernels first failed: %s", e)
    finally:
        _sync_write(sync / f"done-{k}", "")
    _sync_wait(sync, "done", jobs)


#: how long a compile process waits for its siblings at a step of :func:`_kernels_first`
_SYNC_WAIT_S = 900.0


def _sync_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _sync_wait(sync: Path, step: str, jobs: int) -> None:
    end = time.monotonic() + _SYNC_WAIT_S
    while time.monotonic() < end:
        if all((sync / f"{step}-{j}").exists() for j in range(jobs)):
            return
        time.sleep(0.05)
    log.warning("compile processes: gave up waiting for the others at %r", step)


def _share(parts: list, jobs: int) -> list[list[int]]:
    """Driver functions per process, longest first onto the least loaded process: Numba's time
    grows with a function's statements (every process computes the same split)."""
    import inspect
    cost = []
    for mod, part, _ in parts:
        try:
            cost.append(len(inspect.getsource(getattr(mod, part).py_func).splitlines()))
        except (OSError, TypeError):
            cost.append(1)
    load, share = [0] * jobs, [[] for _ in range(jobs)]
    for i in sorted(range(len(parts)), key=lambda i: (-cost[i], i)):
        j = min(range(jobs), key=lambda j: (load[j], j))
        load[j] += cost[i]
        share[j].append(i)
    return [sorted(s) for s in share]


def _child(k: int, jobs: int, logpath: str) -> int:
    try:  # background work: the caller's interpreter-tier calls come first
        os.nice(10)
    except (AttributeError, OSError):  # pragma: no cover - no nice here
        pass
    job = pickle.loads(sys.stdin.buffer.read())
    import jitort
    cm = jitort.compile(job["source"], device=job["device"], **job["options"])
    compile_share(cm, job["feeds"], k, jobs, job.get("sync"))
    try:
        os.unlink(logpath)  # done: nothing to report (the parent may be gone)
    except FileNotFoundError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(_child(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))

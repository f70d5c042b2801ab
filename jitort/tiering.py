"""Tiered execution: a first result in seconds, the compiled program when it is ready.

Compiling a model's generated code with Numba takes seconds to minutes on a cold machine (the
kernel library too when its cache is empty). A tiered :class:`~jitort.CompiledModel` does not
make its caller wait for that:

* **Tier 0** runs the optimized graph in the numpy interpreter (:mod:`jitort.interpreter`, with
  its im2col/window paths for convolutions and pools): no model-specific compilation at all.
* On the first call (at ``compile()`` already when every input shape is fixed) the compiled
  program runs once in *probe* mode (``execute_compiled(..., only_cached=True)``), in the
  calling thread: each segment's plan is made (cheap) and run when its driver is in Numba's
  on-disk cache. A warm cache thus switches at once (the call returns the compiled program's
  result, after about a second of loading).
* At the first driver that is not cached the probe stops and the model's compile is queued on
  the process-wide :data:`jitort.compile_queue.QUEUE`, which keeps at most
  ``JITORT_COMPILE_JOBS`` compile processes alive whatever the number of models; meanwhile
  calls run on tier 0. When its turn comes the job probes the cache again (another model may
  have compiled the same generated code meanwhile), else starts **separate processes**
  (``python -m jitort.tiering K JOBS LOG``, the job on stdin) that compile the program for those
  inputs, each a share of the driver functions, writing the generated modules and Numba's
  machine code into the cache (Numba compiles holding the GIL, so a thread would stall the
  callers). The model then loads the program from the cache, runs it once on the same inputs,
  and **switches** to it: a call reads the tier once when it starts, so every call runs wholly
  on one tier, also with other threads calling.

A compile process outlives its parent if the parent exits first, so that the next process
finds the cache warm (Numba writes its index and data files by atomic rename: a process killed
at any point leaves no damaged entry). A compilation that fails leaves the model on tier 0 and
warns (:class:`TieringWarning`) on the next call or :meth:`~jitort.CompiledModel.wait_compiled`.

The model is reached through the executor's public surface only (:mod:`jitort.executor`).
Turn tiering off with ``compile(model, tiered=False)`` or ``JITORT_TIERED=0``; profiled models
and models that the interpreter cannot run whole are never tiered.
"""
from __future__ import annotations

import importlib
import inspect
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

import numba
import numpy as np

from . import library, options, serialize
from .codegen import module as modmgr
from .codegen import native
from .codegen.assembly import driver_kernels
from .codegen.emitter import aligned_empty
from .compile_queue import QUEUE, compile_jobs  # noqa: F401  (compile_jobs: this module's API)
from .errors import JitortError
from .executor import NotCached
from .feeds import storage_views
from .interpreter import make_runner, node_inputs
from .pinning import interpreter_blas

log = logging.getLogger("jitort.tiering")

#: environment variable: ``0`` turns tiering off by default (``compile(tiered=...)`` overrides)
ENV = "JITORT_TIERED"


class TieringWarning(UserWarning):
    """The background compilation failed: the model keeps running on the interpreter tier."""


def enabled_by_default() -> bool:
    return options.read("tiered")


class Tiering:
    """The interpreter tier of one model and the background switch to its compiled tier.

    ``executor``: the model (:class:`jitort.executor.Executor`, with the session's
    ``input_names``); ``on_switch``: called once calls are to run compiled.
    """

    def __init__(self, executor, on_switch=None):
        self.executor = executor
        self._on_switch = on_switch
        g = executor.graph
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
        #: "interpreter" -> "queued" -> "compiling" -> "compiled" | "failed"
        self.state = "interpreter"
        self.error: BaseException | None = None
        self._warned = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.started = False   # the background was started (or everything was cached)
        self.starting = False  # a first call has begun probing the cache
        #: whether the background needed a compile process (False: everything was cached)
        self.compiled_in_child: bool | None = None
        #: the compile processes of the job once it runs (tests kill them)
        self.children: list[subprocess.Popen] = []
        self._feeds: dict | None = None  # what the background compiles for
        self._environ: dict | None = None  # the compile processes' environment (at submit)
        self._work: Path | None = None  # their folder under the cache directory (at submit)

    # --- tier 0 ----------------------------------------------------------------------------
    def call(self, feeds: dict, output_names) -> list[np.ndarray]:
        ex = self.executor
        arrays = ex.validate(feeds)
        if not self.started:
            outs = self.start(arrays, output_names)
            if outs is not None:  # everything was cached: this call ran compiled
                return outs
        elif self.state == "failed":
            self._warn_once()
        env = dict(zip(ex.input_ids, arrays))
        with interpreter_blas:
            self.interpret(env)
        return ex.collect(env, output_names, fresh=False)

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
        switch now and return the compiled program's outputs. Otherwise queue the background
        compile and return None (once per model)."""
        with self._lock:
            if self.started:
                return None
            self.starting = True
            feeds = dict(zip(self.executor.input_names, arrays))
            outs = self._run_if_cached(feeds, output_names)
            if outs is not None:
                self.compiled_in_child = False
                self.started = True
                self._switch()
                self._done.set()
                return outs
            want = compile_jobs()  # a bad JITORT_COMPILE_JOBS raises here, nothing queued
            self._feeds = {n: np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                           for n, a in feeds.items()}
            self._environ = options.child_environ(**{ENV: "0"})
            self._work = modmgr.cache_dir() / "tiering"
            self.compiled_in_child = True
            self.state = "queued"  # before submit: the job may run (and move it on) at once
            self.started = True
            QUEUE.submit(self, want)
            return None

    def _run_if_cached(self, feeds: dict, output_names=None) -> list | None:
        """The compiled program's outputs when every driver it needs is cached, else None."""
        try:
            return self.executor.execute_compiled(feeds, output_names, only_cached=True)
        except NotCached:
            return None

    def _switch(self) -> None:
        self.state = "compiled"
        if self._on_switch is not None:
            self._on_switch()

    def compile_now(self, lease) -> None:
        """The queue's turn (a worker thread): switch at once if the cache has everything now
        (another model compiled the same generated code), else compile in at most
        ``lease.slots`` processes, every one of which has exited when this returns."""
        if self._run_if_cached(self._feeds) is not None:
            self.compiled_in_child = False
            self._switch()
            return
        self.state = "compiling"
        _, (source, options, device) = serialize.reduce(self.executor)
        options = dict(options, tiered=False, example_shapes=None, profile=False)
        job = {"source": source, "options": options, "device": device, "feeds": self._feeds}
        run_compile_processes(job, lease.slots, self._environ, self._work, lease=lease,
                              children=self.children)

    def compiled(self, error: BaseException | None) -> None:
        """After :meth:`compile_now` (``error``: what it raised): load the program from the
        cache, run it once and switch; on any failure stay on tier 0 and report it."""
        try:
            if error is not None:
                raise error
            if self.state != "compiled":
                self.executor.execute_compiled(self._feeds)  # from the cache now: loads, runs
                self._switch()
        except BaseException as e:  # noqa: BLE001 - reported to the caller, tier 0 goes on
            self.error = e
            self.state = "failed"
            log.warning("background compilation failed, staying on the interpreter: %s", e)
        finally:
            self._feeds = None
            self._done.set()

    def dropped(self, reason: str, forked: bool = False) -> None:
        """The queue will not run this job: stay on tier 0. ``forked``: in a forked child,
        whose copies of this object's locks may be held by threads that do not exist here."""
        if forked:
            self._lock._at_fork_reinit()
            self._done._at_fork_reinit()
        self.error = JitortError(f"the background compile did not run: {reason}")
        self.state = "failed"
        self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the compiled tier runs (True) or the background failed (False, with a
        :class:`TieringWarning`); ``timeout`` seconds at most (then False)."""
        if not self.started and self.starting:  # a first call is probing the cache
            with self._lock:
                pass
        if not self.started:
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


# --- the compile processes -------------------------------------------------------------------
def run_compile_processes(job: dict, jobs: int, environ: dict | None = None,
                          work: Path | None = None, *, lease=None,
                          children: list | None = None) -> None:
    """Compile ``job`` (model source, options, device, feeds) in ``jobs`` child processes into
    the on-disk cache, each taking a share of the driver functions. Returns when every process
    has exited; when one fails the others are stopped and :class:`JitortError` carries the tail
    of its log. ``environ``: the processes' environment; ``work``: the folder of their logs
    and sync files (default: under the cache directory); ``lease`` (:class:`jitort.compile_queue.Lease`): start no process once it has
    closed; ``children``: a list the processes are appended to as they start."""
    environ = options.child_environ(**{ENV: "0"}) if environ is None else environ
    work = modmgr.cache_dir() / "tiering" if work is None else work
    work.mkdir(parents=True, exist_ok=True)
    stem = f"{os.getpid()}-{time.monotonic_ns()}"
    sync = work / f"sync-{stem}"  # the children's steps (library kernels before drivers)
    sync.mkdir()
    # the job goes through each child's stdin (no file to leave behind if this process dies)
    payload = pickle.dumps(dict(job, sync=str(sync)), protocol=pickle.HIGHEST_PROTOCOL)
    logs = [str(work / f"compile-{stem}-{k}.log") for k in range(jobs)]
    procs = [] if children is None else children
    try:
        for k, logpath in enumerate(logs):
            if lease is not None and not lease.open():
                raise JitortError("the process is exiting")
            with open(logpath, "wb") as logf:
                # its own session: a Ctrl-C in the caller's terminal does not kill it half-way,
                # and it finishes filling the cache if the caller exits first
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "jitort.tiering", str(k), str(jobs), logpath],
                    stdin=subprocess.PIPE, stdout=logf, stderr=logf, env=environ,
                    start_new_session=True))
        for p in procs:
            _send(p, payload)
        failed = _wait_all(procs)
        if failed is not None:
            k, rc = failed
            tail = Path(logs[k]).read_text(errors="replace")[-2000:]
            raise JitortError(f"the compile process exited with status {rc}: {tail.strip()}")
    finally:
        for p in procs:  # a start that failed half-way: the others read EOF and exit
            _send(p, b"")
            p.wait()
        for path in logs:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        shutil.rmtree(sync, ignore_errors=True)


def _send(p: subprocess.Popen, payload: bytes) -> None:
    if p.stdin is None or p.stdin.closed:
        return
    try:
        if payload:
            p.stdin.write(payload)
        p.stdin.close()
    except BrokenPipeError:  # it died already: its exit status tells
        pass


def _wait_all(procs: list) -> tuple[int, int] | None:
    """Wait for every process; the first that fails (index, status) stops the others, whose
    share would be useless (or wait for the failed one at a sync step)."""
    while True:
        codes = [p.poll() for p in procs]
        bad = [(k, rc) for k, rc in enumerate(codes) if rc not in (None, 0)]
        if bad:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            return bad[0]
        if all(rc is not None for rc in codes):
            return None
        time.sleep(0.05)


def driver_parts(cm, feeds: dict) -> list:
    """Plan every segment of ``cm`` for ``feeds`` (the interpreter gives the values between
    segments): ``(module, driver function name, argument types)`` of each driver function,
    for the exact argument types a call passes."""
    env = dict(zip(cm.input_ids, cm.validate(feeds)))
    compiled = cm.compiled_segments()
    segs = [seg for seg, _ in compiled]
    # the values a segment's plan and call read; when the inputs are all of them (a wholly
    # compiled model) nothing is interpreted (bert, resnet18: 0.4-1.7 s of a compile process)
    need = {id(v) for seg in segs for v in [*seg.inputs, *seg.value_inputs]}
    need.update(i for seg in segs for i in seg.arg_ids)
    if not need <= env.keys():
        Tiering(cm).interpret(env, free=False)
    parts = []
    for seg, compiler in compiled:
        plan = compiler.plan(env)
        cb = compiler.consts.materialize()
        outs = [np.empty(sh, dt) for sh, dt in zip(plan.out_shapes, seg.output_dtypes)]
        args = [aligned_empty(max(plan.ws_bytes, 64)), cb, plan.d,
                np.zeros(max(plan.n_sites, 1), np.int64), *plan.pb,
                *storage_views([env[i] for i in seg.arg_ids]), *storage_views(outs)]
        sig = tuple(numba.typeof(a) for a in args)
        mod = native.driver_module(plan)
        parts += [(mod, p, sig) for p in native.part_names(mod)]
    return parts


def _compile_dynamic_kernels(cm, feeds: dict) -> None:
    """Run the program's dynamic steps (jitort/dynamic_ops.py) once on the interpreter's
    values, so that their kernels compile into the cache in a compile process rather than in
    the parent when it switches."""
    flows = cm.dynamic_flows()
    if not flows:
        return
    env = Tiering(cm).interpret(dict(zip(cm.input_ids, cm.validate(feeds))), free=False)
    for node, flow in flows:
        flow(node_inputs(node, env))


def compile_share(cm, feeds: dict, k: int, jobs: int, sync: str | None = None) -> int:
    """In a compile process: plan every segment for ``feeds`` and compile this process's share
    of the driver functions (:func:`_share`). With ``sync`` (a folder shared by the ``jobs``
    processes) the library kernels the drivers call and the cache lacks are compiled first,
    shared out between the processes (:func:`_kernels_first`). Returns how many driver
    functions it compiled."""
    parts = driver_parts(cm, feeds)
    if k == 0:
        _compile_dynamic_kernels(cm, feeds)
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
    names = set()
    for mod in {id(m): m for m, _, _ in parts}.values():
        for m, k in driver_kernels(mod):
            disp = getattr(importlib.import_module(f"jitort.kernels.cpu.{m}"), k)
            fwd = library.forward(disp)
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
    cm = serialize.rebuild(job["source"], job["options"], job["device"])
    compile_share(cm, job["feeds"], k, jobs, job.get("sync"))
    try:
        os.unlink(logpath)  # done: nothing to report (the parent may be gone)
    except FileNotFoundError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(_child(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))

"""A pool of spinning workers under Numba's ``prange`` regions.

Numba's TBB layer builds a ``task_arena`` (and an observer) for every ``parallel_for`` call: the
second thread joins each region late, and a region costs 8-10 us more than running its work on
one thread (``scripts/sweeps/bench_parallel_launch.py``). A model's small layers (a depthwise
convolution on a 7x7 plane, a pool, a squeeze-excite chain) take 5-30 us each, so at two
threads they ran no faster, or slower, than at one. GNU OpenMP's regions cost 1-3 us, but it
kills a forked child at its first region.

This module replaces the two entry points that compiled ``prange`` code calls,
``numba_parallel_for`` and ``get_thread_id`` (the symbols Numba's ``_launch_threads``
registers), with its own, compiled here from LLVM IR by Numba's code generator:

- ``NUMBA_NUM_THREADS - 1`` worker threads wait in a compiled loop (no GIL). A region publishes
  its job (the gufunc, its arguments, the number of schedule chunks) under a new *epoch*; the
  calling thread and the workers claim chunks with compare-and-swap on per-chunk flags, each
  first from its own share (chunk i to thread i, as TBB tends to), then the others'. The caller
  runs every chunk no worker has claimed, then waits for the claimed ones: a worker that is
  late (asleep, descheduled) costs nothing but its share of the parallelism.
- A worker spins for 100 us after its last chunk (env ``JITORT_SPIN_US``: consecutive layers
  of a model find it awake), polling the epoch with one ``pause`` per SPIN_POLLS polls, and
  then sleeps on a futex; the next region wakes it with one system call and does not wait.
- Regions from a second thread while one runs, nested regions and one-chunk regions run their
  chunks on the calling thread. ``get_thread_id`` is the worker's number on a worker and 0
  elsewhere (the reductions Numba compiles index their partial sums by it).
- A forked child gets a fresh pool (``os.register_at_fork``).
- Workers are bound to CPUs of their own when the pool covers the process's CPUs
  (:func:`placement`, ``JITORT_PIN_WORKERS``).

``JITORT_THREAD_POOL=0`` keeps Numba's own layer. Only on Linux (futex) on x86-64 / aarch64.
Code compiled or loaded before :func:`install` keeps the symbols it was linked with, so the
package installs it on import, before any kernel is loaded.
"""
import os
import platform
import sys
import threading

import numpy as np
from llvmlite import binding as ll
from llvmlite import ir
from numba.core import cgutils

# int64 slots of the shared state, one cache line per group written by different threads
EPOCH = 0          # job number << 8 | its chunk count, published last (the workers poll it)
BUSY = 8           # 1 while a region owns the pool
DONE = 16          # chunks of the current job finished
PARKED = 24        # workers asleep on WAKE
WAKE = 32          # futex word (its low 32 bits)
FN, ARGS, DIMS, STEPS, DATA, INNER, ACOUNT, NSCHED = 40, 41, 42, 43, 44, 45, 46, 47
NWORK = 48         # threads taking part in the current job (caller included)
NWORKERS = 56      # workers started
SPIN_NS = 57
STARTED = 59       # workers that have stored their thread id
SLEEPS = 60        # times a worker went to sleep (diagnostics)
TID = 64           # TID + k: pthread_self of worker k (1-based)
MAX_WORKERS = 63
FLAGS = 128        # FLAGS + i: the epoch that claimed chunk i
MAX_CHUNKS = 128   # < 256: the epoch word's low byte (more schedule entries: grouped)
NSLOTS = FLAGS + MAX_CHUNKS
# a chunk call's copies of the gufunc's argument pointers and dimensions (on the stack; more:
# the caller runs the region alone). The dimensions are every argument's shape, one after
# another: a parfor over 13 arrays of rank 2-4 passes 33.
MAX_ARRAYS = 1024
MAX_DIMS = 1024

_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # the _PRIVATE variants
#: polls of the epoch between two ``pause`` instructions of a spinning worker. Under KVM a
#: vCPU that executes pause after pause (less than ~128 cycles apart, a few thousand times)
#: is taken for a lock waiter and descheduled (pause-loop exiting): on the 2-vCPU VM of
#: issue 21 a worker pausing every poll lost its CPU for ~1 ms at a time, went to sleep 111
#: times in a block of 500 back-to-back calls and the block ran at its 1-thread time. With no
#: pause at all two 4 us tasks took 8.3 us at 2 threads (7.6 at 1): pause lets the sibling
#: hyperthread run. Polls between pauses keep both.
SPIN_POLLS = 128
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_STATE_SYMBOL = "jitort_pool_state"

_i64 = ir.IntType(64)
_i32 = ir.IntType(32)
_i8p = ir.IntType(8).as_pointer()
_void = ir.VoidType()
# a parfor's gufunc: fn(char **args, intp *dims, intp *steps, void *data)
_GUFUNC = ir.FunctionType(_void, [_i8p.as_pointer(), _i64.as_pointer(), _i64.as_pointer(), _i8p])


def _c(v):
    return v if isinstance(v, ir.Value) else ir.Constant(_i64, v)


class _Gen:
    """Builds the pool's functions into one LLVM module. The state is the external symbol
    ``jitort_pool_state`` (resolved at load, :func:`install`), so that the module's text, and
    with it the machine code cached by :func:`_compile`, does not depend on where this process
    allocated the state."""

    def __init__(self, machine: str):
        self.mod = ir.Module("jitort_workers")
        state = ir.GlobalVariable(self.mod, ir.ArrayType(_i64, NSLOTS), _STATE_SYMBOL)
        state.linkage = "external"
        self.base = state.ptrtoint(_i64)
        # ``pause`` in spin loops (JITORT_SPIN_PAUSE=0: none), one per SPIN_POLLS polls
        self.x86 = machine in ("x86_64", "amd64") and os.environ.get("JITORT_SPIN_PAUSE") != "0"
        self.futex_nr = _SYS_FUTEX[machine]

    def fn(self, name, ret, args, internal=True):
        f = ir.Function(self.mod, ir.FunctionType(ret, args), name)
        if internal:
            f.linkage = "internal"
        return f, ir.IRBuilder(f.append_basic_block("entry"))

    def ext(self, name, ret, args, var_arg=False):
        return cgutils.get_or_insert_function(self.mod, ir.FunctionType(ret, args, var_arg=var_arg),
                                              name)

    # --- the state ---------------------------------------------------------------------------
    def slot(self, b, i):
        return b.inttoptr(b.add(self.base, b.mul(_c(i), _c(8))), _i64.as_pointer())

    def ld(self, b, i):
        return b.load_atomic(self.slot(b, i), "seq_cst", 8)

    def st(self, b, i, v):
        b.store_atomic(_c(v), self.slot(b, i), "seq_cst", 8)

    def faa(self, b, i, v):
        return b.atomic_rmw("add", self.slot(b, i), _c(v), "seq_cst")

    # --- system calls ------------------------------------------------------------------------
    def pause(self, b):
        if self.x86:
            b.call(self.ext("llvm.x86.sse2.pause", _void, []), [])

    def now_ns(self, b, ts):
        b.call(self.ext("clock_gettime", _i32, [_i32, _i8p]), [ir.Constant(_i32, 1),
                                                                b.bitcast(ts, _i8p)])
        sec = b.load(b.gep(ts, [ir.Constant(_i32, 0), ir.Constant(_i32, 0)]))
        nsec = b.load(b.gep(ts, [ir.Constant(_i32, 0), ir.Constant(_i32, 1)]))
        return b.add(b.mul(sec, _c(1_000_000_000)), nsec)

    def futex(self, b, op, val):
        """futex(&state[WAKE], op, val): FUTEX_WAIT while the word is val / FUTEX_WAKE val."""
        f = self.ext("syscall", _i64, [_i64], var_arg=True)
        null = ir.Constant(_i8p, None)
        b.call(f, [_c(self.futex_nr), b.bitcast(self.slot(b, WAKE), _i8p), ir.Constant(_i32, op),
                   b.trunc(_c(val), _i32), null, null, ir.Constant(_i32, 0)])

    def self_id(self, b):
        return b.call(self.ext("pthread_self", _i64, []), [])

    # --- functions ---------------------------------------------------------------------------
    def call_chunk(self):
        """call_chunk(fn, args, dims, steps, data, inner, acount, begin, count): the gufunc on
        schedule entries [begin, begin + count), as Numba's layers call it (pointers moved by
        begin * steps, dims[0] = count)."""
        f, b = self.fn("call_chunk", _void, [_i64] * 9)
        fn, args, dims, steps, data, inner, acount, begin, count = f.args
        pa = cgutils.alloca_once(b, _i8p, size=_c(MAX_ARRAYS))
        pd = cgutils.alloca_once(b, _i64, size=_c(MAX_DIMS))
        src_a = b.inttoptr(args, _i8p.as_pointer())
        src_d = b.inttoptr(dims, _i64.as_pointer())
        src_s = b.inttoptr(steps, _i64.as_pointer())
        with cgutils.for_range(b, b.add(inner, _c(1))) as loop:
            b.store(b.load(b.gep(src_d, [loop.index])), b.gep(pd, [loop.index]))
        b.store(count, pd)
        with cgutils.for_range(b, acount) as loop:
            j = loop.index
            off = b.mul(b.load(b.gep(src_s, [j])), begin)
            b.store(b.gep(b.load(b.gep(src_a, [j])), [off]), b.gep(pa, [j]))
        b.call(b.inttoptr(fn, _GUFUNC.as_pointer()), [pa, pd, src_s, b.inttoptr(data, _i8p)])
        b.ret_void()
        return f

    def work(self, call_chunk):
        """work(t, e): thread t runs the chunks of job e (the epoch word) it can claim, its own
        share first (the t-th of the NWORK contiguous ranges), then the others' in turn.

        The fields it reads may already belong to a later job when job e is over (the caller
        rewrites them once every chunk of e is done), but then every chunk of e is claimed
        and no claim succeeds: a successful claim of a chunk of e (their count comes with the
        epoch word, never from the fields) proves the fields were not yet rewritten."""
        f, b = self.fn("work", _void, [_i64, _i64])
        t, e = f.args
        n = b.and_(e, _c(255))
        fields = [self.ld(b, i) for i in (FN, ARGS, DIMS, STEPS, DATA, INNER, ACOUNT)]
        nsched, nw = self.ld(b, NSCHED), self.ld(b, NWORK)
        with b.if_then(b.icmp_signed("<", t, nw)):
            first = b.udiv(b.mul(t, n), nw)
            with cgutils.for_range(b, n) as loop:
                c = b.urem(b.add(first, loop.index), n)
                flag = self.slot(b, b.add(c, _c(FLAGS)))
                old = b.load_atomic(flag, "seq_cst", 8)
                with b.if_then(b.icmp_signed("<", old, e)):
                    won = b.extract_value(b.cmpxchg(flag, old, e, "seq_cst", "seq_cst"), 1)
                    with b.if_then(won):
                        lo = b.udiv(b.mul(c, nsched), n)
                        hi = b.udiv(b.mul(b.add(c, _c(1)), nsched), n)
                        b.call(call_chunk, fields + [lo, b.sub(hi, lo)])
                        self.faa(b, DONE, 1)
        b.ret_void()
        return f

    def parallel_for(self, work):
        """jitort_parallel_for: Numba's ``numba_parallel_for`` on the pool. A region that has
        one chunk or one thread, or finds the pool owned (a second caller, a nested region),
        or passes more arrays / dimensions than a chunk call copies, runs on its caller."""
        f, b = self.fn("jitort_parallel_for", _void, [_i64] * 7 + [_i32], internal=False)
        fn, args, dims, steps, data, inner, acount, nthreads = f.args
        inline, trylock, run = (f.append_basic_block(s) for s in ("inline", "try", "run"))
        nsched = b.load(b.inttoptr(dims, _i64.as_pointer()))
        n = _min(b, nsched, _c(MAX_CHUNKS))
        nw = _min(b, _min(b, b.sext(nthreads, _i64), b.add(self.ld(b, NWORKERS), _c(1))), n)
        alone = b.or_(b.icmp_signed("<=", nw, _c(1)),
                      b.or_(b.icmp_signed(">", acount, _c(MAX_ARRAYS)),
                            b.icmp_signed(">=", inner, _c(MAX_DIMS))))
        b.cbranch(alone, inline, trylock)
        b.position_at_end(trylock)
        got = b.extract_value(b.cmpxchg(self.slot(b, BUSY), _c(0), _c(1), "seq_cst", "seq_cst"),
                              1)
        b.cbranch(got, run, inline)
        b.position_at_end(inline)
        ptrs = [b.inttoptr(x, ty) for x, ty in zip((fn, args, dims, steps, data),
                                                   (_GUFUNC.as_pointer(),) + _GUFUNC.args)]
        b.call(ptrs[0], ptrs[1:])
        b.ret_void()
        b.position_at_end(run)
        for i, v in ((FN, fn), (ARGS, args), (DIMS, dims), (STEPS, steps), (DATA, data),
                     (INNER, inner), (ACOUNT, acount), (NSCHED, nsched), (NWORK, nw), (DONE, 0)):
            self.st(b, i, v)
        e = b.or_(b.shl(b.add(b.lshr(self.ld(b, EPOCH), _c(8)), _c(1)), _c(8)), n)
        self.st(b, EPOCH, e)
        with b.if_then(b.icmp_signed(">", self.ld(b, PARKED), _c(0))):
            self.faa(b, WAKE, 1)
            self.futex(b, _FUTEX_WAKE, 1 << 30)
        b.call(work, [_c(0), e])
        wait, spin, done = (f.append_basic_block(s) for s in ("wait", "spin", "done"))
        spins = cgutils.alloca_once_value(b, _c(0))
        b.branch(wait)
        b.position_at_end(wait)
        b.cbranch(b.icmp_signed("<", self.ld(b, DONE), n), spin, done)
        b.position_at_end(spin)
        self.pause(b)
        k = b.add(b.load(spins), _c(1))
        b.store(k, spins)
        with b.if_then(b.icmp_signed(">", k, _c(4000))):  # the worker is not running: let it
            b.call(self.ext("sched_yield", _i32, []), [])
        b.branch(wait)
        b.position_at_end(done)
        self.st(b, BUSY, 0)
        b.ret_void()
        return f

    def get_thread_id(self):
        """jitort_get_thread_id: k on worker k, 0 on any other thread (a region's caller, or a
        thread running a region alone)."""
        f, b = self.fn("jitort_get_thread_id", _i32, [], internal=False)
        me = self.self_id(b)
        nwk = self.ld(b, NWORKERS)
        loop, body, found, none = (f.append_basic_block(s)
                                   for s in ("loop", "body", "found", "none"))
        entry = b.block
        b.branch(loop)
        b.position_at_end(loop)
        k = b.phi(_i64)
        k.add_incoming(_c(1), entry)
        b.cbranch(b.icmp_signed("<=", k, nwk), body, none)
        b.position_at_end(body)
        k.add_incoming(b.add(k, _c(1)), body)
        b.cbranch(b.icmp_signed("==", self.ld(b, b.add(k, _c(TID))), me), found, loop)
        b.position_at_end(found)
        b.ret(b.trunc(k, _i32))
        b.position_at_end(none)
        b.ret(ir.Constant(_i32, 0))
        return f

    def worker(self, work):
        """jitort_worker(k): worker k's loop. Runs each new job's chunks; spins for SPIN_NS
        after the last, then sleeps on the futex until a region wakes it. Never returns."""
        f, b = self.fn("jitort_worker", _void, [_i64], internal=False)
        (k,) = f.args
        ts = cgutils.alloca_once(b, ir.ArrayType(_i64, 2))
        self.st(b, b.add(k, _c(TID)), self.self_id(b))
        self.faa(b, STARTED, 1)
        seen = cgutils.alloca_once_value(b, self.ld(b, EPOCH))
        since = cgutils.alloca_once_value(b, self.now_ns(b, ts))
        spins = cgutils.alloca_once_value(b, _c(0))
        loop, job, idle, check, park, sleep, awake = (
            f.append_basic_block(s) for s in ("loop", "job", "idle", "check", "park", "sleep",
                                              "awake"))
        b.branch(loop)
        b.position_at_end(loop)
        e = self.ld(b, EPOCH)
        b.cbranch(b.icmp_signed("!=", e, b.load(seen)), job, idle)
        b.position_at_end(job)
        b.store(e, seen)
        b.call(work, [k, e])
        b.store(self.now_ns(b, ts), since)
        b.store(_c(0), spins)
        b.branch(loop)
        b.position_at_end(idle)
        poll, polled, rest = (f.append_basic_block(s) for s in ("poll", "polled", "rest"))
        polls = cgutils.alloca_once_value(b, _c(0))
        b.store(_c(0), polls)
        b.branch(poll)
        b.position_at_end(poll)
        b.cbranch(b.icmp_signed("!=", self.ld(b, EPOCH), b.load(seen)), loop, polled)
        b.position_at_end(polled)
        i = b.add(b.load(polls), _c(1))
        b.store(i, polls)
        b.cbranch(b.icmp_signed("<", i, _c(SPIN_POLLS)), poll, rest)
        b.position_at_end(rest)
        self.pause(b)
        s = b.add(b.load(spins), _c(1))
        b.store(s, spins)
        b.cbranch(b.icmp_signed("==", b.and_(s, _c(255)), _c(0)), check, loop)
        b.position_at_end(check)
        late = b.sub(self.now_ns(b, ts), b.load(since))
        b.cbranch(b.icmp_signed(">", late, self.ld(b, SPIN_NS)), park, loop)
        b.position_at_end(park)
        w = self.ld(b, WAKE)  # read before counting itself parked: a wake after it changes WAKE
        self.faa(b, PARKED, 1)
        b.cbranch(b.icmp_signed("==", self.ld(b, EPOCH), b.load(seen)), sleep, awake)
        b.position_at_end(sleep)
        self.faa(b, SLEEPS, 1)
        self.futex(b, _FUTEX_WAIT, b.and_(w, _c(0xFFFFFFFF)))
        b.branch(awake)
        b.position_at_end(awake)
        self.faa(b, PARKED, -1)
        b.store(self.now_ns(b, ts), since)
        b.store(_c(0), spins)
        b.branch(loop)
        return f

    def build(self):
        call_chunk = self.call_chunk()
        work = self.work(call_chunk)
        self.parallel_for(work)
        self.get_thread_id()
        self.worker(work)
        return self.mod


def _min(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


_state = None
_entry = None  # (parallel_for, get_thread_id, worker) addresses
_lib = None    # keeps the compiled code alive


def _compile(machine: str):
    """The pool's functions, compiled by Numba's code generator (optimized, in its engine).

    Optimizing and emitting them costs more than a cached program's whole first call (about
    0.14 s), so the machine code is cached on disk (:func:`_cached_library`)."""
    global _lib
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target
    mod = _Gen(machine).build()
    with global_compiler_lock:
        codegen = cpu_target.target_context.codegen()
        lib = _cached_library(codegen, mod)
        _lib = lib
        return tuple(lib.get_pointer_to_function(n) for n in
                     ("jitort_parallel_for", "jitort_get_thread_id", "jitort_worker"))


def _cached_library(codegen, mod):
    """A finalized code library of the LLVM module ``mod``: its object code loaded from
    ``<kernel cache root>/workers/<key>.pkl`` when there, else compiled and written there.

    The key hashes the module text (which holds every option the code depends on), Numba's
    code generator's own cache key (target triple, CPU name and features) and the versions of
    Numba and llvmlite: any change compiles anew. A damaged or unreadable entry is compiled
    again; a cache that cannot be written only costs the compile."""
    import hashlib
    import pickle
    import tempfile

    import llvmlite
    import numba

    from .._cache import cache_root
    text = str(mod)
    key = hashlib.sha256(repr((codegen.magic_tuple(), numba.__version__, llvmlite.__version__,
                               text)).encode()).hexdigest()[:32]
    path = cache_root() / "workers" / f"{key}.pkl"
    try:
        with open(path, "rb") as f:
            return codegen.unserialize_library(pickle.load(f))
    except Exception:  # absent or damaged: compile
        pass
    lib = codegen.create_library("jitort_workers")
    lib.enable_object_caching()
    lib.add_ir_module(mod)
    lib.finalize()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pkl")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(lib.serialize_using_object_code(), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # atomic: a concurrent reader sees no half-written entry
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return lib


def placement(n: int) -> dict:
    """The CPU each worker 1..n is bound to: {} when unbound. ``JITORT_PIN_WORKERS``: ``0``
    never, ``1`` always, ``auto`` (default) when the pool and the calling thread are exactly
    the CPUs this process may run on (a process that owns its cores; several jitort
    processes sharing cores, each with fewer threads, stay unbound). Worker k takes the k-th
    allowed CPU; the calling thread is left where the program put it.

    Why: after an idle gap (a server between requests, an engine alternating with another),
    Linux wakes a sleeping worker on the CPU of the thread that woke it (wake-affine), and
    the two then share one core until the load balancer moves one, for several calls
    (figures: docs/calibration.md)."""
    mode = os.environ.get("JITORT_PIN_WORKERS", "auto").strip().lower()
    if mode in ("0", "off", "no", "false") or n <= 0:
        return {}
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return {}
    if mode == "auto" and len(cpus) != n + 1:
        return {}
    return {k: cpus[k % len(cpus)] for k in range(1, n + 1)}


def _start_workers(n):
    import ctypes
    run = ctypes.CFUNCTYPE(None, ctypes.c_int64)(_entry[2])  # ctypes drops the GIL for it
    where = placement(n)

    def body(k):
        if k in where:
            try:
                os.sched_setaffinity(0, {where[k]})   # this thread only (Linux)
            except OSError:
                pass
        run(k)
    _state[STARTED] = 0
    for k in range(1, n + 1):
        _state[TID + k] = 0
        threading.Thread(target=body, args=(k,), daemon=True, name=f"jitort-worker-{k}").start()
    _state[NWORKERS] = n


def _after_fork_child():
    """The child has no workers (only the forking thread survives a fork): a fresh pool."""
    for i in (BUSY, DONE, PARKED, NWORKERS, STARTED):
        _state[i] = 0
    _start_workers(_pool_size())


def _pool_size():
    import numba
    return min(MAX_WORKERS, max(0, numba.config.NUMBA_NUM_THREADS - 1))


def enabled() -> bool:
    """Whether the pool can serve this process (env, platform, thread count)."""
    if os.environ.get("JITORT_THREAD_POOL", "1") == "0":
        return False
    if not sys.platform.startswith("linux"):
        return False
    return platform.machine().lower() in _SYS_FUTEX and _pool_size() > 0


def install() -> bool:
    """Compile the pool, register its ``numba_parallel_for`` / ``get_thread_id`` and start its
    workers (once per process; after Numba's threading layer is launched, before any parallel
    code is compiled or loaded). Whether the pool is in use.

    Checked against Numba 0.60-0.68 (``kernels._link.CHECKED``; a warning outside it): the
    symbols ``numba.np.ufunc.parallel._launch_threads`` registers and the gufunc calling
    convention the compiled entry follows are the same throughout."""
    global _state, _entry
    if _entry is not None:
        return True
    if not enabled():
        return False
    from numba.np.ufunc import parallel

    from .._link import check_numba
    check_numba("kernels.cpu.workers' parallel_for")
    if getattr(parallel, "_jitort_workers", None) is not None:  # this module imported twice
        _state, _entry = parallel._jitort_workers
        return True
    parallel._launch_threads()
    raw = np.zeros(NSLOTS + 8, dtype=np.int64)
    off = (-raw.ctypes.data % 64) // 8
    _state = raw[off:off + NSLOTS]
    _state[SPIN_NS] = int(float(os.environ.get("JITORT_SPIN_US", "100")) * 1000)
    ll.add_symbol(_STATE_SYMBOL, _state.ctypes.data)  # before the code is linked
    _entry = _compile(platform.machine().lower())
    ll.add_symbol("numba_parallel_for", _entry[0])
    ll.add_symbol("get_thread_id", _entry[1])
    parallel._jitort_workers = (_state, _entry)
    _start_workers(_pool_size())
    os.register_at_fork(after_in_child=_after_fork_child)
    return True


def installed() -> bool:
    return _entry is not None


def state() -> np.ndarray | None:
    """The shared state (read-only use: tests, diagnostics)."""
    return _state


__all__ = ["install", "installed", "enabled", "state"]

"""CompiledModel: validate feeds, pick (or compute once) the plan for these shapes, run.

The program is a list of steps in topological order: compiled segments (one generated driver
each, planned per input-shape signature and cached) and interpreter steps between them.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from . import serialize, tiering
from . import shapes as shape_fns
from .codegen import module as modmgr
from .codegen.cpu import CpuBackend, Plan, SegmentCompiler, Unlowerable, aligned_empty
from .errors import ExecutionError, InvalidInput, JitortError, UnsupportedOp
from .importer import import_model
from .interpreter import make_runner, node_inputs
from .ir import Graph, Node, Value
from .partition import HOST, INTERP, InterpStep, Segment, assign, schedule
from .profiling import Profiler, op_label
from .passes import CPU_PIPELINE, PassReport, run_pipeline

log = logging.getLogger("jitort")

#: Plans kept per segment (least recently used evicted first).
PLAN_CACHE_SIZE = 64


@dataclass
class InputInfo:
    """What a graph input expects: name, dtype and shape (ints, symbol names or None)."""

    name: str
    dtype: np.dtype
    shape: tuple

    def __repr__(self) -> str:
        return f"InputInfo({self.name!r}, {np.dtype(self.dtype).name}, {list(self.shape)})"


_MISSING = object()

#: True in a process forked after Numba's GNU OpenMP threading layer started
#: (``NUMBA_THREADING_LAYER=omp`` with ``JITORT_THREAD_POOL=0``): Numba kills such a child
#: with SIGTERM as soon as it runs a parallel region, so its calls raise a jitort error
#: instead. On jitort's worker pool (``kernels/cpu/workers.py``, the default) no region goes
#: through the OpenMP layer and a forked child gets a fresh pool.
_OMP_FORKED = False


def _after_fork_in_child() -> None:
    global _OMP_FORKED
    try:
        pool = sys.modules.get("jitort.kernels.cpu.workers")
        if pool is not None and pool.installed():
            return
        from numba.np.ufunc import parallel
        if parallel._is_initialized and parallel._threading_layer == "omp":
            from numba.np.ufunc import omppool
            _OMP_FORKED = omppool.openmp_vendor == "GNU"
    except Exception:  # (Numba's internals moved: leave calls alone)
        pass


os.register_at_fork(after_in_child=_after_fork_in_child)


class _InputSpec:
    """Precomputed checks for one graph input (keeps per-call validation to a few microseconds)."""

    def __init__(self, v: Value):
        self.name = v.name
        self.untyped = v.dtype is None  # a sequence or optional input: passed through as given
        self.dtype = None if v.dtype is None else np.dtype(v.dtype)
        self.shape = v.shape
        self.rank = None if v.shape is None else len(v.shape)
        self.fixed = [(k, d) for k, d in enumerate(v.shape or ()) if isinstance(d, int)]
        self.symbolic = [(k, d) for k, d in enumerate(v.shape or ()) if isinstance(d, str)]

    def describe(self) -> str:
        if self.untyped:
            return "a sequence or optional value"
        dims = "?" if self.shape is None else list(self.shape)
        return f"{self.dtype.name}{dims}"

    def coerce(self, a) -> np.ndarray:
        if isinstance(a, np.ndarray):
            return a
        if hasattr(a, "__array__") or isinstance(a, (list, tuple, int, float, bool)):
            try:
                return np.asarray(a)
            except Exception as e:  # ragged nested lists and the like
                raise InvalidInput(f"input {self.name!r} cannot be converted to an array: "
                                   f"{e}") from None
        raise InvalidInput(f"input {self.name!r} must be a numpy array, got {type(a).__name__}")


class CompiledModel:
    """A model compiled by :func:`jitort.compile`. Callable; thread-safe.

    Call it with positional or keyword numpy arrays to get the outputs as a list in graph
    output order, or use :meth:`run` with onnxruntime's calling convention.

    Tiered (the default; ``tiered=False`` or ``JITORT_TIERED=0`` turns it off): until the
    generated program is compiled, in a background process, calls run in the numpy
    interpreter; :meth:`wait_compiled` waits for the switch (see :mod:`jitort.tiering`).
    """

    device = "cpu"

    def __init__(self, model: Any, *, threads: int | None = None, base_dir=None,
                 optimize: bool = True, backends: Sequence[str] = ("cpu",), debug: bool = False,
                 profile: bool = False, example_shapes: Sequence[dict] | None = None,
                 strict: bool | None = None, tiered: bool | None = None):
        # what a pickle rebuilds it from: the model as given, every keyword option (serialize.py)
        self._source, self._options = serialize.capture(model, locals())
        _configure_blas()
        #: raise :class:`UnsupportedOp` instead of running a node in the interpreter (default:
        #: the ``JITORT_STRICT`` environment variable, ``1`` meaning on)
        self.strict = _strict_default() if strict is None else bool(strict)
        #: compile generated code with bounds checking (IndexError instead of silent corruption)
        self.debug = bool(debug)
        self.threads = None if threads is None else _check_threads(threads)
        self.graph: Graph = import_model(model, base_dir)
        self.input_names = [v.name for v in self.graph.inputs]
        self._input_index = {n: i for i, n in enumerate(self.input_names)}
        self.output_names = [v.name for v in self.graph.outputs]
        self.inputs = [InputInfo(v.name, v.dtype, v.shape if v.shape is not None else ())
                       for v in self.graph.inputs]
        self._input_specs = [_InputSpec(v) for v in self.graph.inputs]
        self._fast_validate = not any(spec.untyped for spec in self._input_specs)
        self._valid_shapes: dict[tuple, bool] = {}  # shape tuples _validate_full accepted
        self.original_node_count = len(self.graph.nodes)
        self.pass_report: PassReport = (
            run_pipeline(self.graph, CPU_PIPELINE if self.device == "cpu" else None)
            if optimize else PassReport())
        self._backends = [CpuBackend()] if "cpu" in backends else []
        self.placement = assign(self.graph, self._backends)
        self._lock = threading.RLock()
        self._tls = threading.local()
        self.fallback_reasons: dict[str, str] = {}
        #: per-kernel timings when compiled with ``profile=True`` (see :meth:`end_profiling`)
        self.profiler = Profiler() if profile else None
        self._build_program()
        self._check_strict()
        self._tiering = self._tier0 = None
        if tiering.enabled_by_default() if tiered is None else tiered:
            self._start_tiering()
        for shapes in example_shapes or ():
            self.prepare(shapes)

    def _start_tiering(self) -> None:
        """Serve calls from the interpreter until the compiled program is ready (jitort/tiering.py).

        Not for profiled models, nor where nothing would compile, nor where the interpreter
        cannot run every node. A model whose inputs are all of fixed shape starts compiling now;
        others on their first call, when the shapes are known."""
        if (self.profiler is not None or self.device != "cpu"
                or all(isinstance(st, InterpStep) for st in self.steps)):
            return
        try:
            self._tiering = tiering.Tiering(self)
        except UnsupportedOp:
            return
        self._tier0 = self._tiering
        specs = self._input_specs
        if all(not s.untyped and s.shape is not None and not s.symbolic for s in specs):
            self._tiering.start([np.zeros(s.shape, s.dtype) for s in specs])

    @property
    def tier(self) -> str:
        """``"compiled"``, or ``"interpreter"`` while a tiered model's program compiles (see
        :meth:`wait_compiled`)."""
        return "interpreter" if self._tier0 is not None else "compiled"

    def wait_compiled(self, timeout: float | None = None) -> bool:
        """Block until calls run on the compiled program; True when they do.

        For benchmarks and servers that warm up first. A model compiled with ``tiered=False``
        returns True at once. False when ``timeout`` (seconds) passed first, or when the
        background compilation failed (with a :class:`jitort.tiering.TieringWarning`; calls go
        on running on the interpreter). Raises :class:`JitortError` when nothing is compiling
        yet: a model with symbolic input dims starts on its first call (or ``example_shapes``).
        """
        if self._tiering is None:
            return True
        return self._tiering.wait(timeout)

    def __reduce__(self):
        """Pickles as the model and its compile options; unpickling compiles again, with the
        generated code and Numba's machine code loaded from the on-disk cache."""
        return serialize.reduce(self)

    # --- program ---------------------------------------------------------------------------
    def _build_program(self) -> None:
        self.steps = schedule(self.graph, self.placement)
        self._input_ids = [id(v) for v in self.graph.inputs]
        self._program = [(self._interp_step if isinstance(st, InterpStep) else self._segment, st)
                         for st in self.steps]
        if self.profiler is not None:  # every step timed; the plain program is left as it is
            self._program = [(self._profiled_step(fn, st, i), st)
                             for i, (fn, st) in enumerate(self._program)]
        self._all_outputs = list(range(len(self.graph.outputs)))
        # interpreted nodes may call numpy's matmul: the model's thread count holds for them
        self._pin_blas = (getattr(self, "_pin_blas", False)
                          or any(isinstance(st, InterpStep) for st in self.steps))
        input_ids = {id(v) for v in self.graph.inputs}
        # constants, graph inputs and interpreter results (which may be views of either) are
        # copied; segment outputs are fresh arrays already
        self._output_needs_copy = [v.is_const or id(v) in input_ids for v in self.graph.outputs]
        # outputs that compiled segments write (fresh arrays each call, owned by the caller)
        # and that appear once: _collect returns them as they are
        fresh = {id(v) for st in self.steps if not isinstance(st, InterpStep)
                 for v in st.arg_outputs}
        out_ids = [id(v) for v in self.graph.outputs]
        self._fresh_outputs = (out_ids if all(i in fresh for i in out_ids)
                               and len(set(out_ids)) == len(out_ids) else None)
        self._runners: dict[int, Any] = {}
        self._host_runners: dict[int, Any] = {}
        self._compilers: dict[int, SegmentCompiler] = {}
        self._plans: dict[int, OrderedDict] = {}
        for step in self.steps:
            if isinstance(step, InterpStep):
                self._runners[id(step.node)] = make_runner(step.node, self.graph.opsets)
            else:
                self._compilers[id(step)] = SegmentCompiler(step, self.placement, self._run_host,
                                                            infer_shapes, debug=self.debug,
                                                            threads=self.threads)
                self._compilers[id(step)].profiler = self.profiler
                self._plans[id(step)] = step.plans = OrderedDict()
                step.input_ids = [id(v) for v in step.inputs]
                step.arg_ids = [id(v) for v in step.arg_inputs]
                step.output_ids = [id(v) for v in step.arg_outputs]
                step.output_dtypes = [np.dtype(v.dtype) for v in step.arg_outputs]
                step.cb = np.zeros(0, np.uint8)
        self._fast = self._fast_path()

    def _fast_path(self):
        """(segment, output positions) when the program is one compiled segment that takes the
        graph inputs as its arguments, in order, and writes every graph output: calls with
        known shapes then skip the step loop (see :meth:`_run_fast`). None otherwise."""
        if (self.profiler is not None or not self._fast_validate or len(self.steps) != 1
                or self._fresh_outputs is None):
            return None
        seg = self.steps[0]
        if (isinstance(seg, InterpStep) or seg.value_inputs or seg.input_ids != self._input_ids
                or seg.arg_ids != self._input_ids):
            return None
        pos = [seg.output_ids.index(i) for i in self._fresh_outputs]
        return seg, (None if pos == list(range(len(seg.output_ids))) else pos)

    def _run_host(self, n: Node, shape_of, value_of) -> list[np.ndarray]:
        if n.op_type == "Shape":
            s = np.array(shape_of(n.inputs[0]), np.int64)
            start, end = n.attrs.get("start", 0), n.attrs.get("end", None)
            return [s[start:end]]
        if n.op_type == "Size":
            return [np.array(int(np.prod(shape_of(n.inputs[0]), dtype=np.int64)), np.int64)]
        runner = self._host_runners.get(id(n))
        if runner is None:
            runner = self._host_runners[id(n)] = make_runner(n, self.graph.opsets)
        return runner([None if v is None else value_of(v) for v in n.inputs])

    def _check_strict(self) -> None:
        """In strict mode, refuse a model with any node placed on the interpreter."""
        if not self.strict:
            return
        interp = [n for n in self.graph.nodes if self.placement[id(n)] == INTERP]
        if interp:
            names = ", ".join(f"{n.label} ({n.domain + '::' if n.domain else ''}{n.op_type})"
                              for n in interp[:10])
            more = f" and {len(interp) - 10} more" if len(interp) > 10 else ""
            raise UnsupportedOp(f"strict mode: {len(interp)} node(s) would run in the "
                                f"interpreter, no compiled backend claims them: {names}{more}")

    def _fall_back(self, node: Node, why: str) -> None:
        if self.strict:
            raise UnsupportedOp(f"strict mode: node {node.label} ({node.op_type}) would fall back "
                                f"to the interpreter: {why}")
        log.info("node %s falls back to the interpreter: %s", node.label, why)
        self.placement[id(node)] = INTERP
        self.fallback_reasons[node.label] = why
        self._build_program()

    # --- calling ---------------------------------------------------------------------------
    def __call__(self, *args, **kwargs) -> list[np.ndarray]:
        if len(args) > len(self.input_names):
            raise InvalidInput(f"model takes {len(self.input_names)} inputs, got {len(args)} "
                               "positional arrays")
        feeds = dict(zip(self.input_names, args))
        for k, v in kwargs.items():
            if k in feeds:
                raise InvalidInput(f"input {k!r} given both positionally and by name")
            feeds[k] = v
        return self._execute(feeds, None)

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, Any], run_options=None) -> list:
        """onnxruntime's convention: ``run(None, {"x": array})`` returns all outputs."""
        if not isinstance(feeds, dict):
            raise InvalidInput("feeds must be a dict mapping input names to arrays")
        return self._execute(feeds, output_names)

    def _execute(self, feeds: dict, output_names) -> list[np.ndarray]:
        if _OMP_FORKED:
            raise ExecutionError(
                "this process was forked from one that had started Numba's GNU OpenMP threads "
                "(NUMBA_THREADING_LAYER=omp), which cannot run in a forked child (Numba would "
                "kill it): start workers with multiprocessing's 'spawn' or 'forkserver' method, "
                "or leave the parallel regions to jitort's worker pool (unset "
                "JITORT_THREAD_POOL=0)")
        t = self._tier0  # read once: the whole call runs on one tier
        if t is not None:
            return t.call(feeds, output_names)
        return self._execute_compiled(feeds, output_names)

    def _execute_compiled(self, feeds: dict, output_names) -> list[np.ndarray]:
        if self._fast is not None and output_names is None:
            outs = self._run_fast(feeds)
            if outs is not None:
                return outs
        env = dict(zip(self._input_ids, self._validate(feeds)))
        if not self._run_program(env):
            return self._execute_compiled(feeds, output_names)
        return self._collect(env, output_names)

    def _run_program(self, env: dict) -> bool:
        """Run every step on ``env``. False when a lowering declined these shapes: its node
        has moved to another backend or the interpreter, and the caller runs again."""
        prev = None
        if self.threads is not None:  # Numba's thread count is per calling thread: restored
            prev = _nt_get()
            if prev != self.threads:
                _nt_set(self.threads)
            else:
                prev = None
        pinned = self._pin_blas  # the kernels' own threads call the BLAS (kernels.cpu.blas)
        try:
            if pinned:
                _blas_pin()
                env[_PINNED] = True
            for run_step, step in self._program:
                run_step(step, env)
        except Unlowerable as e:
            with self._lock:
                self._fall_back(e.node, str(e))
            return False
        finally:
            if pinned:
                _blas_unpin()
            if prev is not None:
                _nt_set(prev)
        return True

    def _run_fast(self, feeds: dict) -> list[np.ndarray] | None:
        """The whole call for a one-segment program whose feeds have shapes already validated
        and planned: the same checks, plan and driver as the step loop, without its
        bookkeeping (about 1.5 us less per call). None sends the call down the general path
        (a new shape, a feed to convert, a workspace to grow)."""
        specs = self._input_specs
        if len(feeds) != len(specs):
            return None
        arrays = []
        for spec in specs:
            a = feeds.get(spec.name)
            if type(a) is not np.ndarray or a.dtype is not spec.dtype or not a.flags.c_contiguous:
                return None
            arrays.append(a)
        key = tuple([a.shape for a in arrays])
        seg, pos = self._fast
        plan = seg.plans.get(key)
        if plan is None or key not in self._valid_shapes:
            return None
        ws = getattr(self._tls, "ws", None)
        if ws is None or ws.size < plan.ws_bytes:
            return None
        if len(seg.plans) > 1:
            seg.plans.move_to_end(key)
        outs = [np.empty(s, dt) for s, dt in zip(plan.out_shapes, seg.output_dtypes)]
        prev = None
        if self.threads is not None:
            prev = _nt_get()
            if prev != self.threads:
                _nt_set(self.threads)
            else:
                prev = None
        pinned = plan.uses_blas or self._pin_blas
        if pinned:
            _blas_pin()
        try:
            _call_driver(plan, ws, seg.cb, arrays, outs)
        finally:
            if pinned:
                _blas_unpin()
            if prev is not None:
                _nt_set(prev)
        return outs if pos is None else [outs[k] for k in pos]

    def _interp_step(self, step: InterpStep, env: dict) -> None:
        self._interp(step.node, env)

    def _interp(self, n: Node, env: dict) -> None:
        try:
            outs = self._runners[id(n)](node_inputs(n, env))
        except JitortError:
            raise
        except Exception as e:
            raise ExecutionError(f"node {n.label} failed: {type(e).__name__}: {e}") from e
        for o, r in zip(n.outputs, outs):
            if isinstance(r, np.ndarray) and not r.flags.c_contiguous:
                r = np.ascontiguousarray(r)  # compiled code takes C-contiguous arrays only
            env[id(o)] = r

    def _segment(self, seg: Segment, env: dict) -> None:
        key = tuple([env[i].shape for i in seg.input_ids])
        if seg.value_inputs:
            key += tuple([_value_key(env[id(v)]) for v in seg.value_inputs])
        plans = seg.plans
        plan: Plan | None = plans.get(key)
        if plan is None:
            with self._lock:
                plan = self._compilers[id(seg)].plan(env)
                if getattr(self._tls, "probe", False) and not tiering.plan_cached(plan):
                    raise tiering._NotCached  # the tiering thread compiles it in a process
                self._check_memory(plan, seg, env)
                seg.cb = self._compilers[id(seg)].consts.materialize()
                plans[key] = plan
                if len(plans) > PLAN_CACHE_SIZE:
                    plans.popitem(last=False)
        elif len(plans) > 1:
            plans.move_to_end(key)
        outs = [np.empty(s, dt) for s, dt in zip(plan.out_shapes, seg.output_dtypes)]
        ws = getattr(self._tls, "ws", None)
        if ws is None or ws.size < plan.ws_bytes:
            ws = None  # do not hold the old workspace while the larger one is allocated
            ws = self._workspace(plan.ws_bytes)
        args = [env[i] for i in seg.arg_ids]
        if plan.uses_blas and _PINNED not in env:  # first plan here that reaches the BLAS
            self._pin_blas = True  # every later call pins it for the whole program
            _blas_pin()
            try:
                _call_driver(plan, ws, seg.cb, args, outs)
            finally:
                _blas_unpin()
        else:
            _call_driver(plan, ws, seg.cb, args, outs)
        for i, a in zip(seg.output_ids, outs):
            env[i] = a
        if plan.exports:
            env.update(plan.exports)

    def _check_memory(self, plan: Plan, seg: Segment, env: dict) -> None:
        """Refuse (InvalidInput naming the feeds) a plan whose outputs and workspace cannot fit.

        Runs once per new plan, before its outputs or workspace exist: shapes alone decide.
        """
        outs = sum(int(np.prod(s, dtype=np.float64)) * dt.itemsize
                   for s, dt in zip(plan.out_shapes, seg.output_dtypes))
        ws = getattr(self._tls, "ws", None)
        need = outs + max(0, plan.ws_bytes - (0 if ws is None else ws.size))
        avail = available_memory()
        if need <= avail:
            return
        feeds = []
        for v in self.graph.inputs:
            a = env.get(id(v))
            if isinstance(a, np.ndarray):
                small_ints = a.dtype.kind in "iu" and a.size <= 8
                feeds.append(f"{v.name!r} {a.shape}" + (f" = {a.tolist()}" if small_ints else ""))
        big = max(plan.out_shapes, key=lambda s: int(np.prod(s, dtype=np.float64)), default=())
        raise InvalidInput(f"these inputs need {_fmt_bytes(need)} (largest tensor {tuple(big)}, "
                           f"workspace {_fmt_bytes(plan.ws_bytes)}), which exceeds available "
                           f"memory ({_fmt_bytes(avail)}): inputs {', '.join(feeds)}")

    def _workspace(self, nbytes: int) -> np.ndarray:
        ws = getattr(self._tls, "ws", None)
        if ws is None or ws.size < nbytes:
            self._tls.ws = None  # let the old one go first
            try:
                ws = self._tls.ws = aligned_empty(max(nbytes, 64))
            except MemoryError:
                raise InvalidInput(f"cannot allocate a {_fmt_bytes(nbytes)} workspace for these "
                                   f"input shapes (available memory {_fmt_bytes(available_memory())})"
                                   ) from None
        return ws

    # --- profiling -------------------------------------------------------------------------
    def _profiled_step(self, fn, step, index: int):
        if isinstance(step, InterpStep):
            n = step.node
            return self.profiler.timed(n.label, "interp", fn,
                                       {"op_name": op_label(n), "nodes": [n.label], "flops": 0})
        return self.profiler.timed(f"segment{index}", "segment", fn, {"step": index})

    def end_profiling(self, path=None) -> str:
        """Write the profile (a Chrome trace JSON, as onnxruntime's) and return its path.

        Only for models compiled with ``profile=True``. Open the file in https://ui.perfetto.dev.
        """
        if self.profiler is None:
            raise JitortError("compile the model with profile=True to profile it")
        return self.profiler.write(path)

    def prepare(self, shapes: dict[str, Sequence[int]]) -> None:
        """Compile and plan ahead for these input shapes (``{input name: shape}``).

        Runs the model once on zero-filled inputs of those shapes (zeros are valid token ids
        and masks), so the first real call with these shapes finds its code compiled and its
        plans cached. ``compile(..., example_shapes=[...])`` calls this for each entry.
        """
        unknown = [k for k in shapes if k not in self._input_index]
        if unknown:
            raise InvalidInput(f"example shapes name unknown input(s) {unknown}; the model's "
                               f"inputs are {self.input_names}")
        feeds = {}
        for spec in self._input_specs:
            if spec.name not in shapes:
                if spec.shape is not None and all(isinstance(d, int) for d in spec.shape):
                    shape = spec.shape  # fully static: no need to name it
                else:
                    raise InvalidInput(f"example shapes lack input {spec.name!r} ({spec.describe()})")
            else:
                shape = tuple(int(d) for d in shapes[spec.name])
            if spec.untyped:
                raise InvalidInput(f"cannot make an example value for {spec.name!r} "
                                   f"({spec.describe()})")
            feeds[spec.name] = np.zeros(shape, spec.dtype)
        self._execute(feeds, None)

    def release(self) -> None:
        """Give back the calling thread's workspace and drop cached plans."""
        self._tls.ws = None
        for plans in self._plans.values():
            plans.clear()

    def _collect(self, env: dict, output_names, fresh: bool = True) -> list[np.ndarray]:
        """The outputs the caller asked for, each an array the caller owns. ``fresh=False``
        (the interpreter tier): no output is known to be a fresh array of a compiled segment."""
        if fresh and output_names is None and self._fresh_outputs is not None:
            return [env[i] for i in self._fresh_outputs]
        if output_names is None:
            wanted = self._all_outputs
        else:
            index = {n: i for i, n in enumerate(self.output_names)}
            missing = [n for n in output_names if n not in index]
            if missing:
                raise InvalidInput(f"unknown output name(s) {missing}; outputs are {self.output_names}")
            wanted = [index[n] for n in output_names]
        result = []
        for i in wanted:
            v = self.graph.outputs[i]
            a = v.const if v.is_const else env[id(v)]
            if self._output_needs_copy[i] or (isinstance(a, np.ndarray) and not (
                    a.flags.owndata and a.flags.c_contiguous)):
                a = np.array(a, copy=True, order="C")  # the caller owns what we return
            result.append(a)
        if len(result) > 1:  # the same array twice (an output listed twice): give each its own
            seen = set()
            for k, a in enumerate(result):
                if id(a) in seen:
                    result[k] = np.array(a, copy=True)
                seen.add(id(a))
        return result

    # --- validation ------------------------------------------------------------------------
    def _validate(self, feeds: dict) -> list[np.ndarray]:
        """Check every feed against the model before anything runs; return contiguous arrays.

        Fast path: C-contiguous arrays of the declared dtypes whose shapes already passed the
        full checks (remembered per shape tuple) need only the dtype and layout tests."""
        specs = self._input_specs
        if self._fast_validate and len(feeds) == len(specs):
            arrays = []
            for spec in specs:
                a = feeds.get(spec.name)
                if (type(a) is not np.ndarray or a.dtype is not spec.dtype
                        or not a.flags.c_contiguous):
                    break
                arrays.append(a)
            else:
                key = tuple([a.shape for a in arrays])
                if key in self._valid_shapes:
                    return arrays
                arrays = self._validate_full(feeds)
                if len(self._valid_shapes) >= 1024:
                    self._valid_shapes.clear()
                self._valid_shapes[key] = True
                return arrays
        return self._validate_full(feeds)

    def _validate_full(self, feeds: dict) -> list[np.ndarray]:
        if len(feeds) != len(self._input_specs) or any(k not in self._input_index for k in feeds):
            unknown = [k for k in feeds if k not in self._input_index]
            if unknown:
                raise InvalidInput(f"unknown input name(s) {unknown}; the model's inputs are "
                                   f"{self.input_names}")
        arrays = []
        symbols: dict[str, tuple[int, str]] | None = None
        for spec in self._input_specs:
            a = feeds.get(spec.name, _MISSING)
            if a is _MISSING:
                raise InvalidInput(f"missing input {spec.name!r} ({spec.describe()})")
            if spec.untyped:
                arrays.append(a)
                continue
            if type(a) is not np.ndarray:
                a = spec.coerce(a)
            if a.dtype != spec.dtype:
                raise InvalidInput(f"input {spec.name!r} has dtype {a.dtype}, expected "
                                   f"{spec.dtype.name} (jitort does not cast: pass "
                                   f".astype(np.{spec.dtype.name}) if that is what you want)")
            if spec.rank is not None:
                shape = a.shape
                if len(shape) != spec.rank:
                    raise InvalidInput(f"input {spec.name!r} has rank {a.ndim} (shape {shape}), "
                                       f"expected rank {spec.rank} ({spec.describe()})")
                for k, want in spec.fixed:
                    if shape[k] != want:
                        raise InvalidInput(f"input {spec.name!r} has shape {shape}: dim {k} must "
                                           f"be {want}")
                if spec.symbolic:
                    if symbols is None:
                        symbols = {}
                    for k, sym in spec.symbolic:
                        prev = symbols.setdefault(sym, (shape[k], spec.name))
                        if prev[0] != shape[k]:
                            raise InvalidInput(f"input {spec.name!r} dim {k} ({sym}) is {shape[k]} "
                                               f"but input {prev[1]!r} has {sym}={prev[0]}")
            if not a.flags.c_contiguous:  # a copy: refused before allocating if it cannot fit
                avail = available_memory()
                if a.nbytes > avail:
                    raise InvalidInput(
                        f"input {spec.name!r} (shape {a.shape}, a non-contiguous view) needs a "
                        f"{_fmt_bytes(a.nbytes)} contiguous copy, which exceeds available "
                        f"memory ({_fmt_bytes(avail)})")
                try:
                    a = np.ascontiguousarray(a)
                except MemoryError:
                    raise InvalidInput(f"input {spec.name!r} (shape {a.shape}): no memory for "
                                       f"its {_fmt_bytes(a.nbytes)} contiguous copy") from None
            arrays.append(a)
        return arrays

    # --- reporting -------------------------------------------------------------------------
    def placement_counts(self) -> Counter:
        """Nodes per placement: ``cpu`` (compiled), ``host`` (plan time), ``interp``."""
        return Counter(self.placement[id(n)] for n in self.graph.nodes)

    @property
    def compiled_share(self) -> float:
        """Share of the optimized graph's nodes not run by the interpreter per call."""
        c = self.placement_counts()
        total = sum(c.values())
        return 1.0 if total == 0 else 1.0 - c.get(INTERP, 0) / total

    def fallback_nodes(self) -> list[str]:
        return [n.label for n in self.graph.nodes if self.placement[id(n)] == INTERP]

    def plans(self):
        """All cached plans (for reports and tests)."""
        for plans in self._plans.values():
            yield from plans.values()

    @property
    def workspace_bytes(self) -> int:
        return max((p.ws_bytes for p in self.plans()), default=0)

    @property
    def workspace_lower_bound(self) -> int:
        return max((p.memory.lower_bound for p in self.plans()), default=0)

    def generated_sources(self) -> list[str]:
        return sorted({p.source_path for p in self.plans()})

    def summary(self) -> str:
        c = self.placement_counts()
        return (f"{self.original_node_count} nodes imported, {len(self.graph.nodes)} after passes "
                f"({self.pass_report}); compiled {c.get('cpu', 0)}, host {c.get(HOST, 0)}, "
                f"interpreted {c.get(INTERP, 0)}; compiled share {self.compiled_share:.1%}")


def infer_shapes(node: Node, in_shapes: list, in_values: list) -> list[tuple]:
    """Output shapes of a compiled node (:mod:`.shapes`: ONNX ops and jitort's own)."""
    return shape_fns.infer(node, in_shapes, in_values)


def _strict_default() -> bool:
    v = os.environ.get("JITORT_STRICT", "").strip().lower()
    if v in ("", "0", "false", "no", "off"):
        return False
    if v in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"JITORT_STRICT must be 0 or 1, got {v!r}")


def available_memory() -> int:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), else a huge number."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 62


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def _value_key(a) -> tuple:
    a = np.asarray(a)
    return (a.dtype.str, a.shape, a.tobytes())


_blas_configured = False


def _configure_blas() -> None:
    """Pin the BLAS that Numba's ``np.dot`` calls (scipy's OpenBLAS) to one thread.

    jitort parallelizes GEMMs itself (row/batch blocks under ``prange``). Two thread pools on
    the same cores spin against each other: bert went from 8 ms to 95 ms per call with both.
    MKL, which the kernels' ``xgemm`` prefers when installed, runs sequential; numpy's own
    OpenBLAS, which it calls otherwise where numpy ships one, is pinned only while a model runs (``_blas_pin``); elsewhere it keeps the user's setting.
    """
    global _blas_configured
    if _blas_configured:
        return
    _blas_configured = True
    try:
        import scipy.linalg.cython_blas  # noqa: F401  (loads the library Numba binds to)
        from threadpoolctl import ThreadpoolController
        for lib in ThreadpoolController().lib_controllers:
            if lib.user_api == "blas" and "numpy" not in lib.filepath:
                lib.set_num_threads(1)
    except Exception as e:  # pragma: no cover - best effort, never fatal
        log.warning("could not pin BLAS threads: %s", e)


def _call_driver(plan: Plan, ws: np.ndarray, cb: np.ndarray, args: list, outs: list) -> None:
    """Run one segment's generated driver; its errors as jitort's."""
    if plan.fp is None:  # first call of this plan: the kernel-library addresses
        plan.fp = _link(plan, [ws, cb, plan.d, _FP0, *plan.pb, *args, *outs])
    try:
        plan.driver(ws, cb, plan.d, plan.fp, *plan.pb, *args, *outs)
    except IndexError as e:
        raise InvalidInput(f"{e} (an index input is out of range)") from None
    except JitortError:
        raise
    except Exception as e:
        raise ExecutionError(f"compiled segment failed: {type(e).__name__}: {e}") from e


_FP0 = np.zeros(1, np.int64)  # stands for the fp table when typing a driver's arguments


def _link(plan: Plan, args: list) -> np.ndarray:
    """The fp table of ``plan``'s driver for these argument types (codegen/native.py)."""
    from .codegen import native
    return native.link(native.driver_module(plan), plan.n_sites, args)


def _blas_pin():
    """Pin the kernels' BLAS to one thread (``kernels.cpu.blas.pin``) until :func:`_blas_unpin`."""
    from jitort.kernels.cpu.blas import pin
    pin()


def _blas_unpin():
    from jitort.kernels.cpu.blas import unpin
    unpin()


#: ``env`` key (never an ``id()``) set while a call holds the BLAS pinned
_PINNED = -1


def _numba_thread_fns():
    """(get, set) of the calling thread's Numba thread count. The threading layer's own C entry
    points once it is launched (0.1 us a call, where ``numba.set_num_threads`` re-checks the
    launch under a lock, ~0.8 us); the public functions if this Numba lacks them."""
    import numba
    numba.get_num_threads()  # launches the threading layer
    try:
        from numba.np.ufunc import parallel as _p
        get, set_ = _p._get_num_threads, _p._set_num_threads
        get()
        return get, set_
    except Exception:  # pragma: no cover - a Numba without them
        return numba.get_num_threads, numba.set_num_threads


def _nt_get() -> int:
    global _nt_get, _nt_set
    _nt_get, _nt_set = _numba_thread_fns()
    return _nt_get()


def _nt_set(n: int) -> None:
    global _nt_get, _nt_set
    _nt_get, _nt_set = _numba_thread_fns()
    _nt_set(n)


def _check_threads(n: int) -> int:
    import numba
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be a positive int, got {n!r}")
    return min(n, numba.config.NUMBA_NUM_THREADS)


def compile(model: Any, *, threads: int | None = None, base_dir=None, optimize: bool = True,
            device: str = "cpu", **kwargs) -> CompiledModel:
    """Compile an ONNX model (path, bytes or ``onnx.ModelProto``) into a callable.

    ``device="cuda"`` runs what the CUDA backend supports on the GPU (or numba's CUDA
    simulator) and the rest on the CPU (:class:`jitort.cuda_runtime.CudaCompiledModel`).

    Returns at once on the CPU: the first calls run in the numpy interpreter while the program
    compiles in a background process, then calls switch to it (``model.wait_compiled()`` waits
    for that; ``tiered=False`` or ``JITORT_TIERED=0`` compiles on the first call instead).
    Other options: ``strict``, ``debug``, ``profile``, ``example_shapes`` (see
    :class:`CompiledModel`).
    """
    if device == "cuda":
        from .cuda_runtime import CudaCompiledModel  # imports numba.cuda only when asked
        return CudaCompiledModel(model, threads=threads, base_dir=base_dir, optimize=optimize,
                                 **kwargs)
    if device != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    from . import tuning
    tuning.ensure_background()  # first use on this machine: calibrate, detached, never waited on
    tuning.apply_runtime()      # decisions the kernels make at run time, from this machine's
    return CompiledModel(model, threads=threads, base_dir=base_dir, optimize=optimize, **kwargs)


def compile_count() -> int:
    """Numba compilations in this process so far (cache loads excluded)."""
    return modmgr.compile_count

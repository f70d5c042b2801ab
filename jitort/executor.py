"""The executor: a model's program (steps in topological order) and the loop that runs it.

Steps are compiled segments (one generated driver each, planned per input-shape signature and
cached, least recently used evicted first) and interpreter steps between them. Values live in
``env``, keyed by ``id(value)``. A call runs wholly under :class:`jitort.pinning.pinned`: the
model's thread count and, when its program reaches the BLAS, the BLAS pinned to one thread.

Public surface, for the session (:mod:`jitort.runtime`) and the tiers (:mod:`jitort.tiering`):
:meth:`Executor.validate`, :attr:`Executor.input_ids`, :meth:`Executor.execute_compiled`
(``only_cached=True`` raises :class:`NotCached` instead of compiling a driver or a dynamic
step's kernels),
:meth:`Executor.collect`, :meth:`Executor.compiled_segments`, :meth:`Executor.dynamic_flows`.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from . import shapes as shape_fns
from .codegen import native
from .codegen.cpu import Plan, SegmentCompiler, Unlowerable
from .codegen.emitter import aligned_empty
from .errors import ExecutionError, InvalidInput, JitortError, UnsupportedOp, run_driver
from .feeds import FeedChecker, available_memory, fmt_bytes, has_half, storage_views
from .interpreter import make_runner, node_inputs
from .ir import Graph, Node
from .partition import INTERP, ControlStep, DynamicStep, InterpStep, Segment, schedule
from .pinning import pinned
from .profiling import op_label
from .sequences import copy_value

log = logging.getLogger("jitort")

#: ``env`` key (never an ``id()``) set while a call holds the BLAS pinned
_PINNED = -1

#: :meth:`Executor._check_memory` trusts its last reading of the available memory for plans
#: needing at most 1/_MEMORY_SHARE of it, for _MEMORY_AGE_S seconds
_MEMORY_SHARE, _MEMORY_AGE_S = 16, 1.0


class NotCached(JitortError):
    """Raised by ``execute_compiled(..., only_cached=True)``: a plan's driver is not in the
    on-disk cache and would have to be compiled in this process."""


def infer_shapes(node: Node, in_shapes: list, in_values: list) -> list[tuple]:
    """Output shapes of a compiled node (:mod:`.shapes`: ONNX ops and jitort's own)."""
    return shape_fns.infer(node, in_shapes, in_values)


def value_key(a) -> tuple:
    """The part of a plan's key that a value-dependent segment input contributes."""
    a = np.asarray(a)
    return (a.dtype.str, a.shape, a.tobytes())


def plan_cached(plan) -> bool:
    """Whether every Numba function of ``plan``'s driver module has an entry in the on-disk
    cache (so running it loads machine code instead of compiling)."""
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
    except Exception:  # an unreadable index: not usable, a compile redoes it
        return False


_FP0 = np.zeros(1, np.int64)  # stands for the fp table when typing a driver's arguments


def call_driver(plan: Plan, ws: np.ndarray, cb: np.ndarray, args: list, outs: list) -> None:
    """Run one segment's generated driver; its errors as jitort's."""
    half = plan.half  # float16 / bfloat16 arrays travel as uint16 views
    if half is None:
        half = plan.half = has_half(args) or has_half(outs)
    if half:
        args, outs = storage_views(args), storage_views(outs)
    if plan.fp is None:  # first call of this plan: the kernel-library addresses
        plan.fp = native.link(native.driver_module(plan), plan.n_sites,
                              [ws, cb, plan.d, _FP0, *plan.pb, *args, *outs])
    run_driver(plan.driver, ws, cb, plan.d, plan.fp, *plan.pb, *args, *outs)


class Executor:
    """Runs one model's program. Thread-safe: plans are made under a lock, and each calling
    thread has its own workspace.

    A subclass sets ``graph``, ``output_names``, ``placement``, ``threads``, ``debug``,
    ``profiler``, ``strict`` and ``plan_cache_size`` and calls :meth:`_init_executor` before
    anything runs. ``_validate`` and ``_input_ids`` are the older names of :meth:`validate` and
    :attr:`input_ids`.
    """

    graph: Graph
    output_names: list
    placement: dict
    threads: int | None
    debug: bool
    strict: bool
    profiler: Any
    plan_cache_size: int

    def _init_executor(self) -> None:
        self._feeds = FeedChecker(self.graph.inputs)
        self._lock = threading.RLock()
        self._tls = threading.local()
        self.fallback_reasons: dict[str, str] = {}
        #: ``id(node) -> flow`` of the control-flow nodes placed on CONTROL (jitort/control_flow.py)
        self._flows: dict = getattr(self, "_flows", {})
        self._avail = (-_MEMORY_AGE_S, 0)  # (time.monotonic(), bytes): see _check_memory
        self._build_program()

    # --- public surface --------------------------------------------------------------------
    def validate(self, feeds: dict) -> list[np.ndarray]:
        """Check every feed against the model before anything runs (:class:`InvalidInput`
        naming the input otherwise); the inputs in graph order, as contiguous arrays."""
        return self._feeds.validate(feeds)

    _validate = validate

    def execute_compiled(self, feeds: dict, output_names=None, *,
                         only_cached: bool = False) -> list[np.ndarray]:
        """Run the compiled program on ``feeds``. With ``only_cached``, raise :class:`NotCached`
        at the first new plan whose driver would have to be compiled (what is cached is loaded
        and run)."""
        if not only_cached:
            return self._execute_compiled(feeds, output_names)
        self._tls.probe = True
        try:
            return self._execute_compiled(feeds, output_names)
        finally:
            self._tls.probe = False

    def compiled_segments(self) -> list[tuple[Segment, Any]]:
        """``(segment, its compiler)`` for every compiled step, in program order."""
        return [(st, self._compilers[id(st)]) for st in self.steps
                if not isinstance(st, InterpStep)]

    def dynamic_flows(self) -> list[tuple[Node, Any]]:
        """``(node, flow)`` for every dynamic step (jitort/dynamic_ops.py), in program order:
        ``flow(node_inputs(node, env))`` runs its kernels."""
        return [(st.node, self._flows[id(st.node)]) for st in self.steps
                if isinstance(st, DynamicStep)]

    # --- program ---------------------------------------------------------------------------
    def _build_program(self) -> None:
        self.steps = self._schedule()
        #: ``id()`` of each graph input, in order (the keys of a call's ``env``)
        self.input_ids = self._input_ids = [id(v) for v in self.graph.inputs]
        self._runners: dict[int, Any] = {}
        self._host_runners: dict[int, Any] = {}
        self._compilers: dict[int, Any] = {}
        self._plans: dict[int, OrderedDict] = {}
        self._program = []
        for step in self.steps:
            if isinstance(step, ControlStep):
                self._program.append((self._control_step, step))
            elif isinstance(step, InterpStep):
                self._runners[id(step.node)] = make_runner(step.node, self.graph.opsets)
                self._program.append((self._interp_step, step))
            else:
                self._add_segment(step, self._segment_compiler(step))
                self._program.append((self._step_runner(step), step))
        if self.profiler is not None:  # every step timed; the plain program is left as it is
            self._program = [(self._profiled_step(fn, st, i), st)
                             for i, (fn, st) in enumerate(self._program)]
        self._all_outputs = list(range(len(self.graph.outputs)))
        # interpreted nodes may call numpy's matmul: the model's thread count holds for them
        self._pin_blas = (getattr(self, "_pin_blas", False)
                          or any(isinstance(st, InterpStep) for st in self.steps))
        input_ids = set(self.input_ids)
        # constants, graph inputs and interpreter results (which may be views of either) are
        # copied; segment outputs are fresh arrays already
        self._output_needs_copy = [v.is_const or id(v) in input_ids for v in self.graph.outputs]
        self._fresh_outputs = self._fresh_output_ids()
        self._fast = self._fast_path()

    def _schedule(self) -> list:
        return schedule(self.graph, self.placement)

    def _segment_compiler(self, step: Segment):
        comp = SegmentCompiler(step, self.placement, self._run_host, infer_shapes,
                               debug=self.debug, threads=self.threads, options=self.options)
        comp.profiler = self.profiler
        # the graph inputs' declared dims: fixed ones and the agreement of named ones are
        # checked on every call's feeds (jitort/feeds.py), closed-form plans rely on both
        comp.input_dims = {id(v): tuple(v.shape) for v in self.graph.inputs if v.shape is not None}
        return comp

    def _step_runner(self, step: Segment):
        return self._segment

    def _add_segment(self, step: Segment, compiler) -> None:
        """Register a compiled step: its compiler, its plan cache, its precomputed keys."""
        self._compilers[id(step)] = compiler
        self._plans[id(step)] = step.plans = OrderedDict()
        step.input_ids = [id(v) for v in step.inputs]
        step.arg_ids = [id(v) for v in step.arg_inputs]
        step.output_ids = [id(v) for v in step.arg_outputs]
        step.output_dtypes = [np.dtype(v.dtype) for v in step.arg_outputs]
        step.cb = np.zeros(0, np.uint8)

    def _fresh_output_ids(self) -> list[int] | None:
        """The outputs' ids when compiled segments write every one of them (fresh arrays each
        call, owned by the caller) and each appears once: collect returns them as they are."""
        fresh = {id(v) for st in self.steps if not isinstance(st, InterpStep)
                 for v in st.arg_outputs}
        out_ids = [id(v) for v in self.graph.outputs]
        return (out_ids if all(i in fresh for i in out_ids)
                and len(set(out_ids)) == len(out_ids) else None)

    def _fast_path(self):
        """``(segment, output positions, key order, argument order)`` when the program is one
        compiled segment that takes the graph inputs (each once, in any order) as its inputs
        and arguments and writes every graph output: calls then skip the step loop (see
        :meth:`_run_fast`). The orders are the graph-input positions of the segment's inputs
        (its plans' key) and of its driver arguments, None where they are the graph's own.
        None otherwise."""
        if (self.profiler is not None or not self._feeds.fast or len(self.steps) != 1
                or self._fresh_outputs is None):
            return None
        seg = self.steps[0]
        ids = self.input_ids
        if (isinstance(seg, InterpStep) or seg.value_inputs
                or sorted(seg.input_ids) != sorted(ids) or sorted(seg.arg_ids) != sorted(ids)):
            return None
        pos = [seg.output_ids.index(i) for i in self._fresh_outputs]
        keys, args = ([ids.index(i) for i in seg.input_ids], [ids.index(i) for i in seg.arg_ids])
        ident = list(range(len(ids)))
        return (seg, None if pos == list(range(len(seg.output_ids))) else pos,
                None if keys == ident else keys, None if args == ident else args)

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

    def _fall_back(self, node: Node, why: str) -> None:
        if self.strict:
            raise UnsupportedOp(f"strict mode: node {node.label} ({node.op_type}) would fall back "
                                f"to the interpreter: {why}")
        log.info("node %s falls back to the interpreter: %s", node.label, why)
        self.placement[id(node)] = INTERP
        self.fallback_reasons[node.label] = why
        self._build_program()

    # --- running ---------------------------------------------------------------------------
    def _execute_compiled(self, feeds: dict, output_names) -> list[np.ndarray]:
        if self._fast is not None and output_names is None:
            outs = self._run_fast(feeds)
            if outs is not None:
                return outs
        env = dict(zip(self.input_ids, self.validate(feeds)))
        if not self._run_program(env):
            return self._execute_compiled(feeds, output_names)
        return self.collect(env, output_names)

    def _run_program(self, env: dict) -> bool:
        """Run every step on ``env``. False when a lowering declined these shapes: its node
        has moved to another backend or the interpreter, and the caller runs again."""
        pin = self._pin_blas  # the kernels' own threads call the BLAS (kernels.cpu.blas)
        try:
            with pinned(self.threads, pin):
                if pin:
                    env[_PINNED] = True
                for run_step, step in self._program:
                    run_step(step, env)
        except Unlowerable as e:
            with self._lock:
                self._fall_back(e.node, str(e))
            return False
        return True

    def _run_fast(self, feeds: dict) -> list[np.ndarray] | None:
        """The whole call for a one-segment program (see :meth:`_fast_path`): the same checks,
        plan and driver as the step loop, without its bookkeeping. A new shape is checked
        and planned here too (a decode loop's every step). None sends the call down the
        general path (a feed to convert, an output subset, a lowering that declined)."""
        specs = self._feeds.specs
        if len(feeds) != len(specs):
            return None
        arrays = []
        for spec in specs:
            a = feeds.get(spec.name)
            if type(a) is not np.ndarray or a.dtype is not spec.dtype or not a.flags.c_contiguous:
                return None
            arrays.append(a)
        shapes = tuple([a.shape for a in arrays])
        seg, pos, keys, order = self._fast
        key = shapes if keys is None else tuple([shapes[k] for k in keys])
        plan = seg.plans.get(key)
        if plan is None or shapes not in self._feeds.valid_shapes:
            plan = self._plan_fast(seg, feeds)
            if plan is None:
                return None
        elif len(seg.plans) > 1:
            seg.plans.move_to_end(key)
        ws = getattr(self._tls, "ws", None)
        if ws is None or ws.size < plan.ws_bytes:
            ws = None  # do not hold the old workspace while the larger one is allocated
            ws = self._workspace(plan.ws_bytes)
        if order is not None:
            arrays = [arrays[k] for k in order]
        outs = [np.empty(s, dt) for s, dt in zip(plan.out_shapes, seg.output_dtypes)]
        with pinned(self.threads, plan.uses_blas or self._pin_blas):
            call_driver(plan, ws, seg.cb, arrays, outs)
        return outs if pos is None else [outs[k] for k in pos]

    def _plan_fast(self, seg: Segment, feeds: dict) -> Plan | None:
        """:meth:`_run_fast`'s new shapes: the feeds' full checks (InvalidInput), then the
        plan, as the step loop makes them; None when a lowering declined the shapes (its
        node has moved, the general path runs the new program)."""
        env = dict(zip(self.input_ids, self.validate(feeds)))
        try:
            plan = self._plan_for(seg, env)
        except Unlowerable as e:
            with self._lock:
                self._fall_back(e.node, str(e))
            return None
        if plan.uses_blas:  # as the step loop: later calls pin the BLAS for the program
            self._pin_blas = True
        return plan

    def _interp_step(self, step: InterpStep, env: dict) -> None:
        self._interp(step.node, env)

    def _control_step(self, step: ControlStep, env: dict) -> None:
        """An If / Loop / Scan calling its bodies' compiled programs, or a dynamic step
        (jitort/dynamic_ops.py) calling its kernels (a probe stops at kernels not in the cache).
        A body that declines these shapes (UnsupportedOp) hands the node to the interpreter, as
        a lowering would."""
        n = step.node
        flow = self._flows[id(n)]
        if isinstance(step, DynamicStep) and getattr(self._tls, "probe", False) and not all(
                k.overloads or _dispatcher_cached(k) for k in flow.kernels()):
            raise NotCached(f"a kernel of dynamic step {n.label} ({n.op_type}) is not in the cache")
        try:
            outs = flow(node_inputs(n, env))
        except UnsupportedOp as e:
            raise Unlowerable(n, str(e)) from None
        for o, r in zip(n.outputs, outs):
            env[id(o)] = r

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
        plan = self._plan_for(seg, env)
        outs = [np.empty(s, dt) for s, dt in zip(plan.out_shapes, seg.output_dtypes)]
        ws = getattr(self._tls, "ws", None)
        if ws is None or ws.size < plan.ws_bytes:
            ws = None  # do not hold the old workspace while the larger one is allocated
            ws = self._workspace(plan.ws_bytes)
        args = [env[i] for i in seg.arg_ids]
        if plan.uses_blas and _PINNED not in env:  # first plan here that reaches the BLAS
            self._pin_blas = True  # every later call pins it for the whole program
            with pinned(None, True):
                call_driver(plan, ws, seg.cb, args, outs)
        else:
            call_driver(plan, ws, seg.cb, args, outs)
        for i, a in zip(seg.output_ids, outs):
            env[i] = a
        if plan.exports:
            env.update(plan.exports)

    def _plan_for(self, seg: Segment, env: dict) -> Plan:
        """The cached plan of ``seg`` for the shapes (and values) in ``env``, made on a miss."""
        key = tuple([env[i].shape for i in seg.input_ids])
        if seg.value_inputs:
            key += tuple([value_key(env[id(v)]) for v in seg.value_inputs])
        plans = seg.plans
        plan: Plan | None = plans.get(key)
        if plan is None:
            with self._lock:
                plan = self._compilers[id(seg)].plan(env)
                if getattr(self._tls, "probe", False) and not plan_cached(plan):
                    raise NotCached(f"the driver of segment {self.steps.index(seg)} is not "
                                    "in the cache")
                self._check_memory(plan, seg, env)
                seg.cb = self._compilers[id(seg)].consts.materialize()
                plans[key] = plan
                if len(plans) > self.plan_cache_size:
                    plans.popitem(last=False)
        elif len(plans) > 1:
            plans.move_to_end(key)
        return plan

    def _check_memory(self, plan: Plan, seg: Segment, env: dict) -> None:
        """Refuse (InvalidInput naming the feeds) a plan whose outputs and workspace cannot fit.

        Runs once per new plan, before its outputs or workspace exist: shapes alone decide.
        """
        outs = sum([math.prod(s) * dt.itemsize for s, dt in zip(plan.out_shapes, seg.output_dtypes)])
        ws = getattr(self._tls, "ws", None)
        need = outs + max(0, plan.ws_bytes - (0 if ws is None else ws.size))
        # /proc/meminfo is read again only for a plan that needs more than a small share of
        # what was available at the last reading, or when that reading is old: a decode loop
        # plans every step, and reading it costs as much as the plan
        now = time.monotonic()
        last_t, last = self._avail
        if need * _MEMORY_SHARE <= last and now - last_t < _MEMORY_AGE_S:
            return
        avail = available_memory()
        self._avail = (now, avail)
        if need <= avail:
            return
        feeds = []
        for v in self.graph.inputs:
            a = env.get(id(v))
            if isinstance(a, np.ndarray):
                small_ints = a.dtype.kind in "iu" and a.size <= 8
                feeds.append(f"{v.name!r} {a.shape}" + (f" = {a.tolist()}" if small_ints else ""))
        big = max(plan.out_shapes, key=lambda s: int(np.prod(s, dtype=np.float64)), default=())
        raise InvalidInput(f"these inputs need {fmt_bytes(need)} (largest tensor {tuple(big)}, "
                           f"workspace {fmt_bytes(plan.ws_bytes)}), which exceeds available "
                           f"memory ({fmt_bytes(avail)}): inputs {', '.join(feeds)}")

    def _workspace(self, nbytes: int) -> np.ndarray:
        ws = getattr(self._tls, "ws", None)
        if ws is None or ws.size < nbytes:
            self._tls.ws = None  # let the old one go first
            if ws is not None:  # growing (a decode loop's every step): 1/8 ahead, at most 16 MiB
                nbytes += min(nbytes // 8, 1 << 24)
            try:
                ws = self._tls.ws = aligned_empty(max(nbytes, 64))
            except MemoryError:
                raise InvalidInput(f"cannot allocate a {fmt_bytes(nbytes)} workspace for these "
                                   f"input shapes (available memory {fmt_bytes(available_memory())})"
                                   ) from None
        return ws

    def collect(self, env: dict, output_names: Sequence[str] | None,
                fresh: bool = True) -> list[np.ndarray]:
        """The outputs the caller asked for (None: all, in graph order), each an array the
        caller owns. ``fresh=False`` (the interpreter tier): no output is known to be a fresh
        array of a compiled segment."""
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
                a = copy_value(a)  # the caller owns what we return (a sequence too)
            result.append(a)
        if len(result) > 1:  # the same array twice (an output listed twice): give each its own
            seen = set()
            for k, a in enumerate(result):
                if id(a) in seen:
                    result[k] = copy_value(a)
                seen.add(id(a))
        return result

    def release(self) -> None:
        """Give back the calling thread's workspace and drop cached plans."""
        self._tls.ws = None
        for plans in self._plans.values():
            plans.clear()

    # --- profiling -------------------------------------------------------------------------
    def _profiled_step(self, fn, step, index: int):
        if isinstance(step, InterpStep):
            n = step.node
            kind = ("dynamic" if isinstance(step, DynamicStep) else
                    "control" if isinstance(step, ControlStep) else "interp")
            return self.profiler.timed(n.label, kind, fn,
                                       {"op_name": op_label(n), "nodes": [n.label], "flops": 0})
        return self.profiler.timed(f"segment{index}", "segment", fn, {"step": index})

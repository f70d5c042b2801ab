"""The session API: :func:`compile` and :class:`CompiledModel`.

A compiled model validates its feeds (:mod:`jitort.feeds`), then runs them on the tier it is on:
the numpy interpreter while a tiered model's program compiles in the background
(:mod:`jitort.tiering`), else the compiled program (:class:`jitort.executor.Executor`, which
this class extends with the session's options, calling conventions and reports). Devices other
than the CPU come from :mod:`jitort.devices`.
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any, Sequence

from . import (control_flow, devices, dynamic_ops, options, serialize, string_ops, tiering, tuning,
               zipmap)
from .codegen import module as modmgr
from .codegen.cpu import CpuBackend
from .errors import ExecutionError, InvalidInput, JitortError, UnsupportedOp
from .executor import Executor, infer_shapes  # noqa: F401  (infer_shapes: this module's API)
from .feeds import InputInfo, available_memory  # noqa: F401  (this module's API)
from .importer import import_model
from .partition import CONTROL, DYNAMIC, HOST, INTERP, InterpStep, assign
from .passes import CPU_PIPELINE, CUDA_PIPELINE, PassReport, run_pipeline
from .pinning import check_threads, configure_blas
from .profiling import Profiler

#: Plans kept per segment (least recently used evicted first); read when a model is compiled.
PLAN_CACHE_SIZE = 64

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


class CompiledModel(Executor):
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
                 strict: bool | None = None, tiered: bool | None = None, **kwargs):
        # what a pickle rebuilds it from: the model as given, every keyword option (serialize.py)
        self._source, self._options = serialize.capture(model, locals())
        #: the settings of this compile (environment, keyword arguments overriding it)
        self.options = options.for_compile(strict=strict, tiered=tiered, **kwargs)
        configure_blas()
        #: raise :class:`UnsupportedOp` instead of running a node in the interpreter (default:
        #: the ``JITORT_STRICT`` environment variable, ``1`` meaning on)
        self.strict = self.options.strict
        #: compile generated code with bounds checking (IndexError instead of silent corruption)
        self.debug = bool(debug)
        self.threads = None if threads is None else check_threads(threads)
        self.plan_cache_size = PLAN_CACHE_SIZE
        self.graph = import_model(model, base_dir)
        self.input_names = [v.name for v in self.graph.inputs]
        self.output_names = [v.name for v in self.graph.outputs]
        #: ZipMap outputs, built as lists of dicts after each call (jitort/zipmap.py)
        self._zipmaps = zipmap.split(self.graph)
        self._all_outputs = list(range(len(self.graph.outputs)))
        # classifiers with string labels compute class indices, named by a string step
        string_ops.index_labels(self.graph)
        self.inputs = [InputInfo(v.name, v.dtype, v.shape if v.shape is not None else ())
                       for v in self.graph.inputs]
        self.original_node_count = len(self.graph.nodes)
        self.pass_report: PassReport = (
            run_pipeline(self.graph, CPU_PIPELINE if self.device == "cpu" else CUDA_PIPELINE,
                         options=self.options)
            if optimize else PassReport())
        self._backends = [CpuBackend()] if "cpu" in backends else []
        self.placement = assign(self.graph, self._backends, [
            v for v in self.graph.inputs if v.name in getattr(self, "plan_time_inputs", ())])
        reasons = self._compile_bodies()
        #: per-kernel timings when compiled with ``profile=True`` (see :meth:`end_profiling`)
        self.profiler = Profiler() if profile else None
        self._init_executor()
        self.fallback_reasons.update(reasons)
        self._check_strict()
        self._tiering = self._tier0 = None
        if self.options.tiered:
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
            self._tiering = tiering.Tiering(self, on_switch=self._leave_interpreter_tier)
        except UnsupportedOp:
            return
        self._tier0 = self._tiering
        if self._feeds.all_static():
            self._tiering.start(self._feeds.validate(self._feeds.examples({})))

    def _leave_interpreter_tier(self) -> None:
        self._tier0 = None  # calls that start from now on run compiled

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

    def _compile_bodies(self) -> dict:
        """Compile the bodies of If / Loop / Scan nodes (jitort/control_flow.py): strict
        body models, so a node is compiled as a whole or left to the interpreter; place the
        ops whose output shape depends on values on dynamic steps (jitort/dynamic_ops.py). Returns
        ``node label -> why it stays interpreted``."""
        self._flows = {}
        if self.device != "cpu" or not self._backends:
            return {}

        def compile_body(proto, plan_time=()):
            return BodyModel(proto, plan_time, threads=self.threads, debug=self.debug)
        self._flows, reasons = control_flow.claim(self.graph, self.placement, compile_body)
        # ops whose output shape depends on input values: compiled kernels between segments
        flows, why = dynamic_ops.claim(self.graph, self.placement)
        self._flows.update(flows)
        # ops reading or writing string tensors: numpy steps between the segments
        flows, why_str = string_ops.claim(self.graph, self.placement)
        self._flows.update(flows)
        return {**reasons, **why, **why_str}

    def _check_strict(self) -> None:
        """In strict mode, refuse a model with any node placed on the interpreter."""
        if not self.strict:
            return
        interp = [n for n in self.graph.nodes if self.placement[id(n)] == INTERP]
        if interp:
            names = ", ".join(f"{n.label} ({n.domain + '::' if n.domain else ''}{n.op_type})"
                              + (f" [{self.fallback_reasons[n.label]}]"
                                 if n.label in self.fallback_reasons else "")
                              for n in interp[:10])
            more = f" and {len(interp) - 10} more" if len(interp) > 10 else ""
            raise UnsupportedOp(f"strict mode: {len(interp)} node(s) would run in the "
                                f"interpreter, no compiled backend claims them: {names}{more}")

    # --- calling ---------------------------------------------------------------------------
    def __call__(self, *args, **kwargs) -> list:
        return self._execute(self._feeds.from_call(args, kwargs), None)

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, Any], run_options=None) -> list:
        """onnxruntime's convention: ``run(None, {"x": array})`` returns all outputs."""
        if not isinstance(feeds, dict):
            raise InvalidInput("feeds must be a dict mapping input names to arrays")
        return self._execute(feeds, output_names)

    def _execute(self, feeds: dict, output_names) -> list:
        if _OMP_FORKED:
            raise ExecutionError(
                "this process was forked from one that had started Numba's GNU OpenMP threads "
                "(NUMBA_THREADING_LAYER=omp), which cannot run in a forked child (Numba would "
                "kill it): start workers with multiprocessing's 'spawn' or 'forkserver' method, "
                "or leave the parallel regions to jitort's worker pool (unset "
                "JITORT_THREAD_POOL=0)")
        t = self._tier0  # read once: the whole call runs on one tier
        out = t.call(feeds, output_names) if t is not None else self._execute_compiled(
            feeds, output_names)
        if self._zipmaps:
            wanted = (self._all_outputs if output_names is None
                      else [self.output_names.index(o) for o in output_names])
            out = zipmap.wrap(out, wanted, self._zipmaps)
        return out

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
        self._execute(self._feeds.examples(shapes), None)

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
                + (f"control flow with compiled bodies {c[CONTROL]}, " if c.get(CONTROL) else "")
                + (f"dynamic (output shape from values) {c[DYNAMIC]}, " if c.get(DYNAMIC) else "")
                + f"interpreted {c.get(INTERP, 0)}; compiled share {self.compiled_share:.1%}")


def _compile_cpu(model: Any, **options) -> CompiledModel:
    tuning.ensure_background()  # first use on this machine: calibrate, detached, never waited on
    tuning.apply_runtime()      # decisions the kernels make at run time, from this machine's
    return CompiledModel(model, **options)


devices.register("cpu", _compile_cpu)


class BodyModel(CompiledModel):
    """An If / Loop / Scan body compiled as a model (jitort/control_flow.py): strict, not
    tiered; ``plan_time`` names inputs whose values key its plans (see
    :func:`jitort.partition.assign`)."""

    #: plans kept per segment when an input's value keys them: one per iteration number
    #: (planning one costs milliseconds; a loop longer than the cache plans every iteration)
    PLAN_TIME_CACHE_SIZE = 1024

    def __init__(self, model: Any, plan_time: Sequence[str] = (), **kwargs):
        self.plan_time_inputs = tuple(plan_time)
        super().__init__(model, strict=True, tiered=False, **kwargs)
        # plan_time, or a small input the partition made a plan-time value (a Slice bound
        # computed from the iteration number): either way one plan per value
        formal = {id(v) for v in self.graph.inputs}
        if plan_time or any(id(v) in formal for st in self.steps
                            for v in getattr(st, "value_inputs", ())):
            self.plan_cache_size = max(self.plan_cache_size, self.PLAN_TIME_CACHE_SIZE)


def compile(model: Any, *, threads: int | None = None, base_dir=None, optimize: bool = True,
            device: str = "cpu", **kwargs) -> CompiledModel:
    """Compile an ONNX model (path, bytes or ``onnx.ModelProto``) into a callable.

    ``device="cuda"`` runs what the CUDA backend supports on the GPU (or numba's CUDA
    simulator) and the rest on the CPU (:class:`jitort.cuda_runtime.CudaCompiledModel`).

    Returns at once on the CPU: the first calls run in the numpy interpreter while the program
    compiles in a background process, then calls switch to it (``model.wait_compiled()`` waits
    for that; ``tiered=False`` or ``JITORT_TIERED=0`` compiles on the first call instead).
    Other options: ``strict``, ``debug``, ``profile``, ``example_shapes`` (see
    :class:`CompiledModel`), and every per-compile field of :class:`jitort.Options` by name
    (``layout="nchw"``, ``packed_gemm=False``...), which overrides its ``JITORT_*`` variable;
    ``model.options`` holds the settings the model was compiled with.
    """
    return devices.factory(device)(model, threads=threads, base_dir=base_dir, optimize=optimize,
                                   **kwargs)


def compile_count() -> int:
    """Numba compilations in this process so far (cache loads excluded)."""
    return modmgr.compiles()

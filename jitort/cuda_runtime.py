"""CudaCompiledModel: a compiled model whose supported nodes run on a CUDA device.

``jitort.compile(model, device="cuda")`` builds one. Partitioning prefers the CUDA backend,
then the CPU backend, then the interpreter; shape computations stay host nodes. Steps:

* CUDA segments: generated drivers (:mod:`jitort.codegen.cuda`) over one device workspace
  per thread, planned by :func:`jitort.planner.plan_memory` like the CPU's; weights are
  uploaded once per model. A driver runs once per plan and thread, recording its launches;
  calls replay them over the plan's staging arrays on the thread's stream, as a CUDA graph
  from the second call where the GPU allows (:mod:`jitort.cuda_replay`).
* CPU segments and interpreter steps: exactly the CPU runtime's.

Values live where they were produced. A step that needs a value on the other side gets a copy
made once per call (``copies`` counts them; ``transfer_plan()`` lists the boundary crossings
the schedule implies). Inputs may be numpy arrays (copied to the device when a CUDA step reads
them) or device arrays (anything with ``__cuda_array_interface__``, or a simulator array:
no host copy; a CUDA segment copies it device to device into its staging array).
``__call__``/``run`` return numpy arrays; ``run_on_device`` returns device arrays of their own
(copies of the staging arrays the next call overwrites), or writes into the caller's.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from . import devices, tuning
from .codegen.cpu import CpuBackend
from .codegen.cuda import CudaBackend, CudaPlan, CudaSegmentCompiler
from .codegen.cuda_emit import _PLAIN  # the dtypes the workspace is viewed as
from .cuda_replay import Bound, copy_device, graph_support
from .errors import ExecutionError, InvalidInput, JitortError
from .executor import infer_shapes, value_key
from .partition import HOST, INTERP, InterpStep, Segment, assign, schedule
from .runtime import CompiledModel



class CudaUnavailable(JitortError, RuntimeError):
    """``device="cuda"`` was asked for but numba's CUDA target cannot run here."""


def _numpy_compat() -> None:
    """Give numpy >= 2.5 back its ``row_stack`` alias of ``vstack`` when numba-cuda needs it.

    numba-cuda 0.30.x registers an overload for ``np.row_stack`` whenever numpy >= 2.0, so on
    numpy 2.5 (which removed the alias) its first kernel compilation fails with ``AttributeError:
    module 'numpy' has no attribute 'row_stack'`` (NVIDIA/numba-cuda#907; numba-cuda is in
    maintenance mode and will not fix it). Seen on the GPU machine: numba-cuda 0.30.4, numpy
    2.5.2. The alias was always ``vstack`` itself, so restoring it changes nothing else.
    """
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


def cuda_module():
    """``numba.cuda`` if it can run kernels here (a GPU, or the simulator); else raise."""
    _numpy_compat()
    try:
        from numba import cuda
    except Exception as e:  # numba without its CUDA target, or a broken numba-cuda install
        raise CudaUnavailable(f"numba.cuda cannot be imported ({type(e).__name__}: {e}); "
                              "install numba-cuda (pip install 'jitort[cuda]')") from None
    if not cuda.is_available():
        raise CudaUnavailable("no usable CUDA GPU (set NUMBA_ENABLE_CUDASIM=1 before numba is "
                              "imported to run on the CUDA simulator)")
    return cuda


_DEVICE_TYPES: set = set()  # types seen to be device arrays whatever the instance (numba's)


def is_device_array(a) -> bool:
    """A CUDA device array: ``__cuda_array_interface__`` or the simulator's fake array.

    Reading the interface of a numba array builds a dict (microseconds, twice a call), so
    numba's array types are recognised by type once seen; other types (a PyTorch tensor has
    the property on CPU tensors too, raising there) are asked each time."""
    t = type(a)
    if t in _DEVICE_TYPES:
        return True
    if "numba" in t.__module__ and hasattr(a, "copy_to_host") and (
            "simulator" in t.__module__ or hasattr(a, "__cuda_array_interface__")):
        _DEVICE_TYPES.add(t)
        return True
    return hasattr(a, "__cuda_array_interface__")


def mixed_schedule(graph, placement: dict[int, str]) -> list:
    """Segments per backend (tagged ``seg.backend``) and interpreter steps, in node order.

    Each host node joins the segment of the next compiled node (the previous one at the end),
    so every segment has one backend. Segment inputs/outputs come from
    :func:`jitort.partition.schedule` run once per backend with the other backends' nodes
    masked as interpreter nodes.
    """
    owner: dict[int, str] = {}
    pending: list = []
    last = None
    for n in graph.nodes:
        p = placement[id(n)]
        if p == HOST:
            pending.append(n)
            continue
        if p != INTERP:
            for h in pending:
                owner[id(h)] = p
            pending, last = [], p
    for h in pending:
        owner[id(h)] = last or "cpu"
    position = {id(n): i for i, n in enumerate(graph.nodes)}
    steps = [InterpStep(n) for n in graph.nodes if placement[id(n)] == INTERP]
    for backend in sorted({p for p in placement.values() if p not in (HOST, INTERP)} | set(owner.values())):
        masked = {k: (p if p == backend or (p == HOST and owner[k] == backend) else INTERP)
                  for k, p in placement.items()}
        for st in schedule(graph, masked):
            if isinstance(st, Segment):
                st.backend = backend
                steps.append(st)
    steps.sort(key=lambda st: position[id(st.nodes[0] if isinstance(st, Segment) else st.node)])
    return steps


class _Env(dict):
    """Host values by ``id(value)``; ``dev`` holds the device values."""

    def __init__(self, *a):
        super().__init__(*a)
        self.dev: dict[int, Any] = {}


class CudaCompiledModel(CompiledModel):
    """A model compiled for a CUDA device (see the module docstring). Callable; thread-safe."""

    device = "cuda"

    def __init__(self, model: Any, **kwargs):
        self.cuda = cuda_module()
        self.copies: Counter = Counter()  # "h2d"/"d2h" tensor copies made by calls so far
        self._dev_consts: dict[int, Any] = {}
        self._placed = False
        super().__init__(model, **kwargs)

    # --- program ---------------------------------------------------------------------------
    def _build_program(self) -> None:
        if not self._placed:  # after a fallback the placement is kept as edited
            self.placement = assign(self.graph, [CudaBackend(), CpuBackend()])
            self._placed = True
        super()._build_program()
        self._fresh_outputs = self._fast = None  # outputs may stay on the device
        self._pin_blas = True

    def _schedule(self) -> list:
        return mixed_schedule(self.graph, self.placement)

    def _segment_compiler(self, step: Segment):
        if step.backend == "cuda":
            return CudaSegmentCompiler(step, self.placement, self._run_host, infer_shapes)
        return super()._segment_compiler(step)  # the CPU runtime's compiler, with its options

    def _step_runner(self, step: Segment):
        return self._cuda_segment if step.backend == "cuda" else self._cpu_segment

    def _fall_back(self, node, why: str) -> None:
        # a CUDA lowering that declines these shapes hands the node to the CPU backend first
        if self.placement.get(id(node)) == "cuda" and CpuBackend().supports(node):
            self.placement[id(node)] = "cpu"
            self.fallback_reasons[node.label] = f"cuda -> cpu: {why}"
            self._build_program()
        else:
            super()._fall_back(node, why)

    def transfer_plan(self) -> list[tuple[str, str]]:
        """``(value name, "h2d" | "d2h")`` for every boundary crossing the schedule implies when
        inputs are numpy arrays and outputs are returned as numpy arrays."""
        where = {id(v): "host" for v in self.graph.inputs}
        plan: list[tuple[str, str]] = []
        moved: set[tuple[int, str]] = set()

        def need(v, side):
            src = where.get(id(v), "host")
            if src != side and (id(v), side) not in moved:
                moved.add((id(v), side))
                plan.append((v.name, "h2d" if side == "device" else "d2h"))
        for st in self.steps:
            if isinstance(st, InterpStep):
                for v in st.node.all_inputs():
                    if not v.is_const:
                        need(v, "host")
                for o in st.node.outputs:
                    where[id(o)] = "host"
                continue
            side = "device" if st.backend == "cuda" else "host"
            for v in st.arg_inputs:
                need(v, side)
            for v in st.value_inputs:
                need(v, "host")
            for o in st.outputs:
                where[id(o)] = "host" if o not in st.arg_outputs else side
        for v in self.graph.outputs:
            if not v.is_const:
                need(v, "host")
        return plan

    # --- calling ---------------------------------------------------------------------------
    def run_on_device(self, output_names: Sequence[str] | None, feeds: dict[str, Any],
                      outputs: Sequence[Any] | None = None) -> list:
        """Like :meth:`run`, but outputs stay device arrays (no host copy when made on the
        device: a device-to-device copy of the plan's staging array).

        ``outputs``: device arrays to write the outputs into (one per name asked, each of the
        output's shape and dtype, C-contiguous; any ``__cuda_array_interface__`` array), as
        onnxruntime's I/O binding: a call then allocates nothing on the device. They are
        returned. Without them each call returns new arrays."""
        if not isinstance(feeds, dict):
            raise InvalidInput("feeds must be a dict mapping input names to arrays")
        return self._execute(feeds, output_names, on_device=True, into=outputs)

    def _execute(self, feeds: dict, output_names, on_device: bool = False, into=None) -> list:
        dev_feeds = {k: a for k, a in feeds.items() if is_device_array(a)}
        host_view = dict(feeds)
        for k, a in dev_feeds.items():  # validated through a same-shape stand-in (not touched)
            host_view[k] = np.empty(tuple(a.shape), np.dtype(a.dtype))
        arrays = self.validate(host_view)
        env = _Env()
        for v, a in zip(self.graph.inputs, arrays):
            if v.name in dev_feeds:
                env.dev[id(v)] = self._adopt(v.name, dev_feeds[v.name])
            else:
                env[id(v)] = a
        if not self._run_program(env):
            return self._execute(feeds, output_names, on_device, into)
        if on_device:
            return self._collect_device(env, output_names, into)
        for v in self.graph.outputs:
            if not v.is_const:
                self._host(id(v), env)
        return self.collect(env, output_names)

    def _adopt(self, name: str, a):
        if not hasattr(a, "copy_to_host"):  # a foreign array (CuPy, PyTorch...): wrap, no copy
            a = self.cuda.as_cuda_array(a)
        contiguous = a.is_c_contiguous() if hasattr(a, "is_c_contiguous") else True
        if not contiguous:
            raise InvalidInput(f"device input {name!r} must be C-contiguous")
        return a

    def _collect_device(self, env: _Env, output_names, into=None) -> list:
        index = {n: i for i, n in enumerate(self.output_names)}
        names = self.output_names if output_names is None else list(output_names)
        missing = [n for n in names if n not in index]
        if missing:
            raise InvalidInput(f"unknown output name(s) {missing}; outputs are {self.output_names}")
        if into is not None and len(into) != len(names):
            raise InvalidInput(f"outputs: {len(into)} arrays given for {len(names)} outputs "
                               f"{names}")
        out = []
        for k, name in enumerate(names):
            v = self.graph.outputs[index[name]]
            dst = None if into is None else self._output_array(name, into[k], env, v)
            got = (self._to_device(v.const, dst) if v.is_const
                   else self._device_copy(id(v), env, dst))
            out.append(got if dst is None else into[k])
        self._stream().synchronize()
        return out

    def _output_array(self, name: str, a, env: _Env, v):
        """``a`` (a caller's output array for ``name``) as a numba device array, checked
        against the value's shape and dtype."""
        if not is_device_array(a):
            raise InvalidInput(f"outputs: the array for {name!r} is not a device array")
        a = self._adopt(name, a)
        src = v.const if v.is_const else env.dev.get(id(v), env.get(id(v)))
        if tuple(a.shape) != tuple(src.shape) or np.dtype(a.dtype) != np.dtype(src.dtype):
            raise InvalidInput(f"outputs: {name!r} is {np.dtype(src.dtype)} {tuple(src.shape)}, "
                               f"the array given {np.dtype(a.dtype)} {tuple(a.shape)}")
        return a

    def _device_copy(self, key: int, env: _Env, dst=None):
        """The value copied into ``dst``, or into a device array of its own (a staging array
        is the next call's); returns the array written."""
        src = env.dev.get(key)
        if src is None:
            return self._to_device(env[key], dst)
        stream = self._stream()
        if dst is None:
            dst = self.cuda.device_array(src.shape, src.dtype, stream=stream)
        copy_device(dst, src, src.size * np.dtype(src.dtype).itemsize, stream)
        return dst

    def _to_device(self, host, dst=None):
        """A host value uploaded into ``dst``, or into a device array of its own; returns the
        array written."""
        self.copies["h2d"] += 1
        host, stream = np.ascontiguousarray(host), self._stream()
        if dst is None:
            return self.cuda.to_device(host, stream=stream)
        dst.copy_to_device(host, stream=stream)
        return dst

    # --- moving values ---------------------------------------------------------------------
    def _host(self, key: int, env: _Env):
        a = env.get(key)
        if a is None and key in env.dev:
            stream = self._stream()
            a = env[key] = env.dev[key].copy_to_host(stream=stream)
            stream.synchronize()
            self.copies["d2h"] += 1
        return a

    def _interp_step(self, step: InterpStep, env: _Env) -> None:
        for v in step.node.all_inputs():
            if not v.is_const:
                self._host(id(v), env)
        self._interp(step.node, env)

    def _cpu_segment(self, seg: Segment, env: _Env) -> None:
        for i in seg.input_ids:
            if i not in env:
                self._host(i, env)
        self._segment(seg, env)

    def _cuda_segment(self, seg: Segment, env: _Env) -> None:
        arrays = {}
        for v in seg.inputs:
            arrays[id(v)] = env[id(v)] if id(v) in env else env.dev[id(v)]
        for v in seg.value_inputs:
            arrays[id(v)] = self._host(id(v), env)
        key = tuple(tuple(arrays[i].shape) for i in seg.input_ids)
        if seg.value_inputs:
            key += tuple(value_key(arrays[id(v)]) for v in seg.value_inputs)
        plans = self._plans[id(seg)]
        plan: CudaPlan | None = plans.get(key)
        if plan is None:
            with self._lock:
                plan = self._compilers[id(seg)].plan(arrays)
                plan.device_consts = [self._upload(c) for c in plan.consts]
                plans[key] = plan
                if len(plans) > self.plan_cache_size:
                    plans.popitem(last=False)
        try:
            bound = self._bound(plan, seg, arrays)
            stream = bound.stream
            for i, x, n, view in zip(seg.arg_ids, bound.X, bound.in_sizes, bound.inputs):
                src = env.dev.get(i)
                if src is None:  # a host value: uploaded straight into the staging array
                    if n:
                        x.copy_to_device(np.ascontiguousarray(env[i]).reshape(-1), stream=stream)
                    self.copies["h2d"] += 1
                    env.dev[i] = view
                else:
                    copy_device(x, src, n * x.dtype.itemsize, stream)
            bound.run()
        except JitortError:
            raise
        except Exception as e:
            raise ExecutionError(f"CUDA segment failed: {type(e).__name__}: {e}") from e
        if bound.failed():
            raise InvalidInput("an index input (of Gather or GatherElements) is out of range")
        for i, y in zip(seg.output_ids, bound.outputs):
            env.dev[i] = y
        if plan.exports:
            env.update(plan.exports)

    def _bound(self, plan: CudaPlan, seg: Segment, arrays: dict) -> Bound:
        """``plan`` bound to this thread's workspace and stream (see :mod:`jitort.cuda_replay`);
        bound again when the workspace has grown since."""
        ws = self._workspace_views(plan.ws_bytes)
        bound = getattr(plan.local, "bound", None)
        if bound is None or bound.ws is not ws:
            stream = self._stream()
            why = None if self.options.cuda_graphs else "cuda_graphs is off"
            bound = plan.local.bound = Bound(
                self.cuda, plan, ws, [arrays[i].shape for i in seg.arg_ids],
                [np.dtype(arrays[i].dtype) for i in seg.arg_ids], seg.output_dtypes, stream,
                why or graph_support(stream))
        return bound

    def _stream(self):
        """The calling thread's stream: every launch and copy of its calls, in order."""
        s = getattr(self._tls, "stream", None)
        if s is None:
            s = self._tls.stream = self.cuda.stream()
        return s

    def replay_engines(self) -> Counter:
        """Bound plans of the calling thread per replay engine (``launches``, ``graph``)."""
        return Counter(b.engine.kind for p in self.plans()
                       if (b := getattr(p.local, "bound", None)) is not None)

    def _upload(self, host: np.ndarray):
        """One device copy per constant for the model's lifetime (weights are uploaded once)."""
        got = self._dev_consts.get(id(host))
        if got is None:
            got = self._dev_consts[id(host)] = (host, self.cuda.to_device(host))
        return got[1]

    def _workspace_views(self, nbytes: int) -> dict:
        views = getattr(self._tls, "dws", None)
        if views is None or views["_bytes"] < nbytes:
            nbytes = max(64, -(-nbytes // 64) * 64)
            ws = self.cuda.device_array(nbytes, np.uint8)
            views = {dt.name: ws.view(dt) for dt in _PLAIN}
            views["_bytes"] = nbytes
            self._tls.dws = views
        return views

    def release(self) -> None:
        super().release()  # drops the plans, and with them their bound arrays
        self._tls.dws = None

    def placement_counts(self) -> Counter:
        """Nodes per placement: ``cuda``, ``cpu`` (compiled), ``host`` (plan time), ``interp``."""
        return super().placement_counts()

    def summary(self) -> str:
        c = self.placement_counts()
        return (f"{self.original_node_count} nodes imported, {len(self.graph.nodes)} after passes; "
                f"cuda {c.get('cuda', 0)}, cpu {c.get('cpu', 0)}, host {c.get(HOST, 0)}, "
                f"interpreted {c.get(INTERP, 0)}; boundary copies per call "
                f"{len(self.transfer_plan())}")


def _compile_cuda(model: Any, **options) -> CudaCompiledModel:
    cuda_module()              # CudaUnavailable before anything else where there is no CUDA
    for device in ("cpu", "cuda"):  # its CPU segments run the CPU's kernels
        tuning.ensure_background(device)  # first use on this CPU / GPU: calibrate, detached
        tuning.apply_runtime(device)      # the launchers' and kernels' run-time decisions
    return CudaCompiledModel(model, **options)


devices.register("cuda", _compile_cuda)

__all__ = ["CudaCompiledModel", "CudaUnavailable", "cuda_module", "is_device_array",
           "mixed_schedule"]

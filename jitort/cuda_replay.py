"""A CUDA plan's launches, recorded once per plan and thread, replayed by every call.

A CUDA segment's driver (:mod:`jitort.codegen.cuda_render`) launches, for one input-shape
signature, the same kernels with the same arguments on every call, provided the arrays it is
given stay put. :class:`Bound` makes them stay put: one plan bound to one thread's workspace,
the model's constants on the device and staging arrays of its own for the segment's inputs,
outputs and error flag. The driver runs once, inside ``jitort.kernels.cuda.launch.recording``,
and lists its kernel launches and library calls (cuBLAS through CuPy); each call then copies the
inputs into the staging arrays and replays the list on the thread's stream with one of two
engines:

* :class:`Launches` -- record by record: launches through numba's launch path, library calls
  on the stream (portable; the only engine of the CUDA simulator);
* :class:`Graph` -- the list captured once into a CUDA graph by stream capture
  (``cuStreamBeginCapture`` .. ``cuStreamEndCapture`` through the NVIDIA bindings numba-cuda
  runs on), then one ``cuGraphLaunch`` a call: the host cost of a call no longer grows with the
  number of launches or of their arguments.

The first call of a bound plan runs :class:`Launches` (it compiles and loads the kernels, which
a capture must not do); the second captures. A capture that fails leaves :class:`Launches` in
place, with the reason in :attr:`Bound.why`.
"""
from __future__ import annotations

import weakref

import numpy as np

from .kernels.cuda.launch import recording


class Launches:
    """Replays recorded work (``jitort.kernels.cuda.launch``'s ``Launch`` and
    ``LibraryCall`` records) on ``stream``, record by record.

    Each launch is configured when it is made, not once ahead: numba caches configurations
    on a GPU, but the simulator's ``kernel[grid, block]`` sets the kernel's one configuration
    and returns the kernel itself (two launches of one kernel would share the last grid)."""

    kind = "launches"

    def __init__(self, launches: list, stream):
        self.launches, self.stream = launches, stream

    def __call__(self) -> None:
        stream = self.stream
        for record in self.launches:
            record.run(stream)


def graph_support(stream) -> str | None:
    """None if :class:`Graph` can capture on ``stream`` here, else why not."""
    if "simulator" in type(stream).__module__:
        return "the CUDA simulator has no graphs"
    try:
        from cuda.bindings import driver  # the NVIDIA bindings numba-cuda runs on
    except ImportError as e:
        return f"no NVIDIA CUDA bindings (cuda.bindings: {e})"
    if not hasattr(driver, "cuStreamBeginCapture"):
        return "cuda.bindings without stream capture"
    return None


def _checked(result, what: str):
    """The values of a ``cuda.bindings`` call's ``(CUresult, *values)``; raise on an error."""
    from cuda.bindings import driver as cu
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err!r}")
    return values[0] if len(values) == 1 else None


def _stream_handle(stream):
    from cuda.bindings import driver as cu
    h = stream.handle
    return cu.CUstream(int(getattr(h, "value", h) or 0))


def _destroy(graph, graph_exec) -> None:
    from cuda.bindings import driver as cu
    cu.cuGraphExecDestroy(graph_exec)
    cu.cuGraphDestroy(graph)


def _pointer(a) -> int:
    return int(a.__cuda_array_interface__["data"][0])


def copy_device(dst, src, nbytes: int, stream) -> None:
    """``dst = src`` for two C-contiguous device arrays of ``nbytes`` bytes, on ``stream``.

    On a GPU one ``cuMemcpyDtoDAsync`` through the NVIDIA bindings: numba's ``copy_to_device``
    checks and re-slices both arrays first, Python work that a call's copies in and out would
    pay every time. Elsewhere (the simulator), numba's copy."""
    if not nbytes:
        return
    if graph_support(stream) is None:
        from cuda.bindings import driver as cu
        _checked(cu.cuMemcpyDtoDAsync(_pointer(dst), _pointer(src), nbytes,
                                      _stream_handle(stream)), "cuMemcpyDtoDAsync")
    else:
        dst.copy_to_device(src if src.shape == dst.shape else src.reshape(dst.shape),
                           stream=stream)


class Graph:
    """The launches of ``replay`` captured once on ``stream`` into a CUDA graph; a call is one
    ``cuGraphLaunch`` on that stream."""

    kind = "graph"

    def __init__(self, replay: Launches, stream):
        from cuda.bindings import driver as cu
        self._cu = cu
        self.stream = _stream_handle(stream)
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        _checked(cu.cuStreamBeginCapture(self.stream, mode), "cuStreamBeginCapture")
        try:
            replay()
        except BaseException:
            cu.cuStreamEndCapture(self.stream)  # abandon the capture; the stream is usable again
            raise
        graph = _checked(cu.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
        try:
            self.exec = _checked(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except BaseException:
            cu.cuGraphDestroy(graph)
            raise
        weakref.finalize(self, _destroy, graph, self.exec)

    def __call__(self) -> None:
        err, = self._cu.cuGraphLaunch(self.exec, self.stream)
        if err != self._cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuGraphLaunch failed: {err!r}")


class Bound:
    """One plan bound to one thread's arrays: staging arrays for the segment's inputs (``X``)
    and outputs (``Y``), the error flag (``E``), the workspace views ``ws`` and the stream
    every launch goes to; ``launches`` is the driver's recording over them."""

    def __init__(self, cuda, plan, ws: dict, in_shapes, in_dtypes, out_dtypes, stream,
                 graphs: str | None):
        self.plan, self.ws, self.stream = plan, ws, stream
        self.in_sizes = [int(np.prod(s, dtype=np.int64)) for s in in_shapes]
        out_sizes = [int(np.prod(s, dtype=np.int64)) for s in plan.out_shapes]
        self.X = [cuda.device_array(max(1, n), dt) for n, dt in zip(self.in_sizes, in_dtypes)]
        self.Y = [cuda.device_array(max(1, n), dt) for n, dt in zip(out_sizes, out_dtypes)]
        # each value as the graph sees it: the staging array reshaped once, here
        self.inputs = [(x if n else x[:0]).reshape(s)
                       for x, n, s in zip(self.X, self.in_sizes, in_shapes)]
        self.outputs = [(y if n else y[:0]).reshape(s)
                        for y, n, s in zip(self.Y, out_sizes, plan.out_shapes)]
        self.E = cuda.device_array(1, np.int32) if plan.uses_err else None
        self.flag = np.zeros(1, np.int32)
        with recording() as launches:
            plan.driver(ws, plan.device_consts, self.X, self.Y, self.E, plan.d, plan.o)
        self.launches = launches
        self.engine = Launches(launches, stream)
        self.why = graphs  # why the engine stays Launches (None: capture at the second call)
        self.calls = 0

    def run(self) -> None:
        """Replay the launches on the bound stream (asynchronously)."""
        if self.calls == 1 and self.why is None:
            try:
                self.engine = Graph(self.engine, self.stream)
            except Exception as e:  # a driver without graphs, a launch path that cannot be captured
                self.why = f"capture failed: {type(e).__name__}: {e}"
        self.calls += 1
        self.engine()

    def failed(self) -> bool:
        """Whether the error flag is set (Gather's index check); waits for the stream."""
        if self.E is None:
            return False
        self.E.copy_to_host(self.flag, stream=self.stream)
        self.stream.synchronize()
        return bool(self.flag[0])

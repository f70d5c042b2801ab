"""Recorded launches (jitort.kernels.cuda.launch) and their replay (jitort.cuda_replay): a plan's
driver runs once per thread, every call replays its launches over staging arrays that stay put.

The graph engine needs a GPU: here it is checked against a stand-in for the NVIDIA bindings
(the order of the capture calls, the fallback when a capture fails); with JITORT_TEST_CUDA=gpu,
test_graph_replay_on_a_gpu runs it for real."""
import ast
import contextlib
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import jitort
from jitort import cuda_replay
from jitort.errors import InvalidInput
from tests.cuda.conftest import SIMULATOR
from tests.helpers import F32, make_model

from tests.cuda.test_cuda_models import _ort, _w

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(7)


def mlp():
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["h1"]), helper.make_node("Tanh", ["h1"], ["h2"]),
             helper.make_node("MatMul", ["h2", "w2"], ["o"]),
             helper.make_node("Softmax", ["o"], ["y"], axis=-1)]
    return make_model(nodes, [("x", F32, ["B", 8])], [("y", F32, ["B", 4])],
                      {"w1": _w(8, 16), "b1": _w(16), "w2": _w(16, 4)})


def tanh_t():
    """Tanh into a workspace buffer, then a transposing copy: two light launches (the
    simulator runs a thread per CUDA thread)."""
    nodes = [helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("Transpose", ["t"], ["y"], perm=[1, 0])]
    return make_model(nodes, [("x", F32, ["B", 4])], [("y", F32, [4, "B"])])


def embedding():
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("Relu", ["e"], ["y"])]
    return make_model(nodes, [("ids", helper.TensorProto.INT64, ["N"])], [("y", F32, ["N", 3])],
                      {"table": _w(5, 3)})


def _bound(cm):
    (plan,) = cm.plans()
    return plan, plan.local.bound


def test_recording_lists_launches_and_runs_none(cuda):
    from jitort.kernels.cuda import data
    from jitort.kernels.cuda.launch import recording
    x = cuda.to_device(np.arange(6, dtype=np.float32))
    y = cuda.to_device(np.zeros(6, np.float32))
    with recording() as outer:
        with recording() as inner:
            data.copy_nd(x, 0, (1,), y, 0, (1,), (6,))
        data.clear_flag(y)
    assert not y.copy_to_host().any()  # nothing ran
    ((kernel, grid, block, args),) = inner
    assert kernel is data._copy_k and (grid, block) == (1, data.BLOCK)
    assert args[0] is x and args[3] is y
    assert [r.kernel for r in outer] == [data._clear_k]  # the inner recording was its own
    data.copy_nd(x, 0, (1,), y, 0, (1,), (6,))  # outside a recording: launched
    np.testing.assert_array_equal(y.copy_to_host(), np.arange(6))


def test_a_plan_records_once_and_replays_every_call(cuda, monkeypatch):
    from jitort.kernels.cuda import blas
    monkeypatch.setattr(blas, "_lib", None)  # jitort's GEMM kernel, on a GPU too
    m = mlp()
    cm = jitort.compile(m, device="cuda")
    xs = [RNG.standard_normal((3, 8)).astype(np.float32) for _ in range(3)]
    for x in xs:  # a new input each call: the staging arrays are refilled, not re-recorded
        np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
        plan, bound = _bound(cm)
        if x is xs[0]:
            first = bound
    assert bound is first and bound.calls == 3
    # the recording is the driver's launches in call order: MatMul+Add+Tanh (one GEMM with
    # its epilogue), MatMul, Softmax
    from jitort.kernels.cuda import gemm, softmax
    f32 = np.dtype(np.float32)
    assert [r.kernel for r in bound.launches] == [gemm._KERNELS[f32]] * 2 + [softmax._KERNELS[f32]]
    assert len(plan.calls) == 3
    assert bound.launches[0].args[0] is bound.X[0] and bound.launches[2].args[2] is bound.Y[0]
    assert cm.replay_engines() == {"launches": 1}
    assert bound.why == "the CUDA simulator has no graphs"


def test_graphs_off_is_reported(cuda):
    cm = jitort.compile(mlp(), device="cuda", cuda_graphs=False)
    cm(_w(2, 8))
    assert _bound(cm)[1].why == "cuda_graphs is off"


def test_device_outputs_are_not_overwritten_by_the_next_call(cuda):
    m = mlp()
    cm = jitort.compile(m, device="cuda")
    x1, x2 = _w(2, 8), _w(2, 8)
    (y1,) = cm.run_on_device(None, {"x": cuda.to_device(x1)})
    (y2,) = cm.run_on_device(None, {"x": x2})
    np.testing.assert_allclose(y1.copy_to_host(), _ort(m, {"x": x1})[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y2.copy_to_host(), _ort(m, {"x": x2})[0], rtol=1e-5, atol=1e-6)
    staging = _bound(cm)[1].outputs[0]
    assert y1 is not staging and y2 is not staging


def test_outputs_written_into_the_callers_arrays(cuda):
    """``run_on_device(..., outputs=...)`` writes into the caller's arrays (returned as given)
    and allocates none of its own; a host-made output (Shape, a plan-time value) too."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Shape", ["x"], ["s"])]
    m = make_model(nodes, [("x", F32, [2, 8])], [("y", F32, [2, 4]), ("s", 7, [2])],
                   {"w": _w(8, 4)})
    cm = jitort.compile(m, device="cuda")
    ys = cuda.device_array((2, 4), np.float32)
    ss = cuda.device_array(2, np.int64)
    for _ in range(2):
        x = _w(2, 8)
        got = cm.run_on_device(None, {"x": cuda.to_device(x)}, outputs=[ys, ss])
        assert got[0] is ys and got[1] is ss
        want = _ort(m, {"x": x})
        np.testing.assert_allclose(ys.copy_to_host(), want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(ss.copy_to_host(), want[1])
    (only,) = cm.run_on_device(["s"], {"x": cuda.to_device(x)}, outputs=[ss])
    assert only is ss


@pytest.mark.parametrize("outputs,match", [
    (lambda cuda: [cuda.device_array((4, 5), np.float32)], r"'y' is float32 \(4, 4\)"),
    (lambda cuda: [cuda.device_array((4, 4), np.float64)], "the array given float64"),
    (lambda cuda: [np.zeros((4, 4), np.float32)], "not a device array"),
    (lambda cuda: [], "0 arrays given for 1 outputs"),
])
def test_outputs_that_do_not_fit_are_refused(cuda, outputs, match):
    cm = jitort.compile(tanh_t(), device="cuda")
    with pytest.raises(InvalidInput, match=match):
        cm.run_on_device(None, {"x": _w(4, 4)}, outputs=outputs(cuda))


def test_threads_replay_their_own_bound_arrays(cuda):
    """Each thread binds the plan to staging arrays of its own, so calls of several threads
    interleave (one at a time on the simulator, which runs no two kernels at once)."""
    m = tanh_t()
    cm = jitort.compile(m, device="cuda")
    cm(_w(4, 4))
    xs = [_w(4, 4) for _ in range(4)]
    got, bounds = {}, {}
    gate = threading.Lock() if SIMULATOR else contextlib.nullcontext()

    def work(k):
        for _ in range(3):
            with gate:
                got[k] = cm(xs[k])[0]
        bounds[k] = next(cm.plans()).local.bound
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, x in enumerate(xs):
        np.testing.assert_allclose(got[k], _ort(m, {"x": x})[0], rtol=1e-6, atol=1e-6)
    assert len({id(b.X[0]) for b in bounds.values()}) == 4


def test_gather_index_error_then_a_good_call(cuda):
    """The driver clears the flag first (the plan's first call), so an out-of-range index
    raises once and the next good call runs clean."""
    m = embedding()
    cm = jitort.compile(m, device="cuda")
    good = np.array([0, 4, -1], np.int64)
    np.testing.assert_allclose(cm(good)[0], _ort(m, {"ids": good})[0], rtol=1e-6)
    with pytest.raises(InvalidInput, match="out of range"):
        cm(np.array([0, 5, 1], np.int64))
    np.testing.assert_allclose(cm(good)[0], _ort(m, {"ids": good})[0], rtol=1e-6)
    plan, bound = _bound(cm)
    from jitort.codegen.cuda import _data
    assert plan.calls[0].callee == _data.clear_flag and bound.calls == 3


def test_a_grown_workspace_binds_the_plan_again(cuda):
    m = tanh_t()
    cm = jitort.compile(m, device="cuda")
    small, big = _w(1, 4), _w(24, 4)
    cm(small)
    plan_small = next(cm.plans())
    before = plan_small.local.bound
    cm(big)  # a larger workspace replaces the thread's one
    np.testing.assert_allclose(cm(small)[0], _ort(m, {"x": small})[0], rtol=1e-5, atol=1e-6)
    after = plan_small.local.bound
    assert after is not before and after.ws is cm._tls.dws


class _FakeDriver(types.ModuleType):
    """Stands in for cuda.bindings.driver: logs the calls the graph engine makes."""

    class CUresult:
        CUDA_SUCCESS = 0

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

    def __init__(self, fail_instantiate=False):
        super().__init__("cuda.bindings.driver")
        self.log, self.fail = [], fail_instantiate
        self.CUstream = lambda h: ("stream", h)
        for name in ("cuStreamBeginCapture", "cuStreamEndCapture", "cuGraphInstantiate",
                     "cuGraphLaunch", "cuGraphExecDestroy", "cuGraphDestroy",
                     "cuMemcpyDtoDAsync"):
            setattr(self, name, self._logged(name))

    def _logged(self, name):
        def call(*args):
            self.log.append(name)
            self.args = args
            if name == "cuStreamEndCapture":
                return 0, "graph"
            if name == "cuGraphInstantiate":
                return (700, None) if self.fail else (0, "exec")
            return (0,)
        return call


@pytest.fixture
def fake_driver(monkeypatch):
    def install(**kw):
        drv = _FakeDriver(**kw)
        pkg = types.ModuleType("cuda.bindings")
        pkg.driver = drv
        monkeypatch.setitem(sys.modules, "cuda", types.ModuleType("cuda"))
        monkeypatch.setitem(sys.modules, "cuda.bindings", pkg)
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
        return drv
    return install


class _Stream:
    handle = 42


def test_graph_engine_captures_once_and_launches_per_call(fake_driver):
    drv = fake_driver()
    replayed = []
    graph = cuda_replay.Graph(lambda: replayed.append(drv.log[-1]), _Stream())
    # the launches ran inside the capture, not before or after it
    assert replayed == ["cuStreamBeginCapture"]
    assert drv.log == ["cuStreamBeginCapture", "cuStreamEndCapture", "cuGraphInstantiate"]
    graph()
    graph()
    assert drv.log[3:] == ["cuGraphLaunch", "cuGraphLaunch"]


def test_a_failed_capture_ends_it_and_keeps_launches(fake_driver):
    drv = fake_driver()

    def broken():
        raise ValueError("not capturable")
    with pytest.raises(ValueError):
        cuda_replay.Graph(broken, _Stream())
    assert drv.log == ["cuStreamBeginCapture", "cuStreamEndCapture"]  # the stream is released
    drv = fake_driver(fail_instantiate=True)
    with pytest.raises(RuntimeError, match="cuGraphInstantiate failed: 700"):
        cuda_replay.Graph(lambda: None, _Stream())
    assert drv.log[-1] == "cuGraphDestroy"


def test_device_copies_on_a_gpu_are_one_driver_call(fake_driver):
    """Outside the simulator a device-to-device copy is one cuMemcpyDtoDAsync of the two
    arrays' pointers on the stream (numba's copy re-slices both arrays first)."""
    drv = fake_driver()

    class Dev:
        def __init__(self, ptr):
            self.__cuda_array_interface__ = {"data": (ptr, False)}
    cuda_replay.copy_device(Dev(4096), Dev(8192), 64, _Stream())
    assert drv.log == ["cuMemcpyDtoDAsync"] and drv.args == (4096, 8192, 64, ("stream", 42))
    cuda_replay.copy_device(Dev(4096), Dev(8192), 0, _Stream())  # nothing to copy
    assert drv.log == ["cuMemcpyDtoDAsync"]


def test_bound_falls_back_when_the_capture_fails(cuda, fake_driver, monkeypatch):
    """A Bound whose capture raises keeps replaying launches, with the reason."""
    monkeypatch.setattr(cuda_replay, "_stream_handle", lambda stream: "stream")
    m = mlp()
    cm = jitort.compile(m, device="cuda")
    x = _w(2, 8)
    cm(x)
    plan, bound = _bound(cm)
    fake_driver(fail_instantiate=True)
    bound.why = None  # as on a GPU: capture at the second call
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert bound.engine.kind == "launches"
    assert bound.why.startswith("capture failed: RuntimeError: cuGraphInstantiate failed")


def test_every_library_launch_goes_through_launch():
    """No ``kernel[grid, block](...)`` in kernels/cuda outside launch.py: a launch made any
    other way would be missing from a recording, and a replay would skip it."""
    offenders = []
    for f in sorted((ROOT / "kernels" / "cuda").glob("*.py")):
        if f.name == "launch.py":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                offenders.append(f"{f.name}:{node.lineno}")
    assert not offenders, offenders


@pytest.mark.skipif(SIMULATOR, reason="CUDA graphs need a GPU (JITORT_TEST_CUDA=gpu)")
def test_graph_replay_on_a_gpu(cuda):
    m = mlp()
    cm = jitort.compile(m, device="cuda")
    for _ in range(3):
        x = _w(5, 8)
        np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert cm.replay_engines() == {"graph": 1}, _bound(cm)[1].why

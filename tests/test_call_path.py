"""The per-call path: a one-segment program's fast path gives what the general step loop gives,
hands every unusual call to it, and leaves the caller's thread settings as it found them."""
import numba
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import jitort
from jitort.errors import InvalidInput
from jitort.kernels.cpu import blas

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                          list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _two_outputs():
    # outputs listed in the reverse of the order the segment writes them
    return _model([helper.make_node("Add", ["x", "y"], ["s"]),
                   helper.make_node("Mul", ["s", "x"], ["p"]),
                   helper.make_node("MatMul", ["p", "w"], ["m"])],
                  [("x", F32, ["N", 8]), ("y", F32, ["N", 8])],
                  [("m", F32, None), ("s", F32, None)],
                  [helper.make_tensor("w", F32, [8, 4], np.linspace(-1, 1, 32).tolist())])


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def test_fast_path_taken_and_matches_the_general_path():
    m = _two_outputs()
    cm = jitort.compile(m, threads=1)
    assert cm._fast is not None and cm._fast[1] is not None  # outputs reordered
    rng = np.random.default_rng(0)
    for n in (3, 5, 3, 1, 5):  # new shapes are checked and planned on the fast path too
        feeds = {"x": rng.standard_normal((n, 8), np.float32),
                 "y": rng.standard_normal((n, 8), np.float32)}
        ref = _ort(m, feeds)
        fast = cm.run(None, feeds)
        general = cm.run(["m", "s"], feeds)  # named outputs: the step loop
        for a, b, r in zip(fast, general, ref):
            np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(a, b)
        again = cm.run(None, feeds)
        assert all(a is not b for a, b in zip(fast, again))  # a fresh output every call
        np.testing.assert_array_equal(fast[0], again[0])


def test_fast_path_takes_inputs_the_segment_reads_in_another_order():
    # the segment reads b before a: its driver takes (b, a), the graph's inputs are (a, b)
    m = _model([helper.make_node("Mul", ["b", "b"], ["t"]),
                helper.make_node("Sub", ["t", "a"], ["y"])],
               [("a", F32, ["N", 4]), ("b", F32, ["N", 4])], [("y", F32, None)])
    cm = jitort.compile(m, threads=1)
    assert cm._fast is not None and cm._fast[3] == [1, 0]
    rng = np.random.default_rng(1)
    for n in (2, 7, 2):
        feeds = {"a": rng.standard_normal((n, 4), np.float32),
                 "b": rng.standard_normal((n, 4), np.float32)}
        got = cm.run(None, feeds)
        np.testing.assert_allclose(got[0], _ort(m, feeds)[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got[0], cm.run(["y"], feeds)[0])  # the step loop


def test_fast_path_hands_odd_feeds_to_the_checks():
    cm = jitort.compile(_two_outputs(), threads=1)
    x = np.ones((4, 8), np.float32)
    cm.run(None, {"x": x, "y": x})  # plans (4, 8)
    ref = cm.run(None, {"x": x, "y": x})
    with pytest.raises(InvalidInput, match="dtype float64"):
        cm.run(None, {"x": x.astype(np.float64), "y": x})
    with pytest.raises(InvalidInput, match="unknown input name"):
        cm.run(None, {"x": x, "z": x})
    with pytest.raises(InvalidInput, match="missing input 'y'"):
        cm.run(None, {"x": x})
    with pytest.raises(InvalidInput, match="N"):
        cm.run(None, {"x": x, "y": np.ones((3, 8), np.float32)})
    # a strided view and a Fortran-ordered array are made contiguous, with the same results
    wide = np.ones((4, 16), np.float32)[:, ::2]
    for a, b in zip(cm.run(None, {"x": wide, "y": np.asfortranarray(x)}), ref):
        np.testing.assert_array_equal(a, b)


def test_threads_and_blas_settings_restored_after_calls():
    cm = jitort.compile(_two_outputs(), threads=1)
    x = np.ones((64, 8), np.float32)
    before_numba, before_blas = numba.get_num_threads(), blas.get_threads()
    for _ in range(3):
        cm.run(None, {"x": x, "y": x})
    assert numba.get_num_threads() == before_numba
    assert blas.get_threads() == before_blas


def test_blas_flag_follows_the_kernel_modules():
    assert blas.calls_blas("gemm") and blas.calls_blas("conv")
    assert not blas.calls_blas("data") and not blas.calls_blas("reduce")
    add = _model([helper.make_node("Add", ["x", "y"], ["z"])],
                 [("x", F32, [2, 3]), ("y", F32, [2, 3])], [("z", F32, None)])
    cm = jitort.compile(add)
    cm.run(None, {"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32)})
    assert [p.uses_blas for p in cm.plans()] == [False] and not cm._pin_blas
    cm = jitort.compile(_two_outputs())
    cm.run(None, {"x": np.ones((2, 8), np.float32), "y": np.ones((2, 8), np.float32)})
    assert all(p.uses_blas for p in cm.plans()) and cm._pin_blas


def test_settings_restored_when_a_call_fails():
    """A call that raises inside the compiled program (an index out of range) gives the
    caller's thread count back and leaves the BLAS pin balanced (jitort.pinning.pinned)."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two Numba threads to tell the model's count from the caller's")
    table = helper.make_tensor("t", F32, [4, 8], np.arange(32, dtype=np.float32).tolist())
    m = _model([helper.make_node("Gather", ["t", "i"], ["g"]),
                helper.make_node("MatMul", ["g", "w"], ["y"])],
               [("i", TensorProto.INT64, ["N"])], [("y", F32, None)],
               [table, helper.make_tensor("w", F32, [8, 2], np.ones(16).tolist())])
    cm = jitort.compile(m, threads=1)
    good = np.array([0, 3], np.int64)
    np.testing.assert_allclose(cm(good)[0], _ort(m, {"i": good})[0], rtol=1e-6)
    numba.set_num_threads(2)
    try:
        for bad in (np.array([0, 9], np.int64), np.array([9], np.int64)):
            with pytest.raises(InvalidInput, match="out of range"):
                cm(bad)
            assert numba.get_num_threads() == 2
            assert blas._depth == 0
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    np.testing.assert_allclose(cm(good)[0], _ort(m, {"i": good})[0], rtol=1e-6)


def test_pinned_restores_on_the_way_out_also_when_the_block_raises():
    from jitort.pinning import pinned
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two Numba threads")
    numba.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError):
            with pinned(1, True):
                assert numba.get_num_threads() == 1 and blas._depth == 1
                with pinned(None, True):  # nested: the pin is shared, counted
                    assert blas._depth == 2
                raise RuntimeError
        assert numba.get_num_threads() == 2 and blas._depth == 0
        with pinned(2, False):  # already the caller's count: nothing to set or restore
            assert numba.get_num_threads() == 2 and blas._depth == 0
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)

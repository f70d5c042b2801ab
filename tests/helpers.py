"""Small model builders for tests."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    """inputs/outputs: (name, elem_type, shape) triples; initializers: name -> array.

    The IR version is the lowest that carries ``opset`` (onnx's own default is its newest,
    which an older onnxruntime refuses: onnx 1.23 writes 14, onnxruntime 1.30 reads <= 13)."""
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(initializers).items()])
    imports = [helper.make_opsetid("", opset)]
    m = helper.make_model(g, opset_imports=imports)
    if opset <= max(v[2] for v in helper.VERSION_TABLE):  # a future opset keeps onnx's default
        m.ir_version = helper.find_min_ir_version_for(imports)
    return m


def run_reference(model, feeds):
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(model).run(None, feeds)


def run_onnxruntime(model, feeds):
    """``model``'s outputs for ``feeds`` from onnxruntime's CPU provider at one thread."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


#: jitort's two tiers: the compiled program, and tier 0 (the interpreter a tiered model's
#: first calls run)
TIERS = ("compiled", "interpreter")


def run_tier(model, feeds: dict, tier: str, debug: bool = False) -> list:
    """``model``'s outputs for ``feeds`` from one of jitort's :data:`TIERS` (the interpreter
    runs over the optimized graph, as in a tiered model), or ``"cuda"``: compiled for the
    CUDA backend (the simulator where ``NUMBA_ENABLE_CUDASIM=1``)."""
    import jitort
    from jitort.tiering import Tiering
    if tier == "cuda":
        return jitort.compile(model, device="cuda", debug=debug).run(None, feeds)
    m = jitort.compile(model, debug=debug, tiered=False)
    if tier == "compiled":
        return m.run(None, feeds)
    t = Tiering(m)
    t.started = True  # no background compile: every call interprets
    return t.call(feeds, None)


F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def x_model(nodes, xs, inits, outputs=("y",), opset=17):
    """One float32 input "x" of shape ``xs``; float32 outputs of unknown shape."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, list(xs))],
                          [helper.make_tensor_value_info(o, F32, None) for o in outputs],
                          initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def numba_cache_beside_generated_code(monkeypatch):
    """Tests that look for Numba's cache files of generated modules beside those modules (a
    ``__pycache__`` in ``JITORT_CACHE_DIR``) call this first: with ``NUMBA_CACHE_DIR`` set
    (a cold-cache run of the suite) Numba writes them there instead. Child processes and this
    one's new dispatchers then cache beside the source; the kernel library's cache stays where
    it was (``JITORT_KERNEL_CACHE_DIR``)."""
    import os

    import numba
    nc = os.environ.get("NUMBA_CACHE_DIR")
    if nc:
        monkeypatch.setenv("JITORT_KERNEL_CACHE_DIR", os.environ.get("JITORT_KERNEL_CACHE_DIR") or nc)
        monkeypatch.delenv("NUMBA_CACHE_DIR")
        monkeypatch.setattr(numba.config, "CACHE_DIR", "")   # this process's new dispatchers


def assert_outputs_close(got, want, *, rtol=1e-4, atol=1e-5, equal_nan=False, exact=False,
                         check_dtype=True, names=None):
    """jitort's outputs ``got`` against a reference's ``want`` (lists, in output order).

    The number of outputs first (a ``zip`` over the two would stop at the shorter and compare
    nothing past it), then per output its shape (``assert_allclose`` broadcasts: (3,) against
    (1, 3) would pass), its dtype unless ``check_dtype`` is false, and its values: exactly for
    integer, bool and string outputs or with ``exact``, else within ``rtol``/``atol``.
    ``names`` labels the outputs in messages (default: their positions)."""
    got, want = list(got), list(want)
    assert len(got) == len(want), f"{len(got)} outputs, the reference gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        where = f"output {names[k] if names else k}"
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{where}: shape {g.shape}, the reference's {w.shape}"
        if check_dtype:
            assert g.dtype == w.dtype, f"{where}: dtype {g.dtype}, the reference's {w.dtype}"
        if exact or w.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, w, err_msg=where)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=equal_nan,
                                       err_msg=where)


def require_cases(cases, minimum: int, source: str):
    """``cases`` (a generated suite's parameters, read from ``source``) when there are at least
    ``minimum`` of them; otherwise a collection error.

    A suite parametrized over a data source (onnx's node tests, a model folder, a table) would
    otherwise shrink without a sound when the source breaks or moves: an empty list is one
    skipped test, a truncated one fewer passes. ``minimum`` sits comfortably below today's count,
    so a newer onnx that drops a few cases does not trip it; raise it when the source grows."""
    import pytest

    cases = list(cases)
    if len(cases) < minimum:
        pytest.fail(f"{len(cases)} cases from {source}, fewer than the {minimum} expected: the "
                    "source is missing or truncated (or the floor in the test needs revisiting)",
                    pytrace=False)
    return cases


def kernels_called(cm) -> list:
    """The callees of the kernel calls of each distinct generated driver of ``cm``, in order
    (:class:`jitort.codegen.calls.Kernel` for the library, ``Generated`` for fused kernels)."""
    drivers = {p.source_path: p.calls for p in cm.plans()}
    return [c.callee for path in sorted(drivers) for c in drivers[path]]


def called_names(cm) -> list[str]:
    """:func:`kernels_called` as names: ``module.function`` for library kernels, the
    generated function's name (``k_...``) for fused ones."""
    return [repr(k) for k in kernels_called(cm)]

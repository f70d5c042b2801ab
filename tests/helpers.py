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

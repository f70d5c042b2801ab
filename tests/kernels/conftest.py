"""Shared helpers for kernel tests: run one ONNX node with onnxruntime."""
import numba
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.int64): TensorProto.INT64}


def run_ort_node(op, inputs, n_out=1, opset=17, out_dtypes=None, **attrs):
    """Run a single ONNX node ``op`` on numpy ``inputs`` (list; None = omitted input)."""
    import onnxruntime as ort

    in_names, vis, feeds = [], [], {}
    for i, a in enumerate(inputs):
        if a is None:
            in_names.append('')
            continue
        name = f'i{i}'
        in_names.append(name)
        vis.append(helper.make_tensor_value_info(name, _ELEM[a.dtype], a.shape))
        feeds[name] = a
    out_names = [f'o{i}' for i in range(n_out)]
    dts = out_dtypes or [next(a for a in inputs if a is not None).dtype] * n_out
    vos = [helper.make_tensor_value_info(nm, _ELEM[np.dtype(dt)], None)
           for nm, dt in zip(out_names, dts)]
    node = helper.make_node(op, in_names, out_names, **attrs)
    graph = helper.make_graph([node], 'g', vis, vos)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=['CPUExecutionProvider'])
    res = sess.run(out_names, feeds)
    return res if n_out > 1 else res[0]


@pytest.fixture
def ort_node():
    return run_ort_node


@pytest.fixture(params=sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}))
def nthreads(request):
    """Run the test with 1 and 2 Numba threads (just 1 where Numba has one)."""
    old = numba.get_num_threads()
    numba.set_num_threads(request.param)
    yield request.param
    numba.set_num_threads(old)



def pytest_configure(config):
    # Benign Numba SSA pedantic warning from typed inlining of the mathfn helpers (also
    # silenced by mathfn itself outside pytest, which resets warning filters per test).
    config.addinivalue_line(
        'filterwarnings',
        r"ignore:(?s).*variable '(exp32|expneg32|sigmoid32|tanh32|erf32|log32)_v"
        r':numba.core.errors.NumbaIRAssumptionWarning')

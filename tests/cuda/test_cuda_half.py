"""float16 graphs on the CUDA backend: float16 values are numba-cuda float16 arrays on the
device; data movement moves them, fused elementwise kernels convert each operand to float32 on
load and round to float16 on store, matrix products and convolutions take float16 operands
(cuBLAS's float16 GEMM on a GPU, float32 accumulation; jitort's kernels stage and accumulate
them in float32), and the other ops compute in float32 between the Casts the precision pass
inserts (jitort/passes/precision.py). bfloat16 has no device conversions here:
its elementwise nodes run on the CPU backend. Results against onnxruntime on the same float16
model (derived with onnxruntime's own converter)."""
import re
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnxruntime.transformers.float16 import convert_float_to_float16

import jitort
from tests.cuda.test_cuda_models import _ort, convnet, mlp

RNG = np.random.default_rng(11)


def _sources(cm) -> str:
    """The text of the model's CUDA drivers and of the generated kernels they import."""
    out = []
    for path in map(Path, cm.generated_sources()):
        text = path.read_text()
        out.append(text)
        out += [(path.parent / f"{name}.py").read_text()
                for name in re.findall(r"^from \S+\.(\w+) import \1$", text, re.M)]
    return "\n".join(out)


def _close(got, want):
    """float16 results: jitort and onnxruntime round at different points (jitort once per
    fused kernel, onnxruntime per op), so a few float16 ulps apart."""
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2,
                               atol=2e-2)


@pytest.mark.parametrize("make,shape", [(mlp, (3, 8)), (convnet, (2, 3, 6, 6))],
                         ids=["mlp", "convnet"])
@pytest.mark.parametrize("keep_io", [False, True], ids=["f16_io", "f32_io"])
def test_float16_model_runs_on_the_gpu(cuda, make, shape, keep_io):
    m = convert_float_to_float16(make(), keep_io_types=keep_io)
    cm = jitort.compile(m, device="cuda")
    assert set(cm.placement_counts()) == {"cuda"}, cm.summary()
    x = RNG.standard_normal(shape).astype(np.float32 if keep_io else np.float16)
    (got,) = cm(x)
    (want,) = _ort(m, {"x": x})
    assert got.dtype == want.dtype == (np.float32 if keep_io else np.float16)
    _close(got, want)
    # float16 values stay float16 on the device, between kernels too, converted on load and
    # rounded on store by the fused kernels; the products take float16 operands
    src = _sources(cm)
    assert "w_float16" in src and re.search(r"np\.float32\(\w+\[", src)
    assert "np.float16(" in src or "_cm.round_f16(" in src
    assert re.search(r"_gemm\.\w+\((X\[0\]|w_float16)", src), src
    if make is convnet:  # and the convolutions
        assert re.search(r"_conv\.\w+\((X\[0\]|w_float16)", src), src


def test_float16_device_arrays_in_and_out(cuda):
    m = convert_float_to_float16(mlp(), keep_io_types=False)
    cm = jitort.compile(m, device="cuda")
    x = RNG.standard_normal((2, 8)).astype(np.float16)
    (dy,) = cm.run_on_device(None, {"x": cuda.to_device(x)})
    assert dy.dtype == np.float16 and cm.copies == {}
    _close(dy.copy_to_host(), _ort(m, {"x": x})[0])


def test_bfloat16_elementwise_runs_on_the_cpu_backend(cuda):
    """No device conversions for bfloat16: its nodes go to the CPU backend, results right."""
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Relu", ["f"], ["y"])]
    g = helper.make_graph(nodes, "bf16", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    cm = jitort.compile(m, device="cuda")
    x = np.array([1.00390625, -2.5, 3.0078125, 0.1], np.float32)
    np.testing.assert_array_equal(cm(x)[0], _ort(m, {"x": x})[0])
    assert cm.placement_counts()["cpu"] >= 1, cm.summary()


def test_cuda_pipeline_keeps_float16_products():
    """The CUDA pipeline leaves an all-float16 MatMul / Gemm alone; the CPU's computes it in
    float32 between Casts. (Conv likewise: test_float16_model_runs_on_the_gpu.)"""
    from jitort.importer import import_model
    from jitort.passes import CPU_PIPELINE, CUDA_PIPELINE, run_pipeline
    m = convert_float_to_float16(mlp(), keep_io_types=False)
    ops = {}
    for name, pipeline in (("cpu", CPU_PIPELINE), ("cuda", CUDA_PIPELINE)):
        g = import_model(m)
        run_pipeline(g, pipeline)
        ops[name] = [(n.op_type, str(n.outputs[0].dtype)) for n in g.nodes
                     if n.op_type in ("MatMul", "MatMulBias", "Gemm")]
    assert ops["cuda"] and all(dt == "float16" for _, dt in ops["cuda"]), ops
    assert ops["cpu"] and all(dt == "float32" for _, dt in ops["cpu"]), ops


def _gelu_erf(x: str, y: str) -> list:
    """torch's nn.GELU as exported: 0.5 * x * (1 + Erf(x / sqrt(2)))."""
    return [helper.make_node("Div", [x, "sqrt2"], [y + "_d"]),
            helper.make_node("Erf", [y + "_d"], [y + "_e"]),
            helper.make_node("Add", [y + "_e", "one"], [y + "_a"]),
            helper.make_node("Mul", [x, y + "_a"], [y + "_m"]),
            helper.make_node("Mul", [y + "_m", "half"], [y])]


def _epilogue_model():
    """Conv + residual Add + Relu, then a Linear + GELU (erf form) on the flattened result."""
    from tests.cuda.test_cuda_models import _w
    from tests.helpers import F32, make_model
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["hb"])] + _gelu_erf("hb", "y")
    consts = {"cw": _w(8, 8, 3, 3) / 4, "cb": _w(8), "w": _w(8 * 16, 6) / 8, "b": _w(6),
              "sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32),
              "half": np.array(0.5, np.float32)}
    return make_model(nodes, [("x", F32, ["N", 8, 4, 4])], [("y", F32, ["N", 6])], consts)


def test_cuda_pipeline_fuses_float16_epilogues():
    """float16 Conv + residual + Relu is one FusedConv and MatMul + Add + GELU one MatMulBias,
    both float16, on the CUDA pipeline (their kernels compute the epilogue in float32 and round
    once); the CPU's still computes them in float32 between Casts."""
    from jitort.importer import import_model
    from jitort.passes import CPU_PIPELINE, CUDA_PIPELINE, run_pipeline
    m = convert_float_to_float16(_epilogue_model(), keep_io_types=False)
    g = import_model(m)
    run_pipeline(g, CUDA_PIPELINE)
    fused = {n.op_type: (n.attrs.get("activation"), len(n.inputs), str(n.outputs[0].dtype))
             for n in g.nodes if n.domain == "jitort"}
    assert fused == {"FusedConv": ("Relu", 4, "float16"),
                     "MatMulBias": ("Gelu", 3, "float16")}, fused
    assert not {"Add", "Relu", "Erf", "Mul", "Div"} & {n.op_type for n in g.nodes}
    g = import_model(m)
    run_pipeline(g, CPU_PIPELINE)
    assert all(str(n.outputs[0].dtype) != "float16" for n in g.nodes
               if n.op_type in ("FusedConv", "MatMulBias", "Conv", "MatMul"))


def test_fused_float16_epilogues_match_onnxruntime(cuda):
    m = convert_float_to_float16(_epilogue_model(), keep_io_types=False)
    cm = jitort.compile(m, device="cuda")
    assert set(cm.placement_counts()) == {"cuda"}, cm.summary()
    x = RNG.standard_normal((2, 8, 4, 4)).astype(np.float16)
    (got,) = cm(x)
    (want,) = _ort(m, {"x": x})
    assert got.dtype == np.float16
    _close(got, want)
    # the whole model: the convolution and the product, one launcher call each (Flatten is a
    # view), no elementwise kernel after either
    src = _sources(cm)
    calls = re.findall(r"^\s+(_\w+\.\w+)\(", src, re.M)
    assert calls == ["_conv.conv2d_bias_add_act", "_gemm.matmul3d_bias_act"], src

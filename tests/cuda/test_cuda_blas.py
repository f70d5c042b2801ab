"""The cuBLAS path of the CUDA GEMM and convolution (kernels/cuda/blas.py, gemm._run,
conv._cublas): the column-major call a row-major product becomes, and the epilogue after it.

cuBLAS cannot run on the simulator, so a stand-in binding (standin_cublas.py) does what
cuBLAS's documentation says each routine does, over the memory the addresses name (the
simulator's device arrays are host memory): column-major matrices of the given leading
dimensions (a leading dimension cuBLAS would refuse fails the call), ``op`` transposes, batches
at the given element strides, ``beta = 0`` never reading C. What is checked is jitort's side --
addresses, transposes, leading dimensions, batch strides (0 for a matrix every batch shares),
which products go to cuBLAS -- and the results against onnxruntime. On a GPU
(JITORT_TEST_CUDA=gpu) the same tests call CuPy's binding: real cuBLAS, the same calls
listed."""
import numpy as np
import pytest
from onnx import helper

import jitort
from jitort.kernels.cuda import blas, conv, gemm
from jitort.kernels.cuda.launch import LibraryCall
from tests.cuda.conftest import SIMULATOR
from tests.cuda.test_cuda_models import _ort, _w
from tests.helpers import F32, make_model


def _records(cm):
    (plan,) = cm.plans()
    return plan.local.bound.launches


def _kinds(cm):
    return [getattr(r, "kernel", getattr(r, "fn", None)) for r in _records(cm)]


def test_matmul_bias_relu_is_cublas_then_the_epilogue(cublas):
    """Row-major (3, 6) @ (6, 5) is column-major Y^T (5, 3) = W^T X^T: both operands N."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = make_model(nodes, [("x", F32, ["B", 6])], [("y", F32, ["B", 5])],
                   {"w": _w(6, 5), "b": _w(5)})
    cm = jitort.compile(m, device="cuda")
    x = _w(3, 6)
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    product, epilogue = _records(cm)
    assert isinstance(product, LibraryCall) and product.fn is blas.gemm_strided
    assert epilogue.kernel is gemm.epilogue_kernel(np.float32)
    assert cublas.calls == [("f", blas.OP_N, blas.OP_N, 5, 3, 6, 5, 0, 6, 0, 5, 0, 1)]
    assert cublas.modes == [blas.DEFAULT_MATH]  # exact float32: no TF32 unless asked


def test_plain_matmul_needs_no_epilogue(cublas):
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, ["B", 4, 6])],
                   [("y", F32, ["B", 4, 5])], {"w": _w(6, 5)})
    cm = jitort.compile(m, device="cuda")
    x = _w(2, 4, 6)
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert _kinds(cm) == [blas.gemm_strided]
    assert cublas.calls[0][3:6] == (5, 8, 6)  # the batch folded into the rows


def test_batched_matmul_and_broadcast_batches(cublas):
    """(B, H, m, k) @ (B, H, k, n): one strided-batched product; (m, k) @ (B, k, n) reads A in
    place for every batch (batch stride 0)."""
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]),
             helper.make_node("MatMul", ["a", "s"], ["y"])]
    m = make_model(nodes, [("q", F32, [2, 3, 4, 5]), ("k", F32, [2, 3, 5, 4]),
                           ("a", F32, [4, 4])], [("y", F32, [2, 3, 4, 4])])
    cm = jitort.compile(m, device="cuda")
    feeds = {"q": _w(2, 3, 4, 5), "k": _w(2, 3, 5, 4), "a": _w(4, 4)}
    np.testing.assert_allclose(cm(*feeds.values())[0], _ort(m, feeds)[0], rtol=1e-5, atol=1e-6)
    assert _kinds(cm) == [blas.gemm_strided] * 2
    assert cublas.calls == [("f", blas.OP_N, blas.OP_N, 4, 4, 5, 4, 20, 5, 20, 4, 16, 6),
                            ("f", blas.OP_N, blas.OP_N, 4, 4, 4, 4, 16, 4, 0, 4, 16, 6)]


@pytest.mark.parametrize("trans_a,trans_b,c_shape", [(0, 1, (5,)), (1, 0, (3, 1)),
                                                     (1, 1, (3, 5)), (0, 0, None)])
def test_gemm_transposes_alpha_beta_and_c(cublas, trans_a, trans_b, c_shape):
    """A transposed input is cuBLAS's OP_T on the stored matrix: no copy; alpha goes to cuBLAS,
    beta * C to the epilogue."""
    a = _w(6, 3) if trans_a else _w(3, 6)
    b = _w(5, 6) if trans_b else _w(6, 5)
    inits = {"b": b, **({"c": _w(*c_shape)} if c_shape else {})}
    node = helper.make_node("Gemm", ["a", "b"] + (["c"] if c_shape else []), ["y"], alpha=0.5,
                            beta=2.0, transA=trans_a, transB=trans_b)
    m = make_model([node], [("a", F32, list(a.shape))], [("y", F32, [3, 5])], inits)
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(a)[0], _ort(m, {"a": a})[0], rtol=1e-5, atol=1e-6)
    kinds = _kinds(cm)
    assert kinds[0] is blas.gemm_strided
    assert kinds[1:] == ([gemm.epilogue_kernel(np.float32)] if c_shape else [])
    (_, op_b, op_a, mm, nn, kk, ldb, _, lda, _, ldy, _, _), = cublas.calls
    assert (mm, nn, kk, ldy) == (5, 3, 6, 5)
    assert (op_b, ldb) == ((blas.OP_T, 6) if trans_b else (blas.OP_N, 5))
    assert (op_a, lda) == ((blas.OP_T, 3) if trans_a else (blas.OP_N, 6))


@pytest.mark.parametrize("s_outer,s_inner,outer,inner,want", [
    (5, 1, 3, 5, (blas.OP_N, 5)),  # row-major
    (8, 1, 3, 5, (blas.OP_N, 8)),  # row-major, padded rows
    (1, 3, 3, 5, (blas.OP_T, 3)),  # column-major (a transposed operand)
    (0, 1, 1, 5, (blas.OP_N, 5)),  # one row: its stride is free
    (1, 0, 3, 1, (blas.OP_N, 1)),  # one column: likewise
    (2, 2, 3, 5, None),  # no unit stride
    (0, 1, 3, 5, None),  # repeated rows
    (1, 0, 3, 5, None),  # repeated columns
    (1, 2, 3, 5, None),  # overlapping columns: a leading dimension below the rows
])
def test_operand_layouts(s_outer, s_inner, outer, inner, want):
    assert blas._operand(s_outer, s_inner, outer, inner) == want


def test_tf32_only_when_asked(cublas, monkeypatch):
    monkeypatch.setenv("JITORT_CUDA_TF32", "1")
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, [2, 3])],
                   [("y", F32, [2, 4])], {"w": _w(3, 4)})
    jitort.compile(m, device="cuda")(_w(2, 3))
    assert cublas.modes == [blas.TF32_TENSOR_OP_MATH]


def test_own_kernel_when_asked(cuda, monkeypatch):
    """JITORT_CUDA_BLAS=own (read once) keeps the tiled kernel; so does the simulator."""
    monkeypatch.setattr(blas, "_lib", blas._UNSET)
    monkeypatch.setenv("JITORT_CUDA_BLAS", "own")
    assert blas.library() is None
    if SIMULATOR:
        monkeypatch.setattr(blas, "_lib", blas._UNSET)
        monkeypatch.delenv("JITORT_CUDA_BLAS")
        assert blas.library() is None


def _conv_model(n, k, c, kh, residual, **attrs):
    """Conv (+ residual Add) + Relu: one jitort.FusedConv on (n, c, 5, 5) inputs (``group``
    among ``attrs``: the weight has c / group input channels)."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], **attrs)]
    ins = [("x", F32, [n, c, 5, 5])]
    out = "h"
    if residual:
        nodes.append(helper.make_node("Add", ["h", "z"], ["s"]))
        out = "s"
    nodes.append(helper.make_node("Relu", [out], ["y"]))
    return make_model(nodes, ins + ([("z", F32, [n, k, 5, 5])] if residual else []),
                      [("y", F32, None)],
                      {"w": _w(k, c // attrs.get("group", 1), kh, kh), "b": _w(k)})


@pytest.mark.parametrize("c,kh,attrs,residual", [
    (2, 3, {"pads": [1, 1, 1, 1]}, True),  # im2col columns, residual and bias per channel
    (2, 3, {"strides": [2, 2], "dilations": [1, 1]}, False),  # strided, no padding
    (16, 1, {}, True),  # pointwise: each image's input is the product's matrix
])
def test_convolution_is_one_cublas_call_for_all_images(cublas, c, kh, attrs, residual):
    """The images' columns, then one strided-batched product with the weight shared (batch
    stride 0), then the epilogue."""
    n = 3
    m = _conv_model(n, 8, c, kh, residual, **attrs)
    feeds = {"x": _w(n, c, 5, 5), **({"z": _w(n, 8, 5, 5)} if residual else {})}
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(*feeds.values())[0], _ort(m, feeds)[0], rtol=1e-5, atol=1e-5)
    red = c * kh * kh
    ohw = 25 if attrs.get("pads") or kh == 1 else 4
    assert _kinds(cm) == ([] if kh == 1 else [conv._im2col_k]) + [blas.gemm_strided,
                                                                   gemm.epilogue_kernel(np.float32)]
    # column-major Y[img]^T (ohw, 8) = cols[img]^T @ W^T
    assert cublas.calls == [("f", blas.OP_N, blas.OP_N, ohw, 8, red, ohw,
                             c * 25 if kh == 1 else red * ohw, red, 0, ohw, 8 * ohw, n)]


def test_convolution_columns_in_chunks_of_images(cublas, monkeypatch):
    """Scratch for fewer images than the batch: one im2col and one product per chunk."""
    from jitort.codegen.cuda_ops import conv as lowering
    monkeypatch.setattr(lowering, "COL_ELEMS", 2 * 18 * 25)  # two images' columns
    m = _conv_model(5, 8, 2, 3, False, pads=[1, 1, 1, 1])
    x = _w(5, 2, 5, 5)
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert _kinds(cm) == [conv._im2col_k, blas.gemm_strided] * 3 + [gemm.epilogue_kernel(np.float32)]
    assert [call[-1] for call in cublas.calls] == [2, 2, 1]


@pytest.mark.parametrize("n,c,kout,group,kh", [
    (3, 16, 16, 2, 3),  # more images than groups: a call per group, batched over the images
    (3, 16, 32, 4, 3),  # more groups than images: a call per image, batched over the groups
    (2, 32, 16, 2, 1),  # pointwise: the input is the columns
])
def test_grouped_convolution_products(cublas, n, c, kout, group, kh):
    pads = [kh // 2] * 4
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, pads=pads)],
                   [("x", F32, [n, c, 5, 5])], [("y", F32, None)],
                   {"w": _w(kout, c // group, kh, kh), "b": _w(kout)})
    x = _w(n, c, 5, 5)
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    kg, red_g = kout // group, c // group * kh * kh
    per_src, per_y = c * kh * kh * 25, kout * 25
    if n >= group:  # (op, op, m, n, k, lda, stride, ldb, stride, ldc, stride, count)
        want = [("f", 0, 0, 25, kg, red_g, 25, per_src, red_g, 0, 25, per_y, n)] * group
    else:
        want = [("f", 0, 0, 25, kg, red_g, 25, red_g * 25, red_g, kg * red_g, 25, kg * 25,
                 group)] * n
    assert [call[:13] for call in cublas.calls] == want
    assert _kinds(cm) == ([] if kh == 1 else [conv._im2col_k]) + [blas.gemm_strided] * len(
        want) + [gemm.epilogue_kernel(np.float32)]


def test_depthwise_convolution_stays_direct(cublas):
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])],
                   [("x", F32, [2, 8, 5, 5])], [("y", F32, None)], {"w": _w(8, 1, 3, 3)})
    x = _w(2, 8, 5, 5)
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert _kinds(cm) == [conv._DIRECT[np.dtype(np.float32)]] and cublas.calls == []


def test_float16_products_are_cublas_ex_calls(cublas):
    """A float16 MLP's products: cuBLAS's float16 GEMM (gemmEx, float32 compute) on float16
    operands, then the epilogue in float32 rounding once to float16."""
    from onnxruntime.transformers.float16 import convert_float_to_float16
    from tests.cuda.test_cuda_models import mlp
    m = convert_float_to_float16(mlp(), keep_io_types=False)
    cm = jitort.compile(m, device="cuda")
    x = _w(5, 8).astype(np.float16)
    (got,) = cm(x)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), _ort(m, {"x": x})[0].astype(np.float32),
                               rtol=2e-2, atol=2e-2)
    assert [c[:6] for c in cublas.calls] == [("e", 0, 0, 16, 5, 8), ("e", 0, 0, 4, 5, 16)]


def test_float16_convolution_is_a_cublas_ex_call(cublas):
    from onnxruntime.transformers.float16 import convert_float_to_float16
    m = convert_float_to_float16(_conv_model(2, 8, 4, 3, True, pads=[1, 1, 1, 1]),
                                 keep_io_types=False)
    feeds = {"x": _w(2, 4, 5, 5).astype(np.float16), "z": _w(2, 8, 5, 5).astype(np.float16)}
    cm = jitort.compile(m, device="cuda")
    (got,) = cm(*feeds.values())
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), _ort(m, feeds)[0].astype(np.float32),
                               rtol=2e-2, atol=2e-2)
    # (the residual Add and Relu stay a float16 elementwise kernel: no epilogue fusion in 16 bits)
    assert _kinds(cm)[:3] == [conv._im2col_k, blas.gemm_strided, gemm.epilogue_kernel(np.float32)]
    assert [c[:6] for c in cublas.calls] == [("e", 0, 0, 25, 8, 36)]


def test_the_binding_is_found_through_cupy(monkeypatch):
    """library(): CuPy's cuBLAS binding where CuPy runs (``cupy.cuda.cublas``, else
    ``cupy_backends``); None without a device or with JITORT_CUDA_BLAS=own."""
    import sys
    import types

    from numba.core import config
    binding = types.SimpleNamespace(name="cublas binding")
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime, cublas=binding))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(config, "ENABLE_CUDASIM", 0)
    monkeypatch.delenv("JITORT_CUDA_BLAS", raising=False)
    monkeypatch.setattr(blas, "_cupy", None)
    assert blas._load() is binding and blas._cupy is fake

    def no_device():
        raise RuntimeError("cudaErrorNoDevice")
    monkeypatch.setattr(runtime, "getDeviceCount", no_device)
    assert blas._load() is None
    monkeypatch.setenv("JITORT_CUDA_BLAS", "own")
    assert blas._load() is None

"""The cuBLAS path of the CUDA GEMM (kernels/cuda/blas.py, gemm._run): the operand views and
the epilogue kernel after the product.

CuPy cannot run on the simulator, so a stand-in does what the path asks of it with numpy over
the simulator's arrays (``asarray`` is the array's own memory, ``as_strided`` and ``matmul``
numpy's): what is checked is jitort's side -- offsets, strides, transposes, batches, which
products go to cuBLAS and the epilogue's alpha / C / bias / activation -- against onnxruntime.
On a GPU (JITORT_TEST_CUDA=gpu) CuPy is the real one and every CUDA test goes through it."""
import contextlib
import types

import numpy as np
import pytest
from onnx import helper

import jitort
from jitort.kernels.cuda import blas, gemm
from jitort.kernels.cuda.launch import LibraryCall
from tests.cuda.conftest import SIMULATOR
from tests.cuda.test_cuda_models import _ort, _w
from tests.helpers import F32, make_model


class _FakeCupy(types.ModuleType):
    def __init__(self):
        super().__init__("cupy")
        self.lib = types.SimpleNamespace(stride_tricks=np.lib.stride_tricks)
        self.cuda = types.SimpleNamespace(Stream=types.SimpleNamespace(null=contextlib.nullcontext()),
                                          ExternalStream=lambda handle: contextlib.nullcontext())
        self.products = []

    def asarray(self, a):
        return a._ary  # the simulator array's memory: views write through

    def matmul(self, a, b, out):
        self.products.append((a.shape, b.shape, a.strides, b.strides))
        np.matmul(a, b, out=out)


@pytest.fixture
def fake_cupy(cuda, monkeypatch):
    if not SIMULATOR:
        pytest.skip("on a GPU the real CuPy serves")
    fake = _FakeCupy()
    monkeypatch.setattr(blas, "_cupy", fake)
    return fake


def _records(cm):
    (plan,) = cm.plans()
    return plan.local.bound.launches


def test_matmul_bias_relu_is_cublas_then_the_epilogue(fake_cupy):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = make_model(nodes, [("x", F32, ["B", 6])], [("y", F32, ["B", 5])],
                   {"w": _w(6, 5), "b": _w(5)})
    cm = jitort.compile(m, device="cuda")
    x = _w(3, 6)
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    product, epilogue = _records(cm)
    assert isinstance(product, LibraryCall) and product.fn is blas.matmul_into
    assert epilogue.kernel is gemm._epilogue_k
    assert fake_cupy.products == [((3, 6), (6, 5), (24, 4), (20, 4))]


def test_plain_matmul_needs_no_epilogue(fake_cupy):
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F32, ["B", 4, 6])],
                   [("y", F32, ["B", 4, 5])], {"w": _w(6, 5)})
    cm = jitort.compile(m, device="cuda")
    x = _w(2, 4, 6)
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    (product,) = _records(cm)
    assert product.fn is blas.matmul_into
    assert fake_cupy.products[0][:2] == ((8, 6), (6, 5))  # the batch folded into the rows


def test_batched_matmul_and_broadcast_batches(fake_cupy):
    """(B, H, m, k) @ (B, H, k, n): one strided-batched product; (m, k) @ (B, k, n) broadcasts
    A over the batches, which stays with the tiled kernel (CuPy would copy A)."""
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]),
             helper.make_node("MatMul", ["a", "s"], ["y"])]
    m = make_model(nodes, [("q", F32, [2, 3, 4, 5]), ("k", F32, [2, 3, 5, 4]),
                           ("a", F32, [4, 4])], [("y", F32, [2, 3, 4, 4])])
    cm = jitort.compile(m, device="cuda")
    feeds = {"q": _w(2, 3, 4, 5), "k": _w(2, 3, 5, 4), "a": _w(4, 4)}
    np.testing.assert_allclose(cm(*feeds.values())[0], _ort(m, feeds)[0], rtol=1e-5, atol=1e-6)
    batched, broadcast = _records(cm)
    assert batched.fn is blas.matmul_into and fake_cupy.products == [
        ((6, 4, 5), (6, 5, 4), (80, 20, 4), (80, 16, 4))]
    assert broadcast.kernel is gemm._KERNELS[np.dtype(np.float32)]


@pytest.mark.parametrize("trans_a,trans_b,c_shape", [(0, 1, (5,)), (1, 0, (3, 1)),
                                                     (1, 1, (3, 5)), (0, 0, None)])
def test_gemm_transposes_alpha_beta_and_c(fake_cupy, trans_a, trans_b, c_shape):
    a = _w(6, 3) if trans_a else _w(3, 6)
    b = _w(5, 6) if trans_b else _w(6, 5)
    inits = {"b": b, **({"c": _w(*c_shape)} if c_shape else {})}
    node = helper.make_node("Gemm", ["a", "b"] + (["c"] if c_shape else []), ["y"], alpha=0.5,
                            beta=2.0, transA=trans_a, transB=trans_b)
    m = make_model([node], [("a", F32, list(a.shape))], [("y", F32, [3, 5])], inits)
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(a)[0], _ort(m, {"a": a})[0], rtol=1e-5, atol=1e-6)
    product, epilogue = _records(cm)
    assert product.fn is blas.matmul_into and epilogue.kernel is gemm._epilogue_k
    (ashape, bshape, astrides, bstrides), = fake_cupy.products
    assert (ashape, bshape) == ((3, 6), (6, 5))
    assert astrides == ((4, 12) if trans_a else (24, 4)) and bstrides == ((4, 24) if trans_b
                                                                          else (20, 4))


def test_own_kernel_when_asked(cuda, monkeypatch):
    """JITORT_CUDA_BLAS=own (read once) keeps the tiled kernel; so does the simulator."""
    monkeypatch.setattr(blas, "_cupy", blas._UNSET)
    monkeypatch.setenv("JITORT_CUDA_BLAS", "own")
    assert blas.cupy_or_none() is None
    if SIMULATOR:
        monkeypatch.setattr(blas, "_cupy", blas._UNSET)
        monkeypatch.delenv("JITORT_CUDA_BLAS")
        assert blas.cupy_or_none() is None
    assert blas.serves(1, 0, 0) and blas.serves(4, 20, 30) and not blas.serves(4, 0, 30)


def _conv_model(k, c, kh, residual, **attrs):
    """Conv (+ residual Add) + Relu: one jitort.FusedConv on (2, c, 5, 5) inputs."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], **attrs)]
    ins = [("x", F32, [2, c, 5, 5])]
    out = "h"
    if residual:
        nodes.append(helper.make_node("Add", ["h", "z"], ["s"]))
        out = "s"
    nodes.append(helper.make_node("Relu", [out], ["y"]))
    return make_model(nodes, ins + ([("z", F32, [2, k, 5, 5])] if residual else []),
                      [("y", F32, None)],
                      {"w": _w(k, c, kh, kh), "b": _w(k)})


@pytest.mark.parametrize("c,kh,attrs,residual", [
    (2, 3, {"pads": [1, 1, 1, 1]}, True),  # im2col columns, residual and bias per channel
    (2, 3, {"strides": [2, 2], "dilations": [1, 1]}, False),  # strided, no padding
    (16, 1, {}, True),  # pointwise: each image's input is the product's matrix
])
def test_convolution_is_cublas_per_image_then_the_epilogue(fake_cupy, c, kh, attrs, residual):
    m = _conv_model(8, c, kh, residual, **attrs)
    x = _w(2, c, 5, 5)
    from jitort.kernels.cuda import conv
    feeds = {"x": x, **({"z": _w(2, 8, 5, 5)} if residual else {})}
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(*feeds.values())[0], _ort(m, feeds)[0], rtol=1e-5, atol=1e-5)
    records = _records(cm)
    kinds = [getattr(r, "kernel", getattr(r, "fn", None)) for r in records]
    per_image = [blas.matmul_into] if kh == 1 else [conv._im2col_k, blas.matmul_into]
    assert kinds == per_image * 2 + [gemm._epilogue_k], kinds
    assert all(p[:2] == ((8, c * kh * kh), (c * kh * kh, p[1][1])) for p in fake_cupy.products)

"""The CUDA backend's kernel-call IR: what a model compiles to, as objects (library kernels of
``jitort.kernels.cuda``, launches of generated kernels, device views), and how it renders."""
import ast
import importlib
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

import jitort
from jitort.codegen import cuda as cg
from jitort.codegen.calls import (Call, DeviceArray, DeviceView, Dim, Generated, Kernel,
                                  KernelModule, Launch, View)
from jitort.codegen.cuda_render import check_device_arg, driver_source, render_call
from jitort.codegen.elementwise import Operand, kernel_source
from jitort.codegen.registry import Unlowerable
from jitort.ir import Node, Value
from tests.helpers import F32, make_model

RNG = np.random.default_rng(11)
F = np.dtype(np.float32)


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_matmul_add_relu_compiles_to_a_gemm_and_one_launch(cuda):
    """MatMul + Add (of a second input: no MatMulBias) + Relu: the library GEMM into a workspace
    buffer, then one generated kernel for Add+Relu reading it."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = make_model(nodes, [("x", F32, ["B", 8]), ("z", F32, ["B", 4])], [("y", F32, ["B", 4])],
                   {"w": _w(8, 4)})
    cm = jitort.compile(m, device="cuda")
    x, z = _w(3, 8), _w(3, 4)
    w = next(numpy_helper.to_array(t) for t in m.graph.initializer if t.name == "w")
    np.testing.assert_allclose(cm(x, z)[0], np.maximum(x @ w + z, 0), rtol=1e-5, atol=1e-6)
    (plan,) = cm.plans()
    gemm, launch = plan.calls
    ws = DeviceView("w_float32", 0)  # workspace buffer 0, at element offset o[0]
    assert gemm.callee == cg._gemm.matmul3d == Kernel("gemm", "matmul3d", "cuda")
    assert gemm.args[:5] == (DeviceView("X[0]"), Dim(0), DeviceView("C[0]"), Dim(1), ws)
    assert [plan.d[a.slot] for a in gemm.args[5:]] == [1, 3, 4, 8]  # batches, m, n, k
    assert isinstance(launch.callee, Launch) and launch.callee.block == cg.EW_BLOCK
    kname = launch.callee.kernel.name
    assert kname.startswith("kc_add_relu_") and plan.kernel_names == [kname]
    assert plan.d[launch.callee.grid.slot] == 1  # 12 elements: one block
    assert launch.args[:3] == (DeviceView("Y[0]"), ws, DeviceView("X[1]"))
    assert [plan.d[a.slot] for a in launch.args[3:]] == [12, 12]  # the collapsed extent, total


def test_matmul_bias_relu_is_one_library_call(cuda):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = make_model(nodes, [("x", F32, ["B", 8])], [("y", F32, ["B", 4])],
                   {"w": _w(8, 4), "b": _w(4)})
    cm = jitort.compile(m, device="cuda")
    cm(_w(2, 8))
    (plan,) = cm.plans()
    (call,) = plan.calls
    assert call.callee == cg._gemm.matmul3d_bias_act
    assert call.args[:6] == (DeviceView("X[0]"), Dim(0), DeviceView("C[0]"), Dim(1),
                             DeviceView("C[1]"), DeviceView("Y[0]"))
    assert call.args[-3:] == (1, 0.0, 0.0)  # Relu's activation code, alpha, beta
    assert not plan.kernel_names


def test_every_cuda_kernel_reference_resolves(cuda):
    """The CUDA lowerings' ``_gemm.gemm``-style references name functions of the CUDA library
    (``jitort.kernels.cuda``), which the CPU library's reference check does not read."""
    from jitort.codegen import cuda_emit
    modules = [cg, cuda_emit, *(importlib.import_module(f"jitort.codegen.cuda_ops.{f}")
                                for f in cg.FAMILIES)]
    refs = set()
    for mod in modules:  # a family module may hold handles of its own
        handles = {**{n: h for n, h in vars(cuda_emit).items() if isinstance(h, KernelModule)},
                   **{n: h for n, h in vars(mod).items() if isinstance(h, KernelModule)}}
        assert {h.package for h in handles.values()} == {"cuda"}
        refs |= {getattr(handles[a.value.id], a.attr) for a in ast.walk(ast.parse(
            Path(mod.__file__).read_text())) if isinstance(a, ast.Attribute)
            and getattr(a.value, "id", None) in handles}
    assert len(refs) >= 15, refs
    missing = [k for k in refs
               if not callable(getattr(importlib.import_module(k.path), k.name, None))]
    assert not missing, missing


def test_cuda_calls_render_as_driver_text():
    launch = Call(Launch(Generated("kc_relu_0"), Dim(3), 128),
                  (DeviceView("w_float32", 2, (Dim(5),)), DeviceView("X[0]"), Dim(1), Dim(2)))
    assert render_call(launch) == ("_launch(kc_relu_0, d[3], 128, "
                                   "w_float32, o[2] + d[5], X[0], 0, d[1], d[2])")
    copy = Call(cg._data.copy_nd, (DeviceView("C[1]").at(Dim(4)), (Dim(0), 1), DeviceView("Y[0]"),
                                   (Dim(1),), (Dim(2),)))
    assert render_call(copy) == ("_data.copy_nd"
                                 "(C[1], d[4], (d[0], 1, ), Y[0], 0, (d[1], ), (d[2], ))")
    gather = Call(cg._data.gather3, (DeviceView("X[0]"), 1.5, float("inf"), True, DeviceArray("E")))
    assert render_call(gather) == "_data.gather3(X[0], 0, 1.5, np.float64(np.inf), True, E)"
    src = driver_source([copy, launch], {"float32"})
    assert "from jitort.kernels.cuda import data as _data\n" in src
    assert "from jitort_gen.kc_relu_0 import kc_relu_0\n" in src
    assert "from jitort.kernels.cuda.launch import launch as _launch\n" in src
    assert "def call(W, C, X, Y, E, d, o):\n    w_float32 = W['float32']\n    _data.copy_nd(" in src


def test_cuda_calls_refuse_what_the_renderer_cannot_spell():
    with pytest.raises(TypeError, match="CUDA kernel-call argument"):
        check_device_arg(View("x0", None))
    with pytest.raises(TypeError, match="tuple item"):
        check_device_arg((DeviceView("X[0]"),))
    cpu = KernelModule("norm").layernorm2d
    assert (cpu.package, cpu.path, repr(cpu)) == ("cpu", "jitort.kernels.cpu.norm",
                                                  "norm.layernorm2d")
    with pytest.raises(TypeError, match="a cpu kernel in a CUDA driver"):
        driver_source([Call(cpu, ())], set())


def _one(op, attrs=None):
    x, y = Value("x", "float32"), Value("y", "float32")
    return Node(op, [x, x] if op == "Mod" else [x], [y], attrs or {}, since_version=13)


def _cuda_kernel(node):
    n_in = len(node.inputs)
    return kernel_source("k", [(node, [-1 - j for j in range(n_in)], 0)],
                         [Operand(F, (False,))] * n_in, [0], 1, False, [F], style=cg.CUDA_STYLE)


def test_elementwise_templates_spell_math_per_backend():
    """The CPU table's math functions become device math by the style's table, not by
    rewriting text: float32 Sigmoid is mathfn's float32 sigmoid, Exp is math.exp; a function without a
    device version (Mod's np.fmod) makes the node fall back."""
    assert "t0 = _cm.sigmoid32(a0)" in _cuda_kernel(_one("Sigmoid"))
    assert "t0 = math.exp(a0)" in _cuda_kernel(_one("Exp"))
    cpu = kernel_source("k", [(_one("Exp"), [-1], 0)], [Operand(F, (False,))], [0], 1, False, [F])
    assert "t0 = _m.exp32(a0)" in cpu
    with pytest.raises(Unlowerable, match="no device version of fmod"):
        _cuda_kernel(_one("Mod", {"fmod": 1}))

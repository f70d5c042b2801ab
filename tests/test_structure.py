"""Structure: fusion makes one kernel of a chain; identical layers share compiled kernels."""
import re
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import jitort
from jitort.codegen.calls import Generated, Kernel

from .helpers import F32, make_model, run_reference
from .models import shared_feeds, shared_path


def _calls(cm):
    """The kernel calls of each distinct generated driver, in order (``Plan.calls``)."""
    drivers = {p.source_path: p.calls for p in cm.plans()}
    return [c for path in sorted(drivers) for c in drivers[path]]


def _kernel_calls(cm):
    """Names of the generated (fused) kernels the drivers call (they start with ``k_``)."""
    return [c.callee.name for c in _calls(cm)
            if isinstance(c.callee, Generated) and c.callee.name.startswith("k_")]


def _compile_chain_checked(nodes, rows, cols):
    """Compile a chain over x (N, cols) and y (cols,) into z; check it against onnx.reference."""
    m = make_model(nodes, [("x", F32, ["N", cols]), ("y", F32, [cols])], [("z", F32, None)])
    cm = jitort.compile(m)
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    y = np.linspace(-1, 1, cols, dtype=np.float32)
    (got,) = cm(x, y)
    np.testing.assert_allclose(got, run_reference(m, {"x": x, "y": y})[0], rtol=1e-5, atol=1e-6)
    return cm


def test_ten_op_chain_is_one_kernel():
    ops = ["Add", "Mul", "Relu", "Sub", "Sigmoid", "Mul", "Tanh", "Add", "Abs", "Neg"]
    nodes, cur = [], "x"
    for i, op in enumerate(ops):
        ins = [cur] if op in ("Relu", "Sigmoid", "Tanh", "Abs", "Neg") else [cur, "y"]
        nodes.append(helper.make_node(op, ins, [f"t{i}"]))
        cur = f"t{i}"
    nodes[-1].output[0] = "z"
    cm = _compile_chain_checked(nodes, rows=5, cols=8)
    calls = _kernel_calls(cm)
    assert len(calls) == 1, calls
    assert calls[0].startswith("k_add_mul_relu_sub")


def test_cpu_elementwise_loops_ask_for_wide_vectors():
    """Every generated CPU loop calls ``mathfn.wide_vectors`` first in its innermost body (the
    function Numba compiles a ``prange`` body into carries the attribute); CUDA kernels don't
    (tests/kernels/test_mathfn.py checks the registers it gets)."""
    nodes = [helper.make_node("Mul", ["x", "y"], ["t"]), helper.make_node("Sigmoid", ["t"], ["u"]),
             helper.make_node("Mul", ["x", "u"], ["z"])]
    cm = _compile_chain_checked(nodes, rows=300, cols=64)
    (name,) = _kernel_calls(cm)
    src = next(Path(p).with_name(f"{name}.py").read_text() for p in cm.generated_sources())
    lines = src.splitlines()
    loops = [i for i, line in enumerate(lines) if line.lstrip().startswith("for ")]
    body = lines[loops[-1] + 1:]
    assert "_m.wide_vectors()" in [line.strip() for line in body]
    assert "_m.wide_vectors()" not in "\n".join(lines[:loops[-1]])


def _layer(i, x):
    return [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Mul", [f"a{i}", "half"], [f"h{i}"]),
            helper.make_node("Relu", [f"h{i}"], [f"l{i}"])]


def test_identical_layers_share_kernels():
    rng = np.random.default_rng(1)
    nodes, init, x = [], {"half": np.float32(0.5)}, "x"
    for i in range(3):
        nodes += _layer(i, x)
        init[f"w{i}"] = rng.standard_normal((16, 16)).astype(np.float32)
        init[f"b{i}"] = rng.standard_normal(16).astype(np.float32)
        x = f"l{i}"
    nodes[-1].output[0] = "z"
    m = make_model(nodes, [("x", F32, ["N", 16])], [("z", F32, None)], init)
    cm = jitort.compile(m)
    xv = rng.standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(cm(xv)[0], run_reference(m, {"x": xv})[0], rtol=1e-5, atol=1e-5)
    calls = _kernel_calls(cm)
    # layers 0 and 1 write over their dying MatMul output (the in-place variant of the kernel);
    # the last layer writes the graph output (a fresh array): the same kernel but storing to y0
    assert len(calls) == 3 and calls[0] == calls[1] and len(set(calls)) == 2, calls
    gen = Path(cm.generated_sources()[0]).parent
    inplace, fresh = ((gen / f"{k}.py").read_text() for k in (calls[0], calls[2]))
    store = re.compile(r"^\s+(\w+)\[[^\]]*\] = t\d+$", re.M)
    assert store.findall(inplace) == ["x0"] and store.findall(fresh) == ["y0"]


def test_new_shape_reuses_compiled_code():
    m = make_model([helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Relu", ["s"], ["z"])],
                   [("x", F32, ["N", "C"]), ("y", F32, ["C"])], [("z", F32, None)])
    cm = jitort.compile(m)
    cm(np.ones((2, 3), np.float32), np.ones(3, np.float32))
    before = jitort.compile_count()
    for n, c in [(5, 7), (1, 9), (64, 3)]:
        x = np.random.default_rng(n).standard_normal((n, c)).astype(np.float32)
        y = np.arange(c, dtype=np.float32)
        np.testing.assert_allclose(cm(x, y)[0], np.maximum(x + y, 0))
    assert jitort.compile_count() == before
    assert len(cm.generated_sources()) == 1


@pytest.mark.models
@pytest.mark.slow
def test_bert_layers_share_kernels():
    if not shared_path("bert").exists():
        pytest.skip("../shared/models not present")
    cm = jitort.compile(shared_path("bert"))
    cm.run(None, shared_feeds("bert", 1, 16))
    calls = _kernel_calls(cm)
    # 4 identical encoder layers: every fused kernel of a layer is one compiled function
    assert len(set(calls)) * 3 <= len(calls), (len(set(calls)), len(calls))


def test_elementwise_outputs_reuse_dying_operands_in_place():
    # x -> MatMul -> a ; a -> Relu -> b (a dies here: b takes a's buffer) ; b -> MatMul -> z
    rng = np.random.default_rng(3)
    init = {"w": rng.standard_normal((8, 8)).astype(np.float32)}
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["a"]),
                    helper.make_node("Relu", ["a"], ["b"]),
                    helper.make_node("MatMul", ["b", "w"], ["z"])],
                   [("x", F32, ["N", 8])], [("z", F32, None)], init)
    cm = jitort.compile(m)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(cm(x)[0], np.maximum(x @ init["w"], 0) @ init["w"], rtol=1e-5, atol=1e-5)
    (plan,) = list(cm.plans())
    # a and b share one buffer: the workspace holds a single 4x8 float32 tensor
    assert plan.ws_bytes == 128 and plan.memory.lower_bound == 128


def test_chained_concats_are_written_in_place():
    # DenseNet-style growth: c1 = [relu(x), sigmoid(x)], c2 = [c1, tanh(c1)]; no copies needed
    m = make_model([helper.make_node("Relu", ["x"], ["a"]),
                    helper.make_node("Sigmoid", ["x"], ["b"]),
                    helper.make_node("Concat", ["a", "b"], ["c1"], axis=1),
                    helper.make_node("Tanh", ["c1"], ["t"]),
                    helper.make_node("Concat", ["c1", "t"], ["c2"], axis=1),
                    helper.make_node("Mul", ["c2", "c2"], ["z"])],
                   [("x", F32, [1, 3, 4, 4])], [("z", F32, None)])
    cm = jitort.compile(m)
    x = np.random.default_rng(4).standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(cm(x)[0], run_reference(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert all(c.callee.module != "data" for c in _calls(cm) if isinstance(c.callee, Kernel))
    (plan,) = list(cm.plans())
    assert plan.ws_bytes == plan.memory.lower_bound == 12 * 16 * 4  # just c2: a, b, c1, t live in it


def test_3x3_convolutions_take_winograd_where_it_wins():
    """Stride-1 3x3 convolutions with at least 8 input channels on planes of 25+ tiles use the
    Winograd kernel (prepacked weights in the constants); a strided one and a 3-channel one keep
    im2col. The choice is made once: a later tiny shape reuses the same code, still exact."""
    rng = np.random.default_rng(5)
    init = {"w1": rng.standard_normal((24, 16, 3, 3)).astype(np.float32) * 0.2,
            "b1": rng.standard_normal(24).astype(np.float32),
            "w2": rng.standard_normal((8, 24, 3, 3)).astype(np.float32) * 0.2,
            "w3": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.2}
    m = make_model([helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
                    helper.make_node("Relu", ["a"], ["r"]),
                    helper.make_node("Conv", ["r", "w2"], ["z1"], strides=[2, 2]),
                    helper.make_node("Conv", ["x3", "w3"], ["z2"], pads=[1, 1, 1, 1])],
                   [("x", F32, ["N", 16, "H", "W"]), ("x3", F32, ["N", 3, "H", "W"])],
                   [("z1", F32, None), ("z2", F32, None)], init)
    cm = jitort.compile(m)
    for n, h, w in [(1, 20, 21), (2, 6, 5)]:
        feeds = {"x": rng.standard_normal((n, 16, h, w)).astype(np.float32),
                 "x3": rng.standard_normal((n, 3, h, w)).astype(np.float32)}
        for got, want in zip(cm(feeds["x"], feeds["x3"]), run_reference(m, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        if n == 1:
            before = jitort.compile_count()
    assert jitort.compile_count() == before
    called = [c.callee for c in _calls(cm) if isinstance(c.callee, Kernel)]
    assert called.count(Kernel("winograd", "conv3x3_winograd")) == 1, called
    assert sum(k.module == "conv" and k.name.startswith("conv2d") for k in called) == 2, called


def test_big_planes_take_winograd_f4x4():
    """From 32 input channels on planes of 49+ 4x4 tiles the kernel gets F(4x4, 3x3) weights
    (36 transformed rows per filter pair); outputs stay within float32 rounding of the
    reference, also for a later shape too small to have chosen it."""
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((16, 32, 3, 3)) / np.sqrt(9 * 32)).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["z"], pads=[1, 1, 1, 1])],
                   [("x", F32, ["N", 32, "H", "W"])], [("z", F32, None)], {"w": w})
    cm = jitort.compile(m)
    for n, h, wd in [(1, 28, 30), (2, 5, 7)]:
        x = rng.standard_normal((n, 32, h, wd)).astype(np.float32)
        np.testing.assert_allclose(cm(x)[0], run_reference(m, {"x": x})[0], rtol=1e-4,
                                   atol=1e-4)
    shapes = [a.shape for c in cm._compilers.values() for _, a in c.consts.parts]
    assert (36, 16, 32) in shapes, shapes


def test_winograd_layers_keep_only_their_transformed_weights():
    """A Winograd layer's constants are its transformed weights alone (no raw copy in the
    arena), and it reserves no im2col scratch: the workspace is its output plus its own
    scratch."""
    from jitort.kernels.cpu.winograd import winograd_scratch_elems
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((16, 32, 3, 3)) / 17).astype(np.float32)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
                    helper.make_node("Relu", ["a"], ["z"])],
                   [("x", F32, [1, 32, 28, 28])], [("z", F32, None)], {"w": w})
    cm = jitort.compile(m, threads=1)
    x = rng.standard_normal((1, 32, 28, 28)).astype(np.float32)
    np.testing.assert_allclose(cm(x)[0], run_reference(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    shapes = [a.shape for c in cm._compilers.values() for _, a in c.consts.parts]
    assert shapes == [(36, 16, 32)], shapes
    (plan,) = list(cm.plans())
    scratch = winograd_scratch_elems(32, 16, 28, 28, 1, 4) * 4
    assert plan.ws_bytes <= scratch + 64, (plan.ws_bytes, scratch)


@pytest.mark.parametrize("kind", ["matmul", "gemm_tb"])
def test_constant_weights_are_packed_once(kind):
    """A float32 MatMul / Gemm over a constant matrix runs on jitort's gemm with the weights
    packed at compile time: the arena holds the packed panels (N padded to the panel width),
    not the raw matrix, and the driver calls the packed entry."""
    from jitort.kernels.cpu.sgemm import NR
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((512, 300)) / 20).astype(np.float32)
    c = rng.standard_normal(300).astype(np.float32)
    if kind == "matmul":
        nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]),
                 helper.make_node("Add", ["t", "c"], ["u"]), helper.make_node("Relu", ["u"], ["z"])]
        inits = {"w": w, "c": c}
    else:
        nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["z"], transB=1, alpha=0.5)]
        inits = {"w": np.ascontiguousarray(w.T), "c": c}
    m = make_model(nodes, [("x", F32, ["N", 512])], [("z", F32, None)], inits)
    cm = jitort.compile(m, threads=1)
    for rows in (1, 7, 40):
        x = rng.standard_normal((rows, 512)).astype(np.float32)
        np.testing.assert_allclose(cm(x)[0], run_reference(m, {"x": x})[0], rtol=1e-4,
                                   atol=1e-4)
    shapes = sorted(a.shape for cc in cm._compilers.values() for _, a in cc.consts.parts)
    packed = (512 * NR * -(-300 // NR),)
    assert shapes == [(300,), packed], shapes
    entry = "matmul_packed" if kind == "matmul" else "gemm_packed"
    assert Kernel("gemm", entry) in [c.callee for c in _calls(cm)]


def test_driver_calls_name_their_onnx_nodes():
    """Each step of a generated driver is preceded by a comment naming the node(s) it runs, so a
    reader of the driver knows which layer a line is; a fused group names all its members."""
    nodes = [helper.make_node("Mul", ["x", "y"], ["t"], name="scale"),
             helper.make_node("Relu", ["t"], ["u"], name="act"),
             helper.make_node("Softmax", ["u"], ["z"], name="probs")]
    cm = _compile_chain_checked(nodes, rows=3, cols=8)
    (path,) = cm.generated_sources()
    lines = [line.strip() for line in Path(path).read_text().splitlines()]
    notes = [line for line in lines if line.startswith("# ")]
    assert "# Mul(scale); Relu(act)" in notes and "# Softmax(probs)" in notes, notes
    # the comment sits right above the call it names
    i = lines.index("# Softmax(probs)")
    assert lines[i + 1].startswith("_nc(_softmax.softmax3d, "), lines[i + 1]


def test_call_sites_build_their_views():
    """A driver statement is one call: its array arguments (views of the workspace, of the
    constants, of inputs reshaped, of a Concat output's slice) are described in the call's
    spec and built by the call, not by view/reshape helper calls with ``d[i]`` sizes (each
    cost Numba ~10 ms or more to compile)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Sigmoid", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),  # a, b written in place
             helper.make_node("Tanh", ["c"], ["t"]),
             helper.make_node("Concat", ["c", "t"], ["c2"], axis=1),
             helper.make_node("Mul", ["c2", "c2"], ["e"]),
             helper.make_node("Reshape", ["e", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "w"], ["g"]),
             helper.make_node("Softmax", ["g"], ["s"]),
             helper.make_node("Reshape", ["s", "flat"], ["z"])]
    m = make_model(nodes, [("x", F32, [1, 3, 4, 4]), ("w", F32, [192, "K"])], [("z", F32, None)],
                   {"shape": np.array([-1, 192], np.int64), "flat": np.array([-1], np.int64)})
    cm = jitort.compile(m)
    rng = np.random.default_rng(0)
    for k in (4, 7):  # the second plan's sizes replayed, its views checked again
        feeds = {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32),
                 "w": rng.standard_normal((192, k)).astype(np.float32)}
        (got,) = cm(**feeds)
        np.testing.assert_allclose(got, run_reference(m, feeds)[0], rtol=1e-5, atol=1e-6)
    (path,) = cm.generated_sources()
    text = Path(path).read_text()
    body = text[text.index("def part0"):]
    assert not re.search(r"\b(view|rs|flat)_\w+\(", body), body
    sites = re.findall(r'^\s+_nc\(\S+, "\w+:\d+", fp, d, \(([^)]*)\), "([^"]*)"', body, re.M)
    assert sites and all(spec for _, spec in sites), body
    assert any(re.search(r"v\d:float32:\d+\+\d+:", spec) for _, spec in sites), sites  # Concat slice


def test_view_specs_parse_and_are_checked_against_the_plan():
    from jitort.codegen import native
    from jitort.errors import ExecutionError
    assert native.parse_spec("a0;s4;v1:float32:3+4:0,1*2;v0:-:-:-;v2:-:-:#;e0:int64:5:1") == (
        ("a", 0), ("s", 4), ("v", 1, "float32", (3, 4), ((0,), (1, 2))), ("v", 0, None, (), ()),
        ("v", 2, None, (), ((-1,),)), ("e", 0, "int64", (5,), ((1,),)))
    d = np.array([2, 3, 4, 0, 96], np.int64)  # sizes 2, 3, 4; bytes [0, 96)
    fits = {"base": "ws", "dtype": "float32", "start": (3,), "end": (4,), "sizes": ((0,), (1, 2)),
            "item": 4}
    native.check_views([fits], d, {"ws": 96})
    with pytest.raises(ExecutionError, match="does not fit"):
        native.check_views([dict(fits, sizes=((0,), (1,)))], d, {"ws": 96})  # 24 of 96 bytes
    with pytest.raises(ExecutionError, match="does not fit"):
        native.check_views([fits], d, {"ws": 64})  # past the end of the buffer
    empty = dict(fits, end=(3,), sizes=((3,),), scalar=True)  # element 0 of 0 elements
    with pytest.raises(ExecutionError, match="element 0 of an empty view"):
        native.check_views([empty], d, {"ws": 96})
    arg = {"base": "x0", "dtype": None, "start": (), "end": None, "sizes": ((0, 1),)}
    native.check_views([arg], d, {"x0": 24, "x0.item": 4})
    with pytest.raises(ExecutionError, match="6 elements, the array has 5"):
        native.check_views([arg], d, {"x0": 20, "x0.item": 4})

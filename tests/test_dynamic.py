"""Dynamic shapes: one compilation for every shape, plans replayed from a recording, bounded
plan cache, data-dependent ops through the interpreter."""
import gc

import numpy as np
import pytest
from onnx import TensorProto, helper

import jitort
from jitort import runtime
from jitort.codegen.cpu import SegmentCompiler
from jitort.codegen.symbolic import Sym, Tape
from jitort.planner import check_plan

from .helpers import F32, I64, assert_outputs_close, make_model, run_reference
from .models import shared_feeds, shared_path


def _encoder_like():
    """Embedding, Shape->Gather->Concat->Reshape chains, a head split, batched MatMuls, softmax
    with a mask, a Concat with a constant along S, a host-parameter Slice, LayerNorm."""
    rng = np.random.default_rng(0)
    h, heads = 16, 2
    init = {
        "emb": rng.standard_normal((50, h)).astype(np.float32),
        "wqkv": (rng.standard_normal((h, 3 * h)) / 4).astype(np.float32),
        "bqkv": rng.standard_normal(3 * h).astype(np.float32),
        "wo": (rng.standard_normal((h, h)) / 4).astype(np.float32),
        "g": np.ones(h, np.float32), "b": np.zeros(h, np.float32),
        "cls": rng.standard_normal((1, 1, h)).astype(np.float32),
        "i0": np.array([0], np.int64), "i1": np.array([1], np.int64),
        "three": np.array([3], np.int64), "nh": np.array([heads], np.int64),
        "hd": np.array([h // heads], np.int64), "hh": np.array([h], np.int64),
        "one": np.array([1], np.int64), "big": np.array([1 << 40], np.int64),
        "scale": np.array(0.35, np.float32), "neg": np.array(-1e4, np.float32),
        "onef": np.array(1.0, np.float32),
    }
    N = helper.make_node
    nodes = [
        N("Gather", ["emb", "ids"], ["e"]),
        N("Shape", ["e"], ["sh"]),
        N("Gather", ["sh", "i0"], ["B"]), N("Gather", ["sh", "i1"], ["S"]),
        N("Expand", ["cls", "bshape"], ["clsb"]),
        N("Concat", ["B", "one", "hh"], ["bshape"], axis=0),
        N("Concat", ["clsb", "e"], ["x"], axis=1),  # [B, S+1, h]
        N("MatMul", ["x", "wqkv"], ["qkv0"]), N("Add", ["qkv0", "bqkv"], ["qkv"]),
        N("Reshape", ["qkv", "s5a"], ["q5"]),
        N("Concat", ["B", "minus1", "three", "nh", "hd"], ["s5a"], axis=0),
        N("Constant", [], ["minus1"], value=helper.make_tensor("m1", TensorProto.INT64, [1], [-1])),
        N("Transpose", ["q5"], ["qt"], perm=[2, 0, 3, 1, 4]),  # [3, B, nh, S+1, hd]
        N("Split", ["qt"], ["q", "k", "v"], axis=0, num_outputs=3),
        N("Squeeze", ["q", "i0"], ["q4"]), N("Squeeze", ["k", "i0"], ["k4"]),
        N("Squeeze", ["v", "i0"], ["v4"]),
        N("Transpose", ["k4"], ["kt"], perm=[0, 1, 3, 2]),
        N("MatMul", ["q4", "kt"], ["att0"]), N("Mul", ["att0", "scale"], ["att1"]),
        N("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
        N("Concat", ["ones_b", "mf"], ["mfull"], axis=1),
        N("Expand", ["onef", "b1"], ["ones_b"]),
        N("Concat", ["B", "one"], ["b1"], axis=0),
        N("Sub", ["onef", "mfull"], ["inv"]), N("Mul", ["inv", "neg"], ["madd"]),
        N("Unsqueeze", ["madd", "u12"], ["m4"]),
        N("Constant", [], ["u12"], value=helper.make_tensor("u", TensorProto.INT64, [2], [1, 2])),
        N("Add", ["att1", "m4"], ["att2"]), N("Softmax", ["att2"], ["p"], axis=-1),
        N("MatMul", ["p", "v4"], ["ctx"]), N("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]),
        N("Concat", ["B", "minus1", "hh"], ["s3"], axis=0),
        N("Reshape", ["ct", "s3"], ["c3"]), N("MatMul", ["c3", "wo"], ["o"]),
        N("Add", ["o", "x"], ["r"]),
        N("LayerNormalization", ["r", "g", "b"], ["ln"], axis=-1),
        N("Slice", ["ln", "i1", "big", "i1"], ["tok"]),  # drop the class token: [B, S, h]
        N("ReduceMean", ["tok", "i1"], ["pooled"], keepdims=0),
        N("Tanh", ["pooled"], ["out2"]),
    ]
    return make_model(_toposorted(nodes, set(init) | {"ids", "mask", ""}), [("ids", I64, ["B", "S"]), ("mask", I64, ["B", "S"])],
                      [("tok", F32, None), ("out2", F32, None)], init, opset=18)


def _toposorted(nodes, known):
    out, todo = [], list(nodes)
    while todo:
        ready = [n for n in todo if all(i in known for i in n.input)]
        assert ready, "cycle in the test model"
        for n in ready:
            out.append(n)
            known |= set(n.output)
            todo.remove(n)
    return out


SHAPES = [(2, 5), (3, 7), (1, 4), (4, 1), (2, 16), (5, 3), (1, 1), (3, 33)]


def _feeds(b, s, seed=0):
    rng = np.random.default_rng(seed + 13 * b + s)
    mask = (rng.random((b, s)) > 0.2).astype(np.int64)
    mask[:, 0] = 1
    return {"ids": rng.integers(0, 50, (b, s)).astype(np.int64), "mask": mask}


@pytest.fixture(scope="module")
def encoder():
    m = _encoder_like()
    return m, jitort.compile(m)


def test_every_shape_matches_the_reference_with_one_compilation(encoder):
    m, cm = encoder
    cm(**_feeds(2, 3))
    before = jitort.compile_count()
    for b, s in SHAPES:
        f = _feeds(b, s)
        got = cm(**f)
        want = run_reference(m, f)
        assert_outputs_close(got, want, rtol=1e-4, atol=1e-5)
    assert jitort.compile_count() == before, "a new input shape recompiled something"
    assert len(cm.generated_sources()) == 1
    # replays did the planning: at most one recording per unit-dim pattern (B=1 / S=1 / both)
    comps = list(cm._compilers.values())
    assert sum(c.replays for c in comps) >= len(SHAPES) - 4
    assert all(len(c.records) <= 4 for c in comps)
    for p in cm.plans():
        check_plan(p.memory)


def test_replayed_plans_equal_full_lowerings(encoder):
    """The replay of a recording produces exactly the plan a full lowering produces."""
    m, cm = encoder
    compared = 0
    for b, s in SHAPES:
        f = _feeds(b, s)
        cm(**f)
        env = dict(zip(cm._input_ids, cm._validate(f)))
        for step in cm.steps:
            comp = cm._compilers.get(id(step))
            if comp is None:
                continue
            compared += 1
            replayed = comp.plan(env)
            fresh = SegmentCompiler(step, cm.placement, cm._run_host, runtime.infer_shapes)
            fresh.memo = {k: v for k, v in comp.memo.items() if k != "unit_dims"}
            full = fresh.plan(env)
            assert replayed.source_path == full.source_path
            np.testing.assert_array_equal(replayed.d, full.d)
            assert len(replayed.pb) == len(full.pb)
            for h_replayed, h_full in zip(replayed.pb, full.pb, strict=True):
                np.testing.assert_array_equal(h_replayed, h_full)
            assert replayed.ws_bytes == full.ws_bytes
            assert replayed.out_shapes == full.out_shapes
    assert compared >= len(SHAPES), "no compiled segment: nothing compared"


def test_probe_pass_runs_only_the_shape_chain(encoder):
    """The unit-dim probe needs shapes only: host nodes that make data are shape-inferred, not
    run; the shape chain still runs; shapes agree. (The encoder's data-only Expands are
    elementwise with compiled consumers, so they are compiled: see
    test_a_shape_derived_mask_chain_is_compiled_not_evaluated_per_shape. The mask model's
    Range/Unsqueeze/ReduceMax make data on the host.)"""
    m, cm = encoder
    cm(**_feeds(1, 6))
    modes = {}
    for comp in cm._compilers.values():
        modes.update({n.outputs[0].name: mode for n, mode, _, _ in comp._node_program()})
    assert modes["sh"] == modes["B"] == modes["bshape"] == modes["s5a"] == 1  # shapes
    assert modes["qkv"] == modes["clsb"] == modes["ones_b"] == 0  # compiled
    mask = jitort.compile(_causal_mask_model())
    x = np.zeros((1, 6, 6), np.float32)
    mask(x)
    env = dict(zip(mask._input_ids, mask._validate({"x": x})))
    comps = list(mask._compilers.values())
    modes = {}
    for comp in comps:
        modes.update({n.outputs[0].name: mode for n, mode, _, _ in comp._node_program()})
    assert modes["sh"] == modes["S"] == 1  # the shape chain
    assert modes["r"] == modes["row"] == modes["col"] == modes["rmax"] == 2  # data only
    assert modes["keep"] == modes["mask"] == 0
    for comp in comps:
        ins = {id(v): env[id(v)].shape for v in comp.seg.inputs}
        vals = {id(v): env[id(v)] for v in comp.seg.value_inputs}
        full, full_host, _ = comp._shape_pass(ins, vals)
        probe, probe_host, _ = comp._shape_pass(ins, vals, probe=True)
        assert probe == full
        data_only = {id(n.outputs[0]) for n, mode, _, _ in comp._node_program() if mode == 2}
        assert data_only and not data_only & set(probe_host) and data_only <= set(full_host)


def test_shape_memo_shares_equal_nodes_and_changes_no_shape(encoder):
    """Nodes with the same op, attributes and input shapes (q/k/v's Squeeze here, every
    layer's ops in a transformer) share one memoized inference; results equal a pass without
    the memo, for every shape, fresh or memoized."""
    m, cm = encoder
    for b, s in SHAPES:
        f = _feeds(b, s)
        cm(**f)
        env = dict(zip(cm._input_ids, cm._validate(f)))
        for comp in cm._compilers.values():
            ins = {id(v): env[id(v)].shape for v in comp.seg.inputs}
            vals = {id(v): env[id(v)] for v in comp.seg.value_inputs}
            memo_shapes, _, memo_compiled = comp._shape_pass(ins, vals)
            plain = SegmentCompiler(comp.seg, cm.placement, cm._run_host, runtime.infer_shapes)
            plain._program = comp._node_program()
            plain._sigs = [None] * len(plain._program)  # no signature: no memo
            plain_shapes, _, plain_compiled = plain._shape_pass(ins, vals)
            assert memo_shapes == plain_shapes and memo_compiled == plain_compiled
            assert not plain._infer_memo
    comp = max(cm._compilers.values(), key=lambda c: len(c._infer_memo))
    sigs = [sig for sig, (_, mode, _, _) in zip(comp._sigs, comp._program) if mode == 0]
    assert all(sig is not None for sig in sigs)
    assert len({sig[0] for sig in sigs}) < len(sigs)  # q4/k4/v4 share a signature


def test_unit_dims_reused_when_the_ones_fall_in_the_same_places(encoder):
    """At B=1 the probe (a second shape pass at B=2) answers which 1s are broadcasts; a later
    B=1 shape whose values have 1s in exactly the same places reuses that answer, and it is
    the answer the probe would give. A shape with 1s elsewhere (S=1) probes again."""
    m, cm = encoder
    cm(**_feeds(2, 5))
    for comp in cm._compilers.values():
        comp._unit_cache.clear()
    probes = []
    for b, s, reuse in ((1, 4, False), (1, 9, True), (1, 1, False)):
        f = _feeds(b, s)
        env = dict(zip(cm._input_ids, cm._validate(f)))
        for comp in cm._compilers.values():
            if not any(env[id(v)].shape[0] == 1 for v in comp.seg.inputs):
                continue
            ins = {id(v): env[id(v)].shape for v in comp.seg.inputs}
            vals = {id(v): env[id(v)] for v in comp.seg.value_inputs}
            shapes, _, _ = comp._shape_pass(ins, vals)
            calls = []
            orig = comp._shape_pass
            comp._shape_pass = lambda *a, **k: calls.append(1) or orig(*a, **k)
            try:
                unit = comp._probe_unit_dims(env, shapes)
            finally:
                del comp._shape_pass
            fresh = SegmentCompiler(comp.seg, cm.placement, cm._run_host, runtime.infer_shapes)
            assert unit == fresh._probe_unit_dims(env, shapes)
            assert (not calls) == reuse, (b, s)
            probes.append(b)
        np.testing.assert_allclose(cm(**f)[0], run_reference(m, f)[0], rtol=1e-4, atol=1e-5)
    assert probes


def test_tape_records_arithmetic_guards_and_pins():
    t = Tape()
    a, b = t.leaf_shape(1, (3, 4))
    (c,) = t.leaf_shape(2, (5,))
    size = a * b * 4 + c  # 53
    assert isinstance(size, Sym) and size.v == 53
    big = a * b > 10  # a guard: the decision is part of the recording
    assert big is True
    pinned = int(c)  # leaves the tape: c must stay 5 for a replay to apply
    assert pinned == 5
    f = t.compile([size, a * 2, 7])
    assert f({1: (3, 4), 2: (5,)}) == [53, 6, 7]
    assert f({1: (6, 4), 2: (5,)}) == [101, 12, 7]
    assert f({1: (2, 4), 2: (5,)}) is None, "a*b > 10 no longer holds"
    assert f({1: (3, 4), 2: (6,)}) is None, "c was pinned"
    assert f({1: (3, 4, 1), 2: (5,)}) is None, "rank changed"


def test_same_shape_guards_only_what_decides():
    """(1, S) vs (B, S) at B=1: different because of S' (1 vs 16), which is all the recording
    may depend on -- not on B == 1, or B=2 would need a new recording."""
    from jitort.codegen.symbolic import same_shape
    tape = Tape()
    a = tape.leaf_shape(1, (1, 16))
    b = tape.leaf_shape(2, (1, 1))
    assert not same_shape(a, b)
    f = tape.compile([])
    assert f({1: (1, 16), 2: (1, 1)}) == [] and f({1: (2, 16), 2: (3, 1)}) == []
    assert f({1: (2, 1), 2: (3, 1)}) is None  # now equal where it was decided: guard fails
    tape2 = Tape()
    c, d = tape2.leaf_shape(1, (2, 3)), tape2.leaf_shape(2, (2, 3))
    assert same_shape(c, d)
    g = tape2.compile([])
    assert g({1: (4, 5), 2: (4, 5)}) == [] and g({1: (4, 5), 2: (4, 6)}) is None


def test_plan_cache_is_a_bounded_lru(monkeypatch):
    monkeypatch.setattr(runtime, "PLAN_CACHE_SIZE", 3)
    m = make_model([helper.make_node("Add", ["x", "x"], ["y"]),
                    helper.make_node("Sigmoid", ["y"], ["z"])],
                   [("x", F32, ["N", 8])], [("z", F32, None)])
    cm = jitort.compile(m)
    for n in range(1, 8):
        x = np.full((n, 8), 0.25, np.float32)
        np.testing.assert_allclose(cm(x)[0], 1 / (1 + np.exp(-2 * x)), rtol=1e-6)
    plans = list(cm.plans())
    assert len(plans) == 3 and sorted(p.out_shapes[0][0] for p in plans) == [5, 6, 7]
    x = np.full((1, 8), -1.0, np.float32)  # evicted: planned again, still right
    np.testing.assert_allclose(cm(x)[0], 1 / (1 + np.exp(2.0)), rtol=1e-6)
    assert len(list(cm.plans())) == 3
    cm.release()
    assert list(cm.plans()) == [] and cm._tls.ws is None
    np.testing.assert_allclose(cm(x)[0], 1 / (1 + np.exp(2.0)), rtol=1e-6)


def test_workspace_grows_only_when_a_larger_plan_needs_it():
    m = make_model([helper.make_node("Exp", ["x"], ["a"]), helper.make_node("MatMul", ["a", "a"], ["b"]),
                    helper.make_node("Relu", ["b"], ["y"])], [("x", F32, ["N", "N"])], [("y", F32, None)])
    cm = jitort.compile(m)
    cm(np.zeros((16, 16), np.float32))
    ws = cm._tls.ws
    cm(np.zeros((4, 4), np.float32))
    assert cm._tls.ws is ws, "a smaller plan reuses the workspace"
    cm(np.zeros((64, 64), np.float32))
    assert cm._tls.ws.size >= cm.workspace_bytes > ws.size


# --- data-dependent shapes: dynamic steps between compiled segments --------------------------

def _check_against_reference(m, feeds_list):
    cm = jitort.compile(m)
    for f in feeds_list:
        got = cm(**f)
        want = run_reference(m, f)
        assert_outputs_close(got, want, rtol=1e-5, atol=1e-6)
    return cm


def test_nonzero_feeds_compiled_code():
    m = make_model([helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("NonZero", ["r"], ["nz"]),
                    helper.make_node("Transpose", ["nz"], ["idx"]),
                    helper.make_node("GatherND", ["x", "idx"], ["vals"]),
                    helper.make_node("Mul", ["vals", "vals"], ["sq"]),
                    helper.make_node("ReduceSum", ["sq"], ["y"], keepdims=0)],
                   [("x", F32, ["N", "M"])], [("y", F32, None), ("vals", F32, None)])
    rng = np.random.default_rng(0)
    cm = _check_against_reference(m, [{"x": rng.standard_normal((n, 5)).astype(np.float32)}
                                      for n in (3, 8, 1)])
    assert cm.fallback_nodes() == [] and cm.placement_counts()["dynamic"] == 1  # dynamic_ops.py
    assert cm.placement_counts()["cpu"] >= 2, "the elementwise work around NonZero stays compiled"


def test_topk_with_k_from_an_input():
    m = make_model([helper.make_node("Neg", ["x"], ["n"]),
                    helper.make_node("TopK", ["n", "k"], ["v", "i"], axis=-1),
                    helper.make_node("Exp", ["v"], ["y"])],
                   [("x", F32, ["N", "M"]), ("k", I64, [1])], [("y", F32, None), ("i", I64, None)])
    rng = np.random.default_rng(1)
    _check_against_reference(m, [{"x": rng.standard_normal((4, 9)).astype(np.float32),
                                  "k": np.array([k], np.int64)} for k in (1, 3, 9)])


def test_small_inputs_read_through_a_chain_are_plan_time_values():
    """A window length Cast before a Range and a crop shape combined with Shape(x) into Pad's
    pads (the expanded HannWindow / CenterCropPad functions): the small inputs become plan-time
    values, so nothing is interpreted and each new value gets its own plan."""
    m = make_model([helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
                    helper.make_node("Range", ["zero", "nf", "one"], ["r"]),
                    helper.make_node("Cos", ["r"], ["w"]),
                    helper.make_node("Shape", ["x"], ["xs"]),
                    helper.make_node("Max", ["xs", "s"], ["big"]),
                    helper.make_node("Sub", ["big", "xs"], ["d"]),
                    helper.make_node("Concat", ["zeros2", "d"], ["pads"], axis=0),
                    helper.make_node("Pad", ["x", "pads"], ["p"]),
                    helper.make_node("Relu", ["p"], ["y"])],
                   [("x", F32, [2, "N"]), ("n", I64, []), ("s", I64, [2])],
                   [("w", F32, None), ("y", F32, None)],
                   {"zero": np.float32(0), "one": np.float32(1), "zeros2": np.zeros(2, np.int64)})
    rng = np.random.default_rng(2)
    cm = jitort.compile(m, strict=True)
    for n, s, cols in ((10, (3, 4), 5), (7, (2, 9), 5), (10, (3, 4), 3)):
        f = {"x": rng.standard_normal((2, cols)).astype(np.float32),
             "n": np.array(n, np.int64), "s": np.array(s, np.int64)}
        got = cm(**f)
        assert_outputs_close(got, run_reference(m, f), rtol=1e-5, atol=1e-6)
        assert got[0].shape == (n,) and got[1].shape == (max(2, s[0]), max(cols, s[1]))
    assert cm.fallback_nodes() == []
    assert cm.placement_counts()["host"] >= 5  # Cast, Range, Shape, Max, Sub, Concat


def test_loop_whose_output_grows_with_the_trip_count():
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["acc_out", "two"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F32, ["M"])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F32, ["M"]), helper.make_tensor_value_info("scan", F32, ["M"])],
        [helper.make_tensor("one", F32, [], [1.0]), helper.make_tensor("two", F32, [], [2.0])])
    m = make_model([helper.make_node("Loop", ["n", "c", "x"], ["acc", "scans"], body=body),
                    helper.make_node("Sigmoid", ["scans"], ["y"])],
                   [("n", I64, []), ("c", TensorProto.BOOL, []), ("x", F32, ["M"])],
                   [("acc", F32, None), ("y", F32, None)])
    _check_against_reference(m, [{"n": np.array(t, np.int64), "c": np.array(True),
                                  "x": np.linspace(-1, 1, 4).astype(np.float32)} for t in (1, 3, 6)])


def test_if_branches_with_different_shapes():
    then_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then", [],
                               [helper.make_tensor_value_info("t", F32, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F32, None)])
    m = make_model([helper.make_node("If", ["c"], ["z"], then_branch=then_g, else_branch=else_g),
                    helper.make_node("Tanh", ["z"], ["y"])],
                   [("c", TensorProto.BOOL, []), ("x", F32, ["N", 3])], [("y", F32, None)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    _check_against_reference(m, [{"c": np.array(c), "x": x} for c in (True, False, True)])


# --- the shared model corpus over the shape grid of issue 4 ----------------------------------

GRID = {"bert": [(b, s) for b in (1, 2, 4, 8) for s in (8, 16, 32, 64, 128, 256)],
        "gpt2": [(b, s) for b in (1, 2, 4, 8) for s in (8, 16, 32, 64, 128, 256)],
        "vit": [(b, None) for b in (1, 2, 4, 8)],
        "resnet18": [(b, None) for b in (1, 2, 4, 8)]}


@pytest.mark.slow
@pytest.mark.models
@pytest.mark.parametrize("name", list(GRID))
def test_shared_models_over_the_shape_grid(name):
    path = shared_path(name)
    if not path.exists():
        pytest.skip(f"{path} not present (../shared/models or $JITORT_MODEL_DIR)")
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    cm = jitort.compile(path)
    first = True
    for b, s in GRID[name]:
        feeds = shared_feeds(name, b, s) if s else shared_feeds(name, b)
        got = cm.run(None, feeds)[0]
        if first:
            before, first = jitort.compile_count(), False
        want = sess.run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=f"{name} B={b} S={s}")
        plan_ratio = [p.memory.ratio for p in cm.plans()]
        assert max(plan_ratio) <= 1.05, f"{name} B={b} S={s}: workspace {max(plan_ratio):.3f}x the bound"
    assert jitort.compile_count() == before, f"{name}: a new shape recompiled"
    assert len(cm.generated_sources()) == 1
    gc.collect()


def test_example_shapes_preplan_and_precompile():
    m = _encoder_like()
    cm = jitort.compile(m, example_shapes=[{"ids": (2, 6), "mask": (2, 6)},
                                           {"ids": (1, 3), "mask": (1, 3)}])
    assert len(list(cm.plans())) == 2
    before = jitort.compile_count()
    n_plans = len(list(cm.plans()))
    f = _feeds(2, 6)
    assert_outputs_close(cm(**f), run_reference(m, f), rtol=1e-4, atol=1e-5)
    assert jitort.compile_count() == before and len(list(cm.plans())) == n_plans
    with pytest.raises(jitort.InvalidInput, match="lack input 'mask'"):
        cm.prepare({"ids": (1, 2)})
    with pytest.raises(jitort.InvalidInput, match="unknown input"):
        cm.prepare({"idz": (1, 2)})


def test_memory_report_and_png(encoder, tmp_path):
    pytest.importorskip("matplotlib")
    from jitort.memory import memory_report, plot_plan
    _, cm = encoder
    cm(**_feeds(3, 9))
    rows = memory_report(cm)
    assert rows and all(r["workspace_bytes"] >= r["lower_bound"] > 0 for r in rows)
    plan = max(cm.plans(), key=lambda p: p.ws_bytes)
    assert any(plan.memory.labels.values()), "tensors carry their value names"
    out = plot_plan(plan, tmp_path / "plan.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def _causal_mask_model():
    """scores [B, S, S] + a causal mask built from the shape alone (Range -> LessOrEqual -> Where,
    as transformers exports it) ; Range's output also feeds a host Reshape target."""
    N = helper.make_node
    init = {"i1": np.array([1], np.int64), "zero": np.array(0, np.int64),
            "one": np.array(1, np.int64), "ax0": np.array([0], np.int64),
            "ax1": np.array([1], np.int64), "z": np.array(0.0, np.float32),
            "ninf": np.array(-np.inf, np.float32)}
    nodes = [
        N("Shape", ["x"], ["sh"]), N("Gather", ["sh", "i1"], ["S1"]),
        N("Squeeze", ["S1", "ax0"], ["S"]),
        N("Range", ["zero", "S", "one"], ["r"]),
        N("Unsqueeze", ["r", "ax0"], ["row"]), N("Unsqueeze", ["r", "ax1"], ["col"]),
        N("LessOrEqual", ["row", "col"], ["keep"]),  # [S, S]: key <= query
        N("Not", ["keep"], ["drop"]), N("Not", ["drop"], ["keep2"]),
        N("Where", ["keep2", "z", "ninf"], ["mask"]),
        N("Add", ["x", "mask"], ["y0"]), N("Softmax", ["y0"], ["y"], axis=-1),
        N("ReduceMax", ["r"], ["rmax"], keepdims=1),  # a host consumer of r keeps Range on the host
        N("Cast", ["rmax"], ["rmaxf"], to=F32),
        N("Add", ["y", "rmaxf"], ["out"]),
    ]
    return make_model(nodes, [("x", F32, ["B", "S", "S"])], [("out", F32, None)], init, opset=18)


def test_a_shape_derived_mask_chain_is_compiled_not_evaluated_per_shape():
    model = _causal_mask_model()
    cm = jitort.compile(model)
    place = {n.op_type: cm.placement[id(n)] for n in cm.graph.nodes}
    # the data chain from Range to Where runs in a fused kernel; the shape ops stay on the host
    assert [place[op] for op in ("LessOrEqual", "Not", "Where")] == ["cpu"] * 3
    assert [place[op] for op in ("Shape", "Range", "ReduceMax")] == ["host"] * 3
    rng = np.random.default_rng(0)
    compiles = None
    for b, s in [(2, 5), (1, 9), (3, 1), (2, 64)]:
        x = rng.standard_normal((b, s, s)).astype(np.float32)
        got = cm(x)[0]
        want = run_reference(model, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        if compiles is None:
            compiles = jitort.compile_count()
    assert jitort.compile_count() == compiles  # new shapes: no new compilation

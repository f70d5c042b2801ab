"""Pass output graphs: before/expected op lists, and numerics unchanged."""
import numpy as np
from onnx import helper

import jitort
from jitort.importer import import_model
from jitort.passes import run_pipeline
from jitort.passes.patterns import fold_conv_batchnorm, fuse_matmul_add
from jitort.passes.simplify import (eliminate_common_subexpressions, eliminate_dead_code,
                                    eliminate_identities, fold_constants)

from .helpers import F32, make_model, run_reference


def ops(g):
    return [n.op_type for n in g.nodes]


def test_conv_bn_folding():
    rng = np.random.default_rng(0)
    init = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "b": rng.standard_normal(4).astype(np.float32),
            "s": rng.uniform(0.5, 2, 4).astype(np.float32), "bb": rng.standard_normal(4).astype(np.float32),
            "mu": rng.standard_normal(4).astype(np.float32), "var": rng.uniform(0.5, 2, 4).astype(np.float32)}
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"])],
                   [("x", F32, [1, 3, 8, 8])], [("y", F32, None)], init)
    g = import_model(m)
    assert ops(g) == ["Conv", "BatchNormalization"]
    assert fold_conv_batchnorm(g) == 1
    assert ops(g) == ["Conv"]
    g.verify()
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(jitort.compile(m)(x)[0], run_reference(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_conv_bn_not_folded_when_conv_output_is_shared():
    init = {"w": np.ones((2, 1, 1, 1), np.float32), "s": np.ones(2, np.float32),
            "bb": np.zeros(2, np.float32), "mu": np.zeros(2, np.float32), "var": np.ones(2, np.float32)}
    m = make_model([helper.make_node("Conv", ["x", "w"], ["c"]),
                    helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"])],
                   [("x", F32, [1, 1, 2, 2])], [("y", F32, None), ("c", F32, None)], init)
    g = import_model(m)
    assert fold_conv_batchnorm(g) == 0


def test_matmul_add_becomes_matmulbias():
    rng = np.random.default_rng(2)
    init = {"w": rng.standard_normal((8, 5)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
                   [("x", F32, ["B", "S", 8])], [("y", F32, None)], init)
    g = import_model(m)
    assert fuse_matmul_add(g) == 1
    assert [(n.domain, n.op_type) for n in g.nodes] == [("jitort", "MatMulBias")]
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    np.testing.assert_allclose(jitort.compile(m)(x)[0], x @ init["w"] + init["b"], rtol=1e-5, atol=1e-5)


def test_identity_cse_dce_and_folding():
    init = {"two": np.array([2.0], np.float32), "two_b": np.array([2.0], np.float32),
            "shape": np.array([4], np.int64)}
    m = make_model([
        helper.make_node("Identity", ["x"], ["xi"]),
        helper.make_node("Mul", ["xi", "two"], ["a"]),
        helper.make_node("Mul", ["xi", "two_b"], ["b"]),      # same as a after constant merging
        helper.make_node("Expand", ["two", "shape"], ["e"]),  # constant: folded
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Add", ["s", "e"], ["y"]),
        helper.make_node("Neg", ["x"], ["unused"]),           # dead
    ], [("x", F32, [4])], [("y", F32, None)], init)
    g = import_model(m)
    assert eliminate_identities(g) == 1
    assert fold_constants(g) == 1
    assert eliminate_common_subexpressions(g) >= 1
    assert eliminate_dead_code(g) == 1
    assert ops(g) == ["Mul", "Add", "Add"]
    g2 = import_model(m)
    report = run_pipeline(g2)
    assert ops(g2) == ops(g) and report.rewrites["eliminate_dead_code"] == 1
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(jitort.compile(m)(x)[0], run_reference(m, {"x": x})[0])


def test_printer_is_deterministic_and_verify_passes():
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, ["N"])], [("y", F32, None)])
    g = import_model(m)
    g.verify()
    assert str(g) == str(import_model(m))
    assert "Relu(%x)" in str(g)

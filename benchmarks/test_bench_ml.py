"""Classical ML (ai.onnx.ml) latency: scikit-learn models converted by skl2onnx, jitort vs
onnxruntime at one thread in the same run, at 1 row and at 10,000 rows.

    python -m pytest benchmarks/test_bench_ml.py --benchmark-only -q

Models (20 float features, fitted on 2,000 rows, ``target_opset={"": 17, "ai.onnx.ml": 3}``,
ZipMap off unless named): RandomForestClassifier and ExtraTreesClassifier (100 trees, depth 8,
3 classes), GradientBoostingClassifier (100 trees, 3 classes) and GradientBoostingRegressor
(100 trees), HistGradientBoostingClassifier (100 iterations, 3 classes) and
HistGradientBoostingRegressor (100 iterations; both converted through
tests/test_ml_ops._bool_lists_as_ints, skl2onnx 1.20 and protobuf >= 7.34 disagreeing),
LogisticRegression (with and without ZipMap), LinearSVC, and a pipeline
ColumnTransformer(OneHotEncoder on two integer-valued columns, StandardScaler on the rest) +
RandomForestClassifier (50 trees, depth 8); through onnxmltools (``target_opset`` 15, ZipMap
off): XGBClassifier (100 trees, depth 6, 3 classes) and LGBMClassifier (100 trees, 31
leaves, 3 classes). Issue 45's bar: at 1 thread, jitort at most 0.5x
onnxruntime's time at 10,000 rows and at most 1.0x at 1 row.

onnxruntime: ``SessionOptions()`` with only ``intra_op_num_threads=1``; jitort:
``jitort.compile(model, threads=1, strict=True)`` (every node compiled). Outputs are checked
against onnxruntime's first (labels exactly, probabilities within 1e-5). Each round, in
pytest-benchmark's untimed setup, runs BLOCK onnxruntime calls and times the last, then
BLOCK - 1 jitort calls; pytest-benchmark times the next jitort call. onnxruntime's median goes
to ``extra_info["ort_median_s"]`` and the ratio to ``extra_info["ratio"]``; the session summary
(benchmarks/conftest.py) prints every ratio and their geometric mean.
"""
import time

import numpy as np
import onnxruntime as ort
import pytest

import jitort
from tests.helpers import assert_outputs_close
from tests.test_ml_ops import _convert as convert

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import (ExtraTreesClassifier, GradientBoostingClassifier,  # noqa: E402
                              GradientBoostingRegressor, HistGradientBoostingClassifier,
                              HistGradientBoostingRegressor, RandomForestClassifier)
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402

ROUNDS = 15
BLOCK = 3
FEATURES = 20
ROWS = (1, 10_000)


def _data(rows, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    x[:, :2] = rng.integers(0, 4, (rows, 2))  # two categorical (integer-valued) columns
    return x


_XT = _data(2000, 0)
_Y3 = (_XT[:, 2] + _XT[:, 3] > 0).astype(np.int64) + (_XT[:, 4] > 0.8)
_YR = 2 * _XT[:, 2] + _XT[:, 5] * _XT[:, 6]


def _convert(est, y, zipmap=False):
    return convert(est, y, zipmap, x=_XT)


MODELS = {
    "random_forest": lambda: _convert(RandomForestClassifier(100, max_depth=8, random_state=0), _Y3),
    "extra_trees": lambda: _convert(ExtraTreesClassifier(100, max_depth=8, random_state=0), _Y3),
    "gbm_classifier": lambda: _convert(GradientBoostingClassifier(n_estimators=100, random_state=0), _Y3),
    "gbm_regressor": lambda: _convert(GradientBoostingRegressor(n_estimators=100, random_state=0), _YR, None),
    "histgb_classifier": lambda: _convert(HistGradientBoostingClassifier(max_iter=100, random_state=0), _Y3),
    "histgb_regressor": lambda: _convert(HistGradientBoostingRegressor(max_iter=100, random_state=0), _YR, None),
    "logreg": lambda: _convert(LogisticRegression(max_iter=500), _Y3),
    "logreg_zipmap": lambda: _convert(LogisticRegression(max_iter=500), _Y3, zipmap=True),
    "linear_svc": lambda: _convert(LinearSVC(random_state=0), _Y3, None),
    "onehot_scaler_forest": lambda: _convert(Pipeline([
        ("cols", ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0, 1]),
                                    ("num", StandardScaler(), list(range(2, FEATURES)))])),
        ("rf", RandomForestClassifier(50, max_depth=8, random_state=0))]), _Y3),
    "xgboost_classifier": lambda: _onnxmltools("xgboost"),
    "lightgbm_classifier": lambda: _onnxmltools("lightgbm"),
}


def _onnxmltools(which: str):
    onnxmltools = pytest.importorskip("onnxmltools")
    from onnxmltools.convert.common.data_types import FloatTensorType
    x = [("X", FloatTensorType([None, FEATURES]))]
    if which == "xgboost":
        xgboost = pytest.importorskip("xgboost")
        est = xgboost.XGBClassifier(n_estimators=100, max_depth=6, random_state=0).fit(_XT, _Y3)
        return onnxmltools.convert_xgboost(est, initial_types=x, target_opset=15)
    lightgbm = pytest.importorskip("lightgbm")
    est = lightgbm.LGBMClassifier(n_estimators=100, random_state=0, verbose=-1).fit(_XT, _Y3)
    return onnxmltools.convert_lightgbm(est, initial_types=x, target_opset=15, zipmap=False)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("name", list(MODELS))
def test_ml_latency(benchmark, name, rows):
    benchmark.group = f"{name} rows={rows}"
    model = MODELS[name]()
    feeds = {model.graph.input[0].name: _data(rows, 1)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    cm = jitort.compile(model, threads=1, strict=True)
    got, want = cm.run(None, feeds), sess.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap: one {label: probability} per row
            assert [sorted(d) for d in g] == [sorted(d) for d in w]
            np.testing.assert_allclose([list(d.values()) for d in g],
                                       [list(d.values()) for d in w], atol=1e-5)
        elif w.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w)
        else:
            assert_outputs_close([g], [w], rtol=1e-5, atol=1e-5)
    ort_times = []

    def setup():
        for _ in range(BLOCK):
            t = time.perf_counter()
            sess.run(None, feeds)
        ort_times.append(time.perf_counter() - t)
        for _ in range(BLOCK - 1):
            cm.run(None, feeds)

    benchmark.pedantic(lambda: cm.run(None, feeds), setup=setup, rounds=ROUNDS, warmup_rounds=1)
    if benchmark.disabled:  # --benchmark-disable: one call each, outputs checked above
        return
    ort_med = float(np.median(ort_times[1:]))
    benchmark.extra_info.update(ort_median_s=ort_med, threads=1,
                                ratio=benchmark.stats.stats.median / ort_med)

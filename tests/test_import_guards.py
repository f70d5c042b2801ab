"""Models that crash onnx's own shape inference must not crash jitort's import.

onnx 1.23's inference of an ai.onnx.ml LabelEncoder whose input is untyped dereferences the
missing type (a segmentation fault of the whole process), in jitort.compile's import and in
InferenceSession's output types alike; skl2onnx's decision-path outputs
(``options={"decision_path": True}``) build exactly that graph. The compile runs in a child
process so that a regression fails this test instead of killing the test session.
"""
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("skl2onnx")

_CHILD = textwrap.dedent("""
    import numpy as np, onnxruntime as ort
    from sklearn.ensemble import RandomForestClassifier
    from skl2onnx import to_onnx
    import jitort
    rng = np.random.default_rng(0)
    x = rng.random((60, 4)).astype(np.float32)
    est = RandomForestClassifier(3, max_depth=3, random_state=0).fit(x, (x[:, 0] > 0.5))
    model = to_onnx(est, x[:1], options={id(est): {"decision_path": True, "zipmap": False}})
    assert "LabelEncoder" in [n.op_type for n in model.graph.node]
    got = jitort.compile(model, tiered=False).run(None, {"X": x[:7]})
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"X": x[:7]})
    assert len(got) == len(want) == 3
    np.testing.assert_array_equal(got[0], want[0])                  # labels
    np.testing.assert_allclose(got[1], want[1], atol=1e-6)          # probabilities
    assert got[2].tolist() == want[2].tolist()                      # decision paths (strings)
    # the drop-in session infers its outputs' types with onnx too (get_outputs)
    sess = jitort.InferenceSession(model.SerializeToString())
    assert [o.name for o in sess.get_outputs()] == ["label", "probabilities", "decision_path"]
    assert sess.run(None, {"X": x[:7]})[2].tolist() == want[2].tolist()
    print("OK")
""")


def test_decision_path_model_imports_and_matches_onnxruntime():
    r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (
        f"child exited {r.returncode} (-11: segmentation fault)\n{r.stdout}\n{r.stderr[-3000:]}")

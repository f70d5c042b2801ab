"""Real models: outputs match onnxruntime, no node runs in the interpreter, workspace near the bound.

The nine onnx "light" models ship with the onnx package; the ten in ../shared/models are used
when present (skipped with a reason otherwise). Every model compiles in strict mode: a node the
partition leaves to the interpreter, or one a lowering declines at plan time, is an error.
"""
import numpy as np
import onnx
import pytest

import jitort

from .helpers import assert_outputs_close, require_cases
from .models import (SHARED, SHARED_MODELS, light_models, light_path, shared_feeds, shared_path,
                     without_final_softmax)

ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow


def _ort_run(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(path, feeds, capsys, name):
    cm = jitort.compile(path, strict=True)
    if callable(feeds):
        feeds = feeds(cm)
    got = cm.run(None, feeds)
    want = _ort_run(path, feeds)
    assert_outputs_close(got, want, rtol=1e-4, atol=1e-5, names=cm.output_names)
    share = cm.compiled_share
    with capsys.disabled():
        print(f"\n{name}: {cm.summary()}; workspace {cm.workspace_bytes} B, "
              f"lower bound {cm.workspace_lower_bound} B")
    assert cm.fallback_nodes() == [] and share == 1.0, f"{name}: interpreted {cm.fallback_nodes()}"
    assert cm.workspace_bytes <= 1.1 * cm.workspace_lower_bound
    return cm


#: onnx ships nine light models (onnx/backend/test/data/light); see require_cases.
MIN_LIGHT_MODELS = 8


@pytest.mark.parametrize("name", require_cases(light_models(), MIN_LIGHT_MODELS,
                                               "onnx's light models"))
def test_light_model(name, capsys):
    """Outputs against onnxruntime's; for the models that end in Softmax, the logits (see
    ``without_final_softmax``: their constant weights make every logit equal)."""
    image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    model = without_final_softmax(light_path(name)) or light_path(name)
    _check(model, lambda cm: {cm.input_names[0]: image}, capsys, name)


@pytest.mark.models
@pytest.mark.parametrize("name", SHARED_MODELS)
def test_shared_model(name, capsys):
    if not shared_path(name).exists():
        pytest.skip(f"{SHARED} not present (the shared model corpus is optional)")
    _check(shared_path(name), shared_feeds(name, batch=1, seq=32), capsys, name)

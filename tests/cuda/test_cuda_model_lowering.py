"""The benchmark's 19 models lower completely to the CUDA backend: every node placed on the GPU
(or computed on the host at plan time), no lowering declining its shapes at plan time.

The simulator would take hours to run these models' kernels (a Python thread per CUDA thread),
so the kernels are not run: each CUDA plan is made and its driver recorded (what a first call
does on a GPU), and the replay is skipped. What this checks is the compiler's side -- placement,
plan-time lowering, the recorded launches -- not the numbers (scripts/gpu_check.py compares
those on a GPU)."""
import onnx
import pytest

import jitort
from jitort import cuda_replay
from tests.models import SHARED, SHARED_MODELS, light_models, light_path, shared_feeds, shared_path

MODELS = [("shared", m) for m in SHARED_MODELS] + [("light", m) for m in light_models()]


def _feeds(kind, name, path):
    if kind == "shared":
        return shared_feeds(name, 1, 128)
    import numpy as np
    model = onnx.load(str(path), load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim])
            .astype(np.float32) for v in model.graph.input if v.name not in init}


@pytest.mark.parametrize("kind,name", MODELS, ids=[m for _, m in MODELS])
def test_model_lowers_completely_to_cuda(cuda, monkeypatch, kind, name):
    path = shared_path(name) if kind == "shared" else light_path(name)
    if not path.exists():
        pytest.skip(f"{path} not present ({SHARED}: the shared model corpus is optional)")
    monkeypatch.setattr(cuda_replay.Bound, "run", lambda self: None)  # recorded, not run
    monkeypatch.setattr(cuda_replay.Bound, "failed", lambda self: False)
    cm = jitort.compile(str(path), device="cuda")
    cm.run(None, _feeds(kind, name, path))
    counts = cm.placement_counts()
    assert set(counts) <= {"cuda", "host"} and counts["cuda"], counts
    assert not cm.fallback_reasons, cm.fallback_reasons
    bounds = [p.local.bound for p in cm.plans() if getattr(p.local, "bound", None)]
    assert bounds and all(b.launches for b in bounds)

"""Differential fuzzing of the CUDA backend: the generator of tests/test_fuzz.py (random small
graphs over the op families), compiled with ``device="cuda"`` and compared with onnxruntime.

A derandomized budget here (the simulator runs each kernel as Python); longer campaigns:
``python scripts/fuzz.py --tier cuda --examples 400 [--seed N]``.
"""
import os

from tests.test_fuzz import run_campaign

EXAMPLES = int(os.environ.get("JITORT_FUZZ_CUDA_EXAMPLES", "40"))


def test_fuzz_cuda_backend_against_onnxruntime(cuda):
    stats = run_campaign(EXAMPLES, derandomize=True, tier="cuda")
    print(dict(stats))
    assert stats["examples"] >= EXAMPLES * 0.9
    assert stats["ort"] + stats["onnx.reference"] >= stats["examples"] * 0.8, stats

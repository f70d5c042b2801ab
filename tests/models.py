"""Model corpus helpers shared by tests and benchmarks: where the models are and their feeds."""
from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

SHARED = Path(os.environ.get("JITORT_MODEL_DIR", Path(__file__).resolve().parents[1].parent
                             / "shared" / "models"))
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SHARED_MODELS = ["bert", "gpt2", "vit", "resnet18", "roberta", "crnn", "decoder", "resnext26ts",
                 "mobilevit_xxs", "ghostnet_100"]


def light_models() -> list[str]:
    return sorted(Path(p).stem.replace("light_", "") for p in glob.glob(str(LIGHT_DIR / "light_*.onnx")))


def light_path(name: str) -> Path:
    return LIGHT_DIR / f"light_{name}.onnx"


def light_feeds(name: str) -> tuple[dict, list]:
    """The inputs and expected outputs onnx ships next to a light model."""
    model = onnx.load(str(light_path(name)), load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    feeds = {}
    for i, n in enumerate(names):
        t = onnx.TensorProto()
        t.ParseFromString((LIGHT_DIR / f"light_{name}_input_{i}.pb").read_bytes())
        feeds[n] = numpy_helper.to_array(t)
    expected = []
    for p in sorted(glob.glob(str(LIGHT_DIR / f"light_{name}_output_*.pb"))):
        t = onnx.TensorProto()
        t.ParseFromString(Path(p).read_bytes())
        expected.append(numpy_helper.to_array(t))
    return feeds, expected


def shared_path(name: str) -> Path:
    return SHARED / f"{name}.onnx"


def shared_feeds(name: str, batch: int = 1, seq: int = 128, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    if name == "bert":
        mask = np.ones((batch, seq), np.int64)
        mask[:, seq - seq // 4:] = 0 if batch > 1 else 1
        return {"input_ids": rng.integers(0, 8000, (batch, seq)).astype(np.int64),
                "attention_mask": mask}
    if name == "roberta":
        mask = np.ones((batch, seq), np.int64)
        mask[:, seq - seq // 4:] = 0 if batch > 1 else 1
        return {"input_ids": rng.integers(0, 4000, (batch, seq)).astype(np.int64),
                "attention_mask": mask}
    if name == "gpt2":
        return {"input_ids": rng.integers(0, 8000, (batch, seq)).astype(np.int64)}
    if name == "crnn":
        return {"image": rng.standard_normal((batch, 1, 32, 128)).astype(np.float32)}
    if name == "decoder":
        return {"image": rng.standard_normal((batch, 3, 128, 128)).astype(np.float32)}
    size = 64 if name == "vit" else 224
    return {"pixel_values": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


def without_final_softmax(path) -> onnx.ModelProto | None:
    """The model at ``path`` with the Softmax that produces its only output removed (the output
    is then its logits), or None when it does not end in one.

    The light models' weights are constants (ConstantOfShape), so all their classes get the
    same logit (squeezenet: ~6.8e9). Softmax of those turns a 1-ulp difference between two
    rows of the last GEMM (OpenBLAS on AMD Zen computes some rows of squeezenet's 1000-class
    1x1 conv with another micro-kernel; onnxruntime does not) into a one-hot instead of
    0.001 everywhere. Comparing the logits compares what both engines compute; Softmax has
    its own kernel tests."""
    model = onnx.load(str(path))
    if len(model.graph.output) != 1:
        return None
    out = model.graph.output[0].name
    last = [n for n in model.graph.node if out in n.output]
    if len(last) != 1 or last[0].op_type != "Softmax":
        return None
    node = last[0]
    model.graph.node.remove(node)
    model.graph.output.pop()
    model.graph.output.append(onnx.helper.make_tensor_value_info(
        node.input[0], onnx.TensorProto.FLOAT, None))
    return model

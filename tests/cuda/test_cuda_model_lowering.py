"""The benchmark's 19 models lower completely to the CUDA backend, and every kernel they launch
compiles for a real GPU.

The simulator would take hours to run these models' kernels (a Python thread per CUDA thread),
so the kernels are not run: each CUDA plan is made and its driver recorded (what a first call
does on a GPU), and the replay is skipped. Checked: the compiler's side -- every node placed on
the GPU (or computed on the host at plan time), no lowering declining its shapes at plan time,
the recorded launches -- and, through NVVM without a GPU, that each recorded launch's kernel
compiles to PTX for the argument types it was recorded with (tests/cuda/test_cuda_ptx.py's
machinery): what a GPU would compile first. Not the numbers (scripts/gpu_check.py compares
those on a GPU)."""
import json
import sys

import numpy as np
import onnx
import pytest

import jitort
from jitort import cuda_replay
from tests.cuda.test_cuda_ptx import _run
from tests.models import SHARED, SHARED_MODELS, light_models, light_path, shared_feeds, shared_path

MODELS = [("shared", m) for m in SHARED_MODELS] + [("light", m) for m in light_models()]
#: float16 variants (onnxruntime's converter, float32 inputs and outputs kept) of a CNN, a
#: transformer and a hybrid
HALF_MODELS = [("float16", m) for m in ("resnet18", "bert", "mobilevit_xxs")]


def _feeds(kind, name, path):
    if kind != "light":
        return shared_feeds(name, 1, 128)
    model = onnx.load(str(path), load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim])
            .astype(np.float32) for v in model.graph.input if v.name not in init}


def _describe(a):
    """A JSON stand-in for a recorded launch argument, rebuilt with the same Numba type in
    the compiling process (an array by dtype, rank and layout; a scalar by its type: launches
    that differ in values alone compile once)."""
    a = getattr(a, "_ary", a)  # a simulator device array: its numpy memory
    if hasattr(a, "__cuda_array_interface__"):  # a device array (JITORT_TEST_CUDA=gpu)
        return ["a", a.dtype.str, a.ndim, "C" if a.is_c_contiguous() else "A"]
    if isinstance(a, np.ndarray):
        return ["a", a.dtype.str, a.ndim, "C" if a.flags.c_contiguous else "A"]
    if isinstance(a, tuple):
        return ["t", [_describe(x) for x in a]]
    if isinstance(a, (bool, np.bool_)):
        return ["b", True]
    if isinstance(a, np.generic):
        return ["n", a.dtype.str, 1]
    if isinstance(a, (int, float)):
        return ["i", 1] if isinstance(a, int) else ["f", 1.0]
    raise TypeError(f"a launch argument of type {type(a).__name__}")


def _locate(kernel):
    """Where the compiling process finds a recorded kernel: a generated module's file and the
    kernel's name, or a library module and the global (and dict key) holding it."""
    fn = getattr(kernel, "py_func", None) or kernel.fn  # numba's kernel, or the simulator's
    mod = sys.modules[fn.__module__]
    if not fn.__module__.startswith("jitort.kernels.cuda"):
        return ["gen", mod.__file__, fn.__name__]
    for attr, v in vars(mod).items():
        if v is kernel:
            return ["lib", fn.__module__, attr, None]
        if isinstance(v, dict):
            for key, vv in v.items():
                if vv is kernel:
                    return ["lib", fn.__module__, attr, str(key)]
    return ["lost", fn.__module__, fn.__qualname__]


@pytest.fixture(scope="module")
def recorded(cuda):
    """Per model: its compiled model with every plan bound and recorded (or why not), and the
    (kernel, argument types) of every recorded launch."""
    out, launches = {}, {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cuda_replay.Bound, "run", lambda self: None)  # recorded, not run
        mp.setattr(cuda_replay.Bound, "failed", lambda self: False)
        for kind, name in MODELS + HALF_MODELS:
            label = name if kind != "float16" else f"{name}_fp16"
            path = light_path(name) if kind == "light" else shared_path(name)
            if not path.exists():
                out[label] = f"{path} not present ({SHARED}: the shared model corpus is optional)"
                continue
            model = str(path)
            if kind == "float16":
                from onnxruntime.transformers.float16 import convert_float_to_float16
                model = convert_float_to_float16(onnx.load(model), keep_io_types=True)
            cm = jitort.compile(model, device="cuda")
            cm.run(None, _feeds(kind, name, path))
            out[label] = cm
            for p in cm.plans():
                bound = getattr(p.local, "bound", None)
                for r in (bound.launches if bound else []):
                    if hasattr(r, "kernel"):
                        key = json.dumps([_locate(r.kernel), [_describe(a) for a in r.args]])
                        launches.setdefault(key, label)
    return out, launches


_ALL = MODELS + HALF_MODELS


@pytest.mark.parametrize("kind,name", _ALL,
                         ids=[m if k != "float16" else f"{m}_fp16" for k, m in _ALL])
def test_model_lowers_completely_to_cuda(recorded, kind, name):
    cm = recorded[0][name if kind != "float16" else f"{name}_fp16"]
    if isinstance(cm, str):
        pytest.skip(cm)
    counts = cm.placement_counts()
    assert set(counts) <= {"cuda", "host"} and counts["cuda"], counts
    assert not cm.fallback_reasons, cm.fallback_reasons
    bounds = [p.local.bound for p in cm.plans() if getattr(p.local, "bound", None)]
    assert bounds and all(b.launches for b in bounds)


_COMPILE = """
import importlib
import numpy as np


def value(d):
    kind = d[0]
    if kind == "a":
        a = np.zeros((2,) * d[2], d[1])
        return a if d[3] == "C" else a[(slice(None, None, 2),) * d[2]]
    if kind == "t":
        return tuple(value(x) for x in d[1])
    if kind == "n":
        return np.dtype(d[1]).type(d[2])
    return d[1]


def kernel(where):
    if where[0] == "gen":
        space = {"__name__": "jitort_gen_ptx"}
        exec(compile(open(where[1]).read(), where[1], "exec"), space)
        return space[where[2]]
    if where[0] == "lost":
        raise LookupError(f"kernel {where[1]}.{where[2]} not held by its module")
    held = getattr(importlib.import_module(where[1]), where[2])
    if where[3] is None:
        return held
    return {str(k): v for k, v in held.items()}[where[3]]


promoted = set()
for key, model in LAUNCHES.items():
    where, args = json.loads(key)
    try:
        k = kernel(where)
    except Exception as e:
        failed.append(f"{model}: {where}: {type(e).__name__}: {e}")
        continue
    values = [value(a) for a in args]
    label = f"{model}: " + ".".join(str(w).rsplit("/", 1)[-1] for w in where[1:] if w)
    text = ptx(label, k.py_func, values)
    if text is not None and float32_only(values) and f64_ops(text):
        promoted.add(f"{label}: {f64_ops(text)} float64 instructions")
print("RESULT " + json.dumps({"failed": failed, "kernels": len(LAUNCHES),
                              "promoted": sorted(promoted)}))
"""


def test_every_kernel_the_models_launch_compiles_for_a_gpu(recorded):
    launches = recorded[1]
    if not launches:
        pytest.skip("no model recorded")
    out = _run(f"LAUNCHES = {json.dumps(launches)}\n" + _COMPILE)
    assert not out["failed"], "\n".join(out["failed"])
    # the 22 models record over 30 distinct launches; onnx's light models alone (the shared
    # corpus is optional) about a dozen
    corpus = all(not isinstance(v, str) for v in recorded[0].values())
    assert out["kernels"] == len(launches) >= (30 if corpus else 8), out
    # float32 work stays float32 on the device (tests/cuda/test_cuda_ptx.py says why)
    assert not out["promoted"], "\n".join(out["promoted"])

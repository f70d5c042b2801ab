#!/usr/bin/env python
"""The CUDA backend against the GPU runtimes of the same machine, one process per model.

    python scripts/gpu_check.py [MODEL...] [--batch 1 8] [--runs 30] [--timeout 300]
                                [--no-compile] [--float16] [--jsonl FILE]
    python scripts/gpu_check.py --overhead [--calls 2000]

MODEL: a path, a name of ``../shared/models`` (bert, gpt2, ...) or ``light:NAME`` (onnx's light
models); none: every shared model present and every light model (the benchmark's 19).

For each model and batch, in a fresh process (a kernel fault cannot poison the next model's
context), on the same random feed (``tests/models.py``'s for the shared models; a fixed batch
of 1 is made symbolic for other batches):

* the outputs of ``jitort.compile(model, device="cuda")`` against onnxruntime's CPU provider
  (the reference for correctness), and the placement (nodes on cuda / cpu / interpreter);
* the time per call, float32, inputs and outputs resident on the GPU, each engine
  synchronizing before its call returns, engines taking turns round by round (medians):
  jitort (``run_on_device``), onnxruntime's CUDA provider where ``onnxruntime-gpu`` is
  installed (I/O bound on the device), PyTorch on the graph converted by ``onnx2torch``,
  eager and under ``torch.compile`` (Inductor; ``--no-compile`` skips it), TF32 off (exact
  float32, as jitort and onnxruntime's default);
* ``ratio``: jitort / the reference -- onnxruntime's CUDA provider if present, else PyTorch
  eager -- and ``vs_compile``: jitort / torch.compile.

``--float16``: every engine runs each model converted to float16 by onnxruntime's converter
(float32 inputs and outputs), outputs checked at a float16 tolerance.

The summary prints the geomean of the ratios per batch. ``--overhead`` measures the host time
per call of a 1-node model (Relu on 16 floats, device input and output) with its plan captured
as a CUDA graph (the output a new array each call, then written into the caller's array:
``outputs=``) and replayed launch by launch, and PyTorch's eager call of the same op.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# --- one model, in its own process ----------------------------------------------------------

def _resolve(spec: str) -> tuple[str, Path]:
    sys.path.insert(0, str(ROOT))
    from tests.models import SHARED_MODELS, light_path, shared_path
    if spec.startswith("light:"):
        return spec, light_path(spec[6:])
    if spec in SHARED_MODELS:
        return spec, shared_path(spec)
    return Path(spec).stem, Path(spec)


def _default_models() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from tests.models import SHARED_MODELS, light_models, shared_path
    return ([m for m in SHARED_MODELS if shared_path(m).exists()]
            + [f"light:{m}" for m in light_models()])


def _symbolic_batch(model):
    """``model`` with a first dim of 1 on its inputs and outputs made symbolic (``N``)."""
    for v in list(model.graph.input) + list(model.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value == 1:
            dims[0].dim_param = "N"
    del model.graph.value_info[:]
    return model


def _feeds(name: str, model, batch: int, seq: int) -> dict:
    import numpy as np
    from tests.models import SHARED_MODELS, shared_feeds
    if name in SHARED_MODELS:
        return shared_feeds(name, batch, seq)
    rng = np.random.default_rng(0)
    init = {t.name for t in model.graph.initializer}
    feeds = {}
    for v in model.graph.input:
        if v.name in init:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else (batch if k == 0 else seq)
                for k, d in enumerate(v.type.tensor_type.shape.dim)]
        feeds[v.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _worst(got, want) -> float:
    """Largest difference over the outputs, relative to each output's scale (at least 1)."""
    import numpy as np
    worst = 0.0
    for g, w in zip(got, want):
        g = np.asarray(g, np.float64)
        if g.shape != w.shape:
            return math.inf
        if w.size:
            scale = max(float(np.max(np.abs(w))), 1.0)
            worst = max(worst, float(np.nanmax(np.abs(g - w))) / scale)
    return worst


def _torch_engines(model, feeds: dict, truth, compile_too: bool, rec: dict) -> dict:
    """PyTorch eager (and torch.compile) on the graph converted by onnx2torch, or {}."""
    try:
        import onnx2torch
        import torch
    except ImportError as e:
        rec["torch"] = f"not run: {e}"
        return {}
    # exact float32 on both sides, as jitort computes (PyTorch's cuDNN default allows TF32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        module = onnx2torch.convert(model).cuda().eval()
    except Exception as e:  # an op onnx2torch does not convert
        rec["torch"] = f"not converted: {type(e).__name__}: {e}"[:300]
        return {}
    args = [torch.from_numpy(feeds[v.name]).cuda() for v in model.graph.input if v.name in feeds]

    def runner(fn):
        def call():
            with torch.inference_mode():
                out = fn(*args)
            torch.cuda.synchronize()
            return out
        return call
    engines = {"torch": runner(module)}
    out = engines["torch"]()
    out = out if isinstance(out, (tuple, list)) else [out]
    rec["torch_diff"] = _worst([o.float().cpu().numpy() for o in out], truth)
    if compile_too:
        t0 = time.perf_counter()
        try:
            engines["torch.compile"] = runner(torch.compile(module))
            engines["torch.compile"]()
            rec["torch_compile_s"] = round(time.perf_counter() - t0, 1)
        except Exception as e:
            engines.pop("torch.compile", None)
            rec["torch.compile"] = f"failed: {type(e).__name__}: {e}"[:300]
    return engines


def _ort_cuda_engine(data: bytes, feeds: dict, rec: dict) -> dict:
    """onnxruntime's CUDA provider, inputs and outputs bound on the device, or {}."""
    import onnxruntime as ort
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        rec["ort_cuda"] = "not installed (onnxruntime-gpu)"
        return {}
    sess = ort.InferenceSession(data, providers=["CUDAExecutionProvider"])
    binding = sess.io_binding()
    for k, v in feeds.items():
        binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
    for o in sess.get_outputs():
        binding.bind_output(o.name, "cuda")

    def call():
        sess.run_with_iobinding(binding)
    return {"ort-cuda": call}


def _timed(engines: dict, runs: int, warmup: int = 5) -> dict:
    """Median ms per call of each engine, the engines taking turns each round."""
    for fn in engines.values():
        for _ in range(warmup):
            fn()
    times: dict = {k: [] for k in engines}
    for _ in range(runs):
        for k, fn in engines.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: round(statistics.median(v) * 1e3, 3) for k, v in times.items()}


def _one(spec: str, batch: int, seq: int, runs: int, compile_too: bool,
         float16: bool = False) -> dict:
    import onnx
    import onnxruntime as ort

    import jitort
    from jitort.cuda_runtime import cuda_module
    name, path = _resolve(spec)
    model = onnx.load(str(path))  # external data loaded beside it
    if batch != 1:
        model = _symbolic_batch(model)
    if float16:  # onnxruntime's converter; inputs and outputs stay float32 for every engine
        from onnxruntime.transformers.float16 import convert_float_to_float16
        model = convert_float_to_float16(model, keep_io_types=True)
    data = model.SerializeToString()
    feeds = _feeds(name, model, batch, seq)
    rec: dict = {"model": name, "batch": batch, **({"dtype": "float16"} if float16 else {})}
    truth = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    t0 = time.perf_counter()
    cm = jitort.compile(data, device="cuda", tiered=False)
    rec["placement"] = dict(cm.placement_counts())
    got = cm.run(None, feeds)
    rec["first_s"] = round(time.perf_counter() - t0, 2)
    rec["diff"] = _worst(got, truth)
    rec["ok"] = rec["diff"] <= (3e-2 if float16 else 1e-3)
    cuda = cuda_module()
    dev = {k: cuda.to_device(v) for k, v in feeds.items()}
    engines = {"jitort": lambda: cm.run_on_device(None, dev)}
    engines.update(_ort_cuda_engine(data, feeds, rec))
    engines.update(_torch_engines(model, feeds, truth, compile_too, rec))
    rec["ms"] = _timed(engines, runs)
    rec["replay"] = dict(cm.replay_engines())
    from jitort.kernels.cuda import blas, dnn
    rec["products"] = ("cublas" + (" tf32" if blas.tf32() else "")
                       if blas.library() is not None else "own kernels")
    lib = dnn.library()
    rec["convolutions"] = f"cudnn {lib.version()}" if lib is not None else "no cudnn"
    from jitort import tuning  # the launchers' choices: this GPU's calibration, or the rules
    cal = tuning.load(device="cuda") if tuning.enabled() else {}
    rec["gpu_choices"] = (f"calibrated ({sum(len(e['buckets']) for e in cal.values())} buckets)"
                          if cal else "default rules")
    whys = {b.why for p in cm.plans() if (b := getattr(p.local, "bound", None)) and b.why}
    if whys:  # why a plan was not captured as a CUDA graph
        rec["replay_why"] = sorted(whys)
    ref = "ort-cuda" if "ort-cuda" in rec["ms"] else "torch" if "torch" in rec["ms"] else None
    if ref:
        rec["reference"] = ref
        rec["ratio"] = round(rec["ms"]["jitort"] / rec["ms"][ref], 3)
    if "torch.compile" in rec["ms"]:
        rec["vs_compile"] = round(rec["ms"]["jitort"] / rec["ms"]["torch.compile"], 3)
    return rec


# --- host overhead of a captured plan -------------------------------------------------------

def overhead(calls: int) -> None:
    import numpy as np
    from onnx import TensorProto, helper

    import jitort
    from jitort.cuda_runtime import cuda_module
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "one",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()
    cuda = cuda_module()
    dx = cuda.to_device(np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16))
    dy = cuda.device_array((1, 16), np.float32)
    for graphs, into in ((True, None), (True, [dy]), (False, None)):
        cm = jitort.compile(data, device="cuda", tiered=False, cuda_graphs=graphs)
        call = lambda: cm.run_on_device(None, {"x": dx}, outputs=into)  # noqa: E731
        for _ in range(50):
            call()
        (plan,) = cm.plans()
        bound = plan.local.bound
        ts = []
        for _ in range(calls):
            t0 = time.perf_counter()
            call()
            ts.append(time.perf_counter() - t0)
        rs = []
        for _ in range(calls):
            t0 = time.perf_counter()
            bound.run()
            rs.append(time.perf_counter() - t0)
        bound.stream.synchronize()
        how = "into the caller's array" if into else "a new output array"
        print(f"jitort run_on_device ({how}), replay {bound.engine.kind:8s}: "
              f"{statistics.median(ts) * 1e6:7.1f} us a call (median of {calls}); "
              f"the replay alone {statistics.median(rs) * 1e6:6.1f} us; why: {bound.why}",
              flush=True)
    try:
        import torch
    except ImportError:
        return
    tx = torch.from_numpy(dx.copy_to_host()).cuda()
    for _ in range(50):
        torch.relu(tx)
    torch.cuda.synchronize()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        torch.relu(tx)
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    print(f"torch eager relu + synchronize: {statistics.median(ts) * 1e6:7.1f} us a call")


# --- the parent: one process per model and batch --------------------------------------------

def _line(rec: dict) -> str:
    if "error" in rec:
        return f"{rec['model']:22s} b{rec['batch']:<2d} FAILED ({rec.get('wall_s')} s): {rec['error'][:600]}"
    ms = "  ".join(f"{k} {v:8.3f}" for k, v in rec["ms"].items())
    tail = f"ratio {rec['ratio']:.2f} vs {rec['reference']}" if "ratio" in rec else "no reference"
    if "vs_compile" in rec:
        tail += f", {rec['vs_compile']:.2f} vs torch.compile"
    notes = [f"{k}: {rec[k]}" for k in ("products", "convolutions", "gpu_choices", "torch",
                                         "torch.compile", "ort_cuda", "replay_why") if k in rec]
    dtype = " float16" if rec.get("dtype") else ""
    return (f"{rec['model']:22s} b{rec['batch']:<2d}{dtype} {'ok ' if rec['ok'] else 'BAD'} "
            f"diff {rec['diff']:.1e} first {rec['first_s']:5.1f} s  ms: {ms}  {tail}  "
            f"{rec['placement']} replay {rec['replay']} {'; '.join(notes)}")


def _summary(recs: list[dict]) -> None:
    for batch in sorted({r["batch"] for r in recs}):
        for key in ("ratio", "vs_compile"):
            xs = [r[key] for r in recs if r["batch"] == batch and key in r]
            if xs:
                g = math.exp(sum(math.log(x) for x in xs) / len(xs))
                print(f"batch {batch}: {key} geomean {g:.3f} over {len(xs)} models, "
                      f"max {max(xs):.2f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--float16", action="store_true",
                    help="each model converted to float16 (float32 inputs and outputs)")
    ap.add_argument("--jsonl", default=None, help="append one JSON record per model here")
    ap.add_argument("--overhead", action="store_true")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    # no calibration started in the background while engines are timed (`jitort tune` first)
    os.environ.setdefault("JITORT_TUNE_BACKGROUND", "0")
    if a.overhead:
        return overhead(a.calls)
    if a.one:
        try:
            rec = _one(a.models[0], a.batch[0], a.seq, a.runs, not a.no_compile, a.float16)
        except BaseException as e:  # reported, not raised: the parent prints a table
            rec = {"model": a.models[0], "batch": a.batch[0],
                   "error": f"{type(e).__name__}: {e}"[:2000],
                   "trace": traceback.format_exc()[-3000:]}
        print("RESULT " + json.dumps(rec), flush=True)
        return
    env = dict(os.environ, JITORT_TIERED="0", PYTHONUNBUFFERED="1")
    recs = []
    for m in a.models or _default_models():
        for batch in a.batch:
            t0 = time.perf_counter()
            cmd = [sys.executable, __file__, "--one", "--runs", str(a.runs), "--batch",
                   str(batch), "--seq", str(a.seq), *(["--no-compile"] if a.no_compile else []),
                   *(["--float16"] if a.float16 else []), m]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                rec = json.loads(lines[-1][7:]) if lines else {
                    "model": m, "batch": batch, "error": f"exit {p.returncode}: {p.stderr[-2000:]}"}
            except subprocess.TimeoutExpired:
                rec = {"model": m, "batch": batch, "error": f"timeout after {a.timeout:.0f} s"}
            rec["wall_s"] = round(time.perf_counter() - t0, 1)
            recs.append(rec)
            if a.jsonl:
                with open(a.jsonl, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            print(_line(rec), flush=True)
            if "trace" in rec:
                print(rec["trace"], flush=True)
    _summary(recs)


if __name__ == "__main__":
    main()

"""Where does the time go, jitort vs onnxruntime, per kind of op, on one model (issue 3).

    python scripts/compare_ops.py MODEL [--shape NAME=DIMS ...] [--threads 1] [--runs 20]

Both engines run the model with their profilers on (jitort: ``compile(profile=True)``, one
timed driver chunk per fused group; onnxruntime: ``enable_profiling``, its per-node
``kernel_time`` events), ``--runs`` times after a warm-up, in this process. Every kernel /
node is put in a category by the ops it covers (conv, gemm, pool, softmax, norm, data
movement, elementwise) and the mean microseconds per run are printed side by side, with
the ratio, then jitort's ten slowest kernels. Profiled runs are a little slower than plain
ones on both sides; the split is what this is for.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CATEGORIES = [  # first match wins; checked against every op a kernel covers
    ("conv", {"Conv", "FusedConv", "ConvTranspose", "NchwcConv", "QLinearConv"}),
    ("gemm", {"MatMul", "MatMulBias", "Gemm", "FusedMatMul", "FusedGemm", "MatMulInteger"}),
    ("attention/softmax", {"Softmax", "LogSoftmax", "Attention", "MultiHeadAttention"}),
    ("norm", {"LayerNormalization", "SkipLayerNormalization", "BatchNormalization",
              "InstanceNormalization", "LRN", "SimplifiedLayerNormalization"}),
    ("pool", {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "NchwcMaxPool",
              "NchwcAveragePool", "NchwcGlobalAveragePool"}),
    ("reduce", {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"}),
    ("data", {"Transpose", "Reshape", "Concat", "Slice", "Gather", "Split", "Expand", "Tile",
              "Flatten", "Squeeze", "Unsqueeze", "Pad", "ReorderInput", "ReorderOutput",
              "GatherElements", "GatherND", "Shape", "Cast", "Identity"}),
]


def category(ops) -> str:
    ops = [o.split("+")[0] for o in ops] + [p for o in ops for p in o.split("+")[1:]]
    for name, members in CATEGORIES:
        if any(o in members for o in ops):
            return name
    return "elementwise/other"


def feeds_for(model_path: str, shapes: dict) -> dict:
    import onnx
    from onnx import helper
    m = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dims = shapes.get(vi.name) or [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
        dt = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if np.issubdtype(dt, np.integer):
            feeds[vi.name] = (np.ones(dims, dt) if "mask" in vi.name else
                              rng.integers(0, 100, dims).astype(dt))
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(dt)
    return feeds


def jitort_split(path: str, feeds: dict, threads: int, runs: int):
    import jitort
    m = jitort.compile(path, threads=threads, profile=True)
    m.run(None, feeds)
    m.run(None, feeds)
    m.profiler.events.clear()
    for _ in range(runs):
        m.run(None, feeds)
    per_cat = defaultdict(float)
    kernels = []
    for st in m.profiler.kernel_stats():
        us = st.total_ns / runs / 1e3
        per_cat[category(st.ops)] += us
        kernels.append((us, st.name, "+".join(st.ops)[:40], ",".join(st.nodes)[:70]))
    return per_cat, sorted(kernels, reverse=True)


def ort_split(path: str, feeds: dict, threads: int, runs: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    s.run(None, feeds)
    s.run(None, feeds)
    for _ in range(runs):
        s.run(None, feeds)
    trace = s.end_profiling()
    events = json.loads(Path(trace).read_text())
    per_node = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            per_node[e["name"]].append((e["dur"], e["args"].get("op_name", "")))
    per_cat = defaultdict(float)
    nodes = []
    for name, evs in per_node.items():
        evs = evs[-runs:]  # the warm-up calls are in the trace too
        us = sum(d for d, _ in evs) / len(evs)
        per_cat[category([evs[0][1]])] += us
        nodes.append((us, evs[0][1], name[:-len("_kernel_time")]))
    return per_cat, sorted(nodes, reverse=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--top", type=int, default=10, help="slowest kernels / nodes listed")
    args = ap.parse_args(argv)
    shapes = {k: [int(d) for d in v.split("x")] for k, v in (s.split("=") for s in args.shape)}
    feeds = feeds_for(args.model, shapes)
    j, kernels = jitort_split(args.model, feeds, args.threads, args.runs)
    o, ort_nodes = ort_split(args.model, feeds, args.threads, args.runs)
    print(f"{Path(args.model).name}, {args.threads} thread(s), mean us per run over {args.runs} runs")
    print("| category | jitort us | onnxruntime us | jitort/ORT |")
    print("|---|---|---|---|")
    for cat in sorted(set(j) | set(o), key=lambda c: -(j.get(c, 0) + o.get(c, 0))):
        a, b = j.get(cat, 0.0), o.get(cat, 0.0)
        print(f"| {cat} | {a:.0f} | {b:.0f} | {a / b:.2f} |" if b else f"| {cat} | {a:.0f} | {b:.0f} | - |")
    ta, tb = sum(j.values()), sum(o.values())
    print(f"| total | {ta:.0f} | {tb:.0f} | {ta / tb:.2f} |")
    print("\njitort's slowest kernels (us per run):")
    for us, name, ops, nodes in kernels[:args.top]:
        print(f"  {us:8.0f}  {name}  {ops}  [{nodes}]")
    print("\nonnxruntime's slowest nodes (us per run):")
    for us, op, name in ort_nodes[:args.top]:
        print(f"  {us:8.0f}  {op}  [{name}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

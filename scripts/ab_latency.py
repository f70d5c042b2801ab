"""Steady-state latency of one model of ../shared/models under whichever jitort is first on
sys.path, against onnxruntime (default session options, only intra-op threads set) in the same
process, engines alternating: prints one JSON line with both medians and their ratio.

Before/after a change, same run (a worktree of the old commit, with its ``jitort/kernels``
linked to its ``kernels/``)::

    git worktree add /tmp/base <commit> && ln -s ../kernels /tmp/base/jitort/kernels
    for m in resnet18 bert; do
        PYTHONPATH=/tmp/base python scripts/ab_latency.py $m 1 5
        python scripts/ab_latency.py $m 1 5
    done

Arguments: model name, threads, blocks (each engine: 2 untimed calls, then 1 timed, per block).
"""
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import jitort
name, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
path = str(Path(__file__).resolve().parents[1].parent / "shared" / "models" / f"{name}.onnx")
rng = np.random.default_rng(0)
if name in ("bert", "roberta", "gpt2"):
    feeds = {"input_ids": rng.integers(0, 4000, (1, 128)).astype(np.int64)}
    if name != "gpt2":
        feeds["attention_mask"] = np.ones((1, 128), np.int64)
elif name == "crnn":
    feeds = {"image": rng.standard_normal((1, 1, 32, 128)).astype(np.float32)}
elif name == "decoder":
    feeds = {"image": rng.standard_normal((1, 3, 128, 128)).astype(np.float32)}
elif name == "vit":
    feeds = {"pixel_values": rng.standard_normal((1, 3, 64, 64)).astype(np.float32)}
else:
    feeds = {"pixel_values": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
cm = jitort.compile(path, threads=threads, tiered=False)
so = ort.SessionOptions(); so.intra_op_num_threads = threads
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
for _ in range(3):
    cm.run(None, feeds); sess.run(None, feeds)
tj, to = [], []
for _ in range(reps):
    for f, acc in ((lambda: cm.run(None, feeds), tj), (lambda: sess.run(None, feeds), to)):
        for _ in range(2): f()
        t = time.perf_counter(); f(); acc.append(time.perf_counter() - t)
j, o = np.median(tj) * 1e3, np.median(to) * 1e3
print(json.dumps({"model": name, "jitort_ms": round(j, 3), "ort_ms": round(o, 3), "ratio": round(j / o, 3), "tree": jitort.__file__}))

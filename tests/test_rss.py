"""10,000 calls leave the resident set flat: no per-call leak on the success or the error path."""
import gc
import os

import numpy as np
from onnx import helper

import jitort

from .helpers import F32, I64, make_model

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _model():
    rng = np.random.default_rng(0)
    init = {"w": rng.standard_normal((64, 256)).astype(np.float32) / 8,
            "t": rng.standard_normal((100, 64)).astype(np.float32)}
    nodes = [helper.make_node("Gather", ["t", "ids"], ["e"]),
             helper.make_node("Add", ["e", "x"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    return make_model(nodes, [("ids", I64, ["B"]), ("x", F32, ["B", 64])], [("y", F32, None)], init)


def test_ten_thousand_calls_keep_rss_flat():
    cm = jitort.compile(_model())
    rng = np.random.default_rng(1)
    feeds = [{"ids": rng.integers(0, 100, b).astype(np.int64),
              "x": rng.standard_normal((b, 64)).astype(np.float32)} for b in (1, 3, 8, 17, 32)]
    bad = [{"ids": np.array([0, 100], np.int64), "x": np.ones((2, 64), np.float32)},  # range
           {"ids": np.array([0], np.int64), "x": np.ones((1, 63), np.float32)},       # dim
           {"ids": np.array([0], np.int32), "x": np.ones((1, 64), np.float32)}]       # dtype

    def calls(n):
        for i in range(n):
            if i % 10 == 9:  # the error path must not leak either (tracebacks, half-run plans)
                try:
                    cm.run(None, bad[i % len(bad)])
                except jitort.InvalidInput:
                    continue
                raise AssertionError("a bad feed was accepted")
            out = cm.run(None, feeds[i % len(feeds)])
            assert out[0].shape == (feeds[i % len(feeds)]["x"].shape[0], 256)

    calls(1000)  # warm up: plans, workspaces, allocator pools
    gc.collect()
    before = rss_bytes()
    calls(10_000)
    gc.collect()
    after = rss_bytes()
    growth = (after - before) / before
    print(f"RSS {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB ({growth:+.2%}) over 10,000 calls")
    assert growth < 0.05, f"RSS grew {growth:.1%} over 10,000 calls ({before} -> {after} bytes)"

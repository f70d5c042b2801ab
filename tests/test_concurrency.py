"""One CompiledModel called from many threads: per-thread workspaces, results bit-identical."""
import threading

import numpy as np
from onnx import helper

import jitort

from .helpers import F32, make_model


def _mlp():
    rng = np.random.default_rng(0)
    init = {"w1": rng.standard_normal((32, 64)).astype(np.float32) / 8,
            "b1": rng.standard_normal(64).astype(np.float32),
            "w2": rng.standard_normal((64, 32)).astype(np.float32) / 8,
            "g": np.ones(32, np.float32), "beta": np.zeros(32, np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Tanh", ["hb"], ["t"]),
             helper.make_node("MatMul", ["t", "w2"], ["o"]),
             helper.make_node("Add", ["o", "x"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "beta"], ["y"], axis=-1)]
    return make_model(nodes, [("x", F32, ["B", 32])], [("y", F32, None)], init)


def test_threads_get_bit_identical_results():
    cm = jitort.compile(_mlp())
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((int(rng.integers(1, 9)), 32)).astype(np.float32) for _ in range(16)]
    expected = [cm(x)[0] for x in inputs]  # also plans every shape once
    errors = []

    def worker(k):
        for i in range(40):
            j = (k * 7 + i) % len(inputs)
            got = cm(inputs[j])[0]
            if not np.array_equal(got, expected[j]):
                errors.append((k, i, j))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]

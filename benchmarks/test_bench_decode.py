"""Token-by-token decoding with a KV cache: per-token time, jitort against onnxruntime, 1 thread.

    python -m pytest benchmarks/test_bench_decode.py --benchmark-only
    python benchmarks/test_bench_decode.py [--rounds 15]

The decoder is tests/gpt_decoder.py (4 layers, hidden 256, 4 heads, vocab 4096, random
weights). A round decodes ``WINDOW`` tokens one at a time from a past of some length, each
step feeding its presents back as the next past. Two figures, each a ratio against
onnxruntime on the same windows in the same run:

* steady state: every round decodes the same window, whose lengths were planned before;
* never-seen lengths: round ``r`` starts at a past length no earlier round reached, so every
  step plans a new input-shape signature (onnxruntime runs the same windows).

The script mode runs both runtimes round by round, alternating, and prints the medians.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JITORT_TIERED", "0")

import jitort  # noqa: E402
from tests import gpt_decoder as gd  # noqa: E402

WINDOW = 16  # tokens per round
STEADY_START = 40  # the steady-state window's first past length
NEW_START = 64  # never-seen windows: past lengths from here on, WINDOW per round


def make_runtimes():
    import onnxruntime as ort
    model = gd.build()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    cm = jitort.compile(model, threads=1, strict=True)
    return (lambda f: cm.run(None, f)), (lambda f: sess.run(None, f))


def window_feeds(start: int, seed: int = 0):
    """A past of length ``start`` and the window's token ids."""
    rng = np.random.default_rng(seed)
    shape = (1, gd.HEADS, start, gd.HIDDEN // gd.HEADS)
    past = {k: rng.standard_normal(shape).astype(np.float32) for k in gd.empty_past()}
    return past, gd.tokens(WINDOW, seed=start)


def decode_window(run, past: dict, ids: np.ndarray) -> float:
    """Seconds per token over the window."""
    t0 = time.perf_counter()
    for k in range(ids.shape[1]):
        outs = run({"input_ids": ids[:, k:k + 1], **past})
        past = gd.next_past(outs)
    return (time.perf_counter() - t0) / ids.shape[1]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} vCPU"
    except OSError:
        pass
    return platform.processor() or platform.machine()


# --- pytest-benchmark ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runtimes():
    jit, ort_run = make_runtimes()
    past, ids = window_feeds(STEADY_START)
    for run in (jit, ort_run):  # plans (and compiles) the steady window's lengths
        decode_window(run, past, ids)
    out_j = jit({"input_ids": ids[:, :1], **past})
    out_o = ort_run({"input_ids": ids[:, :1], **past})
    for a, b in zip(out_j, out_o):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    return {"jitort": jit, "ort": ort_run}


def _steady(benchmark, run):
    benchmark.group = f"decode_steady_per_token_x{WINDOW}"
    past, ids = window_feeds(STEADY_START)
    benchmark.pedantic(decode_window, args=(run, past, ids), rounds=15, iterations=1)


def _new_lengths(benchmark, run):
    benchmark.group = f"decode_new_lengths_per_token_x{WINDOW}"
    starts = iter(range(NEW_START, 10 ** 6, WINDOW))

    def setup():
        return (run, *window_feeds(next(starts))), {}
    benchmark.pedantic(decode_window, setup=setup, rounds=15, iterations=1)


def test_steady_jitort(benchmark, runtimes):
    _steady(benchmark, runtimes["jitort"])


def test_steady_ort(benchmark, runtimes):
    _steady(benchmark, runtimes["ort"])


def test_new_lengths_jitort(benchmark, runtimes):
    _new_lengths(benchmark, runtimes["jitort"])


def test_new_lengths_ort(benchmark, runtimes):
    _new_lengths(benchmark, runtimes["ort"])


# --- script mode -----------------------------------------------------------------------------
def main(rounds: int) -> None:
    jit, ort_run = make_runtimes()
    steady = window_feeds(STEADY_START)
    decode_window(jit, *steady)
    decode_window(ort_run, *steady)
    res = {"steady": ([], []), "new": ([], [])}
    for r in range(rounds):
        new = window_feeds(NEW_START + WINDOW * r)
        for key, feeds in (("steady", steady), ("new", new)):
            res[key][0].append(decode_window(jit, *feeds))
            res[key][1].append(decode_window(ort_run, *feeds))
    print(f"GPT-style decoder, 1 thread, {cpu_name()}; per-token medians over {rounds} rounds "
          f"of {WINDOW} tokens, onnxruntime {__import__('onnxruntime').__version__}")
    for key, label in (("steady", f"steady state (past {STEADY_START}..{STEADY_START + WINDOW - 1})"),
                       ("new", f"never-seen lengths (past {NEW_START}..{NEW_START + WINDOW * rounds - 1})")):
        j, o = statistics.median(res[key][0]), statistics.median(res[key][1])
        print(f"  {label:<45} jitort {j * 1e3:7.3f} ms  onnxruntime {o * 1e3:7.3f} ms  "
              f"ratio {j / o:5.2f}")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    main(ap.parse_args().rounds)

"""MatMul efficiency inside the transformer models: jitort's GEMM kernels, timed where they run
in bert / gpt2 (B=1, S=128, one thread), against numpy's sgemm on the same shapes, one thread,
in the same run (issue 3: "MatMul-heavy models reach >= 70 % of numpy's sgemm GFLOP/s").

    python -m pytest benchmarks/test_bench_gemm_models.py --benchmark-only -q

Each round runs the model once, compiled with ``profile=True`` (every step timed on its own;
the GEMM steps run the same kernels as without profiling), then numpy's ``matmul`` once on
each of the model's MatMul/Gemm shapes (read off an onnxruntime run of the same
feeds), each call timed the same way. Both sides count the same FLOPs, 2*batch*m*k*n per
product: the time of jitort's GEMM steps includes what they fuse (bias, Gelu), so the ratio
is a lower bound on the GEMM's own efficiency. numpy's BLAS is limited to one thread for its
side (threadpoolctl); jitort's BLAS runs one thread in its kernels anyway.
"""
import math
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from threadpoolctl import threadpool_limits

import jitort
from tests.models import shared_feeds, shared_path

MODELS = ("bert", "gpt2")
ROUNDS = 15
GEMM_OPS = {"MatMul", "MatMulBias", "Gemm", "FusedMatMul", "FusedGemm"}
_RESULTS = {}  # model -> (jitort GFLOP/s, numpy GFLOP/s, GEMM steps)


def matmul_shapes(path, feeds) -> list[tuple[int, int, int, int]]:
    """(batch, m, k, n) of every MatMul / Gemm of the model at these feeds: onnxruntime runs
    the model once with every operand added to the outputs (onnx shape inference leaves
    some of them symbolic)."""
    m = onnx.load(str(path))
    nodes = [n for n in m.graph.node if n.op_type in ("MatMul", "Gemm")]
    dims = {t.name: list(t.dims) for t in m.graph.initializer}
    dims.update({k: list(v.shape) for k, v in feeds.items()})
    wanted = [i for i in dict.fromkeys(i for n in nodes for i in n.input[:2]) if i not in dims]
    m.graph.output.extend(onnx.ValueInfoProto(name=i) for i in wanted)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(wanted, feeds)
    dims.update({i: list(v.shape) for i, v in zip(wanted, got)})
    out = []
    for node in nodes:
        a, b = dims[node.input[0]], dims[node.input[1]]
        if node.op_type == "Gemm":
            ta = any(at.name == "transA" and at.i for at in node.attribute)
            tb = any(at.name == "transB" and at.i for at in node.attribute)
            m_, k_ = (a[1], a[0]) if ta else (a[0], a[1])
            out.append((1, m_, k_, b[0] if tb else b[1]))
        elif len(b) == 2:   # (..., m, k) @ (k, n): leading dims fold into m
            out.append((1, math.prod(a[:-1]), a[-1], b[1]))
        else:
            out.append((math.prod(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))),
                        a[-2], a[-1], b[-1]))
    return out


def _numpy_round(operands) -> float:
    """Seconds numpy's matmul takes over the shapes, each call timed as jitort's steps are."""
    total = 0.0
    for a, b, c in operands:
        t = time.perf_counter()
        np.matmul(a, b, out=c)
        total += time.perf_counter() - t
    return total


def _gemm_seconds(events) -> tuple[float, int]:
    """Time (s) and count of the GEMM steps among one run's profiler events."""
    steps = [e for e in events if e["cat"] == "kernel" and e["args"]["op_name"]
             and all(op.split("+")[0] in GEMM_OPS for op in e["args"]["op_name"].split(","))]
    return sum(e["dur"] for e in steps) / 1e6, len(steps)


@pytest.mark.parametrize("name", MODELS)
def test_gemm_efficiency(benchmark, name):
    path = shared_path(name)
    if not path.exists():
        pytest.skip("../shared/models not present")
    feeds = shared_feeds(name, 1, 128)
    shapes = matmul_shapes(path, feeds)
    flops = sum(2 * b * m * k * n for b, m, k, n in shapes)
    rng = np.random.default_rng(0)
    operands = [(rng.standard_normal((b, m, k), dtype=np.float32),
                 rng.standard_normal((b, k, n), dtype=np.float32),
                 np.empty((b, m, n), np.float32)) for b, m, k, n in shapes]
    cm = jitort.compile(path, threads=1, profile=True)
    cm.run(None, feeds)
    jit_s, np_s, steps = [], [], []

    def one_round():
        cm.profiler.events.clear()
        cm.run(None, feeds)
        s, n = _gemm_seconds(cm.profiler.events)
        jit_s.append(s)
        steps.append(n)
        with threadpool_limits(1, user_api="blas"):
            np_s.append(_numpy_round(operands))

    benchmark.group = f"gemm efficiency {name} t1"
    benchmark.pedantic(one_round, rounds=ROUNDS, warmup_rounds=1)
    # every MatMul/Gemm became exactly one GEMM step, so both sides do the same products
    assert set(steps) == {len(shapes)}, (steps, len(shapes))
    gj, gn = flops / np.median(jit_s[1:]) / 1e9, flops / np.median(np_s[1:]) / 1e9
    benchmark.extra_info.update(jitort_gflops=gj, numpy_gflops=gn, gemm_steps=len(shapes))
    _RESULTS[name] = (gj, gn, len(shapes))


class _Summary:
    def pytest_terminal_summary(self, terminalreporter):
        if not _RESULTS:
            return
        tr = terminalreporter
        tr.write_sep("=", "GEMM steps inside the models (1 thread) vs numpy sgemm on the same "
                          "shapes (1 thread), same run")
        for name, (gj, gn, n) in _RESULTS.items():
            tr.write_line(f"{name:<6} {n:3d} products  jitort {gj:6.1f} GFLOP/s  "
                          f"numpy {gn:6.1f} GFLOP/s  jitort/numpy {gj / gn:6.1%}")


@pytest.fixture(scope="session", autouse=True)
def _summary_plugin(request):
    plugin = _Summary()
    request.config.pluginmanager.register(plugin, "jitort_bench_gemm_models_summary")
    yield

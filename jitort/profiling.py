"""Per-kernel profiling: timed driver chunks, Chrome-trace output, FLOP estimates, machine peak.

``jitort.compile(model, profile=True)`` compiles every segment's driver with one chunk per
step (one fused group or one lowered node), and runs those chunks from a Python loop that
times each with ``time.perf_counter_ns``. Interpreter steps and whole segments get events too.
``CompiledModel.end_profiling()`` writes the events as a Chrome trace (the JSON list format
onnxruntime's ``enable_profiling`` writes), viewable in Perfetto or ``chrome://tracing``.

Invariant: a model compiled without ``profile`` runs exactly the code it ran before; the
profile mode only changes how drivers are chunked (so it compiles and caches its own drivers).
"""
from __future__ import annotations

import json
import math
import os
import platform
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .codegen import module as modmgr

@dataclass
class Part:
    """One timed driver chunk: the kernels it calls and the ONNX nodes lowered into them."""

    fn: Callable
    name: str  # kernel(s) called, e.g. "k_add_mul_relu_1a2b" or "_gemm.matmul"
    kernels: list[str]
    nodes: list[str]  # node labels
    ops: list[str]  # op types (:func:`op_label`: fused ops name what they absorbed)
    flops: int


@dataclass
class KernelStat:
    """Aggregated timings of one step (see :meth:`Profiler.kernel_stats`)."""

    name: str
    ops: list[str]
    nodes: list[str]
    calls: int = 0
    total_ns: int = 0
    flops: int = 0  # per call
    kind: str = "kernel"

    @property
    def mean_us(self) -> float:
        return self.total_ns / max(self.calls, 1) / 1e3

    @property
    def gflops(self) -> float:
        """Achieved GFLOP/s (FLOPs per call / mean time)."""
        return self.flops / (self.total_ns / max(self.calls, 1)) if self.total_ns else 0.0


class Profiler:
    """Collects trace events for one CompiledModel (thread-safe appends)."""

    def __init__(self):
        self.events: list[dict] = []
        self.pid = os.getpid()
        self.t0 = time.perf_counter_ns()
        self.started = time.time()

    # --- what the compiler asks ------------------------------------------------------------
    def parts(self, compiler, fns: list[Callable], chunks: list[list[str]],
              steps: list[int | None], shapes: dict) -> list[Part]:
        """Describe each chunk: called kernels, nodes lowered into its step, FLOP estimate."""
        from .codegen.assembly import callee_names  # (here: cpu_name() must stay light)
        items = _step_items(compiler, shapes)
        out = []
        for fn, lines, step in zip(fns, chunks, steps):
            kernels = callee_names(lines)
            nodes = [] if step is None or step >= len(items) else items[step]
            flops = sum(node_flops(n, shapes) for n in nodes)
            out.append(Part(fn, "+".join(kernels) or "empty", kernels, [n.label for n in nodes],
                            [op_label(n) for n in nodes], flops))
        return out

    def driver(self, parts: list[Part]) -> Callable:
        """A driver with the generated ``call``'s signature that times each chunk."""
        perf = time.perf_counter_ns
        record = self._record

        def driver(*args):
            for p in parts:
                before = modmgr.compiles()
                t = perf()
                p.fn(*args)
                end = perf()
                record(p.name, "kernel", t, end,
                       {"op_name": ",".join(p.ops), "nodes": p.nodes, "flops": p.flops,
                        "compiled": modmgr.compiles() != before})
            return 0
        return driver

    # --- recording -------------------------------------------------------------------------
    def _record(self, name: str, cat: str, start_ns: int, end_ns: int, args: dict) -> None:
        self.events.append({"name": name, "cat": cat, "ph": "X",
                            "ts": (start_ns - self.t0) / 1e3, "dur": (end_ns - start_ns) / 1e3,
                            "pid": self.pid, "tid": threading.get_native_id(), "args": args})

    def timed(self, name: str, cat: str, fn: Callable, args: dict | None = None) -> Callable:
        """Wrap a runtime step so each call is recorded as one event."""
        perf = time.perf_counter_ns
        record = self._record
        args = args or {}

        def step(*a):
            before = modmgr.compiles()
            t = perf()
            try:
                return fn(*a)
            finally:
                record(name, cat, t, perf(), {**args, "compiled": modmgr.compiles() != before})
        return step

    def reset(self) -> None:
        self.events.clear()

    def write(self, path: str | os.PathLike | None = None) -> str:
        """Write the Chrome trace; default name like onnxruntime's, in the working directory."""
        if path is None:
            stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(self.started))
            path = f"jitort_profile_{stamp}_{self.pid}.json"
        with open(path, "w") as f:
            json.dump(list(self.events), f)
        return str(path)

    def kernel_stats(self, include_compiles: bool = False) -> list[KernelStat]:
        """Per step (kernel chunk or interpreted node), in first-seen order.

        Calls that triggered a Numba compilation are left out unless ``include_compiles``.
        """
        stats: dict[tuple, KernelStat] = {}
        for e in list(self.events):
            if e["cat"] not in ("kernel", "interp"):
                continue
            a = e["args"]
            if a.get("compiled") and not include_compiles:
                continue
            key = (e["cat"], e["name"], tuple(a.get("nodes", ())))
            st = stats.get(key)
            if st is None:
                ops = a.get("op_name", "")
                st = stats[key] = KernelStat(e["name"], ops.split(",") if ops else [],
                                             list(a.get("nodes", ())), flops=a.get("flops", 0),
                                             kind=e["cat"])
            st.calls += 1
            st.total_ns += int(e["dur"] * 1e3)
        return list(stats.values())


def _step_items(compiler, shapes: dict) -> list[list]:
    """The nodes of each step, in the order ``SegmentCompiler.plan`` lowers them."""
    from .codegen.fusion import Group, group_nodes
    from .codegen.elementwise import supports_elementwise
    from .partition import HOST
    compiled = [n for n in compiler.seg.nodes if compiler.placement[id(n)] != HOST]
    try:
        items = group_nodes(compiled, shapes, supports_elementwise,
                            compiler.memo.get("unit_dims"))
    except Exception:  # noqa: BLE001 - a report must not break a run
        return []
    return [list(it.nodes) if isinstance(it, Group) else [it] for it in items]


# --- FLOP estimates ----------------------------------------------------------------------------

#: FLOPs per output element for ops that are neither GEMM-like nor one-per-element.
_PER_ELEMENT = {"Softmax": 5, "LogSoftmax": 5, "LayerNormalization": 8,
                "BatchNormalization": 2, "InstanceNormalization": 8, "Erf": 1, "Gelu": 8,
                "Sigmoid": 4, "Tanh": 4, "Exp": 1, "Pow": 1}
#: Data movement only: no arithmetic.
_ZERO = {"Reshape", "Transpose", "Gather", "GatherElements", "Concat", "Slice", "Split",
         "Squeeze", "Unsqueeze", "Flatten", "Expand", "Identity", "Cast", "Shape", "Tile",
         "Pad", "Where", "ScatterND", "ScatterElements", "DepthToSpace", "SpaceToDepth",
         "ConstantOfShape", "Range", "OneHot", "Resize", "GatherND", "Trilu"}


def _shape(v, shapes: dict) -> tuple:
    if v is None:
        return ()
    if v.is_const:
        return tuple(np.shape(v.const))
    return tuple(shapes.get(id(v), ()))


def op_label(node) -> str:
    """The op as reports show it: jitort's fused ops name what they absorbed
    (``MatMulBias+Gelu``, ``FusedConv+Add+Relu``)."""
    op = node.op_type
    if node.domain == "jitort" and op in ("MatMulBias", "FusedConv", "FusedConvNHWC"):
        if op != "MatMulBias" and node.input(3) is not None:
            op += "+Add"
        act = node.attrs.get("activation", "")
        if act:
            op += f"+{act}"
    return op


def node_flops(node, shapes: dict) -> int:
    """A rough FLOP count for one node at the planned shapes (multiply-add = 2 FLOPs)."""
    op = node.op_type
    out = _shape(node.outputs[0], shapes) if node.outputs else ()
    n_out = math.prod(out) if out else 1
    # fused epilogues (jitort.MatMulBias / FusedConv): the activation's per-element FLOPs
    act = node.attrs.get("activation", "") if node.domain == "jitort" else ""
    epi = _PER_ELEMENT.get(act, 1) * n_out if act else 0
    if op in ("MatMul", "MatMulBias", "MatMulInteger", "FusedMatMul"):
        a = _shape(node.inputs[0], shapes)
        k = a[-1] if a else 1
        return 2 * n_out * k + (n_out + epi if op == "MatMulBias" else 0)
    if op == "Gemm":
        a = _shape(node.inputs[0], shapes)
        k = (a[0] if node.attrs.get("transA", 0) else a[-1]) if a else 1
        return 2 * n_out * k + (n_out if len(node.inputs) > 2 and node.inputs[2] is not None else 0)
    if op in ("Conv", "ConvTranspose", "FusedConv"):
        w = _shape(node.inputs[1], shapes)
        per = math.prod(w[1:]) if len(w) > 1 else 1
        if op == "ConvTranspose":
            x = _shape(node.inputs[0], shapes)
            return 2 * (math.prod(x) if x else 1) * per
        if op == "FusedConv":  # the Conv's, plus the residual add and the activation
            return 2 * n_out * per + (n_out if node.input(3) is not None else 0) + epi
        return 2 * n_out * per
    if op == "FusedConvNHWC":  # HWIO weights: kh * kw * (C / group) multiply-adds per output
        w = _shape(node.inputs[1], shapes)
        per = math.prod(w[:3]) if len(w) > 2 else 1
        return 2 * n_out * per + (n_out if node.input(3) is not None else 0) + epi
    if op in ("MaxPool", "AveragePool", "LpPool"):
        k = node.attrs.get("kernel_shape", [1])
        return n_out * math.prod(k)
    if op.startswith("Reduce") or op in ("GlobalAveragePool", "GlobalMaxPool", "ArgMax", "ArgMin"):
        x = _shape(node.inputs[0], shapes)
        return math.prod(x) if x else 1
    if op in _ZERO:
        return 0
    return _PER_ELEMENT.get(op, 1) * n_out


# --- the machine's peak ----------------------------------------------------------------------

def machine_peak_gflops(refresh: bool = False) -> float:
    """float32 GEMM GFLOP/s of numpy's BLAS at 1024x1024 (measured once, cached on disk).

    A practical peak for "achieved/peak" ratios, not the theoretical FMA peak.
    """
    key = f"{platform.machine()} {cpu_name()} cores={os.cpu_count()} numpy={np.__version__}"
    path = modmgr.cache_dir() / "peak.json"
    if not refresh:
        try:
            got = json.loads(path.read_text())
            if got.get("key") == key:
                return float(got["gflops"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    n = 1024
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = a.T.copy()
    a @ b  # warm up the BLAS threads
    best = math.inf
    for _ in range(5):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    gflops = 2 * n ** 3 / best / 1e9
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "gflops": gflops}))
        os.replace(tmp, path)
    except OSError:
        pass
    return gflops


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo; the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"

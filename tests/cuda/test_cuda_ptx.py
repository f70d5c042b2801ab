"""Every CUDA kernel compiles for a real GPU, here, without one.

The simulator runs kernels as Python, so code only a GPU's compiler refuses (the builtins min
and max, a function Numba's CUDA target lacks, a type a kernel cannot take) passes every
simulated test. These tests compile to PTX through NVVM (skipped where NVVM is missing), in a
subprocess without the simulator, with the argument types jitort passes:

* the kernel library: each public launcher of ``jitort.kernels.cuda`` called with numpy
  stand-ins for device arrays (numba types them as the device arrays they stand for) inside
  ``launch.recording()``, and every recorded launch compiled;
* the elementwise table: one generated kernel per op of the CUDA table, in a dtype it allows.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from jitort.codegen.elementwise import DTYPES, Operand, kernel_source
from jitort.ir import Node, Value

#: The subprocess's preamble: NVVM present, device functions compiled for cc 8.0 without a
#: device (numba asks the current device's compute capability while typing calls).
_PRELUDE = """
import numba.cuda.dispatcher as disp
from numba import cuda, typeof
from numba.cuda.cudadrv import nvvm
try:
    nvvm.NVVM()
except Exception as e:
    raise SystemExit(f"SKIP no NVVM: {e}")


class _Dev:
    compute_capability = (8, 0)


disp.get_current_device = lambda: _Dev()
failed = []


def ptx(name, fn, args):  # the PTX for these arguments' types, or None (failure listed)
    try:
        return cuda.compile_ptx(fn, tuple(typeof(a) for a in args), cc=(8, 0))[0]
    except Exception as e:
        failed.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        return None


def f64_ops(text):  # float64 instructions in PTX, declarations aside
    return sum(".f64" in ln and ".reg" not in ln for ln in text.splitlines())


def float32_only(args):  # float32 arrays, no float64 ones: the launch computes in float32
    dts = {a.dtype for a in args if hasattr(a, "dtype") and getattr(a, "ndim", 0)}
    return np.dtype(np.float32) in dts and np.dtype(np.float64) not in dts
"""

#: Each public launcher once per case that takes another kernel (dtype, tiled or direct path).
_LIBRARY = """
import numpy as np
from jitort.kernels.cuda import (blas, conv, conv_transpose, data, gather_scatter, gemm,
                                 norm, norm_extra, pool, reduce, resize, rnn, scan, softmax)
from jitort.kernels.cuda.launch import Launch, recording

blas._lib = None  # jitort's own GEMM kernel (the cuBLAS path launches only the epilogue)
I = np.zeros(64, np.int64)
E = np.zeros(1, np.int32)
with recording() as work:
    for dt in (np.float32, np.float64):
        A = np.zeros(4096, dt)
        gemm.matmul3d(A, 0, 0, A, 0, 0, A, 0, 2, 3, 4, 5)
        gemm.matmul3d_bias_act(A, 0, 6, A, 0, 0, A, 0, A, 0, 2, 3, 4, 5, 2, 0.0)
        gemm.gemm(A, 0, A, 0, A, 0, 1, 0, A, 0, 3, 4, 5, 0.5, 2.0, True, False, True)
        gemm.epilogue(A, 0, A, 0, 12, 4, 1, A, 0, 2, 3, 4, 0.5, 1.0, True, True, True, 1, 0.0,
                      0.0)
        for c, k in ((16, 16), (3, 4)):  # tiled, direct
            conv.conv2d_bias_add_act(A, 0, A, 0, A, 0, A, 0, A, 0, 1, c, 5, 5, k, 3, 3, 5, 5,
                                     1, 1, 1, 1, 1, 1, 1, True, True, 1, 0.0, 0.0)
        conv.launch(conv._im2col_k, 4, 128, A, 0, A, 0, 75, 5, 5, 3, 3, 5, 5, 1, 1, 1, 1, 1, 1,
                    225, 450)
        conv_transpose.conv_transpose2d(A, 0, A, 0, A, 0, A, 0, 1, 2, 3, 3, 2, 3, 3, 6, 6, 2, 2,
                                        1, 1, 1, 1, 1, True)
        data.copy_nd(A, 0, (3, 1), A, 0, (1, 3), (3, 3))
        data.gather3(A, 0, I, 0, A, 0, 2, 5, 3, 4, E)
        gather_scatter.gather_elements(A, 0, I, 0, A, 0, (2, 3), (3, 1), 4, 1, E)
        norm.layernorm2d(A, 0, A, 0, A, 0, A, 0, 3, 16, 1e-5, True)
        norm.batchnorm3d(A, 0, A, 0, A, 0, A, 0, A, 0, A, 0, 2, 3, 4, 1e-5)
        norm_extra.instancenorm3d(A, 0, A, 0, A, 0, A, 0, 2, 3, 8, 1e-5)
        norm_extra.lrn3d(A, 0, A, 0, 2, 5, 4, 3, 1e-4, 0.75, 1.0)
        pool.maxpool2d(A, 0, A, 0, 2, 6, 6, 3, 3, 2, 2, 2, 2, 0, 0, 1, 1)
        pool.avgpool2d(A, 0, A, 0, 2, 6, 6, 3, 3, 2, 2, 2, 2, 0, 0, True, 0, 0)
        pool.global_avgpool(A, 0, A, 0, 2, 9)
        reduce.reduce3d(A, 0, A, 0, 2, 3, 4, 0)
        softmax.softmax3d(A, 0, A, 0, 2, 3, 4)
        softmax.logsoftmax3d(A, 0, A, 0, 2, 3, 4)
        resize.pad_nd(A, 0, (4, 1), A, 0, (5, 6), (1, 1), (0, 0), (4, 4), A, 0, True, 1)
        resize.resize_nearest(A, 0, A, 0, (2, 3), (4, 6), 0, 0)
        resize.resize_linear2d(A, 0, A, 0, 1, 2, 3, 1, 4, 6, 2.0, 2.0, 0, False, False)
        rnn.lstm(A, 0, A, 0, A, 0, A, 0, A, 0, A, 0, A, 0, A, 0, A, 0, 3, 2, 3, 4, 2, False,
                 True, True, True, True, True, True)
    A = np.zeros(4096, np.float16)  # float16 products: float32 staging and accumulation
    gemm.matmul3d(A, 0, 0, A, 0, 0, A, 0, 2, 3, 4, 5)
    gemm.matmul3d_bias_act(A, 0, 6, A, 0, 0, A, 0, A, 0, 2, 3, 4, 5, 2, 0.0)
    gemm.gemm(A, 0, A, 0, A, 0, 1, 0, A, 0, 3, 4, 5, 0.5, 2.0, True, False, True)
    gemm.epilogue(A, 0, A, 0, 12, 4, 1, A, 0, 2, 3, 4, 0.5, 1.0, True, True, True, 1, 0.0, 0.0)
    for c, k in ((16, 16), (3, 4)):  # float16 convolutions: tiled, direct
        conv.conv2d_bias_add_act(A, 0, A, 0, A, 0, A, 0, A, 0, 1, c, 5, 5, k, 3, 3, 5, 5,
                                 1, 1, 1, 1, 1, 1, 1, True, True, 1, 0.0, 0.0)
    conv.launch(conv._im2col_k, 4, 128, A, 0, A, 0, 75, 5, 5, 3, 3, 5, 5, 1, 1, 1, 1, 1, 1,
                225, 450)
    for dt in (np.float32, np.float64, np.int32, np.int64):
        scan.cumsum3(np.zeros(64, dt), 0, np.zeros(64, dt), 0, 2, 3, 4, False, True)
    for dt in (np.int64, np.bool_, np.float16):  # data movement of any plain dtype
        A = np.zeros(64, dt)
        data.copy_nd(A, 0, (3, 1), A, 0, (1, 3), (3, 3))
        data.gather3(A, 0, I, 0, A, 0, 2, 5, 3, 4, E)
        resize.pad_nd(A, 0, (4, 1), A, 0, (5, 6), (1, 1), (0, 0), (4, 4), A, 0, True, 0)
        resize.resize_nearest(A, 0, A, 0, (2, 3), (4, 6), 0, 0)
    data.clear_flag(E)
names = set()
promoted = set()
for w in work:
    if isinstance(w, Launch):
        name = f"{w.kernel.py_func.__module__}.{w.kernel.py_func.__qualname__}"
        names.add(name)
        text = ptx(name, w.kernel.py_func, w.args)
        if text is not None and float32_only(w.args) and f64_ops(text):
            promoted.add(f"{name}: {f64_ops(text)} float64 instructions")
print("RESULT " + json.dumps({"failed": failed, "kernels": len(names),
                              "promoted": sorted(promoted)}))
"""


def _run(script: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    with tempfile.TemporaryDirectory() as tmp:  # a file: the script may outgrow a command line
        path = os.path.join(tmp, "ptx_check.py")
        with open(path, "w") as f:
            f.write("import json\n" + _PRELUDE + script)
        got = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True,
                             timeout=600, cwd=os.getcwd())
    if got.returncode and "SKIP" in got.stderr:
        pytest.skip(got.stderr.strip().splitlines()[-1])
    lines = [ln for ln in got.stdout.splitlines() if ln.startswith("RESULT ")]
    assert got.returncode == 0 and lines, got.stderr[-3000:]
    return json.loads(lines[-1][7:])


def test_every_library_kernel_compiles_for_a_gpu():
    out = _run(_LIBRARY)
    assert not out["failed"], "\n".join(out["failed"])
    assert out["kernels"] >= 20, out  # the launchers above reach this many distinct kernels
    # float32 (and float16) work stays float32: a float64 literal, an int / an int-typed zero
    # promotes Numba's arithmetic to float64 (half rate on an H100, 1/64 on most other GPUs)
    assert not out["promoted"], "\n".join(out["promoted"])


def _elementwise_sources() -> list:
    """(op, source, parameter count, operand dtype) per op of the CUDA elementwise table that
    renders with default attributes; the rest need attributes this sweep does not invent."""
    from jitort.codegen import cuda as cg
    out = []
    for op in sorted(cg.CUDA_EXPR):
        dt = np.dtype(DTYPES[op][0])
        for n_in in (1, 2, 3):
            xs = [Value(f"x{j}", dt.name) for j in range(n_in)]
            node = Node(op, xs, [Value("y", dt.name)], {}, since_version=13)
            try:
                src = kernel_source("k", [(node, [-1 - j for j in range(n_in)], 0)],
                                    [Operand(dt, (False,))] * n_in, [0], 1, False, [dt],
                                    style=cg.CUDA_STYLE)
            except Exception:
                continue
            out.append((op, src, n_in, dt.name))
            break
    return out


def test_every_elementwise_op_compiles_for_a_gpu():
    """The CPU's expression table rendered for the device: its math functions, literals and
    selects must all be what Numba's CUDA target compiles."""
    sources = _elementwise_sources()
    assert len(sources) >= 60, [op for op, *_ in sources]
    script = "import math\nimport numpy as np\nfrom jitort.kernels.cuda import mathfn as _cm\n"
    script += f"SOURCES = {json.dumps(sources)}\n" + textwrap.dedent("""
        for op, src, n_in, dt in SOURCES:
            space = {"cuda": cuda, "np": np, "math": math, "_cm": _cm}
            exec(src, space)
            a = np.zeros(4, dt)
            args = [a, 0] * (1 + n_in) + [4, 4]  # y, oy, inputs and offsets, n0, total
            ptx(op, space["k"].py_func, args)
        print("RESULT " + json.dumps({"failed": failed, "kernels": len(SOURCES)}))
        """)
    out = _run(script)
    assert not out["failed"], "\n".join(out["failed"])

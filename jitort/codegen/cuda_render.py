"""The CUDA backend's renderer: a segment's kernel calls as the text of its driver module.

The CUDA lowerings (:mod:`jitort.codegen.cuda`) emit :class:`~jitort.codegen.calls.Call`
objects: library kernels of ``jitort.kernels.cuda`` (host functions that launch their own
grids) and :class:`~jitort.codegen.calls.Launch` es of generated kernels, whose operands are
:class:`~jitort.codegen.calls.DeviceView` s (``array, offset``). This module renders them, once,
into the driver::

    def call(W, C, X, Y, E, d, o):
        w_float32 = W['float32']
        _gemm.matmul3d_bias_act(X[0], 0, d[0], C[0], 0, d[1], ...)
        _launch(kc_relu_..., d[7], 128, w_float32, o[0], Y[0], 0, d[5], d[6])

Generated kernels launch through ``jitort.kernels.cuda.launch.launch``, as the library's do, so
that the runtime can record a driver's launches once and replay them (:mod:`jitort.cuda_replay`).
Nothing parses the text back.
"""
from __future__ import annotations

from .calls import (Call, DeviceArray, DeviceView, Dim, Generated, Kernel, Launch, alias,
                    literal)
from . import module as modmgr

#: The driver's parameters (see :mod:`jitort.codegen.cuda`).
DRIVER_PARAMS = "W, C, X, Y, E, d, o"


def check_device_arg(a) -> None:
    """Raise TypeError for an argument the CUDA renderer cannot spell."""
    if isinstance(a, tuple):
        for x in a:
            if not isinstance(x, (Dim, int)) or isinstance(x, bool):
                raise TypeError(f"CUDA kernel-call tuple item of type {type(x).__name__}: {x!r}")
    elif not (a is None or isinstance(a, (DeviceView, DeviceArray, Dim, bool, int, float))):
        raise TypeError(f"CUDA kernel-call argument of type {type(a).__name__}: {a!r}")


def offset_text(v: DeviceView) -> str:
    terms = ([f"o[{v.row}]"] if v.row is not None else []) + [repr(t) for t in v.shift]
    return " + ".join(terms) or "0"


def _no_view(v) -> str:
    raise TypeError(f"a CPU view in a CUDA kernel call: {v!r}")


def arg_text(a) -> str:
    """One argument (a :class:`DeviceView`: two) as driver text."""
    if isinstance(a, DeviceView):
        return f"{a.array}, {offset_text(a)}"
    if isinstance(a, DeviceArray):
        return a.name
    return literal(a, _no_view)


def callee_text(callee) -> str:
    if isinstance(callee, Kernel):
        return f"{alias(callee.module)}.{callee.name}"
    if isinstance(callee, Generated):
        return callee.name
    raise TypeError(f"CUDA callee of type {type(callee).__name__}: {callee!r}")


def render_call(call: Call) -> str:
    args = [arg_text(a) for a in call.args]
    if isinstance(call.callee, Launch):
        k = call.callee
        return f"_launch({', '.join([k.kernel.name, repr(k.grid), str(k.block), *args])})"
    return f"{callee_text(call.callee)}({', '.join(args)})"


def generated_names(calls: list[Call]) -> list[str]:
    """The generated kernels the calls launch, sorted (the modules a driver imports)."""
    return sorted({c.callee.kernel.name for c in calls if isinstance(c.callee, Launch)}
                  | {c.callee.name for c in calls if isinstance(c.callee, Generated)})


def driver_source(calls: list[Call], dtypes) -> str:
    """The driver module of a segment: imports, then ``call`` binding the workspace views of
    ``dtypes`` and running ``calls`` in order."""
    libs = sorted({c.callee.module for c in calls if isinstance(c.callee, Kernel)})
    for c in calls:
        if isinstance(c.callee, Kernel) and c.callee.package != "cuda":
            raise TypeError(f"a {c.callee.package} kernel in a CUDA driver: {c.callee!r}")
    body = [f"w_{dt} = W[{dt!r}]" for dt in sorted(dtypes)]
    body += [render_call(c) for c in calls] or ["pass"]
    return "\n".join([
        modmgr.header().rstrip(),
        "import numpy as np",
        *(["from jitort.kernels.cuda.launch import launch as _launch"]
          if any(isinstance(c.callee, Launch) for c in calls) else []),
        *([f"from jitort.kernels.cuda import {', '.join(f'{m} as {alias(m)}' for m in libs)}"]
          if libs else []),
        *[f"from {modmgr.PACKAGE}.{k} import {k}" for k in generated_names(calls)],
        "", "",
        f"def call({DRIVER_PARAMS}):",
        *[f"    {line}" for line in body],
        "",
    ])

"""Module assembly: a segment's kernel calls rendered into a driver module, loaded.

The driver is split into chunks of at most :data:`CHUNK_CALLS` calls (one ``part<i>`` njit
function each, a few Python->native transitions instead of one huge function), its kernel
calls go through the ``fp`` table (:mod:`jitort.codegen.native`), and the generated kernels it
calls are loaded as modules of their own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import module as modmgr
from . import native
from .calls import Call, Kernel, Slots, alias, callee_text, render_direct, render_native
from .emitter import Emitter, kernel_library_modules

if TYPE_CHECKING:
    from ..ir import Node



@dataclass
class Driver:
    """A loaded driver module and what a plan needs to know of it."""

    module: object
    chunks: list  # the statements of each part<i>
    chunk_steps: list | None  # profile mode: the step each chunk runs
    kernel_names: list[str]  # generated kernel modules it imports
    libs: list[str]  # kernel-library modules it calls
    n_sites: int
    views: list  # the views its call sites build (checked against each plan's sizes)
    new_modules: int
    calls: list  # its kernel calls in order


def assemble(em: Emitter, seg, shapes, debug: bool, profile: bool) -> Driver:
    """Render ``em``'s calls into a driver module and load it (and its generated kernels)."""
    n_host = sum(r.kind == "pb" for r in em.rows)
    params = ", ".join(["ws", "cb", "d", "fp"] + [f"h{k}" for k in range(n_host)]
                       + [f"x{i}" for i in range(len(seg.arg_inputs))]
                       + [f"y{i}" for i in range(len(seg.arg_outputs))])
    steps = _annotated(em.calls, em.notes)
    chunk_steps, chunks = _step_chunks(steps) if profile else (None, _chunks(steps))
    slots = Slots(len(em.dims))
    parts: list[str] = []
    views: list = []  # the views call sites build (checked against each plan's sizes)
    sites: dict[str, tuple] = {}  # part<i> -> the numbers of its fp-table call sites
    n_sites = 0
    for i, chunk in enumerate(chunks):
        first = n_sites
        lines, n_sites = _render(em, chunk, first, slots, debug, views)
        sites[f"part{i}"] = tuple(range(first, n_sites))
        parts += ["", "", f"@njit({DRIVER_FLAGS}{DEBUG_FLAGS if debug else ''})",
                  f"def part{i}({params}):", *[f"    {line}" for line in lines],
                  "    return 0"]
    if len(chunks) == 1:
        parts += ["", "", "call = part0"]
    else:  # a few Python->native transitions, much cheaper to compile than one huge function
        parts += ["", "", f"def call({params}):"]
        parts += [f"    part{i}({params})" for i in range(len(chunks))]
        parts += ["    return 0"]
    imports = sorted(em.kernels)
    sfx = DEBUG_SUFFIX if debug else ""
    libs = sorted({c.callee.module for _, c in em.calls if isinstance(c.callee, Kernel)})
    # The argument types are part of the text: a driver module is compiled for one
    # signature, so its fp table (one kernel overload per call site) fits every call.
    argtypes = ", ".join(f"{np.dtype(v.dtype).name}[{len(shapes[id(v)])}]"
                         for v in [*seg.arg_inputs, *seg.arg_outputs])
    src = "\n".join([
        modmgr.header(libs).rstrip(),
        f"# arguments: {argtypes}",
        "import math",
        "import numpy as np",
        "from numba import njit",
        *(["from jitort.codegen.native import native_call as _nc"] if n_sites else []),
        *[f"from jitort.kernels.cpu import {m} as {alias(m)}" for m in libs],
        *[f"from {modmgr.PACKAGE}.{k}{sfx} import {k}" for k in imports],
        "",
        "#: the call sites of each part (native.compile_part reads them)",
        f"SITES = ({_DRIVER_KEY!r}, {sites!r})",
        *parts,
        "",
    ])
    new = 0
    for name, ksrc in em.kernels.items():
        if name + sfx not in modmgr._loaded:
            new += 1
        modmgr.load(name + sfx, _kernel_module(ksrc, debug))
    # call-site keys: a hash of the text around them (the module's name hashes the result)
    src = src.replace(_DRIVER_KEY, modmgr.module_name("sites", src))
    dname = modmgr.module_name("driver", src)
    if dname not in modmgr._loaded:
        new += 1
    mod = modmgr.load(dname, src)
    _KERNELS[dname] = tuple(sorted({(c.callee.module, c.callee.name)
                                    for _, c in em.calls if isinstance(c.callee, Kernel)}))
    return Driver(mod, chunks, chunk_steps, imports, libs, n_sites, views, new,
                  [c for _, c in em.calls])


#: driver module name -> the library kernels it calls, (module, function), for the drivers
#: assembled in this process
_KERNELS: dict[str, tuple] = {}


def driver_kernels(mod) -> tuple:
    """The library kernels driver module ``mod`` calls (assembled in this process)."""
    return _KERNELS[mod.__name__.rsplit(".", 1)[-1]]


def callee_names(chunk: list) -> list[str]:
    """The kernels a chunk's calls call, as the driver names them (``_norm.layernorm2d``,
    ``k_add_mul_...``)."""
    return [callee_text(c.callee, alias) for c in chunk if isinstance(c, Call)]


def _render(em: Emitter, chunk: list, k: int, slots: Slots, debug: bool,
            views: list) -> tuple[list[str], int]:
    """A chunk's calls (and comment lines) as driver statements: kernel calls through the
    ``fp`` table, call sites numbered from ``k``, or direct (``JITORT_DIRECT_CALLS``). The
    views the call sites build are appended to ``views``. Returns the lines and the next
    call-site number."""
    def helper(v):
        return em.view_expr(v, slots)

    lines, n = [], k
    for item in chunk:
        if isinstance(item, str):  # a comment naming the step's nodes, or "pass"
            lines.append(item)
        elif native.DIRECT_CALLS:
            lines.append(render_direct(item, alias, helper))
        else:
            text, made = render_native(item, f"{_DRIVER_KEY}:{n}", slots, alias, helper,
                                       fold_views=not debug)
            lines.append(text)
            views += made
            n += 1
    return lines, n


#: Driver flags. (``_dbg_optnone`` would cut ~30 % of its compile time but makes Numba refuse
#: to cache the function, so the driver is optimized like everything else.)
DRIVER_FLAGS = "cache=True, error_model='numpy'"
#: stands for the driver's call-site key prefix until the text around it is hashed
_DRIVER_KEY = "@DRIVER@"
#: Debug mode (``jitort.compile(m, debug=True)``): generated code checks every index. The flag is
#: written into the text (Numba's cache does not key on flags) and debug kernel modules get
#: their own names, so debug and normal builds never share a module or a cache entry.
DEBUG_FLAGS = ", boundscheck=True"
DEBUG_SUFFIX = "_bc"
#: Kernel calls per driver chunk: Numba's compile time grows superlinearly with function size.
CHUNK_CALLS = 24

def _node_note(nodes: list[Node]) -> str:
    """The comment above a step's calls in a driver: the ONNX node(s) it runs."""
    text = "; ".join(n.label for n in nodes)  # "Op(name)"
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 160 else text[:157] + "..."


def _annotated(calls: list[tuple[int, Call]], notes: dict[int, str]) -> list[tuple[int, Call | str]]:
    """``calls`` with a ``# <node(s)>`` comment line before the first call of each step, so that
    a reader of a driver knows which layer a line runs."""
    out: list[tuple[int, str]] = []
    last = None
    for step, line in calls:
        if step != last and step in notes:
            out.append((step, "# " + notes[step]))
        out.append((step, line))
        last = step
    return out


def _chunks(calls: list[tuple]) -> list[list]:
    """Split the calls into chunks of at most CHUNK_CALLS, cutting between steps (comment
    lines do not count)."""
    chunks: list[list] = [[]]
    count = 0
    last_step = None
    for step, line in calls:
        if count >= CHUNK_CALLS and step != last_step:
            chunks.append([])
            count = 0
        chunks[-1].append(line)
        count += isinstance(line, Call)
        last_step = step
    if not chunks[-1]:
        chunks[-1].append("pass")
    return chunks


def _step_chunks(calls: list[tuple]) -> tuple[list[int | None], list[list]]:
    """Profile mode: one chunk per step (its step index alongside), so each can be timed."""
    steps: list[int | None] = []
    chunks: list[list[str]] = []
    for step, line in calls:
        if not steps or steps[-1] != step:
            steps.append(step)
            chunks.append([])
        chunks[-1].append(line)
    if not chunks:
        return [None], [["pass"]]
    return steps, chunks


_KERNEL_PRELUDE = """import math
import numpy as np
from numba import njit, prange
from jitort.kernels.cpu import mathfn as _m


"""


#: Debug kernels: the same text under an ``njit`` that adds ``boundscheck=True``.
_DEBUG_PRELUDE = (_KERNEL_PRELUDE.replace("from numba import njit,", "from numba import njit as _njit,")
                  + "def njit(*args, **flags):  # jitort debug mode: bounds-checked\n"
                    "    return _njit(*args, boundscheck=True, **flags)\n\n\n")


_ALIASES = {"halfprec": "_h", "lowprec": "_l"}


def _kernel_module(src: str, debug: bool = False) -> str:
    prelude = _DEBUG_PRELUDE if debug else _KERNEL_PRELUDE
    mods = kernel_library_modules(src)
    imports = "".join(f"from jitort.kernels.cpu import {m} as {_ALIASES[m]}\n" for m in mods[1:])
    prelude = prelude.replace("mathfn as _m\n", "mathfn as _m\n" + imports)
    return modmgr.header(mods) + prelude + src

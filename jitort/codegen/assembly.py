"""Module assembly: a segment's kernel calls rendered into a driver module, loaded.

The driver is split into chunks of at most :data:`CHUNK_CALLS` calls (one ``part<i>`` njit
function each, a few Python->native transitions instead of one huge function), its kernel
calls go through the ``fp`` table (:mod:`jitort.codegen.native`), and the generated kernels it
calls are loaded as modules of their own.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import module as modmgr
from . import native
from .calls import Call, Slots, callee_text, render_direct, render_native
from .emitter import Emitter, _FLAT_SOURCE, _reshape_helper_source
from .registry import KERNEL_MODULES

if TYPE_CHECKING:
    from ..ir import Node

_ALIASES = {m: a for a, m in KERNEL_MODULES.items()}


@dataclass
class Driver:
    """A loaded driver module and what a plan needs to know of it."""

    module: object
    chunks: list  # the statements of each part<i>
    chunk_steps: list | None  # profile mode: the step each chunk runs
    kernel_names: list[str]  # generated kernel modules it imports
    libs: list[str]  # kernel-library modules it calls (their aliases)
    n_sites: int
    views: list  # the views its call sites build (checked against each plan's sizes)
    new_modules: int
    calls: list  # its kernel calls in order


def assemble(em: Emitter, seg, shapes, debug: bool, profile: bool) -> Driver:
    """Render ``em``'s calls into a driver module and load it (and its generated kernels)."""
    _rewrite_reshapes(em)
    _rewrite_offsets(em)
    n_host = sum(r.kind == "pb" for r in em.rows)
    params = ", ".join(["ws", "cb", "d", "fp"] + [f"h{k}" for k in range(n_host)]
                       + [f"x{i}" for i in range(len(seg.arg_inputs))]
                       + [f"y{i}" for i in range(len(seg.arg_outputs))])
    calls = _annotated(em.calls, em.notes)
    if not profile:
        chunks = _chunks(calls)
    else:
        chunk_steps, chunks = _step_chunks(calls)
    parts = []
    # kernel-library and fused-kernel calls go through the fp table (codegen/native.py)
    n_sites, fused = 0, {k for k in em.kernels if k.startswith("k_")}
    views: list = []  # the views call sites build (checked against each plan's sizes)
    slots = Slots(len(em.dims))
    for i, lines in enumerate(chunks):
        lines, n_sites, made = _render(em, lines, fused, n_sites, slots, debug)
        views += made
        used = _declared_closure(em.decls, lines)
        body = [f"    {n} = {em.decls[n]}" for n in em.decls if n in used]
        body += [f"    {line}" for line in lines]
        parts += ["", "", f"@njit({DRIVER_FLAGS}{DEBUG_FLAGS if debug else ''})",
                  f"def part{i}({params}):", *body,
                  "    return 0"]
    if len(chunks) == 1:
        parts += ["", "", "call = part0"]
    else:  # a few Python->native transitions, much cheaper to compile than one huge function
        parts += ["", "", f"def call({params}):"]
        parts += [f"    part{i}({params})" for i in range(len(chunks))]
        parts += ["    return 0"]
    body = "\n".join(parts)
    # generated kernels and helpers the text still calls (call sites build most views)
    em.kernels = {k: v for k, v in em.kernels.items() if re.search(rf"\b{k}\b", body)}
    imports = sorted(em.kernels)
    sfx = DEBUG_SUFFIX if debug else ""
    libs = sorted(a for a in set(re.findall(r"(?<![\w.])(_[a-z_]+)\.", body)) if a in KERNEL_MODULES)
    # The argument types are part of the text: a driver module is compiled for one
    # signature, so its fp table (one kernel overload per call site) fits every call.
    argtypes = ", ".join(f"{np.dtype(v.dtype).name}[{len(shapes[id(v)])}]"
                         for v in [*seg.arg_inputs, *seg.arg_outputs])
    src = "\n".join([
        modmgr.header([KERNEL_MODULES[a] for a in libs]).rstrip(),
        f"# arguments: {argtypes}",
        "import math",
        "import numpy as np",
        "from numba import njit",
        *(["from jitort.codegen.native import native_call as _nc"] if n_sites else []),
        *[f"from jitort.kernels.cpu import {KERNEL_MODULES[a]} as {a}" for a in libs],
        *[f"from {modmgr.PACKAGE}.{k}{sfx} import {k}" for k in imports],
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
    return Driver(mod, chunks, None if not profile else chunk_steps, imports, libs, n_sites,
                  views, new, [c for _, c in em.calls if isinstance(c, Call)])


def callee_names(lines: list) -> list[str]:
    """The kernels a chunk's statements call, as the driver names them (``_norm.layernorm2d``,
    ``k_add_mul_...``)."""
    out = []
    for line in lines:
        if isinstance(line, str):  # text from a lowering not yet emitting calls
            m = _CALLEE.match(line)
            if m:
                out.append(m.group(1))
        else:
            out.append(callee_text(line.callee, _ALIASES))
    return out


_CALLEE = re.compile(r"^\s*([A-Za-z_][\w.]*)\(")


def _render(em: Emitter, lines: list, fused: set, k: int, slots: Slots, debug: bool):
    """A chunk's statements as driver text: kernel calls through the ``fp`` table (call
    sites numbered from ``k``), or direct (``JITORT_DIRECT_CALLS``). Returns the lines,
    the next site number and the views the call sites build."""
    out, views, pending = [], [], []

    def helper(v):
        return em.view_expr(v, slots)

    def flush(k):  # lines of text from lowerings that still build their calls as text
        if pending and not native.DIRECT_CALLS:
            got, k, made = native.rewrite_calls(pending, KERNEL_MODULES, fused, _DRIVER_KEY, k,
                                                None if debug else em.decls)
            out.extend(got)
            views.extend(made)
        else:
            out.extend(pending)
        pending.clear()
        return k

    for line in lines:
        if isinstance(line, str):
            pending.append(line)
            continue
        k = flush(k)
        if native.DIRECT_CALLS:
            out.append(render_direct(line, _ALIASES, helper))
            continue
        text, made = render_native(line, f"{_DRIVER_KEY}:{k}", slots, _ALIASES, helper,
                                   fold_views=not debug)
        out.append(text)
        views += made
        k += 1
    return out, flush(k), views


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

_RESHAPE = re.compile(r"(\b[a-z]\w*)\.reshape\(\(([^()]*)\)\)")
_FLAT = re.compile(r"(\b[a-z]\w*)\.reshape\(-1\)")
_NAME = re.compile(r"\b([cvps]\d+)\b")
_STRING = re.compile(r'"[^"]*"')


_OFFSET = re.compile(r"\bo\[(\d+), ([01])\]")


def _rewrite_offsets(em: Emitter) -> None:
    """Byte ranges live after the sizes in ``d`` (one array argument fewer per call)."""
    base = len(em.dims)
    sub = lambda m: f"d[{base + 2 * int(m.group(1)) + int(m.group(2))}]"  # noqa: E731
    em.decls = {k: _OFFSET.sub(sub, v) for k, v in em.decls.items()}
    em.calls = [(step, _OFFSET.sub(sub, line) if isinstance(line, str) else line)
                for step, line in em.calls]


_REWRITES: dict = {}


def _rewrite_reshapes(em: Emitter) -> None:
    """Turn ``x.reshape((a, b, ))`` into calls of small generated helpers (``rs_2(x, a, b)``).

    Inline ``.reshape``/``.view`` cost Numba ~3x more to compile than a call to a helper
    compiled once; literal sizes become ``d`` slots so no literal specializations arise.
    """
    def sub(m):
        args = [a.strip() for a in m.group(2).split(",") if a.strip()]
        args = [em.dim(int(a)) if a.lstrip("-").isdigit() else a for a in args]
        helper = em.kernel(f"rs_{len(args)}", _reshape_helper_source(len(args)))
        return f"{helper}({m.group(1)}{''.join(', ' + a for a in args)})"

    def rewrite(text):
        text = _RESHAPE.sub(sub, text)
        if _FLAT.search(text):
            flat = em.kernel("flat", _FLAT_SOURCE)
            text = _FLAT.sub(lambda m: f"{flat}({m.group(1)})", text)
        return text

    # the text is the same for every signature with this structure: rewrite it once
    key = (tuple(em.calls), tuple(em.decls.items()), len(em.dims))
    hit = _REWRITES.get(key)
    if hit is not None:
        em.calls, em.decls, extra_dims, helpers = hit
        em.dims.extend(extra_dims)
        em.kernels.update(helpers)
        return
    n0, k0 = len(em.dims), set(em.kernels)
    em.calls = [(step, rewrite(line) if isinstance(line, str) else line) for step, line in em.calls]
    em.decls = {k: rewrite(v) for k, v in em.decls.items()}
    if len(_REWRITES) > 256:
        _REWRITES.clear()
    _REWRITES[key] = (em.calls, em.decls, em.dims[n0:],
                      {k: v for k, v in em.kernels.items() if k not in k0})


def _node_note(nodes: list[Node]) -> str:
    """The comment above a step's calls in a driver: the ONNX node(s) it runs."""
    text = "; ".join(n.label for n in nodes)  # "Op(name)"
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 160 else text[:157] + "..."


def _annotated(calls: list[tuple[int, str]], notes: dict[int, str]) -> list[tuple[int, str]]:
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


def _chunks(calls: list[tuple[int, str]]) -> list[list[str]]:
    """Split the call lines into chunks of at most CHUNK_CALLS, cutting between steps
    (comment lines do not count)."""
    chunks: list[list[str]] = [[]]
    count = 0
    last_step = None
    for step, line in calls:
        if count >= CHUNK_CALLS and step != last_step:
            chunks.append([])
            count = 0
        chunks[-1].append(line)
        count += not (isinstance(line, str) and line.startswith("#"))
        last_step = step
    if not chunks[-1]:
        chunks[-1].append("pass")
    return chunks


def _step_chunks(calls: list[tuple[int, str]]) -> tuple[list[int | None], list[list[str]]]:
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


def _declared_closure(decls: dict[str, str], lines: list[str]) -> set[str]:
    """Names declared in ``decls`` that ``lines`` need, including the views they derive from."""
    need: set[str] = set()
    todo = [n for line in lines if not line.startswith("#")
            for n in _NAME.findall(_STRING.sub('""', line))]  # not inside a call's spec
    while todo:
        n = todo.pop()
        if n in need or n not in decls:
            continue
        need.add(n)
        todo += _NAME.findall(decls[n])
    return need


_KERNEL_PRELUDE = """import math
import numpy as np
from numba import njit, prange
from jitort.kernels.cpu import mathfn as _m


"""


#: Debug kernels: the same text under an ``njit`` that adds ``boundscheck=True``.
_DEBUG_PRELUDE = (_KERNEL_PRELUDE.replace("from numba import njit,", "from numba import njit as _njit,")
                  + "def njit(*args, **flags):  # jitort debug mode: bounds-checked\n"
                    "    return _njit(*args, boundscheck=True, **flags)\n\n\n")


def _kernel_module(src: str, debug: bool = False) -> str:
    return modmgr.header(["mathfn"]) + (_DEBUG_PRELUDE if debug else _KERNEL_PRELUDE) + src

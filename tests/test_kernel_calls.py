"""The kernel-call IR: lowerings name library kernels as references, every reference resolves,
every library kernel is reached from some lowering (or is deleted), and calls render as the
backend expects."""
import ast
import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from jitort.codegen import calls as ir

ROOT = Path(__file__).resolve().parents[1]
CODEGEN = ROOT / "jitort" / "codegen"
KERNELS = ROOT / "kernels" / "cpu"


def _handles(tree) -> dict[str, str]:
    """Module-level ``name = KernelModule("module")`` bindings of a lowering module (CPU
    library handles; ``package="cuda"`` ones are tests/cuda's)."""
    out = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "KernelModule"
                and all(k.arg != "package" or k.value.value == "cpu" for k in node.value.keywords)
                and isinstance(node.targets[0], ast.Name)):
            out[node.targets[0].id] = node.value.args[0].value
    return out


def lowering_references() -> dict[tuple[str, str], list[str]]:
    """(kernel module, function) -> the codegen files that reference it (``_pool.maxpool2d``)."""
    refs: dict[tuple[str, str], list[str]] = {}
    for path in sorted(CODEGEN.rglob("*.py")):
        tree = ast.parse(path.read_text())
        handles = _handles(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in handles):
                refs.setdefault((handles[node.value.id], node.attr), []).append(path.name)
    return refs


def test_lowerings_reference_kernels_through_handles():
    refs = lowering_references()
    assert len(refs) >= 100, len(refs)  # every family's kernels, not a scan that found nothing
    modules = {m for m, _ in refs}
    assert {"conv", "gemm", "norm", "pool", "data", "rnn", "attention", "quant"} <= modules


def test_every_reference_resolves():
    """A misspelt kernel name fails here, not when some model first reaches the lowering."""
    missing = [f"{m}.{f} ({', '.join(sorted(set(where)))})"
               for (m, f), where in sorted(lowering_references().items())
               if not callable(getattr(importlib.import_module(f"jitort.kernels.cpu.{m}"), f, None))]
    assert not missing, missing


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}


def _names_in(node) -> set[str]:
    """Names and attribute names a function's body mentions (calls, arguments passed on)."""
    out = set()
    for x in ast.walk(node):
        if isinstance(x, ast.Name):
            out.add(x.id)
        elif isinstance(x, ast.Attribute):
            out.add(x.attr)
    return out


def test_every_library_kernel_is_reached():
    """Every function of the CPU kernel library is reached from a lowering (directly or through
    the kernels it calls), or from the rest of the compiler (tuning, BLAS setup, scratch-size
    helpers): a kernel nothing reaches is dead and must be deleted, not kept."""
    funcs = {(p.stem, name): node for p in sorted(KERNELS.glob("*.py"))
             for name, node in _functions(p).items()}
    by_name: dict[str, list] = {}
    for key in funcs:
        by_name.setdefault(key[1], []).append(key)
    roots = set(lowering_references())
    # public names the rest of the compiler imports or reads from the kernel library
    compiler_names: set[str] = set()
    for p in (ROOT / "jitort").rglob("*.py"):
        tree = ast.parse(p.read_text())
        compiler_names |= _names_in(tree)
        compiler_names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                           for a in n.names}
    roots |= {key for key in funcs if key[1] in compiler_names and not key[1].startswith("_")}
    # module-level statements of kernel modules (registrations, tables, jit-compiled aliases)
    for p in KERNELS.glob("*.py"):
        tree = ast.parse(p.read_text())
        for stmt in tree.body:
            if not isinstance(stmt, (ast.FunctionDef, ast.Import, ast.ImportFrom)):
                roots |= {key for name in _names_in(stmt) for key in by_name.get(name, ())}
            elif isinstance(stmt, ast.FunctionDef):  # decorators name what they wrap with
                for dec in stmt.decorator_list:
                    roots |= {key for name in _names_in(dec) for key in by_name.get(name, ())}
    # kernels that generated kernels' source templates import
    for p in CODEGEN.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for mod, names in re.findall(r"from jitort\.kernels\.cpu\.(\w+) import ([\w ,]+)",
                                             node.value):
                    roots |= {(mod, a.split()[0]) for a in names.split(",") if a.strip()}
                # generated kernels call mathfn as _m and halfprec as _h (codegen/assembly.py)
                for alias, name in re.findall(r"\b_([mh])\.(\w+)", node.value):
                    roots.add(({"m": "mathfn", "h": "halfprec"}[alias], name))
    # an @overload(f) implementation is reached with f
    edges = {key: {k for name in _names_in(node) for k in by_name.get(name, ())}
             for key, node in funcs.items()}
    for key, node in funcs.items():
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "overload":
                for target in by_name.get(getattr(dec.args[0], "id", ""), ()):
                    edges[target].add(key)
    seen, todo = set(), [k for k in roots if k in funcs]
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        todo += [k for k in edges[key] if k not in seen]
    dead = sorted(f"{m}.{f}" for m, f in funcs if (m, f) not in seen)
    assert not dead, dead


def _render(call, fold=True):
    slots = ir.Slots(n_dims=10)
    return ir.render_native(call, "K:0", slots, ir.alias,
                            lambda v: f"<{v.base}>", fold_views=fold)


def test_call_renders_views_into_the_spec():
    x = ir.View("x0", None)
    ws = ir.View("ws", "float32", (ir.Offset(2, False),), (ir.Offset(2, True),),
                 ((ir.Dim(3),), (ir.Dim(4),)))
    call = ir.Call(ir.Kernel("norm", "layernorm2d"),
                   (x.reshape((ir.Dim(3), ir.Dim(4))), ws.flat(), ir.Dim(5), ir.Scalar("float32", 1e-5),
                    True, (ir.Dim(1), ir.Dim(2)), ir.Zeros("float32"), x, ws.item()))
    text, views = _render(call)
    assert text == ('_nc(_norm.layernorm2d, "K:0", fp, d, (x0, ws,), '
                    '"v0:-:-:3,4;v1:float32:14:3*4;s5;a0;a1;a2;a3;a4;e1:float32:14:3,4", '
                    '(np.float32(1e-05), True, (d[1], d[2], ), np.zeros((0,), np.float32), <x0>,))')
    assert [v["base"] for v in views] == ["x0", "ws", "ws"]
    assert views[1]["start"] == (14,) and views[1]["end"] == (15,) and views[1]["sizes"] == ((3, 4),)
    # not folded (debug drivers): every view through the helper expression
    text, views = _render(call, fold=False)
    assert views == [] and "<x0>" in text and "<ws>" in text


def test_call_arguments_are_checked():
    from jitort.codegen.cpu import Emitter
    em = Emitter.__new__(Emitter)
    em.calls, em.step = [], 0
    with pytest.raises(TypeError, match="kernel-call argument"):
        em.call(ir.Kernel("norm", "layernorm2d"), object())
    with pytest.raises(TypeError, match="Dim sizes"):
        ir.View("x0", None).reshape((3, 4))
    assert ir.literal(float("-inf"), str) == "np.float64(-np.inf)"
    assert ir.literal(ir.Scalar("float32", float("nan")), str) == "np.float32(np.nan)"
    assert np.isnan(eval(ir.literal(ir.Scalar("float32", float("nan")), str), {"np": np}))

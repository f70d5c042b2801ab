"""The shape of the source tree (issue 43): no import cycle between the modules of jitort/ (and
the kernel library, kernels/, installed as jitort.kernels), the kernel library never importing
the compiler, no module of jitort/ above MAX_MODULE_LINES lines, no function of jitort/ above
MAX_FUNCTION_LINES lines except the ones named in LONG_FUNCTIONS with their reason.

Static checks on the text: nothing is imported or run. Every failure message lists every
offender, not just the first.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jitort"
KERNELS = ROOT / "kernels"  # the package jitort.kernels (pyproject.toml's package-dir)

MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80

#: "path relative to jitort/:qualified name" -> why that function may be longer than
#: MAX_FUNCTION_LINES. Only bodies that lose their point when split belong here (a hand-unrolled
#: kernel body); an entry whose function is gone or short again fails the test.
LONG_FUNCTIONS: dict[str, str] = {}


# --- the import graph --------------------------------------------------------------------------

def module_files(kernels: bool = False) -> dict[str, Path]:
    """Dotted module name -> file, for every module under jitort/ (packages by __init__.py),
    and with ``kernels`` every module of the kernel library as jitort.kernels.*."""
    out = {}
    for root, package in ((PACKAGE, ("jitort",)), *([(KERNELS, ("jitort", "kernels"))]
                                                     if kernels else [])):
        for f in sorted(root.rglob("*.py")):
            parts = package + f.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _base(module: str, is_package: bool, level: int) -> str:
    """The package a relative import of ``level`` dots in ``module`` starts from."""
    package = module if is_package else module.rpartition(".")[0]
    return package.rsplit(".", level - 1)[0] if level > 1 else package


def imports(module: str, path: Path) -> list[tuple[str, list[str]]]:
    """Every import statement of ``module``, at module level or inside functions, classes and
    ``if`` blocks alike, as (absolute module, names taken from it): ``import a.b`` gives
    ``("a.b", [])``, ``from ..ir import Graph`` in jitort.shapes.core ``("jitort.ir",
    ["Graph"])``."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                start = _base(module, is_package, node.level)
                base = f"{start}.{base}" if base else start
            out.append((base, [a.name for a in node.names if a.name != "*"]))
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of jitort/ and kernels/ its import statements execute: ``from m
    import x`` executes the submodule ``m.x`` when there is one, else ``m``. Importing
    ``a.b.c`` executes the packages ``a`` and ``a.b`` too: edges to those are kept, except to
    the importer's own ancestors, which Python has always started before the importer runs
    (else every package whose __init__ imports its submodules would be a cycle). An explicit
    import of an ancestor (``import jitort`` or ``from .. import __version__`` inside
    jitort.x) is an edge like any other: the facade depends on the modules, not the other way
    round."""
    files = module_files(kernels=True)
    mods = set(files)
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        explicit = set()
        for base, names in imports(mod, path):
            subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in mods]
            explicit.update(subs)
            if base in mods and (len(subs) < len(names) or not names):
                explicit.add(base)
        own = set(_ancestors(mod))
        implied = {a for r in explicit for a in _ancestors(r) if a in mods and a not in own}
        graph[mod] = (explicit | implied) - {mod}
    return graph


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative: a deep import chain must not hit Python's recursion limit), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str, work: list) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        work.append((v, iter(sorted(graph[v] & graph.keys()))))

    for root in sorted(graph):
        if root in index:
            continue
        work: list = []
        visit(root, work)
        while work:
            node, edges = work[-1]
            for w in edges:
                if w not in index:
                    visit(w, work)
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while not comp or comp[-1] != node:
                        comp.append(stack.pop())
                        on_stack.discard(comp[-1])
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return sorted(found)


def _path(graph: dict[str, set[str]], inside: set[str], src: str, dst: str) -> list[str]:
    """A shortest path src -> ... -> dst through ``inside`` (breadth first)."""
    prev = {src: src}
    frontier = [src]
    while dst not in prev:
        frontier = [prev.setdefault(w, v) and w for v in frontier
                    for w in sorted(graph[v] & inside) if w not in prev]
        if not frontier:
            raise AssertionError(f"no path {src} -> {dst} inside {sorted(inside)}")
    path = [dst]
    while path[-1] != src:
        path.append(prev[path[-1]])
    return path[::-1]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """For every import that takes part in a cycle (an edge u -> v inside a strongly connected
    component), the shortest cycle through it, as [m0, m1, ..., m0] starting from its smallest
    module; each cycle once, shortest first. Every import to remove is in the list."""
    out = set()
    for comp in components(graph):
        inside = set(comp)
        for u in comp:
            for v in sorted(graph[u] & inside):
                ring = [u] + _path(graph, inside, v, u)[:-1]
                k = ring.index(min(ring))
                out.add(tuple(ring[k:] + ring[:k]))
    return [list(c) + [c[0]] for c in sorted(out, key=lambda c: (len(c), c))]


# --- sizes -------------------------------------------------------------------------------------

def long_functions() -> dict[str, int]:
    """"path:qualified.name" -> lines (decorators included) of every function under jitort/
    longer than MAX_FUNCTION_LINES; nested functions and methods count on their own."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(), str(path))

        def visit(node, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        first = min([d.lineno for d in child.decorator_list] + [child.lineno])
                        lines = child.end_lineno - first + 1
                        if lines > MAX_FUNCTION_LINES:
                            out[f"{rel}:{name}"] = lines
                    visit(child, name + ".")
                else:
                    visit(child, prefix)

        visit(tree, "")
    return out


# --- the tests ---------------------------------------------------------------------------------

def test_the_import_graph_sees_relative_and_function_local_imports():
    graph = import_graph()
    assert "jitort.runtime" in graph and "jitort.planner" in graph
    # jitort/shapes/core.py: `from .. import ir` at module level
    assert "jitort.ir" in graph["jitort.shapes.core"]
    # jitort/apps/cli.py imports jitort.apps.batch inside cmd_batch only
    assert "jitort.apps.batch" in graph["jitort.apps.cli"]


def test_the_cycle_finder_names_every_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "b"}, "d": {"e"}, "e": {"d", "a"}, "f": {"a"}}
    assert components(graph) == [["a", "b", "c"], ["d", "e"]]
    # every edge inside a component is in some listed cycle: c -> b as well as c -> a
    assert cycles(graph) == [["b", "c", "b"], ["d", "e", "d"], ["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_kernel_library_never_imports_the_compiler():
    graph = import_graph()
    kernel = "jitort.kernels"
    assert any(m.startswith(kernel + ".") for m in graph)
    found = {m: sorted(t for t in deps if t != kernel and not t.startswith(kernel + "."))
             for m, deps in graph.items() if m == kernel or m.startswith(kernel + ".")}
    found = {m: deps for m, deps in found.items() if deps}
    assert not found, "kernel modules importing the compiler:\n" + \
        "\n".join(f"  {m} -> {', '.join(deps)}" for m, deps in sorted(found.items()))


def test_no_import_cycles():
    graph = import_graph()
    found, groups = cycles(graph), components(graph)
    assert not found, (
        f"{len(found)} import cycles in jitort/ and kernels/ (the shortest through each import "
        f"that closes one), in {len(groups)} groups of modules:\n"
        + "\n".join("  " + " -> ".join(c) for c in found) + "\ngroups:\n"
        + "\n".join("  " + ", ".join(g) for g in groups))


def test_no_module_above_the_line_limit():
    files = module_files()
    big = {str(p.relative_to(ROOT)): n for p in files.values()
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not big, f"{len(big)} modules above {MAX_MODULE_LINES} lines:\n" + \
        "\n".join(f"  {k}: {v}" for k, v in sorted(big.items(), key=lambda kv: -kv[1]))


def test_no_function_above_the_line_limit_but_the_named_exceptions():
    found = long_functions()
    unexcused = {k: v for k, v in found.items() if k not in LONG_FUNCTIONS}
    stale = sorted(k for k in LONG_FUNCTIONS if k not in found)
    msg = []
    if unexcused:
        msg.append(f"{len(unexcused)} functions above {MAX_FUNCTION_LINES} lines (split them, "
                   "or name them in LONG_FUNCTIONS with the reason):")
        msg += [f"  jitort/{k}: {v}" for k, v in sorted(unexcused.items(), key=lambda kv: -kv[1])]
    if stale:
        msg.append("LONG_FUNCTIONS entries no longer above the limit (remove them): "
                   + ", ".join(stale))
    assert not msg, "\n".join(msg)

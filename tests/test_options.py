"""jitort.Options (jitort/options.py): defaults, parsing of the ``JITORT_*`` variables, keyword
overrides, bad values, compile() honouring an option set either way, and that no other module
of jitort/ reads the environment's ``JITORT_*`` variables."""
import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import jitort
from jitort import options
from jitort.options import FIELDS, Options

from .helpers import F32, make_model, require_cases

ROOT = Path(__file__).resolve().parents[1]


# --- the dataclass ---------------------------------------------------------------------------
def test_every_field_is_documented_and_typed():
    require_cases(list(FIELDS), 20, "jitort.Options fields")
    envs = [f.metadata["env"] for f in FIELDS.values()]
    assert len(set(envs)) == len(envs) and all(e.startswith("JITORT_") for e in envs)
    for name, f in FIELDS.items():
        assert f.type and f.metadata["doc"] and "\n" not in f.metadata["doc"], name
        assert f.metadata["scope"] in (options.COMPILE, options.PROCESS, options.KERNELS), name
        readers = [r.split(" ")[0] for r in f.metadata["reader"].split("; ")]
        assert all((ROOT / r).exists() for r in readers), (name, readers)
        # a kernel-library setting is read in kernels/, never in jitort/
        assert (f.metadata["scope"] == options.KERNELS) == all(
            r.startswith("kernels/") for r in readers), name
    with pytest.raises(dataclasses.FrozenInstanceError):
        Options().strict = True


def test_defaults():
    o = Options.from_env({})
    assert o == dataclasses.replace(Options(), cache_dir=o.cache_dir, compile_jobs=o.compile_jobs)
    assert (o.tiered, o.strict, o.layout, o.packed_gemm, o.debug_passes, o.tune) == (
        True, False, "nhwc", True, 0, True)
    assert o.cache_dir == Path.home() / ".cache" / "jitort"
    assert 1 <= o.compile_jobs <= 4
    assert Options.from_env({"XDG_CACHE_HOME": "/x"}).cache_dir == Path("/x/jitort")


def test_environment_parsing():
    env = {"JITORT_TIERED": "off", "JITORT_STRICT": " Yes ", "JITORT_LAYOUT": "NCHW",
           "JITORT_PACKED_GEMM": "0", "JITORT_DEBUG": "2", "JITORT_DUMP_AFTER": "fold_constants",
           "JITORT_CACHE_DIR": "~/c", "JITORT_COMPILE_JOBS": "3", "JITORT_TUNE_SLOW": "a:2, b:0.5",
           "JITORT_SPIN_US": "12.5", "JITORT_THREAD_POOL": "0", "JITORT_BLAS": "numba",
           "JITORT_PIN_WORKERS": "1", "JITORT_STRICTLY": "nonsense", "JITORT_TUNE": ""}
    o = Options.from_env(env)
    assert (o.tiered, o.strict, o.layout, o.packed_gemm, o.debug_passes, o.dump_after) == (
        False, True, "nchw", False, 2, "fold_constants")
    assert o.cache_dir == Path("~/c").expanduser() and o.compile_jobs == 3
    assert o.tune_slow == (("a", 2.0), ("b", 0.5)) and o.tune  # empty: the default
    assert (o.spin_us, o.thread_pool, o.blas, o.pin_workers) == (12.5, False, "numba", "1")
    assert options.read("compile_jobs", {"JITORT_COMPILE_JOBS": "7"}) == 7
    assert options.variables(environ=dict(env, HOME="/h")) == env  # (a cache key's raw text)


def test_keywords_override_the_environment():
    env = {"JITORT_STRICT": "1", "JITORT_LAYOUT": "nchw", "JITORT_TIERED": "0"}
    o = Options.from_env(env, strict=False, layout="nhwc", tiered=None, compile_jobs=2)
    assert (o.strict, o.layout, o.tiered, o.compile_jobs) == (False, "nhwc", False, 2)
    assert options.for_compile(env, packed_gemm=0).packed_gemm is False
    with pytest.raises(TypeError, match="unexpected keyword.*blas"):
        options.for_compile(env, blas="mkl")  # the kernel library reads it, not compile()
    with pytest.raises(jitort.InvalidOption, match="unknown option.*layuot"):
        Options.from_env(env, layuot="nchw")


@pytest.mark.parametrize("var, bad, allowed", [
    ("JITORT_STRICT", "maybe", "0 or 1"), ("JITORT_TIERED", "2", "0 or 1"),
    ("JITORT_LAYOUT", "nwhc", "one of nhwc, nchw"), ("JITORT_COMPILE_JOBS", "0", "a positive int"),
    ("JITORT_DEBUG", "-1", "an int >= 0"), ("JITORT_TUNE_SLOW", "winograd=2", ".*candidate:factor"),
    ("JITORT_BLAS", "acml", "one of mkl, openblas"), ("JITORT_SPIN_US", "fast", "a number"),
    ("JITORT_THREAD_POOL", "false", "0 or 1"), ("JITORT_PIN_WORKERS", "2", "one of auto"),
])
def test_a_bad_value_names_the_variable_and_the_allowed_values(var, bad, allowed):
    with pytest.raises(jitort.InvalidOption, match=f"{var} must be {allowed}.*got '{bad}'"):
        Options.from_env({var: bad})
    assert issubclass(jitort.InvalidOption, (jitort.JitortError, ValueError))


def test_a_bad_keyword_value_is_refused():
    with pytest.raises(jitort.InvalidOption, match="option layout .*JITORT_LAYOUT.*one of nhwc"):
        Options.from_env({}, layout="channels_last")


# --- compile() honours them ------------------------------------------------------------------
def _interpreted_model():
    # Bernoulli, a random generator, is left to the interpreter
    return make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Bernoulli", ["r"], ["y"])],
                      [("x", F32, [2, 3])], [("y", F32, None)])


def _depthwise_model():
    """Pointwise, depthwise, pointwise convolutions: the layout pass makes them one
    channels-last region."""
    rng = np.random.default_rng(0)
    w = {"w1": (8, 4, 1, 1), "wd": (8, 1, 3, 3), "w2": (4, 8, 1, 1)}
    return make_model([helper.make_node("Conv", ["x", "w1"], ["a"]),
                       helper.make_node("Relu", ["a"], ["ar"]),
                       helper.make_node("Conv", ["ar", "wd"], ["d"], group=8, pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["d"], ["dr"]),
                       helper.make_node("Conv", ["dr", "w2"], ["y"])],
                      [("x", F32, [1, 4, 6, 6])], [("y", F32, None)],
                      {k: rng.standard_normal(s).astype(np.float32) for k, s in w.items()})


def _ops(cm):
    return [n.op_type for n in cm.graph.nodes]


def test_compile_honours_strict_from_the_environment_or_a_keyword(monkeypatch):
    monkeypatch.delenv("JITORT_STRICT", raising=False)
    cm = jitort.compile(_interpreted_model(), tiered=False)
    assert cm.options.strict is False and cm.fallback_nodes()
    with pytest.raises(jitort.UnsupportedOp, match="strict mode.*Bernoulli"):
        jitort.compile(_interpreted_model(), strict=True)
    monkeypatch.setenv("JITORT_STRICT", "on")
    with pytest.raises(jitort.UnsupportedOp, match="strict mode.*Bernoulli"):
        jitort.compile(_interpreted_model())
    cm = jitort.compile(_interpreted_model(), strict=False, tiered=False)  # the keyword wins
    assert cm.options.strict is False and cm.strict is False


def test_compile_honours_layout_from_the_environment_or_a_keyword(monkeypatch):
    monkeypatch.delenv("JITORT_LAYOUT", raising=False)
    cm = jitort.compile(_depthwise_model(), tiered=False)
    assert cm.options.layout == "nhwc" and "FusedConvNHWC" in _ops(cm), _ops(cm)
    cm = jitort.compile(_depthwise_model(), tiered=False, layout="nchw")
    assert cm.options.layout == "nchw" and "FusedConvNHWC" not in _ops(cm), _ops(cm)
    monkeypatch.setenv("JITORT_LAYOUT", "nchw")
    cm = jitort.compile(_depthwise_model(), tiered=False)
    assert cm.options.layout == "nchw" and "FusedConvNHWC" not in _ops(cm), _ops(cm)
    cm = jitort.compile(_depthwise_model(), tiered=False, layout="nhwc")  # the keyword wins
    assert "FusedConvNHWC" in _ops(cm), _ops(cm)
    monkeypatch.setenv("JITORT_LAYOUT", "sideways")
    with pytest.raises(jitort.InvalidOption, match="JITORT_LAYOUT must be one of nhwc, nchw"):
        jitort.compile(_depthwise_model(), tiered=False)


def test_compile_refuses_an_unknown_keyword():
    with pytest.raises(TypeError, match="unexpected keyword argument.*spin_us"):
        jitort.compile(_interpreted_model(), spin_us=5)


# --- structure: only jitort/options.py reads JITORT_* from the environment --------------------
def _env_reads(tree: ast.AST) -> list[str]:
    """Each environment read of a module that may be of a ``JITORT_*`` variable: ``os.getenv``,
    a keyed read of ``os.environ`` whose key is not a literal outside ``JITORT_*``, a whole-
    environment use other than a write (a copy, an iteration), ``from os import environ``."""
    os_names = {a.asname or "os" for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names if a.name == "os"}
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    found = []

    def key_ok(node) -> bool:  # a literal name that is not jitort's
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and not (
            node.value.startswith("JITORT_"))

    for n in ast.walk(tree):
        where = f"line {getattr(n, 'lineno', '?')}"
        if isinstance(n, ast.ImportFrom) and n.module == "os" and any(
                a.name in ("environ", "getenv", "environb", "getenvb") for a in n.names):
            found.append(f"{where}: from os import {', '.join(a.name for a in n.names)}")
        if not (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id in os_names and n.attr in ("environ", "getenv", "environb")):
            continue
        parent = parents.get(id(n))
        if n.attr != "environ" or parent is None:
            call = parent if isinstance(parent, ast.Call) else None
            if not (call and call.args and key_ok(call.args[0])):
                found.append(f"{where}: os.{n.attr}")
            continue
        if isinstance(parent, ast.Subscript):
            if not (isinstance(parent.ctx, ast.Store) or key_ok(parent.slice)):
                found.append(f"{where}: os.environ[...]")
        elif isinstance(parent, ast.Attribute) and parent.attr in ("update", "setdefault", "pop"):
            continue  # writes
        elif isinstance(parent, ast.Attribute) and parent.attr == "get":
            call = parents.get(id(parent))
            if not (isinstance(call, ast.Call) and call.args and key_ok(call.args[0])):
                found.append(f"{where}: os.environ.get(...)")
        elif isinstance(parent, ast.Compare):
            if not key_ok(parent.left):
                found.append(f"{where}: ... in os.environ")
        else:
            found.append(f"{where}: os.environ ({type(parent).__name__})")
    return found


def test_the_structure_check_finds_environment_reads():
    cases = {'import os\nos.environ.get("JITORT_X")': 1, 'import os as o\no.getenv(K)': 1,
             'import os\nos.environ["JITORT_X"]': 1, 'import os\nd = dict(os.environ)': 1,
             'from os import environ': 1, 'import os\n"JITORT_X" in os.environ': 1,
             'import os\nos.environ.get("HOME")': 0, 'import os\nos.environ["A"] = "1"': 0,
             'import os\nos.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")': 0}
    for src, n in cases.items():
        assert len(_env_reads(ast.parse(src))) == n, src


def test_no_module_but_options_reads_the_environment():
    paths = sorted((ROOT / "jitort").rglob("*.py"))
    require_cases(paths, 50, "jitort/ modules")
    bad = {}
    for path in paths:
        if path == ROOT / "jitort" / "options.py":
            continue
        text = path.read_text()
        if "environ" not in text and "getenv" not in text:
            continue  # no name of either in the module: nothing to parse
        reads = _env_reads(ast.parse(text, str(path)))
        if reads:
            bad[str(path.relative_to(ROOT))] = reads
    assert not bad, f"environment reads outside jitort/options.py: {bad}"
    assert _env_reads(ast.parse((ROOT / "jitort" / "options.py").read_text()))  # it does read

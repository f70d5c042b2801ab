"""The op family is the unit (issue 43): one family name across the shape functions
(``jitort/shapes/``), the CPU lowerings (``jitort/codegen/lowerings/``) and the CPU kernels
(``kernels/cpu/``), and both registries discovered from the family modules, not hand-kept lists.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jitort.codegen.cpu  # noqa: F401 (registers the lowerings)
import jitort.codegen.lowerings as lowerings
import jitort.shapes as shapes
from jitort.codegen.elementwise import EXPR
from jitort.codegen.registry import LOWER
from jitort.shapes.core import _DOMAIN_REGISTRY

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ROOT / "jitort" / "shapes"
LOWERINGS = ROOT / "jitort" / "codegen" / "lowerings"
KERNELS = ROOT / "kernels" / "cpu"

#: Lowering family -> the kernel modules of ``kernels/cpu/`` it calls besides the one named
#: like it (its ``KernelModule("...")`` handles). A family absent here calls only its own.
OTHER_KERNELS = {
    # onnxruntime's quantized contrib ops: the float-weight MatMulNBits is a packed gemm call,
    # DynamicQuantizeMatMul quantizes its input with quant's kernel
    "contrib_quant": {"gemm", "quant"},
    # one family, its kernels split by algorithm (direct, Winograd, NHWC, implicit GEMM,
    # channel-vectorized, grouped)
    "conv": {"winograd", "conv_nhwc", "conv_implicit", "conv_cvec", "conv_group"},
    # the tiled last-two-axes transposes are a module of their own
    "data": {"transpose"},
    # no kernels of its own: contractions are gemm calls, a one-run permutation data's copy
    "einsum": {"data", "gemm"},
    # a scatter that cannot write over its data input copies it first (data's copy)
    "gather_scatter": {"data"},
    # no kernels of its own: MatMul, Gemm and MatMulBias are gemm calls
    "matmul": {"gemm"},
    # QuantizeLinear / DequantizeLinear to and from float8 / float4 / int4 / int2 convert
    # through the low-precision types' shared conversions (kernels/cpu/lowprec.py, which the
    # fused loops' Cast uses too)
    "quant": {"lowprec"},
    # Softmax / LogSoftmax, lowered with the normalizations, have their own kernel module;
    # Dropout in inference is data's copy
    "norm": {"data", "softmax"},
    # a resize that changes no axis is data's copy
    "resize": {"data"},
    # the bitvector walk of tree ensembles (QuickScorer's tables) is a module of its own
    "trees": {"tree_bits"},
}
#: Lowering families with no kernel module of their own name (see OTHER_KERNELS).
NO_OWN_KERNELS = {"einsum", "matmul"}


def _family(fn) -> str:
    return fn.__module__.rsplit(".", 1)[-1]


def _shape_families() -> dict[tuple[str, str], str]:
    return {**{("", op): _family(f) for op, f in shapes._REGISTRY.items()},
            **{("jitort", op): _family(f) for op, f in shapes._JITORT_REGISTRY.items()},
            **{key: _family(f) for key, f in _DOMAIN_REGISTRY.items()}}


def _module_names(directory: Path) -> set[str]:
    return {p.stem for p in directory.glob("*.py") if p.stem != "__init__"}


def _kernel_handles(path: Path) -> set[str]:
    """The CPU kernel modules a lowering module names in ``KernelModule("...")`` calls."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "KernelModule":
            package = next((k.value.value for k in node.keywords if k.arg == "package"), "cpu")
            if package == "cpu" and node.args and isinstance(node.args[0], ast.Constant):
                out.add(node.args[0].value)
    return out


# --- (a) a shape function is filed with its op's lowering ---------------------------------------

def test_shape_function_in_the_lowering_family():
    sh = _shape_families()
    wrong = [f"{d + '::' if d else ''}{op}: lowering in lowerings/{_family(f)}.py, shape function "
             f"in shapes/{sh[(d, op)]}.py"
             for (d, op), f in sorted(LOWER.items()) if sh.get((d, op), _family(f)) != _family(f)]
    assert not wrong, "\n".join(wrong)


def test_every_lowered_op_has_a_shape_function():
    missing = sorted(k for k in LOWER if k not in _shape_families())
    assert not missing, missing


def test_fused_elementwise_ops_in_shapes_elementwise():
    # ops the fused-loop generator (codegen/elementwise.py) renders and no lowering module claims
    sh = _shape_families()
    wrong = sorted(f"{op}: shapes/{sh[('', op)]}.py" for op in EXPR
                   if ("", op) not in LOWER and sh.get(("", op), "elementwise") != "elementwise")
    assert not wrong, wrong


# --- (b) a lowering family has its kernel module ------------------------------------------------

def test_lowering_families_have_kernel_modules():
    kernels = _module_names(KERNELS)
    problems = []
    for family in sorted(lowerings.FAMILIES):
        used = _kernel_handles(LOWERINGS / f"{family}.py")
        own = set() if family in NO_OWN_KERNELS else {family}
        if own - kernels:
            problems.append(f"{family}: no kernels/cpu/{family}.py (or list it in NO_OWN_KERNELS)")
        if used != own | OTHER_KERNELS.get(family, set()):
            problems.append(f"{family}: calls kernel modules {sorted(used)}, expected "
                            f"{sorted(own | OTHER_KERNELS.get(family, set()))} (update "
                            "OTHER_KERNELS with the reason)")
        if used - kernels:
            problems.append(f"{family}: no kernels/cpu module {sorted(used - kernels)}")
    assert not problems, "\n".join(problems)


def test_kernel_exceptions_name_real_families():
    stale = sorted((set(OTHER_KERNELS) | NO_OWN_KERNELS) - set(lowerings.FAMILIES))
    assert not stale, stale


# --- (c) registration discovered from the modules -----------------------------------------------

def test_every_module_is_a_discovered_family():
    for package, directory in ((shapes, SHAPES), (lowerings, LOWERINGS)):
        files = _module_names(directory)
        assert set(package.FAMILIES) | package.HELPERS == files, package.__name__
        assert list(package.FAMILIES) == sorted(package.FAMILIES)
        for name in package.FAMILIES:
            assert f"{package.__name__}.{name}" in sys.modules, name


def test_every_family_module_registers():
    # and every registered function comes from a family module, none from a helper
    sh = set(_shape_families().values())
    assert sh == set(shapes.FAMILIES), sorted(sh ^ set(shapes.FAMILIES))
    low = {_family(f) for f in LOWER.values()}
    assert low == set(lowerings.FAMILIES), sorted(low ^ set(lowerings.FAMILIES))


def test_shape_families_are_lowering_families():
    # shapes/ may have families with no lowering module (elementwise: the fused-loop generator)
    extra = set(shapes.FAMILIES) - set(lowerings.FAMILIES)
    assert extra == {"elementwise"}, extra
    assert set(lowerings.FAMILIES) <= set(shapes.FAMILIES)


_PROBE_SHAPES = '''from .core import register


@register("ZzProbe")
def _probe(node, shapes, values):
    return [shapes[0]]
'''
_PROBE_LOWERING = '''from ..registry import lowering


@lowering("ZzProbe")
def _probe(em, n):
    pass
'''
_PROBE_CHECK = '''import jitort, jitort.shapes as S, jitort.codegen.lowerings as L
from jitort.codegen.registry import LOWER
from jitort.shapes.core import _DOMAIN_REGISTRY
assert jitort.__file__.startswith(__import__("sys").argv[1]), jitort.__file__
assert S._REGISTRY["ZzProbe"].__module__ == "jitort.shapes.zz_probe"
assert LOWER[("", "ZzProbe")].__module__ == "jitort.codegen.lowerings.zz_probe"
assert "zz_probe" in S.FAMILIES and "zz_probe" in L.FAMILIES
'''


def test_a_new_family_module_registers_without_a_list(tmp_path):
    """A copy of the package with one module added to each registry registers that module's op."""
    copy = tmp_path / "jitort"
    shutil.copytree(ROOT / "jitort", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "shapes" / "zz_probe.py").write_text(_PROBE_SHAPES)
    (copy / "codegen" / "lowerings" / "zz_probe.py").write_text(_PROBE_LOWERING)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run([sys.executable, "-c", _PROBE_CHECK, str(copy)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr

"""Generate the op coverage table (docs/ops.md) from onnx.defs, jitort's registries and onnx's own
node conformance cases -- nothing in the table is written by hand except the reasons.

    python scripts/op_coverage.py                 # writes docs/ops.md, prints the counts
    python scripts/op_coverage.py --out -         # the table on stdout

For every op of the default ONNX domain (onnx.defs, newest schemas, deprecated ones included):
* **CPU**: the element types for which jitort's CPU backend claims the op's node in onnx's node
  conformance cases (``onnx.backend.test`` generates ~1,300 single-node models, import + passes +
  partition only: what the model would run compiled), or "removed by passes" / "host" (computed
  once per input shape at plan time, e.g. ``Shape``);
* **interpreted**: the element types of the cases the partition leaves to the interpreter;
* **CUDA**: whether the CUDA backend registers a lowering;
* **onnxruntime**: whether onnxruntime's CPU provider ran at least one of the op's cases;
* **why interpreted**: the reason for ops left to the interpreter (hand-written, below).

A claim is static: a lowering can still decline one shape at plan time (strict mode,
``JITORT_STRICT=1``, turns that into an error; ``tests/test_onnx_backend.py`` counts the
conformance cases that pass in strict mode).
"""
from __future__ import annotations

import argparse
import collections
import io
import os
import sys
import warnings
from pathlib import Path

import onnx
import onnx.defs
import onnx.numpy_helper

#: Why an op stays in the interpreter, for the ops no compiled backend claims on purpose.
REASONS = {
    # control flow and non-tensor types
    "If": "control flow, bodies compiled as sub-programs (jitort/control_flow.py); interpreted "
          "where a body op is interpreted",
    "Loop": "control flow, bodies compiled as sub-programs (jitort/control_flow.py); interpreted "
            "where a body op is interpreted",
    "Scan": "control flow, bodies compiled as sub-programs (jitort/control_flow.py); the batched "
            "opset-8 form (sequence_lens) is interpreted",
    "StringConcat": "not compiled: a string step (jitort/string_ops.py; strict mode accepts it)",
    "StringNormalizer": "not compiled: a string step (jitort/text_ops.py, onnxruntime's case "
                        "mapping; strict mode accepts it)",
    "StringSplit": "not compiled: a string step (jitort/string_ops.py, Python's str.split as "
                   "onnx.reference; strict mode accepts it)",
    "RegexFullMatch": "not compiled: a string step (jitort/string_ops.py, Python's re with "
                      "ASCII classes as RE2's; strict mode accepts it)",
    "ImageDecoder": "decodes image bytes (Pillow): not numeric work",
    # random generators
    "Bernoulli": "random generator: no output to match; the interpreter's numpy draws serve",
    "Multinomial": "random generator: no output to match; the interpreter's numpy draws serve",
    "RandomNormal": "random generator (usually folded to a constant when its shape is static)",
    "RandomNormalLike": "random generator", "RandomUniform": "random generator (usually folded)",
    "RandomUniformLike": "random generator",
    # output shape depends on the data: compiled kernels outside the static workspace
    "NonZero": "output shape from the values: a dynamic step (jitort/dynamic_ops.py); string "
               "elements interpreted",
    "Unique": "output shape from the values: a dynamic step (jitort/dynamic_ops.py); string "
              "elements interpreted",
    "Compress": "output shape from the values: a dynamic step (jitort/dynamic_ops.py); string "
                "elements interpreted",
    "NonMaxSuppression": "output shape from the values: a dynamic step (jitort/dynamic_ops.py)",
    "TfIdfVectorizer": "not compiled: a string step (jitort/text_ops.py: items to pool ids by a "
                       "dict, n-grams counted by a Numba kernel; strict mode accepts it)",
}


def _schemas() -> list[str]:
    return sorted({s.name for s in onnx.defs.get_all_schemas_with_history()
                   if s.domain in ("", "ai.onnx")})


def _node_cases():
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in load_model_tests(kind="node") if "_expanded" not in c.name]


def _dtype_name(model: onnx.ModelProto, node: onnx.NodeProto) -> str:
    types = {v.name: v.type for v in list(model.graph.input) + list(model.graph.output)}
    for name in list(node.input) + list(node.output):
        t = types.get(name)
        if t is not None and t.HasField("tensor_type"):
            return onnx.helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type).name \
                if t.tensor_type.elem_type else "?"
    return "non-tensor"


def _jitort_placement(case) -> str:
    """'cpu', 'host', 'removed', 'interp' or 'error' for the case's (first) node."""
    from jitort.codegen.cpu import CpuBackend
    from jitort.importer import import_model
    from jitort import control_flow, dynamic_ops
    from jitort.partition import INTERP, assign
    from jitort.passes import run_pipeline
    from jitort.runtime import BodyModel
    op = case.model.graph.node[0].op_type
    try:
        g = import_model(case.model)
        run_pipeline(g)
        pl = assign(g, [CpuBackend()])
        # If / Loop / Scan: compiled when every body compiles (strict body models, imported and
        # partitioned only: nothing is lowered before a call)
        control_flow.claim(g, pl, BodyModel)
        dynamic_ops.claim(g, pl)  # NonZero, Unique...: compiled kernels in a dynamic step
    except Exception:
        return "error"
    mine = [n for n in g.nodes if n.op_type == op]
    if not mine:
        return "removed"
    kinds = {pl[id(n)] for n in mine}
    return "interp" if INTERP in kinds else ("host" if kinds == {"host"} else "cpu")


def _ort_runs(case) -> bool:
    import onnxruntime as ort
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        sess = ort.InferenceSession(case.model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        if case.data_sets:
            ins = case.data_sets[0][0]
            names = [i.name for i in sess.get_inputs()]
            feeds = {}
            for n, a in zip(names, ins):
                if isinstance(a, onnx.TensorProto):
                    a = onnx.numpy_helper.to_array(a)
                feeds[n] = a
            sess.run(None, feeds)
        return True
    except Exception:
        return False


def collect():
    from jitort.codegen import cuda
    from jitort.codegen.elementwise import EXPR
    cuda_ops = {op for dom, op in cuda.SUPPORT if dom == ""} | set(EXPR)
    rows = {op: {"cpu": set(), "interp": set(), "host": False, "removed": False, "ort": False,
                 "cases": 0} for op in _schemas()}
    for case in _node_cases():
        g = case.model.graph
        if not g.node or g.node[0].domain not in ("", "ai.onnx"):
            continue
        op = g.node[0].op_type
        if op not in rows:
            continue
        r = rows[op]
        r["cases"] += 1
        where = _jitort_placement(case)
        dt = _dtype_name(case.model, g.node[0])
        if where == "cpu":
            r["cpu"].add(dt)
        elif where in ("interp", "error"):
            r["interp"].add(dt)
        elif where == "host":
            r["host"] = True
        else:
            r["removed"] = True
        r["ort"] = r["ort"] or _ort_runs(case)
    for op, r in rows.items():
        r["cuda"] = op in cuda_ops
    return rows


def _status(r) -> str:
    if r["cpu"]:
        return "compiled"
    if r["removed"] or r["host"]:
        return "removed/host"
    if r["cases"] == 0:
        return "no case"
    return "interpreted"


def render(rows) -> tuple[str, dict]:
    counts = collections.Counter(_status(r) for r in rows.values())
    ort_ops = [op for op, r in rows.items() if r["ort"]]
    ort_compiled = [op for op in ort_ops if _status(rows[op]) in ("compiled", "removed/host")]
    out = io.StringIO()
    w = out.write
    w("# ONNX op coverage\n\n")
    w("Generated by `python scripts/op_coverage.py` (do not edit by hand) from `onnx.defs` "
      f"(onnx {onnx.__version__}), jitort's lowering registries and onnx's node conformance "
      "cases; see the script's docstring for what each column means.\n\n")
    w(f"- default-domain ops: {len(rows)}\n")
    w(f"- compiled on CPU for at least one element type: {counts['compiled']}\n")
    w(f"- removed by passes or computed on the host at plan time: {counts['removed/host']}\n")
    w(f"- left to the interpreter: {counts['interpreted']}\n")
    w(f"- without a conformance case to probe: {counts['no case']}\n")
    w(f"- ops onnxruntime's CPU provider ran in those cases: {len(ort_ops)}, of which jitort "
      f"compiles (or removes) {len(ort_compiled)}\n\n")
    w("| op | CPU compiled (element types) | interpreted cases | CUDA | onnxruntime | "
      "why interpreted |\n|---|---|---|---|---|---|\n")
    for op, r in rows.items():
        cpu = ", ".join(sorted(r["cpu"])) or ("removed by passes" if r["removed"] else
                                               "host" if r["host"] else "")
        interp = ", ".join(sorted(r["interp"]))
        why = REASONS.get(op, "") if (r["interp"] or not r["cpu"]) else ""
        if not why and r["interp"] and r["cpu"]:
            why = "some element types or attributes"
        if not why and r["cases"] == 0:
            why = "no conformance case" + (" (compiled)" if op in _claimed() else "")
        w(f"| {op} | {cpu} | {interp} | {'yes' if r['cuda'] else ''} | "
          f"{'yes' if r['ort'] else ''} | {why} |\n")
    w(_contrib_section())
    w(_ml_section())
    return out.getvalue(), {"compiled": counts["compiled"], "ort_ops": len(ort_ops),
                            "ort_compiled": len(ort_compiled)}


def _contrib_section() -> str:
    """onnxruntime's com.microsoft ops (its registered schemas), each with how jitort runs it:
    expanded into default-domain ops the backends compile (jitort/passes/expand.py, the
    expansions in jitort/passes/expansions/), lowered directly (a com.microsoft lowering), or
    not covered (an ``UnsupportedOp`` naming it under ``strict=True``)."""
    from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema
    from jitort.codegen.cpu import SUPPORT
    from jitort.passes.expand import EXPANSIONS, load_expansions
    from jitort.string_ops import TEXT_OPS
    load_expansions()
    ms = "com.microsoft"
    ops = sorted({s.name for s in get_all_operator_schema() if s.domain == ms}
                 | {op for dom, op in EXPANSIONS if dom == ms} | {op for dom, op in SUPPORT if dom == ms})
    status = {op: "expanded into ONNX ops, compiled" if (ms, op) in EXPANSIONS else
              "compiled (own lowering)" if (ms, op) in SUPPORT else
              "string step (jitort/text_ops.py; strict mode accepts it)" if (ms, op) in TEXT_OPS
              else "" for op in ops}
    done = sum(1 for v in status.values() if v.endswith("compiled") or v.startswith("compiled"))
    rows = "".join(f"| {op} | {status[op] or 'not covered (UnsupportedOp)'} |\n" for op in ops)
    return ("\n## com.microsoft (onnxruntime contrib ops)\n\n"
            f"{done} of the {len(ops)} com.microsoft ops onnxruntime registers compile; an "
            "expansion can still decline a node's attributes or inputs (its docstring says which), "
            "which leaves the node to the interpreter (`UnsupportedOp` under `strict=True`). "
            "Tests: tests/test_contrib_ops.py. GroupQueryAttention differs from onnxruntime "
            "where past and present share one buffer (`total_sequence_length` <= the past "
            "length): onnxruntime's present stays the buffer's length, jitort's grows by the "
            "new tokens, with the same entries up to each row's length and the same output "
            "(fed back, it decodes the same); ragged batched decoding and right-padded first "
            "prompts match onnxruntime. Tokenizer and MurmurHash3 (skl2onnx's text and "
            "FeatureHasher pipelines) run as string steps; tests: tests/test_text_ops.py."
            "\n\n| op | jitort |\n|---|---|\n" + rows)


#: How jitort runs the ai.onnx.ml ops no lowering claims (or claims in part).
ML_NOTES = {
    "ZipMap": "built at the model's boundary (a graph output: lists of dicts, jitort/zipmap.py)",
    "CategoryMapper": "string step (jitort/string_ops.py: a dict lookup in numpy, between "
                      "compiled segments; strict mode accepts it)",
    "CastMap": "not covered (UnsupportedOp): a map input (not a tensor), no onnx.reference "
               "implementation",
    "DictVectorizer": "a step (jitort/string_ops.py): the map input, fed as a dict, to one row "
                      "over the vocabulary; strict mode accepts it",
}
#: The string forms of compiled ai.onnx.ml ops: string steps (jitort/string_ops.py).
ML_STRINGS = dict.fromkeys(("LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier"),
                           "; string class labels: class indices compiled, named by a string step")
ML_STRINGS.update(LabelEncoder="; string keys or values: string step",
                  OneHotEncoder="; string categories: string step",
                  ArrayFeatureExtractor="; string tensors: string step")


def _ml_section() -> str:
    """onnx's ai.onnx.ml ops (the scikit-learn converters' domain), each with how jitort runs
    it: compiled (a lowering; the string forms in ``ML_STRINGS`` run as string steps), or as
    ``ML_NOTES`` says."""
    from jitort.codegen.cpu import SUPPORT
    ml = "ai.onnx.ml"
    ops = sorted({s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == ml})
    status = {op: ML_NOTES.get(op) or ("not covered" if (ml, op) not in SUPPORT else
                                       "compiled (own lowering)" + ML_STRINGS.get(op, ""))
              for op in ops}
    done = sum(1 for op in ops if (ml, op) in SUPPORT)
    rows = "".join(f"| {op} | {status[op]} |\n" for op in ops)
    return ("\n## ai.onnx.ml (traditional ML: scikit-learn converters)\n\n"
            f"{done} of the {len(ops)} ai.onnx.ml ops compile, against onnxruntime's CPU "
            "provider; a lowering can still decline a node's attributes (its supports predicate "
            "or an `Unlowerable` reason), which leaves the node to the interpreter "
            "(`UnsupportedOp` under `strict=True`). String tensors (class names, string "
            "columns) run as string steps between compiled segments: numpy lookups built once "
            "per node, strict mode accepts them (jitort/string_ops.py). Tests: "
            "tests/test_ml_ops.py, tests/test_ml_svm.py, tests/test_ml_preprocess.py, "
            "tests/test_string_ops.py.\n\n| op | jitort |\n|---|---|\n" + rows)


def _claimed() -> set[str]:
    from jitort.codegen.cpu import SUPPORT
    from jitort.codegen.elementwise import EXPR
    from jitort.sequences import SEQUENCE_OPS  # list operations in control steps
    return {op for dom, op in SUPPORT if dom == ""} | set(EXPR) | set(SEQUENCE_OPS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "ops.md"))
    args = ap.parse_args(argv)
    os.environ.setdefault("JITORT_LOG", "error")
    text, counts = render(collect())
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    print(f"compiled {counts['compiled']} ops; onnxruntime ran {counts['ort_ops']}, jitort "
          f"compiles or removes {counts['ort_compiled']} of them")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Token-by-token decoding with a KV cache: a new past length every step.

The decoder (tests/gpt_decoder.py) is compiled once; the prompt and every decode step run at
an input-shape signature not seen before, planned by the closed-form plans of
jitort/codegen/family.py (no shape pass, no placement search). Every step's outputs are
compared with onnxruntime's, each runtime feeding its own presents back as the next past.
"""
import numpy as np
import pytest

import jitort
from jitort.codegen import family
from jitort.planner import Buffer, MemoryPlan, check_plan, plan_memory

from . import gpt_decoder as gd
from .helpers import assert_outputs_close, require_cases

LAYERS = 2
PROMPT, STEPS = 8, 63  # the prompt, then 63 tokens one by one: 64 steps, 64 past lengths


@pytest.fixture(scope="module")
def decoder():
    import onnxruntime as ort
    model = gd.build(layers=LAYERS)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    cm = jitort.compile(model, threads=1, strict=True)
    return (lambda feeds: sess.run(None, feeds)), cm


def _segments(cm):
    return [comp for _, comp in cm.compiled_segments()]


def test_every_decode_step_matches_onnxruntime(decoder):
    ort_run, cm = decoder
    ids = gd.tokens(PROMPT + STEPS)
    want = list(gd.decode(ort_run, ids, PROMPT, LAYERS))
    got = list(gd.decode(lambda f: cm.run(None, f), ids, PROMPT, LAYERS))
    require_cases(got, 64, "decode steps")
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want)):
        assert [a.shape for a in g] == [a.shape for a in w], f"step {step}"
        assert_outputs_close(g, w, rtol=1e-3, atol=1e-4)
    comps = _segments(cm)
    # two lowerings (the prompt, the first one-token step); every later length by a family
    hits = sum(rec.family.hits for c in comps for rec in c.records if rec.family is not None)
    assert hits >= STEPS - 2, f"only {hits} of {STEPS} decode steps planned in closed form"


def test_family_plans_equal_plain_replays(decoder):
    """At new past lengths, the closed-form plan gives the sizes a plain replay (the shape
    pass, the recording's tape) gives, and a valid placement of the same buffers."""
    ort_run, cm = decoder
    ids = gd.tokens(PROMPT + 4, seed=3)
    list(gd.decode(lambda f: cm.run(None, f), ids, PROMPT, LAYERS))  # records the one-token step
    comp = _segments(cm)[0]
    checked = 0
    for past in (37, 100, 257):
        feeds = {"input_ids": ids[:, :1],
                 **{k: np.random.default_rng(past).standard_normal(
                     (1, gd.HEADS, past, gd.HIDDEN // gd.HEADS)).astype(np.float32)
                    for k in gd.empty_past(LAYERS)}}
        env = dict(zip(cm.input_ids, cm.validate(feeds)))
        fam_plan = family.plan(comp, env)
        assert fam_plan is not None, f"no closed-form plan at past length {past}"
        seg = comp.seg
        shapes, hostvals, _ = comp._shape_pass({id(v): env[id(v)].shape for v in seg.inputs}, {})
        unit = comp._probe_unit_dims(env, shapes)
        plain = next(p for p in (r.replay(unit, shapes, hostvals) for r in comp.records) if p)
        n = comp.records[0].n_dims
        assert fam_plan.d[:n].tolist() == plain.d[:n].tolist()
        assert fam_plan.out_shapes == plain.out_shapes
        assert [b.tobytes() for b in fam_plan.pb] == [b.tobytes() for b in plain.pb]
        assert [b.size for b in fam_plan.memory.buffers] == [b.size for b in plain.memory.buffers]
        check_plan(fam_plan.memory)
        assert fam_plan.ws_bytes <= plain.ws_bytes * family.SLACK * max(
            1.0, plain.memory.ratio)
        # and the run agrees with onnxruntime at that length
        assert_outputs_close(cm.run(None, feeds), ort_run(feeds), rtol=1e-3,
                             atol=1e-4)
        checked += 1
    assert checked == 3


def _feeds(past: int, seed: int = 0, batch: int = 1) -> dict:
    rng = np.random.default_rng(past + seed)
    return {"input_ids": gd.tokens(1, seed=past, batch=batch),
            **{k: rng.standard_normal((batch, gd.HEADS, past, gd.HIDDEN // gd.HEADS)
                                      ).astype(np.float32) for k in gd.empty_past(LAYERS)}}


def test_new_lengths_reuse_the_template_without_shape_inference(decoder, monkeypatch):
    """A new past length is planned from the family alone: no shape function, shape pass,
    lowering or placement search runs, and of the host nodes only those that follow from
    the past's shape run again (the batch and sequence dims' are reused). The call takes
    the one-segment fast path, whose driver takes the inputs in another order."""
    from jitort import shapes
    from jitort.codegen import plan as plan_mod
    ort_run, cm = decoder
    list(gd.decode(lambda f: cm.run(None, f), gd.tokens(PROMPT + 2), PROMPT, LAYERS))
    assert cm._fast is not None and cm._fast[3] is not None  # the arguments permuted
    comp = _segments(cm)[0]
    calls = {"infer": 0, "pass": 0, "lower": 0, "place": 0, "host": 0}

    def counted(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper
    monkeypatch.setattr(shapes, "infer", counted("infer", shapes.infer))
    monkeypatch.setattr(comp, "_shape_pass", counted("pass", comp._shape_pass))
    monkeypatch.setattr(comp, "_lower", counted("lower", comp._lower))
    monkeypatch.setattr(plan_mod, "plan_memory", counted("place", plan_mod.plan_memory))
    monkeypatch.setattr(comp, "host_runner", counted("host", comp.host_runner))
    hosts = family.host_program(comp)
    past_ids = {id(v) for v in cm.graph.inputs if v.name.startswith("past_")}
    rerun = [n for n, _, deps, _ in hosts if deps is None or set(deps) & past_ids]
    assert 0 < len(rerun) < len(hosts)
    hits = sum(rec.family.hits for rec in comp.records if rec.family is not None)
    lengths = (300, 301, 333, 512)
    for past in lengths:
        feeds = _feeds(past)
        assert_outputs_close(cm.run(None, feeds), ort_run(feeds), rtol=1e-3, atol=1e-4)
    assert calls == {"infer": 0, "pass": 0, "lower": 0, "place": 0,
                     "host": len(rerun) * len(lengths)}
    assert sum(rec.family.hits for rec in comp.records
               if rec.family is not None) == hits + len(lengths)


def test_proofs_leave_the_family_function_deciding_as_before(decoder):
    """The family function with the view checks and maximum terms its proofs leave out
    returns what the one with every check returns: the same sizes where a plan is made, the
    same refusal (None, False) where not, for real shapes and for shapes with one dim off."""
    _, cm = decoder
    list(gd.decode(lambda f: cm.run(None, f), gd.tokens(PROMPT + 2), PROMPT, LAYERS))
    comp = _segments(cm)[0]
    fam = next(rec.family for rec in comp.records if rec.family is not None)
    mem = fam.rec.plan.memory
    full, pruned = (family._family_function(fam, mem, prove)[0] for prove in (False, True))
    assert len(pruned.__code__.co_code) < len(full.__code__.co_code) / 2
    rng = np.random.default_rng(1)
    made = refused = 0
    for past in (9, 10, 57, 200, 1023):
        env = dict(zip(cm.input_ids, cm.validate(_feeds(past))))
        S, hostvals = family.host_values(comp, env)
        h = [family.host_bytes(hostvals[vid]).nbytes for vid in fam.pb_vids]
        cases = [(S, h)]
        for _ in range(30):  # one dim (or one host value's size) off
            S2, h2 = dict(S), list(h)
            if rng.random() < 0.2:
                k = int(rng.integers(len(h2)))
                h2[k] = int(rng.integers(0, 2 * h2[k] + 2))
            else:
                vid = list(S2)[int(rng.integers(len(S2)))]
                if not S2[vid]:
                    continue
                dims = list(S2[vid])
                dims[int(rng.integers(len(dims)))] = int(rng.integers(0, 600))
                S2[vid] = tuple(dims)
            cases.append((S2, h2))
        for S2, h2 in cases:
            want = full(S2, h2)
            assert pruned(S2, h2) == want
            made += bool(want)
            refused += not want
    require_cases(range(made), 5, "family plans made")
    require_cases(range(refused), 20, "family plans refused")


def test_a_batch_change_declines_the_family_and_still_matches(decoder):
    ort_run, cm = decoder
    ids = gd.tokens(PROMPT + 3, seed=5, batch=2)
    want = list(gd.decode(ort_run, ids, PROMPT, LAYERS))
    got = list(gd.decode(lambda f: cm.run(None, f), ids, PROMPT, LAYERS))
    require_cases(got, 4, "decode steps at batch 2")
    for g, w in zip(got, want):
        assert_outputs_close(g, w, rtol=1e-3, atol=1e-4)


def test_layout_structure_is_valid_for_any_sizes():
    """The placement structure kept by a family never overlaps two live buffers, whatever
    the new sizes, and reproduces the recording's offsets at the recording's sizes."""
    rng = np.random.default_rng(0)
    cases = 0
    for trial in range(40):
        n = int(rng.integers(1, 14))
        begins = rng.integers(0, 10, n)
        bufs = [Buffer(i, int(rng.integers(0, 3000)), int(b), int(b + rng.integers(0, 6)))
                for i, b in enumerate(begins)]
        mem = plan_memory(bufs)
        rows = [_Row(b.begin, b.end) for b in bufs]
        # nonneg: the maxima leave out the buffers below another of their terms
        fns = [family._layout_function(rows, list(range(n)), mem, nonneg) for nonneg in (0, 1)]
        for fn in fns:
            same = fn([b.size for b in bufs])
            assert same[1] == [b.offset if b.size else 0 for b in bufs]
        for _ in range(5):
            sizes = [int(s) if b.size else 0 for s, b in zip(rng.integers(1, 5000, n), bufs)]
            full, pruned = (fn(sizes) for fn in fns)
            assert full == pruned
            _, offsets, ws, bound = pruned
            new = [Buffer(i, s, b.begin, b.end, off)
                   for i, (s, b, off) in enumerate(zip(sizes, bufs, offsets))]
            check_plan(MemoryPlan(new, ws, bound))
            cases += 1
    require_cases(range(cases), 200, "layouts")


class _Row:
    kind = "ws"
    fixed = None

    def __init__(self, begin, end):
        self.begin, self.end = begin, end

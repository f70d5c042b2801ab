"""A recording's plan as closed-form functions of the segment's input shapes.

A plain replay (:class:`~jitort.codegen.plan.Recording`) still needs the shapes of every value
of the segment (the shape pass: a Python loop over the nodes, shape functions and memo keys),
then places the workspace again (:func:`~jitort.planner.plan_memory`) and checks the driver's
views one by one: about 1 ms on a small transformer, more than the decode step it plans.

A :class:`Family` removes those per-call loops. When a recording is made it

* runs the shape pass again on :class:`~jitort.codegen.symbolic.Sym` input dims, host-node
  outputs as further leaves, so every value's shape becomes an expression of the input dims
  and of the host values' dims (with guards on the decisions the shape functions took, on
  which dims are 1 -- what decided the recording's unit dims -- and on the bytes of the host
  values a shape function read);
* keeps the workspace placement's structure: each buffer sits on top of the buffers of
  overlapping lifetime that lay below it, so its offset is ``max(offset + aligned size)`` over
  those -- valid (no two live buffers overlap, offsets stay aligned) for any sizes, and the
  same offsets as the recording's at its sizes; the liveness lower bound is a max of sums
  over the maximal live sets, so a placement that has grown worse than the recording's
  declines instead;
* generates the checks of the driver's views (``native.check_views``) as one expression.

A new shape then costs the host nodes (values the driver reads, computed by the interpreter's
runners) and three generated functions. Anything the family cannot follow (a shape function
that fails on symbolic sizes, a host node reading the shape of a compiled value) leaves the
recording without a family: plain replay and lowering work as before.
"""
from __future__ import annotations

import logging
import math

import numpy as np

from ..planner import ALIGN, MemoryPlan
from .symbolic import Tape, concrete

log = logging.getLogger("jitort")

#: A family declines a placement whose workspace / lower bound exceeds the recording's ratio
#: by more than this factor (a full placement is then made, and its structure kept).
SLACK = 1.05

#: A family that declines this many new shapes in a row is dropped (plain replay goes on).
MAX_MISSES = 8


class Family:
    """The closed-form plan of one :class:`~jitort.codegen.plan.Recording`."""

    def __init__(self, rec, shapes_fn, host_guards: dict, ws_rows: list, mem):
        self.rec = rec
        self.hits = self.misses = 0  # plans made, new shapes declined in a row
        self.shapes_fn = shapes_fn
        self.host_guards = host_guards  # value id -> bytes a shape function read
        self.ws_rows = ws_rows
        self.pb_vids = [r.vid for r in rec.rows if r.kind == "pb"]
        self.set_layout(mem)
        self.views_fn = _views_function(rec.plan.views, rec.seg, rec.const_slots)

    def set_layout(self, mem) -> None:
        self.layout_fn = _layout_function(self.rec.rows, self.ws_rows, mem)
        self.ratio = mem.ratio * SLACK
        self.choice = mem.choice
        self.stale_layout = False

    def plan(self, S: dict, hostvals: dict):
        """The plan for input and host-output shapes ``S`` and host values ``hostvals``; None
        when a guard fails (the caller replays or lowers)."""
        rec = self.rec
        for vid, data in self.host_guards.items():
            if hostvals[vid].tobytes() != data:
                return None
        shapes = self.shapes_fn(S)
        if shapes is None:
            return None
        vals = rec.replay_values(shapes, hostvals)
        if vals is None:
            return None
        k = rec.n_dims
        sizes = vals[k:]
        lay = self.layout_fn(sizes)
        if lay is None:
            return None
        o, offsets, ws_bytes, bound = lay
        if bound and ws_bytes > bound * self.ratio:
            self.stale_layout = True  # a plain replay places it again; its structure is kept
            return None
        from .plan import host_bytes
        pb = tuple([host_bytes(hostvals[vid]) for vid in self.pb_vids])
        dl = vals[:k] + o
        seg = rec.seg
        if not self.views_fn(dl, ws_bytes, [b.nbytes for b in pb], shapes):
            return None
        d = np.array(dl, np.int64)
        mem = FamilyMemory(self.ws_rows, rec.rows, sizes, offsets, ws_bytes, bound, self.choice)
        return rec.make_plan(d, pb, mem, [shapes[id(v)] for v in seg.arg_outputs], hostvals)


class FamilyMemory(MemoryPlan):
    """A :class:`~jitort.planner.MemoryPlan` whose buffers are built when asked for (reports,
    tests), not on every call."""

    def __init__(self, ws_rows, rows, sizes, offsets, ws_bytes, bound, choice):
        self._args = (ws_rows, rows, sizes, offsets)
        self.workspace_bytes, self.lower_bound = ws_bytes, bound
        self.order, self.promoted = (choice, ()) if isinstance(choice, str) else choice
        self._buffers = None
        self._labels = None

    @property
    def buffers(self):
        from ..planner import Buffer
        if self._buffers is None:
            ws_rows, rows, sizes, offsets = self._args
            self._buffers = [Buffer(i, sizes[i], rows[i].begin, max(rows[i].begin, rows[i].end),
                                    off) for i, off in zip(ws_rows, offsets)]
        return self._buffers

    @property
    def labels(self):
        if self._labels is None:
            self._labels = {b.key: self._args[1][b.key].label for b in self.buffers}
        return self._labels

    @labels.setter
    def labels(self, value):
        self._labels = value


def plan(comp, env: dict):
    """The plan of segment compiler ``comp`` for the inputs in ``env`` from the first of its
    recordings whose family applies; None when none does."""
    seg = comp.seg
    S = {id(v): env[id(v)].shape for v in seg.inputs}
    hostvals = {id(v): env[id(v)] for v in seg.value_inputs}
    hosts = comp.__dict__.get("_host_program")
    if hosts is None:
        hosts = comp._host_program = [(n, outs) for n, mode, _, outs in comp._program if mode]

    def shape_of(v):
        return v.const.shape if v.is_const else S[id(v)]

    def value_of(v):
        return v.const if v.is_const else hostvals.get(id(v))

    for n, outs in hosts:
        for o, r in zip(outs, comp.host_runner(n, shape_of, value_of)):
            hostvals[o] = r
            S[o] = r.shape
    for rec in comp.records:
        fam = rec.family
        if fam is not None:
            p = fam.plan(S, hostvals)
            if p is not None:
                fam.hits += 1
                fam.misses = 0
                return p
            fam.misses += 1
            if fam.misses >= MAX_MISSES:  # its guards keep failing: stop paying for the host nodes
                rec.family = None
    return None


def build(comp, rec, shapes: dict, hostvals: dict):
    """The :class:`Family` of ``rec`` (made by ``comp``, a SegmentCompiler, from ``shapes``
    and ``hostvals``, the concrete shape pass of the recording), or None where a shape
    function or a host node cannot be followed symbolically."""
    try:
        return _build(comp, rec, shapes, hostvals)
    except Exception as e:  # an optimization only: plain replay and lowering still apply
        log.debug("no closed-form plan for a segment: %s: %s", type(e).__name__, e)
        return None


def _build(comp, rec, shapes: dict, hostvals: dict):
    seg = comp.seg
    inputs = {id(v) for v in seg.inputs}
    tape = Tape()
    sym = {}
    for v in seg.inputs:
        sym[id(v)] = tape.leaf_shape(id(v), shapes[id(v)])
    host_read: set[int] = set()
    from ..shapes import value_inputs
    host_out: set[int] = set()
    for n, mode, ins, outs in comp._program:
        if mode != 0:  # a host node: runs per call; its outputs' dims are leaves
            if n.op_type in ("Shape", "Size") and not (
                    n.inputs[0].is_const or id(n.inputs[0]) in inputs | host_out):
                return None  # reads the shape of a compiled value (not computed per call)
            for o in outs:
                sym[o] = tape.leaf_shape(o, shapes[o])
                host_out.add(o)
            continue
        in_s = [None if x is None else x[0].shape if type(x) is tuple else sym[x] for x in ins]
        read = set(value_inputs(n))
        vals = []
        for i, x in enumerate(ins):
            if x is None or type(x) is tuple:
                vals.append(None if x is None else x[0])
                continue
            vals.append(hostvals.get(x))
            if i in read and x in hostvals:
                host_read.add(x)
        try:
            out = comp.infer(n, in_s, vals)
        except Exception:  # a shape function that does not take symbolic sizes
            return None
        for o, s in zip(outs, out):
            s = tuple(s)
            if tuple(concrete(x) for x in s) != tuple(shapes[o]):
                return None
            sym[o] = s
    for s in sym.values():  # the 1s in the same places: the recording's unit dims hold
        for x in s:
            if not isinstance(x, int):
                tape.guard("==", x, 1, concrete(x) == 1)
    used = set(rec.leaf_vids) | {id(v) for v in seg.arg_inputs + seg.arg_outputs}
    shapes_fn = tape.compile_shapes({vid: sym[vid] for vid in sorted(used) if vid in sym})
    if not all(vid in sym for vid in used):
        return None
    guards = {vid: np.asarray(hostvals[vid]).tobytes() for vid in host_read}
    ws_rows = [i for i, r in enumerate(rec.rows) if r.kind == "ws"]
    return Family(rec, shapes_fn, guards, ws_rows, rec.plan.memory)


def _layout_function(rows: list, ws_rows: list, mem):
    """``f(sizes) -> (the rows' byte ranges flat, offsets of the ws rows, workspace bytes,
    lower bound)`` keeping ``mem``'s placement structure, or None where a buffer of size 0
    at the recording has grown (the structure does not place it)."""
    by_key = {b.key: b for b in mem.buffers}
    bufs = [by_key[i] for i in ws_rows]
    lines = ["def layout(s):"]
    for k, b in enumerate(bufs):
        lines.append(f"    a{k} = (s[{b.key}] + {ALIGN - 1}) // {ALIGN} * {ALIGN}")
    zero = [k for k, b in enumerate(bufs) if b.size <= 0]
    if zero:
        lines.append(f"    if {' or '.join(f'a{k}' for k in zero)}: return None")
    placed = sorted((k for k, b in enumerate(bufs) if b.size > 0), key=lambda k: bufs[k].offset)
    done = []
    for k in placed:
        b = bufs[k]
        below = [j for j in done if bufs[j].begin <= b.end and b.begin <= bufs[j].end]
        terms = ", ".join(f"o{j} + a{j}" for j in below)
        lines.append(f"    o{k} = max({terms}, 0)" if len(below) > 1 else
                     f"    o{k} = {terms}" if below else f"    o{k} = 0")
        done.append(k)
    for k in zero:
        lines.append(f"    o{k} = 0")
    top = ", ".join(f"o{k} + a{k}" for k in placed)
    lines.append(f"    ws = max({top}, 0)" if placed else "    ws = 0")
    lines.append(f"    lb = {_bound_expr(bufs, placed)}")
    ranges, ws_k = [], {i: k for k, i in enumerate(ws_rows)}
    for i, r in enumerate(rows):  # as plan.layout writes them: ws, host-value, constant rows
        if r.kind == "ws":
            ranges += [f"o{ws_k[i]}", f"o{ws_k[i]} + s[{i}]"]
        elif r.kind == "pb":
            ranges += ["0", f"s[{i}]"]
        else:
            ranges += [str(int(x)) for x in r.fixed]
    if not rows:
        ranges = ["0", "0"]
    lines.append(f"    return [{', '.join(ranges)}], [{', '.join(f'o{k}' for k in range(len(bufs)))}], "
                 "ws, lb")
    ns: dict = {}
    exec(compile("\n".join(lines) + "\n", "<jitort-layout>", "exec"), ns)
    return ns["layout"]


def _bound_expr(bufs: list, placed: list) -> str:
    """The liveness lower bound (:func:`~jitort.planner.lower_bound`) as an expression: the
    largest sum of aligned sizes over the maximal sets of buffers live at one step."""
    sets = []
    for t in sorted({bufs[k].begin for k in placed}):
        live = frozenset(k for k in placed if bufs[k].begin <= t <= bufs[k].end)
        sets.append(live)
    maximal = [s for s in set(sets) if not any(s < o for o in sets)]
    sums = [" + ".join(f"a{k}" for k in sorted(s)) for s in maximal if s]
    return f"max({', '.join(sums)}, 0)" if sums else "0"


def _views_function(views: list, seg, const_slots: set):
    """``f(d, ws_bytes, pb_nbytes, shapes) -> bool``: the checks of
    :func:`~jitort.codegen.native.check_views` (each view spans exactly its byte range, inside
    its buffer or argument array) as generated expressions, ``shapes`` giving the argument
    arrays' sizes. A check whose slots are all constant (``const_slots``) and whose limit is
    too was made once, by ``native.check_views`` when the recording was lowered."""
    args = {}
    for pre, vals in (("x", seg.arg_inputs), ("y", seg.arg_outputs)):
        for i, v in enumerate(vals):
            args[f"{pre}{i}"] = (id(v), np.dtype(v.dtype).itemsize)

    def nbytes(base):
        if base == "ws":
            return "ws"
        if base[0] == "h":
            return f"h[{int(base[1:])}]"
        if base in args:
            vid, item = args[base]
            return f"math.prod(shapes[{vid}]) * {item}"
        return None

    conds = []
    for v in views:
        base = v["base"]
        if v["sizes"] == ((-1,),):
            if v.get("scalar") and base in args:
                conds.append(f"{nbytes(base)} == 0")
            continue  # an argument array flattened: fits by construction
        slots = [i for p in v["sizes"] for i in p] + list(v["start"]) + list(v["end"] or ())
        if base == "cb" and all(i in const_slots for i in slots):
            continue
        count = "*".join(f"d[{i}]" for p in v["sizes"] for i in p) or "1"
        if v.get("scalar"):
            conds.append(f"{count} < 1")
        limit = nbytes(base)
        if v["end"] is None:  # an argument array reshaped: its element count
            if base in args:
                conds.append(f"({count}) * {args[base][1]} != {limit}")
            continue
        start = " + ".join(f"d[{i}]" for i in v["start"]) or "0"
        end = " + ".join(f"d[{i}]" for i in v["end"]) or "0"
        conds.append(f"({start}) < 0 or ({end}) - ({start}) != ({count}) * {v['item']}")
        if limit is not None:
            conds.append(f"({end}) > {limit}")
    lines = ["def views(d, ws, h, shapes):"]
    for k in range(0, len(dict.fromkeys(conds)), 32):
        lines.append(f"    if {' or '.join(list(dict.fromkeys(conds))[k:k + 32])}: return False")
    lines.append("    return True")
    ns: dict = {"math": math}
    exec(compile("\n".join(lines) + "\n", "<jitort-views>", "exec"), ns)
    return ns["views"]

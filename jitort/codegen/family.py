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
* generates the checks of the driver's views (``native.check_views``) as expressions.

All of it is one generated function of the input dims (:func:`_family_function`): it returns
the distinct sizes and offsets ``d`` needs, scattered into a copy of the recording's ``d``. A
new shape then costs the host nodes (values the driver reads, computed by the interpreter's
runners; those that follow from input shapes that did not change are reused, see
:func:`host_program`) and that function. The function is kept short: each operation is
written once, and what holds for every size is left out -- a view check whose sides are the
same polynomial of the dims once the guards' equalities are applied (a dim that is 1, two
equal dims), and in the placement's maxima the buffers that lie below another term
(:class:`jitort.codegen.proofs.Known`). Anything the family cannot follow (a shape function
that fails on symbolic sizes, a host node reading the shape of a compiled value) leaves the
recording without a family: plain replay and lowering work as before.
"""
from __future__ import annotations

import logging
import math

import numpy as np

from ..planner import ALIGN, MemoryPlan
from .plan import host_bytes
from .proofs import Known, Polys, equalities, substitute
from .symbolic import Tape, _ref, concrete, is_literal

log = logging.getLogger("jitort")

#: A family declines a placement whose workspace / lower bound exceeds the recording's ratio
#: by more than this factor (a full placement is then made, and its structure kept).
SLACK = 1.05

#: A family that declines this many new shapes in a row is dropped (plain replay goes on).
MAX_MISSES = 8


class Family:
    """The closed-form plan of one :class:`~jitort.codegen.plan.Recording`: one generated
    function ``f(S, h)`` of the input and host-output shapes ``S`` and the host values' byte
    sizes ``h`` -> (the variable slots of ``d``, workspace bytes, lower bound, output
    shapes), None when a guard fails, False when the placement has grown worse than
    allowed."""

    def __init__(self, rec, tape: Tape, sym: dict, host_guards: dict):
        self.rec = rec
        self.tape, self.sym = tape, sym  # the shape tape and every value's symbolic shape
        self.hits = self.misses = 0  # plans made, new shapes declined in a row
        self.host_guards = host_guards  # value id -> bytes a shape function read
        self.ws_rows = [i for i, r in enumerate(rec.rows) if r.kind == "ws"]
        self.pb_vids = [r.vid for r in rec.rows if r.kind == "pb"]
        self.set_layout(rec.plan.memory)

    def set_layout(self, mem) -> None:
        """Generate the function for the placement structure of ``mem``."""
        self.fn, self.template, self.slots = _family_function(self, mem)
        self.choice = mem.choice
        self.stale_layout = False

    def plan(self, S: dict, hostvals: dict):
        """The plan for input and host-output shapes ``S`` and host values ``hostvals``; None
        when a guard fails (the caller replays or lowers)."""
        rec = self.rec
        for vid, data in self.host_guards.items():
            if hostvals[vid].tobytes() != data:
                return None
        for vid, data in rec.hostvals.items():
            a = hostvals.get(vid)
            if a is None or (a.tobytes() if hasattr(a, "tobytes") else repr(a).encode()) != data:
                return None
        pb = tuple([host_bytes(hostvals[vid]) for vid in self.pb_vids])
        try:
            r = self.fn(S, [b.nbytes for b in pb])
        except ArithmeticError:  # a size the recording divided by is 0 here
            return None
        if not r:
            if r is False:
                self.stale_layout = True  # a plain replay places it again; its structure is kept
            return None
        vals, ws_bytes, bound, out_shapes = r
        d = self.template.copy()
        slots, which = self.slots
        d[slots] = np.array(vals, np.int64)[which]
        mem = FamilyMemory(self.ws_rows, rec, d, ws_bytes, bound, self.choice)
        return rec.make_plan(d, pb, mem, out_shapes, hostvals)


class FamilyMemory(MemoryPlan):
    """A :class:`~jitort.planner.MemoryPlan` whose buffers are read from the plan's ``d`` when
    asked for (reports, tests), not built on every call."""

    def __init__(self, ws_rows, rec, d, ws_bytes, bound, choice):
        self._args = (ws_rows, rec, d)
        self.workspace_bytes, self.lower_bound = ws_bytes, bound
        self.order, self.promoted = (choice, ()) if isinstance(choice, str) else choice
        self._buffers = None
        self._labels = None

    @property
    def buffers(self):
        from ..planner import Buffer
        if self._buffers is None:
            ws_rows, rec, d = self._args
            o = d[rec.n_dims:].reshape(-1, 2).tolist()
            rows = rec.rows
            self._buffers = [Buffer(i, o[i][1] - o[i][0], rows[i].begin,
                                    max(rows[i].begin, rows[i].end), o[i][0]) for i in ws_rows]
        return self._buffers

    @property
    def labels(self):
        if self._labels is None:
            self._labels = {b.key: self._args[1].rows[b.key].label for b in self.buffers}
        return self._labels

    @labels.setter
    def labels(self, value):
        self._labels = value


def plan(comp, env: dict):
    """The plan of segment compiler ``comp`` for the inputs in ``env`` from the first of its
    recordings whose family applies; None when none does."""
    S, hostvals = host_values(comp, env)
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


def host_values(comp, env: dict) -> tuple[dict, dict]:
    """``(S, hostvals)`` for the inputs in ``env``: the shapes of the segment's inputs and
    host values, and the host values (the host nodes run, see :func:`host_program`)."""
    seg = comp.seg
    S = {id(v): env[id(v)].shape for v in seg.inputs}
    hostvals = {id(v): env[id(v)] for v in seg.value_inputs}
    hosts = comp.__dict__.get("_host_program")
    if hosts is None:
        hosts = comp._host_program = host_program(comp)

    def shape_of(v):
        return v.const.shape if v.is_const else S[id(v)]

    def value_of(v):
        return v.const if v.is_const else hostvals.get(id(v))

    for step in hosts:
        n, outs, deps, last = step
        if deps is not None:  # its outputs follow from these inputs' shapes alone
            key = tuple([S[vid] for vid in deps])
            if last is not None and last[0] == key:
                res = last[1]
            else:
                res = comp.host_runner(n, shape_of, value_of)
                step[3] = (key, res)
        else:
            res = comp.host_runner(n, shape_of, value_of)
        for o, r in zip(outs, res):
            hostvals[o] = r
            S[o] = r.shape
    return S, hostvals


#: host ops whose outputs are not a function of their inputs
_NOT_PURE = ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
             "Multinomial", "Bernoulli")


def host_program(comp) -> list:
    """The host nodes a family plan runs per shape, in order, each as ``[node, output ids,
    deps, last]``: ``deps`` the segment inputs whose shapes alone decide the node's outputs
    (it reads no input's values, directly or through other host nodes: ``Shape`` of an input,
    arithmetic on such shapes), None otherwise; ``last`` the ``(shapes of deps, outputs)`` of
    its last run, reused while those shapes stay (a decode loop's batch and sequence dims:
    only what follows from the growing past is computed again). The outputs are shared by
    the plans made meanwhile, which only read them; a node with an output the segment
    exports (which may reach the caller) runs every time."""
    inputs = {id(v) for v in comp.seg.inputs}
    exported = {id(v) for v in comp.seg.outputs}
    deps_of: dict = {}  # host value id -> the input ids its value follows from, or None
    steps = []
    for n, mode, _, outs in comp._program:
        if not mode:
            continue
        x = n.inputs[0] if n.inputs else None
        if n.op_type in ("Shape", "Size") and x is not None and id(x) in inputs:
            deps: set | None = {id(x)}
        elif n.op_type in _NOT_PURE or n.domain not in ("", "ai.onnx"):
            deps = None
        else:
            deps = set()
            for v in n.inputs:
                if v is not None and not v.is_const:
                    d = deps_of.get(id(v))
                    if d is None:  # a segment input's values, or a value of no known origin
                        deps = None
                        break
                    deps |= d
        for o in outs:
            deps_of[o] = deps
        reuse = deps is not None and not any(o in exported for o in outs)
        steps.append([n, outs, tuple(sorted(deps)) if reuse else None, None])
    return steps


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
    named: dict = {}  # a symbolic dim's name -> its leaf (the feeds agree on it)
    declared = comp.__dict__.get("input_dims", {})
    for v in seg.inputs:
        leaves = tape.leaf_shape(id(v), shapes[id(v)])
        dims = declared.get(id(v))
        if dims is not None and len(dims) == len(leaves):  # a graph input, checked per call
            leaves = tuple(n if isinstance(n, int) else named.setdefault(n, x) if n else x
                           for n, x in zip(dims, leaves))
        sym[id(v)] = leaves
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
    if any(len(sym.get(vid, ())) != n for vid, n in rec.tape.ranks.items()):
        return None  # (a value the recording read is not the segment's, or another rank)
    guards = {vid: np.asarray(hostvals[vid]).tobytes() for vid in host_read}
    return Family(rec, tape, sym, guards)


def _family_function(fam: Family, mem, prove: bool = True):
    """``(f, template, slots)``: :class:`Family`'s generated function, the recording's ``d``
    (its constant slots stay) and the positions of the slots ``f`` computes. ``prove``: leave
    out the view checks and the terms of maxima that hold, or are dominated, whatever the
    sizes (see :class:`jitort.codegen.proofs.Known`)."""
    rec, sym = fam.rec, fam.sym
    seen: dict = {}  # an operation written once for both tapes
    lines, ssrc = fam.tape.emit([_ref(x) for s in sym.values() for x in s], "a", seen=seen)

    def leaf(vid, k):
        return ssrc(_ref(sym[vid][k]))
    body, src = rec.tape.emit([_ref(x) for x in rec.outputs], "t", leaf, seen)
    lines += body
    n = rec.n_dims
    exprs = [src(_ref(x)) for x in rec.outputs]  # the dims, then every row's byte size
    sizes = exprs[n:]
    spoly = Polys(fam.tape, ssrc)
    rpoly = Polys(rec.tape, src, lambda vid, k: spoly(_ref(sym[vid][k])))
    # what the guards (checked before the layout) make equal: a dim that is 1, two equal dims
    subst = equalities([(poly(a), poly(b)) for tape, poly in ((fam.tape, spoly), (rec.tape, rpoly))
                         for (cmp, a, b), outcome in tape.guards.items()
                         if (cmp, outcome) in (("==", True), ("!=", False))])
    sizes_p = [substitute(rpoly(_ref(x)), subst) for x in rec.outputs]
    shapes_p = {vid: [substitute(spoly(_ref(x)), subst) for x in shape] for vid, shape in sym.items()}
    known = Known(rec.rows, sizes_p, n, shapes_p, spoly.atoms_nonneg | rpoly.atoms_nonneg)
    lay, ranges = _layout_lines(rec.rows, fam.ws_rows, mem, lambda i: sizes[i],
                                prove and known.sizes_nonneg)
    lines += lay
    lines.append(f"    if lb and ws > lb * {mem.ratio * SLACK!r}: return False")
    slot = exprs[:n] + ranges  # every slot of d as an expression
    lines += _view_lines(rec.plan.views, rec.seg, slot, fam, ssrc, known if prove else None)
    variable = [i for i, e in enumerate(slot) if not is_literal(e)]
    distinct = list(dict.fromkeys(slot[i] for i in variable))  # most slots repeat a few sizes
    outs = ", ".join("(" + "".join(ssrc(_ref(x)) + ", " for x in sym[id(v)]) + ")"
                     for v in rec.seg.arg_outputs)
    lines.append(f"    return [{', '.join(distinct)}], ws, lb, [{outs}]")
    ns: dict = {"math": math}
    exec(compile("\n".join(["def family(S, h):"] + lines) + "\n", "<jitort-family>", "exec"), ns)
    template = np.array([int(e) if is_literal(e) else 0 for e in slot], np.int64)
    pos = {e: k for k, e in enumerate(distinct)}
    return ns["family"], template, (np.array(variable, np.intp),
                                    np.array([pos[slot[i]] for i in variable], np.intp))


def _layout_function(rows: list, ws_rows: list, mem, nonneg: bool = False):
    """``f(sizes) -> (the rows' byte ranges flat, offsets of the ws rows, workspace bytes,
    lower bound)``, or None (see :func:`_layout_lines`; ``nonneg``: every size is >= 0)."""
    lines, ranges = _layout_lines(rows, ws_rows, mem, lambda i: f"s[{i}]", nonneg)
    lines.append(f"    return [{', '.join(ranges)}], "
                 f"[{', '.join(f'w{k}' for k in range(len(ws_rows)))}], ws, lb")
    ns: dict = {}
    exec(compile("\n".join(["def layout(s):"] + lines) + "\n", "<jitort-layout>", "exec"), ns)
    return ns["layout"]


def _layout_lines(rows: list, ws_rows: list, mem, size, nonneg: bool = False):
    """Lines placing the workspace rows with ``mem``'s structure (``w<k>``: the offset of
    ``ws_rows[k]``, ``ws``: the workspace bytes, ``lb``: the liveness bound; ``return None``
    where a buffer of size 0 at the recording has grown: the structure does not place it),
    and the expressions of every row's byte range (``size(i)``: row ``i``'s byte size), as
    :func:`~jitort.codegen.plan.layout` writes them.

    ``nonneg``: no size can be negative, so no aligned size is: a buffer placed on top of
    another (directly or through others) then ends above it, and a maximum leaves out the
    buffers below another of its terms."""
    by_key = {b.key: b for b in mem.buffers}
    bufs = [by_key[i] for i in ws_rows]
    lines = []
    z: dict[int, str] = {}  # k -> the aligned size of bufs[k]: a literal or a name
    named: dict[str, str] = {}  # one line per distinct expression
    for k, b in enumerate(bufs):
        sz = size(b.key)
        if is_literal(sz):
            z[k] = str((int(sz) + ALIGN - 1) // ALIGN * ALIGN)
            continue
        e = f"({sz} + {ALIGN - 1}) // {ALIGN} * {ALIGN}"
        if e not in named:
            named[e] = f"z{k}"
            lines.append(f"    z{k} = {e}")
        z[k] = named[e]
    zero = [k for k, b in enumerate(bufs) if b.size <= 0]
    test = [z[k] for k in zero if not is_literal(z[k]) or int(z[k])]
    if test:
        lines.append(f"    if {' or '.join(dict.fromkeys(test))}: return None")
    placed = sorted((k for k, b in enumerate(bufs) if b.size > 0), key=lambda k: bufs[k].offset)
    at_zero = set(zero)  # offsets that are 0 whatever the sizes
    reach: dict[int, set] = {}  # k -> the buffers below it, directly or through others

    def end(j):
        return z[j] if j in at_zero else f"w{j} + {z[j]}"

    def terms(ks):
        if nonneg:
            ks = [k for k in ks if not any(k in reach[m] for m in ks if m != k)]
        return ", ".join(dict.fromkeys(end(k) for k in ks))

    done = []
    for k in placed:
        b = bufs[k]
        below = [j for j in done if bufs[j].begin <= b.end and b.begin <= bufs[j].end]
        reach[k] = set(below).union(*(reach[j] for j in below))
        t = terms(below)
        if not below:
            at_zero.add(k)
        lines.append(f"    w{k} = max({t})" if "," in t else f"    w{k} = {t or 0}")
        done.append(k)
    for k in zero:
        lines.append(f"    w{k} = 0")
    top = terms(placed)
    lines.append(f"    ws = max({top}, 0)" if placed else "    ws = 0")
    lines.append(f"    lb = {_bound_expr(bufs, placed, z)}")
    ranges, ws_k = [], {i: k for k, i in enumerate(ws_rows)}
    for i, r in enumerate(rows):
        if r.kind == "ws":
            k = ws_k[i]
            ranges += (["0", size(i)] if k in at_zero else [f"w{k}", f"w{k} + {size(i)}"])
        elif r.kind == "pb":
            ranges += ["0", size(i)]
        else:
            ranges += [str(int(x)) for x in r.fixed]
    return lines, ranges or ["0", "0"]


def _bound_expr(bufs: list, placed: list, z: dict) -> str:
    """The liveness lower bound (:func:`~jitort.planner.lower_bound`) as an expression: the
    largest sum of aligned sizes (``z``: each buffer's) over the maximal sets of buffers
    live at one step."""
    sets = []
    for t in sorted({bufs[k].begin for k in placed}):
        live = frozenset(k for k in placed if bufs[k].begin <= t <= bufs[k].end)
        sets.append(live)
    maximal = [s for s in set(sets) if not any(s < o for o in sets)]
    sums = list(dict.fromkeys(" + ".join(z[k] for k in sorted(s)) for s in maximal if s))
    return f"max({', '.join(sums)}, 0)" if len(sums) > 1 else f"max({sums[0]}, 0)" if sums else "0"


def _view_lines(views: list, seg, slot: list, fam, ssrc, known: Known | None = None) -> list:
    """The checks of :func:`~jitort.codegen.native.check_views` (each view spans exactly its
    byte range, inside its buffer or argument array) as lines returning None, on the
    expressions ``slot`` of ``d``'s slots; checks on constant slots only were made when the
    recording was lowered, and checks ``known`` proves for every size are left out.
    ``h[k]``: host value k's byte size."""
    args = {}
    for pre, vals in (("x", seg.arg_inputs), ("y", seg.arg_outputs)):
        for i, v in enumerate(vals):
            shape = fam.sym[id(v)]
            args[f"{pre}{i}"] = ("*".join(ssrc(_ref(x)) for x in shape) or "1",
                                 np.dtype(v.dtype).itemsize)

    def nbytes(base):
        if base == "ws":
            return "ws"
        if base[0] == "h":
            return f"h[{int(base[1:])}]"
        if base in args:
            return f"{args[base][0]} * {args[base][1]}"
        return None

    conds = []
    for v in views:
        base = v["base"]
        if v["sizes"] == ((-1,),):
            if v.get("scalar") and base in args:
                conds.append(f"{nbytes(base)} == 0")
            continue  # an argument array flattened: fits by construction
        slots = [i for p in v["sizes"] for i in p]
        count = "*".join(slot[i] for i in slots) or "1"
        if v.get("scalar"):
            conds.append(f"{count} < 1")
        limit = nbytes(base)
        if v["end"] is None:  # an argument array reshaped: its element count
            if base in args and not (known and known.fills(base, slots, seg)):
                conds.append(f"({count}) * {args[base][1]} != {limit}")
            continue
        start = " + ".join(slot[i] for i in v["start"]) or "0"
        end = " + ".join(slot[i] for i in v["end"]) or "0"
        if not (known and known.nonneg(v["start"])):
            conds.append(f"({start}) < 0")
        if not (known and known.spans(v["start"], v["end"], slots, v["item"])):
            conds.append(f"({end}) - ({start}) != ({count}) * {v['item']}")
        if limit is not None and not (base == "ws" and known and known.inside_ws(v["end"])):
            conds.append(f"({end}) > {limit}")
    conds = [c for c in dict.fromkeys(conds) if not _always_passes(c)]
    return [f"    if {' or '.join(conds[k:k + 32])}: return None" for k in range(0, len(conds), 32)]


def _always_passes(cond: str) -> bool:
    """Whether the failure condition ``cond`` has no names (integer literals only) and is
    false: decided once, here."""
    if any(ch.isalpha() or ch == "_" for ch in cond.replace(" or ", " | ")):
        return False
    return not eval(cond)  # arithmetic and comparisons of integer literals only



"""The CPU backend: lowers a segment into a generated driver module calling Numba kernels.

Lowering happens per input-shape signature (``SegmentCompiler.plan``), but the generated text
does not depend on the concrete sizes: every size that can vary is read from the ``d`` array at
run time and every buffer offset from the ``o`` array, so a new shape that keeps the same
structure produces byte-identical source, hits the module cache and compiles nothing.

Driver signature (one Python->native transition per call)::

    call(ws, cb, d, h0, h1, ..., x0, x1, ..., y0, y1, ...)

``ws`` the workspace (uint8), ``cb`` the constants arena (uint8), ``d`` int64: the sizes, then
the ``[start, end)`` byte range of every buffer; ``h*`` the host values the segment reads (each
the bytes of its own array: a plan keeps the arrays the host computed instead of copying them
into one buffer, which for gpt2's (8, 1, 256, 256) mask was 2 MB of fresh pages per new
shape); ``x*`` the segment's inputs and ``y*`` its outputs (fresh arrays the caller owns).
"""
from __future__ import annotations

import gc
import math

import numpy as np

from ..ir import Node
from ..options import Options
from . import family
from . import lowerings  # noqa: F401 (each family registers its lowerings on import)
from .assembly import _node_note, assemble
from .elementwise import kernel_source, supports_elementwise
from .emitter import ConstArena, Emitter
from .fusion import Group, collapse_group, concat_placements, fused_steps, group_operands
from .plan import MAX_RECORDS, Plan, Recording, check_views, layout, promote
from .registry import LOWER, SUPPORT, Backend, Unlowerable, lower_step
from .symbolic import GuardedHostvals, SymShapes, Tape, concrete

#: Elementwise work below this many elements runs serially (16K floats: ~3-10 us of work; a
#: region on jitort's pool costs ~1 us).
PARALLEL_MIN = 1 << 14


class CpuBackend(Backend):
    """Claims the nodes the CPU code generator can lower."""

    name = "cpu"
    support = SUPPORT

    def elementwise(self, node: Node) -> bool:
        """Lowered into fused elementwise loops (see partition._compile_host_data)."""
        return supports_elementwise(node)

    fusible = elementwise


def lower_group(em: Emitter, grp: Group, consumers_outside) -> None:
    """Emit one fused elementwise kernel for ``grp`` and its call."""
    operands, ops, temp_dtypes, outs = group_operands(grp, consumers_outside)
    extents, flags, opnds = collapse_group(em, grp, operands)
    parallel = em.split("par", grp.nodes[0], math.prod(concrete(n) for n in grp.shape),
                        PARALLEL_MIN, extents[0])
    prefix = "k_" + "_".join(dict.fromkeys(n.op_type.lower() for n in grp.nodes[:4]))
    ext = em.sizes(extents)
    one = em.size(1) if any(b for f in flags for b in f) else None
    args = []
    taken: set[int] = set()
    inplace: dict[int, int] = {}  # output position -> operand written over in place
    for k, i in enumerate(outs):
        y = grp.nodes[i].outputs[0]
        donor = None if id(y) in em.embed or id(y) in em.embed_parents else next(
            (j for j, (v, f) in enumerate(zip(operands, flags))
             if not any(f) and em.can_donate(v, y) and em.root[id(v)] not in taken
             # the kernel stores through the operand's own (typed) view: same dtype only
             and np.dtype(v.dtype) == np.dtype(y.dtype)), None)
        if donor is not None:
            taken.add(em.root[id(operands[donor])])
            inplace[k] = donor
        reuse = None if donor is None else operands[donor]
        args.append(em.write(y, reuse=reuse).reshape(ext))
    for v, f in zip(operands, flags):
        args.append(em.read(v).reshape(tuple(one if b else e for b, e in zip(f, ext))))
    src = kernel_source("__KNAME__", ops, opnds, outs, len(extents), parallel,
                        temp_dtypes, inplace=inplace)
    em.call(em.generated(prefix, src), *args)


#: Entries of a segment's shape-inference memo before it is cleared (each is a few shapes).
_INFER_MEMO_MAX = 1 << 14


class _Unhashable(Exception):
    pass


def _plain(v):
    """An attribute value as a hashable key (raises _Unhashable for anything else)."""
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray) and v.size <= 64:
        return (v.dtype.str, v.shape, v.tobytes())
    raise _Unhashable


def _infer_signature(n: Node):
    """What a node's shape function may read besides its input shapes: the op, its version,
    attributes, input/output counts, and (as positions) the inputs whose *values* it reads.
    Nodes with equal signatures -- the same op in every layer of a transformer -- share
    memoized inference results: gpt2 has 153 compiled nodes but 31 distinct inferences per
    shape. None (no sharing, no memo) when an attribute is not a plain value."""
    from ..shapes import value_inputs
    try:
        attrs = tuple(sorted((k, _plain(v)) for k, v in n.attrs.items()))
    except _Unhashable:
        return None
    return ((n.domain, n.op_type, n.since_version, len(n.inputs), len(n.outputs), attrs),
            tuple(i for i in value_inputs(n) if i < len(n.inputs)))


def _value_key(v):
    """A host/constant value read by a shape function, as part of a memo key."""
    if v is None:
        return None
    v = np.asarray(v)
    return (v.dtype.str, v.shape, v.tobytes())


class SegmentCompiler:
    """Plans one segment per signature; keeps the decisions that make generated text stable."""

    def __init__(self, seg, placement: dict[int, str], host_runner, infer_shapes,
                 debug: bool = False, threads: int | None = None, options: Options | None = None):
        self.seg = seg
        #: the compile's settings (default: from the environment now)
        self.options = Options.from_env() if options is None else options
        self.debug = debug  # bounds-checked modules under their own names (see _kernel_module)
        self.threads = threads  # the model's thread count (None: Numba's); sizes scratch rows
        self.placement = placement
        self.host_runner = host_runner
        self.infer = infer_shapes
        self.consts = ConstArena()
        self.memo: dict = {}
        self.records: list[Recording] = []  # most recent first
        self._program: list | None = None  # see _shape_pass
        self._sigs: list | None = None  # per program entry: see _infer_signature
        self._infer_memo: dict = {}  # (signature, input shapes, value keys) -> output shapes
        self._unit_cache: dict = {}  # see _probe_unit_dims: ambiguous inputs -> (1s seen, answer)
        self.replays = 0  # plans built by replaying a recording (for tests and reports)

    def _node_program(self) -> list:
        """The per-node work of the shape pass that does not depend on the shapes, done once:
        (node, mode, inputs (a const as a 1-tuple, else the value id), output ids). ``mode`` is
        0 for a compiled node, 1 for a host node whose values some shape depends on, 2 for a
        host node producing data only (the probe pass infers its shapes instead of running it).
        """
        from ..partition import HOST
        from ..shapes import value_inputs
        seg = self.seg
        host = [self.placement[id(n)] == HOST for n in seg.nodes]
        needed: set[int] = set()  # value ids whose *values* decide some shape
        for n, h in zip(reversed(seg.nodes), reversed(host)):
            if h and any(id(o) in needed for o in n.outputs) and n.op_type not in ("Shape", "Size"):
                needed.update(id(v) for v in n.inputs if v is not None)
            for i in value_inputs(n):
                v = n.input(i)
                if v is not None:
                    needed.add(id(v))
        return [(n, 0 if not h else 1 if any(id(o) in needed for o in n.outputs) else 2,
                 [None if v is None else (v.const,) if v.is_const else id(v) for v in n.inputs],
                 [id(o) for o in n.outputs]) for n, h in zip(seg.nodes, host)]

    def _shape_pass(self, in_shapes: dict, in_values: dict, probe: bool = False):
        """Shapes of every value (and host values) for the segment's input shapes/values.
        ``probe``: shapes only -- host nodes that make data, not shapes, are not run."""
        prog = self._program
        if prog is None:
            prog = self._program = self._node_program()
        shapes = dict(in_shapes)
        hostvals = dict(in_values)
        get_value = hostvals.get

        def shape_of(v):
            return v.const.shape if v.is_const else shapes[id(v)]

        def value_of(v):
            return v.const if v.is_const else get_value(id(v))

        def values(ins):  # a node's input values (None where not known on the host)
            return [None if x is None else x[0] if type(x) is tuple else get_value(x) for x in ins]

        sigs = self._sigs
        if sigs is None:
            sigs = self._sigs = [_infer_signature(n) for n, _, _, _ in prog]
        memo = self._infer_memo
        if len(memo) > _INFER_MEMO_MAX:
            memo.clear()
        compiled = []
        infer = self.infer
        for (n, mode, ins, outs), sig in zip(prog, sigs):
            out_shapes = None
            if mode == 0 or (mode == 2 and probe):  # shapes by inference
                in_shapes_ = [None if x is None else x[0].shape if type(x) is tuple else shapes[x]
                              for x in ins]
                vals = None
                key = None
                if sig is not None:  # memoized by signature (values only where they are read)
                    if sig[1]:
                        vals = values(ins)
                        key = (sig[0], tuple(in_shapes_),
                               tuple([_value_key(vals[i]) for i in sig[1]]))
                    else:
                        key = (sig[0], tuple(in_shapes_))
                    out_shapes = memo.get(key)
                if out_shapes is None:
                    if vals is None:
                        vals = values(ins)
                    try:
                        out_shapes = tuple([tuple(map(int, sh)) for sh in infer(n, in_shapes_, vals)])
                    except NotImplementedError as e:  # no shape function, or a value not known
                        if mode == 0:
                            raise Unlowerable(n, str(e)) from None
                    except Exception:  # a probed host node inference cannot follow: run it
                        if mode == 0:
                            raise
                    else:
                        if key is not None:
                            memo[key] = out_shapes
            if out_shapes is None:  # a host node: run it
                for o, r in zip(outs, self.host_runner(n, shape_of, value_of)):
                    hostvals[o] = r
                    shapes[o] = r.shape
                continue
            for o, sh in zip(outs, out_shapes):
                shapes[o] = sh
            if mode == 0:
                compiled.append(n)
        return shapes, hostvals, compiled

    def _probe_unit_dims(self, env, shapes) -> dict[int, tuple[bool, ...]]:
        """Which size-1 dims stay 1 when the symbolic input dims change.

        Re-runs the (cheap, pure-Python) shape pass with every non-static input dim that is 1
        now set to 2. A dim that is 1 in both passes is a true broadcast dim; one that changes
        is a batch-like dim that happens to be 1 now. This keeps the generated text (and so the
        compiled code) the same for B=1 and B=8 without a full symbolic shape algebra.
        """
        seg = self.seg
        probe_in = {}
        for v in seg.inputs:
            real = env[id(v)].shape
            static = v.shape if (v.shape is not None and len(v.shape) == len(real)) else (None,) * len(real)
            probe_in[id(v)] = tuple(2 if n == 1 and not isinstance(st, int) else n
                                    for n, st in zip(real, static))
        ones = {key: tuple([n == 1 for n in real]) for key, real in shapes.items()}
        pattern = tuple(probe_in[id(v)] != env[id(v)].shape for v in seg.inputs)
        if not any(pattern):
            return ones  # no symbolic dim is 1: nothing is ambiguous, every 1 is a broadcast
        # A new shape whose values have their 1s exactly where those of an earlier probed
        # shape with the same ambiguous inputs had them (gpt2 at B=1: every S) gets that
        # probe's answer. Never wrong: a dim called a broadcast is 1 now, and one called
        # batch-like but 1 now is handled as a size; at worst a text is not shared.
        cached = self._unit_cache.get(pattern)
        if cached is not None and cached[0] == ones:
            return cached[1]
        try:
            probe, _, _ = self._shape_pass(probe_in, {id(v): env[id(v)] for v in seg.value_inputs},
                                           probe=True)
        except Exception:  # the model rejects the probe shapes: keep what earlier plans saw
            return self.memo.get("unit_dims", {})
        unit = {}
        for key, real in shapes.items():
            other = probe.get(key)
            if other is not None and len(other) == len(real):
                unit[key] = tuple([a == 1 and b == 1 for a, b in zip(real, other)])
        self._unit_cache[pattern] = (ones, unit)
        return unit

    def plan(self, env: dict[int, np.ndarray]) -> Plan:
        """The plan for the shapes (and host values) in ``env``: replayed when a recording of
        an earlier lowering applies (sizes only, ~0.1 ms), else lowered (and recorded).

        The garbage collector is paused meanwhile: a full collection over the process's heap
        (Numba's and onnx's objects) costs milliseconds, as much as the planning itself, and
        planning makes few cycles.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._plan(env)
        finally:
            if was_enabled:
                gc.enable()

    def _plan(self, env: dict[int, np.ndarray]) -> Plan:
        seg = self.seg
        if self.profiler is None and any(rec.family for rec in self.records):
            plan = family.plan(self, env)  # closed-form sizes and offsets: no shape pass
            if plan is not None:
                self.replays += 1
                return plan
        shapes, hostvals, compiled = self._shape_pass(
            {id(v): env[id(v)].shape for v in seg.inputs},
            {id(v): env[id(v)] for v in seg.value_inputs})
        unit = self._probe_unit_dims(env, shapes)
        if self.profiler is None:
            for rec in self.records:
                plan = rec.replay(unit, shapes, hostvals)
                if plan is not None:
                    self.replays += 1
                    if rec.family is not None and rec.family.stale_layout:
                        rec.family.set_layout(plan.memory)
                    return plan
        self.memo["unit_dims"] = unit
        tape = Tape()
        em, exports = self._lower(compiled, SymShapes(shapes, tape), GuardedHostvals(hostvals, tape))
        plan = self._finish(em, shapes, exports)
        if self.profiler is None:
            rec = Recording(self.seg, tape, em, plan, unit)
            rec.family = family.build(self, rec, shapes, hostvals)
            self.records.insert(0, rec)
            del self.records[MAX_RECORDS:]
        return plan

    def _lower(self, compiled: list[Node], shapes, hostvals):
        """Run the lowerings of the compiled nodes (on symbolic shapes while recording)."""
        seg = self.seg
        em = Emitter(seg, shapes, hostvals, self.consts, self.memo)
        em.threads = self.threads
        em.options = self.options
        steps = fused_steps(compiled, shapes, supports_elementwise, self.memo.get("unit_dims"),
                            seg.outputs)
        items = [item for item, _ in steps]
        last_use: dict[int, int] = {}
        for step, item in enumerate(items):
            for n in (item.nodes if isinstance(item, Group) else [item]):
                for v in n.all_inputs():
                    last_use[id(v)] = step
        for v in seg.outputs:
            last_use[id(v)] = len(items)
        em.last_use = last_use
        em.embed = concat_placements(items, shapes, em, self.placement)
        for item, outside in steps:
            em.notes[em.step] = _node_note(item.nodes if outside else [item])
            lower_step(em, item, outside, lower_group, LOWER)
            em.next_step()
        # segment outputs that are host values travel to the environment directly
        exports = {id(v): dict.get(hostvals, id(v)) for v in seg.outputs if id(v) in hostvals}
        outs_needed = seg.arg_outputs
        for v in outs_needed:  # an output nobody wrote (e.g. produced by a host node) is a bug
            if not em.produced(v):
                raise Unlowerable(seg.nodes[-1], f"segment output {v.name} not produced")
        return em, exports

    #: A :class:`jitort.profiling.Profiler` when compiled with ``profile=True``: then every
    #: step (one fused group or node) gets its own driver chunk, timed one by one. The
    #: non-profile text does not depend on this.
    profiler = None

    def _finish(self, em: Emitter, shapes, exports) -> Plan:
        seg = self.seg
        drv = assemble(em, seg, shapes, self.debug, profile=self.profiler is not None)
        d, o, pb, mem = layout(em.rows, [concrete(n) for n in em.dims],
                               [concrete(r.nbytes) for r in em.rows], [r.host for r in em.rows],
                               self.memo.get("orders"))
        promote(self.memo.setdefault("orders", []), mem.choice)
        check_views(drv.views, d, mem, pb, seg, shapes)
        out_shapes = [shapes[id(v)] for v in seg.arg_outputs]
        from ..kernels.cpu.blas import calls_blas
        uses_blas = any(calls_blas(m) for m in drv.libs)
        mod = drv.module
        parts = None
        call = mod.call
        if self.profiler is not None:
            parts = self.profiler.parts(self, [getattr(mod, f"part{i}") for i in range(len(drv.chunks))],
                                        drv.chunks, drv.chunk_steps, shapes)
            call = self.profiler.driver(parts)
        return Plan(call, d, o, pb, mem.workspace_bytes, mem, out_shapes, exports,
                    drv.kernel_names, mod.__file__, drv.new_modules, parts, uses_blas=uses_blas,
                    n_sites=drv.n_sites, views=drv.views, calls=drv.calls)

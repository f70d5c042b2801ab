"""Record once, replay per shape: symbolic sizes with guards for the segment planner.

Lowering a segment for a new input shape produces the same generated text (that is what makes
the compiled code reusable) but new numbers: the sizes in ``d`` and the byte sizes of the
workspace rows. Re-running every lowering to get those numbers costs ~10-20 ms on a
transformer. Instead, the first lowering runs on :class:`Sym` sizes: ints that remember how
they were computed from the *leaves* (the dims of the values' shapes, as the shape pass
computed them) on a :class:`Tape`. Every decision the lowering takes on a size (a comparison, a
truth test) is recorded as a *guard*; anything the tape cannot follow (``int()``, formatting a
size into text, a float) *pins* the value: a guard that it equals what it was. The tape then
compiles into one small Python function that, given the shapes of a new signature, checks all
guards and returns the sizes -- or ``None`` when a guard fails, in which case the segment is
lowered again (and recorded again). Pins make this conservative: replay never returns numbers a
full lowering would not have produced, it only declines more often than necessary.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
        "%": operator.mod}
_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}


class Tape:
    """The operations and guards recorded while one segment is lowered."""

    def __init__(self):
        self.ops: list[tuple] = []  # ("leaf", vid, k) | (op, a, b): a/b tape refs or ints
        self.index: dict[tuple, int] = {}  # hash-consing: one entry per distinct operation
        self.guards: dict[tuple, bool] = {}  # (cmp, a, b) -> outcome seen while recording
        self.ranks: dict[int, int] = {}  # value id -> rank of its shape (guarded too)
        self.hostvals: dict[int, bytes] = {}  # host values whose *contents* a lowering read

    def _entry(self, key: tuple) -> int:
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.ops)
            self.ops.append(key)
        return i

    def leaf_shape(self, vid: int, shape: tuple) -> tuple:
        """``shape`` (ints) as a tuple of leaf Syms of value ``vid``."""
        self.ranks[vid] = len(shape)
        return tuple(Sym(int(n), self._entry(("leaf", vid, k)), self) for k, n in enumerate(shape))

    def guard(self, cmp: str, a, b, outcome: bool) -> None:
        self.guards[(cmp, _ref(a), _ref(b))] = outcome

    def compile(self, outputs: list) -> Callable[[dict], list | None]:
        """A function ``f(shapes) -> [int, ...] | None`` evaluating ``outputs`` for new shapes.

        ``shapes`` maps value id -> shape tuple. Returns None when a rank or a guard differs
        from the recording (the caller then lowers for real).
        """
        refs = [_ref(x) for x in outputs]
        return self._function(refs, "[" + "{}, " * len(refs) + "]")

    def _function(self, refs: list, ret: str) -> Callable:
        lines, src = self.emit(refs, "t")
        lines = ["def replay(S):"] + lines + [f"    return {ret.format(*map(src, refs))}"]
        ns: dict[str, Any] = {}
        exec(compile("\n".join(lines) + "\n", "<jitort-replay>", "exec"), ns)
        return ns["replay"]

    def emit(self, refs: list, name: str, leaf: Callable | None = None, seen: dict | None = None):
        """The body of a function evaluating ``refs`` (its lines, indented, and ``src``: a
        ref's expression in them): every entry they or a guard need as ``<name><i> = ...``,
        then the guards (``return None`` when one differs).

        ``leaf(vid, k)``: the expression of a leaf (a name or a literal), used in its place;
        default: ``S[vid][k]``, after a check of ``S[vid]``'s rank (then ``return None`` too).
        Operations on literals are folded, identities (``x * 1``, ``x + 0``...) dropped and
        operations written once (``seen``: expression -> the name holding it, shared by the
        bodies of one function); guards decided here (on literals, or comparing an expression
        with itself) are left out (ValueError when one cannot hold)."""
        needed = set()
        todo = [r for r in refs if isinstance(r, _T)]
        for cmp, a, b in self.guards:
            todo += [x for x in (a, b) if isinstance(x, _T)]
        while todo:  # only the entries some output or guard depends on
            t = todo.pop()
            if t.i in needed:
                continue
            needed.add(t.i)
            op = self.ops[t.i]
            if op[0] != "leaf":
                todo += [x for x in op[1:] if isinstance(x, _T)]

        alias: dict[int, str] = {}  # entries written as another expression (no line of their own)
        seen = {} if seen is None else seen

        def src(r) -> str:
            return alias.get(r.i, f"{name}{r.i}") if isinstance(r, _T) else repr(r)

        lines = []
        if leaf is None:
            used_vids = sorted({self.ops[i][1] for i in needed if self.ops[i][0] == "leaf"})
            for n, vid in enumerate(used_vids):
                lines.append(f"    {name}s{n} = S[{vid}]")
                lines.append(f"    if len({name}s{n}) != {self.ranks[vid]}: return None")
            vname = {vid: f"{name}s{n}" for n, vid in enumerate(used_vids)}
        for i in sorted(needed):
            op = self.ops[i]
            if op[0] == "leaf":
                if leaf is None:
                    lines.append(f"    {name}{i} = {vname[op[1]]}[{op[2]}]")
                else:
                    alias[i] = leaf(op[1], op[2])
                continue
            a, b = src(op[1]), src(op[2])
            same = _identity(op[0], a, b)
            if same is not None:
                alias[i] = same
                continue
            if op[0] in "+*" and b < a:  # commutative: one spelling
                a, b = b, a
            expr = f"{a} {op[0]} {b}"
            if expr in seen:
                alias[i] = seen[expr]
            else:
                seen[expr] = f"{name}{i}"
                lines.append(f"    {name}{i} = {expr}")
        conds = []
        for (cmp, a, b), outcome in self.guards.items():
            a, b = src(a), src(b)
            if a == b or (is_literal(a) and is_literal(b)):
                if _CMP[cmp](*((0, 0) if a == b else (int(a), int(b)))) != outcome:
                    raise ValueError(f"guard {a} {cmp} {b} cannot hold")
                continue
            conds.append(f"({a} {cmp} {b}) is {not outcome}")
        conds = list(dict.fromkeys(conds))
        for k in range(0, len(conds), 32):
            lines.append(f"    if {' or '.join(conds[k:k + 32])}: return None")
        return lines, src


def _identity(op: str, a: str, b: str) -> str | None:
    """The expression of ``a <op> b`` when it needs no operation: both literals (folded),
    ``x * 1``, ``x * 0``, ``x + 0``, ``x - 0``, ``x // 1``, ``x - x``; None otherwise."""
    la, lb = is_literal(a), is_literal(b)
    if la and lb:
        return repr(_OPS[op](int(a), int(b)))
    if op == "*":
        if a == "1" or b == "1":
            return b if a == "1" else a
        if a == "0" or b == "0":
            return "0"
    elif op == "+":
        if a == "0" or b == "0":
            return b if a == "0" else a
    elif op == "-":
        if b == "0":
            return a
        if a == b:
            return "0"
    elif op == "//" and b == "1":
        return a
    return None


def is_literal(e: str) -> bool:
    """Whether the expression ``e`` is an integer literal."""
    return e.lstrip("-").isdigit()


class _T:
    """A reference to a tape entry inside recorded operations."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i

    def __eq__(self, other):
        return isinstance(other, _T) and other.i == self.i

    def __hash__(self):
        return hash(("t", self.i))


def _ref(x):
    return _T(x.i) if isinstance(x, Sym) else int(x)


def _src(r) -> str:
    return f"t{r.i}" if isinstance(r, _T) else repr(r)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) or type(x).__name__.startswith(("int", "uint"))


class Sym:
    """An int that records how it was computed (see the module docstring)."""

    __slots__ = ("v", "i", "tape")

    def __init__(self, v: int, i: int, tape: Tape):
        self.v, self.i, self.tape = v, i, tape

    # arithmetic ------------------------------------------------------------------------------
    def _bin(self, other, op: str, swap: bool = False):
        if isinstance(other, Sym):
            ov = other.v
        elif _is_int(other):
            ov = int(other)
        else:  # a float or something else the tape does not follow: pin and compute plainly
            return _OPS[op](other, self.pin()) if swap else _OPS[op](self.pin(), other)
        a, b = (other, self) if swap else (self, other)
        av, bv = (ov, self.v) if swap else (self.v, ov)
        v = _OPS[op](av, bv)
        # x*1, 1*x, x//1, x+0, 0+x, x-0 are x itself: keeps the tape small
        plain = bv if not swap else av
        if not isinstance(other, Sym) and ((plain == 1 and (op == "*" or (op == "//" and not swap)))
                                           or (plain == 0 and (op == "+" or (op == "-" and not swap)))):
            return self
        return Sym(v, self.tape._entry((op, _ref(a), _ref(b))), self.tape)

    def __add__(self, o): return self._bin(o, "+")  # noqa: E704
    def __radd__(self, o): return self._bin(o, "+", True)  # noqa: E704
    def __sub__(self, o): return self._bin(o, "-")  # noqa: E704
    def __rsub__(self, o): return self._bin(o, "-", True)  # noqa: E704
    def __mul__(self, o): return self._bin(o, "*")  # noqa: E704
    def __rmul__(self, o): return self._bin(o, "*", True)  # noqa: E704
    def __floordiv__(self, o): return self._bin(o, "//")  # noqa: E704
    def __rfloordiv__(self, o): return self._bin(o, "//", True)  # noqa: E704
    def __mod__(self, o): return self._bin(o, "%")  # noqa: E704
    def __rmod__(self, o): return self._bin(o, "%", True)  # noqa: E704

    def __neg__(self):
        return 0 - self

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self >= 0 else -self

    def __truediv__(self, o):
        return self.pin() / (o.pin() if isinstance(o, Sym) else o)

    def __rtruediv__(self, o):
        return o / self.pin()

    # comparisons: decisions become guards ---------------------------------------------------
    def _cmp(self, other, cmp: str) -> bool:
        if isinstance(other, Sym):
            ov = other.v
        elif _is_int(other):
            ov = int(other)
        else:
            return _CMP[cmp](self.pin(), other)
        outcome = _CMP[cmp](self.v, ov)
        self.tape.guard(cmp, self, other, outcome)
        return outcome

    def __eq__(self, o): return self._cmp(o, "==")  # noqa: E704
    def __ne__(self, o): return self._cmp(o, "!=")  # noqa: E704
    def __lt__(self, o): return self._cmp(o, "<")  # noqa: E704
    def __le__(self, o): return self._cmp(o, "<=")  # noqa: E704
    def __gt__(self, o): return self._cmp(o, ">")  # noqa: E704
    def __ge__(self, o): return self._cmp(o, ">=")  # noqa: E704

    def __bool__(self):
        return self._cmp(0, "!=")

    # leaving the tape: the value is pinned ---------------------------------------------------
    def pin(self) -> int:
        self.tape.guard("==", self, self.v, True)
        return self.v

    def __int__(self): return self.pin()  # noqa: E704
    def __index__(self): return self.pin()  # noqa: E704
    def __float__(self): return float(self.pin())  # noqa: E704
    def __hash__(self): return hash(self.pin())  # noqa: E704
    def __str__(self): return str(self.pin())  # noqa: E704
    def __format__(self, spec): return format(self.pin(), spec)  # noqa: E704

    def __repr__(self):  # for debugging only: does not pin
        return f"Sym({self.v}, t{self.i})"


def concrete(x) -> int:
    """The value of a size without recording anything (for the planner and ``d``)."""
    return x.v if isinstance(x, Sym) else int(x)


def same_shape(a: tuple, b: tuple) -> bool:
    """``a == b`` for shapes of Syms, guarding only what decides it.

    Tuple equality compares element by element and would record a guard for every equal
    dim before the first different one -- a batch dim that is 1 in both at B=1 would then
    make a B=2 replay fail although the answer (different) does not depend on it. Here a
    difference records one guard (that dim still differs); equality records them all.
    """
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if concrete(x) != concrete(y):
            return not (x != y)  # records the one guard: x != y
    return all([x == y for x, y in zip(a, b)])


class SymShapes(dict):
    """``shapes`` for a recording: value id -> tuple of leaf Syms, built on first access."""

    def __init__(self, shapes: dict, tape: Tape):
        super().__init__()
        self.real = shapes
        self.tape = tape

    def __missing__(self, vid):
        s = self.tape.leaf_shape(vid, self.real[vid])
        self[vid] = s
        return s

    def get(self, vid, default=None):
        if vid in self or vid in self.real:
            return self[vid]
        return default

    def __contains__(self, vid):
        return dict.__contains__(self, vid) or vid in self.real


class GuardedHostvals(dict):
    """Host values for a recording: a lowering that reads one's contents guards its bytes."""

    def __init__(self, hostvals: dict, tape: Tape):
        super().__init__(hostvals)
        self.tape = tape

    def __getitem__(self, vid):
        a = dict.__getitem__(self, vid)
        self.tape.hostvals[vid] = a.tobytes() if hasattr(a, "tobytes") else repr(a).encode()
        return a

    def get(self, vid, default=None):
        return self[vid] if dict.__contains__(self, vid) else default

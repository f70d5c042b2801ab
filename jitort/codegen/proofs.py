"""Proofs for the closed-form plans (jitort/codegen/family.py): polynomials of the symbolic
sizes, so that view checks holding for every size are dropped from the family function.
"""
from __future__ import annotations

from .symbolic import Tape, _T, is_literal

#: A polynomial of the sizes: {monomial (sorted tuple of atom names): coefficient}. Atoms are
#: the dims (leaves), the workspace offsets ``w<k>`` and what is no polynomial (``//``, ``%``),
#: each named by its expression in the generated function (one name, one value).
_MAX_TERMS = 64  # a product growing past this many terms stays an atom


def _accumulate(r: dict, m: tuple, c: int) -> None:
    """Add ``c`` times monomial ``m`` to polynomial ``r`` in place."""
    v = r.get(m, 0) + c
    if v:
        r[m] = v
    else:
        r.pop(m, None)


def _padd(p: dict, q: dict, sign: int = 1) -> dict:
    r = dict(p)
    for m, c in q.items():
        _accumulate(r, m, sign * c)
    return r


def _pmul(p: dict, q: dict) -> dict | None:
    if len(p) * len(q) > _MAX_TERMS:
        return None
    r: dict = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            _accumulate(r, tuple(sorted(m1 + m2)), c1 * c2)
    return r


def _const(c: int) -> dict:
    return {(): c} if c else {}


def _nonneg(p: dict, atoms: set) -> bool:
    """``p`` >= 0 for every size: its coefficients are, and its atoms are in ``atoms``."""
    return all(c >= 0 and all(x in atoms for x in m) for m, c in p.items())


def _product(polys) -> dict | None:
    """The product of ``polys``, None where it grows past _MAX_TERMS terms."""
    r: dict | None = {(): 1}
    for q in polys:
        r = _pmul(r, q)
        if r is None:
            return None
    return r


def substitute(p: dict, subst: dict) -> dict:
    """``p`` with every atom in ``subst`` replaced by its polynomial there (whose atoms are
    not in ``subst``); ``p`` as it is where a product grows too big."""
    if not subst or not any(x in subst for m in p for x in m):
        return p
    r: dict = {}
    for m, c in p.items():
        term: dict | None = _const(c)
        for x in m:
            term = _pmul(term, subst[x] if x in subst else {(x,): 1})
            if term is None:
                return p
        r = _padd(r, term)
    return r


def _as_atom(p: dict):
    """The atom ``p`` is (coefficient 1), else None."""
    if len(p) == 1:
        (m, c), = p.items()
        if c == 1 and len(m) == 1:
            return m[0]
    return None


def equalities(pairs: list) -> dict:
    """From pairs of polynomials known to be equal (the guards that hold), a substitution
    making them equal where one side is an atom: the atom -> the other side (one without
    it), the later name -> the earlier when both are atoms."""
    subst: dict = {}
    for a, b in pairs:
        a, b = substitute(a, subst), substitute(b, subst)
        if a == b:
            continue
        x, y = _as_atom(a), _as_atom(b)
        if x is not None and y is not None:
            x, y = sorted((x, y))
            new = {y: {(x,): 1}}
        elif x is not None and not any(x in m for m in b):
            new = {x: b}
        elif y is not None and not any(y in m for m in a):
            new = {y: a}
        else:
            continue
        subst = {k: substitute(v, new) for k, v in subst.items()}
        subst.update(new)
    return subst


class Polys:
    """The polynomial of each entry of ``tape`` (``src``: its expression in the generated
    function; ``leaf(vid, k)``: a leaf's polynomial, default an atom). ``atoms_nonneg``: the
    atoms known to be >= 0 (dims; ``//`` and ``%`` of such)."""

    def __init__(self, tape: Tape, src, leaf=None):
        self.tape, self.src, self.leaf = tape, src, leaf
        self.memo: dict = {}
        self.atoms_nonneg: set = set()

    def __call__(self, r) -> dict:
        if not hasattr(r, "i"):  # an int
            return _const(int(r))
        ops, memo = self.tape.ops, self.memo
        todo = [r.i]
        while todo:  # operands first (no recursion: tapes can be deep)
            i = todo[-1]
            if i in memo:
                todo.pop()
                continue
            op = ops[i]
            pending = [x.i for x in op[1:] if hasattr(x, "i") and x.i not in memo] \
                if op[0] != "leaf" else []
            if pending:
                todo += pending
                continue
            todo.pop()
            memo[i] = self._entry(i, op)
        return memo[r.i]

    def _atom(self, i: int, nonneg: bool) -> dict:
        e = self.src(_T(i))
        if is_literal(e):
            return _const(int(e))
        if nonneg:
            self.atoms_nonneg.add(e)
        return {(e,): 1}

    def _entry(self, i: int, op: tuple) -> dict:
        if op[0] == "leaf":
            return self.leaf(op[1], op[2]) if self.leaf is not None else self._atom(i, True)
        a, b = (self.memo[x.i] if hasattr(x, "i") else _const(int(x)) for x in op[1:])
        if op[0] == "+":
            return _padd(a, b)
        if op[0] == "-":
            return _padd(a, b, -1)
        if op[0] == "*":
            r = _pmul(a, b)
            if r is not None:
                return r
        # // and %: of operands >= 0 (a ZeroDivisionError declines the plan) they are >= 0
        return self._atom(i, op[0] in ("//", "%") and self.nonneg(a) and self.nonneg(b))

    def nonneg(self, p: dict) -> bool:
        return _nonneg(p, self.atoms_nonneg)


class Known:
    """What holds for every size a family computes, to leave view checks out: ``sizes`` the
    polynomials of the recording's outputs (its ``n_dims`` dims, then every row's byte size),
    ``shapes`` those of every value's dims (value id -> list), ``nonneg`` the atoms >= 0."""

    def __init__(self, rows: list, sizes: list, n_dims: int, shapes: dict, nonneg: set):
        self.shapes = shapes
        self.nonneg_atoms = set(nonneg)
        ws = {i: k for k, i in enumerate(i for i, r in enumerate(rows) if r.kind == "ws")}
        # the workspace offsets (maxima of offsets plus aligned sizes) are >= 0 when no
        # workspace row's size can be negative
        self.sizes_nonneg = w_nonneg = all(_nonneg(sizes[n_dims + i], self.nonneg_atoms)
                                           for i in ws)
        self.slot: list = list(sizes[:n_dims])  # every slot of d as a polynomial
        self.row_of_w: dict = {}  # a workspace row's offset atom -> its byte size
        for i, r in enumerate(rows):
            size = sizes[n_dims + i]
            if r.kind == "ws":
                w = f"w{ws[i]}"
                if w_nonneg:
                    self.nonneg_atoms.add(w)
                self.row_of_w[w] = size
                self.slot += [{(w,): 1}, _padd({(w,): 1}, size)]
            elif r.kind == "pb":
                self.slot += [{}, size]
            else:
                self.slot += [_const(int(x)) for x in r.fixed]

    def _sum(self, slots) -> dict:
        r: dict = {}
        for i in slots:
            r = _padd(r, self.slot[i])
        return r

    def _prod(self, slots) -> dict | None:
        return _product(self.slot[i] for i in slots)

    def nonneg(self, start) -> bool:
        """``sum(d[start]) >= 0`` for every size."""
        return _nonneg(self._sum(start), self.nonneg_atoms)

    def spans(self, start, end, count, item: int) -> bool:
        """``sum(d[end]) - sum(d[start]) == prod(d[count]) * item`` for every size."""
        c = self._prod(count)
        return c is not None and _padd(self._sum(end), self._sum(start), -1) == \
            {m: v * item for m, v in c.items()}

    def inside_ws(self, end) -> bool:
        """``sum(d[end]) <= ws``: the end of a workspace row (the layout puts each row's
        aligned size below the top)."""
        e = self._sum(end)
        ws = [m for m in e if len(m) == 1 and m[0] in self.row_of_w]
        return (len(ws) == 1 and e[ws[0]] == 1
                and _padd(e, {ws[0]: 1}, -1) == self.row_of_w[ws[0][0]])

    def fills(self, base: str, count, seg) -> bool:
        """A view of argument array ``base`` (``x<i>`` / ``y<i>``) with ``prod(d[count])``
        elements has its element count for every size."""
        vals = seg.arg_inputs if base[0] == "x" else seg.arg_outputs
        shape = self.shapes.get(id(vals[int(base[1:])]))
        c = self._prod(count)
        if shape is None or c is None:
            return False
        r = _product(shape)
        return r is not None and r == c

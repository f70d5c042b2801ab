"""Shape functions: Einsum."""
from __future__ import annotations

from .core import _bcast2, _fail, _str, register


@register("Einsum")
def _einsum(node, shapes, values):
    eq = _str(node.attrs.get("equation"), "").replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->")
    else:
        lhs, rhs = eq, None
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _fail(node, f"equation {eq!r} has {len(terms)} operands, got {len(shapes)}", shapes)
    dims: dict[str, int] = {}
    counts: dict[str, int] = {}
    ell = ()
    for term, s in zip(terms, shapes):
        if "..." in term:
            pre, post = term.split("...")
            ne = len(s) - len(pre) - len(post)
            if ne < 0:
                raise _fail(node, f"operand rank {len(s)} too small for {term!r}", shapes)
            e = tuple(s[len(pre):len(pre) + ne])
            r = _bcast2(ell, e)
            if r is None:
                raise _fail(node, "ellipsis dimensions are not broadcastable", shapes)
            ell = r
            letters = list(pre) + list(post)
            ldims = list(s[:len(pre)]) + list(s[len(pre) + ne:])
        else:
            if len(term) != len(s):
                raise _fail(node, f"operand rank {len(s)} does not match {term!r}", shapes)
            letters, ldims = list(term), list(s)
        for c, d in zip(letters, ldims):
            counts[c] = counts.get(c, 0) + 1
            old = dims.get(c)
            if old is None or old == 1:
                dims[c] = d
            elif d != old and d != 1:
                raise _fail(node, f"dimension {c!r} is {old} and {d}", shapes)
    if rhs is None:
        out_letters = "".join(sorted(c for c, n in counts.items() if n == 1))
        return [ell + tuple(dims[c] for c in out_letters)]
    if "..." in rhs:
        pre, post = rhs.split("...")
        return [tuple(dims[c] for c in pre) + ell + tuple(dims[c] for c in post)]
    return [tuple(dims[c] for c in rhs)]

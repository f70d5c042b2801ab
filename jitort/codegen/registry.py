"""The lowering registries: ``(domain, op_type) -> lowering`` and ``-> support predicate``.

Kept apart from the emitter (:mod:`.cpu`) so that the op-family lowerings
(:mod:`.lowerings`) import the decorator without importing the code generator, and the
code generator imports the lowerings without a circle.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..ir import Node

if TYPE_CHECKING:
    from .emitter import Emitter  # noqa: F401


class Unlowerable(Exception):
    """A lowering cannot handle this node for these shapes; the node falls back."""

    def __init__(self, node: Node, why: str):
        super().__init__(f"{node.label}: {why}")
        self.node = node


Lowering = Callable[["Emitter", Node], None]
LOWER: dict[tuple[str, str], Lowering] = {}
SUPPORT: dict[tuple[str, str], Callable[[Node], bool]] = {}


def registry(lower: dict, support: dict):
    """A ``@lowering(*ops, domain=, supports=)`` decorator filling ``lower``/``support``
    (one per backend: the CPU's here, :mod:`.cuda`'s there)."""
    def lowering(*ops: str, domain: str = "", supports: Callable[[Node], bool] | None = None):
        """Register a lowering for ``ops`` with a static support predicate (dtypes, attributes)."""
        def deco(fn):
            for op in ops:
                lower[(domain, op)] = fn
                support[(domain, op)] = supports or (lambda n: True)
            return fn
        return deco
    return lowering


lowering = registry(LOWER, SUPPORT)


def lower_step(em, item, outside, lower_group, table: dict, missing: str = "no lowering") -> None:
    """Lower one step of a segment: a fused elementwise group (``outside``: its values read
    after it) through ``lower_group``, else the node ``item`` through its lowering in ``table``
    (Unlowerable, saying ``missing``, when it has none)."""
    if outside:
        lower_group(em, item, outside)
        return
    fn = table.get((item.domain, item.op_type))
    if fn is None:
        raise Unlowerable(item, missing)
    fn(em, item)


class Backend:
    """A code generator's claim on nodes (``partition.assign`` asks :meth:`supports`): the
    elementwise ops its loop emitter takes (:meth:`elementwise`) and the ops of its lowering
    table ``support`` whose static predicate holds. Subclasses: the CPU's (:mod:`.cpu`), the
    CUDA one (:mod:`.cuda`)."""

    name = ""
    support: dict = SUPPORT

    def elementwise(self, node: Node) -> bool:
        return False

    def supports(self, node: Node) -> bool:
        if self.elementwise(node):
            return True
        pred = self.support.get((node.domain, node.op_type))
        return bool(pred and pred(node))

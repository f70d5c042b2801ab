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

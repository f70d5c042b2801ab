"""The fast-path registry: numpy implementations keyed by (domain, op_type, since_version).

A *fast path* is a builder ``build(node) -> run | None``. It reads the node's attributes once,
at plan time, and returns ``run(inputs) -> list[np.ndarray]``, a closure over plain numpy calls,
or ``None`` when the node uses a form it does not handle (the reference then runs it).

Invariants:

* A fast path returns exactly what ``onnx.reference`` returns (dtype and shape), or better
  where the reference is known wrong; when unsure it must not guess. It *defers* instead:
  returning ``None`` at build time, raising :class:`Defer` at run time, or raising any other
  exception (the runner then retries the node on the reference and reports *its* error).
* Registrations for the same (domain, op_type) are ordered by ``since``; a node uses the one
  with the greatest ``since <= node.since_version`` and below the next registration's
  ``since`` (so a newer opset form never reaches an older builder unless registered).
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Callable

import numpy as np

Run = Callable[[list], list]
Builder = Callable[..., "Run | None"]

_REGISTRY: dict[tuple[str, str], list[tuple[int, Builder]]] = {}


class Defer(Exception):
    """Raised by a fast path at run time: 'these inputs are not mine, ask the reference'."""


def fast(op_type: str | tuple[str, ...], since: int = 1, domain: str = ""):
    """Register a fast-path builder for ``op_type`` (or several) from opset ``since`` on."""
    names = (op_type,) if isinstance(op_type, str) else op_type

    def deco(builder: Builder) -> Builder:
        for name in names:
            entries = _REGISTRY.setdefault((domain, name), [])
            entries.append((since, builder))
            entries.sort(key=lambda e: e[0])
        return builder

    return deco


def lookup(domain: str, op_type: str, since_version: int) -> Builder | None:
    """The builder registered for this opset version of the op, or None."""
    entries = _REGISTRY.get((domain, op_type))
    if not entries or since_version <= 0:
        return None
    i = bisect_right([e[0] for e in entries], since_version)
    return entries[i - 1][1] if i else None


def registered_ops() -> list[tuple[str, str, int]]:
    """(domain, op_type, since) of every registration, for docs and tests."""
    return sorted((d, op, s) for (d, op), es in _REGISTRY.items() for s, _ in es)


# ---- helpers shared by the op files ------------------------------------------------------------

# Dtypes numpy computes natively and exactly like onnx.reference, with their kind. ml_dtypes
# types (bfloat16, float8*, int4...) are absent on purpose: some claim kind 'f' or 'i', but
# their rounding and saturation rules belong to the reference.
STD_KIND: dict[np.dtype, str] = {np.dtype(t): np.dtype(t).kind for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64)}


def kind(dt: np.dtype) -> str:
    """'b', 'i', 'u' or 'f' for a standard dtype, '-' for anything else."""
    return STD_KIND.get(dt, "-")


def std_or_defer(*arrays) -> None:
    for a in arrays:
        if a.dtype not in STD_KIND:
            raise Defer

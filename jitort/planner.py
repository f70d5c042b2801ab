"""Static memory planner: one workspace, offsets by liveness.

Input: buffers with a size in bytes and a lifetime ``[begin, end]`` (inclusive step indices of
the schedule: defined at ``begin``, last read at ``end``). Output: an offset per buffer.

Invariants (checked by :func:`check_plan`, property-tested):

* ``begin <= end`` for every buffer;
* every offset is a multiple of ``ALIGN`` (64 bytes: cache line and AVX-512 friendly);
* no two buffers whose lifetimes intersect overlap in memory;
* ``workspace_bytes >= lower_bound`` where the lower bound is the largest total of aligned sizes
  live at any one step (no plan can do better).

Algorithm: greedy by size (largest first), each buffer placed at the lowest offset that does not
collide with an already placed buffer of intersecting lifetime (the "greedy by size" offset
calculation TFLite uses; within a few percent of the bound on real networks).
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass
class Buffer:
    key: object
    size: int
    begin: int
    end: int
    offset: int = -1


@dataclass
class MemoryPlan:
    buffers: list[Buffer]
    workspace_bytes: int
    lower_bound: int

    @property
    def ratio(self) -> float:
        return self.workspace_bytes / self.lower_bound if self.lower_bound else 1.0


def lower_bound(buffers: list[Buffer]) -> int:
    """Max over steps of the aligned bytes live at that step."""
    events: dict[int, int] = {}
    for b in buffers:
        if b.size <= 0:
            continue
        events[b.begin] = events.get(b.begin, 0) + align(b.size)
        events[b.end + 1] = events.get(b.end + 1, 0) - align(b.size)
    live = best = 0
    for t in sorted(events):
        live += events[t]
        best = max(best, live)
    return best


def plan_memory(buffers: list[Buffer]) -> MemoryPlan:
    """Assign ``offset`` to every buffer in place and return the plan."""
    placed: list[Buffer] = []
    for b in sorted(buffers, key=lambda b: (-align(b.size), b.begin, b.end)):
        if b.begin > b.end:
            raise ValueError(f"buffer {b.key!r} ends before it begins")
        size = align(b.size)
        if size == 0:
            b.offset = 0
            continue
        clashes = sorted((p.offset, p.offset + align(p.size)) for p in placed
                         if p.begin <= b.end and b.begin <= p.end and p.size > 0)
        offset = 0
        for lo, hi in clashes:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        b.offset = offset
        placed.append(b)
    total = max((b.offset + align(b.size) for b in buffers), default=0)
    return MemoryPlan(buffers, total, lower_bound(buffers))


def check_plan(plan: MemoryPlan) -> None:
    """Raise AssertionError if an invariant of the module docstring is violated."""
    bufs = [b for b in plan.buffers if b.size > 0]
    for b in bufs:
        assert b.begin <= b.end, f"{b.key}: begin > end"
        assert b.offset % ALIGN == 0, f"{b.key}: offset {b.offset} not aligned"
        assert b.offset + b.size <= plan.workspace_bytes, f"{b.key}: outside the workspace"
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if a.begin <= b.end and b.begin <= a.end:
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset, \
                    f"{a.key} and {b.key} are live together and overlap"
    assert plan.workspace_bytes >= plan.lower_bound

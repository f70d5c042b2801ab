"""Static memory planner: one workspace, offsets by liveness.

Input: buffers with a size in bytes and a lifetime ``[begin, end]`` (inclusive step indices of
the schedule: defined at ``begin``, last read at ``end``). Output: an offset per buffer.

Invariants (checked by :func:`check_plan`, property-tested):

* ``begin <= end`` for every buffer;
* every offset is a multiple of ``ALIGN`` (64 bytes: cache line and AVX-512 friendly);
* no two buffers whose lifetimes intersect overlap in memory;
* ``workspace_bytes >= lower_bound`` where the lower bound is the largest total of aligned sizes
  live at any one step (no plan can do better).

Algorithm: greedy placement (each buffer at the lowest offset that does not collide with an
already placed buffer of intersecting lifetime, TFLite's "greedy by size" offset calculation),
run for a few orders, keeping the best, then (when no order reaches the lower bound) a short
repair search that moves the buffers ending at the top of the workspace to the front.
"""
from __future__ import annotations

from bisect import insort
from dataclasses import dataclass, field

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
    labels: dict = field(default_factory=dict)  # buffer key -> what it holds (for reports)
    order: str = ""  # the name (in ORDERS) of the placement order that made this plan
    promoted: tuple = ()  # buffer positions the repair search placed first (see plan_memory)

    @property
    def choice(self):
        """The order as ``plan_memory(prefer=...)`` takes it: the name, or (name, promoted)."""
        return (self.order, self.promoted) if self.promoted else self.order

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


#: Orders tried by :func:`plan_memory`; the smallest workspace wins.
ORDERS = {
    "size": lambda b: (-align(b.size), b.begin, b.end),
    "area": lambda b: (-align(b.size) * (b.end - b.begin + 1), b.begin),
    "lifetime": lambda b: (-(b.end - b.begin), -align(b.size), b.begin),
    "last_end": lambda b: (-b.end, -align(b.size)),
}


#: Rounds of :func:`plan_memory`'s repair search (each one greedy run).
MAX_PROMOTIONS = 4


def plan_memory(buffers: list[Buffer], prefer: list | None = None) -> MemoryPlan:
    """Assign ``offset`` to every buffer in place and return the plan.

    Greedy placement is run with each order in ``ORDERS`` (largest first, largest area first,
    longest-lived first, latest end first) and the smallest workspace is kept: no single order
    is best on every network, and each run is cheap (a few hundred buffers). The search stops
    at the first order that reaches the lower bound.

    When none does, a repair search starts from the best order: the buffers that end at the
    top of the workspace are moved to the front of the order and placed again, up to
    ``MAX_PROMOTIONS`` rounds (when every preferred choice misses, the first plain order among
    them is repaired before the other orders are tried). The typical miss is a small buffer
    that lives across the whole schedule (gpt2's attention mask): every size-based order
    places it last, above everything it overlaps in time; placed first, at offset 0, it costs
    nothing.

    ``prefer``: orders to try first, most recent first -- names of ``ORDERS`` or the
    ``MemoryPlan.choice`` of an earlier plan of the same buffers (a name and the promoted
    buffer positions). A segment's new shapes usually make one run instead of four.
    """
    for b in buffers:
        if b.begin > b.end:
            raise ValueError(f"buffer {b.key!r} ends before it begins")
    bound = lower_bound(buffers)
    preferred = _preferred(prefer, len(buffers))
    search = _Search(buffers, bound)
    done = any(search.run(c) for c in preferred)
    first = next((c for c in preferred if c in search.rank), None)
    if not done and first is not None and buffers:
        # the plain order that won the last shapes missed, and so did every other preferred
        # choice: repair it before trying the other orders (gpt2's first S=128 shape: 3
        # runs instead of 6)
        search.repair(*search.runs[first], first)
        done = search.best[0] <= bound
    if not done:
        done = any(search.run(c) for c in search.plain if c not in search.runs)
    if search.best[0] > bound and buffers:
        # from the best plain order (ties by rank): the same start whatever was preferred, so
        # a preference never makes the plan worse than plan_memory(buffers) would
        start = min(search.runs, key=lambda c: (search.runs[c][0], search.rank[c]))
        if start not in search.repaired:
            search.repair(*search.runs[start], start)
    total, _, offsets, (name, promoted) = search.best
    for b, off in offsets:
        b.offset = off
    return MemoryPlan(buffers, total, bound, order=name, promoted=promoted)


def _preferred(prefer: list | None, n: int) -> dict:
    """The choices of ``prefer`` as ``(name, promoted)`` keys, in the order given, each once;
    names not in ``ORDERS`` and positions outside ``n`` buffers are dropped."""
    preferred = {}
    for c in prefer or ():
        name, promoted = (c, ()) if isinstance(c, str) else c
        if name in ORDERS and all(0 <= i < n for i in promoted):
            preferred[(name, tuple(dict.fromkeys(promoted)))] = None
    return preferred


class _Search:
    """One :func:`plan_memory` call's greedy runs: a choice is ``(order name, promoted
    positions)``; ``best`` is the smallest workspace so far."""

    def __init__(self, buffers: list[Buffer], bound: int):
        self.buffers, self.bound = buffers, bound
        self.plain = [(n, ()) for n in ORDERS]
        self.rank = {c: i for i, c in enumerate(self.plain)}
        self.index = {id(b): i for i, b in enumerate(buffers)}
        # (total, tie-break, offsets, choice): ties go to ORDERS' order, not the try order
        self.best = None
        self.runs: dict = {}  # plain order -> (total, offsets)
        self.repaired: set = set()

    def place(self, choice):
        """One greedy run in the order ``choice``; its (workspace, offsets)."""
        offsets = _greedy(_ordered(self.buffers, *choice))
        total = max((off + align(b.size) for b, off in offsets), default=0)
        cand = (total, self.rank.get(choice, -1), offsets, choice)
        if self.best is None or cand[:2] < self.best[:2]:
            self.best = cand
        return total, offsets

    def repair(self, total, offsets, choice) -> None:
        """Promote the buffers ending at the top, MAX_PROMOTIONS rounds at most."""
        self.repaired.add(choice)
        name, promoted = choice
        for _ in range(MAX_PROMOTIONS):
            top = [self.index[id(b)] for b, off in offsets
                   if off + align(b.size) == total and self.index[id(b)] not in promoted]
            if not top:
                return
            promoted = promoted + tuple(sorted(top))
            total, offsets = self.place((name, promoted))
            if total <= self.bound:
                return

    def run(self, choice) -> bool:
        """One greedy run; whether it reached the lower bound (then no order can do better)."""
        total, offsets = self.place(choice)
        if choice in self.rank:
            self.runs[choice] = (total, offsets)
        return total <= self.bound


def _ordered(buffers: list[Buffer], name: str, promoted: tuple = ()) -> list[Buffer]:
    """The placement order: the ``promoted`` positions first (in that order), then the rest
    sorted by ``ORDERS[name]``."""
    if not promoted:
        return sorted(buffers, key=ORDERS[name])
    first = set(promoted)
    return [buffers[i] for i in promoted] + sorted(
        (b for i, b in enumerate(buffers) if i not in first), key=ORDERS[name])


def _greedy(order: list[Buffer]) -> list[tuple[Buffer, int]]:
    """Place each buffer at the lowest offset free during its whole lifetime."""
    placed: list[tuple[Buffer, int]] = []
    live: list[tuple[int, int, int, int]] = []  # (offset, offset + aligned size, begin, end), by offset
    for b in order:
        size = align(b.size)
        if size == 0:
            placed.append((b, 0))
            continue
        bb, be = b.begin, b.end
        offset = 0
        for lo, hi, pb, pe in live:  # by offset: the first gap that fits wins
            if pb > be or bb > pe:
                continue  # not live at the same time
            if offset + size <= lo:
                break
            if hi > offset:
                offset = hi
        placed.append((b, offset))
        insort(live, (offset, offset + size, bb, be))
    return placed


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

"""The static memory planner: invariants on synthetic and random lifetimes."""
from hypothesis import given, settings
from hypothesis import strategies as st

from jitort.planner import ALIGN, ORDERS, Buffer, _greedy, align, check_plan, lower_bound, plan_memory


def test_disjoint_lifetimes_share_memory():
    plan = plan_memory([Buffer("a", 1000, 0, 1), Buffer("b", 500, 2, 3), Buffer("c", 1000, 4, 5)])
    check_plan(plan)
    assert plan.workspace_bytes == 1024 == plan.lower_bound


def test_overlapping_lifetimes_do_not_share():
    plan = plan_memory([Buffer("a", 64, 0, 2), Buffer("b", 64, 1, 3)])
    check_plan(plan)
    assert {b.offset for b in plan.buffers} == {0, 64}


def test_empty_and_zero_sized():
    assert plan_memory([]).workspace_bytes == 0
    plan = plan_memory([Buffer("z", 0, 0, 0), Buffer("a", 10, 0, 0)])
    check_plan(plan)
    assert plan.workspace_bytes == ALIGN


lifetimes = st.lists(
    st.tuples(st.integers(0, 1 << 20), st.integers(0, 60), st.integers(0, 20)),
    min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(lifetimes)
def test_random_lifetimes_satisfy_invariants(specs):
    bufs = [Buffer(i, size, b, b + length) for i, (size, b, length) in enumerate(specs)]
    plan = plan_memory(bufs)
    check_plan(plan)  # no two live buffers overlap, offsets aligned, >= lower bound
    assert plan.lower_bound == lower_bound(bufs)
    assert all(b.offset % ALIGN == 0 for b in plan.buffers)


@settings(max_examples=200, deadline=None)
@given(lifetimes, st.sampled_from([[n] for n in sorted(ORDERS)]
                                   + [None, ["unknown"], ["last_end", "area", "last_end"]]))
def test_preferred_order_is_tried_first_and_never_worse(specs, prefer):
    bufs = [Buffer(i, size, b, b + length) for i, (size, b, length) in enumerate(specs)]
    plain = plan_memory(bufs).workspace_bytes
    bound = lower_bound(bufs)
    plan = plan_memory(bufs, prefer)
    check_plan(plan)
    assert plan.order in ORDERS
    # the search stops at the first order reaching the bound, else tries all four and repairs
    # the best of them (as without a preference): a preference changes the work, and may
    # find a smaller plan (its own repair), never a larger one
    assert bound <= plan.workspace_bytes <= plain
    first = prefer or [None]
    if first[0] in ORDERS and plan.workspace_bytes == bound:
        fresh = [Buffer(b.key, b.size, b.begin, b.end) for b in bufs]
        only = _greedy(sorted(fresh, key=ORDERS[first[0]]))
        if max(off + align(b.size) for b, off in only) == bound:
            assert plan.order == first[0]


def _greedy_total(bufs, name):
    fresh = [Buffer(b.key, b.size, b.begin, b.end) for b in bufs]
    return max(off + align(b.size) for b, off in _greedy(sorted(fresh, key=ORDERS[name])))


def test_repair_search_reaches_the_bound_every_order_misses():
    specs = [(256, 0, 2), (128, 2, 4), (128, 3, 4), (192, 4, 5)]
    bufs = [Buffer(i, size, b, e) for i, (size, b, e) in enumerate(specs)]
    bound = lower_bound(bufs)
    assert bound == 448
    assert min(_greedy_total(bufs, name) for name in ORDERS) > bound  # every order misses
    plan = plan_memory(bufs)
    check_plan(plan)
    assert plan.workspace_bytes == bound
    assert plan.promoted == (2,) and plan.choice == (plan.order, (2,))
    # the choice, preferred for the same buffers, makes that plan again in one run
    again = plan_memory([Buffer(i, size, b, e) for i, (size, b, e) in enumerate(specs)],
                        [plan.choice])
    assert again.workspace_bytes == bound and again.choice == plan.choice


@settings(max_examples=200, deadline=None)
@given(lifetimes, st.lists(st.integers(0, 70), max_size=4))
def test_repair_search_is_never_worse_and_its_choice_replays(specs, promoted):
    bufs = [Buffer(i, size, b, b + length) for i, (size, b, length) in enumerate(specs)]
    plan = plan_memory(bufs)
    check_plan(plan)
    assert plan.workspace_bytes <= min(_greedy_total(bufs, name) for name in ORDERS)
    assert all(0 <= i < len(bufs) for i in plan.promoted)
    # a stale or out-of-range preference (another segment's positions) is ignored or harmless
    other = plan_memory([Buffer(b.key, b.size, b.begin, b.end) for b in bufs],
                        [("size", tuple(promoted)), plan.choice])
    check_plan(other)
    assert other.workspace_bytes <= plan.workspace_bytes


def test_a_preferred_choice_with_repeated_positions_places_each_buffer_once():
    def plan(prefer):
        bufs = [Buffer(i, 64 * (i + 1), i % 3, i % 3 + 2) for i in range(6)]
        p = plan_memory(bufs, prefer)
        check_plan(p)
        return [b.offset for b in p.buffers], p.workspace_bytes, p.choice

    assert plan([("size", (3, 3, 1))]) == plan([("size", (3, 1))])


def test_a_preferred_order_that_misses_is_repaired_before_the_others(monkeypatch):
    from jitort import planner
    specs = [(256, 0, 2), (128, 2, 4), (128, 3, 4), (192, 4, 5)]
    runs = []
    real = planner._greedy
    monkeypatch.setattr(planner, "_greedy", lambda order: runs.append(1) or real(order))
    plain = plan_memory([Buffer(i, *s) for i, s in enumerate(specs)])
    assert plain.workspace_bytes == plain.lower_bound and len(runs) == len(ORDERS) + 1
    runs.clear()
    again = plan_memory([Buffer(i, *s) for i, s in enumerate(specs)], [plain.order])
    assert again.workspace_bytes == again.lower_bound
    assert len(runs) == 2  # the preferred order, then one promotion round: no other order

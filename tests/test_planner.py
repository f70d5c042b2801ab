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
    # the search stops at the first order reaching the bound, else keeps the best of all four:
    # the preference changes the work, never the size
    assert plan.workspace_bytes == plain
    first = prefer or [None]
    if first[0] in ORDERS and plan.workspace_bytes == bound:
        fresh = [Buffer(b.key, b.size, b.begin, b.end) for b in bufs]
        only = _greedy(sorted(fresh, key=ORDERS[first[0]]))
        if max(off + align(b.size) for b, off in only) == bound:
            assert plan.order == first[0]

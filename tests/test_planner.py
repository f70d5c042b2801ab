"""The static memory planner: invariants on synthetic and random lifetimes."""
from hypothesis import given, settings
from hypothesis import strategies as st

from jitort.planner import ALIGN, Buffer, check_plan, lower_bound, plan_memory


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

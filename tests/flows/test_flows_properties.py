"""Properties of the simulator on random small problems and random policies (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.flows import Flow, LoadMap, Plan, PolicyEntry, Pool, Problem, Step, simulate

MAP = LoadMap(points=((0.0, 0.0), (0.8, 0.8), (1.0, 0.9), (100.0, 0.9)))


@st.composite
def problem_and_plan(draw: st.DrawFn) -> tuple[Problem, Plan]:
    n_pools = draw(st.integers(1, 3))
    epochs = draw(st.integers(1, 3))
    pools = tuple(
        Pool(
            name=f"p{i}",
            capacity=tuple(draw(st.sampled_from([0.0, 2.0, 5.0, 10.0])) for _ in range(epochs)),
            load_map=MAP,
        )
        for i in range(n_pools)
    )
    flows = []
    for j in range(draw(st.integers(1, 4))):
        steps = tuple(
            Step(
                name=f"s{k}",
                run_time=draw(st.sampled_from([0.5, 1.0, 2.0])),
                pools=tuple(draw(st.sets(st.sampled_from([p.name for p in pools]), min_size=1))),
            )
            for k in range(draw(st.integers(1, 3)))
        )
        flows.append(
            Flow(
                name=f"f{j}",
                steps=steps,
                lifespan=draw(st.sampled_from([10.0, 60.0, 100.0, 1000.0])),
                utility=draw(st.sampled_from([1.0, 2.0, 3.0])),
                arrival_rate=tuple(draw(st.sampled_from([0.0, 1.0, 4.0, 9.0])) for _ in range(epochs)),
            )
        )
    entries = []
    for e in range(epochs):
        for f in flows:
            for a in range(e + 1):
                for s, stp in enumerate(f.steps):
                    weights = [draw(st.integers(0, 3)) for _ in stp.pools]
                    bl = draw(st.integers(0, 2)) if e < epochs - 1 or draw(st.booleans()) else 0
                    if sum(weights) + bl == 0:
                        weights[0] = 1
                    tot = sum(weights) + bl
                    entries.append(
                        PolicyEntry(
                            epoch=e,
                            flow=f.name,
                            cohort=a,
                            step=s,
                            pools={p: w / tot for p, w in zip(stp.pools, weights) if w},
                            backlog=bl / tot,
                        )
                    )
    prob = Problem(pools=pools, flows=tuple(flows), epochs=epochs, epoch_length=60.0)
    return prob, Plan(entries=tuple(entries))


@settings(max_examples=60, deadline=None)
@given(problem_and_plan())
def test_every_arrived_job_is_completed_or_dropped(data: tuple[Problem, Plan]) -> None:
    prob, plan = data
    r = simulate(prob, plan)
    arrived = sum(s.arrived for s in r.flows)
    done = sum(s.completed + s.dropped for s in r.flows)
    assert abs(arrived - done) <= 1e-6 * max(1.0, arrived)
    assert all(s.completed >= -1e-9 and s.dropped >= -1e-9 and s.held >= -1e-9 for s in r.flows)
    assert r.score >= 0


@settings(max_examples=60, deadline=None)
@given(problem_and_plan())
def test_pools_never_serve_more_than_the_map_allows(data: tuple[Problem, Plan]) -> None:
    prob, plan = data
    r = simulate(prob, plan)
    for p in r.pools:
        assert p.throughput <= p.load + 1e-9
        assert p.throughput <= MAP.max_throughput * p.capacity + 1e-9
        if p.capacity == 0:
            assert p.jobs_out == 0

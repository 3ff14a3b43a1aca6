"""Admit-on-arrival over every flow built per class of flows (issue 50, :func:`soda_optimizer.flows.nearby.admit_classes`):
the same keys and decisions as :func:`soda_optimizer.flows.fastsim.admit_arrays` built flow by flow."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_flows_complete import instances

from soda_optimizer.flows import Problem, Waiting
from soda_optimizer.flows import fixtures as fx
from soda_optimizer.flows.compiled import compile_problem
from soda_optimizer.flows.fastsim import admit_arrays, simulate_arrays
from soda_optimizer.flows.nearby import admit_classes


def _same(prob: Problem) -> None:
    cp = compile_problem(prob)
    want, got = admit_arrays(cp), admit_classes(cp)
    assert got.to_policy() == want.to_policy()
    assert np.array_equal(got.codes, want.codes)


@st.composite
def copies(draw: st.DrawFn) -> Problem:
    """A random problem whose flows are copied with lifespans nudged (some across an epoch boundary) and some
    arrival rates zeroed, and perhaps jobs waiting at time 0."""
    prob = draw(instances())
    flows = []
    for f in prob.flows:
        for k in range(draw(st.integers(1, 4))):
            rates = tuple(r if draw(st.booleans()) else 0.0 for r in f.arrival_rate)
            flows.append(f.model_copy(update={"name": f"{f.name}-{k}", "arrival_rate": rates,
                                              "lifespan": f.lifespan + draw(st.sampled_from([0.0, 0.5, 30.0, 59.0, 61.0, 120.0]))}))
    waiting = ()
    if draw(st.booleans()):
        f = flows[0]
        waiting = (Waiting(flow=f.name, step=0, pool=None, jobs=3.0, min_remaining=5.0, max_remaining=50.0),)
    return Problem(pools=prob.pools, flows=tuple(flows), epochs=prob.epochs, epoch_length=prob.epoch_length,
                   waiting=waiting)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(copies())
def test_built_per_class_it_equals_admit_on_arrival_built_per_flow(prob: Problem) -> None:
    _same(prob)


def test_on_the_papers_flows_copied_and_nudged() -> None:
    p = fx.scaled(fx.baseline(), flows=5)
    p = p.model_copy(update={"flows": tuple(f.model_copy(update={"lifespan": f.lifespan + 0.7 * i})
                                            for i, f in enumerate(p.flows))})
    _same(p)
    cp = compile_problem(p)
    assert simulate_arrays(cp, admit_classes(cp), detail=False).score == simulate_arrays(cp, admit_arrays(cp), detail=False).score

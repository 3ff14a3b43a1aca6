"""The plan's entries of one epoch built alone (:meth:`PlanResult.entries_at`, issue 50): what the operator applies
is epoch 0, and at 20,016 flows the whole plan is 1.9 million entries. Oracle: the whole plan's entries of that
epoch, in its order, on random instances (flows copied to be grouped exactly or near-identically, refused flows)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from test_flows_complete import SETTINGS, instances

from soda_optimizer.flows import PlannerParams, Problem, plan_flows


@SETTINGS
@given(instances(), st.sampled_from(["alone", "same", "near"]), st.booleans())
def test_entries_of_one_epoch_are_the_plans_entries_of_that_epoch(prob: Problem, copies: str, at_scale: bool) -> None:
    if copies != "alone":
        nudge = 0.001 if copies == "near" else 0.0
        extra = tuple(f.model_copy(update={"name": f"{f.name}-copy", "lifespan": f.lifespan * (1.0 + nudge)})
                      for f in prob.flows)
        prob = prob.model_copy(update={"flows": prob.flows + extra})
    params = PlannerParams(evaluations=4, seed=0, group_above=1 if at_scale else 0)
    res = plan_flows(prob, params)
    alone = {e: res.entries_at(e) for e in range(prob.epochs)}  # before the whole plan is built
    for e in range(prob.epochs):
        assert alone[e] == tuple(x for x in res.plan.entries if x.epoch == e)

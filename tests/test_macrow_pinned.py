"""macroW's default over-allocation (constraint 19, phi = Policy.overallocation) is capped by what a
unit's matching nodes offer: a PE pinned to one node by its node selector gets that node as
candidate set when its goal fits the node, instead of being rejected because phi x goal does not
(found on the real node: a goal of 1,000 mips on a 1,200-mips node needed 1,500)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.model import PE, Job, Node, Policy, PrimalInput, Scenario, Template
from soda_optimizer.plan import StageReport
from soda_optimizer.soda import macrow
from soda_optimizer.soda.stages import MacroQResult


def pinned(goal: float, node_mips: float, phi: float, fairness: float = 0.0) -> tuple[Scenario, MacroQResult]:
    pe = PE(name="p", kind="source", node_selector={"pin": "yes"}, fairness=fairness)
    t = Template(name="t", pes=(pe,), primal_inputs=(PrimalInput(pe="p", rate=1),))
    nodes = (Node(name="small", mips=node_mips, rack="r0", labels={"pin": "yes"}),
             Node(name="big1", mips=8000.0, rack="r0"), Node(name="big2", mips=8000.0, rack="r1"))
    s = Scenario(nodes=nodes, templates=(t,), jobs=(Job(name="j", templates=("t",)),), policy=Policy(overallocation=phi))
    mq = MacroQResult((), {"j": "t"}, {"j:p": goal}, {}, (), 0.0, StageReport(stage="macroq", seconds=0, status="optimal"))
    return s, mq


@settings(max_examples=30, deadline=None)
@given(node_mips=st.sampled_from([500.0, 1200.0, 2000.0]), share=st.floats(0.1, 1.0), phi=st.sampled_from([1.0, 1.5, 3.0]))
def test_a_pinned_pe_whose_goal_fits_its_node_is_placed_there(node_mips, share, phi):
    s, mq = pinned(share * node_mips, node_mips, phi)
    res = macrow.solve(s, mq, deadline_s=1)
    assert res.violated is None, res.violated
    assert set(res.candidates["j:p"]) == {"small"}
    assert macrow.check(s, mq, res.candidates) == []


def test_a_goal_beyond_the_node_is_still_refused():
    s, mq = pinned(1500.0, 1200.0, 1.5)
    assert macrow.solve(s, mq, deadline_s=1).violated is not None


def test_an_explicit_fairness_is_not_capped():
    """A PE that sets its own phi asked for it: 1.5 x 1000 on a 1,200-mips node stays infeasible."""
    s, mq = pinned(1000.0, 1200.0, 1.0, fairness=1.5)
    assert macrow.solve(s, mq, deadline_s=1).violated is not None


if __name__ == "__main__":
    pytest.main([__file__])

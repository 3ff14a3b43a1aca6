"""The pipeline guard (soda_optimizer.guard) and the screen (soda_optimizer.screen).

Oracle for the guard: a fault injected into the real pipeline for a known set of culprit jobs; the
guard must set aside exactly those and return the plan the pipeline makes without them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer import guard, pipeline, screen, workloads
from soda_optimizer.model import PE, Job, Policy, PrimalInput, ResourceFunction, Scenario, Sink, Stream, Template

POLICY = Policy(macroq_deadline_s=30, macrow_deadline_s=30, unit_mips=200, placement="rr")  # no deadline bites: deterministic
SCEN = workloads.scenario(workloads.dac(3), workloads.nodes(4), POLICY)
JOBS = [j.name for j in SCEN.jobs]


def decisions(plan):
    return {d.job: (d.admitted, d.template, round(d.mips, 3)) for d in plan.jobs}


def faulty(culprits: set[str], kind: str, pair: bool = False):
    """The real pipeline, failing whenever a culprit (or, with ``pair``, all of them) is planned."""
    def plan_fn(s: Scenario):
        present = culprits & {j.name for j in s.jobs}
        if present and (not pair or present == culprits):
            if kind == "raise":
                raise ValueError("attempt to get argmax of an empty sequence")
            return pipeline.run(s).model_copy(update={"importance": math.nan})
        return pipeline.run(s)
    return plan_fn


@settings(max_examples=12, deadline=None)
@given(st.sets(st.sampled_from(JOBS), min_size=0, max_size=3), st.sampled_from(["raise", "nan"]), st.booleans())
def test_guard_sets_aside_exactly_the_culprits(culprits, kind, all_suspect):
    suspects = None if all_suspect else sorted(culprits | {JOBS[0]})
    if suspects is not None and len(suspects) > 1 and set(suspects) == culprits:
        with pytest.raises(guard.Unplannable, match="each of the"):  # every suspect fails alone: not a job's fault
            guard.run(SCEN, faulty(culprits, kind), suspects)
        return
    out = guard.run(SCEN, faulty(culprits, kind), suspects)
    assert set(out.quarantined) == culprits
    assert decisions(out.plan) == decisions(pipeline.run(guard.without(SCEN, culprits)))
    n, k = len(suspects or JOBS), len(culprits)
    assert out.runs == 1 if k == 0 else out.runs <= 2 + 2 * k * math.ceil(math.log2(n) + 1)
    for why in out.quarantined.values():
        assert ("argmax" in why) if kind == "raise" else ("nan" in why)


def test_guard_a_fault_of_two_jobs_together_costs_one_of_them():
    a, b = JOBS[1], JOBS[4]
    out = guard.run(SCEN, faulty({a, b}, "raise", pair=True))
    assert len(out.quarantined) == 1 and set(out.quarantined) <= {a, b}
    assert decisions(out.plan) == decisions(pipeline.run(guard.without(SCEN, out.quarantined)))


def test_guard_a_fault_outside_the_suspects_is_unplannable():
    with pytest.raises(guard.Unplannable, match="argmax"):
        guard.run(SCEN, faulty({JOBS[2]}, "raise"), suspects=[JOBS[0], JOBS[1]])
    with pytest.raises(guard.Unplannable, match="no job changed"):
        guard.run(SCEN, faulty({JOBS[2]}, "raise"), suspects=[])


def test_guard_a_fault_that_comes_with_any_job_quarantines_nobody():
    """A stage that fails whenever any job is planned (a bad node, say): no job is to blame."""
    with pytest.raises(guard.Unplannable, match="each of the 6 suspect jobs"):
        guard.run(SCEN, faulty(set(JOBS), "raise"))


def test_without_drops_the_importers_too():
    s = workloads.scenario(workloads.lsd(1), workloads.nodes(3))
    exporter = next(i.job for j in s.jobs for i in j.imports)
    left = {j.name for j in guard.without(s, [exporter]).jobs}
    assert exporter not in left
    assert all(i.job in left for j in guard.without(s, [exporter]).jobs for i in j.imports)


def _chain(sel: float, a: float = 1e6, weight: float = 1.0, n: int = 4, rate: float = 1e6) -> Template:
    """source -> transforms -> sink, every selectivity ``sel``, every resource function a = b = ``a``."""
    pes = [PE(name=f"p{i}", kind="source" if i == 0 else "sink" if i == n - 1 else "transform", rf=ResourceFunction(a=a, b=a))
           for i in range(n)]
    return Template(name="evil/chain", pes=tuple(pes), streams=tuple(Stream(src=f"p{i}", dst=f"p{i + 1}", selectivity=sel) for i in range(n - 1)),
                    sinks=(Sink(pe=f"p{n - 1}", weight=weight),), primal_inputs=(PrimalInput(pe="p0", rate=rate),))


def test_screen_names_the_job_whose_numbers_overflow_in_combination():
    good = workloads.scenario(workloads.dac(3), workloads.nodes(4))
    for sel, a, what in ((1e6, 1e6, "tuples/s"), (1.0, 1.0, "importance")):
        t = _chain(sel, a=a, weight=1e9 if what == "importance" else 1.0, rate=1e12)
        s = Scenario(nodes=good.nodes, templates=(*good.templates, t), jobs=(*good.jobs, Job(name="evil/chain", templates=("evil/chain",))))
        got = screen.screen(s.jobs, {t.name: t for t in s.templates})
        assert [p.job for p in got] == ["evil/chain"], got
        assert got[0].field == "spec.templates[0]" and what in got[0].message


@pytest.mark.parametrize("workload", ["lsd", "dac"])
def test_screen_passes_the_papers_workloads(workload):
    s = workloads.scenario(getattr(workloads, workload)(1), workloads.nodes(20))
    assert screen.screen(s.jobs, {t.name: t for t in s.templates}) == []


def test_kubesoda_plan_leaves_out_the_job_that_makes_planning_fail(monkeypatch, capsys):
    """`kubesoda plan` runs the operator's guard: a fault injected into the real pipeline whenever
    default/video is planned costs only default/video (exit 2, its error), clicks is planned."""
    from soda_operator import cli

    real = pipeline.run

    def run(s, deadline_s=None, functions=None):
        if any(j.name == "default/video" for j in s.jobs):
            raise ValueError("attempt to get argmax of an empty sequence")
        return real(s, deadline_s, functions)

    monkeypatch.setattr(pipeline, "run", run)  # systems.decide("soda") calls it
    ex = Path(__file__).resolve().parents[1] / "examples"
    rc = cli.main(["plan", "-f", str(ex / "nodes" / "small-8.yaml"), "-f", str(ex / "alternatives"), "-f", str(ex / "small-pipeline"),
                   "--deadline-scale", "0.2", "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert rc == 2
    assert [d["job"] for d in doc["jobs"]] == ["default/clicks"] and doc["jobs"][0]["admitted"]
    assert "StreamJob default/video: planning failed with this job (ValueError: attempt to get argmax" in err


# ------------------------------------------------------------------ the policy is a suspect before any job (issue 45)

BAD = POLICY.model_copy(update={"macrow_deadline_s": 1.0e308})  # the admin's value that breaks a stage


def policy_faulty(culprits: set[str]):
    """The real pipeline, failing under BAD's macroW deadline (as an OverflowError in a stage would) and whenever a
    culprit job is planned."""
    def plan_fn(s: Scenario):
        if s.policy.macrow_deadline_s > 1e6:
            raise OverflowError("timeout value is too large")
        if culprits & {j.name for j in s.jobs}:
            raise ValueError("attempt to get argmax of an empty sequence")
        return pipeline.run(s)
    return plan_fn


@settings(max_examples=8, deadline=None)
@given(st.sets(st.sampled_from(JOBS), min_size=0, max_size=2), st.sampled_from(JOBS), st.booleans())
def test_a_policy_fault_never_costs_a_job_its_place(culprits, changed, all_suspect):
    """Planning fails under the policy: with a fallback policy the guard plans under it, blames the policy and sets
    aside exactly the jobs that fail on their own (the changed healthy job among the suspects keeps its place: main
    quarantined it, the only suspect, for the policy's OverflowError)."""
    scen = SCEN.model_copy(update={"policy": BAD})
    suspects = None if all_suspect else sorted(culprits | {changed})
    if suspects is not None and len(suspects) > 1 and set(suspects) == culprits:
        return  # every suspect fails alone: not a job's fault (test above)
    out = guard.run(scen, policy_faulty(culprits), suspects, fallback=POLICY)
    assert "OverflowError" in out.policy_fault
    assert set(out.quarantined) == culprits
    assert decisions(out.plan) == decisions(pipeline.run(guard.without(SCEN, culprits)))


def test_a_sound_policy_is_never_blamed():
    out = guard.run(SCEN, faulty({JOBS[2]}, "raise"), [JOBS[2], JOBS[3]], fallback=Policy())
    assert out.policy_fault == "" and set(out.quarantined) == {JOBS[2]}

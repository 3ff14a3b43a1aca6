"""The rank and weight managers (SODA paper 6.2, 6.3): BDRM, BDWM, budget bookkeeping, MDRM.

Properties with hypothesis, an independent exact re-implementation of the BDRM, and one end-to-end
run in which the budget manager decides which of two jobs the cluster admits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from soda_optimizer import pipeline, steps
from soda_optimizer.managers import RANK_MANAGERS, WEIGHT_MANAGERS, budget, merit
from soda_optimizer.model import (
    PE,
    Budgets,
    Job,
    Merit,
    MeritWeights,
    MeritWindow,
    Node,
    Policy,
    PrimalInput,
    ResourceFunction,
    Scenario,
    Sink,
    Stream,
    Template,
)

EPOCH = 60.0
OWNERS = ("ann", "bob", "cy", "")


def tmpl(cost: int) -> Template:
    """A template whose PE floors sum to ``cost`` x 100 mips (two PEs, one stream, one sink)."""
    return Template(
        name=f"t{cost}",
        pes=(PE(name="src", kind="source", min_mips=cost * 50), PE(name="out", kind="sink", min_mips=cost * 50)),
        streams=(Stream(src="src", dst="out", weight=0.7),),
        sinks=(Sink(pe="out", weight=3.0),),
        primal_inputs=(PrimalInput(pe="src", rate=10),),
    )


COSTS = (1, 2, 3)
TEMPLATES = tuple(tmpl(c) for c in COSTS)


@st.composite
def scenarios(draw, max_jobs: int = 8, integral: bool = False):
    """Random jobs (owner, declared rank, required, cost) and budgets. Costs are cost x 100 mips x EPOCH s."""
    n = draw(st.integers(0, max_jobs))
    names = draw(st.permutations([f"j{i}" for i in range(n)]))  # input order is not name order
    jobs = []
    for i in range(n):
        jobs.append(Job(name=names[i], owner=draw(st.sampled_from(OWNERS)), rank=draw(st.integers(1, 4)),
                        required=draw(st.integers(0, 4)) == 0, templates=(f"t{draw(st.sampled_from(COSTS))}",)))
    unit = 100 * EPOCH  # budgets in multiples of one cost unit, so ties happen
    amounts = st.integers(0, 12).map(lambda k: k * unit)
    owners = draw(st.lists(st.sampled_from(OWNERS), unique=True))
    b = Budgets(allocated={o: draw(amounts) for o in owners},
                spent={o: draw(amounts) for o in draw(st.lists(st.sampled_from(OWNERS), unique=True))},
                default=draw(amounts), compare=draw(st.sampled_from(["fraction", "absolute"])))
    pol = Policy(budgets=b, macro_epoch_s=EPOCH, pe_floor_mips=0.0)
    return Scenario(templates=TEMPLATES, jobs=tuple(jobs), policy=pol)


def cost_units(job: Job) -> int:
    return int(job.templates[0][1:])


# --------------------------------------------------------------------------- BDRM


def bdrm_oracle(s: Scenario) -> dict[str, int]:
    """An independent BDRM: exact rational arithmetic, owners' lists rebuilt each round."""
    b = s.policy.budgets
    unit = Fraction(100) * Fraction(EPOCH)

    def alloc(o: str) -> Fraction:
        return Fraction(b.allocated[o]) if o in b.allocated else Fraction(b.default)

    left = {o: alloc(o) - Fraction(b.spent.get(o, 0)) for o in {j.owner for j in s.jobs}}
    out = {}
    for j in s.jobs:
        if j.required:
            out[j.name] = 1
            left[j.owner] -= cost_units(j) * unit
    todo = [j for j in s.jobs if not j.required]
    pi = 2 if out else 1
    while todo:
        heads = {}
        for o in {j.owner for j in todo}:
            heads[o] = min((j for j in todo if j.owner == o), key=lambda j: (j.rank, j.name))

        def key(o: str) -> tuple[int, Fraction]:
            if b.compare == "fraction" and alloc(o) > 0:
                return (1, left[o] / alloc(o))
            return (0, left[o])

        best = max(key(o) for o in heads)
        for o, j in heads.items():
            if key(o) == best:
                out[j.name] = pi
                todo.remove(j)
        for o, j in heads.items():
            if out.get(j.name) == pi:
                left[o] -= cost_units(j) * unit
        pi += 1
    return out


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_bdrm_matches_an_independent_exact_implementation(s):
    assert budget.budget_ranks(s) == bdrm_oracle(s)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_bdrm_ranks_required_first_gapless_and_in_each_owners_order(s):
    out = RANK_MANAGERS["budget"](s)
    ranks = {j.name: j.rank for j in out.jobs}
    assert [j.name for j in out.jobs] == [j.name for j in s.jobs]  # same jobs, same order
    assert all(ranks[j.name] == 1 for j in s.jobs if j.required)
    if any(j.required for j in s.jobs):
        assert all(ranks[j.name] >= 2 for j in s.jobs if not j.required)
    assert set(ranks.values()) == set(range(1, max(ranks.values(), default=0) + 1))  # 1..k, no gaps
    for a in s.jobs:
        for b in s.jobs:
            if a.owner == b.owner and not a.required and not b.required and (a.rank, a.name) < (b.rank, b.name):
                assert ranks[a.name] < ranks[b.name]  # one job per owner per round, in the owner's order
    assert out.policy == s.policy and out.templates == s.templates  # nothing else changes


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.sampled_from(["fraction", "absolute"]))
def test_equal_budgets_and_costs_owners_share_every_round(owners, per_owner, compare):
    jobs = tuple(Job(name=f"{o}-{i}", owner=f"o{o}", rank=per_owner - i, templates=("t2",))
                 for o in range(owners) for i in range(per_owner))
    s = Scenario(templates=TEMPLATES, jobs=jobs,
                 policy=Policy(budgets=Budgets(default=1e6, compare=compare), macro_epoch_s=EPOCH))
    ranks = budget.budget_ranks(s)
    for o in range(owners):  # declared rank per_owner - i: the owner prefers its last-named job
        assert [ranks[f"{o}-{i}"] for i in range(per_owner)] == list(range(per_owner, 0, -1))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.floats(0.0, 0.99))
def test_a_small_lead_makes_owners_alternate(per_owner, lead):
    cost = 2 * 100 * EPOCH
    jobs = tuple(Job(name=f"{o}{i}", owner=o, rank=1, templates=("t2",)) for o in ("a", "b") for i in range(per_owner))
    b = Budgets(allocated={"a": 1e6 + lead * cost + 1.0, "b": 1e6}, compare="absolute")
    s = Scenario(templates=TEMPLATES, jobs=jobs, policy=Policy(budgets=b, macro_epoch_s=EPOCH))
    ranks = budget.budget_ranks(s)
    assert [ranks[f"a{i}"] for i in range(per_owner)] == list(range(1, 2 * per_owner, 2))
    assert [ranks[f"b{i}"] for i in range(per_owner)] == list(range(2, 2 * per_owner + 1, 2))


def test_bdrm_worked_example_fraction_versus_absolute():
    # ann: 600 000 of 1 000 000 left (60%); bob: 300 000 of 400 000 left (75%); each job costs 6000 x k
    jobs = (Job(name="ann-1", owner="ann", rank=1, templates=("t1",)),
            Job(name="ann-2", owner="ann", rank=2, templates=("t1",)),
            Job(name="bob-1", owner="bob", rank=1, templates=("t3",)),
            Job(name="must", owner="bob", rank=9, required=True, templates=("t1",)))
    b = Budgets(allocated={"ann": 1e6, "bob": 4e5}, spent={"ann": 4e5, "bob": 1e5})
    s = Scenario(templates=TEMPLATES, jobs=jobs, policy=Policy(budgets=b, macro_epoch_s=EPOCH, pe_floor_mips=0))
    # bob's required job is charged first: bob 294 000 / 400 000 = 73.5% > ann 60%
    assert budget.budget_ranks(s) == {"must": 1, "bob-1": 2, "ann-1": 3, "ann-2": 4}
    assert budget.budget_weights(s) == {"must": 1.0, "bob-1": 0.75, "ann-1": 0.5, "ann-2": 0.25}  # docs/managers.md
    absolute = s.model_copy(update={"policy": s.policy.model_copy(update={"budgets": b.model_copy(update={"compare": "absolute"})})})
    assert budget.budget_ranks(absolute) == {"must": 1, "ann-1": 2, "ann-2": 3, "bob-1": 4}


def test_job_cost_uses_the_floors_of_the_cheapest_candidate_template():
    s = Scenario(templates=TEMPLATES, jobs=(Job(name="j", templates=("t3", "t1")),
                                            Job(name="k", templates=("t3", "t1"), chosen_template="t3")),
                 policy=Policy(macro_epoch_s=30.0, pe_floor_mips=80.0))
    assert budget.job_cost(s, s.jobs[0]) == (80 + 80) * 30.0  # t1: two PEs of min 50, raised to the floor 80
    assert budget.job_cost(s, s.jobs[1]) == 300 * 30.0  # running: its chosen template


# --------------------------------------------------------------------------- BDWM and bookkeeping


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_bdwm_weighs_sinks_by_the_budget_order_and_zeroes_streams(s):
    out = WEIGHT_MANAGERS["budget"](s)
    ranks = budget.budget_ranks(s)
    sink = {}
    for j in out.jobs:
        t = out.template(j.templates[0])
        assert j.weight_overrides[t.streams[0].id] == 0.0
        sink[j.name] = j.weight_overrides["sink:out"]
        assert 0.0 < sink[j.name] <= 1.0
        assert j.rank == s.job(j.name).rank  # a weight manager leaves ranks alone
    for a in ranks:
        for b in ranks:
            assert (ranks[a] < ranks[b]) == (sink[a] > sink[b])
    if ranks:
        assert max(sink.values()) == 1.0
    glued = out.glued({j.name: j.templates[0] for j in out.jobs})
    assert all(d["weight"] == 0.0 for _, _, d in glued.graph.edges(data=True))


@given(st.dictionaries(st.sampled_from(OWNERS), st.floats(0, 1e4)), st.floats(0, 1e4), st.booleans())
def test_charge_depletes_only_overloaded_epochs(usage, seconds, overloaded):
    before = Budgets(allocated={"ann": 5e6}, spent={"ann": 10.0, "bob": 3.0})
    after = budget.charge(before, usage, seconds, overloaded)
    if not overloaded:
        assert after == before
        return
    for o in set(OWNERS):
        assert after.spent.get(o, 0.0) == pytest.approx(before.spent.get(o, 0.0) + usage.get(o, 0.0) * seconds)
    assert after.allocated == before.allocated and after.compare == before.compare


def test_charge_refuses_negative_or_infinite_usage():
    with pytest.raises(ValueError, match="owner 'ann'"):
        budget.charge(Budgets(), {"ann": -1.0}, 60, True)
    with pytest.raises(ValueError, match="seconds"):
        budget.charge(Budgets(), {"ann": 1.0}, float("inf"), False)


def test_charged_owner_loses_its_place():
    jobs = (Job(name="a", owner="ann", templates=("t1",)), Job(name="b", owner="bob", templates=("t1",)))
    b = Budgets(default=1e6)
    s = Scenario(templates=TEMPLATES, jobs=jobs, policy=Policy(budgets=b, macro_epoch_s=EPOCH))
    assert budget.budget_ranks(s) == {"a": 1, "b": 1}
    spent = budget.charge(b, {"ann": 100.0}, 60.0, overloaded=True)
    assert budget.budget_ranks(s.model_copy(update={"policy": s.policy.model_copy(update={"budgets": spent})})) == {"b": 1, "a": 2}
    calm = budget.charge(b, {"ann": 100.0}, 60.0, overloaded=False)
    assert budget.budget_ranks(s.model_copy(update={"policy": s.policy.model_copy(update={"budgets": calm})})) == {"a": 1, "b": 1}


# --------------------------------------------------------------------------- MDRM


T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # a Monday


@st.composite
def merit_scenarios(draw):
    n = draw(st.integers(1, 8))
    small = st.floats(-5, 5, allow_nan=False).map(lambda x: round(x, 3))
    jobs = tuple(Job(name=f"j{i}", owner=draw(st.sampled_from(OWNERS)), rank=draw(st.integers(1, 9)),
                     required=draw(st.integers(0, 5)) == 0, templates=("t1",),
                     created=draw(st.sampled_from(["", (T0 - timedelta(hours=draw(st.integers(0, 100)))).isoformat()])))
                 for i in range(n))
    m = Merit(weights=MeritWeights(rank=draw(small), owner=draw(small), age=draw(small)),
              bucket=draw(st.sampled_from([0.5, 1.0, 2.5, 7.0])),
              owner_priority={o: draw(small) for o in draw(st.lists(st.sampled_from(OWNERS), unique=True))},
              default_owner_priority=draw(small))
    return Scenario(templates=TEMPLATES, jobs=jobs, policy=Policy(rank_manager="merit", merit=m), now=T0)


@settings(max_examples=300, deadline=None)
@given(merit_scenarios())
def test_mdrm_buckets(s):
    out = RANK_MANAGERS["merit"](s)
    ranks = {j.name: j.rank for j in out.jobs}
    m = merit.merits(s)
    B = s.policy.merit.bucket
    free = [j.name for j in s.jobs if not s.job(j.name).required]
    assert all(ranks[j.name] == 1 for j in s.jobs if j.required)
    if free:
        assert min(ranks[n] for n in free) == 1  # the best job is in bucket 1
    eps = 1e-9 * B
    for a in free:
        for b in free:
            d = m[b] - m[a]
            if d >= 0:
                assert ranks[a] <= ranks[b]  # lower merit never ranks worse
            if abs(d) < B - eps:
                assert abs(ranks[a] - ranks[b]) <= 1  # a difference under B separates at most one rank
            if d >= B + eps:
                assert ranks[b] > ranks[a]  # a difference of B or more always separates
            if abs(d) < eps:
                assert ranks[a] == ranks[b]


def test_mdrm_merit_terms_and_paper_buckets():
    m = Merit(weights=MeritWeights(rank=1.0, owner=10.0, age=-0.5), bucket=5.0, owner_priority={"vip": 0.0, "ann": 1.0},
              default_owner_priority=2.0)
    jobs = (Job(name="vip", owner="vip", rank=3, templates=("t1",), created=(T0 - timedelta(hours=2)).isoformat()),
            Job(name="ann", owner="ann", rank=1, templates=("t1",), created=(T0 - timedelta(hours=4)).isoformat()),
            Job(name="old", owner="x", rank=1, templates=("t1",), created="2026-11-22T12:00:00Z"),
            Job(name="new", owner="x", rank=1, templates=("t1",)),
            Job(name="req", owner="x", rank=9, required=True, templates=("t1",)))
    s = Scenario(templates=TEMPLATES, jobs=jobs, policy=Policy(merit=m), now=T0)
    assert merit.merits(s) == {"vip": 3 - 1.0, "ann": 1 + 10 - 2.0, "old": 1 + 20 - 12.0, "new": 21.0, "req": 9 + 20}
    # merits 2, 9, 9, 21: buckets [0,5) [5,10) [20,25) -> ranks 1, 2, 2, 5 (empty buckets keep their numbers)
    assert merit.merit_ranks(s) == {"vip": 1, "ann": 2, "old": 2, "new": 5, "req": 1}
    # negative merits: edges shift by whole buckets, the best job lands in bucket 1
    neg = s.model_copy(update={"policy": Policy(merit=m.model_copy(update={"weights": MeritWeights(rank=-10.0)}))})
    assert merit.merits(neg)["vip"] == -30.0
    assert merit.merit_ranks(neg) == {"vip": 1, "ann": 5, "old": 5, "new": 5, "req": 1}


def window_oracle(w: MeritWindow) -> set[tuple[int, int]]:
    """The (ISO weekday, hour) pairs a window covers, enumerated."""
    if w.start_hour < w.end_hour:
        return {(d, h) for d in w.days for h in range(w.start_hour, w.end_hour)}
    return ({(d, h) for d in w.days for h in range(w.start_hour, 24)}
            | {(d % 7 + 1, h) for d in w.days for h in range(0, w.end_hour)})


@st.composite
def window(draw):
    start = draw(st.integers(0, 23))
    end = draw(st.integers(1, 24).filter(lambda e: e != start))
    days = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=7, unique=True)))
    return MeritWindow(days=days, start_hour=start, end_hour=end, weights=MeritWeights(rank=float(draw(st.integers(2, 99)))))


moments = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1),
                       timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5)), timezone(timedelta(hours=9))]))


@settings(max_examples=300, deadline=None)
@given(st.lists(window(), max_size=4), moments)
def test_the_first_matching_window_supplies_the_weights(ws, now):
    m = Merit(weights=MeritWeights(rank=1.0), windows=tuple(ws))
    want = next((w.weights for w in ws if (now.isoweekday(), now.hour) in window_oracle(w)), m.weights)
    assert merit.active_weights(m, now) == want
    assert merit.active_weights(m, None) == m.weights


def test_windows_wrap_past_midnight_in_nows_time_zone():
    night = MeritWindow(days=(5,), start_hour=22, end_hour=6, weights=MeritWeights(rank=2.0))  # Friday 22 to 6
    fri = datetime(2026, 11, 27)  # a Friday
    assert merit.window_matches(night, fri.replace(hour=22))
    assert merit.window_matches(night, fri.replace(hour=23, minute=59))
    assert merit.window_matches(night, (fri + timedelta(days=1)).replace(hour=5, minute=59))  # Saturday early
    assert not merit.window_matches(night, (fri + timedelta(days=1)).replace(hour=6))
    assert not merit.window_matches(night, fri.replace(hour=21, minute=59))
    assert not merit.window_matches(night, fri.replace(hour=3))  # Thursday night's tail: not listed
    sunday = MeritWindow(days=(7,), start_hour=20, end_hour=8)
    assert merit.window_matches(sunday, datetime(2026, 11, 30, 7))  # Monday 7:00 closes Sunday's night
    # 2026-11-27 23:30 in UTC-5 is Saturday 04:30 UTC: the window reads the local (Friday 23) hour
    local = datetime(2026, 11, 27, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert merit.window_matches(night, local)
    assert not merit.window_matches(MeritWindow(days=(6,), start_hour=4, end_hour=5), local)


def test_empty_window_is_refused():
    with pytest.raises(ValidationError, match="empty"):
        MeritWindow(start_hour=5, end_hour=5)


def test_time_windows_change_ranks():
    m = Merit(weights=MeritWeights(rank=1.0), bucket=1.0, owner_priority={"night-owl": -5.0},
              windows=(MeritWindow(days=(1, 2, 3, 4, 5), start_hour=22, end_hour=6, weights=MeritWeights(rank=1.0, owner=1.0)),))
    jobs = (Job(name="day", owner="ann", rank=1, templates=("t1",)), Job(name="night", owner="night-owl", rank=3, templates=("t1",)))
    s = Scenario(templates=TEMPLATES, jobs=jobs, policy=Policy(merit=m), now=datetime(2026, 11, 23, 12))
    assert merit.merit_ranks(s) == {"day": 1, "night": 3}
    at_night = s.model_copy(update={"now": datetime(2026, 11, 24, 2)})  # Tuesday 2:00, Monday's night window
    assert merit.merit_ranks(at_night) == {"night": 1, "day": 4}


def test_bad_creation_time_names_the_job():
    s = Scenario(templates=TEMPLATES, jobs=(Job(name="j", templates=("t1",), created="yesterday"),),
                 policy=Policy(merit=Merit(weights=MeritWeights(age=1.0))), now=T0)
    with pytest.raises(ValueError, match="job 'j'"):
        merit.merit_ranks(s)


# --------------------------------------------------------------------------- end to end


def two_owners(**pol) -> Scenario:
    """One 3000-mips node; two jobs of 2000 mips minimum each: only one fits. bob's job is worth more."""
    def t(name: str, slope_rate: float) -> Template:
        return Template(name=name, pes=(PE(name="a", kind="source", min_mips=2000, max_mips=2000, rf=ResourceFunction(a=1.0)),),
                        primal_inputs=(PrimalInput(pe="a", rate=slope_rate),), sinks=(Sink(pe="a"),))
    jobs = (Job(name="ann-job", owner="ann", templates=("cheap",)), Job(name="bob-job", owner="bob", templates=("rich",)))
    return Scenario(nodes=(Node(name="n", mips=3000),), templates=(t("cheap", 10), t("rich", 1000)), jobs=jobs,
                    policy=Policy(unit_mips=500, macroq_deadline_s=2, macrow_deadline_s=2, **pol))


def admitted(plan) -> set[str]:
    return {d.job for d in plan.jobs if d.admitted}


def test_budget_rank_manager_admits_the_richer_owners_job_end_to_end():
    budgets = Budgets(allocated={"ann": 1e7, "bob": 1e7}, spent={"bob": 9e6})  # ann has 100%, bob 10% left
    assert admitted(pipeline.run(two_owners(budgets=budgets))) == {"bob-job"}  # static ranks: the more valuable job
    plan = pipeline.run(two_owners(budgets=budgets, rank_manager="budget"))
    assert admitted(plan) == {"ann-job"}
    assert {d.job: d.rank for d in plan.jobs} == {"ann-job": 1, "bob-job": 2}
    # once bob's budget has more left than ann's, bob's job goes first
    flipped = Budgets(allocated={"ann": 1e7, "bob": 1e7}, spent={"ann": 9e6})
    assert admitted(pipeline.run(two_owners(budgets=flipped, rank_manager="budget"))) == {"bob-job"}


def test_merit_rank_manager_through_prepare():
    m = Merit(weights=MeritWeights(rank=0.0, owner=1.0), owner_priority={"ann": 0.0, "bob": 3.0})
    out = steps.prepare(two_owners(rank_manager="merit", merit=m))
    assert {j.name: j.rank for j in out.jobs} == {"ann-job": 1, "bob-job": 4}
    assert admitted(pipeline.run(two_owners(rank_manager="merit", merit=m))) == {"ann-job"}


def test_every_manager_name_is_registered_and_accepted():
    for name in RANK_MANAGERS:
        assert Policy(rank_manager=name).rank_manager == name
    for name in WEIGHT_MANAGERS:
        assert Policy(weight_manager=name).weight_manager == name
    assert set(RANK_MANAGERS) == {"static", "budget", "merit"}
    assert set(WEIGHT_MANAGERS) == {"static", "simple", "budget"}

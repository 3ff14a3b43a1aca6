"""Level 2 GA operators (paper Fig. 5) and the steady-state loop."""

from __future__ import annotations

import random
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_optimizer.flows.ga import mutate, position_based_crossover, steady_state_ga


@st.composite
def parents_and_mask(draw: st.DrawFn) -> tuple[list[int], list[int], list[bool]]:
    n = draw(st.integers(min_value=1, max_value=30))
    p1 = draw(st.permutations(list(range(n))))
    p2 = draw(st.permutations(list(range(n))))
    mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return list(p1), list(p2), mask


def test_paper_figure_5_example() -> None:
    # positions 4, 6, 7 (1-based) keep 4, 6, 7 of the first parent; 2, 5, 1, 3 fill in the second parent's order
    p1 = [1, 2, 3, 4, 5, 6, 7]
    p2 = [2, 5, 6, 1, 4, 3, 7]
    keep = [i in (3, 5, 6) for i in range(7)]
    assert position_based_crossover(p1, p2, keep) == [2, 5, 1, 4, 3, 6, 7]


# no timing in these properties: under load (2 shared cores) drawing 30-element permutations tripped Hypothesis's
# too_slow health check and its per-example deadline (issue 50)
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@RELAXED
@given(parents_and_mask())
def test_crossover_yields_a_permutation_keeping_masked_positions(data: tuple[list[int], list[int], list[bool]]) -> None:
    p1, p2, mask = data
    child = position_based_crossover(p1, p2, mask)
    assert sorted(child) == sorted(p1)
    assert all(child[i] == p1[i] for i in range(len(p1)) if mask[i])
    # the free elements appear in the second parent's order
    free = [x for x in child if x not in {p1[i] for i in range(len(p1)) if mask[i]}]
    assert free == [x for x in p2 if x in set(free)]


@RELAXED
@given(parents_and_mask(), st.integers(min_value=0, max_value=2**32 - 1))
def test_mutation_permutes_only_the_free_positions(data: tuple[list[int], list[int], list[bool]], seed: int) -> None:
    p1, _, mask = data
    child = mutate(p1, mask, random.Random(seed))
    assert sorted(child) == sorted(p1)
    assert all(child[i] == p1[i] for i in range(len(p1)) if mask[i])
    assert {child[i] for i in range(len(p1)) if not mask[i]} == {p1[i] for i in range(len(p1)) if not mask[i]}


def test_mutation_reaches_other_orders() -> None:
    rng = random.Random(0)
    p = list(range(8))
    seen = {tuple(mutate(p, [False] * 8, rng)) for _ in range(50)}
    assert len(seen) > 10


def test_full_crossover_mask_copies_the_first_parent() -> None:
    assert position_based_crossover([3, 1, 2], [1, 2, 3], [True] * 3) == [3, 1, 2]
    assert position_based_crossover([3, 1, 2], [1, 2, 3], [False] * 3) == [1, 2, 3]


def _inversions(p: list[int]) -> float:
    return float(sum(1 for i in range(len(p)) for j in range(i + 1, len(p)) if p[i] > p[j]))


def test_ga_improves_on_random_orderings_and_respects_the_budget() -> None:
    calls = []

    def ev(p: list[int]) -> float:
        calls.append(1)
        return _inversions(p)

    res = steady_state_ga(12, ev, 400, random.Random(3))
    assert len(calls) == res.evaluations == 400
    assert res.best_score <= 6  # random orderings of 12 average 33 inversions
    assert res.history == sorted(res.history, reverse=True)


def test_ga_seed_is_evaluated_first_and_deadline_returns_best_so_far() -> None:
    order: list[list[int]] = []

    def slow(p: list[int]) -> float:
        order.append(p)
        time.sleep(0.01)
        return _inversions(p)

    res = steady_state_ga(10, slow, 10_000, random.Random(1), seeds=[list(range(10))], deadline=time.monotonic() + 0.2)
    assert order[0] == list(range(10))
    assert res.timed_out and res.evaluations < 10_000
    assert res.best == list(range(10)) and res.best_score == 0

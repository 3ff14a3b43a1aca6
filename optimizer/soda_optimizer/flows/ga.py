"""The order-based steady-state genetic algorithm of Level 2 (Montana & Zinky, section 3.2, Figs. 5 and 6).

- Chromosome: a permutation of the items (flows) fed to the rapid route builder.
- Crossover: position-based (Syswerda): a random set of positions keeps the first parent's elements in place; the
  other elements fill the free positions in the order they have in the second parent.
- Mutation: the same without a second parent: the elements off the kept positions are put back in a random order.
- Steady state: one child at a time; it replaces the worst member when it is better and not a duplicate.
- Population size = evaluations / 5 (the paper's rule), at least 2; the initial population is random orderings.

Departures from the paper, on purpose (Fig. 6 is not reproduced in the text, so these are our choices):
- parents are drawn by binary tournament; a child comes from crossover with probability ``crossover_rate`` (0.7),
  else from mutation of one parent;
- each position is kept with probability 1/2 (the paper does not give the rate);
- the caller may seed orderings into the initial population (the planner seeds a "shortest lifespan, highest
  utility first" ordering so that the first evaluated plan is already a reasonable one);
- a deadline (monotonic clock) stops the search early; the best ordering so far is returned.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


def position_based_crossover(p1: Sequence[int], p2: Sequence[int], keep: Sequence[bool]) -> list[int]:
    """Syswerda's position-based crossover: ``keep[i]`` keeps p1[i] at i; the rest in p2's order."""
    if len(p1) != len(p2) or len(keep) != len(p1):
        raise ValueError("parents and mask must have the same length")
    kept = {p1[i] for i in range(len(p1)) if keep[i]}
    fill = iter([x for x in p2 if x not in kept])
    return [p1[i] if keep[i] else next(fill) for i in range(len(p1))]


def mutate(p: Sequence[int], keep: Sequence[bool], rng: random.Random) -> list[int]:
    """The paper's mutation: elements off the kept positions are reordered at random into the free positions."""
    if len(keep) != len(p):
        raise ValueError("parent and mask must have the same length")
    loose = [p[i] for i in range(len(p)) if not keep[i]]
    rng.shuffle(loose)
    it = iter(loose)
    return [p[i] if keep[i] else next(it) for i in range(len(p))]


def random_mask(n: int, rng: random.Random, rate: float = 0.5) -> list[bool]:
    return [rng.random() < rate for _ in range(n)]


@dataclass
class GAResult:
    best: list[int]
    best_score: float
    evaluations: int
    history: list[float] = field(default_factory=list)  #: best score after each evaluation
    timed_out: bool = False


def steady_state_ga(
    n: int,
    evaluate: Callable[[list[int]], float],
    evaluations: int,
    rng: random.Random,
    seeds: Sequence[Sequence[int]] = (),
    deadline: float | None = None,
    crossover_rate: float = 0.7,
) -> GAResult:
    """Minimise ``evaluate`` over permutations of range(n). ``deadline`` is a time.monotonic() value."""
    evaluations = max(1, evaluations)
    pop_size = max(2, evaluations // 5)
    pop: list[tuple[float, list[int]]] = []
    seen: set[tuple[int, ...]] = set()
    history: list[float] = []
    best_score = float("inf")
    best: list[int] = list(range(n))
    used = 0
    timed_out = False

    def add(ind: list[int]) -> None:
        nonlocal used, best_score, best
        sc = evaluate(ind)
        used += 1
        if sc < best_score:
            best_score, best = sc, list(ind)
        history.append(best_score)
        key = tuple(ind)
        if len(pop) < pop_size:
            if key not in seen:
                pop.append((sc, ind))
                seen.add(key)
            return
        worst = max(range(len(pop)), key=lambda i: pop[i][0])
        if sc < pop[worst][0] and key not in seen:
            seen.discard(tuple(pop[worst][1]))
            pop[worst] = (sc, ind)
            seen.add(key)

    def out_of_time() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    initial = [list(s) for s in seeds]
    while len(initial) < pop_size:
        perm = list(range(n))
        rng.shuffle(perm)
        initial.append(perm)
    for ind in initial[:pop_size]:
        if used >= evaluations or (used > 0 and out_of_time()):
            timed_out = used < evaluations
            break
        add(ind)
    if n <= 1:
        return GAResult(best, best_score, used, history, timed_out)
    while used < evaluations and len(pop) >= 2:
        if out_of_time():
            timed_out = True
            break

        def tournament() -> list[int]:
            a, b = rng.sample(range(len(pop)), 2)
            return pop[a][1] if pop[a][0] <= pop[b][0] else pop[b][1]

        mask = random_mask(n, rng)
        if rng.random() < crossover_rate:
            child = position_based_crossover(tournament(), tournament(), mask)
        else:
            child = mutate(tournament(), mask, rng)
        add(child)
    return GAResult(best, best_score, used, history, timed_out)

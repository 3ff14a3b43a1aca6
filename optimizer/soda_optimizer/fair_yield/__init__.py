"""Fair-yield allocation of virtual clusters (Stillwell, Schanzenbach, Vivien & Casanova, "Resource allocation
algorithms for virtualized service hosting platforms"): place tasks with a CPU need and a rigid memory need on
hosts, sharing each host's CPU so as to maximise the minimum yield (CPU given / CPU needed), then the average.
Pure: no Kubernetes, no I/O.

- :mod:`.model` -- instances, jobs (parallel jobs of T equal tasks), allocations, the constraint checker (2.3, 5.1);
- :mod:`.milp` -- the exact MILP and the LP bound (2.5, 3.1, 5.1, 6.1);
- :mod:`.rounding` -- RRND, RRNZ (3.2);
- :mod:`.greedy` -- GR, SG, GB, SGB (3.3);
- :mod:`.mcb` -- MCB1..MCB8, multi-capacity bin packing in a binary search on the yield (3.4);
- :mod:`.average` -- the average-yield second phase (3.5, per job for parallel jobs 5.1);
- :mod:`.dynamic` -- re-optimisation with a migration budget (6);
- :mod:`.epoch` -- one epoch of a running allocation, the chosen algorithm within the migration budget (what
  a YieldGroup runs, through :class:`soda_optimizer.systems.FairYield`);
- :mod:`.anytime` -- the default: MCB8 (or the re-placement heuristic) first, then the MILP warm-started from it
  within the rest of the deadline; the best of both with its proven bound (ours: 2.5 + 3.4 + 6.1);
- :mod:`.generator` -- the synthetic instances of 4.1 and the parallel-job sizes of 5.2.

``allocate(instance, algorithm="anytime", deadline_s=1.0)`` runs one algorithm by name (:data:`ALLOCATORS`; a named
heuristic for comparison);
``reallocate(instance, previous, budget, method)`` re-places a running allocation (6.1).
"""

from __future__ import annotations

from collections.abc import Callable

from . import epoch as epoch
from .anytime import solve_anytime
from .dynamic import reallocate
from .generator import Spec, generate, grid
from .greedy import solve_greedy
from .mcb import solve_mcb
from .milp import lp_bound, solve_milp
from .model import Allocation, Instance, Job, Status, violations
from .rounding import solve_rounding

Allocator = Callable[[Instance, float | None, int], Allocation]  #: (instance, deadline_s, seed) -> answer


def _greedy(sort: bool, backtrack: bool) -> Allocator:
    return lambda inst, deadline_s, seed: solve_greedy(inst, sort=sort, backtrack=backtrack, deadline_s=deadline_s)


def _mcb(variant: int) -> Allocator:
    return lambda inst, deadline_s, seed: solve_mcb(inst, variant=variant, deadline_s=deadline_s)


def _rounding(nonzero: bool) -> Allocator:
    return lambda inst, deadline_s, seed: solve_rounding(inst, nonzero=nonzero, deadline_s=deadline_s, seed=seed)


#: algorithm name -> allocator: the anytime exact default, the MILP (2.5), MCB1..8 (3.4), the greedy GR/SG/GB/SGB (3.3), RRND/RRNZ (3.2)
ALLOCATORS: dict[str, Allocator] = {
    "anytime": lambda inst, deadline_s, seed: solve_anytime(inst, deadline_s=deadline_s),
    "milp": lambda inst, deadline_s, seed: solve_milp(inst, deadline_s=deadline_s),
    **{f"mcb{v}": _mcb(v) for v in range(1, 9)},
    "gr": _greedy(False, False),
    "sg": _greedy(True, False),
    "gb": _greedy(False, True),
    "sgb": _greedy(True, True),
    "rrnd": _rounding(False),
    "rrnz": _rounding(True),
}
ALGORITHMS = tuple(ALLOCATORS)


DEFAULT = "anytime"


def allocate(instance: Instance, algorithm: str = DEFAULT, deadline_s: float | None = 1.0, seed: int = 0) -> Allocation:
    """Run ``algorithm`` (one of :data:`ALGORITHMS`, any case) on ``instance`` under ``deadline_s`` seconds."""
    run = ALLOCATORS.get(algorithm.lower())
    if run is None:
        raise ValueError(f"unknown algorithm {algorithm!r}; one of {', '.join(ALGORITHMS)}")
    return run(instance, deadline_s, seed)


__all__ = [
    "ALGORITHMS",
    "ALLOCATORS",
    "DEFAULT",
    "Allocation",
    "Instance",
    "Job",
    "Spec",
    "Status",
    "allocate",
    "generate",
    "grid",
    "lp_bound",
    "reallocate",
    "solve_anytime",
    "solve_greedy",
    "solve_mcb",
    "solve_milp",
    "solve_rounding",
    "violations",
]

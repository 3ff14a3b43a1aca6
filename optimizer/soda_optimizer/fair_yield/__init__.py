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
- :mod:`.generator` -- the synthetic instances of 4.1 and the parallel-job sizes of 5.2.

``allocate(instance, algorithm="mcb8", deadline_s=1.0)`` runs one algorithm by name.
"""

from __future__ import annotations

from .dynamic import reallocate
from .generator import Spec, generate, grid
from .greedy import solve_greedy
from .mcb import solve_mcb
from .milp import lp_bound, solve_milp
from .model import Allocation, Instance, Job, Status, violations
from .rounding import solve_rounding

ALGORITHMS = (
    "milp",
    "mcb1",
    "mcb2",
    "mcb3",
    "mcb4",
    "mcb5",
    "mcb6",
    "mcb7",
    "mcb8",
    "gr",
    "sg",
    "gb",
    "sgb",
    "rrnd",
    "rrnz",
)


def allocate(instance: Instance, algorithm: str = "mcb8", deadline_s: float | None = 1.0, seed: int = 0) -> Allocation:
    """Run ``algorithm`` (one of :data:`ALGORITHMS`) on ``instance`` under ``deadline_s`` seconds."""
    name = algorithm.lower()
    if name == "milp":
        return solve_milp(instance, deadline_s=deadline_s)
    if name.startswith("mcb") and name[3:].isdigit() and 1 <= int(name[3:]) <= 8:
        return solve_mcb(instance, variant=int(name[3:]), deadline_s=deadline_s)
    greedy = {"gr": (False, False), "sg": (True, False), "gb": (False, True), "sgb": (True, True)}
    if name in greedy:
        sort, backtrack = greedy[name]
        return solve_greedy(instance, sort=sort, backtrack=backtrack, deadline_s=deadline_s)
    if name in ("rrnd", "rrnz"):
        return solve_rounding(instance, nonzero=name == "rrnz", deadline_s=deadline_s, seed=seed)
    raise ValueError(f"unknown algorithm {algorithm!r}; one of {', '.join(ALGORITHMS)}")


__all__ = [
    "ALGORITHMS",
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
    "solve_greedy",
    "solve_mcb",
    "solve_milp",
    "solve_rounding",
    "violations",
]

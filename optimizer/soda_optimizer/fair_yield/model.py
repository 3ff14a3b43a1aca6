"""The VCSCHED model (Stillwell, Schanzenbach, Vivien & Casanova, "Resource Allocation Algorithms for Virtualized
Service Hosting Platforms" / virtual-cluster allocation, sections 2.3 and 5.1). Pure: no Kubernetes, no I/O.

Inputs (frozen pydantic models, validated):
- :class:`Job` -- a job of ``tasks`` identical tasks (section 5.1; ``tasks=1`` is the sequential job of 2.3), each
  task needing CPU fraction ``alpha`` (alpha_i, the fraction of one host it would use alone) and a rigid memory
  fraction ``mem`` (m_i);
- :class:`Instance` -- the jobs and the hosts, each host with a CPU and a memory capacity.

Output: :class:`Allocation` -- per task its host and its yield (the CPU it gets divided by alpha), the minimum
yield (the VCSCHED objective), the average per-job yield (the second phase of section 3.5 / 5.1), and a status.

:class:`Tasks` is the flat numpy view all algorithms work on: task ``t`` belongs to job ``job[t]``.

Departures from the paper, on purpose:
- hosts may have capacities other than 1 (``cpu``/``mem`` per host, in the same units as alpha and m). The paper's
  hosts are identical with capacity 1 (section 2.3) and that is the default; every constraint is written with
  the capacity in place of 1, and the identical-host case is detected where the paper's closed forms (the LP
  bound of 3.1) or symmetry breaking in the MILP depend on it;
- alpha must be > 0 (a yield divides by it); the paper allows 0 <= alpha_i <= 1;
- a job may be restricted to some hosts (``Job.hosts``: the hosts its tasks may use; None: every host), the
  Kubernetes side's nodeSelector, required node affinity and taints/tolerations (issue 47). The paper's tasks may
  go anywhere; every algorithm here keeps a task off the hosts it may not use (:attr:`Tasks.allowed`), and
  hosts are only interchangeable (symmetry breaking, the closed-form LP bound) when no job is restricted;
- ``status`` is one of ``optimal`` (proven: an exact MILP optimum, or a minimum yield equal to the LP bound),
  ``feasible`` (a heuristic's answer), ``deadline`` (the deadline passed; the best answer so far, possibly none)
  and ``infeasible`` (no placement: proven for the MILP, a failure for a heuristic -- the paper's "failure").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

Status = Literal["optimal", "feasible", "deadline", "infeasible"]
EPS = 1e-9  #: slack allowed when checking a capacity (floating point)

Frac = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
PosFrac = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
PosFinite = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Job(_Frozen):
    """A job of ``tasks`` identical tasks; each task needs ``alpha`` CPU (of a capacity-1 host) and ``mem`` memory."""

    alpha: PosFrac
    mem: Frac
    tasks: int = Field(default=1, ge=1)
    hosts: tuple[int, ...] | None = None  #: the hosts its tasks may use (None: every host; ours, issue 47)


class Instance(_Frozen):
    """Jobs and hosts. ``cpu``/``mem`` give one capacity per host (default: ``hosts`` hosts of capacity 1)."""

    jobs: tuple[Job, ...]
    hosts: int = Field(ge=1)
    cpu: tuple[PosFinite, ...] | None = None
    mem: tuple[PosFinite, ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> Instance:
        for name in ("cpu", "mem"):
            caps = getattr(self, name)
            if caps is not None and len(caps) != self.hosts:
                raise ValueError(f"Instance.{name}: one capacity per host ({self.hosts})")
        if not self.jobs:
            raise ValueError("Instance.jobs: at least one job")
        for i, j in enumerate(self.jobs):
            if j.hosts is not None and any(h < 0 or h >= self.hosts for h in j.hosts):
                raise ValueError(f"Instance.jobs[{i}].hosts: host indices in [0, {self.hosts})")
        return self

    @classmethod
    def sequential(cls, alpha: list[float] | np.ndarray, mem: list[float] | np.ndarray, hosts: int) -> Instance:
        """Section 2.3's instance: one task per job."""
        return cls(jobs=tuple(Job(alpha=float(a), mem=float(m)) for a, m in zip(alpha, mem)), hosts=hosts)

    def tasks(self) -> Tasks:
        return Tasks.of(self)


@dataclass(frozen=True)
class Tasks:
    """Flat numpy view of an instance: one row per task."""

    alpha: np.ndarray  # (T,) CPU need of each task
    mem: np.ndarray  # (T,) memory of each task
    job: np.ndarray  # (T,) job index of each task
    n_jobs: int
    cpu_cap: np.ndarray  # (H,)
    mem_cap: np.ndarray  # (H,)
    allowed: np.ndarray | None = None  # (T, H) bool: task t may use host j (None: every task every host)

    @classmethod
    def of(cls, inst: Instance) -> Tasks:
        counts = np.array([j.tasks for j in inst.jobs], dtype=np.int64)
        job = np.repeat(np.arange(len(inst.jobs)), counts)
        alpha = np.repeat(np.array([j.alpha for j in inst.jobs], dtype=float), counts)
        mem = np.repeat(np.array([j.mem for j in inst.jobs], dtype=float), counts)
        cpu_cap = np.array(inst.cpu if inst.cpu is not None else (1.0,) * inst.hosts, dtype=float)
        mem_cap = np.array(inst.mem if inst.mem is not None else (1.0,) * inst.hosts, dtype=float)
        allowed = None
        if any(j.hosts is not None for j in inst.jobs):
            per_job = np.ones((len(inst.jobs), inst.hosts), dtype=bool)
            for i, j in enumerate(inst.jobs):
                if j.hosts is not None:
                    per_job[i] = False
                    per_job[i, list(j.hosts)] = True
            allowed = None if per_job.all() else per_job[job]
        return cls(alpha, mem, job, len(inst.jobs), cpu_cap, mem_cap, allowed)

    def may(self) -> np.ndarray:
        """(T, H) bool: task t may use host j (every pair when no job is restricted)."""
        return np.ones((self.n, self.hosts), dtype=bool) if self.allowed is None else self.allowed

    @property
    def n(self) -> int:
        return int(self.alpha.shape[0])

    @property
    def hosts(self) -> int:
        return int(self.cpu_cap.shape[0])

    @property
    def identical_hosts(self) -> bool:
        """Hosts interchangeable: equal capacities and no task restricted to some of them."""
        return self.allowed is None and bool(np.all(self.cpu_cap == self.cpu_cap[0]) and np.all(self.mem_cap == self.mem_cap[0]))

    @property
    def parallel(self) -> bool:
        return self.n != self.n_jobs

    def memory_fits(self, placement: np.ndarray) -> bool:
        used = np.bincount(placement, weights=self.mem, minlength=self.hosts)
        return bool(np.all(used <= self.mem_cap + EPS))

    def cpu_load(self, placement: np.ndarray) -> np.ndarray:
        """Total alpha per host (the paper's "computational load" of section 3.3)."""
        return np.bincount(placement, weights=self.alpha, minlength=self.hosts)

    def max_min_yield(self, placement: np.ndarray) -> float:
        """The best minimum yield of a fixed placement: min(1, min_j C_j / sum of alpha on j). All tasks at that
        yield is feasible (and gives parallel jobs' tasks one yield)."""
        load = self.cpu_load(placement)
        used = load > 0
        if not np.any(used):
            return 1.0
        return float(min(1.0, float(np.min(self.cpu_cap[used] / load[used]))))


class Allocation(_Frozen):
    """An answer. ``placement[t]``/``task_yield[t]``: host and yield of task t (flat, job by job); empty when no
    placement was found. ``job_yield[i]``: per-job yield (total CPU given / total CPU needed, section 5.1).
    ``min_yield``: the VCSCHED objective; ``avg_yield``: mean of ``job_yield`` (per task for sequential jobs).
    ``bound``: an upper bound on the optimal minimum yield when the algorithm has one (LP, MILP)."""

    algorithm: str
    status: Status
    placement: tuple[int, ...] = ()
    task_yield: tuple[float, ...] = ()
    job_yield: tuple[float, ...] = ()
    min_yield: float = 0.0
    avg_yield: float = 0.0
    bound: float | None = None
    runtime_s: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.placement)

    @property
    def gap(self) -> float | None:
        """(bound - min_yield) / bound: how far the answer may be from the optimum (0: proven optimal); None
        without a bound or a placement."""
        if self.bound is None or not self.ok:
            return None
        return max(0.0, (self.bound - self.min_yield) / self.bound) if self.bound > 0 else 0.0


def host_cpu_used(tasks: Tasks, placement: np.ndarray, task_yield: np.ndarray) -> np.ndarray:
    """CPU given on each host: sum of alpha * yield."""
    return np.bincount(placement, weights=tasks.alpha * task_yield, minlength=tasks.hosts)


def violations(inst: Instance, alloc: Allocation, tol: float = 1e-6) -> list[str]:
    """Every constraint of section 2.3 (and 5.1's equal yields) an allocation breaks; empty when it is valid."""
    if not alloc.ok:
        return []
    t = inst.tasks()
    out: list[str] = []
    p = np.asarray(alloc.placement, dtype=np.int64)
    y = np.asarray(alloc.task_yield, dtype=float)
    if p.shape != (t.n,) or y.shape != (t.n,):
        return [f"placement/yield length {p.shape}/{y.shape} != {t.n} tasks"]
    if np.any(p < 0) or np.any(p >= t.hosts):
        out.append("task on no host (eq. 2)")
        return out
    if t.allowed is not None and not np.all(t.allowed[np.arange(t.n), p]):
        out.append(f"tasks on a host they may not use: {np.flatnonzero(~t.allowed[np.arange(t.n), p]).tolist()}")
    if np.any(y < -tol) or np.any(y > 1 + tol):
        out.append("yield outside [0, 1] (eq. 10)")
    mem = np.bincount(p, weights=t.mem, minlength=t.hosts)
    if np.any(mem > t.mem_cap + tol):
        out.append(f"memory exceeded on hosts {np.flatnonzero(mem > t.mem_cap + tol).tolist()} (eq. 1)")
    cpu = host_cpu_used(t, p, y)
    if np.any(cpu > t.cpu_cap + tol):
        out.append(f"CPU exceeded on hosts {np.flatnonzero(cpu > t.cpu_cap + tol).tolist()} (eq. 8)")
    if t.n and abs(float(y.min()) - alloc.min_yield) > tol:
        out.append(f"min_yield {alloc.min_yield} != min of task yields {float(y.min())}")
    spread = np.zeros(t.n_jobs)
    np.maximum.at(spread, t.job, y)
    low = np.ones(t.n_jobs)
    np.minimum.at(low, t.job, y)
    if np.any(spread - low > tol):
        out.append("tasks of one parallel job with different yields (eq. 20)")
    return out

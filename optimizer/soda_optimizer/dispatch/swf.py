"""Workloads in the Standard Workload Format (SWF, Feitelson's Parallel Workloads Archive) and the trace
transformations of section 6.3.1. Pure: parsing and formatting work on strings; randomness comes from a seed.

- :func:`parse_swf` / :func:`format_swf` -- the 18-field SWF line format (``;`` starts a header comment; -1 means
  unknown);
- :func:`lublin_swf` -- a synthetic SWF trace from the Lublin & Feitelson (2003) parallel workload model, used when
  no real trace is given (the paper used the SDSC-Par96 log: never committed; ``hack/fetch-trace.sh`` fetches it);
- :func:`to_jobs` -- section 6.3.1: consecutive sample of ``rate * len`` jobs from a random start, runtime x0.001,
  gaps between submissions x0.1, jobs submitted within 1 s grouped into one batch (same submission time), tasks =
  allocated processors each taking the (scaled) runtime, priority by user-group size (fewer jobs -> higher
  priority), deadline = 2 x runtime if tasks < 4 else 2 x runtime x tasks / 4 (relative to submission).

What :func:`lublin_swf` differs in from the real SDSC-Par96 trace (32,135 jobs on the 416-node Intel Paragon, 1996):
- it is a statistical model, not the log: sizes are 1 with probability 0.244, else 2^u with u two-stage uniform
  (0.8 .. 4.5 .. log2 416 with probability 0.86 below the middle point, 57.6% of jobs rounded to a power of two);
  log runtimes are hyper-gamma (gamma(4.2, 0.94) / gamma(312, 0.03), the first with probability
  p = -0.0054 * size + 0.78); these are the model's "typeless" parameters fitted to several logs, not to SDSC-Par96
  alone, with UHi set to log2(416) and UMed = UHi - 2.5 (the model's own advice) for this machine's size;
- inter-arrival times: the model's gamma(10.46, 0.4871) on the log inter-arrival time *without its daily cycle*,
  rescaled so that the mean gap is that of SDSC-Par96 (one year / 32,135 jobs ~ 981 s);
- runtimes are capped at 10 days (the model re-draws above its TOO_MUCH_TIME; the value here is ours);
- the model has no users: user ids are drawn i.i.d. from a Zipf(1) law over 98 users, so user-group sizes (hence the
  priorities) have a heavy-tailed distribution like a real log's but no per-user burstiness;
- no cancelled jobs, wait times, memory, or requested times (all -1), status 1 for every job.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .model import Job

SDSC_PAR96_JOBS = 32135
SDSC_PAR96_NODES = 416
SDSC_PAR96_MEAN_GAP = 365 * 86400 / SDSC_PAR96_JOBS


@dataclass(frozen=True)
class SwfJob:
    """The SWF fields we use (1 job number, 2 submit, 3 wait, 4 run time, 5 allocated processors, 8 requested
    processors, 11 status, 12 user id, 13 group id); the others are written as -1."""

    number: int
    submit: float
    run: float
    procs: int
    wait: float = -1
    req_procs: int = -1
    status: int = 1
    user: int = -1
    group: int = -1

    @property
    def tasks(self) -> int:
        return self.procs if self.procs > 0 else self.req_procs


def parse_swf(text: str) -> tuple[SwfJob, ...]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(";"):
            continue
        f = line.split()
        if len(f) < 18:
            raise ValueError(f"SWF line with {len(f)} fields (18 expected): {line!r}")
        out.append(
            SwfJob(
                number=int(f[0]),
                submit=float(f[1]),
                wait=float(f[2]),
                run=float(f[3]),
                procs=int(float(f[4])),
                req_procs=int(float(f[7])),
                status=int(f[10]),
                user=int(f[11]),
                group=int(f[12]),
            )
        )
    return tuple(out)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3f}"


def format_swf(jobs: Iterable[SwfJob], header: Sequence[str] = ()) -> str:
    lines = [f"; {h}" for h in header]
    for j in jobs:
        fields = [j.number, j.submit, j.wait, j.run, j.procs, -1, -1, j.req_procs, -1, -1, j.status, j.user]
        fields += [j.group, -1, -1, -1, -1, -1]
        lines.append(" ".join(_num(float(v)) for v in fields))
    return "\n".join(lines) + "\n"


def lublin_swf(
    n_jobs: int = SDSC_PAR96_JOBS,
    seed: int = 0,
    *,
    max_procs: int = SDSC_PAR96_NODES,
    users: int = 98,
    mean_gap: float = SDSC_PAR96_MEAN_GAP,
) -> tuple[SwfJob, ...]:
    """A synthetic SWF trace (see the module docstring for what differs from SDSC-Par96)."""
    rng = np.random.default_rng(seed)
    uhi = math.log2(max_procs)
    ulow, umed, uprob = 0.8, uhi - 2.5, 0.86
    u = rng.random(n_jobs)
    low = rng.uniform(ulow, umed, n_jobs)
    high = rng.uniform(umed, uhi, n_jobs)
    par = np.where(rng.random(n_jobs) < uprob, low, high)
    pow2 = u <= 0.244 + 0.576
    par = np.where(pow2, np.floor(par + 0.5), par)
    procs = np.where(u <= 0.244, 1, np.floor(2.0**par + 0.5)).astype(int)
    procs = np.clip(procs, 1, max_procs)
    p = np.clip(-0.0054 * procs + 0.78, 0.0, 1.0)
    cap = math.log(10 * 86400)
    logrt = np.empty(n_jobs)
    todo = np.arange(n_jobs)
    while todo.size:
        first = rng.random(todo.size) < p[todo]
        draw = np.where(first, rng.gamma(4.2, 0.94, todo.size), rng.gamma(312.0, 0.03, todo.size))
        ok = draw <= cap
        logrt[todo[ok]] = draw[ok]
        todo = todo[~ok]
    run = np.maximum(1.0, np.round(np.exp(logrt)))
    gaps = np.exp(rng.gamma(10.2303 * 1.0225, 0.4871, n_jobs))
    gaps = np.minimum(gaps, 30 * 86400)
    gaps *= mean_gap / gaps.mean()
    submit = np.round(np.cumsum(gaps) - gaps[0])
    weights = 1.0 / np.arange(1, users + 1)
    user = rng.choice(users, size=n_jobs, p=weights / weights.sum()) + 1
    return tuple(
        SwfJob(number=i + 1, submit=float(submit[i]), run=float(run[i]), procs=int(procs[i]), user=int(user[i]))
        for i in range(n_jobs)
    )


def sample_consecutive(jobs: Sequence[SwfJob], rate: float, seed: int) -> tuple[SwfJob, ...]:
    """Section 6.3.1: ``max(1, round(rate * len))`` consecutive jobs from a random start."""
    usable = [j for j in jobs if j.run > 0 and j.tasks > 0]
    n = max(1, min(len(usable), round(rate * len(usable))))
    start = int(np.random.default_rng(seed).integers(0, len(usable) - n + 1))
    return tuple(usable[start : start + n])


def priorities(jobs: Sequence[SwfJob]) -> dict[int, int]:
    """Section 6.3.1: same user id -> same priority; the group with fewer jobs gets the higher priority.

    Dense rank: the largest group gets 1, each smaller group size one more (equal sizes share a priority)."""
    sizes = Counter(j.user for j in jobs)
    levels = sorted(set(sizes.values()), reverse=True)
    rank = {s: i + 1 for i, s in enumerate(levels)}
    return {u: rank[s] for u, s in sizes.items()}


def deadline_of(runtime: float, tasks: int) -> float:
    """Section 6.3.1's relative deadline: 2 x runtime if tasks < 4, else 2 x runtime x tasks / 4."""
    return 2.0 * runtime if tasks < 4 else 2.0 * runtime * tasks / 4.0


def to_jobs(
    jobs: Sequence[SwfJob],
    *,
    runtime_scale: float = 0.001,
    gap_scale: float = 0.1,
    batch_window: float = 1.0,
    kind_of: str = "size",
) -> tuple[Job, ...]:
    """Section 6.3.1's transformations of (already sampled) SWF jobs into :class:`~.model.Job` s.

    The first job arrives at 0. ``kind_of="size"`` gives jobs of fewer than 4 tasks the kind ``"small"`` and the
    others ``"large"`` (the speed matrix's rows; the paper has one kind per job)."""
    jobs = [j for j in jobs if j.run > 0 and j.tasks > 0]
    prio = priorities(jobs)
    out: list[Job] = []
    t = 0.0
    prev: float | None = None
    batch_at = -math.inf
    for j in jobs:
        if prev is not None:
            t += max(0.0, j.submit - prev) * gap_scale
        prev = j.submit
        if t - batch_at > batch_window:
            batch_at = t
        runtime = j.run * runtime_scale
        kind = ("small" if j.tasks < 4 else "large") if kind_of == "size" else "default"
        out.append(
            Job(
                id=f"j{j.number}",
                priority=prio[j.user],
                arrival=batch_at,
                task_work=(runtime,) * j.tasks,
                deadline=batch_at + deadline_of(runtime, j.tasks),
                kind=kind,
            )
        )
    return tuple(out)


def trace_jobs(
    swf_text: str | None = None,
    *,
    seed: int = 0,
    sample_rate: float = 0.01,
    model_jobs: int = SDSC_PAR96_JOBS,
) -> tuple[Job, ...]:
    """The jobs of one sampled workload: from ``swf_text`` if given, else from :func:`lublin_swf` (seeded with
    ``seed``); the sample's start is drawn with ``seed`` too."""
    trace = parse_swf(swf_text) if swf_text is not None else lublin_swf(model_jobs, seed)
    return to_jobs(sample_consecutive(trace, sample_rate, seed + 1))

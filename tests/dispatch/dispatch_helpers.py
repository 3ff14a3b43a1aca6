"""Builders and hypothesis strategies shared by the dispatch tests."""

from __future__ import annotations

from hypothesis import strategies as st

from soda_optimizer.dispatch import (
    DeadlinePolicy,
    EdfPolicy,
    Failure,
    Job,
    JobView,
    PriorityPolicy,
    ProportionPolicy,
    SpeedMatrix,
    Worker,
    WorkerView,
    Workload,
    WorkloadPolicy,
)

CLASSES = ("a", "b", "c")
KINDS = ("k1", "k2")


def jv(
    id: str,
    priority: int = 1,
    queued: int = 1,
    running: int = 0,
    work: float | None = None,
    deadline: float | None = None,
    kind: str = "k1",
    arrival: float = 0.0,
) -> JobView:
    return JobView(
        id, priority, arrival, deadline, kind, queued, running, float(queued + running) if work is None else work
    )


def free(n: int, cls: str = "a", start: int = 0) -> list[WorkerView]:
    return [WorkerView(f"w{i:02d}", cls) for i in range(start, start + n)]


ALL_POLICIES = [
    PriorityPolicy(0.0),
    PriorityPolicy(0.3),
    PriorityPolicy(0.0, fill="deadline"),
    ProportionPolicy(),
    ProportionPolicy(fill="priority"),
    WorkloadPolicy(1.0, fill=None),
    WorkloadPolicy(5.0, fill="priority"),
    DeadlinePolicy(None),
    DeadlinePolicy("priority"),
    DeadlinePolicy("deadline"),
    DeadlinePolicy("deadline", reading="text"),
    PriorityPolicy(0.2, reading="pseudo-code"),
    ProportionPolicy(reading="pseudo-code"),
    EdfPolicy(),
]

speeds_st = st.builds(
    lambda vals: SpeedMatrix(
        prior=1.0, table={(k, c): vals[i * 3 + j] for i, k in enumerate(KINDS) for j, c in enumerate(CLASSES)}
    ),
    st.lists(st.floats(0.25, 4.0), min_size=6, max_size=6),
)


@st.composite
def decision_inputs(draw: st.DrawFn) -> tuple[list[JobView], list[WorkerView], float]:
    n_jobs = draw(st.integers(1, 6))
    jobs = [
        JobView(
            id=f"j{i}",
            priority=draw(st.integers(0, 4)),
            arrival=float(draw(st.integers(0, 5))),
            deadline=draw(st.one_of(st.none(), st.floats(0.0, 60.0))),
            kind=draw(st.sampled_from(KINDS)),
            queued=(q := draw(st.integers(0, 8))),
            running=(r := draw(st.integers(0, 3))),
            remaining_work=draw(st.floats(0.1, 50.0)) if q + r else 0.0,
        )
        for i in range(n_jobs)
    ]
    jobs = [j for j in jobs if j.remaining_tasks > 0] or [jv("jx", queued=2)]
    workers: list[WorkerView] = []
    for j in jobs:
        for k in range(j.running):
            workers.append(WorkerView(f"r{j.id}_{k}", draw(st.sampled_from(CLASSES)), j.id))
    for i in range(draw(st.integers(0, 12))):
        workers.append(WorkerView(f"f{i:02d}", draw(st.sampled_from(CLASSES))))
    return jobs, workers, draw(st.floats(0.0, 30.0))


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    n_workers = draw(st.integers(1, 5))
    workers = tuple(
        Worker(f"w{i}", draw(st.sampled_from(CLASSES)), draw(st.sampled_from([0.5, 1.0, 2.0])))
        for i in range(n_workers)
    )
    jobs = tuple(
        Job(
            id=f"j{i}",
            priority=draw(st.integers(0, 3)),
            arrival=float(draw(st.integers(0, 20))),
            task_work=tuple(draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=1, max_size=6))),
            deadline=draw(st.one_of(st.none(), st.floats(1.0, 40.0))),
            kind=draw(st.sampled_from(KINDS)),
            declared_work=draw(st.booleans()),
        )
        for i in range(draw(st.integers(1, 5)))
    )
    failures = []
    for w in workers:
        if draw(st.booleans()):
            down = float(draw(st.integers(0, 15))) + draw(st.sampled_from([0.0, 0.25, 0.5]))
            failures.append(Failure(w.id, down, down + draw(st.sampled_from([0.5, 1.0, 4.0]))))
    return Workload(jobs, workers, failures=tuple(failures))

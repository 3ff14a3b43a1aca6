"""The Merit Driven Rank Manager, MDRM (SODA paper section 6.2.2).

"The rank of a job in the MDRM will be calculated based on its merit, which is the weighted sum of
one or more terms." Lower merit is better (bucket 1 is rank 1). kubesoda's terms:

- ``rank``: the job's declared rank (``spec.rank``; 1 best);
- ``owner``: the owner's *external priority* (``Merit.owner_priority``, else
  ``Merit.default_owner_priority``; lower = more important), the paper's "relatively static" term;
- ``age``: hours from the job's creation (``Job.created``, RFC 3339) to ``Scenario.now``; a
  negative weight makes old jobs better (ageing, against starvation). A job without a creation
  time, a Scenario without ``now``, or a creation after ``now`` (clock skew) has age 0.

The weights may "depend on time of day, day of week": the first ``Merit.windows`` entry that
matches ``Scenario.now`` supplies them, else ``Merit.weights``. A window matches when the ISO
weekday (1 = Monday) of ``now`` is in ``days`` and ``start_hour <= hour < end_hour``; when
``start_hour > end_hour`` the window wraps past midnight and ``days`` are the days it *starts* on
(e.g. Friday 22 to 6 also covers Saturday 0:00-5:59). Hours are read in ``now``'s own time zone;
naive datetimes are taken as UTC. Without ``now`` the defaults apply.

Buckets: "the jobs with merit less than B will go into the first bucket and assigned a rank of 1;
... greater than or equal to B but less than 2B ... rank of 2, and so on." Merit can be negative
(negative weights), so we keep the paper's bucket edges (multiples of B) and shift them down by
whole buckets until the best job is in bucket 1: ``rank = floor((merit - s) / B) + 1`` with
``s = floor(min merit / B) * B``, the minimum over the jobs that are not required. Empty buckets
between jobs stay (ranks may skip numbers, as the paper's do); only their order matters.

Departures from the paper, on purpose:

- required jobs keep rank 1 whatever their merit (macroQ admits them first anyway; the BDRM does
  the same, and section 5.1.1 assumes "without loss of generality" required jobs have rank 1);
- the paper's "precomputed analytic terms" (failure and deadline factors) need analytic modules
  outside the scope of System S and of kubesoda; age is the one dynamic term computed here;
- the optional site-administrator override is the job's ``required`` flag (no separate override).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from ..model import Job, Merit, MeritWeights, MeritWindow, Scenario


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def window_matches(window: MeritWindow, now: datetime) -> bool:
    """Whether ``window`` is in force at ``now`` (module docstring)."""
    day, hour = now.isoweekday(), now.hour
    if window.start_hour < window.end_hour:
        return day in window.days and window.start_hour <= hour < window.end_hour
    previous = (now - timedelta(days=1)).isoweekday()
    return (day in window.days and hour >= window.start_hour) or (previous in window.days and hour < window.end_hour)


def active_weights(merit: Merit, now: datetime | None) -> MeritWeights:
    """The weights of the first window matching ``now``, else the defaults."""
    if now is not None:
        for w in merit.windows:
            if window_matches(w, now):
                return w.weights
    return merit.weights


def age_hours(job: Job, now: datetime | None) -> float:
    """Hours from the job's creation to ``now`` (0 when either is unknown, or creation is later)."""
    if now is None or not job.created:
        return 0.0
    try:
        created = datetime.fromisoformat(job.created)
    except ValueError as e:
        raise ValueError(f"job '{job.name}': created '{job.created}' is not an RFC 3339 time") from e
    return max(0.0, (_aware(now) - _aware(created)).total_seconds() / 3600.0)


def merit_of(job: Job, merit: Merit, weights: MeritWeights, now: datetime | None) -> float:
    """The job's merit: the weighted sum of its terms (lower is better)."""
    priority = merit.owner_priority.get(job.owner, merit.default_owner_priority)
    return weights.rank * job.rank + weights.owner * priority + weights.age * age_hours(job, now)


def merits(scenario: Scenario) -> dict[str, float]:
    """Every job's merit under the weights in force at ``scenario.now``."""
    m = scenario.policy.merit
    w = active_weights(m, scenario.now)
    return {j.name: merit_of(j, m, w, scenario.now) for j in scenario.jobs}


def buckets(values: dict[str, float], size: float) -> dict[str, int]:
    """Rank = bucket number of each merit: floor((merit - s) / B) + 1, s = floor(min / B) * B."""
    if not values:
        return {}
    shift = math.floor(min(values.values()) / size) * size
    return {k: max(1, math.floor((v - shift) / size) + 1) for k, v in values.items()}


def merit_ranks(scenario: Scenario) -> dict[str, int]:
    """The MDRM's rank for every job: required jobs 1, the others their merit bucket."""
    m = merits(scenario)
    ranks = buckets({j.name: m[j.name] for j in scenario.jobs if not j.required}, scenario.policy.merit.bucket)
    ranks.update({j.name: 1 for j in scenario.jobs if j.required})
    return ranks


def merit_rank_manager(scenario: Scenario) -> Scenario:
    """MDRM as a Scenario -> Scenario step: every job's ``rank`` is replaced by the MDRM's."""
    ranks = merit_ranks(scenario)
    jobs = tuple(j.model_copy(update={"rank": ranks[j.name]}) for j in scenario.jobs)
    return scenario.model_copy(update={"jobs": jobs})

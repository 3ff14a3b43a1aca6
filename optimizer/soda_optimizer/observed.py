"""Observed importance: SODA's objective evaluated on measured rates (SODA paper, sections 3 and 7.2).

The planner projects a job's importance from resource functions (:mod:`.importance`); section 7.2
judges a placement by what the streams really carry: the ingest rate at the sources and the
weighted value at the sinks. This module takes per-PE observations (what the PE metrics contract,
docs/pe-metrics.md, reports: tuples received and emitted per stream, and the mips a PE used) and
evaluates the same objective on them, job by job, with the same attribution as the projection
(a stream's value to its consumer's job, a sink's to its PE's job; :func:`.soda.macroq`).

Which rate stands for a stream: what its consumer *received* (a tuple lost on a saturated link
carries no value), for a sink what its PE *emitted* on ``sink``; an imported stream is received
under ``import:<exporting job>/<export>``. A stream nobody reported counts 0 (a PE without
observations is reported as such, so a missing scrape is not mistaken for a stopped stream).

Pure: no I/O; the operator's :mod:`soda_operator.observe` queries Prometheus and calls it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .graph import GluedGraph
from .importance import value
from .model import split_pe_id

PRIMAL, SINK = "primal", "sink"


class PEObservation(BaseModel):
    """What one PE (all its instances together) was seen doing over the observation window:
    tuples/s per stream label, and mips used (None when no CPU series was found)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    received: dict[str, float] = Field(default_factory=dict)
    emitted: dict[str, float] = Field(default_factory=dict)
    mips: float | None = None
    # tuples/s offered per input stream label (taken in + left waiting or blocked upstream), when the
    # data plane reports it (issue 38; docs/learn.md "Which rate is the input rate")
    offered: dict[str, float] = Field(default_factory=dict)
    # per input stream label, the share of the window its upstream connections waited for room in the
    # PE's full input queue (summed over connections and instances): above 0 the offered rate is
    # only a lower bound (the SDK's ``kubesoda_pe_input_blocked_seconds_total``)
    blocked: dict[str, float] = Field(default_factory=dict)


class JobObservation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    job: str
    ingest: float  # tuples/s received on primal streams by the job's sources
    importance: float  # sum of weight x value(observed rate) over the job's streams and sinks
    projected: float  # the plan's projection for the same job
    observed_pes: int  # PEs with at least one observed series
    pes: int

    @property
    def ratio(self) -> float | None:
        """observed / projected importance (None when nothing was projected)."""
        return self.importance / self.projected if self.projected > 1e-12 else None


def stream_label(glued: GluedGraph, u: str, v: str) -> str:
    """The ``stream`` label under which the consumer ``v`` receives the edge u -> v."""
    d = glued.graph.edges[u, v]
    ju, pu = split_pe_id(u)
    jv, pv = split_pe_id(v)
    if not d.get("inter_job"):
        return f"{pu}->{pv}"
    exp = d.get("export") or pu
    return f"import:{ju}/{exp}"


def evaluate(glued: GluedGraph, observed: Mapping[str, PEObservation], projected: Mapping[str, float]) -> dict[str, JobObservation]:
    """Per job of ``glued``: observed ingest and importance next to ``projected`` (job -> importance).

    ``observed`` maps a global PE id (``job:pe``) to its observation.
    """
    imp: dict[str, float] = {}
    for u, v, d in glued.graph.edges(data=True):
        w, vf = d["weight"], d["value"]
        if w <= 0 or vf.kind == "zero":
            continue
        obs = observed.get(v)
        rate = obs.received.get(stream_label(glued, u, v), 0.0) if obs else 0.0
        job = glued.graph.nodes[v]["job"]
        imp[job] = imp.get(job, 0.0) + float(w * value(vf, np.array([rate]))[0])
    ingest: dict[str, float] = {}
    for p, d in glued.graph.nodes(data=True):
        obs = observed.get(p)
        if obs is None:
            continue
        if d["primal_rate"] > 0:
            ingest[d["job"]] = ingest.get(d["job"], 0.0) + obs.received.get(PRIMAL, 0.0)
        for w, vf in d["sinks"]:
            if w > 0:
                imp[d["job"]] = imp.get(d["job"], 0.0) + float(w * value(vf, np.array([obs.emitted.get(SINK, 0.0)]))[0])
    out: dict[str, JobObservation] = {}
    for job in glued.choice:
        pes = glued.pes_of(job)
        out[job] = JobObservation(job=job, ingest=ingest.get(job, 0.0), importance=imp.get(job, 0.0),
                                  projected=float(projected.get(job, 0.0)),
                                  observed_pes=sum(1 for p in pes if p in observed), pes=len(pes))
    return out

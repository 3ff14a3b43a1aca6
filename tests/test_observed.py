"""Observed importance: on rates equal to the projection it is the projection (the Evaluator and
macroQ's per-job split are the oracle); a stream that loses tuples loses exactly its value."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer import workloads
from soda_optimizer.graph import glue
from soda_optimizer.importance import Evaluator
from soda_optimizer.model import (
    PE,
    Export,
    Import,
    Job,
    PEKind,
    PrimalInput,
    ResourceFunction,
    Sink,
    Stream,
    Template,
    ValueFunction,
    split_pe_id,
)
from soda_optimizer.observed import PRIMAL, SINK, PEObservation, evaluate, stream_label
from soda_optimizer.soda.macroq import _importance_by_job


def as_observed(ev: Evaluator, alloc: np.ndarray) -> dict[str, PEObservation]:
    """What a perfect data plane would report for this allocation: every consumer receives what
    its producer emits on the stream, sinks emit the PE's output, sources receive their primal."""
    out = ev.outputs(alloc)[0]
    g = ev.graph
    rec: dict[str, dict[str, float]] = {p: {} for p in ev.pes}
    emi: dict[str, dict[str, float]] = {p: {} for p in ev.pes}
    for u, v, d in g.edges(data=True):
        r = float(out[ev.index[u]] * d["selectivity"])
        rec[v][stream_label(ev.glued, u, v)] = r
        emi[u][f"{split_pe_id(u)[1]}->{split_pe_id(v)[1]}"] = r
    for p, d in g.nodes(data=True):
        if d["primal_rate"] > 0:
            rec[p][PRIMAL] = float(d["primal_rate"])
        if d["sinks"]:
            emi[p][SINK] = float(out[ev.index[p]])
    return {p: PEObservation(received=rec[p], emitted=emi[p], mips=float(alloc[ev.index[p]])) for p in ev.pes}


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["dac", "lsd"]))
def test_perfect_observations_give_the_projection(seed, kind):
    t, j = workloads.dac(seed) if kind == "dac" else workloads.lsd(seed)
    s = workloads.scenario((t, j), workloads.nodes(4))
    glued = glue(s, {x.name: x.templates[0] for x in s.jobs})
    ev = Evaluator(glued)
    alloc = np.random.default_rng(seed).uniform(0, 3000, size=len(ev.pes))
    projected = _importance_by_job(ev, alloc)
    got = evaluate(glued, as_observed(ev, alloc), projected)
    for job, o in got.items():
        assert o.importance == pytest.approx(projected.get(job, 0.0), rel=1e-9, abs=1e-9)
        assert o.observed_pes == o.pes
    assert sum(o.importance for o in got.values()) == pytest.approx(float(ev.importance(alloc)[0]), rel=1e-9)


def _pipeline() -> tuple[list[Template], list[Job]]:
    src = PE(name="src", kind=PEKind.source, rf=ResourceFunction(a=1.0))
    mid = PE(name="mid", rf=ResourceFunction(a=1.0, b=1.0))
    snk = PE(name="snk", kind=PEKind.sink, rf=ResourceFunction(a=1.0, b=1.0))
    up = Template(name="up", pes=(src, mid), streams=(Stream(src="src", dst="mid", weight=2.0, value=ValueFunction(kind="linear")),),
                  primal_inputs=(PrimalInput(pe="src", rate=100.0),), exports=(Export(name="out", pe="mid"),))
    down = Template(name="down", pes=(snk,), sinks=(Sink(pe="snk", weight=3.0),))
    jobs = [Job(name="ns/up", templates=("up",)),
            Job(name="ns/down", templates=("down",), imports=(Import(job="ns/up", export="out", pe="snk", weight=1.0, value=ValueFunction(kind="linear")),))]
    return [up, down], jobs


def test_hand_computed_losses_and_imports():
    s = workloads.scenario(_pipeline(), workloads.nodes(2))
    glued = glue(s, {"ns/up": "up", "ns/down": "down"})
    assert stream_label(glued, "ns/up:mid", "ns/down:snk") == "import:ns/up/out"
    obs = {
        "ns/up:src": PEObservation(received={PRIMAL: 90.0}, emitted={"src->mid": 90.0}),
        "ns/up:mid": PEObservation(received={"src->mid": 60.0}),  # 30 tuples/s lost on the way
        "ns/down:snk": PEObservation(received={"import:ns/up/out": 50.0}, emitted={SINK: 40.0}),
    }
    got = evaluate(glued, obs, {"ns/up": 200.0, "ns/down": 400.0})
    # up: stream src->mid weight 2 x 60 received; down: import weight 1 x 50 + sink weight 3 x 40
    assert got["ns/up"].importance == pytest.approx(120.0)
    assert got["ns/up"].ingest == pytest.approx(90.0)
    assert got["ns/up"].ratio == pytest.approx(0.6)
    assert got["ns/down"].importance == pytest.approx(170.0)
    assert got["ns/down"].ingest == 0.0
    # a PE nobody reported counts nothing, and says so
    del obs["ns/down:snk"]
    got = evaluate(glued, obs, {"ns/up": 200.0, "ns/down": 400.0})
    assert got["ns/down"].importance == 0.0 and got["ns/down"].observed_pes == 0
    assert got["ns/up"].observed_pes == 2


# ------------------------------------------------------------------------------------ issue 45: attribution

_PODS = [{"metadata": {"namespace": ns, "name": pod, "labels": {"kubesoda.io/job": jb, "kubesoda.io/pe": pe}}, "spec": {"nodeName": "n1"}}
         for ns, pod, jb, pe in (("healthy", "feat-parse-0", "feat", "parse"), ("healthy", "feat-parse-1", "feat", "parse"),
                                 ("tenant", "spy-0", "spy", "p"))]
_LABEL = st.text("abcdefghijklmnopqrstuvwxyz-./>0123456789", min_size=0, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["spy-0", "feat-parse-0", "ghost-0", ""]),
                          st.dictionaries(st.sampled_from(["exported_namespace", "exported_pod", "streamjob", "pe", "job", "instance"]),
                                          _LABEL), _LABEL, st.floats(0, 1e6)), max_size=6))
def test_a_series_counts_for_the_pe_of_the_pod_scraped_never_for_the_labels_it_carries(tenant_rows):
    """Rows as the operator's queries return them (the scraped target's namespace and pod, and
    whatever else the PE exported): healthy's two pods give healthy's PE their sum; rows scraped from
    the tenant's namespace, whatever pod name and labels they carry, change nothing of healthy's and
    count only for the tenant's own PE of that pod (a pod not in the operator's index: nobody).
    (Fails on the code before issue 45, which took the PE from the ``streamjob``/``pe`` labels.)"""
    from soda_operator.soda.observe import pe_observations

    mine = [({"namespace": "healthy", "pod": "feat-parse-0", "stream": "src->parse"}, 4.0),
            ({"namespace": "healthy", "pod": "feat-parse-1", "stream": "src->parse"}, 6.0)]
    theirs = [({**extra, "namespace": "tenant", "pod": pod, "stream": stream or "x"}, v) for pod, extra, stream, v in tenant_rows]
    alone = pe_observations(mine, [], [], _PODS, {"n1": 1000.0})
    both = pe_observations(mine + theirs, [], [], _PODS, {"n1": 1000.0})
    assert both["healthy/feat:parse"] == alone["healthy/feat:parse"]
    assert alone["healthy/feat:parse"].received == {"src->parse": 10.0}
    assert set(both) <= {"healthy/feat:parse", "tenant/spy:p"}
    spy = [v for lab, v in theirs if lab["pod"] == "spy-0"]
    if spy:
        assert sum(both["tenant/spy:p"].received.values()) == pytest.approx(sum(spy))
    else:
        assert "tenant/spy:p" not in both

"""Issue 38 item 2: the input rate of a sample is the rate *offered* to the PE, not the rate it
processed. A saturated PE behind the SDK's blocking sockets receives only what it processes; what
arrives in its input queue (``kubesoda_pe_tuples_arrived_total``) is the offered rate while the
queue grows, and once the queue is full the input waits (``kubesoda_pe_input_blocked_seconds_total``)
and the arrival rate is only a lower bound.

The PE's counters are simulated by a fluid model of a queue (offered rate, CPU cost per tuple,
allocation below the need, bounded queue) as ``rate()`` over a window would read them, and go
through the operator's own path: :func:`soda_operator.soda.observe.pe_observations` (the rows
Prometheus returns) -> :func:`soda_optimizer.learn.sample_from_observation`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_operator.soda import crd
from soda_operator.soda.observe import pe_observations
from soda_optimizer.learn import sample_from_observation
from soda_optimizer.model import PEKind

NS, JOB, PE, STREAM, OUT = "ns", "job", "t", "s->t", "t->k"
W = 30.0  # the observation window, seconds
POD = {"metadata": {"namespace": NS, "name": "job-t-0", "labels": {crd.LABEL_JOB: JOB, crd.LABEL_PE: PE}},
       "spec": {"nodeName": "n1"}}


def window(offered: float, cost: float, m: float, capacity: float, q0: float, sel: float) -> dict[str, float]:
    """Counter increments over one window of a PE offered ``offered`` tuples/s, each costing ``cost``
    mips x s, allocated ``m`` mips, input queue of ``capacity`` tuples holding ``q0`` at the start."""
    done = min(offered, m / cost)  # processed tuples/s (the CPU limit)
    grow = offered - done
    fill = (capacity - q0) / grow if grow > 0 else float("inf")  # when the queue is full
    t_free = min(W, fill)
    return {"received": done * W, "emitted": sel * done * W, "arrived": offered * t_free + done * (W - t_free),
            "blocked": W - t_free, "cores": done * cost / 1000.0 * W}


def rows(c: dict[str, float], with_queue: bool = True) -> dict[str, list[tuple[dict[str, str], float]]]:
    lab = {"namespace": NS, "pod": "job-t-0"}  # the scraped target's (issue 45: its PE comes from the pod index)
    out = {"received": [({**lab, "stream": STREAM}, c["received"] / W)],
           "emitted": [({**lab, "stream": OUT}, c["emitted"] / W)],
           "cpu": [({"namespace": NS, "pod": "job-t-0"}, c["cores"] / W)]}
    if with_queue:
        out["arrived"] = [({**lab, "stream": STREAM}, c["arrived"] / W)]
        out["blocked"] = [({**lab, "stream": STREAM}, c["blocked"] / W)]
    return out


def sample(c: dict[str, float], m: float, sel: float, with_queue: bool = True):
    r = rows(c, with_queue)
    obs = pe_observations(r["received"], r["emitted"], r["cpu"], [POD], {"n1": 1000.0}, r.get("arrived"), r.get("blocked"))
    return sample_from_observation(obs[f"{NS}/{JOB}:{PE}"], PEKind.transform, m, 0.0, selectivity={OUT: sel})


@settings(max_examples=300, deadline=None)
@given(offered=st.floats(10, 5000), cost=st.floats(0.01, 2.0), share=st.floats(0.15, 0.9), sel=st.floats(0.1, 3.0),
       capacity=st.floats(1e3, 1e6), q0=st.floats(0.0, 1.0))
def test_a_saturated_pe_with_a_growing_queue_gives_the_offered_rate(offered, cost, share, sel, capacity, q0):
    need = offered * cost  # the mips that would process everything offered
    m = share * need  # saturated: the allocation is below the need
    c = window(offered, cost, m, capacity, q0 * capacity, sel)
    s = sample(c, m, sel)
    assert s is not None
    processed = m / cost
    assert s.r_p == pytest.approx(processed, rel=1e-9)  # what it took in: the processed rate
    assert s.m_used == pytest.approx(m, rel=1e-9)
    if c["blocked"] <= 0.02 * W:  # the queue grew (nearly) all window: the arrivals are the offered rate
        assert not s.censored
        assert 0.98 * offered * (1 - 1e-9) <= s.r_i <= offered * (1 + 1e-9)
        # the CPU needed for the input, from the sample's cost per processed tuple: the true need
        # (within the 2% of the window the input may wait), where the received rate (the processed
        # one) gives the allocation, share x the need
        assert 0.98 * need * (1 - 1e-9) <= s.m_used / s.r_p * s.r_i <= need * (1 + 1e-9)
        if c["blocked"] == 0:
            assert s.r_i == pytest.approx(offered, rel=1e-9)
    else:  # the queue filled: the upstream was held back, r_i only a lower bound, and said so
        assert s.censored
        assert processed * (1 - 1e-9) <= s.r_i <= offered * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(offered=st.floats(10, 5000), cost=st.floats(0.01, 2.0), spare=st.floats(1.1, 5.0))
def test_with_cpu_to_spare_offered_is_received(offered, cost, spare):
    m = spare * offered * cost
    c = window(offered, cost, m, 1000.0, 0.0, 1.0)
    s = sample(c, m, 1.0)
    assert s is not None and not s.censored and s.r_i == pytest.approx(offered) == s.r_p


def test_without_the_queue_series_a_saturated_sample_is_censored():
    """An SDK that does not export the queue series (or a simulator): the received rate, flagged as
    a lower bound, never taken for the offered rate."""
    c = window(500.0, 0.2, 40.0, 1000.0, 0.0, 1.0)
    s = sample(c, 40.0, 1.0, with_queue=False)
    assert s is not None and s.censored and s.r_i == pytest.approx(200.0)

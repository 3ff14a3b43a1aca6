"""kube/periodic.py's Acting against Kopf's own peering rule (issue 48): the replicas that act without Kopf's
daemons are exactly the ones Kopf leaves unpaused, for any set of peering records.

The oracle is Kopf's code itself: ``kopf._core.engines.peering.Peer`` (liveness) and the rule of
``process_peering_event`` (pause for a live peer of a higher priority, or of the same priority)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from kopf._core.engines.peering import Identity, Peer

from soda_operator.kube.periodic import Acting

records = st.dictionaries(
    st.sampled_from(["me", "a", "b", "c"]),
    st.fixed_dictionaries({"priority": st.integers(0, 3), "lifetime": st.integers(1, 60),
                           "age": st.floats(-5, 120, allow_nan=False)}),
    max_size=4)


def kopf_pauses(recs: dict[str, dict[str, object]], me: str, priority: int) -> bool:
    peers = [Peer(identity=Identity(i), **r) for i, r in recs.items()]
    live = [p for p in peers if not p.is_dead and p.identity != me]
    return any(p.priority > priority for p in live) or any(p.priority == priority for p in live)


@settings(max_examples=300, deadline=None)
@given(records, st.integers(0, 3))
def test_acting_is_kopfs_rule(raw, priority):
    now = time.time()
    recs = {i: {"priority": r["priority"], "lifetime": r["lifetime"],
                "lastseen": datetime.fromtimestamp(now - r["age"], UTC).isoformat()} for i, r in raw.items()}
    # a record within 50 ms of its deadline may die between the two reads: not a disagreement
    if any(abs(r["lifetime"] - r["age"]) < 0.05 for r in raw.values()):
        return
    acting = Acting("soda", "me", priority, clock=lambda: now)
    acting.records = recs
    acting.synced.set()
    assert acting() is not kopf_pauses(recs, "me", priority)


def test_standalone_always_acts_and_peering_waits_for_its_first_read():
    assert Acting()() is True
    acting = Acting("soda", "me", 5)
    assert acting() is False  # the peering object not read yet: another replica may lead
    acting.synced.set()
    assert acting() is True

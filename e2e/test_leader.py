"""Leader election: two operator replicas never both act (Kopf peering, `kubesoda run --peering`).

Two replicas share a peering name: `high` (priority 200) and `low` (priority 100), with a short
peering lifetime. The extender runs as its own process (it is stateless), so the scheduler keeps
working whichever replica leads. Each replica logs to its own file; "this replica runs the SODA
loops" marks the moments it starts acting and "applied:" every write batch.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException
from live import GROUP, ROOT, Operator, install_crds_and_policy, pe_pods, running_as_planned

POLICY = """apiVersion: kubesoda.io/v1alpha1
kind: SchedulingPolicy
metadata: {name: default}
spec: {macroEpochSeconds: 6, microEpochSeconds: 2, macroQDeadlineSeconds: 1, macroWDeadlineSeconds: 1}
"""
LIFETIME = 8
LEADS = "this replica runs the SODA loops"


def free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def leader_gauge(op: Operator) -> float | None:
    """The replica's kubesoda_leader gauge, from its /metrics."""
    port = op.args[op.args.index("--metrics-port") + 1]
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    return next((float(line.split()[1]) for line in text.splitlines() if line.startswith("kubesoda_leader ")), None)


AUDIT = Path(os.environ.get("KUBESODA_STATE", "/nonexistent")) / "logs" / "audit.log"


def audited_writes(since: float) -> list[tuple[float, str, str]]:
    """(when received, replica identity, verb and resource) of every write a kubesoda replica made
    (its user agent ``kubesoda/<identity>``) since ``since``, from the API server's audit log
    (hack/cluster-up.sh), their own peering records aside."""
    out = []
    for line in AUDIT.read_text().splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:  # the line the API server is writing right now (CI of stop 54 read one)
            continue
        ref = ev.get("objectRef") or {}
        if not str(ev.get("userAgent", "")).startswith("kubesoda/") or ref.get("resource") == "clusterkopfpeerings":
            continue
        t = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        if t >= since:
            out.append((t, ev["userAgent"].removeprefix("kubesoda/"), f"{ev['verb']} {ref.get('resource')}/{ref.get('subresource', '')}"))
    return sorted(out)


def identity(op: Operator) -> str:
    line = next(x for x in op.output().splitlines() if " as " in x and "peering " in x)
    return line.split(" as ", 1)[1].split(",", 1)[0]


@pytest.mark.skipif(not AUDIT.exists(), reason="needs the local control plane's audit log (hack/cluster-up.sh)")
def test_a_stalled_leader_never_writes_beside_its_successor(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    """One writer at any instant (issue 46): the leader SIGSTOPped in the middle of a large apply,
    past its lifetime; the standby takes over and writes; the leader continued. In the API server's
    audit log the writes of the two replicas never interleave: the old leader's, then the standby's,
    then (after its lease is held again for the margin) the old leader's."""
    install_crds_and_policy(kubectl, POLICY)
    peering, lifetime = f"e2e-{uuid.uuid4().hex[:6]}", 10
    ext = Operator("extender", "--port", str(extender_port), log=str(tmp_path / "extender.log"))
    common = ("run", "--extender-port", "0", "--peering", peering, "--peering-lifetime", str(lifetime), "--peering-margin", "4")
    high = Operator(*common, "--priority", "200", log=str(tmp_path / "high.log"))
    low = Operator(*common, "--priority", "100", log=str(tmp_path / "low.log"))
    try:
        for op in (ext, high, low):
            op.start()
        wait_for(lambda: LEADS in high.output() and " as " in low.output(), timeout=60, what="high leads")
        lsd = (ROOT / "examples" / "lsd" / "lsd.yaml").read_text()
        docs = [d for d in lsd.split("\n---\n") if "kind: Namespace" not in d]
        docs = [d for d in docs if "kind: StreamJob" not in d] + [d for d in docs if "kind: StreamJob" in d and "imports:" not in d][:40]
        kubectl("apply", "-n", namespace, "-f", "-", timeout=300,
                input="\n---\n".join(d.replace("namespace: bench", f"namespace: {namespace}") for d in docs))
        wait_for(lambda: len(kube.core.list_namespaced_pod(namespace, label_selector="kubesoda.io/job").items) >= 20,
                 timeout=120, what="the leader creating pods")
        t_stop = time.time()
        assert high.proc is not None
        os.kill(high.proc.pid, signal.SIGSTOP)
        h, lo = identity(high), identity(low)
        wait_for(lambda: any(w[1] == lo for w in audited_writes(t_stop)), timeout=90, interval=1, what="the standby writing")
        time.sleep(3)
        os.kill(high.proc.pid, signal.SIGCONT)
        t_cont = time.time()
        wait_for(lambda: "stopped running the SODA loops" in low.output(), timeout=60, what="the standby pausing for the leader")
        time.sleep(lifetime)
        seq = audited_writes(t_stop - 30)
        # Requests already past the fence when SIGSTOP froze them (checked, not yet on the wire: a thread
        # waiting for the GIL or inside urllib3's send) reach the API server as the process resumes, at
        # most one per applier worker and the refresh, within a second of SIGCONT. The fence cannot take
        # back a request it has let through, and Kubernetes has no server-side fence for arbitrary writes
        # (docs/operator.md); everything the leader *decides* after the stall is fenced. Seen in 2 of 12 runs
        # (CI of stop 55: first one 0.5 s after SIGCONT). Those are set aside here, counted and bounded.
        inflight = [w for w in seq if w[1] == h and t_cont <= w[0] <= t_cont + 1.0]
        assert len(inflight) <= 16 + 1, inflight  # run --workers (default 16) and the Running refresh
        late = {id(w) for w in inflight}
        seq = [w for w in seq if id(w) not in late]
        runs = [w[1] for i, w in enumerate(seq) if i == 0 or seq[i - 1][1] != w[1]]
        first_low = next(w[0] for w in seq if w[1] == lo)
        after = [w[0] for w in seq if w[1] == h and w[0] > t_cont]
        print(f"\nstalled leader: writes {h}: {sum(w[1] == h for w in seq)}, {lo}: {sum(w[1] == lo for w in seq)}; the standby's first "
              f"{first_low - t_stop:.1f} s after SIGSTOP, the leader's first after SIGCONT "
              f"{(after[0] - t_cont) if after else float('nan'):.1f} s after it; runs {[('high' if r == h else 'low') for r in runs]}; "
              f"in flight at the stall: {len(inflight)}")
        assert runs in ([lo], [lo, h], [h, lo], [h, lo, h]), [(round(t - t_stop, 2), "high" if who == h else "low", what) for t, who, what in seq
                                                               if t > first_low - 1][:40]
    finally:
        if high.proc is not None and high.proc.poll() is None:
            os.kill(high.proc.pid, signal.SIGCONT)
        for op in (high, low, ext):
            op.stop()
        try:
            kube.custom.delete_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", peering)
        except ApiException:
            pass


@pytest.fixture(scope="module")
def replicas(kubectl, extender_port, kube, tmp_path_factory):
    install_crds_and_policy(kubectl, POLICY)
    peering = f"e2e-{uuid.uuid4().hex[:6]}"
    logs = tmp_path_factory.mktemp("leader")
    ext = Operator("extender", "--port", str(extender_port), log=str(logs / "extender.log"))
    ext.start()
    common = ("run", "--extender-port", "0", "--peering", peering, "--peering-lifetime", str(LIFETIME))
    high = Operator(*common, "--priority", "200", "--metrics-port", str(free_port()), log=str(logs / "high.log"))
    low = Operator(*common, "--priority", "100", "--metrics-port", str(free_port()), log=str(logs / "low.log"))
    high.start()
    time.sleep(1)
    low.start()
    yield {"high": high, "low": low, "peering": peering}
    for p in (high, low, ext):
        p.stop()
    try:
        kube.custom.delete_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", peering)
    except ApiException:
        pass


def test_only_the_leader_acts_and_the_standby_takes_over(replicas, kube, kubectl, namespace, wait_for):
    high, low = replicas["high"], replicas["low"]
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
    wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running (high leads)")
    # both replicas registered in the peering object; only the high one acts
    peers = kube.custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", replicas["peering"]).get("status") or {}
    assert sorted(p["priority"] for p in peers.values()) == [100, 200]
    assert LEADS in high.output() and "applied:" in high.output()
    assert LEADS not in low.output() and "applied:" not in low.output()
    assert leader_gauge(high) == 1 and leader_gauge(low) == 0  # what an alert on "no leader" / "two leaders" reads
    before = {p.metadata.name: p.metadata.uid for p in pe_pods(kube, namespace, "clicks")}

    # the leader dies without saying goodbye: the standby acts once the leader's keep-alive expires
    high.stop(signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: LEADS in low.output(), timeout=LIFETIME * 4, what="standby takes over")
    takeover = time.monotonic() - killed
    print(f"standby acted {takeover:.1f}s after the leader was SIGKILLed (peering lifetime {LIFETIME}s)")
    assert takeover <= LIFETIME * 3, takeover
    assert leader_gauge(low) == 1
    # its first epochs on an unchanged cluster keep every pod (nothing duplicated or lost)...
    time.sleep(5)
    assert {p.metadata.name: p.metadata.uid for p in pe_pods(kube, namespace, "clicks")} == before
    # ...and it does the job: a new job gets admitted and placed, the old one stays as planned
    kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "glued"))
    wait_for(lambda: running_as_planned(kube, namespace, "alerts") and running_as_planned(kube, namespace, "clicks"), timeout=90,
             what="new job placed by the standby")

    # the high-priority replica comes back: the standby stops acting, the leader resumes
    high.start()
    wait_for(lambda: "stopped running the SODA loops" in low.output(), timeout=LIFETIME * 3, what="standby pauses for the leader")
    wait_for(lambda: high.output().count(LEADS) >= 2, timeout=LIFETIME * 3, what="leader acts again")
    kube.custom.patch_namespaced_custom_object(GROUP, "v1alpha1", namespace, "streamjobs", "clicks", {"spec": {"rank": 2}})
    wait_for(lambda: (kube.custom.get_namespaced_custom_object(GROUP, "v1alpha1", namespace, "streamjobs", "clicks").get("status") or {})
             .get("observedGeneration") == 2, timeout=60, what="the returning leader handles a change")
    low_applied = low.output().count("applied:")
    time.sleep(6)  # a macro epoch and several micro epochs of the leader
    assert low.output().count("applied:") == low_applied, "the paused standby still writes"
    wait_for(lambda: running_as_planned(kube, namespace, "clicks") and running_as_planned(kube, namespace, "alerts"), timeout=60,
             what="jobs as planned under the returning leader")

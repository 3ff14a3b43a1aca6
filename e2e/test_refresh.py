"""Jobs turn Running while the macro epoch that admitted them is still creating the pods of others.

A first macro epoch on a large workload creates hundreds (at 2,000 nodes thousands) of pods, one
request each; a job whose pods were created first and already run must not wait for the rest. The
operator runs with one apply worker (``--workers 1``) so that its apply of the LSD-like workload's
first 40 jobs takes seconds; its log must show the Running refresh promoting jobs before that
epoch's apply ends ("applied: ..."), and every promoted job must really run: all its planned
instances Running on their planned nodes.
"""

from __future__ import annotations

import re

from live import GROUP, ROOT, VERSION, start_operator

LSD_JOBS = 40


def test_jobs_turn_running_during_the_apply(kube, kubectl, namespace, extender_port, wait_for, tmp_path):
    log = tmp_path / "operator.log"
    op = start_operator(kubectl, extender_port, log=str(log), extra=("--workers", "1"))
    try:
        lsd = (ROOT / "examples" / "lsd" / "lsd.yaml").read_text()
        docs = [d for d in lsd.split("\n---\n") if "kind: Namespace" not in d]
        jobs = [d for d in docs if "kind: StreamJob" in d and "imports:" not in d][:LSD_JOBS]
        docs = [d for d in docs if "kind: StreamJob" not in d] + jobs
        kubectl("apply", "-n", namespace, "-f", "-", input="\n---\n".join(
            d.replace("namespace: bench", f"namespace: {namespace}").replace("job: bench/", f"job: {namespace}/") for d in docs), timeout=300)

        def first_apply_done() -> str | None:
            text = log.read_text() if log.exists() else ""
            return text if re.search(r"applied: \{[^}]*'create': [1-9]", text) else None

        text = wait_for(first_apply_done, timeout=240, interval=1, what="the first macro epoch's apply")
        before = text[:re.search(r"applied: \{[^}]*'create': [1-9]", text).start()]  # type: ignore[union-attr]
        promoted = sum(int(n) for n in re.findall(r"(\d+) job\(s\) Running", before))
        created = re.search(r"'create': (\d+)", text[len(before):]).group(1)  # type: ignore[union-attr]
        print(f"\n{promoted} job(s) Running before the epoch's apply of {created} pods ended")
        assert promoted > 0, "no job was promoted to Running while the epoch created its pods"

        # and each Running job really runs: every planned instance Running on its planned node
        items = kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "streamjobs")["items"]
        pods = {p.metadata.name: p for p in kube.core.list_namespaced_pod(namespace, label_selector="kubesoda.io/job").items}
        running = [j for j in items if (j.get("status") or {}).get("phase") == "Running"]
        assert running
        for j in running:
            for pe in j["status"].get("pes") or []:
                for i in pe.get("instances") or []:
                    p = pods.get(i["pod"])
                    assert p is not None and p.status.phase == "Running" and p.spec.node_name == i["node"], (j["metadata"]["name"], i)
    finally:
        op.stop()

"""Hostile input through the real API server into the running operator (issue 19, item 6).

Hypothesis mutates a valid StreamTemplate and StreamJob (wrong types, negative and huge numbers,
unknown or duplicate PE names, cycles, empty lists, long names, dangling references) and creates
each pair through the API server, beside `clicks` (small-pipeline). Every object is either refused
by the API server (schema or CEL rule, a 4xx that names the field) or reaches the operator, whose
verdict on the job is one of Invalid (the message naming the field), Admitted, Running, Rejected or
Degraded. Afterwards the operator process is alive and `clicks` still runs as planned.
"""

from __future__ import annotations

import copy
import json
import random

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException
from live import GROUP, ROOT, VERSION, running_as_planned, start_operator

BASE_PES = [
    {"name": "ingest", "kind": "source", "minCpu": "250m", "resourceFunction": {"a": 0.1}},
    {"name": "parse", "resourceFunction": {"a": 0.002, "b": 1.0}},
    {"name": "score", "kind": "sink", "resourceFunction": {"a": 0.0005, "b": 1.0}},
]
BASE = {"pes": BASE_PES, "streams": [{"from": "ingest", "to": "parse"}, {"from": "parse", "to": "score"}],
        "sinks": [{"pe": "score", "weight": 1}], "primalInputs": [{"pe": "ingest", "rate": 100}]}

ODD_VALUES = [-1, 0, 1e30, "abc", "", "-5", "1e400", None, [], {}, True, "9" * 40, 2**62, 0.5]
PATHS = [
    ("pes", 0, "minCpu"), ("pes", 1, "maxCpu"), ("pes", 0, "name"), ("pes", 1, "kind"), ("pes", 2, "resourceFunction", "a"),
    ("pes", 1, "resourceFunction", "combine"), ("pes", 0, "maxInstances"), ("pes", 2, "memory"), ("pes", 1, "minCandidates"),
    ("streams", 0, "from"), ("streams", 1, "to"), ("streams", 0, "selectivity"), ("sinks", 0, "weight"),
    ("sinks", 0, "pe"), ("primalInputs", 0, "rate"), ("primalInputs", 0, "pe"), ("pes",), ("streams",),
]


FINAL = {"Invalid", "Admitted", "Running", "Rejected", "Degraded"}


def mutations(rnd: random.Random, n: int) -> list[tuple[dict, dict]]:
    """``n`` mutated (template spec, job spec) pairs drawn with ``rnd`` (hypothesis's first example
    of a list strategy is its simplest, the same mutation n times; a seeded Random varies them)."""
    out = []
    for _ in range(n):
        spec = copy.deepcopy(BASE)
        job: dict = {"templates": ["T"], "rank": 1}
        for _ in range(rnd.randint(1, 3)):
            kind = rnd.choice(["field", "field", "cycle", "duplicate", "dangling", "job"])
            if kind == "field":
                path = rnd.choice(PATHS)
                value = rnd.choice(ODD_VALUES)
                try:
                    node = spec
                    for k in path[:-1]:
                        node = node[k]
                    if value is None:
                        node.pop(path[-1], None)
                    else:
                        node[path[-1]] = value
                except (TypeError, KeyError, IndexError, AttributeError):
                    pass  # an earlier mutation replaced the parent: nothing to set
            elif kind == "cycle":
                spec["streams"] = list(spec["streams"]) + [{"from": "score", "to": "ingest"}]
            elif kind == "duplicate":
                spec["pes"] = list(spec["pes"]) + [copy.deepcopy(BASE_PES[1])]
            elif kind == "dangling":
                spec["streams"] = list(spec["streams"]) + [{"from": "nope", "to": "score"}]
            else:
                job[rnd.choice(["rank", "templates", "imports", "colocate"])] = rnd.choice(
                    [0, -3, "x", [], [["a", "b"]], [{"job": "ghost", "export": "e", "pe": "ingest"}], ["missing"]])
        out.append((spec, job))
    return out


@settings(max_examples=1, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False))
def test_hostile_objects_through_the_api_server(kube, kubectl, namespace, extender_port, wait_for, tmp_path_factory, rnd):
    cases = mutations(rnd, 16)
    op = start_operator(kubectl, extender_port, log=str(tmp_path_factory.mktemp("fuzz") / "operator.log"))
    try:
        kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "small-pipeline"))
        wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=90, what="clicks Running as planned")
        accepted, refused = [], []
        for i, (spec, jspec) in enumerate(cases):
            t = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamTemplate", "metadata": {"name": f"fz-{i}"}, "spec": spec}
            jspec = {**jspec, "templates": [f"fz-{i}"] if jspec.get("templates") == ["T"] else jspec["templates"]}
            j = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamJob", "metadata": {"name": f"fz-{i}"}, "spec": jspec}
            for obj, plural in ((t, "streamtemplates"), (j, "streamjobs")):
                try:
                    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, obj)
                    if plural == "streamjobs":
                        accepted.append(f"fz-{i}")
                except ApiException as e:
                    assert 400 <= e.status < 500, (e.status, e.body)  # refused, never a 5xx
                    msg = json.loads(e.body).get("message", "") if e.body else ""
                    assert "spec" in msg or "metadata" in msg, msg  # names the field
                    refused.append((plural, i, msg[:100]))

        def verdicts():
            out = {}
            for name in accepted:
                st_ = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "streamjobs", name).get("status") or {}
                if st_.get("phase") not in FINAL:
                    return None
                out[name] = st_
            return out

        got = wait_for(verdicts, timeout=120, interval=2, what="a verdict on every accepted job")
        for name, st_ in got.items():
            if st_["phase"] == "Invalid":
                assert "spec" in st_.get("message", ""), (name, st_)
        print(f"\nfuzz: {len(cases)} template/job pairs; API server refused {len(refused)} objects; operator verdicts "
              f"{sorted(s['phase'] for s in got.values())}")
        assert op.proc is not None and op.proc.poll() is None, "the operator died"
        wait_for(lambda: running_as_planned(kube, namespace, "clicks"), timeout=60, what="clicks still Running as planned")
    finally:
        op.stop()

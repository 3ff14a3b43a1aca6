"""The PE pod index keeps a slimmed copy of each pod (indexes._trim_pod, for memory at 2,000 nodes):
whatever the epochs read from a pod must come out the same from the slim copy as from the whole
pod: the previous placement (crd.previous_from), the requests on its node, the learner's image
digests and allocated mips, and the CPU limit the applier compares."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from soda_operator.kube import pods as kpods
from soda_operator.soda import crd, indexes, learning
from soda_operator.soda.apply import Instance, pod_body

names = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)


@st.composite
def pods(draw):
    job, pe, node = draw(names), draw(names), draw(names)
    inst = Instance(namespace=draw(names), job=job, pe=pe, node=node, fraction=draw(st.floats(0.01, 1.0)),
                    cores=draw(st.sampled_from([1.0, 2.0, 8.0])), candidates=tuple(draw(st.lists(names, min_size=1, max_size=6))),
                    spec={"name": pe, "image": draw(st.sampled_from(["busybox", "ghcr.io/kubesoda/pe-examples:dev"])),
                          "args": draw(st.lists(names, max_size=3)), "env": [{"name": "X", "value": draw(names)}]},
                    owner={"apiVersion": "kubesoda.io/v1alpha1", "kind": "StreamJob", "metadata": {"name": job, "uid": "u-1"}},
                    outputs=draw(st.sampled_from(["", f"{pe}->x=x.ns.svc:9000"])))
    body = pod_body(inst)
    # what the API server and the kubelet add
    body["metadata"].update({"uid": "p-" + draw(names), "resourceVersion": "7", "managedFields": [{"manager": "kubesoda"}]})
    body["spec"].update({"nodeName": node, "volumes": [{"name": "kube-api-access", "projected": {"sources": []}}],
                         "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]})
    cpu = body["spec"]["containers"][0]["resources"]["limits"]["cpu"]
    body["status"] = {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded"])), "podIP": "10.0.0.2",
                      "conditions": [{"type": "Ready", "status": "True"}],
                      "containerStatuses": [{"name": "pe", "ready": True, "restartCount": 0, "imageID": draw(st.sampled_from(["", "sha256:ab"])),
                                             "state": {"running": {}}, "resources": {"limits": {"cpu": cpu}}}]}
    return body


@settings(max_examples=60, deadline=None)
@given(st.lists(pods(), min_size=1, max_size=5))
def test_what_the_epochs_read_is_the_same_from_the_slim_pod(bodies):
    whole = [kpods.trim(copy.deepcopy(b)) for b in bodies]
    slim = [indexes._trim_pod(copy.deepcopy(b)) for b in bodies]
    assert crd.previous_from([], slim) == crd.previous_from([], whole)
    assert [kpods.requests(p) for p in slim] == [kpods.requests(p) for p in whole]
    assert learning.pod_digests(slim) == learning.pod_digests(whole)
    mpc = {p["spec"]["nodeName"]: 1000.0 for p in whole}
    assert learning.allocated_mips(slim, mpc) == learning.allocated_mips(whole, mpc)
    for s, w in zip(slim, whole, strict=True):
        assert s["metadata"] == w["metadata"] and s["status"] == w["status"]
        assert s["spec"]["containers"][0]["resources"] == w["spec"]["containers"][0]["resources"]
        assert s["spec"]["nodeName"] == w["spec"]["nodeName"]
    # and it is smaller: what was dropped is most of the spec
    assert sum(len(repr(s)) for s in slim) < sum(len(repr(w)) for w in whole)

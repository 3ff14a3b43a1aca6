"""PE pods pass the `restricted` Pod Security Standard, enforced by the real API server: a job in a
namespace labelled `pod-security.kubernetes.io/enforce: restricted` runs as planned, while a
pod without a securityContext there is refused (the enforcement is real)."""

from __future__ import annotations

import uuid

import pytest
from live import ROOT, pe_pods, running_as_planned

PLAIN = """apiVersion: v1
kind: Pod
metadata: {name: plain-probe}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]  # no securityContext: fine under baseline, not restricted
"""


@pytest.fixture
def restricted(kube, kubectl):
    name = f"e2e-restricted-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=f"""apiVersion: v1
kind: Namespace
metadata:
  name: {name}
  labels: {{pod-security.kubernetes.io/enforce: restricted, pod-security.kubernetes.io/enforce-version: latest}}
""")
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_pe_pods_run_in_a_restricted_namespace(operator, kube, kubectl, restricted, wait_for):
    bad = kubectl("apply", "-n", restricted, "-f", "-", input=PLAIN, check=False)
    assert bad.returncode != 0 and "violates PodSecurity" in bad.stderr, bad.stderr
    kubectl("apply", "-n", restricted, "-f", str(ROOT / "examples" / "small-pipeline"))
    wait_for(lambda: running_as_planned(kube, restricted, "clicks"), timeout=90, what="clicks Running in a restricted namespace")
    for p in pe_pods(kube, restricted, "clicks"):
        assert p.spec.security_context.run_as_non_root and p.spec.security_context.seccomp_profile.type == "RuntimeDefault"
        c = p.spec.containers[0].security_context
        assert c.allow_privilege_escalation is False and c.capabilities.drop == ["ALL"]

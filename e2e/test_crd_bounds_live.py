"""The bounds of issue 45 against the real API server (server-side dry runs: nothing is stored): every number of a
SchedulingPolicy, YieldGroup and ResourceProfile spec is accepted at its CRD maximum and refused one past it, naming
the field; the CEL upper bounds of CPU and memory quantities compile and refuse (100k cores, 1E bytes). The
StreamTemplate and StreamJob numbers of soda_optimizer.bounds are e2e/test_hostile.py's."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_crd_bounds import _put, numbers  # noqa: E402

API = "kubesoda.io/v1alpha1"


@pytest.fixture(scope="module")
def crds(kubectl):
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    for name in ("streamtemplates", "schedulingpolicies", "yieldgroups", "resourceprofiles"):
        kubectl("wait", "--for=condition=Established", f"crd/{name}.kubesoda.io", "--timeout=60s")
    return True


def _dry(kubectl: Any, obj: dict[str, Any]) -> Any:
    return kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(obj), check=False)


def _past(n: dict[str, Any]) -> Any:
    return n["maximum"] + 1 if n["type"] == "integer" else math.nextafter(float(n["maximum"]), math.inf)


BASES = {
    "schedulingpolicies": {"apiVersion": API, "kind": "SchedulingPolicy", "metadata": {"name": "default"}, "spec": {}},
    "yieldgroups": {"apiVersion": API, "kind": "YieldGroup", "metadata": {"name": "g", "namespace": "default"}, "spec": {}},
    "resourceprofiles": {"apiVersion": API, "kind": "ResourceProfile", "metadata": {"name": "p"}, "spec": {"pinned": True}},
}


@pytest.mark.parametrize("kind", sorted(BASES))
def test_every_number_is_accepted_at_its_maximum_and_refused_past_it(crds, kubectl, kind):
    wrong = []
    for path, n in numbers(kind).items():
        ok = _put(BASES[kind], path, n["maximum"])
        if "merit.windows" in path:
            ok["spec"]["merit"]["windows"][0].setdefault("weights", {})
        if path == "spec.microEpochSeconds":
            ok["spec"]["macroEpochSeconds"] = n["maximum"]  # micro <= macro (CEL)
        out = _dry(kubectl, ok)
        if out.returncode != 0:
            wrong.append(f"{path} = {n['maximum']} refused: {out.stderr.strip()[-300:]}")
        bad = _put(ok, path, _past(n))
        out = _dry(kubectl, bad)
        field = path.split("{")[0].split("[")[0].split(".")[-1]
        if out.returncode == 0 or field not in out.stderr:
            wrong.append(f"{path} = {_past(n)} not refused naming {field}: {out.stderr.strip()[-300:]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("field", "top", "past"), [("minCpu", "100k", "100001"), ("maxCpu", "100k", "100001"), ("memory", "1E", "2E")])
def test_the_quantity_bounds_compile_and_refuse(crds, kubectl, field, top, past):
    def tmpl(v: str) -> dict[str, Any]:
        return {"apiVersion": API, "kind": "StreamTemplate", "metadata": {"name": "q", "namespace": "default"},
                "spec": {"pes": [{"name": "a", field: v}]}}

    ok = _dry(kubectl, tmpl(top))
    assert ok.returncode == 0, ok.stderr
    bad = _dry(kubectl, tmpl(past))
    assert bad.returncode != 0 and f"{field} must be at most" in bad.stderr, bad.stderr


def test_the_policy_quantity_and_the_migration_budget_refuse(crds, kubectl):
    pol = {**BASES["schedulingpolicies"], "spec": {"nodeReservedCpu": "100001"}}
    out = _dry(kubectl, pol)
    assert out.returncode != 0 and "nodeReservedCpu must be at most" in out.stderr, out.stderr
    yg = {**BASES["yieldgroups"], "spec": {"migrationBudget": "2E"}}
    out = _dry(kubectl, yg)
    assert out.returncode != 0 and "migrationBudget must be at most" in out.stderr, out.stderr

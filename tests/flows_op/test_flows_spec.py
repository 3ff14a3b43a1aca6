"""JobFlow and FlowPool settings (soda_operator.flows.spec): the CRDs are the one source of defaults, and a value
out of range is refused with the field it came from (the old parser clamped it silently: ``max(1.0, epochSeconds)``,
``max(1e-9, utility)``, ``max(0.05, deadlineSeconds)``, negative capacities to 0, a decreasing load map dropped)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from soda_operator import schema
from soda_operator.flows import spec
from soda_operator.kube.errors import TranslationError


def flow(**over: Any) -> dict[str, Any]:
    sp: dict[str, Any] = {"lifespanSeconds": 600, "steps": [{"pools": ["p"]}]}
    sp.update(over)
    return {"apiVersion": "kubesoda.io/v1alpha1", "kind": "JobFlow", "metadata": {"name": "f", "namespace": "ns"}, "spec": sp}


def pool(**over: Any) -> dict[str, Any]:
    sp: dict[str, Any] = {"capacity": [2], "nodeSelector": {"pool": "a"}}
    sp.update(over)
    return {"apiVersion": "kubesoda.io/v1alpha1", "kind": "FlowPool", "metadata": {"name": "p"}, "spec": sp}


def test_defaults_are_the_crds():
    f = spec.flow_of(schema.with_defaults(flow()))
    assert (f.epoch_s, f.utility, f.mode, f.evaluations, f.deadline_s, f.seed) == (240, 1, "external", 20, 2, 0)
    assert f.steps[0].run_seconds == 60 and f.steps[0].name == "step-0" and f.horizon == 1 and f.forecast == ()
    assert spec.flow_of(schema.with_defaults(flow(arrivals={"forecast": [1, 2, 3]}))).horizon == 3
    p = spec.pool_of(schema.with_defaults(pool(cluster={"kubeconfigSecret": {"name": "m"}})))
    assert p.load_map == ((0, 0), (1, 1), (2, 1)) and p.kubeconfig == ("", "m", "kubeconfig")  # "": the operator's namespace


def test_the_parser_states_no_default_of_its_own():
    """An object the API server did not default is refused, naming the field it lacks: no second default here."""
    with pytest.raises(TranslationError) as e:
        spec.flow_of(flow())
    assert e.value.field == "spec.steps[0].runSeconds" and "required" in e.value.message
    with pytest.raises(TranslationError) as e:
        spec.pool_of(pool())
    assert e.value.field == "spec.loadMap"


@pytest.mark.parametrize(("over", "field", "words"), [
    ({"epochSeconds": 0.5}, "spec.epochSeconds", "greater than or equal to 1"),  # was max(1.0, ...)
    ({"utility": 0}, "spec.utility", "greater than 0"),  # was max(1e-9, ...)
    ({"utility": "nan"}, "spec.utility", "finite"),  # was 1.0, the parser's own default
    ({"lifespanSeconds": -5}, "spec.lifespanSeconds", "greater than or equal to 1"),  # was max(1e-3, ...); issue 45: at least 1 s
    ({"steps": [{"pools": ["p"], "runSeconds": 0}]}, "spec.steps[0].runSeconds", "greater than or equal to 1"),  # was max(1e-3, ...); issue 45: at least 1 s
    ({"steps": []}, "spec.steps", "at least 1"),
    ({"steps": [{"pools": [], "runSeconds": 1}]}, "spec.steps[0].pools", "at least 1"),
    ({"horizonEpochs": 0}, "spec.horizonEpochs", "greater than or equal to 1"),  # was max(1, ...)
    ({"arrivals": {"mode": "forecast", "forecast": [3, -1]}}, "spec.arrivals.forecast[1]", "greater than or equal to 0"),  # was 0
    ({"arrivals": {"mode": "sometimes"}}, "spec.arrivals.mode", "'external' or 'forecast'"),  # was taken as external
    ({"planner": {"deadlineSeconds": 0}}, "spec.planner.deadlineSeconds", "greater than 0"),  # was max(0.05, ...)
    ({"planner": {"evaluations": 0}}, "spec.planner.evaluations", "greater than or equal to 1"),  # was max(1, ...)
    ({"planner": {"seed": "x"}}, "spec.planner.seed", "integer"),  # was 0
])
def test_flow_values_out_of_range_are_refused_with_the_field(over, field, words):
    body = schema.with_defaults(flow(**over))
    with pytest.raises(TranslationError) as e:
        spec.flow_of(body)
    assert e.value.field == field and words in e.value.message, (e.value.field, e.value.message)
    assert e.value.reason == "InvalidSpec"


@pytest.mark.parametrize(("over", "field", "words"), [
    ({"capacity": [2, -1]}, "spec.capacity[1]", "greater than or equal to 0"),  # was max(0.0, ...)
    ({"capacity": ["lots"]}, "spec.capacity[0]", "number"),  # was 0
    ({"capacity": []}, "spec.capacity", "at least 1"),  # was [0]
    ({"loadMap": [{"load": 1, "throughput": 0.9}, {"load": 2, "throughput": 0.5}]}, "spec.loadMap", "throughput must not decrease"),
    ({"loadMap": [{"load": 1, "throughput": 1.5}]}, "spec.loadMap[0].throughput", "less than or equal to 1"),
    ({"loadMap": [{"load": 0, "throughput": 0}]}, "spec.loadMap", "at least two points"),  # was the default map
    ({"nodeSelector": None}, "spec", "needs a nodeSelector"),
    ({"cluster": {"kubeconfigSecret": {"key": "k"}}}, "spec.cluster.kubeconfigSecret.name", "required"),
])
def test_pool_values_out_of_range_are_refused_with_the_field(over, field, words):
    body = schema.with_defaults(pool(**over))
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    with pytest.raises(TranslationError) as e:
        spec.pool_of(body)
    assert e.value.field == field and words in e.value.message, (e.value.field, e.value.message)


def test_the_rest_is_taken_as_written():
    body = schema.with_defaults(flow(epochSeconds=1, utility=1e-6, planner={"deadlineSeconds": 0.01}, horizonEpochs=4,
                                     arrivals={"mode": "forecast", "forecast": [0.5]}))
    before = copy.deepcopy(body)
    f = spec.flow_of(body)
    assert (f.epoch_s, f.utility, f.deadline_s, f.horizon, f.forecast, f.mode) == (1, 1e-6, 0.01, 4, (0.5,), "forecast")
    assert body == before  # the object is not changed
    assert [p.name for p in spec.flows_of([body, schema.with_defaults(flow(utility=-1))])] == ["f"]  # the invalid one is left out

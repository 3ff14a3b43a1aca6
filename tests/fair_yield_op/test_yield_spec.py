"""A YieldGroup's spec (soda_operator.fair_yield.spec): the CRD's defaults are the only ones, and
every value out of the CRD's range is refused with the field named, never clamped or defaulted."""

from __future__ import annotations

import pytest

from soda_operator.fair_yield.spec import parse
from soda_operator.kube.errors import TranslationError
from soda_operator.schema import with_defaults


def defaulted(**spec):
    return with_defaults({"apiVersion": "kubesoda.io/v1alpha1", "kind": "YieldGroup", "metadata": {"name": "g"}, "spec": spec})["spec"]


def test_the_crd_gives_every_default():
    s = parse(defaulted())
    assert (s.algorithm, s.migration_budget, s.epoch_seconds, s.deadline_seconds) == ("anytime", 0.0, 10.0, 1.0)
    assert parse(defaulted(migrationBudget="1Gi", algorithm="milp")).migration_budget == 2.0**30
    assert parse(defaulted(migrationBudget=2048)).migration_budget == 2048.0


def test_no_default_of_its_own():
    with pytest.raises(TranslationError) as e:
        parse({"algorithm": "mcb8", "epochSeconds": 10, "deadlineSeconds": 1})  # not defaulted: migrationBudget missing
    assert e.value.field == "spec.migrationBudget" and e.value.reason == "InvalidSpec"


@pytest.mark.parametrize(("spec", "field", "says"), [
    ({"migrationBudget": -1}, "spec.migrationBudget", "not a memory quantity"),  # the CRD lets a negative integer through
    ({"migrationBudget": "lots"}, "spec.migrationBudget", "not a memory quantity"),
    ({"migrationBudget": True}, "spec.migrationBudget", "not a memory quantity"),
    ({"epochSeconds": 0}, "spec.epochSeconds", "greater than or equal to 1"),
    ({"epochSeconds": float("nan")}, "spec.epochSeconds", "finite"),
    ({"epochSeconds": "10"}, "spec.epochSeconds", "valid number"),
    ({"deadlineSeconds": 0}, "spec.deadlineSeconds", "greater than 0"),
    ({"deadlineSeconds": 61}, "spec.deadlineSeconds", "less than or equal to 60"),
    ({"algorithm": "best"}, "spec.algorithm", "not an algorithm: one of anytime, milp, mcb1"),
    ({"algorithm": 8}, "spec.algorithm", "valid string"),
])
def test_out_of_range_is_refused_with_the_field(spec, field, says):
    with pytest.raises(TranslationError) as e:
        parse(defaulted(**spec))
    assert e.value.field == field and says in e.value.message, (e.value.field, e.value.message)

"""The decision maker's policies by name (Lin 2014, sections 5.1-5.5 and 6.3.2's EDF). Pure: no Kubernetes, no I/O.

Two kinds of names:

- a policy family with its parameters, the form a ``BatchDispatch`` spells (``policy`` plus ``reservation``,
  ``horizon``, ``fill``, ``reading``): ``priority`` (5.1: ``reservation``, ``fill``, ``reading``), ``proportion``
  (5.2: ``fill``, ``reading``), ``workload`` (5.3: ``horizon``, ``fill``), ``deadline`` (5.4: ``fill``,
  ``reading``), ``edf`` (6.3.2: none). ``reading`` is ``"pseudo-code"`` or ``"text"`` where the algorithm and its
  description disagree (default: the pseudo-code for ``deadline``, the text for ``priority`` and ``proportion``;
  each module says why). A parameter not
  given takes the policy's default (``fill``: none for priority and proportion, ``priority`` for workload,
  ``deadline`` for deadline); ``fill="none"`` is no spare fill, like ``None``;
- the eight configurations of the paper's comparison (:data:`PAPER`) and the other readings (:data:`READINGS`:
  ``priority[alg1](r=0.2)``, ``proportion[alg2]``, ``deadline[text]+fill-priority``, ...), by the name the policy
  reports (``priority(r=0.2)``, ``deadline+fill-priority``, ...), without parameters. Where a configuration's name is a
  family's (``proportion``, ``edf``, ``deadline``), the family wins: ``deadline`` is the family's default
  (spare workers filled by deadline, what a ``BatchDispatch`` gets); the paper's ``deadline`` without fill is
  ``policy("deadline", fill=None)``.

:func:`policy` builds one; a bad name, an unknown parameter or a bad value is a ``ValueError`` that names the field
and what it accepts. Parameters are validated by pydantic against the policy's dataclass (its ``__post_init__``
included).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .base import Policy
from .deadline import DeadlinePolicy, EdfPolicy
from .priority import PriorityPolicy
from .proportion import ProportionPolicy
from .workload import WorkloadPolicy

#: policy family -> the dataclass that implements it (its fields are the parameters)
FAMILIES: dict[str, type] = {
    "priority": PriorityPolicy,
    "proportion": ProportionPolicy,
    "workload": WorkloadPolicy,
    "deadline": DeadlinePolicy,
    "edf": EdfPolicy,
}

#: the configurations of the paper's comparison (6.3), with the parameters the benchmark uses
PAPER: tuple[tuple[str, dict[str, Any]], ...] = (
    ("priority", {"reservation": 0.0}),
    ("priority", {"reservation": 0.2}),
    ("proportion", {}),
    ("workload", {"horizon": 1.0, "fill": "priority"}),
    ("deadline", {"fill": None}),
    ("deadline", {"fill": "priority"}),
    ("deadline", {"fill": "deadline"}),
    ("edf", {}),
)

#: the other reading of each algorithm whose pseudo-code and text disagree (the benchmark shows both)
READINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("priority", {"reservation": 0.2, "reading": "pseudo-code"}),
    ("proportion", {"reading": "pseudo-code"}),
    ("deadline", {"fill": "priority", "reading": "text"}),
    ("deadline", {"fill": "deadline", "reading": "text"}),
)

_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def parameters(family: str) -> tuple[str, ...]:
    """The parameters a policy family accepts."""
    return tuple(f.name for f in fields(FAMILIES[family]))


def _build(family: str, params: dict[str, Any]) -> Policy:
    unknown = sorted(set(params) - set(parameters(family)))
    if unknown:
        accepts = ", ".join(parameters(family)) or "none"
        raise ValueError(f"dispatch policy {family!r}: unknown parameter {', '.join(unknown)} (accepts: {accepts})")
    if params.get("fill") == "none":
        params = {**params, "fill": None}
    adapter = _ADAPTERS.get(family)
    if adapter is None:
        adapter = _ADAPTERS[family] = TypeAdapter(FAMILIES[family])
    try:
        out: Policy = adapter.validate_python(params)
    except ValidationError as e:
        why = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'parameters'}: {err['msg']}" for err in e.errors())
        raise ValueError(f"dispatch policy {family!r}: {why}") from None
    return out


def paper_policies(readings: bool = False) -> dict[str, Policy]:
    """Every policy of the paper with the parameters the benchmark uses, by name; with ``readings`` also the other
    reading of each algorithm whose pseudo-code and text disagree (:data:`READINGS`)."""
    ps = [_build(family, dict(params)) for family, params in (PAPER + READINGS if readings else PAPER)]
    return {p.name: p for p in ps}


def names() -> list[str]:
    """Every name :func:`policy` accepts: the families, then the paper's other configurations."""
    return [*FAMILIES, *(n for n in paper_policies(True) if n not in FAMILIES)]


def policy(name: str, **params: Any) -> Policy:
    """The policy ``name`` (a family with ``params``, or one of the paper's configurations without)."""
    if name in FAMILIES:
        return _build(name, params)
    paper = paper_policies(True)
    if name in paper:
        if params:
            raise ValueError(f"dispatch policy {name!r} is one of the paper's configurations and takes no parameters "
                             f"(got {', '.join(sorted(params))}); give the family ({', '.join(FAMILIES)}) to set them")
        return paper[name]
    raise ValueError(f"dispatch policy: unknown policy {name!r} (known: {', '.join(names())})")


__all__ = ["FAMILIES", "PAPER", "READINGS", "names", "paper_policies", "parameters", "policy"]

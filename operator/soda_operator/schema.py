"""Offline validation of manifests (``kubesoda plan -f``) against the CRDs' own OpenAPI v3 schemas,
the ones the API server checks on ``kubectl apply``, so a file gets the same answer offline as it
would live: one error naming the field (``spec.pes[0].minCpu: 'abc' is not valid under any of the
given schemas``).

The CRDs are read from ``crds/`` of the source tree; where they are not shipped (the container
image, which never plans from files), validation is skipped and the translation's own checks
(:mod:`.crd`) still give one error per object. Departures from the API server: CEL rules
(``x-kubernetes-validations``) are not evaluated here (the translation checks the same things);
unknown fields are errors, as ``kubectl apply`` (strict field validation) makes them.
Nodes and Pods (no CRD) are checked for the few fields kubesoda reads.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parents[2] / "crds"
_QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "string"}]}
_META = {"type": "object", "properties": {
    "name": {"type": "string"}, "namespace": {"type": "string"},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
}}
_BUILTIN: dict[str, dict[str, Any]] = {
    "Node": {"type": "object", "properties": {
        "metadata": _META,
        "spec": {"type": "object", "properties": {"unschedulable": {"type": "boolean"}}},
        "status": {"type": "object", "properties": {
            "allocatable": {"type": "object", "additionalProperties": _QUANTITY},
            "capacity": {"type": "object", "additionalProperties": _QUANTITY},
            "conditions": {"type": "array", "items": {"type": "object"}},
        }},
    }},
    "Pod": {"type": "object", "properties": {
        "metadata": _META,
        "spec": {"type": "object", "properties": {
            "nodeName": {"type": "string"},
            "containers": {"type": "array", "items": {"type": "object", "properties": {
                "resources": {"type": "object", "properties": {
                    "requests": {"type": "object", "additionalProperties": _QUANTITY},
                    "limits": {"type": "object", "additionalProperties": _QUANTITY},
                }},
            }}},
        }},
    }},
}


def _convert(s: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAPI v3 structural schema as JSON Schema (int-or-string, nullable, strict fields)."""
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k in ("properties",):
            out[k] = {name: _convert(sub) for name, sub in v.items()}
        elif k in ("items", "additionalProperties") and isinstance(v, Mapping):
            out[k] = _convert(v)
        elif k in ("anyOf", "allOf", "oneOf"):
            out[k] = [_convert(x) for x in v]
        elif k.startswith("x-kubernetes-") or k in ("description", "nullable", "format"):
            continue
        else:
            out[k] = v
    for ex, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):  # OpenAPI 3.0's boolean form
        if isinstance(s.get(ex), bool):
            out.pop(ex)
            if s[ex] and bound in s:
                out[ex] = out.pop(bound)
    if s.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if s.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out \
            and not s.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@functools.cache
def _schemas() -> dict[str, dict[str, Any]]:
    out = dict(_BUILTIN)
    if not CRDS.is_dir():
        return out
    for f in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(f.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
            s = _convert(version["schema"]["openAPIV3Schema"])
            props = s.setdefault("properties", {})
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            props["metadata"] = _META
            props.setdefault("status", {"type": "object"})
            out[crd["spec"]["names"]["kind"]] = s
    return out


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator | None:
    s = _schemas().get(kind)
    if s is None:
        return None
    cls = jsonschema.validators.validator_for(s, default=jsonschema.Draft202012Validator)
    return cls(s)


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(object)"


def problem(obj: Mapping[str, Any]) -> str | None:
    """The first schema violation of ``obj`` as "field: message", or None."""
    v = _validator(str(obj.get("kind")))
    if v is None:
        return None
    try:
        err = jsonschema.exceptions.best_match(v.iter_errors(obj))
    except RecursionError:
        return "nested too deeply to be a Kubernetes object"
    if err is None:
        return None
    return f"{_path(err.absolute_path)}: {short(err.message, err.instance)}"


def _trim(text: str, keep: int) -> str:
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} characters)"


def short(message: str, instance: Any, keep: int = 60) -> str:
    """``message`` with the offending value in it trimmed to ``keep`` characters, the reason whole:
    jsonschema writes the value first (``[1, 2, ...] is too long``, ``'xxx...' is too long``), and
    a value may be a megabyte. What is left is at most a few hundred characters: anything else long
    in it (an unexpected key) is trimmed in the middle, where the reason is not."""
    r = repr(instance)
    if len(r) > keep and r in message:
        message = message.replace(r, _trim(r, keep))
    if len(message) > 4 * keep:
        message = re.sub(f"'[^']{{{keep},}}'", lambda m: _trim(m.group(0), keep) + "'", message)
    if len(message) > 8 * keep:
        message = f"{message[:3 * keep]} ... {message[-3 * keep:]}"
    return message


def _fill(value: Any, s: Mapping[str, Any]) -> Any:
    """``value`` with the schema's ``default`` of every absent property, recursively (the API
    server's structural defaulting: a default applies where the field is absent, inside objects
    that are present)."""
    if isinstance(value, Mapping) and s.get("type") == "object" or (isinstance(value, Mapping) and "properties" in s):
        out = dict(value)
        for name, sub in (s.get("properties") or {}).items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = _fill(out[name], sub)
        extra = s.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name in out:
                if name not in (s.get("properties") or {}):
                    out[name] = _fill(out[name], extra)
        return out
    if isinstance(value, list) and isinstance(s.get("items"), Mapping):
        return [_fill(v, s["items"]) for v in value]
    return value


def with_defaults(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as the API server stores it: its CRD's defaults filled in where fields are absent.
    The one source of every default is the CRD; the operator's parsers state none of their own.
    Live objects come defaulted already; this serves files (``kubesoda plan``) and tests. Without
    the CRDs (the container image) ``obj`` is returned as it is."""
    s = _schemas().get(str(obj.get("kind")))
    return dict(obj) if s is None else _fill(obj, s)

"""Every CRD field documents itself: `kubectl explain` has something to say at every depth.

Walks each CRD's openAPIV3Schema (properties, array items, additionalProperties, anyOf/allOf/oneOf)
and names every property without a description; checks that every CRD still parses and that every
description (schema nodes and printer columns) is a non-empty string under 400 characters.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

CRDS = sorted((Path(__file__).resolve().parent.parent / "crds").glob("*.yaml"))
MAX_DESCRIPTION = 400


def _crd(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) == 1, f"{path.name}: expected one document, got {len(docs)}"
    return docs[0]  # type: ignore[no-any-return]


def _schemas(crd: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind/version, openAPIV3Schema) of every version."""
    kind = crd["spec"]["names"]["kind"]
    for v in crd["spec"]["versions"]:
        yield f"{kind}/{v['name']}", v["schema"]["openAPIV3Schema"]


def _nodes(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(path, schema node, is a property) for ``schema`` and every node below it."""
    for name, sub in (schema.get("properties") or {}).items():
        p = f"{path}.{name}"
        yield p, sub, True
        yield from _nodes(sub, p)
    items = schema.get("items")
    for i, sub in enumerate(items if isinstance(items, list) else [items] if isinstance(items, dict) else []):
        p = f"{path}[]" if isinstance(items, dict) else f"{path}[{i}]"
        yield p, sub, False
        yield from _nodes(sub, p)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        p = f"{path}{{}}"
        yield p, extra, False
        yield from _nodes(extra, p)
    for key in ("anyOf", "allOf", "oneOf"):
        for i, sub in enumerate(schema.get(key) or []):
            p = f"{path}<{key}[{i}]>"
            yield p, sub, False
            yield from _nodes(sub, p)


def test_crds_parse():
    assert CRDS, "no CRD files found"
    for f in CRDS:
        crd = _crd(f)
        assert crd.get("apiVersion") == "apiextensions.k8s.io/v1" and crd.get("kind") == "CustomResourceDefinition", f.name
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{crd['spec']['group']}", f.name
        assert list(_schemas(crd)), f"{f.name}: no versions with a schema"


@pytest.mark.parametrize("path", CRDS, ids=[f.stem for f in CRDS])
def test_every_property_has_a_description(path):
    missing = [f"{where}{p}" for where, schema in _schemas(_crd(path)) for p, node, is_prop in _nodes(schema, "")
               if is_prop and not (isinstance(node, dict) and node.get("description"))]
    assert not missing, f"{path.name}: {len(missing)} propert(y/ies) without a description:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("path", CRDS, ids=[f.stem for f in CRDS])
def test_descriptions_are_short_non_empty_strings(path):
    crd = _crd(path)
    bad = []
    for where, schema in _schemas(crd):
        for p, node, _ in [("", schema, False), *_nodes(schema, "")]:
            if "description" in node:
                d = node["description"]
                if not isinstance(d, str) or not d.strip() or len(d) >= MAX_DESCRIPTION:
                    bad.append(f"{where}{p or '.'}: {d!r:.80} ({len(d) if isinstance(d, str) else type(d).__name__})")
    for v in crd["spec"]["versions"]:
        for col in v.get("additionalPrinterColumns") or []:
            if "description" in col:
                d = col["description"]
                if not isinstance(d, str) or not d.strip() or len(d) >= MAX_DESCRIPTION:
                    bad.append(f"printer column {col.get('name')}: {d!r:.80}")
    assert not bad, f"{path.name}:\n  " + "\n  ".join(bad)


def test_walker_sees_items_and_additional_properties():
    """The walk reaches properties inside array items and additionalProperties objects."""
    schema = {"type": "object", "properties": {
        "a": {"type": "array", "description": "x", "items": {"type": "object", "properties": {"b": {"type": "string"}}}},
        "m": {"type": "object", "description": "y", "additionalProperties": {
            "type": "object", "properties": {"c": {"type": "integer", "description": "z"}, "d": {"type": "number"}}}},
    }}
    missing = [p for p, node, is_prop in _nodes(schema, "") if is_prop and not node.get("description")]
    assert missing == [".a[].b", ".m{}.d"]

"""Hypothesis strategies drawn from the CRDs' own OpenAPI schemas (issue 45, "What to build" 4): each number at
its minimum, its maximum, or in between (an exclusive bound one float inside); a number without a maximum at the
largest finite float (an integer at the largest int64), which is what the API server takes when the schema says
nothing; each string at its ``maxLength`` (4,096 characters without one) or an ``enum`` value; each list at
``maxItems`` or short; each quantity (int-or-string) at its CEL upper bound (``quantity('100k')``), the largest
number its ``maxLength`` can spell without one, or at ``1n``.

The strategies know the schema's shape only: cross-references (a stream's PEs, a job's templates and imports) are
for the caller to set (tests/test_hostile_generated.py). Lists are drawn up to ``cap`` items (``maxItems`` when it is
smaller) so that a whole object stays small enough to plan in a test; a list of scalars is also drawn at its full
``maxItems``. ``full`` draws every optional property too (the tests try that first). Subtrees the schema leaves open (``x-kubernetes-preserve-unknown-fields``) are drawn empty.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
INT64 = 2**63 - 1
LONG = 4096  # a string without maxLength: as long as a test cares to go
_UPPER = re.compile(r"compareTo\(quantity\('([^']+)'\)\) <= 0")


def spec_schema(kind: str) -> dict[str, Any]:
    """The ``spec`` schema of ``crds/<kind>.yaml`` (plural file name)."""
    doc = yaml.safe_load((ROOT / "crds" / f"{kind}.yaml").read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]  # type: ignore[no-any-return]


def number(s: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A number or integer of schema ``s``: its bounds (the largest finite value without one) or in between."""
    if s.get("type") == "integer":
        lo = int(s.get("minimum", -INT64))
        hi = int(s.get("maximum", INT64))
        return st.sampled_from([lo, hi]) | st.integers(lo, hi)
    lo = float(s.get("minimum", -sys.float_info.max))
    hi = float(s.get("maximum", sys.float_info.max))
    if s.get("exclusiveMinimum") is True:
        lo = math.nextafter(lo, math.inf)
    if s.get("exclusiveMaximum") is True:
        hi = math.nextafter(hi, -math.inf)
    return st.sampled_from([lo, hi]) | st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def quantity(s: dict[str, Any]) -> st.SearchStrategy[str]:
    """A CPU or memory quantity: the CEL upper bound when the schema has one, else the largest ``maxLength`` spells;
    the smallest positive (``1n``) and zero."""
    rules = [r.get("rule", "") for r in s.get("x-kubernetes-validations") or []]
    upper = next((m.group(1) for r in rules if (m := _UPPER.search(r))), None)
    top = upper or "9" * min(int(s.get("maxLength", 32)), 32)
    return st.sampled_from([top, "1n", "1u", "100u", "0", "1"])


def string(s: dict[str, Any]) -> st.SearchStrategy[str]:
    if "enum" in s:
        return st.sampled_from(list(s["enum"]))
    n = int(s.get("maxLength", LONG))
    return st.sampled_from(["a" * n, "a"])


def from_schema(s: dict[str, Any], cap: int = 2, full: bool = False) -> st.SearchStrategy[Any]:
    """Values of schema ``s`` (see the module); with ``full`` every property of every object is present."""
    if s.get("x-kubernetes-int-or-string"):
        return quantity(s)
    t = s.get("type")
    if t in ("number", "integer"):
        return number(s)
    if t == "string":
        return string(s)
    if t == "boolean":
        return st.booleans()
    if t == "array":
        items = s.get("items") or {}
        lo, hi = int(s.get("minItems", 0)), int(s.get("maxItems", cap))
        short = st.lists(from_schema(items, cap, full), min_size=max(lo, 1 if full else 0), max_size=max(lo, min(hi, cap)))
        if items.get("type") in ("number", "integer", "string") and hi > cap:
            return short | st.lists(from_schema(items, cap, full), min_size=hi, max_size=hi)
        return short
    if t == "object" or "properties" in s:
        if s.get("x-kubernetes-preserve-unknown-fields"):
            return st.just({})
        props = s.get("properties") or {}
        if props:
            req = set(props) if full else set(s.get("required") or ())
            return st.fixed_dictionaries({k: from_schema(v, cap, full) for k, v in props.items() if k in req},
                                         optional={k: from_schema(v, cap, full) for k, v in props.items() if k not in req})
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            n = min(int(s.get("maxProperties", cap)), cap)
            return st.dictionaries(st.sampled_from(["k", "sink:p0", "x" * 63]), from_schema(extra, cap, full), min_size=1 if full and n else 0, max_size=n)
        return st.just({})
    return st.nothing()

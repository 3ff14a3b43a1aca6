"""`kubesoda plan` on hostile manifests: random values in every field of a valid template, job, node
and policy (wrong types, NaN, infinities, huge numbers, deep nesting), deep YAML, binary files.
Every input ends in exit code 0, 1 or 2, an input error is one line naming the file and the field,
and there is never a traceback."""

from __future__ import annotations

import copy
import io
import math
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soda_operator import cli

ROOT = Path(__file__).resolve().parents[1]
NODES = ROOT / "examples" / "nodes" / "small-8.yaml"
BASE = list(yaml.safe_load_all((ROOT / "examples" / "small-pipeline" / "pipeline.yaml").read_text()))
POLICY = {"apiVersion": "kubesoda.io/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "default"},
          "spec": {"macroQDeadlineSeconds": 0.2, "macroWDeadlineSeconds": 0.2, "unitMips": 100}}


def run_plan(*files: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = cli.main(["plan", "-f", str(NODES), *[x for f in files for x in ("-f", str(f))], "--deadline-scale", "0.2"])
    return rc, out.getvalue(), err.getvalue()


def nested(depth: int, leaf: object = 1) -> object:
    v = leaf
    for i in range(depth):
        v = {"a": v} if i % 2 else [v]
    return v


scalars = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["100", "-1", "1e400", "NaN", ".inf", "250m", "1Ki", "", "0x10", "🙂"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                      max_leaves=8) | st.integers(min_value=50, max_value=400).map(nested)


def paths(obj: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, (*prefix, i))
    return out


def put(obj: object, path: tuple, value: object) -> None:
    for k in path[:-1]:
        obj = obj[k]  # type: ignore[index]
    obj[path[-1]] = value  # type: ignore[index]


DOCS = [*BASE, POLICY]
TARGETS = [(i, p) for i, d in enumerate(DOCS) for p in paths(d) if p[0] in ("spec", "metadata")]


def check(rc: int, out: str, err: str, f: Path) -> None:
    assert rc in (0, 1, 2), rc
    assert "Traceback" not in err and "Traceback" not in out
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    if rc == 2:
        assert errors, err
        # the file is named (a job elsewhere that uses an object of it may say so too)
        assert any(str(f) in line or "no StreamJob" in line for line in errors), errors
        assert all(str(f) in line or "no StreamJob" in line or "is invalid" in line for line in errors), errors


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.sampled_from(TARGETS), values), min_size=1, max_size=3))
def test_random_field_values_end_in_a_clear_answer(tmp_path, edits):
    docs = copy.deepcopy(DOCS)
    for (i, path), v in edits:
        try:
            put(docs[i], path, v)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier edit replaced the parent
    f = tmp_path / "fuzz.yaml"
    f.write_text(yaml.safe_dump_all(docs, allow_unicode=True))
    check(*run_plan(f), f)


@pytest.mark.parametrize("name, text", [
    ("deep-flow.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n"),
    ("deep-block.yaml", "".join("  " * i + "a:\n" for i in range(3000)) + "  " * 3000 + "b: 1\n"),
    ("deep-spec.yaml", yaml.safe_dump(BASE[1]) + "  extra: " + "[" * 900 + "1" + "]" * 900 + "\n"),  # spec is the last key
    ("nan.yaml", yaml.safe_dump({**BASE[0], "spec": {**BASE[0]["spec"], "primalInputs": [{"pe": "ingest", "rate": math.nan}]}})),
    ("inf.yaml", yaml.safe_dump({**BASE[0], "spec": {**BASE[0]["spec"], "pes": [{**BASE[0]["spec"]["pes"][0], "minCpu": math.inf}]}})),
    ("anchors.yaml", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                     "kind: StreamJob\nmetadata: {name: bomb}\nspec: {templates: [*d]}\n"),
])
def test_hostile_files_give_one_clear_error(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(text)
    rc, out, err = run_plan(ROOT / "examples" / "small-pipeline", f)
    assert rc in (1, 2), (rc, err)
    check(rc, out, err, f)


def test_binary_and_huge_files(tmp_path, monkeypatch):
    b = tmp_path / "binary.yaml"
    b.write_bytes(bytes(range(256)) * 4)
    rc, out, err = run_plan(b)
    assert rc == 2 and "not UTF-8" in err and str(b) in err
    from soda_operator import manifests

    monkeypatch.setattr(manifests, "MAX_FILE_BYTES", 100_000)
    h = tmp_path / "huge.yaml"
    h.write_text("# " + "x" * 200_000 + "\n")
    rc, out, err = run_plan(h)
    assert rc == 2 and "over the limit" in err and str(h) in err

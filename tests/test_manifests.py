"""Reading manifests for `kubesoda plan` (soda_operator.manifests): nested aliases refused before
they expand, libyaml's loader, YAML 1.2 floats, the same object twice named with both places,
strict JSON out, and schema reasons kept whole."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from soda_operator import cli, manifests, schema

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
NODES = EX / "nodes" / "small-8.yaml"
PIPE = EX / "small-pipeline"


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = cli.main(list(args))
    return rc, out.getvalue(), err.getvalue()


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def strict(text: str) -> object:
    """json.loads that refuses NaN and Infinity (Python's json reads them by default; JSON has none)."""
    def refuse(name: str) -> object:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------------------------ aliases

LADDER = "\n".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
BOMBS = {
    # nine levels of nine: 9^9 (387 million) strings once written out
    "node-labels": "apiVersion: v1\nkind: Node\nmetadata:\n  name: bomb\n  labels:\n    a: &a [x, x, x, x, x, x, x, x, x]\n"
                   + textwrap.indent(LADDER, "    ") + "\nstatus: {allocatable: {cpu: '4'}}\n",
    "pe-nodeselector": (PIPE / "pipeline.yaml").read_text().split("---")[0].replace("name: clickstream", "name: bomb").replace(
        "  - name: ingest\n", "  - name: ingest\n    nodeSelector:\n      a: &a [x, x, x, x, x, x, x, x, x]\n"
        + textwrap.indent(LADDER, "      ") + "\n"),
    "job-templates": "apiVersion: kubesoda.io/v1alpha1\nkind: StreamJob\nmetadata: {name: bomb}\nspec:\n  x:\n"
                     "    a: &a [x, x, x, x, x, x, x, x, x]\n" + textwrap.indent(LADDER, "    ") + "\n  templates: *i\n",
}

PROBE = """
import json, sys, time, tracemalloc
from soda_operator import cli
tracemalloc.start()
t0 = time.monotonic()
rc = cli.main(sys.argv[1:])
print(json.dumps({"rc": rc, "seconds": time.monotonic() - t0, "peak": tracemalloc.get_traced_memory()[1]}), file=sys.stderr)
"""


@pytest.mark.parametrize("where", sorted(BOMBS))
def test_alias_bomb_is_refused_fast_in_bounded_memory(tmp_path, where):
    """Before: the loader shares the repeated lists, then validation and translation walk them
    written out (1.3 GB of RSS after 20 s, no answer); now one error before anything walks them.
    A subprocess, so the old code's growth ends with the timeout."""
    f = tmp_path / f"{where}.yaml"
    f.write_text(BOMBS[where])
    proc = subprocess.run([sys.executable, "-c", PROBE, "plan", "-f", str(NODES), "-f", str(PIPE), "-f", str(f), "--deadline-scale", "0.1"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    stats = json.loads(proc.stderr.splitlines()[-1])
    errs = errors(proc.stderr)
    assert stats["rc"] == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(errs) == 1 and str(f) in errs[0] and "aliases repeat more than 10000 nodes" in errs[0], errs
    assert stats["seconds"] < 5, stats
    assert stats["peak"] < 30_000_000, stats  # bytes traced by tracemalloc over the whole command


def test_aliases_within_the_budget_are_read_as_written(tmp_path):
    """Anchors as people write them (shared labels) plan as they would apply; an alias inside its
    own anchor, or more repetition than the budget, is refused with the line."""
    items = [f"- {{kind: Node, metadata: {{name: n{i}, labels: *labels}}, status: {{allocatable: {{cpu: '4'}}, "
             "conditions: [{type: Ready, status: 'True'}]}}" for i in range(1, 8)]
    text = ("apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata:\n    name: n0\n    labels: &labels\n"
            "      topology.kubernetes.io/zone: zone-0\n      kubesoda.io/rack: rack-0\n      kubesoda.io/mips-per-core: '1000'\n"
            "  status: {allocatable: {cpu: '4'}, conditions: [{type: Ready, status: 'True'}]}\n" + "\n".join(items) + "\n")
    f = tmp_path / "anchored.yaml"
    f.write_text(text)
    m = manifests.load([str(f)])
    assert len(m.nodes) == 8 and all(n["metadata"]["labels"]["kubesoda.io/mips-per-core"] == "1000" for n in m.nodes)
    assert text.count("*labels") == 7
    rc, out, err = run("plan", "-f", str(f), "-f", str(PIPE), "--deadline-scale", "0.1", "--json")
    assert rc == 0, err
    assert strict(out)["feasible"]  # type: ignore[index]

    (tmp_path / "loop.yaml").write_text("kind: Node\nmetadata: {name: n, labels: &l {a: *l}}\n")
    with pytest.raises(manifests.ManifestError, match=r"loop.yaml: line 2: an alias refers to a node that contains it"):
        manifests.load([str(tmp_path / "loop.yaml")])
    # the budget is per file, over all its documents: 11 documents of 1000 repeated nodes each
    doc = "kind: Node\nmetadata: {name: n%d}\nx: &x [" + ", ".join(["y"] * 999) + "]\ny: *x\n"
    (tmp_path / "many.yaml").write_text("---\n".join(doc % i for i in range(11)))
    with pytest.raises(manifests.ManifestError, match="aliases repeat more than 10000 nodes"):
        manifests.load([str(tmp_path / "many.yaml")])
    (tmp_path / "ten.yaml").write_text("---\n".join(doc % i for i in range(10)))
    assert len(manifests.load([str(tmp_path / "ten.yaml")]).nodes) == 10


def test_alias_count_walks_each_node_once():
    """The count never writes the aliases out: 30 levels of doubling (2^30 nodes) answer at once."""
    text = "a0: &a0 [x, x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 31))
    node = yaml.compose(text, Loader=manifests.Loader)
    with pytest.raises(manifests.AliasError, match="more than 1000000"):
        manifests.alias_nodes(node, 1_000_000)
    assert manifests.alias_nodes(yaml.compose("a: &a [1, 2, 3]\nb: *a\nc: *a\n", Loader=manifests.Loader), 100) == 8


# ------------------------------------------------------------------------------------ the loader


def test_libyaml_loader_where_present():
    assert issubclass(manifests.Loader, yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)


def test_exponent_floats_read_as_yaml_1_2_reads_them(tmp_path):
    got = yaml.load("a: 1e308\nb: 1E5\nc: -2e-3\nd: .5e3\ne: +1.5e2\nf: 1.0e+5\ng: 100\nh: 0x10\ni: '1e5'\nj: e5\nk: 1e\n"
                    "l: yes\nm: 1.5\nn: .inf\no: 2026-11-24\n", Loader=manifests.Loader)  # noqa: S506 - a safe loader
    assert got["a"] == 1e308 and got["b"] == 1e5 and got["c"] == -2e-3 and got["d"] == 500.0 and got["e"] == 150.0
    assert got["f"] == 1e5 and all(isinstance(got[k], float) for k in "abcdefmn")
    assert got["g"] == 100 and isinstance(got["g"], int) and got["h"] == 16  # the rest of the safe loader as it was
    assert (got["i"], got["j"], got["k"], got["l"]) == ("1e5", "e5", "1e", True)
    assert str(got["o"]) == "2026-11-24"
    f = tmp_path / "e308.yaml"
    f.write_text((PIPE / "pipeline.yaml").read_text().replace("rate: 200", "rate: 1e308"))
    m = manifests.load([str(f)])
    assert m.templates[0]["spec"]["primalInputs"][0]["rate"] == 1e308
    rc, out, err = run("plan", "-f", str(NODES), "-f", str(f), "--deadline-scale", "0.1", "--json")
    assert "not of type 'number'" not in err and "not a number" not in err, err
    strict(out)


# ------------------------------------------------------------------------------------ the same object twice


def test_the_same_nodes_twice_is_one_error_per_object_naming_both_places(tmp_path):
    rc, out, err = run("plan", "-f", str(NODES), "-f", str(PIPE), "-f", str(NODES), "--deadline-scale", "0.1")
    errs = errors(err)
    assert rc == 2 and out == "" and "Traceback" not in err and "ValidationError" not in err, err
    assert len(errs) == 8 and all(e.count(str(NODES)) == 2 for e in errs), errs
    assert errs[0] == f"error: {NODES} (document 1): Node z0-r0-n0 is defined twice, first in {NODES} (document 1)"
    # one node copied into another file, and a job in a directory given with one of its files
    copy = tmp_path / "more-nodes.yaml"
    copy.write_text(NODES.read_text().split("---")[3])
    rc, out, err = run("plan", "-f", str(NODES), "-f", str(PIPE), "-f", str(copy), "-f", str(PIPE / "pipeline.yaml"),
                       "--deadline-scale", "0.1")
    errs = errors(err)
    assert rc == 2 and "Traceback" not in err, err
    assert errs == [f"error: {copy} (document 1): Node z0-r1-n1 is defined twice, first in {NODES} (document 4)",
                    f"error: {PIPE / 'pipeline.yaml'} (document 1): StreamTemplate default/clickstream is defined twice, "
                    f"first in {PIPE / 'pipeline.yaml'} (document 1)",
                    f"error: {PIPE / 'pipeline.yaml'} (document 2): StreamJob default/clicks is defined twice, "
                    f"first in {PIPE / 'pipeline.yaml'} (document 2)"], errs


# ------------------------------------------------------------------------------------ strict JSON out


def test_json_output_is_strict_json_and_names_a_non_finite_field(monkeypatch):
    """Whatever a plan holds, --json is JSON (no Infinity, no NaN: allow_nan=False): a non-finite
    number is null with one error naming the field. The pipeline guard already refuses such a plan
    from the planner (one error, exit 2, no traceback); plan_json is the last line behind it."""
    from soda_operator import cli
    from soda_optimizer import pipeline
    from soda_optimizer.plan import JobDecision, Plan

    def bad_plan(scen, *a, **k):  # noqa: ANN001, ARG001
        return Plan(feasible=True, importance=float("inf"), stream_rates={"a->b": float("nan")},
                    jobs=(JobDecision(job="default/clicks", admitted=True, importance=float("-inf"), mips=5.0),))

    doc = strict(json.dumps(cli.plan_json(bad_plan(None), []), allow_nan=False))
    assert isinstance(doc, dict)
    assert doc["importance"] is None and doc["stream_rates"] == {"a->b": None} and doc["jobs"][0]["importance"] is None
    assert doc["jobs"][0]["mips"] == 5.0
    assert {e.split(" is not")[0] for e in doc["errors"]} == {"the plan's importance (inf)", "the plan's jobs[0].importance (-inf)",
                                                             "the plan's stream_rates.a->b (nan)"}
    monkeypatch.setattr(pipeline, "run", bad_plan)
    for cmd in (["plan", "-f", str(NODES), "-f", str(PIPE), "--json"], ["plan", "-f", str(NODES), "-f", str(PIPE)],
                ["explain", "clicks", "-f", str(NODES), "-f", str(PIPE), "--json"]):
        rc, out, err = run(*cmd)
        assert rc == 2 and "Traceback" not in err and "Infinity" not in out and "NaN" not in out
        assert errors(err) == ["error: planning fails even without the 1 suspect job(s): the plan's importance is inf"], err


def test_json_output_of_a_good_plan_is_unchanged():
    rc, out, err = run("plan", "-f", str(NODES), "-f", str(PIPE), "--json", "--deadline-scale", "0.1")
    doc = strict(out)
    assert rc == 0 and isinstance(doc, dict) and doc["errors"] == [] and doc["importance"] > 0, err


# ------------------------------------------------------------------------------------ reasons kept whole


def test_long_values_are_trimmed_and_the_reason_kept(tmp_path):
    names = ", ".join(f"template-with-a-rather-long-name-{i:02d}" for i in range(9))
    (tmp_path / "items.yaml").write_text(f"apiVersion: kubesoda.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: items}}\n"
                                         f"spec: {{templates: [{names}]}}\n")
    (tmp_path / "owner.yaml").write_text("apiVersion: kubesoda.io/v1alpha1\nkind: StreamJob\nmetadata: {name: owner}\n"
                                         f"spec: {{templates: [clickstream], owner: {'o' * 100_000}}}\n")
    rc, out, err = run("plan", "-f", str(NODES), "-f", str(PIPE), "-f", str(tmp_path), "--deadline-scale", "0.1")
    errs = errors(err)
    assert rc == 2 and len(errs) == 2, err
    items, owner = sorted(errs)
    assert "StreamJob default/items field spec.templates: ['template-with-a-rather-long-name-00'" in items
    assert items.endswith(" characters) is too long") and len(items) < 300, items
    assert "StreamJob default/owner field spec.owner: 'oooo" in owner and owner.endswith("(100002 characters) is too long"), owner
    assert len(owner) < 300


def test_schema_short_keeps_the_reason():
    assert schema.short("'abc' is too long", "abc") == "'abc' is too long"
    long = ["x" * 50] * 40
    got = schema.short(f"{long!r} is too long", long)
    assert got.startswith("['xxxxx") and got.endswith(f"... ({len(repr(long))} characters) is too long") and len(got) < 120
    key = "k" * 5000
    got = schema.short(f"Additional properties are not allowed ('{key}' was unexpected)", {key: 1})
    assert got.startswith("Additional properties are not allowed ('kkk") and got.endswith("was unexpected)") and len(got) < 200

"""schema.with_defaults: the CRD is the one source of defaults; a present value is never changed."""

from __future__ import annotations

import yaml

from soda_operator import schema


def _crds():
    for f in sorted(schema.CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(f.read_text()):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                v = next(v for v in crd["spec"]["versions"] if v.get("storage"))
                yield crd["spec"]["names"]["kind"], v["schema"]["openAPIV3Schema"]


def test_every_top_level_spec_default_is_filled_and_present_values_kept():
    seen = 0
    for kind, s in _crds():
        props = ((s.get("properties") or {}).get("spec") or {}).get("properties") or {}
        defaults = {k: p["default"] for k, p in props.items() if "default" in p}
        out = schema.with_defaults({"kind": kind, "metadata": {"name": "x"}, "spec": {}})
        for k, v in defaults.items():
            # an object's default ({} as a rule) gets its own fields' defaults filled in, as the API server does
            got = out["spec"][k]
            assert got == v or isinstance(v, dict) and v.items() <= got.items(), (kind, k)
            seen += 1
        # a value the user wrote stays (a sentinel no default equals)
        mine = {k: "mine" for k in defaults}
        assert {k: schema.with_defaults({"kind": kind, "spec": mine})["spec"][k] for k in defaults} == mine
    assert seen >= 5  # the related systems' CRDs carry defaults


def test_defaults_inside_array_items():
    out = schema.with_defaults({"kind": "JobFlow", "spec": {"steps": [{}, {"runSeconds": 5}]}})
    assert out["spec"]["steps"][0]["runSeconds"] == 60 and out["spec"]["steps"][1]["runSeconds"] == 5


def test_unknown_kind_is_returned_as_is():
    obj = {"kind": "Nope", "spec": {}}
    assert schema.with_defaults(obj) == obj


def test_no_crd_defines_a_key_twice():
    """A key written twice in a CRD (a merge can do it) is an error for kubectl and the API server;
    PyYAML's safe loader keeps the last one silently, so check it here."""

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        keys = [loader.construct_object(k, deep=True) for k, _ in node.value]
        twice = sorted({str(k) for k in keys if keys.count(k) > 1})
        assert not twice, f"{node.start_mark}: {twice}"
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    files = sorted(schema.CRDS.glob("*.yaml"))
    assert files
    for f in files:
        list(yaml.load_all(f.read_text(), Loader=Strict))

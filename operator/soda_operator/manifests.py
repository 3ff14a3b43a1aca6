"""Read Kubernetes YAML manifests (files, directories, multi-document) for the offline planner.

The YAML is read by :class:`Loader`: libyaml's safe loader where PyYAML was built with it (a few
times faster than the pure-Python one), PyYAML's safe loader otherwise, with two changes for
manifests:

- numbers in exponent notation are read as YAML 1.2 (and JSON, and the API server) read them:
  ``1e308``, ``1E5``, ``-2e-3`` are floats, not the strings YAML 1.1 makes of them;
- aliases (``*name``) may repeat at most :data:`ALIAS_NODES` nodes in a file: the API server's
  YAML reader accepts aliases, so a file written with anchors plans offline as it applies live, but
  a file whose aliases nest (the "billion laughs") is refused before anything walks the objects
  it would expand to.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KINDS = {"Node", "StreamTemplate", "StreamJob", "SchedulingPolicy", "Pod", "ResourceProfile"}
IGNORED = {"Namespace", "CustomResourceDefinition"}


class ManifestError(Exception):
    """Input that cannot be planned; ``lines`` are its problems, one line each."""

    def __init__(self, *lines: str) -> None:
        super().__init__(*lines)
        self.lines = list(lines)

    def __str__(self) -> str:
        return "\n".join(self.lines)


# ------------------------------------------------------------------------------------ the YAML loader

ALIAS_NODES = 10_000  # nodes that aliases may repeat in one file (a hand-written file's shared labels use a few dozen)

_Base: Any = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader


class AliasError(yaml.YAMLError):
    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


def _children(n: yaml.Node) -> list[yaml.Node]:
    if isinstance(n, yaml.SequenceNode):
        return list(n.value)
    if isinstance(n, yaml.MappingNode):
        return [x for kv in n.value for x in kv]
    return []


def _size(n: yaml.Node, sizes: dict[int, int], cap: int) -> int:
    """The nodes under ``n`` (itself included) with every alias written out, ``cap + 1`` when over
    ``cap``; memoised in ``sizes``, iterative (libyaml allows 1000 levels, Python's stack fewer).
    Only called on a node whose descendants were all walked without finding a cycle."""
    stack = [(n, False)]
    while stack:
        x, ready = stack.pop()
        if id(x) in sizes:
            continue
        if ready:
            sizes[id(x)] = min(1 + sum(sizes.get(id(c), cap + 1) for c in _children(x)), cap + 1)
        else:
            stack.append((x, True))
            stack.extend((c, False) for c in _children(x) if id(c) not in sizes)
    return sizes[id(n)]


def alias_nodes(root: yaml.Node, budget: int, used: int = 0) -> int:
    """``used`` plus the nodes that the aliases of the document ``root`` add when written out (an
    alias is a node reached a second time), or :class:`AliasError` past ``budget`` or for an alias
    inside its own anchor. Costs one visit per node as written, whatever the aliases expand to."""
    seen, sizes = {id(root)}, dict[int, int]()
    path = {id(root)}  # the nodes from the root to the one being walked
    todo: list[tuple[yaml.Node, Iterator[yaml.Node]]] = [(root, iter(_children(root)))]
    added = used
    while todo:
        node, children = todo[-1]
        child = next(children, None)
        if child is None:
            todo.pop()
            path.discard(id(node))
            continue
        if id(child) not in seen:
            seen.add(id(child))
            path.add(id(child))
            todo.append((child, iter(_children(child))))
            continue
        if id(child) in path:
            raise AliasError("an alias refers to a node that contains it", child.start_mark)
        added += _size(child, sizes, budget)
        if added > budget:
            raise AliasError(f"aliases repeat more than {budget} nodes (nested anchors?); write the repeated values out",
                             child.start_mark)
    return added


class Loader(_Base):  # type: ignore[misc,valid-type]
    """The safe loader (libyaml's where present) with YAML 1.2 floats and bounded aliases."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.alias_used = 0  # over the file's documents
        # an alias needs an anchor: text without both '&' and '*' has none (most files), no walk
        self.may_alias = not isinstance(stream, str) or ("&" in stream and "*" in stream)

    def construct_document(self, node: yaml.Node) -> Any:
        if self.may_alias:
            self.alias_used = alias_nodes(node, ALIAS_NODES, self.alias_used)
        return super().construct_document(node)


# YAML 1.1 reads a number with an exponent as a float only with a dot and a signed exponent
# (1.0e+5); YAML 1.2, JSON and the API server also read 1e5, 1E5, -2e-3, 1.5e3, .5e3
Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
                             list("-+0123456789."))


@dataclass
class Manifests:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    policy: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = field(default_factory=list)  # other workloads' pods: they hold node capacity
    profiles: list[dict[str, Any]] = field(default_factory=list)  # ResourceProfiles: learned functions (docs/learn.md)
    source: dict[str, str] = field(default_factory=dict)  # "Kind/ns/name" -> "file (document N)"


def _files(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted(x for x in path.rglob("*") if x.suffix in (".yaml", ".yml", ".json") and x.is_file()))
        elif path.is_file():
            out.append(path)
        else:
            raise ManifestError(f"{p}: no such file or directory")
    return out


MAX_FILE_BYTES = 64 * 1024 * 1024  # a manifest larger than this is refused, not parsed


def _read(f: Path) -> list[Any]:
    size = f.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ManifestError(f"{f}: {size} bytes, over the limit of {MAX_FILE_BYTES} for a manifest file")
    try:
        text = f.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(f"{f}: not UTF-8 text (byte {e.start})") from e
    try:
        return list(yaml.load_all(text, Loader=Loader))  # noqa: S506 - Loader is a safe loader
    except AliasError as e:
        raise ManifestError(f"{f}: line {e.problem_mark.line + 1}: {e.problem}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ManifestError(f"{f}:{where}: malformed YAML: {getattr(e, 'problem', e)}") from e
    except RecursionError as e:
        raise ManifestError(f"{f}: nested too deeply to be a Kubernetes object") from e


def _objects(f: str | Path, docs: list[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each object of a file's documents with where it is; a ``List`` (what ``kubectl get -o
    yaml`` writes) gives its items."""
    for i, d in enumerate(docs):
        if d is None:
            continue
        where = f"{f} (document {i + 1})"
        if not isinstance(d, dict) or "kind" not in d:
            raise ManifestError(f"{where}: not a Kubernetes object (no 'kind')")
        if not isinstance(d["kind"], str):
            raise ManifestError(f"{where}: kind is not a string")
        if d["kind"] != "List" and not d["kind"].endswith("List"):
            yield where, d
            continue
        items = d.get("items")
        if not isinstance(items, list):
            raise ManifestError(f"{where}: {d['kind']} field items: not a list")
        for k, item in enumerate(items):
            at = f"{where} items[{k}]"
            if isinstance(item, dict) and "kind" not in item and d["kind"] != "List":
                item = {**item, "kind": d["kind"][: -len("List")]}  # a typed list (NodeList) leaves it out
            if not isinstance(item, dict) or not isinstance(item.get("kind"), str):
                raise ManifestError(f"{at}: not a Kubernetes object (no 'kind')")
            if item["kind"].endswith("List"):
                raise ManifestError(f"{at}: a {item['kind']} inside a list")
            yield at, item


def load(paths: list[str]) -> Manifests:
    """The objects of the files and directories ``paths``, or a :class:`ManifestError`. The same
    object (kind, namespace, name) defined twice, in one file or two (a file given twice, or in a
    directory given too), is an error naming both places: which of the two to plan is not for
    kubesoda to guess."""
    m = Manifests()
    twice: list[str] = []
    for f in _files(paths):
        for where, d in _objects(f, _read(f)):
            kind = d["kind"]
            if kind in IGNORED:
                continue
            if kind not in KINDS:
                raise ManifestError(f"{where}: unknown kind '{kind}' (expected one of {sorted(KINDS)})")
            md = d.get("metadata")
            if md is None:
                md = d["metadata"] = {}
            if not isinstance(md, dict):
                raise ManifestError(f"{where}: {kind} field metadata: not an object")
            if not md.get("name"):
                raise ManifestError(f"{where}: {kind} has no metadata.name")
            for fld in ("name", "namespace"):
                if fld in md and not isinstance(md[fld], str):
                    raise ManifestError(f"{where}: {kind} field metadata.{fld}: not a string")
            if kind in ("StreamTemplate", "StreamJob", "Pod"):
                md.setdefault("namespace", "default")
            k = f"{kind}/{md.get('namespace')}/{md['name']}" if md.get("namespace") else f"{kind}/{md['name']}"
            if k in m.source:
                name = f"{md['namespace']}/{md['name']}" if md.get("namespace") else md["name"]
                twice.append(f"{where}: {kind} {name} is defined twice, first in {m.source[k]}")
                continue
            m.source[k] = where
            if kind == "Node":
                m.nodes.append(d)
            elif kind == "StreamTemplate":
                m.templates.append(d)
            elif kind == "StreamJob":
                m.jobs.append(d)
            elif kind == "Pod":
                m.pods.append(d)
            elif kind == "ResourceProfile":
                m.profiles.append(d)
            else:
                if m.policy is not None:
                    raise ManifestError(f"{where}: more than one SchedulingPolicy")
                m.policy = d
    if twice:
        raise ManifestError(*twice)
    return m

"""Read Kubernetes YAML manifests (files, directories, multi-document) for the offline planner."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KINDS = {"Node", "StreamTemplate", "StreamJob", "SchedulingPolicy", "Pod", "ResourceProfile"}
IGNORED = {"Namespace", "CustomResourceDefinition"}


class ManifestError(Exception):
    pass


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
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ManifestError(f"{f}:{where}: malformed YAML: {getattr(e, 'problem', e)}") from e
    except RecursionError as e:
        raise ManifestError(f"{f}: nested too deeply to be a Kubernetes object") from e


def _objects(f: str, docs: list[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
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
    m = Manifests()
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
    return m

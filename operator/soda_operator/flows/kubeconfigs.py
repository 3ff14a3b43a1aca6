"""Kubeconfigs read from Secrets (a FlowPool's member cluster, docs/flows.md): inline credentials only.

Not in the paper: Montana & Zinky take the clusters as reachable (section 2.2); reaching another Kubernetes cluster
from a Secret is this side's own concern, guarded as MultiKueue guards its worker kubeconfigs.

The kubernetes client does more with a kubeconfig than connect: it runs ``users[].user.exec``
commands and ``auth-provider`` plugins, and reads the files a kubeconfig names (``tokenFile``,
``client-certificate``, ``client-key``, ``certificate-authority``, anything ``LocationOfOrigin``
points at). A kubeconfig in a Secret is written by whoever may write that Secret; taken as it is,
it would run a command inside the operator with the operator's ServiceAccount, or read the
operator's own files (its token among them). So, the way MultiKueue keeps its kubeconfig Secrets,
the operator

- reads Secrets only in its own namespace (:func:`operator_namespace`; the chart grants ``get`` on
  Secrets there with a Role, and no Secret anywhere else), and
- takes only the entries on :data:`ALLOWED` (server, inline certificates and keys, a token, basic
  auth, names); anything else is refused with its path (``users[0].user.exec``) unless the operator
  runs with ``--allow-unsafe-kubeconfigs`` (chart: ``operator.allowUnsafeKubeconfigs``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

# what a kubeconfig may hold, per part; everything else needs --allow-unsafe-kubeconfigs
ALLOWED: dict[str, frozenset[str]] = {
    "": frozenset({"apiVersion", "kind", "clusters", "contexts", "users", "current-context", "preferences"}),
    "cluster": frozenset({"server", "certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name"}),
    "user": frozenset({"client-certificate-data", "client-key-data", "token", "username", "password"}),
    "context": frozenset({"cluster", "user", "namespace"}),
}
MAX_BYTES = 1 << 20  # a Secret holds at most 1 MiB
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
FLAG = "--allow-unsafe-kubeconfigs"


class Refused(ValueError):
    """A kubeconfig the operator will not use (the message names the entries and the flag)."""


def operator_namespace(given: str | None = None) -> str:
    """Where the operator reads Secrets: ``--secrets-namespace``, else ``POD_NAMESPACE`` (the chart
    sets it from the downward API), else the in-cluster ServiceAccount's namespace, else ``default``
    (a ``kubesoda run`` outside the cluster)."""
    if given:
        return given
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SA_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def unsafe_entries(doc: Any) -> list[str]:
    """The paths of the entries of ``doc`` (a parsed kubeconfig) outside :data:`ALLOWED`."""
    if not isinstance(doc, dict):
        return ["(the document is not a mapping)"]
    out = [k for k in doc if k not in ALLOWED[""]]
    for section, part in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
        items = doc.get(section) or []
        if not isinstance(items, list):
            out.append(section)
            continue
        for i, it in enumerate(items):
            if not isinstance(it, dict):
                out.append(f"{section}[{i}]")
                continue
            out += [f"{section}[{i}].{k}" for k in it if k not in ("name", part)]
            body = it.get(part) or {}
            if not isinstance(body, dict):
                out.append(f"{section}[{i}].{part}")
                continue
            out += [f"{section}[{i}].{part}.{k}" for k in body if k not in ALLOWED[part]]
    return out


def parse(raw: bytes, allow_unsafe: bool = False) -> dict[str, Any]:
    """The kubeconfig in ``raw`` as a dict; :class:`Refused` naming what is not allowed."""
    if len(raw) > MAX_BYTES:
        raise Refused(f"the kubeconfig is {len(raw)} bytes (at most {MAX_BYTES})")
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise Refused(f"the kubeconfig is not YAML: {str(e)[:200]}") from e
    bad = unsafe_entries(doc)
    if not isinstance(doc, dict):
        raise Refused("the kubeconfig is not a mapping")
    if bad and not allow_unsafe:
        shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        raise Refused(f"the kubeconfig holds {shown}: only inline credentials are read (exec, auth providers and file paths would run "
                      f"code or read files inside the operator; an administrator may allow them with {FLAG})")
    return doc  # type: ignore[no-any-return]


def api_client(raw: bytes, allow_unsafe: bool = False) -> client.ApiClient:
    """An API client of the cluster the kubeconfig in ``raw`` names (:func:`parse` first)."""
    return config.new_client_from_config_dict(parse(raw, allow_unsafe), persist_config=False)

"""Hierarchical PE signatures (SODA paper, section 6.1 and Fig. 18), mapped to Kubernetes.

A signature is a path of four levels, from the most general to the most specific:

1. **kind**: source, transform or sink (the root of a tree);
2. **executable**: the container image: its digest (``sha256:...``) when the pod status reports one,
   else the normalised image reference (``docker.io/library/busybox:latest``);
3. **arguments**: a stable hash of the container's command, args and env;
4. **flowspec**: how the PE is connected upstream: a hash of the (producer, stream name) pairs that
   feed it, a producer named by its *arguments-level* key (or ``primal`` for a primal input).

Every prefix of the path is a node of the tree and has its own model; :meth:`Signature.ancestors`
walks from a node to the root. :attr:`Signature.key` names a node by a short DNS-1123 label
(``transform-args-1f3a...``) so the operator can name a Kubernetes object after it.

**Namespaces (issue 45).** A signature may carry the Kubernetes namespace of the PE it was taken
from: the namespace is then a scope of the whole tree (the kind's root included), never shared
with another namespace, and the key is prefixed with it (``team-a.transform-args-1f3a...``, a DNS
subdomain: a namespace name has no dot, so no scoped key equals an unscoped one). The operator
scopes every signature it observes or plans with, so a tenant's observations can only ever reach
its own namespace's nodes. A signature without a namespace (:meth:`Signature.shared`) names the
cluster-wide node of the same path: observations never reach it, an administrator may pin it
(:func:`.functions.choose`: a read-only prior for every namespace).

Departures from the paper:

- hashes are SHA-256 (truncated to 16 hex digits), not MD5; the executable is the image digest, the
  closest thing a pod has to "a hash of the PE's executable";
- env variables whose names start with ``KUBESODA_`` are left out of the arguments hash: the
  operator injects them (wiring, metrics port, pod identity), they differ from job to job and would
  stop a PE reused in a second job from finding its model;
- the flowspec names producers by their arguments-level key, not their full signature: a full
  signature would make every PE's flowspec depend on the whole upstream graph (and be undefined on a
  cycle), while the paper's flowspec is about the immediate upstream connection;
- one tree per namespace, not one per cluster (issue 45): the paper pools every PE of a kind in
  one root; in a shared cluster that pool is a door from one tenant's PEs into another's plans;
- an image known by reference at submission time and by digest once running would give two
  executables; :class:`.learner.Learner` records reference -> digest aliases when it observes a
  signature carrying both and resolves references through them (:meth:`.learner.Learner.resolve`).

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..model import PEKind

HASH_LEN = 16
IGNORED_ENV_PREFIXES: tuple[str, ...] = ("KUBESODA_",)
PRIMAL_PRODUCER = "primal"
NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a Kubernetes namespace name (DNS-1123 label)


class Level(str, Enum):
    """The levels of a signature, most general first."""

    kind = "kind"
    executable = "executable"
    arguments = "arguments"
    flowspec = "flowspec"


LEVELS: tuple[Level, ...] = (Level.kind, Level.executable, Level.arguments, Level.flowspec)
_SHORT = {Level.kind: "", Level.executable: "exe", Level.arguments: "args", Level.flowspec: "flow"}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LEN]


def normalize_image(image: str) -> str:
    """The canonical form of an image reference (Docker's conventions): a registry host, a
    repository and a tag (``:latest`` when neither tag nor digest is given).

    >>> normalize_image("busybox")
    'docker.io/library/busybox:latest'
    >>> normalize_image("localhost:5000/pe:1")
    'localhost:5000/pe:1'
    """
    ref = image.strip()
    name, at, digest = ref.partition("@")
    first, slash, rest = name.partition("/")
    if not slash:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    last = name.rsplit("/", 1)[-1]
    if not at and ":" not in last:
        name += ":latest"
    return name + (f"@{digest}" if at else "")


def image_digest(image_id: str) -> str | None:
    """The ``sha256:<hex>`` digest in a pod status ``imageID`` (``docker.io/x@sha256:...``,
    ``docker-pullable://x@sha256:...`` or a bare ``sha256:...``); None when it holds none."""
    tail = image_id.rsplit("@", 1)[-1]
    if tail.startswith("sha256:") and len(tail) > len("sha256:"):
        return tail.lower()
    return None


def executable_of(image: str, digest: str | None = None) -> str:
    """The executable level: the digest when known, else the normalised reference."""
    if digest:
        d = image_digest(digest)
        if d:
            return d
    return normalize_image(image)


def arguments_hash(command: Sequence[str] = (), args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                   ignore_env_prefixes: Sequence[str] = IGNORED_ENV_PREFIXES) -> str:
    """A stable hash of a container's command, args and env (env order does not matter; variables
    whose names start with one of ``ignore_env_prefixes`` are left out)."""
    kept = {k: v for k, v in (env or {}).items() if not any(k.startswith(p) for p in ignore_env_prefixes)}
    doc = {"command": list(command), "args": list(args), "env": sorted(kept.items())}
    return _digest(json.dumps(doc, sort_keys=True, separators=(",", ":")))


def flowspec_hash(inputs: Iterable[tuple[str, str]]) -> str:
    """A stable hash of a PE's upstream connection: (producer, stream name) pairs, in any order;
    a producer is named by its arguments-level key (:attr:`Signature.key` of
    ``sig.at(Level.arguments)``) or :data:`PRIMAL_PRODUCER`. No inputs at all is a valid flowspec
    (the paper's "null" flowspec)."""
    pairs = sorted({(str(p), str(s)) for p, s in inputs})
    return _digest(json.dumps(pairs, separators=(",", ":")))


class Signature(BaseModel):
    """A node of the signature tree: the levels down to the deepest one that is set.

    ``image`` is metadata (the reference the template names), not part of the path or the key.
    ``namespace`` is the scope of the node (issue 45): part of the key, not of the path; None is
    the cluster-wide scope.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    namespace: str | None = Field(default=None, pattern=NAMESPACE_RE.pattern)
    kind: PEKind
    executable: str | None = Field(default=None, min_length=1)
    arguments: str | None = Field(default=None, min_length=1)
    flowspec: str | None = Field(default=None, min_length=1)
    image: str | None = None

    @model_validator(mode="after")
    def _prefix(self) -> Signature:
        seen_gap = False
        for v in (self.executable, self.arguments, self.flowspec):
            if v is None:
                seen_gap = True
            elif seen_gap:
                raise ValueError("a signature level is set below an unset one")
        return self

    @classmethod
    def build(cls, kind: PEKind | str, image: str, *, digest: str | None = None, command: Sequence[str] = (),
              args: Sequence[str] = (), env: Mapping[str, str] | None = None,
              inputs: Iterable[tuple[str, str]] | None = None, namespace: str | None = None) -> Signature:
        """The full signature of a PE (down to flowspec when ``inputs`` is given, else arguments),
        scoped to ``namespace`` when given."""
        return cls(namespace=namespace, kind=PEKind(kind), executable=executable_of(image, digest),
                   arguments=arguments_hash(command, args, env),
                   flowspec=None if inputs is None else flowspec_hash(inputs), image=image)

    # ------------------------------------------------------------------ the path
    @property
    def level(self) -> Level:
        """The deepest level that is set."""
        return LEVELS[len(self.path) - 1]

    @property
    def path(self) -> tuple[str, ...]:
        """The levels as strings, root first: ``("transform", "exe:...", "args:...", "flow:...")``."""
        out = [self.kind.value]
        for lvl, v in zip(LEVELS[1:], (self.executable, self.arguments, self.flowspec)):
            if v is None:
                break
            out.append(f"{_SHORT[lvl]}:{v}")
        return tuple(out)

    def at(self, level: Level) -> Signature:
        """The ancestor (or self) at ``level``; ValueError when this signature is less specific."""
        depth = LEVELS.index(level)
        if depth >= len(self.path):
            raise ValueError(f"signature {self.display} has no {level.value} level")
        vals = [self.executable, self.arguments, self.flowspec]
        vals = [v if i < depth else None for i, v in enumerate(vals)]
        return Signature(namespace=self.namespace, kind=self.kind, executable=vals[0], arguments=vals[1], flowspec=vals[2],
                         image=self.image)

    def parent(self) -> Signature | None:
        depth = len(self.path) - 1
        return None if depth == 0 else self.at(LEVELS[depth - 1])

    def ancestors(self) -> list[Signature]:
        """Strict ancestors, nearest first, ending at the root (the kind)."""
        out: list[Signature] = []
        p = self.parent()
        while p is not None:
            out.append(p)
            p = p.parent()
        return out

    def lineage(self) -> list[Signature]:
        """Self and its ancestors, most specific first (the order of a lookup)."""
        return [self, *self.ancestors()]

    @property
    def key(self) -> str:
        """A stable name of this node: the kind at the root, else ``<kind>-<level>-<16 hex digits of
        the path's hash>`` (a DNS-1123 label of at most 31 characters); scoped to a namespace,
        ``<namespace>.`` before it (a DNS subdomain of at most 95)."""
        own = self.kind.value if self.level is Level.kind else f"{self.kind.value}-{_SHORT[self.level]}-{_digest(chr(31).join(self.path))}"
        return own if self.namespace is None else f"{self.namespace}.{own}"

    def shared(self) -> Signature:
        """The cluster-wide node of the same path (no namespace): what an administrator may pin for
        every namespace; the operator never observes it."""
        return self if self.namespace is None else self.model_copy(update={"namespace": None})

    def alias_key(self, reference: str) -> str:
        """The key of an image reference in the learner's aliases, in this signature's scope."""
        return reference if self.namespace is None else f"{self.namespace}/{reference}"

    @property
    def display(self) -> str:
        return " | ".join(self.path) if self.namespace is None else f"{self.namespace}: " + " | ".join(self.path)

    def with_executable(self, executable: str) -> Signature:
        """The same signature with another executable (an alias resolved to a digest)."""
        if self.executable is None:
            return self
        return self.model_copy(update={"executable": executable})

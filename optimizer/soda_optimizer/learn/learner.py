"""The resource function learner (SODA paper, section 6.1): models per signature node, updated by
observations, looked up by the most specific node that can be trusted.

- :meth:`Learner.observe` adds samples to the model of *every* node on the signature's path to the
  root ("we update the model at each of these three levels, starting at the most specific node and
  propagating up the tree") and forgets what has aged out; the refit is lazy: a node is refitted
  when it is next read (:meth:`Learner.get`, :meth:`Learner.lookup`, :meth:`Learner.export`), so a
  micro epoch that observes every PE refits the shared upper nodes once, not once per PE;
- :meth:`Learner.lookup` walks from the most specific node to the root and returns the first model
  that is pinned or has at least ``min_confidence`` (the paper stops at the most specific node that
  *exists*; requiring a confidence is a departure: a node seen twice should not hide a
  well-learned parent). None means "no model": the caller falls back to the declared function or a
  per-kind default, as the paper's option (b);
- pinning: an administrator's model is never updated and always trusted;
- :meth:`Learner.export` / :meth:`Learner.load`: the whole state as plain JSON-ready dicts (the
  operator keeps one object per node in the API server);
- image aliases: a signature observed with both an image reference and a digest records
  reference -> digest, and :meth:`Learner.resolve` rewrites a reference-only signature (what is known
  at submission time) to the digest, so a new job finds what running pods taught.

Pure: no I/O; the caller passes the time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .fit import age_weights, fit
from .model import LearnConfig, LearnedModel, Sample
from .signature import Level, Signature, normalize_image

STATE_VERSION = 1


class Lookup(BaseModel):
    """A lookup's answer: the model, and the node (level, key) it came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    model: LearnedModel
    level: Level
    key: str
    exact: bool  # True when it came from the signature's own (most specific) node


class LearnerState(BaseModel):
    """Everything a learner knows, as plain data."""

    model_config = ConfigDict(extra="forbid")
    version: int = STATE_VERSION
    config: LearnConfig = Field(default_factory=LearnConfig)
    models: dict[str, LearnedModel] = Field(default_factory=dict)
    aliases: dict[str, str] = Field(default_factory=dict)  # normalised image reference -> digest


class Learner:
    def __init__(self, config: LearnConfig | None = None) -> None:
        self.state = LearnerState(config=config or LearnConfig())

    @property
    def config(self) -> LearnConfig:
        return self.state.config

    @property
    def models(self) -> dict[str, LearnedModel]:
        return self.state.models

    def get(self, key: str) -> LearnedModel | None:
        """The model of a node (refitted first if observations arrived since its last fit)."""
        model = self.state.models.get(key)
        if model is not None:
            self._refit(model)
        return model

    def refit_all(self) -> None:
        """Refit every node that has observations not yet fitted."""
        for model in self.state.models.values():
            self._refit(model)

    # ------------------------------------------------------------------ aliases
    def resolve(self, signature: Signature) -> Signature:
        """``signature`` with its executable rewritten to the digest last seen for its image
        reference (unchanged when it already names a digest or no alias is known)."""
        if signature.image is None or signature.executable != normalize_image(signature.image):
            return signature
        digest = self.state.aliases.get(signature.executable)
        return signature if digest is None else signature.with_executable(digest)

    # ------------------------------------------------------------------ updates
    def observe(self, signature: Signature, samples: Iterable[Sample], now: float) -> list[str]:
        """Add ``samples`` (taken at ``now`` unless they say otherwise) to every unpinned node on the
        path of ``signature`` to the root (refitted when next read); returns the keys of the nodes updated."""
        batch = [s if s.t is not None else s.model_copy(update={"t": now}) for s in samples]
        if signature.image is not None and signature.executable is not None:
            ref = normalize_image(signature.image)
            if signature.executable != ref:
                self.state.aliases[ref] = signature.executable
        if not batch:
            return []
        updated: list[str] = []
        for node in signature.lineage():
            model = self.state.models.get(node.key)
            if model is None:
                model = LearnedModel(key=node.key, path=list(node.path), level=node.level, kind=node.kind)
                self.state.models[node.key] = model
            if model.pinned:
                continue
            self._update(model, batch, now)
            updated.append(node.key)
        return updated

    def _update(self, model: LearnedModel, batch: list[Sample], now: float) -> None:
        cfg = self.config
        kept = sorted([*model.samples, *batch], key=lambda s: s.t if s.t is not None else now)
        w = age_weights(kept, now, cfg.half_life_s)
        model.samples = [s for s, wi in zip(kept, w) if wi >= cfg.min_weight][-cfg.max_samples:]
        model.observed += len(batch)
        model.updated_at = now
        model.stale = True

    def _refit(self, model: LearnedModel) -> None:
        if not model.stale or model.pinned:
            return
        now = model.updated_at if model.updated_at is not None else 0.0
        f = fit(model.kind, model.samples, now, self.config,
                previous=(model.a, model.b) if model.fit is not None else None)
        model.fit = f
        if f is not None:
            model.a, model.b = f.a, f.b
        model.stale = False

    # ------------------------------------------------------------------ lookup
    def lookup(self, signature: Signature, min_confidence: float = 0.5) -> Lookup | None:
        """The most specific model on the path of ``signature`` that is pinned or has at least
        ``min_confidence``; None when there is none."""
        sig = self.resolve(signature)
        for i, node in enumerate(sig.lineage()):
            model = self.get(node.key)
            if model is None or (model.fit is None and not model.pinned):
                continue
            if model.pinned or model.confidence >= min_confidence:
                return Lookup(model=model.model_copy(deep=True), level=node.level, key=node.key, exact=i == 0)
        return None

    # ------------------------------------------------------------------ pinning
    def pin(self, target: Signature | str, a: float | None = None, b: float | None = None) -> LearnedModel:
        """Pin a node (by signature or key), optionally setting its parameters; a signature with no
        model yet gets a pinned one. KeyError for an unknown key."""
        if isinstance(target, Signature):
            key = self.resolve(target).key
            if key not in self.state.models:
                node = self.resolve(target)
                self.state.models[key] = LearnedModel(key=key, path=list(node.path), level=node.level, kind=node.kind)
        else:
            key = target
        model = self.state.models[key]
        model.pinned = True
        if a is not None:
            model.a = float(a)
        if b is not None:
            model.b = float(b)
        return model

    def unpin(self, key: str) -> None:
        self.state.models[key].pinned = False

    # ------------------------------------------------------------------ persistence
    def export(self) -> dict[str, Any]:
        """The whole state as a JSON-ready dict (``load`` reads it back); refits stale nodes first."""
        self.refit_all()
        return self.state.model_dump(mode="json")

    def export_model(self, key: str) -> dict[str, Any]:
        """One node's model as a JSON-ready dict (what one stored object would hold)."""
        model = self.state.models[key]
        self._refit(model)
        return model.model_dump(mode="json")

    @classmethod
    def load(cls, data: Mapping[str, Any], config: LearnConfig | None = None) -> Learner:
        """A learner from :meth:`export`'s dict (``config``, when given, replaces the stored one)."""
        state = LearnerState.model_validate(dict(data))
        if state.version != STATE_VERSION:
            raise ValueError(f"learner state version {state.version}, expected {STATE_VERSION}")
        out = cls(config or state.config)
        out.state.models, out.state.aliases = state.models, state.aliases
        return out

    def add_model(self, data: Mapping[str, Any]) -> LearnedModel:
        """Add (or replace) one node's model from :meth:`export_model`'s dict."""
        model = LearnedModel.model_validate(dict(data))
        self.state.models[model.key] = model
        return model

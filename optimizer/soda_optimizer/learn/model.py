"""Learned resource functions: the observations, the configuration and the model of one signature node
(SODA paper, section 6.1).

The form is the paper's and :class:`soda_optimizer.model.ResourceFunction`'s:

- transforms and sinks: ``r_o = min(A r_i m, B r_i)``;
- sources: ``r_o = min(A m, primal)`` (``r_i`` is the offered primal rate; B is not used and stays 1).

An observation is the paper's ``<r_i, m, r_o>`` (``m`` the mips *allocated* to the PE, what SODA
decides) with two additions: ``t``, when it was taken (for forgetting), and optionally ``m_used``,
the mips the PE actually used. Under the model a PE uses ``min(m, B/A)`` mips (all it has when
CPU-bound, what its input needs when input-bound), so a sample with ``m_used`` clearly below ``m``
was taken in the input-bound regime: it measures B directly and A through ``m_used``. This is a
departure from the paper (which fits the min on ``<r_i, m, r_o>`` alone); :mod:`.fit` uses the
min on samples without ``m_used`` or with the CPU saturated.

A :class:`LearnedModel` keeps its recent samples (a bounded window, weighted by age) so it can be
refitted, exported and reloaded: the learner's state is plain data. The window is stored as one
array (:class:`.window.SampleWindow`, issue 52 item 4; :class:`Sample` is defined there too).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..model import PEKind, ResourceFunction
from .family import FamilyFit
from .signature import Level
from .window import Sample, SampleWindow

Loss = Literal["soft_l1", "huber", "cauchy", "linear"]
__all__ = ["Fit", "LearnConfig", "LearnedModel", "Loss", "Sample", "SampleWindow"]  # Sample: from .window (issue 52 item 4)


class LearnConfig(BaseModel):
    """How models are fitted, forgotten and trusted (see docs/learn.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # forgetting: a sample's weight is 0.5 ** (age / half_life_s); dropped below min_weight or
    # beyond the newest max_samples
    half_life_s: float = Field(default=600.0, gt=0)
    min_weight: float = Field(default=0.01, gt=0, lt=1)
    max_samples: int = Field(default=256, ge=4)
    # fitting: robust loss on log residuals; f_scale is the residual (in log units, ~relative
    # error) beyond which a sample starts to count as an outlier
    loss: Loss = "soft_l1"
    f_scale: float = Field(default=0.1, gt=0)
    idle_margin: float = Field(default=0.05, ge=0, lt=1)  # m_used < (1 - margin) m: input-bound
    min_branch_n_eff: float = Field(default=3.0, gt=0)  # effective samples needed to identify A or B
    kink_margin: float = Field(default=0.2, ge=0)  # log distance from the kink for a sample to inform a branch
    # confidence = min(1, n_eff / n_full) x max(0, 1 - rel_residual / max_rel_residual)
    n_full: float = Field(default=20.0, gt=0)
    max_rel_residual: float = Field(default=0.5, gt=0)
    outlier_threshold: float = Field(default=0.3, gt=0)  # |log residual| beyond which a sample is an outlier
    # issue 38: the family of :mod:`.family` chosen by held-out error (False: the paper's form only,
    # the learner before issue 38); a fit is trusted (may be Confident) only with a held-out error
    # and an outlier share at most these
    family: bool = True
    max_confident_error: float = Field(default=0.15, gt=0)
    max_outlier_fraction: float = Field(default=0.3, ge=0, le=1)
    # ... and, where the samples measured the processed rate, has seen at least this share of its
    # CPU-bound branch (FamilyFit.support: its CPU-bound samples reach half the way down from its
    # saturation to where it emits nothing)
    min_support: float = Field(default=0.5, ge=0, le=1)
    # drift: this many consecutive new samples each further than drift_threshold (log units, and
    # 3x the fit's held-out error) from a trusted fit drop the window before them
    drift_run: int = Field(default=3, ge=1)
    drift_threshold: float = Field(default=0.25, gt=0)


class Fit(BaseModel):
    """The result of fitting one model: parameters and how far to trust them."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    a: float = Field(gt=0)
    b: float = Field(gt=0)
    a_identified: bool  # enough weight on samples that determine A (else A is the bound the data imply)
    b_identified: bool  # likewise for B (always False for sources, whose B is unused)
    n_eff: float = Field(ge=0)  # Kish effective sample count of the usable samples
    n_eff_a: float = Field(ge=0)
    n_eff_b: float = Field(ge=0)
    rel_residual: float = Field(ge=0)  # weighted median of |predicted r_o / observed r_o - 1|
    outlier_fraction: float = Field(ge=0, le=1)  # weight share of samples beyond outlier_threshold
    confidence: float = Field(ge=0, le=1)
    used: int = Field(ge=0)  # samples used (positive rates and mips)
    # issue 38: held-out error and outliers within LearnConfig's limits (None: the paper's fit, not judged)
    trusted: bool | None = None
    held_out_error: float | None = Field(default=None, ge=0)  # the family's cross-validated error
    no_fit: bool = False  # no form predicts held-out samples within max_rel_residual
    # issue 52: False when no sample showed the PE below its saturation (without an offered rate:
    # saturated samples bound it from one side only); the fit is then not trusted, and exploration
    # may probe it (:mod:`.explore`). None: not judged (the learner without a family)
    below_saturation: bool | None = None
    # issue 52 item 3: the saturation (the kink) located by samples on both sides of it; False when
    # it is only the bound the samples imply (a PE seen at one allocation): the knee then does not
    # trim goals to it (:attr:`soda_optimizer.model.ResourceFunction.saturation_identified`)
    saturation_identified: bool | None = None
    # issue 52: not trusted for want of a sample below saturation, but seen at one allocation (the
    # planner's) and predicting its samples within ``max_confident_error``: right there, pessimistic
    # past it. Never Confident; :func:`.functions.choose` hands it to the planner (its saturation not
    # identified) where it predicts the PE's own samples better than the declared function
    local: bool = False
    # issue 52 item 2 (h52g): not trusted, but its windows show a PE busy on all its mips past a
    # plateau, (s, p_cap, K) of :func:`.plateau.plateau`: :func:`.functions.choose` hands
    # :func:`.plateau.plateau_function` to the planner where it predicts the PE's own samples better
    # than the declared function. Never Confident
    plateau: tuple[float, float, float] | None = None


class LearnedModel(BaseModel):
    """The model of one signature node: its path, its samples, its latest fit, and whether an
    administrator pinned it (a pinned model is never updated by observations)."""

    model_config = ConfigDict(extra="forbid")
    key: str
    path: list[str]
    namespace: str | None = None  # issue 45: the node's scope (Signature.namespace); None: cluster-wide
    level: Level
    kind: PEKind
    a: float = Field(default=1.0, gt=0)
    b: float = Field(default=1.0, gt=0)
    fit: Fit | None = None
    pinned: bool = False
    # issue 52 item 4: stored as one array (:mod:`.window`), read as a sequence of Sample; a list
    # assigned or validated becomes a window, and serialises as the list it was
    samples: SampleWindow = Field(default_factory=SampleWindow)
    observed: int = Field(default=0, ge=0)  # samples ever received (the window holds the recent ones)
    updated_at: float | None = None  # the time of the latest observation (the fit's "now")
    stale: bool = False  # observations arrived since the latest fit (the learner refits on read)
    family: FamilyFit | None = None  # issue 38: the family fit the paper's a and b are taken from
    surprises: int = Field(default=0, ge=0)  # consecutive new samples far from the fit (drift)
    # issue 52: the latest trusted family fit: the drift test keeps judging a run of surprises by
    # it when the refit that took in the run's first samples lost its trust (bench_rfl_shapes,
    # backpressure: a drift PE's refit switched to the paper's need, untrusted, one window after
    # the change, and with no trusted fit the drift test never ran: its window was never dropped)
    anchor: FamilyFit | None = None
    drifts: int = Field(default=0, ge=0)  # windows dropped on drift
    fitted_n: int = Field(default=0, ge=0)  # observed when the latest fit was made

    def __setattr__(self, name: str, value: object) -> None:
        if name == "samples" and not isinstance(value, SampleWindow):
            value = SampleWindow.of(value)  # type: ignore[arg-type]
        super().__setattr__(name, value)

    @property
    def confidence(self) -> float:
        """1 for a pinned model, else the latest fit's confidence (0 when never fitted)."""
        if self.pinned:
            return 1.0
        return self.fit.confidence if self.fit is not None else 0.0

    @property
    def trusted(self) -> bool:
        """Pinned, or fitted and not judged untrustworthy (:attr:`Fit.trusted`)."""
        return self.pinned or (self.fit is not None and self.fit.trusted is not False)

    def function(self, combine: str = "sum") -> ResourceFunction:
        """The :class:`ResourceFunction` the optimizer plans with: the family fit's curves (issue 38,
        :meth:`.family.FamilyFit.function`), else (pinned, or fitted in the paper's form) ``a``, ``b``."""
        if self.family is not None and not self.pinned:
            return self.family.function(self.kind, combine)
        return ResourceFunction(a=self.a, b=self.b, combine=combine)  # type: ignore[arg-type]

    def predict(self, r_i: float, m: float) -> float:
        """Predicted output rate at input rate ``r_i`` (a source's primal rate) and ``m`` mips."""
        if self.family is not None and not self.pinned:
            return float(self.family.predict(r_i, m)[0])
        if self.kind is PEKind.source:
            return min(self.a * m, r_i)
        return min(self.a * r_i * m, self.b * r_i)

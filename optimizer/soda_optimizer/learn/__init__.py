"""The resource function learner, RFL (SODA paper, section 6.1): hierarchical PE signatures and
resource functions fitted online from observations ``<r_i, m, r_o>``. Pure: no Kubernetes, no I/O.

- :mod:`.signature` -- kind -> executable -> arguments -> flowspec, keys usable as object names;
- :mod:`.model` -- samples, the configuration, a node's learned model;
- :mod:`.fit` -- the robust, forgetting fit of ``min(A r_i m, B r_i)`` / ``min(A m, primal)``;
- :mod:`.learner` -- models per node: observe along the path, lookup by the most specific
  trusted node, pinning, export/load;
- :mod:`.sample` -- a PE observation (metrics contract) as a sample.
- :mod:`.functions` -- which function each PE is planned with (precedence) and the Scenario step;
- :mod:`.explore` -- bounded probes of PEs seen in one regime only (issue 14 item 5);
- :mod:`.spare` -- which windows show CPU to spare, and which low CPU readings are dips (issue 52);
- :mod:`.trust` -- when a fit may be trusted without a measured processed rate (issue 52);
- :mod:`.trend` -- the CPU need where it is now, for a cost per tuple that moves (issue 52).

docs/learn.md describes the model, the fitting, the forgetting, the confidence and the lookup rule.
"""

from __future__ import annotations

from .fit import fit
from .learner import Learner, LearnerState, Lookup
from .model import Fit, LearnConfig, LearnedModel, Sample
from .sample import sample_from_observation
from .signature import (
    LEVELS,
    Level,
    Signature,
    arguments_hash,
    executable_of,
    flowspec_hash,
    image_digest,
    normalize_image,
)

__all__ = [
    "LEVELS",
    "Fit",
    "LearnConfig",
    "LearnedModel",
    "Learner",
    "LearnerState",
    "Level",
    "Lookup",
    "Sample",
    "Signature",
    "arguments_hash",
    "executable_of",
    "fit",
    "flowspec_hash",
    "image_digest",
    "normalize_image",
    "sample_from_observation",
]

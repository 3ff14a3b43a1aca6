"""From a PE's observation (:class:`soda_optimizer.observed.PEObservation`, the metrics contract of
docs/pe-metrics.md) to the learner's sample ``<r_i, m, r_o>`` (SODA paper, section 6.1).

The rates follow :class:`soda_optimizer.importance.Evaluator`: a PE's input rate combines what it
receives on its input streams (sum, min or max) plus its primal input; a stream carries the PE's
output times the stream's selectivity, a sink's output (``sink``) is the output itself. So
``r_o`` is recovered from every emitted label as emitted / selectivity and the median taken (they
agree on a healthy PE; the median resists one odd series). ``m`` is the mips the plan allocated
(the pod CPU limits), ``m_used`` what the CPU series measured.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np

from ..model import PEKind
from ..observed import PRIMAL, SINK, PEObservation
from .model import Sample


def sample_from_observation(obs: PEObservation, kind: PEKind, m: float, t: float | None = None, *,
                            selectivity: Mapping[str, float] | None = None,
                            combine: Literal["sum", "min", "max"] = "sum") -> Sample | None:
    """The sample of one PE over one window, or None when the observation lacks an input or an
    output rate (nothing to learn from). ``selectivity`` maps an emitted stream label to its
    selectivity (1 when absent)."""
    sel = selectivity or {}
    primal = obs.received.get(PRIMAL, 0.0)
    streams = [v for k, v in obs.received.items() if k != PRIMAL]
    if kind is PEKind.source or not streams:
        r_i = primal
    else:
        arr = np.array(streams, dtype=float)
        c = float(arr.sum() if combine == "sum" else arr.min() if combine == "min" else arr.max())
        r_i = c + primal
    outs = [v / sel.get(k, 1.0) if k != SINK else v for k, v in obs.emitted.items() if sel.get(k, 1.0) > 0]
    if not outs or r_i <= 0:
        return None
    return Sample(r_i=float(r_i), m=float(m), r_o=float(np.median(outs)), m_used=obs.mips, t=t)

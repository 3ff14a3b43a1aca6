"""From a PE's observation (:class:`soda_optimizer.observed.PEObservation`, the metrics contract of
docs/pe-metrics.md) to the learner's sample ``<r_i, m, r_o>`` (SODA paper, section 6.1).

The rates follow :class:`soda_optimizer.importance.Evaluator`: a PE's input rate combines what it
receives on its input streams (sum, min or max) plus its primal input; a stream carries the PE's
output times the stream's selectivity, a sink's output (``sink``) is the output itself. So
``r_o`` is recovered from every emitted label as emitted / selectivity and the median taken (they
agree on a healthy PE; the median resists one odd series). ``m`` is the mips the plan allocated
(the pod CPU limits), ``m_used`` what the CPU series measured.

**Which rate is the input rate** (issue 38). Under backpressure (the PE SDK's sockets block) a
saturated PE *receives* only what it processes, so the received rate is not the rate offered to
it. The rule:

- the observation reports an offered rate for an input (``offered``, the SDK's
  ``kubesoda_pe_tuples_arrived_total``: what arrived in the PE's input queue, the received rate plus
  the queue's growth): ``r_i`` combines the offered rates and ``r_p`` the received ones (what the PE
  took in). When an input also waited on a full queue (``blocked`` above ``blocked_min`` of the
  window) its upstream was held back, the arrival rate is a lower bound of what it would have sent,
  and the sample is ``censored`` (``r_i`` a lower bound, ``r_p`` still what was processed). A
  source's input is its primal stream: its offered rate is what the outside offered it (the SDK's
  ``PE.offer``, arrivals on ``primal``), its processed rate what it took in (``PE.ingest``);
- else, with CPU to spare (``m_used < (1 - idle_margin) m``), what it received is what it was offered;
- else (saturated, no offered rate): ``r_i`` is the received rate and the sample is ``censored``:
  ``r_i`` is only a lower bound of the offered rate. :mod:`.family` then takes the processed rate
  from the output through the selectivity it learned where the rate is known, and never predicts
  from that ``r_i`` as if it were offered.

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
                            combine: Literal["sum", "min", "max"] = "sum", idle_margin: float = 0.05,
                            blocked_min: float = 0.02) -> Sample | None:
    """The sample of one PE over one window, or None when the observation lacks an input or an
    output rate (nothing to learn from). ``selectivity`` maps an emitted stream label to its
    selectivity (1 when absent)."""
    sel = selectivity or {}
    r_p = _combined(obs.received, kind, combine)
    outs = [v / sel.get(k, 1.0) if k != SINK else v for k, v in obs.emitted.items() if sel.get(k, 1.0) > 0]
    if not outs or r_p <= 0:
        return None
    r_o = float(np.median(outs))
    if obs.offered:
        offered = _combined({k: max(obs.offered.get(k, 0.0), obs.received.get(k, 0.0)) for k in {**obs.received, **obs.offered}},
                            kind, combine)
        held_back = any(v > blocked_min for k, v in obs.blocked.items() if k in obs.received or k in obs.offered)
        return Sample(r_i=float(offered), m=float(m), r_o=r_o, m_used=obs.mips, t=t, r_p=float(r_p), censored=held_back)
    saturated = obs.mips is not None and obs.mips >= (1.0 - idle_margin) * m
    return Sample(r_i=float(r_p), m=float(m), r_o=r_o, m_used=obs.mips, t=t, censored=saturated)


def _combined(rates: Mapping[str, float], kind: PEKind, combine: str) -> float:
    """A PE's input rate from per-label rates: its streams combined, plus its primal input."""
    primal = rates.get(PRIMAL, 0.0)
    streams = [v for k, v in rates.items() if k != PRIMAL]
    if kind is PEKind.source or not streams:
        return float(primal)
    arr = np.array(streams, dtype=float)
    return float(arr.sum() if combine == "sum" else arr.min() if combine == "min" else arr.max()) + primal

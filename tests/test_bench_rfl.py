"""benchmarks/bench_rfl.py in a tiny configuration: closing the loop (plan, run on the fluid data
plane with hidden true functions, learn) must predict what the PEs do better than the declared and
default functions it starts from, and the oracle arm (the true functions) must predict within the
noise. A real measurement of the benchmark's own code, not a fixed number."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import bench_rfl  # noqa: E402
from soda_optimizer.learn import LearnConfig  # noqa: E402


def test_learned_error_ends_below_the_declared_error() -> None:
    epochs, every = 10, 2
    rows = bench_rfl.run(seed=0, epochs=epochs, macro_every=every, n_nodes=9, arms=("declared", "learned", "oracle"),
                         config=LearnConfig(n_full=4.0))
    s = bench_rfl.summarise({0: rows}, epochs, every)["final"]
    dec, lrn, ora = s["declared"]["error"], s["learned"]["error"], s["oracle"]["error"]
    assert dec is not None and lrn is not None and ora is not None
    # the first epochs of both arms plan with the same functions, so they predict alike
    assert rows["learned"][0]["error"] == pytest.approx(rows["declared"][0]["error"], rel=0.2)
    # the last epochs: learned well below declared, close to the noise floor the oracle shows
    assert lrn < dec / 2, (lrn, dec)
    assert lrn < ora + 0.1, (lrn, ora)
    assert ora < 0.1
    # and every learning arm's PEs are planned with learned functions by then
    assert rows["learned"][-1]["sources"].get("learned", 0) > 0

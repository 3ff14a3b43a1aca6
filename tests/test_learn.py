"""The resource function learner (soda_optimizer.learn, SODA paper 6.1): signatures, the robust
forgetting fit, the hierarchy, pinning, persistence, and the prediction-accuracy claim (27% -> 7%)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soda_optimizer.learn import (
    LearnConfig,
    Learner,
    Level,
    Sample,
    Signature,
    arguments_hash,
    fit,
    flowspec_hash,
    image_digest,
    normalize_image,
    sample_from_observation,
)
from soda_optimizer.model import PEKind
from soda_optimizer.observed import PEObservation

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DIGEST = "sha256:" + "ab" * 32

TOL_CLEAN = 0.05  # A and B within 5% from 100 samples with 5% multiplicative noise
TOL_OUTLIERS = 0.07  # ... and with 15% outliers (robust loss)
PLAIN_LS_MISS = 0.10  # plain least squares misses by more than this on the same outliers


# --------------------------------------------------------------------------- synthetic data


def synth(kind: PEKind, a: float, b: float, n: int, rng: np.random.Generator, *, sigma: float = 0.05,
          outliers: float = 0.0, m_range: tuple[float, float] = (50.0, 2000.0), primal: float | None = None,
          used: bool = False, t0: float = 0.0) -> list[Sample]:
    """Samples of the true function min(a r_i m, b r_i) (a source: min(a m, primal)), allocations
    log-uniform over m_range, multiplicative log-normal noise, and a share of stalls (r_o x 0.05..0.3)."""
    out = []
    lo, hi = np.log(m_range[0]), np.log(m_range[1])
    for k in range(n):
        m = float(np.exp(rng.uniform(lo, hi)))
        if kind is PEKind.source:
            r_i = primal if primal is not None else float(rng.uniform(100.0, 1000.0))
            r_o, m_used = min(a * m, r_i), min(m, r_i / a)
        else:
            r_i = float(rng.uniform(10.0, 500.0))
            r_o, m_used = min(a * r_i * m, b * r_i), min(m, b / a)
        r_o *= float(np.exp(rng.normal(0.0, sigma)))
        if rng.random() < outliers:
            r_o *= float(rng.uniform(0.05, 0.3))
        out.append(Sample(r_i=r_i, m=m, r_o=r_o, m_used=m_used if used else None, t=t0 + k))
    return out


def rel(x: float, y: float) -> float:
    return abs(x / y - 1.0)


NO_FORGET = LearnConfig(half_life_s=1e9)

# --------------------------------------------------------------------------- signatures


def test_signature_levels_keys_and_ancestors() -> None:
    sig = Signature.build("transform", "ghcr.io/acme/pe:1", command=["run"], args=["--w", "10"],
                          env={"X": "1"}, inputs=[("source-args-0123", "src->t")])
    assert sig.level is Level.flowspec and len(sig.path) == 4
    anc = sig.ancestors()
    assert [a.level for a in anc] == [Level.arguments, Level.executable, Level.kind]
    assert anc[-1].key == "transform" and anc[0].parent() == anc[1]
    keys = [s.key for s in sig.lineage()]
    assert len(set(keys)) == 4
    for k in keys:
        assert DNS1123_LABEL.match(k) and len(k) <= 63, k
    again = Signature.build("transform", "ghcr.io/acme/pe:1", command=["run"], args=["--w", "10"],
                            env={"X": "1"}, inputs=[("source-args-0123", "src->t")])
    assert again.key == sig.key  # stable
    assert sig.at(Level.executable).key.startswith("transform-exe-")
    with pytest.raises(ValueError):
        Signature(kind=PEKind.sink, executable=None, arguments="x")


def test_argument_and_flowspec_hashes() -> None:
    a = arguments_hash(["run"], ["-v"], {"A": "1", "B": "2", "KUBESODA_OUTPUTS": "job-1-t:7000"})
    assert a == arguments_hash(["run"], ["-v"], {"B": "2", "A": "1", "KUBESODA_OUTPUTS": "job-2-t:7000"})
    assert a != arguments_hash(["run"], ["-v"], {"A": "1", "B": "3"})
    assert a != arguments_hash(["run", "-v"], [], {"A": "1", "B": "2"})  # command vs args matter
    assert flowspec_hash([("p", "s1"), ("q", "s2")]) == flowspec_hash([("q", "s2"), ("p", "s1")])
    assert flowspec_hash([]) != flowspec_hash([("primal", "primal")])


def test_images() -> None:
    assert normalize_image("busybox") == "docker.io/library/busybox:latest"
    assert normalize_image("acme/pe") == "docker.io/acme/pe:latest"
    assert normalize_image("localhost:5000/pe") == "localhost:5000/pe:latest"
    assert normalize_image("ghcr.io/acme/pe@" + DIGEST) == "ghcr.io/acme/pe@" + DIGEST
    assert image_digest("docker-pullable://ghcr.io/acme/pe@" + DIGEST) == DIGEST
    assert image_digest("ghcr.io/acme/pe:1") is None
    assert Signature.build("source", "acme/pe:1", digest="x@" + DIGEST).executable == DIGEST


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["transform", "sink"]), args=st.lists(st.text(max_size=8), max_size=3),
       env=st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=3))
def test_keys_are_dns_labels(kind: str, args: list[str], env: dict[str, str]) -> None:
    sig = Signature.build(kind, "Reg.IO:5000/Some_Image:V1", args=args, env=env, inputs=[("x", "y")])
    for s in sig.lineage():
        assert DNS1123_LABEL.match(s.key) and len(s.key) <= 63


# --------------------------------------------------------------------------- the fit


@settings(max_examples=20, deadline=None)
@given(la=st.floats(np.log(1e-4), np.log(1e-1)), kink=st.floats(np.log(150.0), np.log(700.0)),
       seed=st.integers(0, 2**31 - 1), kind=st.sampled_from([PEKind.transform, PEKind.sink]))
def test_fit_recovers_a_and_b_in_both_regimes(la: float, kink: float, seed: int, kind: PEKind) -> None:
    # the kink m* = B/A lies inside the allocations (50..2000 mips): samples in both regimes
    a = float(np.exp(la))
    b = a * float(np.exp(kink))
    f = fit(kind, synth(kind, a, b, 100, np.random.default_rng(seed)), 100.0, NO_FORGET)
    assert f is not None and f.a_identified and f.b_identified
    assert rel(f.a, a) < TOL_CLEAN and rel(f.b, b) < TOL_CLEAN, (f.a / a, f.b / b)
    assert f.rel_residual < 0.1 and f.confidence > 0.7


@settings(max_examples=20, deadline=None)
@given(la=st.floats(np.log(0.05), np.log(5.0)), primal=st.floats(200.0, 2000.0), seed=st.integers(0, 2**31 - 1))
def test_fit_recovers_a_source(la: float, primal: float, seed: int) -> None:
    a = float(np.exp(la))
    rng = np.random.default_rng(seed)
    # allocations around the saturation point primal / a: both regimes
    m_star = primal / a
    f = fit(PEKind.source, synth(PEKind.source, a, 1.0, 60, rng, primal=primal, m_range=(m_star / 5, m_star * 5)),
            60.0, NO_FORGET)
    assert f is not None and f.a_identified and not f.b_identified and f.b == 1.0
    assert rel(f.a, a) < TOL_CLEAN


@pytest.mark.parametrize("kind", [PEKind.transform, PEKind.source])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_outliers_need_the_robust_loss(kind: PEKind, seed: int) -> None:
    a, b = (0.004, 2.0) if kind is PEKind.transform else (0.5, 1.0)
    samples = synth(kind, a, b, 100, np.random.default_rng(seed), outliers=0.15,
                    primal=500.0 if kind is PEKind.source else None)
    robust = fit(kind, samples, 100.0, NO_FORGET)
    plain = fit(kind, samples, 100.0, NO_FORGET.model_copy(update={"loss": "linear"}))
    assert robust is not None and plain is not None
    assert rel(robust.a, a) < TOL_OUTLIERS and rel(robust.b, b) < TOL_OUTLIERS
    assert max(rel(plain.a, a), rel(plain.b, b)) > PLAIN_LS_MISS
    assert 0.03 < robust.outlier_fraction < 0.3  # the stalls (15% on average) are reported, not fitted


def test_one_regime_only_gives_the_pessimistic_bound() -> None:
    rng = np.random.default_rng(7)
    a = 0.004
    # always CPU-bound (kink at 5000 mips, allocations up to 2000): B only bounded below
    f = fit(PEKind.transform, synth(PEKind.transform, a, a * 5000, 80, rng), 80.0, NO_FORGET)
    assert f is not None and f.a_identified and not f.b_identified
    assert rel(f.a, a) < TOL_CLEAN and f.b < a * 5000 and rel(f.b, a * 2000) < 0.1
    # always input-bound (kink at 20 mips): A only bounded below ...
    g = fit(PEKind.transform, synth(PEKind.transform, a, a * 20, 80, rng), 80.0, NO_FORGET)
    assert g is not None and g.b_identified and not g.a_identified and g.a < a
    # ... unless the CPU use says so: an idle CPU (m_used < m) measures A through m_used
    h = fit(PEKind.transform, synth(PEKind.transform, a, a * 20, 80, rng, used=True), 80.0, NO_FORGET)
    assert h is not None and h.a_identified and h.b_identified and rel(h.a, a) < TOL_CLEAN


def test_nothing_usable() -> None:
    assert fit(PEKind.transform, [], 0.0, NO_FORGET) is None
    assert fit(PEKind.transform, [Sample(r_i=0.0, m=10.0, r_o=0.0, t=0.0)], 0.0, NO_FORGET) is None


# --------------------------------------------------------------------------- forgetting

SWITCH_WITHIN = 25  # samples after the switch (one per second, half-life 10 s) to be within 10%


def test_regime_switch_is_relearned_thanks_to_forgetting() -> None:
    rng = np.random.default_rng(11)
    a, b = 0.004, 2.0
    sig = Signature.build("transform", "acme/pe:1")
    forgetting = Learner(LearnConfig(half_life_s=10.0))
    remembering = Learner(NO_FORGET)
    for s in synth(PEKind.transform, a, b, 100, rng):
        forgetting.observe(sig, [s], now=s.t or 0.0)
        remembering.observe(sig, [s], now=s.t or 0.0)
    # A halves at t = 100 (the PE got twice as expensive per tuple); B unchanged
    after = synth(PEKind.transform, a / 2, b, SWITCH_WITHIN, rng, t0=100.0)
    within = []
    for s in after:
        forgetting.observe(sig, [s], now=s.t or 0.0)
        remembering.observe(sig, [s], now=s.t or 0.0)
        m = forgetting.get(sig.key)
        assert m is not None
        within.append(rel(m.a, a / 2) < 0.10)
    first = within.index(True) + 1
    print(f"\nregime switch: A within 10% of the new A after {first} samples (half-life 10 samples)")
    assert all(within[first - 1:])  # and it stays there
    new = forgetting.get(sig.key)
    old = remembering.get(sig.key)
    assert new is not None and old is not None
    assert rel(new.a, a / 2) < 0.10, new.a / (a / 2)
    assert rel(old.a, a / 2) > 0.5  # without forgetting it still believes the old A
    assert len(new.samples) < 100  # aged-out samples are dropped


# --------------------------------------------------------------------------- the hierarchy


def _sig(args: list[str], inputs: list[tuple[str, str]] | None = None, image: str = "acme/pe:1") -> Signature:
    return Signature.build("transform", image, args=args, inputs=inputs if inputs is not None else [("p", "s")])


def test_an_observation_updates_every_level_and_lookup_takes_the_most_specific() -> None:
    rng = np.random.default_rng(5)
    lr = Learner(NO_FORGET)
    seen = _sig(["--window", "10"])
    updated = lr.observe(seen, synth(PEKind.transform, 0.004, 2.0, 60, rng), now=60.0)
    assert updated == [s.key for s in seen.lineage()]
    hit = lr.lookup(seen, min_confidence=0.5)
    assert hit is not None and hit.exact and hit.level is Level.flowspec
    # a new PE of the same image with unseen arguments borrows the executable-level model
    new_args = lr.lookup(_sig(["--window", "99"]), min_confidence=0.5)
    assert new_args is not None and new_args.level is Level.executable and not new_args.exact
    assert rel(new_args.model.a, 0.004) < TOL_CLEAN
    # the same image and arguments in another job (another flowspec) starts from the arguments level
    reused = lr.lookup(_sig(["--window", "10"], inputs=[("other", "x->y")]), min_confidence=0.5)
    assert reused is not None and reused.level is Level.arguments
    # a brand new image falls back to the kind (root) model
    root = lr.lookup(_sig([], image="acme/other:2"), min_confidence=0.5)
    assert root is not None and root.level is Level.kind and root.key == "transform"
    # a sink was never seen: no model at all (the caller uses its declared/default function)
    assert lr.lookup(Signature.build("sink", "acme/pe:1"), min_confidence=0.0) is None


def test_lookup_skips_a_node_without_enough_confidence() -> None:
    rng = np.random.default_rng(6)
    lr = Learner(NO_FORGET)
    lr.observe(_sig(["a"]), synth(PEKind.transform, 0.004, 2.0, 60, rng), now=60.0)
    few = _sig(["b"])
    lr.observe(few, synth(PEKind.transform, 0.004, 2.0, 2, rng), now=61.0)
    m = lr.get(few.key)
    assert m is not None and m.confidence < 0.5
    hit = lr.lookup(few, min_confidence=0.5)
    assert hit is not None and hit.level is Level.executable


def test_pinned_models_stay_and_win() -> None:
    rng = np.random.default_rng(8)
    lr = Learner(NO_FORGET)
    sig = _sig(["x"])
    lr.observe(sig, synth(PEKind.transform, 0.004, 2.0, 40, rng), now=40.0)
    exe = sig.at(Level.executable)
    lr.pin(exe.key, a=0.01, b=3.0)
    updated = lr.observe(sig, synth(PEKind.transform, 0.004, 2.0, 40, rng, t0=40.0), now=80.0)
    assert exe.key not in updated and len(updated) == 3
    pinned = lr.get(exe.key)
    assert pinned is not None and (pinned.a, pinned.b, pinned.pinned) == (0.01, 3.0, True)
    hit = lr.lookup(_sig(["unseen"]), min_confidence=0.99)
    assert hit is not None and hit.key == exe.key and hit.model.a == 0.01
    # a signature never observed can be pinned too (an administrator's profile)
    lr.pin(Signature.build("sink", "acme/s:1"), a=1.0, b=0.5)
    assert (got := lr.lookup(Signature.build("sink", "acme/s:1"))) is not None and got.model.b == 0.5
    lr.unpin(exe.key)
    assert exe.key in lr.observe(sig, synth(PEKind.transform, 0.004, 2.0, 5, rng, t0=80.0), now=85.0)


def test_export_load_round_trip() -> None:
    rng = np.random.default_rng(9)
    lr = Learner(LearnConfig(half_life_s=300.0))
    sig = Signature.build("transform", "acme/pe:1", digest="acme/pe@" + DIGEST, args=["a"], inputs=[])
    lr.observe(sig, synth(PEKind.transform, 0.004, 2.0, 50, rng), now=50.0)
    lr.observe(Signature.build("source", "acme/src:1"), synth(PEKind.source, 0.5, 1.0, 30, rng, primal=300.0), now=50.0)
    lr.pin("source", a=0.7)
    data = json.loads(json.dumps(lr.export()))  # plain JSON
    back = Learner.load(data)
    assert back.export() == lr.export()
    assert back.config.half_life_s == 300.0 and back.get("source") is not None
    for s in [sig, *sig.ancestors()]:
        x, y = lr.lookup(s), back.lookup(s)
        assert x is not None and y is not None and x.model == y.model
    one = Learner()
    one.add_model(lr.export_model(sig.key))
    assert one.get(sig.key) == lr.get(sig.key)


def test_a_reference_resolves_to_the_digest_seen_running() -> None:
    rng = np.random.default_rng(10)
    lr = Learner(NO_FORGET)
    running = Signature.build("transform", "acme/pe:1", digest="docker.io/acme/pe@" + DIGEST, args=["a"], inputs=[])
    lr.observe(running, synth(PEKind.transform, 0.004, 2.0, 40, rng), now=40.0)
    submitted = Signature.build("transform", "acme/pe:1", args=["a"], inputs=[])  # no digest before pods run
    assert submitted.executable == "docker.io/acme/pe:1"
    hit = lr.lookup(submitted)
    assert hit is not None and hit.exact and hit.key == running.key


def test_sample_from_observation() -> None:
    obs = PEObservation(received={"a->t": 30.0, "b->t": 10.0}, emitted={"t->c": 20.0, "t->d": 5.0}, mips=80.0)
    s = sample_from_observation(obs, PEKind.transform, m=100.0, t=5.0, selectivity={"t->c": 1.0, "t->d": 0.25})
    assert s is not None and (s.r_i, s.r_o, s.m, s.m_used, s.t) == (40.0, 20.0, 100.0, 80.0, 5.0)
    src = sample_from_observation(PEObservation(received={"primal": 50.0}, emitted={"s->t": 40.0}), PEKind.source, m=10.0)
    assert src is not None and (src.r_i, src.r_o, src.m_used) == (50.0, 40.0, None)
    sink = sample_from_observation(PEObservation(received={"t->k": 8.0}, emitted={"sink": 4.0}), PEKind.sink, m=1.0)
    assert sink is not None and sink.r_o == 4.0
    assert sample_from_observation(PEObservation(received={"a->t": 3.0}), PEKind.transform, m=1.0) is None


# --------------------------------------------------------------------------- the paper's claim (Fig. 21)


def _pipelines(rng: np.random.Generator, n: int) -> list[list[tuple[Signature, PEKind, float, float]]]:
    """n pipelines source -> transform -> transform -> sink with hidden true (A, B)."""
    out = []
    for j in range(n):
        stages: list[tuple[Signature, PEKind, float, float]] = []
        prev = "primal"
        for k, kind in enumerate([PEKind.source, PEKind.transform, PEKind.transform, PEKind.sink]):
            sig = Signature.build(kind, f"acme/pe{j}-{k}:1", inputs=[(prev, f"s{k}")])
            prev = sig.at(Level.arguments).key
            if kind is PEKind.source:
                a, b = float(np.exp(rng.uniform(np.log(0.5), np.log(5.0)))), 1.0
            else:
                a = float(np.exp(rng.uniform(np.log(1e-3), np.log(1e-2))))
                b = a * float(np.exp(rng.uniform(np.log(100.0), np.log(800.0))))
            stages.append((sig, kind, a, b))
        out.append(stages)
    return out


def _run(stages: list[tuple[Signature, PEKind, float, float]], primal: float, mips: list[float],
         params: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Output rate and mips used of every stage, rates propagated down the pipeline."""
    rates, used = [], []
    r = primal
    for (_, kind, _, _), m, (a, b) in zip(stages, mips, params):
        if kind is PEKind.source:
            r_o, u = min(a * m, r), min(m, r / a)
        else:
            r_o, u = min(a * r * m, b * r), min(m, b / a)
        rates.append(r_o)
        used.append(u)
        r = r_o
    return rates, used


def test_learned_functions_predict_mips_and_traffic_better_than_declared_ones() -> None:
    """The paper's Fig. 21 in spirit: mean relative error of predicted traffic (stream rates) and
    mips used, with the declared (wrong) functions vs the learned ones. Paper: 27% -> 7%."""
    rng = np.random.default_rng(2024)
    lines = _pipelines(rng, 6)
    # declared functions: the users' guesses, off by a factor up to 2.5 either way
    declared = [[(a * float(np.exp(rng.uniform(-0.9, 0.9))), b * float(np.exp(rng.uniform(-0.9, 0.9))))
                 for _, _, a, b in line] for line in lines]
    lr = Learner(LearnConfig(half_life_s=3600.0))
    lr_paper = Learner(LearnConfig(half_life_s=3600.0))  # the paper's <r_i, m, r_o> only (no CPU use)

    def epoch(line: list[tuple[Signature, PEKind, float, float]]) -> tuple[float, list[float]]:
        primal = float(rng.uniform(200.0, 1000.0))
        mips = [float(np.exp(rng.uniform(np.log(30.0), np.log(1500.0)))) for _ in line]
        return primal, mips

    # 40 micro epochs of observation (5% noise, 10% stalls), every PE observed once per epoch
    for t in range(40):
        for line in lines:
            primal, mips = epoch(line)
            rates, used = _run(line, primal, mips, [(a, b) for _, _, a, b in line])
            r_in = primal
            for (sig, _, _, _), m, r_o, u in zip(line, mips, rates, used):
                noisy = r_o * float(np.exp(rng.normal(0, 0.05)))
                if rng.random() < 0.10:
                    noisy *= float(rng.uniform(0.05, 0.3))
                lr.observe(sig, [Sample(r_i=r_in, m=m, r_o=noisy, m_used=u * float(np.exp(rng.normal(0, 0.03))))],
                           now=float(t))
                lr_paper.observe(sig, [Sample(r_i=r_in, m=m, r_o=noisy)], now=float(t))
                r_in = r_o
    untrusted = []

    def params(learner: Learner) -> list[list[tuple[float, float]]]:
        out = []
        for line, dec in zip(lines, declared):
            ps = []
            for (sig, _, _, _), d in zip(line, dec):
                hit = learner.lookup(sig, min_confidence=0.5)
                if hit is None:  # not trusted (issue 38: held-out error or outliers too high): planned as declared
                    untrusted.append(sig.key)
                    ps.append(d)
                    continue
                assert hit.exact
                ps.append((hit.model.a, hit.model.b))
            out.append(ps)
        return out

    learned, learned_paper = params(lr), params(lr_paper)
    assert len(untrusted) <= 3  # of 48 (10% of the samples are stalls)
    # 30 fresh epochs: predicted vs observed (noisy, no stalls) rates and mips used
    err: dict[str, list[float]] = {"declared": [], "learned": [], "paper": []}
    for _ in range(30):
        for line, dec, lrn, lrp in zip(lines, declared, learned, learned_paper):
            primal, mips = epoch(line)
            rates, used = _run(line, primal, mips, [(a, b) for _, _, a, b in line])
            obs = [x * float(np.exp(rng.normal(0, 0.05))) for x in rates + used]
            for name, ps in (("declared", dec), ("learned", lrn), ("paper", lrp)):
                pr, pu = _run(line, primal, mips, ps)
                err[name] += [abs(p - o) / o for p, o in zip(pr + pu, obs)]
    e_dec, e_lrn, e_pap = (float(np.mean(err[k])) for k in ("declared", "learned", "paper"))
    print(f"\nRFL prediction error (mips used and stream rates, 6 pipelines x 4 PEs, 30 epochs): "
          f"declared {100 * e_dec:.1f}%, learned {100 * e_lrn:.1f}% "
          f"(learned without CPU use {100 * e_pap:.1f}%; paper: 27% -> 7%)")
    assert e_lrn < 0.08 and e_pap < 0.10 and e_dec > 0.2 and e_lrn < e_dec / 3

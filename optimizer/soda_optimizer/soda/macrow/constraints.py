"""macroW's constraints 4-28 (SODA paper 5.2.1), checked in one place: :func:`node_conflicts` is the
per-node legality (max PEs 24, exlocation 28, relative integrity 14-15, Chinese-wall colours
17-18) that both the checker (:func:`violations`) and the node choice of the search ask.
"""

from __future__ import annotations

from ...model import Scenario
from ..stages import MacroQResult
from .problem import Problem


def node_conflicts(prob: Problem, n: str, units: list[int], new: int | None = None) -> list[str]:
    """Violations of the per-node constraints by ``units`` sharing node ``n``; with ``new``, only
    those that involve unit ``new`` (the others are known to be legal together)."""
    node = prob.nodes[n]
    pol = prob.pol
    errs: list[str] = []
    if node.max_pes is not None and len(units) > node.max_pes:
        errs.append(f"(24) node {n}: {len(units)} PEs > {node.max_pes}")
    if node.integrity_range is not None and units:
        spread = max(prob.integrity[i] for i in units) - min(prob.integrity_lo[i] for i in units)
        if spread > node.integrity_range:
            errs.append(f"(14-15) node {n}: integrity spread {spread} > {node.integrity_range}")
    pairs = node.incompatible_colors if node.incompatible_colors is not None else pol.incompatible_colors
    if pairs:
        # colours of two units (or of one unit, whose colocated PEs share a node) that must not meet
        bad: set[tuple[str, str]] = set()
        for ka in units:
            for kb in units:
                if ka <= kb and (new is None or new in (ka, kb)):
                    cols_a, cols_b = prob.colors[ka], prob.colors[kb]
                    bad.update((a, b) for a, b in pairs if (a in cols_a and b in cols_b) or (b in cols_a and a in cols_b))
        errs.extend(f"(17-18) node {n}: incompatible colours {a} and {b}" for a, b in sorted(bad))
    for ka in units:
        for kb in units:
            if ka < kb and kb in prob.exl[ka] and (new is None or new in (ka, kb)):
                errs.append(f"(28) node {n}: exlocated {prob.units[ka].name} and {prob.units[kb].name}")
    return errs


def check(scenario: Scenario, macroq: MacroQResult, candidates: dict[str, tuple[str, ...]]) -> list[str]:
    """Every constraint (4-28) a candidate assignment violates; empty when feasible."""
    prob = Problem(scenario, macroq)
    return violations(prob, candidates)


def violations(prob: Problem, candidates: dict[str, tuple[str, ...]]) -> list[str]:
    errs: list[str] = []
    pol = prob.pol
    per_node: dict[str, list[int]] = {}
    cand_u: list[set[str]] = []
    for i, u in enumerate(prob.units):
        sets = [frozenset(candidates.get(p, ())) for p in u.members]
        if len(set(sets)) > 1:
            errs.append(f"(27) colocated PEs {list(u.members)} have different candidate nodes")
        c = set(sets[0])
        cand_u.append(c)
        bad = c - prob.match_set(i)
        if bad:
            errs.append(f"(12) {u.name}: nodes {sorted(bad)} are not resource-matched or not usable")
        racks = {prob.nodes[n].rack for n in c if n in prob.nodes}
        if len(racks) > 1:
            errs.append(f"(6) {u.name}: candidates span racks {sorted(racks)}")
        if len(c) < u.min_c:
            errs.append(f"(25) {u.name}: {len(c)} candidates < minimum {u.min_c}")
        if u.max_c is not None and len(c) > u.max_c:
            errs.append(f"(26) {u.name}: {len(c)} candidates > maximum {u.max_c}")
        cap = sum(prob.H(i, n) for n in c if n in prob.nodes)
        if cap + 1e-6 < u.need:
            errs.append(f"(19) {u.name}: candidate mips {cap:.0f} < phi x goal {u.need:.0f}")
        if u.max_change is not None and u.prev and len(c ^ u.prev) > u.max_change:
            errs.append(f"(23) {u.name}: {len(c ^ u.prev)} candidate changes > {u.max_change}")
        for n in c:
            per_node.setdefault(n, []).append(i)
    if pol.max_candidate_change is not None:
        tot = sum(len(c ^ u.prev) for c, u in zip(cand_u, prob.units) if u.prev)
        if tot > pol.max_candidate_change:
            errs.append(f"(22) {tot} candidate changes > {pol.max_candidate_change}")
    for lic, count in pol.licenses.items():
        used = sum(len(c) for c, ls in zip(cand_u, prob.licenses) if lic in ls)
        if used > count:
            errs.append(f"(13) license {lic}: {used} tokens > {count}")
    for lic in {x for ls in prob.licenses for x in ls} - set(pol.licenses):
        errs.append(f"(13) license {lic}: no tokens configured")
    if pol.global_risk_limit is not None:
        risk = sum(prob.risk[i] * prob.nodes[n].risk for i, c in enumerate(cand_u) for n in c if n in prob.nodes)
        if risk > pol.global_risk_limit + 1e-9:
            errs.append(f"(16) global risk {risk:.2f} > {pol.global_risk_limit}")
    for n, us in per_node.items():
        if n in prob.nodes:
            errs.extend(node_conflicts(prob, n, us))
    return errs

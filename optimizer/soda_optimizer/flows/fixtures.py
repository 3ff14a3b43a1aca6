"""The paper's hub-and-spokes baseline, perturbations P1-P3 and the scaling transforms (Montana & Zinky, section 4).

Given by the paper: 18 pools, 3 per step A-F, capacity 13; steps A-C in the flow's own spoke (pools iA, iB, iC),
steps D-F in any hub pool (1D-3D, 1E-3E, 1F-3F); 24 flows = 2 utilities (2, 1) x 2 lifespans (1 h, 16 h) x 6 arrival
patterns, two patterns per spoke; one minute per step; 6 epochs of 4 h; in epoch 1 every spoke-1 flow arrives at
2 jobs/min (16 jobs/min on spoke 1).

Chosen by us, because the paper gives Fig. 2 and Fig. 9 only as pictures:
- ``LOAD_MAP`` (Fig. 2): throughput = load up to 80% load, then half of each extra unit up to 90% at full load,
  flat at 90% beyond (so a pool of 13 serves at most 11.7 jobs/min of one-minute steps and 10.4 without loss);
- ``PATTERNS`` (Fig. 9): per-flow jobs/min per epoch of a 24 h cycle, a rising-early (a) and a rising-late (b)
  pattern per spoke, both 2 at the spoke's peak; spoke i's cycle starts at epoch 2(i-1), so the spoke totals per
  epoch (4 flows per pattern) are spoke 1: 16 13 7 5 5 11, spoke 2: 5 11 16 13 7 5, spoke 3: 7 5 5 11 16 13.
  This gives the paper's analysis: spoke 1 overloaded in epoch 1 with spare capacity in epochs 3-4; spoke 2
  overloaded in epochs 2-4 with its peak in 3 and spare in 5-6; spoke 3 peaking in epoch 5, nothing after epoch 6;
- P of eq. (2): 0.995 per hour.
"""

from __future__ import annotations

from .model import Flow, LoadMap, Pool, Problem, Step

CAPACITY = 13.0
EPOCHS = 6
EPOCH_LENGTH = 240.0
SHORT, LONG = 60.0, 960.0
HIGH, LOW = 2.0, 1.0
STEPS = "ABCDEF"
SPOKE_STEPS = "ABC"
HUB_STEPS = "DEF"

LOAD_MAP = LoadMap(points=((0.0, 0.0), (0.8, 0.8), (1.0, 0.9), (100.0, 0.9)))

#: per-flow arrival rate (jobs/min) by epoch offset from the spoke's peak epoch
CYCLE_A = (2.0, 1.25, 0.75, 0.5, 0.5, 1.5)
CYCLE_B = (2.0, 1.5, 1.0, 0.75, 0.75, 1.0)
SPOKE_PEAK = {1: 0, 2: 2, 3: 4}


def _shift(cycle: tuple[float, ...], peak: int) -> tuple[float, ...]:
    return tuple(cycle[(e - peak) % len(cycle)] for e in range(EPOCHS))


#: pattern number (1-6) -> per-epoch rates; patterns 2i-1 and 2i belong to spoke i
PATTERNS: dict[int, tuple[float, ...]] = {}
for _spoke, _peak in SPOKE_PEAK.items():
    PATTERNS[2 * _spoke - 1] = _shift(CYCLE_A, _peak)
    PATTERNS[2 * _spoke] = _shift(CYCLE_B, _peak)


def flow_name(spoke: int, pattern: int, utility: float, lifespan: float) -> str:
    return f"s{spoke}-p{pattern}-{'hi' if utility == HIGH else 'lo'}-{'short' if lifespan == SHORT else 'long'}"


def baseline() -> Problem:
    pools = []
    for step in STEPS:
        for i in (1, 2, 3):
            pools.append(Pool(name=f"{i}{step}", capacity=(CAPACITY,) * EPOCHS, load_map=LOAD_MAP))
    flows = []
    for spoke in (1, 2, 3):
        steps = tuple(Step(name=s, run_time=1.0, pools=(f"{spoke}{s}",)) for s in SPOKE_STEPS) + tuple(
            Step(name=s, run_time=1.0, pools=tuple(f"{i}{s}" for i in (1, 2, 3))) for s in HUB_STEPS
        )
        for pattern in (2 * spoke - 1, 2 * spoke):
            for utility in (HIGH, LOW):
                for lifespan in (SHORT, LONG):
                    flows.append(
                        Flow(
                            name=flow_name(spoke, pattern, utility, lifespan),
                            steps=steps,
                            lifespan=lifespan,
                            utility=utility,
                            arrival_rate=PATTERNS[pattern],
                            labels={"spoke": str(spoke), "pattern": str(pattern)},
                        )
                    )
    return Problem(pools=tuple(pools), flows=tuple(flows), epochs=EPOCHS, epoch_length=EPOCH_LENGTH)


def _with_capacity(problem: Problem, pool: str, epochs: range, value: float) -> Problem:
    pools = []
    for p in problem.pools:
        if p.name == pool:
            cap = tuple(value if e in epochs else c for e, c in enumerate(p.capacity))
            p = p.model_copy(update={"capacity": cap})
        pools.append(p)
    return problem.model_copy(update={"pools": tuple(pools)})


def p1() -> Problem:
    """P1, current loss of a hub pool: 1E has capacity 0 in epochs 1-2."""
    return _with_capacity(baseline(), "1E", range(0, 2), 0.0)


def p2() -> Problem:
    """P2, future loss of spoke resources: 1B has capacity 6 in epochs 3-6."""
    return _with_capacity(baseline(), "1B", range(2, 6), 6.0)


P3_FLOW = flow_name(1, 1, HIGH, LONG)


def p3() -> Problem:
    """P3, surge: one high-utility long-lifespan spoke-1 flow goes from 2 to 5 jobs/min in epochs 1-2."""
    base = baseline()
    flows = []
    for f in base.flows:
        if f.name == P3_FLOW:
            rates = tuple(5.0 if e in (0, 1) else r for e, r in enumerate(f.arrival_rate))
            f = f.model_copy(update={"arrival_rate": rates})
        flows.append(f)
    return base.model_copy(update={"flows": tuple(flows)})


SCENARIOS = {"baseline": baseline, "P1": p1, "P2": p2, "P3": p3}


# --- scaling transforms of section 4.2 -------------------------------------------------------------------------


def scale_pools(problem: Problem, n: int) -> Problem:
    """Each pool becomes n pools with 1/n of its capacity, all legal wherever the original was."""
    pools = []
    for p in problem.pools:
        for k in range(n):
            pools.append(p.model_copy(update={"name": f"{p.name}.{k}", "capacity": tuple(c / n for c in p.capacity)}))
    flows = []
    for f in problem.flows:
        steps = tuple(
            s.model_copy(update={"pools": tuple(f"{q}.{k}" for q in s.pools for k in range(n))}) for s in f.steps
        )
        flows.append(f.model_copy(update={"steps": steps}))
    return problem.model_copy(update={"pools": tuple(pools), "flows": tuple(flows)})


def scale_flows(problem: Problem, n: int) -> Problem:
    """Each flow becomes n flows with 1/n of its arrival rate."""
    flows = []
    for f in problem.flows:
        for k in range(n):
            flows.append(
                f.model_copy(update={"name": f"{f.name}.{k}", "arrival_rate": tuple(r / n for r in f.arrival_rate)})
            )
    return problem.model_copy(update={"flows": tuple(flows)})


def scale_epochs(problem: Problem, n: int) -> Problem:
    """Each epoch becomes n epochs of 1/n its length (same rates and capacities)."""
    pools = tuple(
        p.model_copy(update={"capacity": tuple(c for c in p.capacity for _ in range(n))}) for p in problem.pools
    )
    flows = tuple(
        f.model_copy(update={"arrival_rate": tuple(r for r in f.arrival_rate for _ in range(n))}) for f in problem.flows
    )
    return problem.model_copy(
        update={"pools": pools, "flows": flows, "epochs": problem.epochs * n, "epoch_length": problem.epoch_length / n}
    )


def scale_steps(problem: Problem, n: int) -> Problem:
    """Each step becomes n steps with 1/n of its run time and the same pools."""
    flows = []
    for f in problem.flows:
        steps = tuple(
            s.model_copy(update={"name": f"{s.name}.{k}", "run_time": s.run_time / n})
            for s in f.steps
            for k in range(n)
        )
        flows.append(f.model_copy(update={"steps": steps}))
    return problem.model_copy(update={"flows": tuple(flows)})


def scaled(problem: Problem, pools: int = 1, flows: int = 1, epochs: int = 1, steps: int = 1) -> Problem:
    out = problem
    if pools > 1:
        out = scale_pools(out, pools)
    if flows > 1:
        out = scale_flows(out, flows)
    if epochs > 1:
        out = scale_epochs(out, epochs)
    if steps > 1:
        out = scale_steps(out, steps)
    return Problem.model_validate(out.model_dump())

"""The largest value each number of a job, template or node may take: one table for the model's
validation, the CRDs' ``maximum`` (tests/test_bounds.py checks they agree) and :mod:`.screen`.

The SODA paper states no bounds; floats do. A weight of 1e308 is finite, but weight x value x rate
is not, and one job whose importance overflows would turn every sum the optimizer takes (macroQ's
curves, the plan's total) into inf or NaN for everyone. So each number is bounded where it enters
(generously: six or more orders of magnitude past any example or paper figure), and
:mod:`.screen` checks what the bounds alone cannot: that a job's importance, rates and traffic at
its largest allocation stay finite and within :data:`MAX_JOB_IMPORTANCE` / :data:`MAX_RATE`
(a long chain of selectivities multiplies).
"""

from __future__ import annotations

MAX_WEIGHT = 1e9  # stream, sink and import weights; StreamJob weightOverrides
MAX_SLOPE = 1e9  # a value function's value per tuple/s
MAX_RATE = 1e12  # tuples/s: a primal input's rate, a value function's cap and points' x
MAX_VALUE = 1e15  # a piecewise value function's y
MAX_SELECTIVITY = 1e6
MAX_RF = 1e9  # a resource function's a and b
MAX_BYTES_PER_TUPLE = 1e9
MAX_CORES = 1e5  # any CPU quantity: a Node's allocatable CPU, a PE's minCpu/maxCpu, nodeReservedCpu
MAX_MIPS_PER_CORE = 1e6  # the kubesoda.io/mips-per-core label
MAX_RISK = 1e9
MAX_FAIRNESS = 1e3

# what one job may add to the importance at its largest allocation, and the largest rate (tuples/s)
# or traffic (bytes/s) one of its streams may carry there: 1e15 x 1e5 jobs stays far from overflow
MAX_JOB_IMPORTANCE = 1e15
MAX_STREAM_RATE = 1e18
MAX_TRAFFIC = 1e21

# issue 45: every other number of a StreamJob, StreamTemplate, SchedulingPolicy, YieldGroup and ResourceProfile
# spec has a maximum too, the CRDs' (tests/test_crd_bounds.py walks them), mirrored where the code reads it, so an
# object stored before its CRD had the bound (or a file for ``kubesoda plan -f``) gets the same one error
MAX_MIPS = MAX_CORES * MAX_MIPS_PER_CORE  # any mips figure of the policy: peFloorMips, unitMips, microW's change limits
MAX_MEMORY = 1e18  # bytes (1E): a PE's memory, a YieldGroup's migrationBudget
MAX_RANK = 1_000_000  # a StreamJob's rank and the administrator's rankOverrides
MAX_COUNT = 1_000_000  # counts of nodes, candidates, instances, changes, license tokens, epochs between probes
MAX_INTEGRITY = 1_000_000  # |integrity level| of a PE
MAX_EPOCH_S = 86_400.0  # a macro or micro epoch, a YieldGroup's epoch: a day
MAX_DEADLINE_S = 600.0  # one SODA stage's time budget: 10 minutes (an epoch of the paper is minutes)
MAX_UNITS = 16_384  # macroQ's resolutionUnits (soda.macroq.MAX_UNITS: the finest it uses)
MAX_OBJECTIVE_WEIGHT = 1e3  # macroW's W1..W4: x 100 (CP_WEIGHT_SCALE) x 1e11 (its largest term) stays an int64
MIN_LINK, MAX_LINK = 1.0, 1e15  # bytes/s of a network link
MAX_RISK_LIMIT = 1e15  # the policy's globalRiskLimit (MAX_RISK x nodes)
MAX_OVERALLOCATION = MAX_FAIRNESS
MAX_BUDGET = 1e18  # mips x seconds: MAX_MIPS for 115 days, 1e6 mips for 30,000 years (an int64: the API server reads a CRD bound as one)
MAX_MERIT = 1e6  # |a merit weight|, |an owner's priority|
MIN_BUCKET, MAX_BUCKET = 1e-6, 1e12  # merit bucket: merit (< 1e18) / bucket stays finite
MAX_SAMPLES = 1e6  # exploration's minSamples

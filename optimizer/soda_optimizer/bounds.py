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

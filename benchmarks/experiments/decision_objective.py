"""What should the backend decision minimise? Re-scores committed regret stores (no GPU) with ``decision.deciding_cost``
as each of: ``latency``, each backend's latency at every deciding point times the point's weight, summed (the
decision until 2026-11-28); ``time_share``, each backend's latency over the fastest compared backend's at every
deciding point times the point's weight, summed (the mix's weights are shares of GPU time, so this is the engine's
time relative to the best backend at every point); ``log_ratio``, the weighted geometric mean of the same ratios, whose
order is that of the weighted geometric mean of the latencies (the typical latency, shipped since 2026-11-28: no third
backend changes two backends' order, as the fastest one does for ``time_share``). Prints per store and objective the
chosen backend, the per-phase backends and both scores against the oracle.

    python benchmarks/experiments/decision_objective.py [--objectives latency,time_share]
        RESULTS_DIR MODEL:TP[:fp8][:bsN]
        [RESULTS_DIR MODEL:TP ...]

Arguments as ``tactic_tie.py`` takes them (a store's files under RESULTS_DIR, imported into a temporary folder).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rescore_variants import rescore  # noqa: E402

OBJECTIVES = ("latency", "time_share", "log_ratio")

#: Runs benchmarks/regret.py --score-only with the decision's objective chosen from the environment.
RUNNER = r"""
import math, os, runpy, sys
import hwtune.selector.decision as d

def ratios(costed, mix, deciding, f):
    best = {i: min(c.per_point[i][0] for c in costed) for i in deciding}
    return {c.backend: sum(mix[i].weight * f(c.per_point[i][0] / best[i]) for i in deciding) for c in costed}

objective = os.environ["DECISION_OBJECTIVE"]
if objective == "latency":  # the rule until 2026-11-28
    d.deciding_cost = lambda costed, mix, deciding: {
        c.backend: sum(mix[i].weight * c.per_point[i][0] for i in deciding) for c in costed
    }
elif objective == "time_share":
    d.deciding_cost = lambda costed, mix, deciding: ratios(costed, mix, deciding, lambda r: r)
elif objective != "log_ratio":  # log_ratio: decision.deciding_cost as shipped since 2026-11-28 (a typical latency)
    sys.exit(f"unknown objective {objective!r}")
sys.argv = ["regret.py", *sys.argv[1:]]
runpy.run_path("benchmarks/regret.py", run_name="__main__")
"""


def main() -> None:
    argv, objectives = sys.argv[1:], OBJECTIVES
    if argv[:1] == ["--objectives"]:
        objectives, argv = tuple(argv[1].split(",")), argv[2:]
    rescore(argv, __doc__ or "", RUNNER, "DECISION_OBJECTIVE", "objective", objectives)


if __name__ == "__main__":
    main()

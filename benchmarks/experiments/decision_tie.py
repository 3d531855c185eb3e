"""How much does the decision's near-tie rule decide? Re-scores committed regret stores (no GPU) with the tie
(``hwtune.selector.decision.TIE``: backends within it of the cheapest are ranked by their worst point) at 1.00 (no
tie: the cheapest wins), 1.05 (the default), 1.10 and 1.20, and prints per model and tie the chosen backend, the
per-phase backends and both scores against the oracle (docs/tuning.md "Selection from measurements", the decision).

    python benchmarks/experiments/decision_tie.py RESULTS_DIR MODEL:TP[:fp8][:bsN] [RESULTS_DIR MODEL:TP ...]

MODEL is a file name under tests/data/models without ``.json``; each RESULTS_DIR holds
``<model>-tp<TP>[-kv<dtype>][-bs<N>]_{train,oracle}.jsonl`` as ``benchmarks/regret_rescore.sh`` reads them; the stores
are imported into a temporary folder (``rescore_variants.import_stores``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rescore_variants import rescore  # noqa: E402

TIES = ("1.00", "1.05", "1.10", "1.20")

#: Runs benchmarks/regret.py --score-only with the decision's tie set from the environment.
RUNNER = r"""
import os, runpy, sys
import hwtune.selector.decision as d
d.TIE = float(os.environ["DECISION_TIE"])
sys.argv = ["regret.py", *sys.argv[1:]]
runpy.run_path("benchmarks/regret.py", run_name="__main__")
"""


def main() -> None:
    rescore(sys.argv[1:], __doc__ or "", RUNNER, "DECISION_TIE", "tie", TIES)


if __name__ == "__main__":
    main()

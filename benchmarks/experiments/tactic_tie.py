"""Does comparing tied tactics on the shapes both were measured at change regret? Re-scores committed regret stores
(no GPU) with the dispatch's tie-break (``hwtune.selector.dispatch.shared_estimates``: tactics whose estimates at a cell
lie within ``TIE`` of the cheapest are compared again from only the shapes all of them were measured at; models with
windowed layers too, each kind's so weighted by its layers) and without it
(the cheapest estimate wins, as before 2026-11-28), and prints per model and variant the chosen backend, the per-phase
backends and both policies' scores against the oracle (docs/tuning.md "Dispatch").

    python benchmarks/experiments/tactic_tie.py RESULTS_DIR MODEL:TP[:fp8][:bsN] [RESULTS_DIR MODEL:TP ...]

MODEL is a file name under tests/data/models without ``.json``; each RESULTS_DIR holds
``<model>-tp<TP>[-kv<dtype>][-bs<N>]_{train,oracle}.jsonl`` as ``benchmarks/regret_rescore.sh`` reads them; the
stores are imported into a temporary folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rescore_variants import rescore  # noqa: E402

VARIANTS = ("off", "on")

#: Runs benchmarks/regret.py --score-only with the tie-break on or off (from the environment).
RUNNER = r"""
import os, runpy, sys
import hwtune.selector.dispatch as d
if os.environ["TACTIC_TIE"] == "off":
    d.shared_estimates = lambda tactics, tied, mp: None
sys.argv = ["regret.py", *sys.argv[1:]]
runpy.run_path("benchmarks/regret.py", run_name="__main__")
"""


def main() -> None:
    rescore(sys.argv[1:], __doc__ or "", RUNNER, "TACTIC_TIE", "tie_break", VARIANTS)


if __name__ == "__main__":
    main()

"""How much does the decision's near-tie rule decide? Re-scores committed regret stores (no GPU) with the tie
(``hwtune.selector.decision.TIE``: backends within it of the cheapest are ranked by their worst point) at 1.00 (no
tie: the cheapest wins), 1.05 (the default), 1.10 and 1.20, and prints per model and tie the chosen backend, the
per-phase backends and both scores against the oracle (docs/tuning.md "Selection from measurements", the decision).

    python benchmarks/experiments/decision_tie.py RESULTS_DIR MODEL:TP[:fp8] [RESULTS_DIR MODEL:TP ...]

MODEL is a file name under tests/data/models without ``.json``; each RESULTS_DIR holds
``<model>-tp<TP>[-kv<dtype>]_{train,oracle}.jsonl`` as ``benchmarks/regret_rescore.sh`` reads them; the stores are
imported into a temporary folder (``dispatch_cells.stores``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dispatch_cells import stores  # noqa: E402
from rescore_variants import result_pairs, score_variant  # noqa: E402

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
    for results, path, model, out in result_pairs(sys.argv[1:], __doc__ or ""):
        cfg, kv, stem = stores(path, model, out)
        for tie in TIES:
            row = score_variant(RUNNER, {"DECISION_TIE": tie}, out, ["--model", cfg, "--kv-cache-dtype", kv])
            print(json.dumps({"model": stem, "results": results, "tie": tie, **row}), flush=True)


if __name__ == "__main__":
    main()

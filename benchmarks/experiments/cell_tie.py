"""Is a tie at a dispatch cell's centre better broken by the cell's corners? Re-scores committed regret stores (no
GPU) with ``hwtune.selector.dispatch.CELL_TIE_BREAK`` on and off: where tactics tie at a cell's centre (within ``TIE``,
none measured there, no robust tactic beyond the range), the tied tactic whose worst estimated ratio to the cheapest
of them over the cell's centre and four corners is smallest (``cell_minimax``), or the cheapest at the centre alone
(as before 2026-11-29); both on the shapes the tied tactics share where there are two. Why: on
DeepSeek-V3 TP 8 (H200, 2026-11-28 and -29) the prefill cell of 257-512-token chunks in 4097-8192 tokens of context has
FlashInfer's mha-fa2 and mha-fa3 within 1 % at its centre while their ratio runs from 0.75 to 1.46 across the cell;
fa2 was chosen and ran 384 tokens on 6000 cached at 1.12x the best. Models with several layer kinds weigh each
kind's estimates (``layer_kinds``).

    python benchmarks/experiments/cell_tie.py RESULTS_DIR MODEL:TP[:fp8][:bsN] [RESULTS_DIR MODEL:TP ...]

Arguments as ``tactic_tie.py``'s; one JSON line per model and variant (``cell_tie``: off, on).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rescore_variants import rescore  # noqa: E402

VARIANTS = ("off", "on")

#: Runs benchmarks/regret.py --score-only with the corner tie-break on or off (from the environment).
RUNNER = r"""
import os, runpy, sys
import hwtune.selector.dispatch as d
d.CELL_TIE_BREAK = os.environ["CELL_TIE"] == "on"
sys.argv = ["regret.py", *sys.argv[1:]]
runpy.run_path("benchmarks/regret.py", run_name="__main__")
"""


def main() -> None:
    rescore(sys.argv[1:], __doc__ or "", RUNNER, "CELL_TIE", "cell_tie", VARIANTS)


if __name__ == "__main__":
    main()

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
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dispatch_cells import ROOT, stores  # noqa: E402

TIES = ("1.00", "1.05", "1.10", "1.20")

#: Runs benchmarks/regret.py --score-only with the decision's tie set from the environment.
RUNNER = r"""
import os, runpy, sys
import hwtune.selector.decision as d
d.TIE = float(os.environ["DECISION_TIE"])
sys.argv = ["regret.py", *sys.argv[1:]]
runpy.run_path("benchmarks/regret.py", run_name="__main__")
"""


def score(out: Path, cfg: str, kv: str, tie: str) -> dict:
    """One scoring with the tie at ``tie``: the chosen backend and per-phase backends, and both policies' scores."""
    args = ["--out", str(out), "--model", cfg, "--score-only", "--as-stored", "--device", "h100", "--kv-layout",
            "NHD", "--kv-cache-dtype", kv]  # fmt: skip
    env = {**os.environ, "DECISION_TIE": tie, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    text = res.stdout + res.stderr
    row: dict = {"tie": tie}
    for policy in ("hwtune", "hwtune_per_phase"):
        line = next((ln for ln in text.splitlines() if ln.split()[:1] == [policy]), None)
        row[policy] = " / ".join(re.findall(r"(?:geomean|p95|worst) ([\d.inf]+)", line)) if line else "failed"
    head = re.search(r"tp\d+: (\S+) per phase (\{.*\})", text)
    row["backend"], row["per_phase"] = (head.group(1), head.group(2)) if head else (None, None)
    if head is None:
        row["error"] = text.strip().splitlines()[-1:]
    return row


def main() -> None:
    pairs = sys.argv[1:]
    if len(pairs) < 2 or len(pairs) % 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (results, model) in enumerate(zip(pairs[::2], pairs[1::2])):
            out = Path(tmp) / str(i)  # one folder per pair: a model may come from two results folders
            cfg, kv, stem = stores(Path(results), model, out)
            for tie in TIES:
                print(json.dumps({"model": stem, "results": results, **score(out, cfg, kv, tie)}), flush=True)


if __name__ == "__main__":
    main()

"""The best regret any selection could reach with the measured backends: for each assignment of a backend to decode
and one to prefill (the same one for both: an engine that cannot route phases), each backend's best tactic at every
oracle shape (perfect dispatch), scored against the oracle's best over every candidate. If even the best assignment
misses the goal, no change to the planner, the tables or the decision can meet it: a faster kernel is needed
(docs/regret.md). No GPU; reads the committed oracle stores.

    python benchmarks/experiments/regret_ceiling.py ORACLE.jsonl [ORACLE.jsonl ...]

Models that mix layer kinds are left out (their regret weighs each kind's latency by its layers; regret.py does that).
Prints one JSON line per store: per assignment (decode backend, prefill backend) geomean / p95 / worst, the best one
by worst and by geomean, and whether any meets the goal.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.regret import scores  # noqa: E402

GOAL = (1.01, 1.03, 1.15)


def shapes(path: str) -> dict[tuple, dict[str, float]] | None:
    """Per oracle shape (phase, batch, context, query length), each backend's best median over its tactics; None for
    a store of a model with several layer kinds."""
    best: dict[tuple, dict[str, float]] = defaultdict(dict)
    windows = set()
    with open(path) as f:
        next(f)  # the export's header line
        for line in f:
            r = json.loads(line)
            if r["status"] != "ok":
                continue
            w = r["workload"]
            windows.add(w["spec"].get("sliding_window"))
            key = (w["phase"], w["batch"], w["context_len"], w["query_len"])
            us = r["stats"]["median_us"]
            best[key][r["backend"]] = min(best[key].get(r["backend"], math.inf), us)
    return None if len(windows) > 1 else dict(best)


def ceiling(best: dict[tuple, dict[str, float]]) -> dict:
    """Every (decode, prefill) backend assignment's score with perfect tactic dispatch."""
    backends = sorted({b for v in best.values() for b in v})
    rows = {}
    for dec, pre in itertools.product(backends, repeat=2):
        ratios = []
        for key, v in best.items():
            b = dec if key[0] == "decode" else pre
            ratios.append(v.get(b, math.inf) / min(v.values()))
        if all(math.isfinite(x) for x in ratios):
            s = scores(ratios)  # regret.py's geomean / p95 / worst
            rows[f"{dec} / {pre}"] = (s["geomean"], s["p95"], s["worst"])
    by_worst = min(rows, key=lambda k: (rows[k][2], rows[k][0]))
    by_geo = min(rows, key=lambda k: (rows[k][0], rows[k][2]))
    meets = [k for k, s in rows.items() if all(x <= g for x, g in zip(s, GOAL))]
    return {"shapes": len(best), "assignments": rows, "best_by_worst": by_worst, "best_by_geomean": by_geo,
            "meets_goal": meets}  # fmt: skip


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        best = shapes(path)
        out = {"store": path, **(ceiling(best) if best else {"skipped": "several layer kinds"})}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

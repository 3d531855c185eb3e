"""How much more would a finer bisection measure? For each committed tune store (JSON Lines export), the bisection
points (``hwtune.tuner.schedule.bisections``) its measurements call for in one more round at a factor of 4 (the
default until 2026-11-27) and of 2 (the default since), and for the factor-2 round an estimate of its measuring time:
each point's candidates (those its two nearest measured neighbours on the bisected line timed and ``pruned`` keeps;
with the contender rule, only its contenders between close neighbours) at the larger of their two ``extra.wall_s``
there. No GPU;
docs/regret.md (Gemma-2 with both layer kinds).

    python benchmarks/experiments/bisect_factor.py STORE.jsonl [STORE.jsonl ...]
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict

from hwtune.core.records import MeasurementRecord
from hwtune.core.types import workload_from_dict
from hwtune.tuner import schedule
from hwtune.tuner.plan import PlanItem


def round_cost(items: list[PlanItem], recs: list[MeasurementRecord], new: list[PlanItem]) -> dict:
    """Estimated candidates and seconds of one bisection round, measuring every unpruned candidate or the contenders."""
    wall: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    for r in recs:
        wall[r.workload_key][(r.backend, r.tactic)] = float((r.extra or {}).get("wall_s") or 0.0)
    timed = schedule._timings(recs)
    out = {"every": [0, 0.0], "contenders": [0, 0.0]}
    for item in new:
        group, a, b = schedule._axes(item)  # type: ignore[misc]  # the bisected line's group and coordinates

        def dist(m: PlanItem, a: int = a, b: int = b) -> float:
            _, ma, mb = schedule._axes(m)  # type: ignore[misc]
            return (math.log2(max(ma, 1) / max(a, 1))) ** 2 + (math.log2(max(mb, 1) / max(b, 1))) ** 2

        near = sorted((m for m in items if m.key in timed and (schedule._axes(m) or (None,))[0] == group), key=dist)[:2]
        every = set().union(*(set(timed[m.key]) for m in near)) - set(schedule.pruned(item, items, recs))
        contenders = {tuple(e.split(":", 1)) for e in item.backends or ()} if item.contenders else every
        for name, cands in (("every", every), ("contenders", contenders)):
            out[name][0] += len(cands)
            out[name][1] += sum(max((wall[m.key].get(c, 0.0) for m in near), default=0.0) for c in cands)
    return {k: {"candidates": n, "seconds": round(s, 1)} for k, (n, s) in out.items()}


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    current = schedule.BISECT_FACTOR
    for path in sys.argv[1:]:
        with open(path) as f:
            recs = [MeasurementRecord.from_dict(d) for d in map(json.loads, f) if "backend" in d]
        items = list({r.workload_key: PlanItem(workload_from_dict(r.kind, r.workload)) for r in recs}.values())
        counts, cost = {}, {}
        try:
            for factor in (4, 2):
                schedule.BISECT_FACTOR = factor
                new = schedule.bisections(items, recs)
                counts[factor] = len(new)
            cost = round_cost(items, recs, new)
        finally:
            schedule.BISECT_FACTOR = current
        measured = round(sum(float((r.extra or {}).get("wall_s") or 0.0) for r in recs), 1)
        print(
            json.dumps(
                {"store": path, "workloads": len(items), "measured_s": measured, "new_points": counts, "factor2": cost}
            )
        )


if __name__ == "__main__":
    main()

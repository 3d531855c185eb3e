"""What would a tune have measured, and chosen, had its last bisection round measured only the contenders? For a tune
store (JSON Lines export) that measured every candidate at every bisection point, the bisection rounds are replayed
with ``hwtune.tuner.schedule.bisections`` as it is now: each point it calls for keeps only the records of what it
would measure (every candidate between neighbours ``WIDE_FACTOR`` or more apart, the contenders between closer
ones). Writes the reduced store (score it with ``benchmarks/regret_rescore.sh`` against the same oracle) and prints
what the replay kept: points, records, and the seconds those records took to measure (``extra.wall_s``). No GPU.

The plan's own items are the first ``--planned`` workloads the store measured (the tuner measures every planned item
before it adds a bisection point). A point the replay calls for that the store never measured is counted as missing,
and a candidate the rules would measure that the store lacks at a point cannot be added: the replay shows which points
and which of the stored candidates the rules keep, not a new tune (it applies neither pruning nor a run's
``--backends``, which can only remove more).

    python benchmarks/experiments/contenders_replay.py STORE.jsonl --planned N --out REDUCED.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hwtune.core.records import MeasurementRecord
from hwtune.core.types import workload_from_dict
from hwtune.db.transfer import record_line
from hwtune.tuner import schedule
from hwtune.tuner.plan import PlanItem


def _wall(records: list[MeasurementRecord]) -> float:
    return round(sum(float((r.extra or {}).get("wall_s") or 0.0) for r in records), 1)


def replay(lines: list[dict], planned: int) -> tuple[list[MeasurementRecord], dict]:
    """The records the current rules would have kept, and what the replay found."""
    recs = [MeasurementRecord.from_dict(d) for d in lines]
    by_key: dict[str, list[MeasurementRecord]] = {}
    for r in sorted(recs, key=lambda r: r.created_at or ""):
        by_key.setdefault(r.workload_key, []).append(r)
    order = list(by_key)
    items = [PlanItem(workload_from_dict(by_key[k][0].kind, by_key[k][0].workload)) for k in order[:planned]]
    kept = [r for k in order[:planned] for r in by_key[k]]
    missing, rounds, narrowed_points = [], 0, 0
    while True:
        new = [i for i in schedule.bisections(items, kept) if i.key not in {x.key for x in items}]
        if not new:
            break
        rounds += 1
        for item in new:
            if item.key not in by_key:
                missing.append(item.workload.to_dict())
                continue
            measured = by_key[item.key]
            if item.contenders:
                narrowed_points += 1
                measured = [r for r in measured if f"{r.backend}:{r.tactic}" in item.backends]
            kept += measured
        items += new
    return kept, {
        "planned": planned,
        "stored_points": len(order),
        "replayed_points": len(items),
        "narrowed_points": narrowed_points,
        "rounds": rounds,
        "missing_points": missing,
        "records": {"stored": len(recs), "kept": len(kept)},
        "wall_s": {"stored": _wall(recs), "kept": _wall(kept)},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("store", type=Path)
    p.add_argument("--planned", type=int, required=True, help="the plan's item count (regret.json default_tune)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    with args.store.open() as f:
        header, *lines = (json.loads(line) for line in f)
    kept, found = replay([d for d in lines if "backend" in d], args.planned)
    with args.out.open("w") as f:
        f.write(json.dumps({**header, "count": len(kept)}) + "\n")
        for r in kept:
            f.write(record_line(r) + "\n")
    print(json.dumps({"store": str(args.store), **found}))


if __name__ == "__main__":
    main()

"""How many more points would a finer bisection measure? For each committed tune store (JSON Lines export), the
bisection points (``hwtune.tuner.schedule.bisections``) its measurements call for at the current ``BISECT_FACTOR``
and at a factor of 2, in the first round (a finished tune needs none at the current factor). No GPU; docs/tuning.md
"Other models" (Gemma-2 with both layer kinds).

    python benchmarks/experiments/bisect_factor.py STORE.jsonl [STORE.jsonl ...]
"""

from __future__ import annotations

import json
import sys

from hwtune.core.records import MeasurementRecord
from hwtune.core.types import workload_from_dict
from hwtune.tuner import schedule
from hwtune.tuner.plan import PlanItem


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    current = schedule.BISECT_FACTOR
    for path in sys.argv[1:]:
        with open(path) as f:
            recs = [MeasurementRecord.from_dict(d) for d in map(json.loads, f) if "backend" in d]
        items = list({r.workload_key: PlanItem(workload_from_dict(r.kind, r.workload)) for r in recs}.values())
        counts = {}
        for factor in (current, 2):
            schedule.BISECT_FACTOR = factor
            counts[factor] = len(schedule.bisections(items, recs))
        schedule.BISECT_FACTOR = current
        print(json.dumps({"store": path, "workloads": len(items), "new_points": counts}))


if __name__ == "__main__":
    main()

"""How much faster several nodes finish one plan through a shared store (the work queue).

Runs the same CPU plan (TORCH_SDPA math, so any machine can run it) with 1 and with N tuner processes
against one store, each pinned to its own CPU core (separate machines would not share their devices), and
reports wall times and how many times each item was measured (must be once). Needs N cores and taskset.

    python benchmarks/shared_plan.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test --nodes 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

PLAN = """
name = "shared-plan-benchmark"
time_cap_s = 1.5
[[attention]]
num_heads = 8
num_kv_heads = 2
head_size = 64
dtype = "float32"
backends = ["TORCH_SDPA:math"]
[[attention.decode]]
batch = [1, 2, 4, 8]
context = [256, 512, 1024, 2048]
"""


def run(db: str, nodes: int, plan: Path) -> float:
    from hwtune.db.store import Store

    Store.open(db).close()
    cmd = [
        "taskset",
        "-c",
        "{core}",
        sys.executable,
        "-m",
        "hwtune",
        "tune",
        "--plan",
        str(plan),
        "--kinds",
        "attention",
        "--device",
        "cpu",
        "--db",
        db,
        "--no-warmup",
        "--json",
        "--fresh" if nodes == 1 else "--resume",
    ]
    t0 = time.perf_counter()
    # each "node" gets its own CPU core, as separate machines would have their own GPUs
    procs = [
        subprocess.Popen([c.format(core=i) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for i in range(nodes)
    ]
    for p in procs:
        p.communicate()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--db", required=True, help="a fresh store URL (SQLite file or PostgreSQL database)")
    ap.add_argument("--nodes", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.toml"
        plan.write_text(PLAN)
        one = run(args.db, 1, plan)
        plan.write_text(PLAN.replace("shared-plan-benchmark", "shared-plan-benchmark-n"))  # a new plan digest
        many = run(args.db, args.nodes, plan)
    from hwtune.db.store import Store

    with Store.open(args.db, read_only=True, create=False) as store:
        counts = Counter((r.workload_key, r.run_id) for r in store.measurements())
    out = {
        "single_s": round(one, 1),
        f"{args.nodes}_nodes_s": round(many, 1),
        "speedup": round(one / many, 2),
        "max_times_an_item_was_measured_in_a_run": max(counts.values()),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

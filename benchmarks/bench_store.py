"""Result-store benchmark: batched inserts, and the selector's lookups with a million measurements stored.

    python benchmarks/bench_store.py                                   # temporary SQLite file
    python benchmarks/bench_store.py --db postgresql+psycopg://postgres@127.0.0.1:5432/hwtune_bench
    python benchmarks/bench_store.py --rows 100000 --json              # smaller, machine-readable

Phase 1 writes ``--insert`` measurements into an empty store with ``Store.write`` in batches of ``--batch``
(the tuner's path: validation, get-or-create of environments and workloads, idempotent upsert) and times
it. Phase 2 fills the store up to ``--rows`` measurements, through the same ``Store.write``, shaped like a
cluster's store: 2 environments x N attention specs x 20 workloads (10 decode batch sizes x 2 context
lengths) x 10 backend/tactic candidates, so one workload key holds 20 measurements (10 per environment) and
one spec key 400 (200 per environment). It then times, for ``--lookups`` random keys, what the selector asks:
all measurements of one workload key, and of one spec key in one environment (and in all). "first" is the
first query on a freshly opened store (Python-side caches empty: what an engine pays once at start);
"warm" repeats it. Use a database that holds nothing else: the script refuses one that is not empty.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Any

from hwtune.core.devices import simulated
from hwtune.core.environment import Environment, SoftwareStack
from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.db.store import Store

STACK = SoftwareStack(
    torch="2.11.0+cu130",
    cuda_runtime="13.0",
    triton="3.6.0",
    flashinfer="0.6.18.post1",
    cudnn="9.10",
    nccl="2.27.3",
    hwtune="0.1.0",
)
ENVS = [Environment(simulated("h100"), STACK), Environment(simulated("b200"), STACK)]
CANDIDATES = [
    ("FLASH_ATTN", "fa2"),
    ("FLASH_ATTN", "fa3"),
    ("FLASHINFER", "fa2"),
    ("FLASHINFER", "fa3"),
    ("FLASHINFER", "cudnn"),
    ("FLASHINFER", "trtllm-gen"),
    ("TRITON_ATTN", "default"),
    ("FLEX_ATTENTION", "default"),
    ("TORCH_SDPA", "default"),
    ("TREE_ATTN", "default"),
]
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CONTEXTS = (2048, 32768)
PER_SPEC = len(ENVS) * len(BATCHES) * len(CONTEXTS) * len(CANDIDATES)  # 400


def spec(i: int) -> AttentionSpec:
    return AttentionSpec(num_heads=32, num_kv_heads=8, head_size=128, sliding_window=1024 + i)


def spec_records(i: int, run_id: str) -> list[MeasurementRecord]:
    """The 400 measurements of one spec: 2 environments x 20 workloads x 10 candidates."""
    out = []
    stats = LatencyStats(median_us=40.0, p10_us=38.0, p90_us=44.0, mean_us=40.5, n=200, spread=0.15, ci95_rel=0.01)
    for env in ENVS:
        fp, h = env.fingerprint(), env.hash()
        for b in BATCHES:
            for c in CONTEXTS:
                wl = AttentionWorkload(spec(i), "decode", b, c)
                wd, wk = wl.to_dict(), wl.key()
                for backend, tactic in CANDIDATES:
                    out.append(
                        MeasurementRecord(
                            kind="attention",
                            workload=wd,
                            workload_key=wk,
                            backend=backend,
                            tactic=tactic,
                            status="ok",
                            stats=stats,
                            environment=fp,
                            environment_hash=h,
                            run_id=run_id,
                            host="node-01",
                            timing_method="cuda_graph",
                            compile_time_s=0.5,
                            extra={"i": i},
                        )
                    )
    return out


def _ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "median_ms": round(statistics.median(xs) * 1e3, 3),
        "p90_ms": round(xs[int(0.9 * (len(xs) - 1))] * 1e3, 3),
        "max_ms": round(xs[-1] * 1e3, 3),
    }


def insert_phase(url: str, n: int, batch: int) -> dict[str, Any]:
    with Store.open(url) as store:
        if store.counts()["measurements"]:
            raise SystemExit(f"{store.masked_url} is not empty; give the benchmark a database of its own")
        records: list[MeasurementRecord] = []
        i = 0
        while len(records) < n:
            records += spec_records(i, "insert-phase")
            i += 1
        records = records[:n]
        start = time.perf_counter()
        for k in range(0, n, batch):
            store.write(records[k : k + batch])
        elapsed = time.perf_counter() - start
        again = time.perf_counter()
        rewritten = sum(store.write(records[k : k + batch]) for k in range(0, n, batch))
        return {
            "rows": n,
            "batch": batch,
            "seconds": round(elapsed, 3),
            "rows_per_s": round(n / elapsed),
            "rewrite_seconds": round(time.perf_counter() - again, 3),
            "rewrite_changed": rewritten,
        }


def fill(url: str, rows: int, fill_batch: int) -> dict[str, Any]:
    start = time.perf_counter()
    with Store.open(url) as store:
        have = store.counts()["measurements"]
        i = 10_000  # spec indices apart from the insert phase's
        pending: list[MeasurementRecord] = []
        while have < rows:
            pending += spec_records(i, "fill")
            i += 1
            if len(pending) >= fill_batch or have + len(pending) >= rows:
                pending = pending[: rows - have]
                have += store.write(pending)
                pending = []
        store.optimize()  # what finish_run, import, push and pull do after their writes
        return {
            "rows": store.counts()["measurements"],
            "specs": i - 10_000,
            "seconds": round(time.perf_counter() - start, 1),
        }


def lookup_phase(url: str, lookups: int, n_specs: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    picks = [10_000 + rng.randrange(n_specs - 1) for _ in range(lookups)]  # fully filled specs only
    h = ENVS[0].hash()
    cases = {
        "workload_key": lambda s, i: s.measurements(
            workload_keys=[AttentionWorkload(spec(i), "decode", 64, 32768).key()]
        ),
        "workload_key+environment": lambda s, i: s.measurements(
            workload_keys=[AttentionWorkload(spec(i), "decode", 64, 32768).key()], environment_hash=h
        ),
        "spec_key+environment": lambda s, i: s.measurements(spec_key=spec(i).key(), environment_hash=h),
        "spec_key": lambda s, i: s.measurements(spec_key=spec(i).key()),
        "latencies(spec_key+environment)": lambda s, i: s.latencies(spec(i).key(), environment_hash=h),
        "latencies(spec_key)": lambda s, i: s.latencies(spec(i).key()),
    }
    out: dict[str, Any] = {}
    for name, fn in cases.items():
        first, warm, cpu, sizes = [], [], [], set()
        for i in picks:
            with Store.open(url, read_only=True, create=False) as store:
                t0 = time.perf_counter()
                got = fn(store, i)
                first.append(time.perf_counter() - t0)
                t0, c0 = time.perf_counter(), time.process_time()
                fn(store, i)
                warm.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                sizes.add(len(got))
        out[name] = {"records": sorted(sizes), "first": _ms(first), "warm": _ms(warm), "warm_cpu": _ms(cpu)}
    return out


def machine(url: str) -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    mem = next((int(line.split()[1]) // 1024**2 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "os": platform.platform(),
    }
    with Store.open(url, read_only=True, create=False) as store:
        info["store"] = store.masked_url
        if store.dialect == "postgresql":
            with store.engine.connect() as conn:
                info["postgresql"] = conn.exec_driver_sql("SHOW server_version").scalar()
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--insert", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--fill-batch", type=int, default=8_000)
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tmp = None
    url = args.db
    if url is None:
        tmp = tempfile.mkdtemp(prefix="hwtune-bench-")
        url = os.path.join(tmp, "bench.db")
    result: dict[str, Any] = {"insert": insert_phase(url, args.insert, args.batch)}
    print(f"insert: {result['insert']}", file=sys.stderr)
    result["fill"] = fill(url, args.rows, args.fill_batch)
    print(f"fill: {result['fill']}", file=sys.stderr)
    load_before = os.getloadavg()
    result["lookup"] = lookup_phase(url, args.lookups, result["fill"]["specs"])
    result["loadavg_1min_before_after_lookups"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    result["machine"] = machine(url)
    result["date"] = time.strftime("%Y-%m-%d")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, r in result["lookup"].items():
            print(f"{name:<34} records {r['records']}  first {r['first']}  warm {r['warm']}  warm cpu {r['warm_cpu']}")
        print(json.dumps(result["machine"]), "load", result["loadavg_1min_before_after_lookups"])
    if tmp is not None:
        for name in os.listdir(tmp):
            os.unlink(os.path.join(tmp, name))
        os.rmdir(tmp)


if __name__ == "__main__":
    main()

"""Does `hwtune tune` store what `hwtune bench` measures? (issue 17; docs/probes.md "Tune against bench")

1. Tune a plan of many decode and prefill shapes (more than torch.compile's recompile limit) with the given
   backends through one Tuner: one long-lived worker, as `hwtune tune` runs.
2. For each compared shape, measure it again as `hwtune bench attention` does: a fresh worker, ``rounds``
   times, alternating shapes so that slow drift of the machine hits every shape alike.
3. Report stored / median(bench) per (backend, tactic, shape), and write every figure to ``--out``.

    python benchmarks/tune_vs_bench.py --device cpu --backends TORCH_SDPA,FLEX_ATTENTION --out FILE.json
    python benchmarks/tune_vs_bench.py --device cuda --out FILE.json        (every GPU backend)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hwtune.core.environment import current_environment  # noqa: E402
from hwtune.core.types import AttentionSpec, AttentionWorkload  # noqa: E402
from hwtune.db.store import Store  # noqa: E402
from hwtune.probes.attention.measure import measure_attention, plan_candidates  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402
from hwtune.tuner.options import TuneOptions, resolve_profile  # noqa: E402
from hwtune.tuner.plan import Plan, PlanItem  # noqa: E402
from hwtune.tuner.run import Tuner  # noqa: E402

CPU_SPEC = AttentionSpec(num_heads=8, num_kv_heads=2, head_size=64, dtype="float32")
GPU_SPEC = AttentionSpec(num_heads=32, num_kv_heads=8, head_size=128)  # Llama-3.1-8B's attention
CPU_DECODE = [(1, 64), (1, 192), (2, 64), (2, 192), (3, 128), (4, 64), (5, 96), (6, 64), (7, 64), (8, 320)]
GPU_DECODE = [(1, 512), (1, 4096), (4, 512), (4, 2048), (8, 1024), (16, 512), (16, 4096), (32, 2048), (64, 2048)]


def _workloads(device: str, shapes: int | None) -> list[AttentionWorkload]:
    spec, decode = (GPU_SPEC, GPU_DECODE) if device == "cuda" else (CPU_SPEC, CPU_DECODE)
    decode = decode[-shapes:] if shapes else decode
    out = [AttentionWorkload(spec, "decode", batch=b, context_len=c, query_len=1) for b, c in decode]
    chunks = [(1, 512, 512), (1, 2048, 256)] if device == "cuda" else [(1, 128, 64), (1, 256, 32)]
    out += [AttentionWorkload(spec, "prefill", batch=b, context_len=c, query_len=q) for b, c, q in chunks]
    return out


def _bench(
    w: AttentionWorkload, backends: tuple[str, ...] | None, device: str, timing: TimingOptions, profile: object
) -> dict[tuple[str, str], float]:
    planned = [c for c in plan_candidates(w, profile, backends) if c.runnable]  # type: ignore[arg-type]
    records = measure_attention(w, planned, device=device, profile=profile, timing=timing)  # type: ignore[arg-type]
    return {(r.backend, r.tactic): r.stats.median_us for r in records if r.ok and r.stats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--backends", default=None, help="comma-separated; default: every valid backend")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time-cap", type=float, default=1.0)
    ap.add_argument("--compare", type=int, default=4, help="compare the last N shapes (plus both prefills)")
    ap.add_argument("--shapes", type=int, default=None, help="only the last N decode shapes (and both prefills)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    backends = tuple(args.backends.split(",")) if args.backends else None
    profile = resolve_profile(args.device)
    timing = TimingOptions(time_cap_s=args.time_cap)
    workloads = _workloads(args.device, args.shapes)
    plan = Plan(
        name="tune vs bench", items=[PlanItem(w, 0) for w in workloads], time_cap_s=args.time_cap, backends=backends
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, Store.open(f"sqlite:///{tmp}/tune.db") as store:
        report = Tuner(plan, store, TuneOptions(device=args.device, backends=backends), profile=profile).run()
        stored = {(r.workload_key, r.backend, r.tactic): r for r in store.measurements(run_id=report.run_id)}
    tune_s = time.monotonic() - started
    print(f"tuned in {tune_s:.0f} s: {report.statuses}", flush=True)
    for (_, b, t), rec in sorted(stored.items()):
        if rec.ok and rec.stats:
            print(
                f"  stored {rec.workload['phase']} b{rec.workload['batch']} ctx{rec.workload['context_len']} "
                f"{b}/{t}: {rec.stats.median_us:.1f} us (compile {rec.compile_time_s or 0:.1f} s)",
                flush=True,
            )
    compared = workloads[-(args.compare + 2) :]
    fresh: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(args.rounds):
        for w in compared:
            for (b, t), us in _bench(w, backends, args.device, timing, profile).items():
                fresh.setdefault((w.key(), b, t), []).append(us)
    rows = []
    for w in compared:
        for (key, b, t), values in sorted(fresh.items()):
            rec = stored.get((key, b, t))
            if key != w.key() or rec is None or not rec.ok or rec.stats is None:
                continue
            bench = statistics.median(values)
            rows.append(
                {
                    "workload": w.to_dict(),
                    "backend": b,
                    "tactic": t,
                    "tune_us": rec.stats.median_us,
                    "bench_us": values,
                    "ratio": rec.stats.median_us / bench,
                }
            )
            label = f"{w.phase} b{w.batch} ctx{w.context_len} q{w.query_len}"
            print(
                f"{label:28} {b}/{t:12} tune {rec.stats.median_us:10.1f} us  bench {bench:10.1f} us  "
                f"ratio {rec.stats.median_us / bench:.3f}",
                flush=True,
            )
    ratios = [r["ratio"] for r in rows]
    env = current_environment(profile)
    args.out.write_text(
        json.dumps(
            {
                "provenance": {
                    "script": "benchmarks/tune_vs_bench.py",
                    "argv": sys.argv[1:],
                    "device": profile.describe(),
                    "environment": env.fingerprint(),
                    "date": time.strftime("%Y-%m-%d"),
                },
                "tune_seconds": tune_s,
                "statuses": report.statuses,
                "rows": rows,
                "worst_ratio": max(ratios, key=lambda x: abs(x - 1)) if ratios else None,
            },
            indent=1,
        )
    )
    print(
        f"tune {tune_s:.0f} s, statuses {report.statuses}; worst ratio "
        f"{max(ratios, key=lambda x: abs(x - 1)) if ratios else None}"
    )


if __name__ == "__main__":
    main()

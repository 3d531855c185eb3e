"""Issue 7's evidence: tune, then measure a separate oracle set, and score selection policies by regret.

1. ``--quick``: time `hwtune tune --quick` on the Llama-3.1-8B config (first, on a fresh machine, so JIT counts).
2. Tune the default plan for the same model into train.db (backends FLASHINFER and TRITON_ATTN:auto).
3. Measure >= 30 other workloads (the oracle set) exhaustively with the same candidates into oracle.db.
4. Regret of each policy = latency of its (backend, tactic) / the oracle's best, per oracle workload:
   hwtune (measured selection from train.db + its dispatch table), hwtune per phase, the static priority
   list (hwtune without a store), FlashInfer's own auto choice (decode wrapper default = fa2 on CUDA cores,
   prefill auto = fa3 on SM90: flashinfer/utils.py determine_attention_backend), and the best single fixed
   (backend, tactic) per phase in hindsight.
5. Warm and cold selection latency.

    python benchmarks/regret.py --out DIR [--steps quick,default,oracle,score]   (GPU)
    python benchmarks/regret.py --out DIR --score-only          (re-score stored results, no GPU)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hwtune.core.model_config import attention_spec, load_model_config  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.tuner.plan import Plan, PlanItem, plan_from_model  # noqa: E402

MODEL = Path(__file__).resolve().parents[1] / "tests" / "data" / "models" / "llama-3.1-8b.json"
BACKENDS = ("FLASHINFER", "TRITON_ATTN:auto")
FI_AUTO = {"decode": ("FLASHINFER", "fa2"), "prefill": ("FLASHINFER", "fa3")}


def oracle_plan(spec) -> Plan:  # noqa: ANN001
    """Shapes between and beside the tuning grid's points (none coincides with it)."""
    items = []
    for b in (2, 8, 32, 128):
        for c in (1000, 3000, 12000, 48000):
            if b * c <= 2_000_000:
                items.append(PlanItem(AttentionWorkload(spec, "decode", b, c)))
    for b in (1, 48, 200):
        for c in (700, 6000, 20000):
            items.append(PlanItem(AttentionWorkload(spec, "decode", b, c)))
    for chunk in (256, 1024, 3000):
        for prefix in (0, 6000):
            items.append(PlanItem(AttentionWorkload(spec, "prefill", 1, chunk + prefix, query_len=chunk)))
    return Plan(name="oracle", items=items, time_cap_s=1.0)


def tune(plan: Plan, db: Path, backends: tuple[str, ...] | None) -> dict:
    from hwtune.db.store import Store
    from hwtune.tuner.run import TuneOptions, Tuner

    t0 = time.perf_counter()
    with Store.open(f"sqlite:///{db}") as store:
        report = Tuner(plan, store, TuneOptions(backends=backends, fresh=True, time_cap_s=plan.time_cap_s)).run()
    return {
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "items": report.items_done,
        "records": report.records,
        "statuses": report.statuses,
        "compile_s": report.compile_s,
        "state": report.state,
    }


def scores(ratios: list[float]) -> dict:
    xs = sorted(ratios)
    p95 = xs[min(len(xs) - 1, math.ceil(0.95 * len(xs)) - 1)]
    return {
        "geomean": round(math.exp(sum(math.log(r) for r in xs) / len(xs)), 4),
        "p95": round(p95, 4),
        "worst": round(xs[-1], 4),
        "n": len(xs),
    }


def score(out: Path, spec, device: str = "auto") -> dict:  # noqa: ANN001
    import hwtune
    from hwtune.db.store import Store

    with Store.open(f"sqlite:///{out / 'oracle.db'}", read_only=True, create=False) as store:
        recs = [r for r in store.measurements("attention") if r.ok and r.stats]
    lat: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    shape = {}
    for r in recs:
        lat[r.workload_key][(r.backend, r.tactic)] = r.stats.median_us
        w = r.workload
        shape[r.workload_key] = (w["phase"], w["batch"], w["context_len"])
    sim = device != "auto"  # scoring synthetic stores for a simulated device (tests of this script)
    sel = hwtune.select_attention(
        spec,
        device=device,
        db=f"sqlite:///{out / 'train.db'}",
        max_num_seqs=256,
        max_model_len=131072,
        assume_installed=sim,
    )
    static = hwtune.select_attention(spec, device=device, db=False, assume_installed=sim)
    policies: dict[str, list[float]] = defaultdict(list)
    detail = []
    fixed: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for key, cands in lat.items():
        phase, batch, ctx = shape[key]
        best = min(cands.values())
        for cand, v in cands.items():
            fixed[phase][cand].append(v / best)
        choice = {
            "hwtune": (sel.backend, sel.tactic_for(phase, batch, ctx)),
            "hwtune_per_phase": (
                sel.per_phase.get(phase, sel.backend),
                sel.tactic_for(phase, batch, ctx)
                if sel.per_phase.get(phase, sel.backend) == sel.backend
                else dict(next(r.tactics for r in sel.ranked if r.backend == sel.per_phase[phase]))[phase],
            ),
            "static": (static.backend, static.tactics[phase]),
            "flashinfer_auto": FI_AUTO[phase],
        }
        row = {"phase": phase, "batch": batch, "context": ctx, "best": min(cands, key=cands.get), "best_us": best}
        for name, cand in choice.items():
            v = cands.get(cand)
            ratio = v / best if v is not None else float("inf")
            policies[name].append(ratio)
            row[name] = [*cand, round(ratio, 4)]
        detail.append(row)
    best_fixed = {}
    for phase, by in fixed.items():
        n = sum(1 for k in shape.values() if k[0] == phase)
        complete = {c: rs for c, rs in by.items() if len(rs) == n}
        cand = min(complete, key=lambda c: sum(math.log(r) for r in complete[c]))
        best_fixed[phase] = cand
        policies["best_single_fixed"] += complete[cand]
    return {
        "selection": {
            "backend": sel.backend,
            "tactics": dict(sel.tactics),
            "per_phase": dict(sel.per_phase),
            "ranked": [(r.backend, r.source, r.latency_us) for r in sel.ranked],
            "dispatch": [vars(e) for e in sel.dispatch],
            "notes": list(sel.notes),
        },
        "best_single_fixed": {p: list(c) for p, c in best_fixed.items()},
        "policies": {name: scores(rs) for name, rs in policies.items()},
        "workloads": detail,
    }


COLD = """
import time, sys
t0 = time.perf_counter()
import hwtune
sel = hwtune.select_attention(hwtune.AttentionSpec(32, 8, 128), device="auto", db=sys.argv[1])
t1 = time.perf_counter()
print(f"{(t1 - t0) * 1e3:.2f} {'torch' in sys.modules} {sel.backend} {sel.ranked[0].source}")
"""


def latencies(out: Path, spec) -> dict:  # noqa: ANN001
    import hwtune

    db = f"sqlite:///{out / 'train.db'}"
    hwtune.select_attention(spec, device="auto", db=db)
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        hwtune.select_attention(spec, device="auto", db=db)
    warm_us = (time.perf_counter() - t0) / n * 1e6
    sel = hwtune.select_attention(spec, device="auto", db=db)
    t0 = time.perf_counter()
    for i in range(n):
        sel.tactic_for("decode", 1 + i % 256, 1000 + i)
    lookup_us = (time.perf_counter() - t0) / n * 1e6
    cold = []
    for _ in range(7):
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-c", COLD, db], capture_output=True, text=True, check=True)
        wall = (time.perf_counter() - t0) * 1e3
        in_proc, torch_loaded, backend, source = res.stdout.split()
        cold.append(
            {
                "in_process_ms": float(in_proc),
                "process_wall_ms": round(wall, 1),
                "torch_imported": torch_loaded == "True",
                "backend": backend,
                "source": source,
            }
        )
    return {
        "warm_select_us": round(warm_us, 2),
        "tactic_for_us": round(lookup_us, 3),
        "cold": cold,
        "cold_in_process_ms_median": statistics.median(c["in_process_ms"] for c in cold),
        "cold_process_wall_ms_median": statistics.median(c["process_wall_ms"] for c in cold),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--steps",
        default="quick,default,oracle,score",
        help="comma-separated subset of quick, default, oracle, score (results accumulate in regret.json)",
    )
    p.add_argument("--score-only", action="store_true")
    p.add_argument("--device", default="auto", help="score for a simulated device (synthetic stores)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    spec = attention_spec(load_model_config(MODEL))
    result_file = args.out / "regret.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    result["date"] = time.strftime("%Y-%m-%d")
    steps = set(args.steps.split(","))
    if not args.score_only:
        from hwtune.core.detect import detect

        profile = detect()
        result["device"] = profile.describe()
        if "quick" in steps:
            quick = plan_from_model(MODEL, kinds=["attention"], quick=True, device=profile)
            result["quick_tune"] = tune(quick, args.out / "quick.db", None)
            print("quick", result["quick_tune"], flush=True)
        if "default" in steps:
            plan = plan_from_model(MODEL, kinds=["attention"], device=profile)
            result["default_tune"] = {
                **tune(plan, args.out / "train.db", BACKENDS),
                "workloads": len(plan.items),
                "backends": list(BACKENDS),
            }
            print("default", result["default_tune"], flush=True)
        if "oracle" in steps:
            result["oracle_tune"] = tune(oracle_plan(spec), args.out / "oracle.db", BACKENDS)
            print("oracle", result["oracle_tune"], flush=True)
        result_file.write_text(json.dumps(result, indent=2))
    if "score" not in steps:
        return 0
    result.update(score(args.out, spec, args.device))
    if args.device == "auto":
        result["latency"] = latencies(args.out, spec)
    result_file.write_text(json.dumps(result, indent=2))
    for name, s in result["policies"].items():
        print(f"{name:20s} geomean {s['geomean']:.4f}  p95 {s['p95']:.4f}  worst {s['worst']:.4f}  n {s['n']}")
    print("selection", result["selection"]["backend"], result["selection"]["per_phase"])
    lat = result.get("latency")
    if lat:
        print(
            f"warm select {lat['warm_select_us']} us, tactic_for {lat['tactic_for_us']} us, cold in-process "
            f"{lat['cold_in_process_ms_median']} ms, cold process wall {lat['cold_process_wall_ms_median']} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

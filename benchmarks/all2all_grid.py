"""GPU grid for docs/all2all.md: every all2all candidate over EP size, tokens per rank, hidden size, top-k,
payload dtype and routing; achieved bandwidth against the measured all-to-all peak; crossover tables.

Each (EP, hidden, top-k, dtype) spec is one trial per backend: a fresh process group that sweeps the token
counts and routings (correctness first, then timing; see hwtune/probes/all2all). Results are appended to
``--out`` (JSON) after every trial, and a run resumes where the file stops, so the grid can be run in
slices shorter than a machine's per-command limit (``--max-minutes``).

    python benchmarks/all2all_grid.py --ep 2 --preset quick --out results/all2all_h200.json --max-minutes 9
    python benchmarks/all2all_grid.py --out results/all2all_h200.json --report      # tables only, no GPU

Candidates the catalogue rejects (FlashInfer one-sided with bf16/fp8, say) run anyway by default
(``--no-explore`` to skip them): their real behaviour is what this grid is for, and correctness is still
checked before anything is timed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hwtune.core.environment import current_environment
from hwtune.core.types import All2AllSpec, All2AllWorkload
from hwtune.probes.all2all.measure import device_profile, measure_all2all_sweep, measure_peak_bandwidth

BACKENDS = [
    "naive",
    "allgather_reducescatter",
    "nccl_alltoallv",
    "flashinfer_nvlink_one_sided",
    "flashinfer_nvlink_two_sided",
    "deepep_high_throughput",
    "deepep_low_latency",
    "pplx",
]
#: nvfp4 is run only where a backend is known to take it (the rest move bytes the same way as fp8).
NVFP4_BACKENDS = {"flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "nccl_alltoallv"}
PRESETS: dict[str, dict[str, list[Any]]] = {
    "quick": {
        "tokens": [1, 16, 128, 1024, 8192],
        "hidden": [2048, 7168],
        "topk": [8],
        "quant": ["bf16", "fp8", "nvfp4"],
        "routing": ["uniform", "skewed"],
    },
    "full": {
        "tokens": [1, 4, 16, 64, 256, 1024, 4096, 8192],
        "hidden": [2048, 4096, 7168],
        "topk": [2, 8],
        "quant": ["bf16", "fp8", "nvfp4"],
        "routing": ["uniform", "skewed"],
    },
}


def _load(path: Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"records": [], "peak": {}}


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _done(data: dict[str, Any], retry_failed: bool) -> set[tuple[str, str]]:
    skip = {"timeout", "crashed", "error"} if retry_failed else set()
    return {(r["backend"], r["workload_key"]) for r in data["records"] if r["status"] not in skip}


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    data = _load(out)
    profile = device_profile(args.device)
    env = current_environment(profile)
    data.setdefault("device", profile.describe())
    data.setdefault("environment", env.fingerprint())
    data.setdefault("started", dt.datetime.now(dt.timezone.utc).isoformat())
    preset = PRESETS[args.preset]
    grid = {k: getattr(args, k) or v for k, v in preset.items()}
    stop_at = time.monotonic() + args.max_minutes * 60 if args.max_minutes else None
    for ep in args.ep:
        key = str(ep)
        if key not in data["peak"]:
            res = measure_peak_bandwidth(ep, device=args.device, nbytes=args.peak_bytes, timeout_s=args.timeout)
            data["peak"][key] = {
                "status": res.status,
                "message": res.message,
                **res.extra,
                "median_us": (res.stats or {}).get("median_us"),
            }
            _save(out, data)
            print(f"EP {ep}: all-to-all peak {data['peak'][key].get('peak_gbps')} GB/s ({res.status} {res.message})")
        peak = data["peak"][key].get("peak_gbps")
        for hidden in grid["hidden"]:
            for topk in grid["topk"]:
                for quant in grid["quant"]:
                    spec = All2AllSpec(
                        ep_size=ep,
                        num_experts=args.num_experts,
                        topk=topk,
                        hidden_size=hidden,
                        quant_dtype=quant,
                    )
                    wls = [All2AllWorkload(spec, t, r) for r in grid["routing"] for t in grid["tokens"]]
                    for backend in args.backends:
                        if quant == "nvfp4" and backend not in NVFP4_BACKENDS:
                            continue
                        done = _done(data, args.retry_failed)
                        todo = [w for w in wls if (backend, w.key()) not in done]
                        if not todo:
                            continue
                        if stop_at is not None and time.monotonic() > stop_at:
                            print(f"time budget spent; run the same command again to continue ({out})")
                            return
                        t0 = time.monotonic()
                        recs = measure_all2all_sweep(
                            todo,
                            [backend],
                            device=args.device,
                            timeout_s=args.timeout,
                            time_cap_s=args.time_cap,
                            peak_gbps=peak,
                            explore=args.explore,
                            min_iters=10,
                            max_iters=args.max_iters,
                            environment=env,
                        )
                        done_keys = {(r.backend, r.workload_key) for r in recs}
                        data["records"] = [
                            r for r in data["records"] if (r["backend"], r["workload_key"]) not in done_keys
                        ]
                        data["records"] += [r.to_dict() for r in recs]
                        _save(out, data)
                        statuses = ", ".join(sorted({r.status for r in recs}))
                        print(
                            f"EP {ep} H {hidden} k {topk} {quant} {backend}: {statuses} "
                            f"({time.monotonic() - t0:.0f} s)",
                            flush=True,
                        )
    print(f"grid complete: {out}")


def report(path: Path) -> None:
    """Markdown tables: the fastest correct backend per workload, crossovers, and reasons for the rest."""
    data = _load(path)
    print(f"device: {data.get('device')}; software: {json.dumps(data.get('environment', {}).get('stack', {}))}")
    for ep, p in sorted(data.get("peak", {}).items()):
        print(f"- EP {ep}: measured all-to-all peak {p.get('peak_gbps', 0) or 0:.1f} GB/s per rank ({p.get('status')})")
    groups: dict[tuple, dict[int, list[dict]]] = {}
    reasons: dict[tuple[str, str], set[str]] = {}
    for r in data["records"]:
        w, s = r["workload"], r["workload"]["spec"]
        g = (s["ep_size"], s["hidden_size"], s["topk"], s["quant_dtype"], w["routing"])
        groups.setdefault(g, {}).setdefault(w["tokens_per_rank"], []).append(r)
        if r["status"] != "ok":
            reasons.setdefault((r["backend"], r["status"]), set()).add(r["message"].splitlines()[0][:300])
    for g in sorted(groups):
        ep, hidden, topk, quant, routing = g
        print(f"\n#### EP {ep}, hidden {hidden}, top-k {topk}, {quant}, {routing} routing\n")
        print("| tokens/rank | fastest (median us) | runner-up (x slower) | achieved GB/s | % of peak |")
        print("|---:|---|---|---:|---:|")
        previous, crossings = None, []
        for t in sorted(groups[g]):
            ok = sorted((r for r in groups[g][t] if r["status"] == "ok"), key=lambda r: r["stats"]["median_us"])
            if not ok:
                print(f"| {t} | none correct | | | |")
                continue
            best = ok[0]
            ratio = (
                f"{ok[1]['backend']} ({ok[1]['stats']['median_us'] / best['stats']['median_us']:.2f}x)"
                if len(ok) > 1
                else ""
            )
            gbps, frac = best["extra"].get("achieved_gbps"), best["extra"].get("fraction_of_peak")
            print(
                f"| {t} | {best['backend']} ({best['stats']['median_us']:.1f}) | {ratio} | "
                f"{gbps or 0:.3g} | {100 * frac if frac else 0:.0f} |"
            )
            if previous and previous != best["backend"]:
                crossings.append(f"{previous} -> {best['backend']} at {t} tokens/rank")
            previous = best["backend"]
        print("\ncrossovers: " + ("; ".join(crossings) if crossings else "none (one backend fastest throughout)"))
    if reasons:
        print("\n#### Not measured, or not correct\n")
        for (backend, status), msgs in sorted(reasons.items()):
            for m in sorted(msgs):
                print(f"- {backend} ({status}): {m}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON results file (appended to; a rerun resumes)")
    ap.add_argument("--report", action="store_true", help="only print the tables from --out")
    ap.add_argument("--ep", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a gloo smoke test of the script")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    ap.add_argument("--tokens", type=int, nargs="+")
    ap.add_argument("--hidden", type=int, nargs="+")
    ap.add_argument("--topk", type=int, nargs="+")
    ap.add_argument("--quant", nargs="+", choices=["bf16", "fp8", "nvfp4"])
    ap.add_argument("--routing", nargs="+", choices=["uniform", "skewed"])
    ap.add_argument("--backends", nargs="+", default=BACKENDS)
    ap.add_argument("--num-experts", type=int, default=256)
    ap.add_argument("--time-cap", type=float, default=0.3, help="seconds of timed iterations per workload")
    ap.add_argument("--max-iters", type=int, default=300)
    ap.add_argument("--timeout", type=float, default=300, help="per-workload limit (the first includes JIT builds)")
    ap.add_argument("--peak-bytes", type=int, default=512 * 1024 * 1024)
    ap.add_argument("--max-minutes", type=float, default=0, help="stop starting trials after this long (0: no limit)")
    ap.add_argument("--retry-failed", action="store_true", help="re-run workloads that timed out, crashed or errored")
    ap.add_argument(
        "--no-explore",
        dest="explore",
        action="store_false",
        help="skip candidates the catalogue rejects instead of running them",
    )
    args = ap.parse_args()
    if args.report:
        report(Path(args.out))
    else:
        run(args)
        report(Path(args.out))


if __name__ == "__main__":
    main()

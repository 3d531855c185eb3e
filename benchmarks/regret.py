"""Selection's evidence (issues 7 and 17): tune, then measure a separate oracle set, and score policies by regret.

Per model (``--model CONFIG[:TP]``, repeatable; default Llama-3.1-8B at TP 1), into ``OUT/<model>-tp<TP>/``:
1. ``quick``: time `hwtune tune --quick` on the model (first, on a fresh machine, so JIT counts).
2. ``default``: tune the model's default plan into train.db (``--backends``, default FLASHINFER and
   HWTUNE_TRITON_ATTN, for MLA FLASHINFER_FA_MLA and HWTUNE_TRITON_MLA, each with every tactic as the product's
   default tune runs them; ``all`` for every valid backend)
   in one KV layout (``--kv-layout``, default NHD) and one KV-cache dtype (``--kv-cache-dtype``, default auto: the
   model's; ``fp8`` scores an fp8 cache, into ``OUT/<model>-tp<TP>-kvfp8_e4m3/``) and one KV block size
   (``--block-size``, default the spec's 16; 64 measures FLASHMLA, into ``OUT/<model>-tp<TP>-bs64/``).
3. ``oracle``: measure >= 30 other workloads (decode batch x context, prefill chunk x cached prefix, between
   and beyond the plan's points) exhaustively with the same candidates into oracle.db. For a model of windowed and
   full-attention layers (gpt-oss, Gemma-2/3: ``layer_kinds``) every shape is measured for both kinds and a
   candidate's latency there is its layer-weighted sum, as one backend serves every layer; selection is asked with
   the layer counts. An oracle of one kind (stores before 2026-11-27) or ``--windowed-only`` scores the windowed spec.
4. Regret of each policy = latency of its (backend, tactic) / the oracle's best, per oracle workload:
   hwtune (measured selection from train.db + its dispatch table), hwtune per phase, the static priority
   list (hwtune without a store), FlashInfer's own auto choice (decode wrapper default = fa2 on CUDA cores,
   prefill auto = fa3 on SM90: flashinfer/utils.py determine_attention_backend), and the best single fixed
   (backend, tactic) per phase in hindsight. A policy whose pick the oracle did not measure scores inf there. Scored
   off the measuring machine (``--device``, packages assumed installed) the static list is taken from its first
   backend the oracle measured (``static_measured``: what the machine's own probe would have left it; until
   2026-11-28 it took FLASH_ATTN, which most runs did not have, and scored inf).
5. Warm and cold selection latency.

    python benchmarks/regret.py --out DIR [--model CONFIG[:TP] ...] [--steps quick,default,oracle,score]  (GPU)
    python benchmarks/regret.py --out DIR [--model ...] --score-only     (re-score stored results, no GPU)
"""

from __future__ import annotations

import argparse
import dataclasses
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
from hwtune.core.types import AttentionWorkload, normalize_kv_cache_dtype  # noqa: E402
from hwtune.tuner.plan import Plan, PlanItem  # noqa: E402
from hwtune.tuner.plan_model import plan_from_model  # noqa: E402

MODEL = Path(__file__).resolve().parents[1] / "tests" / "data" / "models" / "llama-3.1-8b.json"
#: The default backends, every tactic of each (the Triton kernel's ``tuned`` search included), as ``hwtune tune``
#: runs them; stores before 2026-11-28 were tuned with ``HWTUNE_TRITON_ATTN:auto``.
BACKENDS = ("FLASHINFER", "HWTUNE_TRITON_ATTN")
#: MLA models (--backends default): FlashInfer's MLA wrapper and hwtune's Triton MLA kernel.
MLA_BACKENDS = ("FLASHINFER_FA_MLA", "HWTUNE_TRITON_MLA")
FI_AUTO = {"decode": ("FLASHINFER", "fa2"), "prefill": ("FLASHINFER", "fa3")}
#: FlashInfer's MLA wrapper with backend="auto" takes fa3 on SM 9.0 (flashinfer/utils.py determine_mla_backend).
FI_AUTO_MLA = {"decode": ("FLASHINFER_FA_MLA", "fa3"), "prefill": ("FLASHINFER_FA_MLA", "fa3")}


def _within(values: tuple[int, ...], limit: int) -> list[int]:
    """The values up to the engine's longest context; where fewer than three remain, two more near the limit."""
    kept = [v for v in values if v <= limit]
    return kept if len(kept) >= 3 else sorted({*kept, round(0.6 * limit), round(0.95 * limit)})


def oracle_plan(spec, time_cap_s: float = 1.0, max_model_len: int = 131072) -> Plan:  # noqa: ANN001
    """Shapes between and beside the tuning grid's points (none coincides with it), up to the model's longest
    context: decode batch x context, prefill chunk x cached prefix; shapes of more than 2M cached tokens are left
    out."""
    items = []
    for b in (1, 2, 8, 32, 48, 128, 200, 400):
        for c in _within((700, 3000, 12000, 20000, 48000), max_model_len):
            if b * c <= 2_000_000:
                items.append(PlanItem(AttentionWorkload(spec, "decode", b, c, query_len=spec.query_len_decode)))
    for chunk in [c for c in (96, 384, 1536, 3000, 6000) if 2 * c <= max_model_len]:
        for prefix in _within((0, 1500, 6000, 30000), max_model_len - chunk):
            items.append(PlanItem(AttentionWorkload(spec, "prefill", 1, chunk + prefix, query_len=chunk)))
    return Plan(name="oracle", items=items, time_cap_s=time_cap_s)


def tune(plan: Plan, db: Path, backends: tuple[str, ...] | None, bisect: bool = True) -> dict:
    from hwtune.db.store import Store
    from hwtune.tuner.run import TuneOptions, Tuner

    t0 = time.perf_counter()
    with Store.open(f"sqlite:///{db}") as store:
        opts = TuneOptions(backends=backends, fresh=True, time_cap_s=plan.time_cap_s, bisect=bisect)
        report = Tuner(plan, store, opts).run()
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


class _StoredEnvironment:
    """The environment a store's records were measured in, standing in for this machine's (``--as-stored``)."""

    def __init__(self, fingerprint: dict, digest: str) -> None:
        self._fingerprint, self._hash = fingerprint, digest

    def fingerprint(self) -> dict:
        return self._fingerprint

    def hash(self) -> str:
        return self._hash


def as_stored(db: Path) -> None:
    """Score on any machine as the one that measured ``db``: selection reads this process's environment through
    ``hwtune.core.environment.current_environment``, which is replaced by the store's (one environment only)."""
    import hwtune.core.environment as environment
    from hwtune.db.store import Store

    with Store.open(f"sqlite:///{db}", read_only=True, create=False) as store:
        envs = {
            (r.environment_hash, json.dumps(r.environment, sort_keys=True)) for r in store.measurements("attention")
        }
    if len(envs) != 1:
        raise SystemExit(f"{db} holds {len(envs)} environments; --as-stored needs exactly one")
    digest, fingerprint = next(iter(envs))
    environment.current_environment = lambda device: _StoredEnvironment(json.loads(fingerprint), digest)


def layer_kinds(info, spec) -> list | None:  # noqa: ANN001
    """[(windowed spec, layers), (full-attention spec, layers)] for a model that mixes the two (the tuner's own test,
    ``plan.mixed_layer_windows``), else None."""
    from hwtune.tuner.plan_model import mixed_layer_windows

    if not (mixed_layer_windows(info, spec) and info.num_layers):
        return None
    full = dataclasses.replace(spec, sliding_window=None)
    return [(spec, info.num_layers - info.full_attention_layers), (full, info.full_attention_layers)]


def oracle_latencies(out: Path, spec, kinds: list | None) -> tuple[dict, dict]:  # noqa: ANN001
    """Per oracle workload, each (backend, tactic)'s latency and the shape (phase, batch, context, query length):
    the workloads of ``spec``'s kind of layer; with ``kinds`` (``layer_kinds``) a shape measured for every kind, a
    candidate's latency being its layer-weighted sum over them (one backend and tactic for every layer), so that
    regret is over the whole model."""
    from hwtune.db.store import Store

    with Store.open(f"sqlite:///{out / 'oracle.db'}", read_only=True, create=False) as store:
        recs = [r for r in store.measurements("attention") if r.ok and r.stats]
    by: dict[tuple, dict] = defaultdict(lambda: defaultdict(dict))  # shape -> window -> candidate -> us
    keys: dict[tuple, str] = {}
    for r in recs:
        w = r.workload
        at = (w["phase"], w["batch"], w["context_len"], w.get("query_len", 1))
        by[at][w["spec"].get("sliding_window")][(r.backend, r.tactic)] = r.stats.median_us
        if w["spec"].get("sliding_window") == spec.sliding_window:
            keys[at] = r.workload_key
    if not kinds:
        mine = {at: ws[spec.sliding_window] for at, ws in by.items() if spec.sliding_window in ws}
        return {keys[at]: dict(c) for at, c in mine.items()}, {keys[at]: at for at in mine}
    weight = {s.sliding_window: n for s, n in kinds}
    lat, shape = {}, {}
    for at, ws in by.items():
        if set(ws) != set(weight):
            continue
        both = set.intersection(*(set(ws[win]) for win in weight))
        lat[str(at)] = {c: sum(n * ws[win][c] for win, n in weight.items()) for c in both}
        shape[str(at)] = at
    return lat, shape


def oracle_windows(out: Path) -> set:
    """The sliding windows the oracle's records were measured with (None: full attention)."""
    from hwtune.db.store import Store

    with Store.open(f"sqlite:///{out / 'oracle.db'}", read_only=True, create=False) as store:
        return {r.workload["spec"].get("sliding_window") for r in store.measurements("attention")}


def static_measured(static, measured: set[str]):  # noqa: ANN001, ANN201 - a Selection in, it or a RankedBackend out
    """The static list's first backend the oracle measured. Scored off the measuring machine (``--device``) every
    package counts as installed, so the list's head can be one the run did not have (FLASH_ATTN on SM 9.0, before
    vLLM's kernels were carried); on that machine the probe found it missing and the list went on to the next, which
    this reproduces from the oracle's backends."""
    return next((r for r in static.ranked if r.backend in measured), static)


def score(out: Path, spec, device: str = "auto", max_model_len: int = 131072, kinds=None) -> dict:  # noqa: ANN001
    import hwtune

    lat, shape = oracle_latencies(out, spec, kinds)
    sim = device != "auto"  # scoring synthetic stores for a simulated device (tests of this script)
    layers = {"full_attention_layers": kinds[1][1], "num_layers": kinds[0][1] + kinds[1][1]} if kinds else {}
    sel = hwtune.select_attention(
        spec,
        device=device,
        db=f"sqlite:///{out / 'train.db'}",
        max_num_seqs=256,
        max_model_len=max_model_len,  # the mix of the engine serving this model
        assume_installed=sim,
        engine=None,  # hwtune's own catalogue: every measured kernel, its own Triton kernel included
        **layers,
    )
    static = hwtune.select_attention(spec, device=device, db=False, assume_installed=sim, engine=None)
    static_pick = static_measured(static, {b for cands in lat.values() for b, _ in cands}) if sim else static
    policies: dict[str, list[float]] = defaultdict(list)
    detail = []
    fixed: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for key, cands in lat.items():
        phase, batch, ctx, q = shape[key]
        best = min(cands.values())
        for cand, v in cands.items():
            fixed[phase][cand].append(v / best)
        choice = {
            "hwtune": (sel.backend, sel.tactic_for(phase, batch, ctx, q)),
            "hwtune_per_phase": (
                sel.per_phase.get(phase, sel.backend),
                sel.tactic_for(phase, batch, ctx, q, backend=sel.per_phase.get(phase, sel.backend)),
            ),
            "static": (static_pick.backend, static_pick.tactics[phase]),
            "flashinfer_auto": (FI_AUTO_MLA if spec.use_mla else FI_AUTO)[phase],
        }
        row = {
            "phase": phase,
            "batch": batch,
            "context": ctx,
            "query_len": q,
            "best": min(cands, key=cands.get),
            "best_us": best,
        }
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


def _models(args: argparse.Namespace) -> list[tuple[Path, int, Path]]:
    """(config, tp, output folder) per ``--model CONFIG[:TP]``."""
    out = []
    for entry in args.model or [str(MODEL)]:
        path, _, tp = entry.partition(":")
        cfg = Path(path)
        kv = "" if args.kv_cache_dtype == "auto" else f"-kv{normalize_kv_cache_dtype(args.kv_cache_dtype)}"
        bs = f"-bs{args.block_size}" if args.block_size else ""
        out.append((cfg, int(tp or 1), args.out / f"{cfg.stem}-tp{tp or 1}{kv}{bs}"))
    return out


class Interrupted(Exception):
    """A tune step was interrupted (SIGINT, as from ``timeout -s INT``): its records are kept, no later step runs."""


def _check(step: str, summary: dict) -> None:
    if summary.get("state") == "interrupted":
        raise Interrupted(f"{step} tune interrupted after {summary['items']} items; later steps not run")


def measure_model(cfg: Path, tp: int, out: Path, steps: set[str], args: argparse.Namespace, result: dict) -> None:
    """Steps quick, default and oracle for one model into ``out`` (GPU); raises Interrupted after an interrupted
    step, so that a time limit meant for one step never runs into the next."""
    from hwtune.core.detect import detect

    profile = detect()
    mla = attention_spec(load_model_config(cfg), tp).use_mla
    chosen = args.backends or ",".join(MLA_BACKENDS if mla else BACKENDS)
    backends = None if chosen == "all" else tuple(chosen.split(","))
    overrides = _overrides(args)
    result["device"] = profile.describe()
    if "quick" in steps:
        quick = plan_from_model(cfg, tp=tp, kinds=["attention"], quick=True, device=profile)
        result["quick_tune"] = tune(quick, out / "quick.db", None, bisect=False)
        print("quick", result["quick_tune"], flush=True)
        _check("quick", result["quick_tune"])
    if "default" in steps:
        plan = plan_from_model(cfg, tp=tp, kinds=["attention"], device=profile, attention_overrides=overrides)
        from hwtune.tuner import schedule

        result["default_tune"] = {
            **tune(plan, out / "train.db", backends),
            "workloads": len(plan.items),
            "backends": list(backends or ["all"]),
            "bisect_factor": schedule.BISECT_FACTOR,
            **({"bisect_tactics": True} if schedule.TACTIC_CROSSOVERS else {}),
        }
        print("default", result["default_tune"], flush=True)
        _check("default", result["default_tune"])
    if "oracle" in steps:
        info = load_model_config(cfg)
        spec = attention_spec(info, tp, **overrides)
        mml = info.max_position_embeddings or 131072
        plan = oracle_plan(spec, args.oracle_time_cap, mml)
        kinds = layer_kinds(info, spec)
        if kinds:  # a model of windowed and full-attention layers: the oracle measures both kinds at each shape, a
            # backend only where it serves both (the others' latencies over every layer do not exist), as tune does
            full = oracle_plan(kinds[1][0], args.oracle_time_cap, mml)
            windows = (spec.sliding_window, None)
            plan = Plan(name="oracle", items=plan.items + full.items, time_cap_s=plan.time_cap_s, layer_windows=windows)
        result["oracle_tune"] = tune(plan, out / "oracle.db", backends, bisect=False)  # a fixed set
        print("oracle", result["oracle_tune"], flush=True)
        _check("oracle", result["oracle_tune"])


def _overrides(args: argparse.Namespace) -> dict:
    """The spec fields every step tunes, measures and scores with (the block size only where one is given)."""
    out = {"kv_layout": args.kv_layout, "kv_cache_dtype": args.kv_cache_dtype}
    return {**out, "block_size": args.block_size} if args.block_size else out


def report(cfg: Path, tp: int, result: dict) -> None:
    """One model's policies, printed."""
    print(f"== {cfg.stem} tp{tp}: {result['selection']['backend']} per phase {result['selection']['per_phase']}")
    for name, s in result["policies"].items():
        print(f"{name:20s} geomean {s['geomean']:.4f}  p95 {s['p95']:.4f}  worst {s['worst']:.4f}  n {s['n']}")
    lat = result.get("latency")
    if lat:
        print(
            f"warm select {lat['warm_select_us']} us, tactic_for {lat['tactic_for_us']} us, cold in-process "
            f"{lat['cold_in_process_ms_median']} ms, cold process wall {lat['cold_process_wall_ms_median']} ms"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", action="append", help="config.json[:TP]; repeat for several models")
    p.add_argument(
        "--backends",
        default=None,
        help="comma-separated, or 'all' (default: FlashInfer and hwtune's Triton kernel, every tactic)",
    )
    p.add_argument("--kv-layout", default="NHD", help="the layout tuned and scored (NHD, HND or auto)")
    p.add_argument("--kv-cache-dtype", default="auto", help="the KV-cache dtype tuned and scored (auto, fp8, ...)")
    p.add_argument(
        "--block-size",
        type=int,
        default=None,
        help="the KV block size tuned, measured and scored (default: the model spec's, 16); outputs go to "
        "<model>-tp<TP>[-kv<dtype>]-bs<size>/",
    )
    p.add_argument("--oracle-time-cap", type=float, default=1.0, help="seconds of timing per oracle candidate")
    p.add_argument(
        "--steps",
        default="quick,default,oracle,score",
        help="comma-separated subset of quick, default, oracle, score, latency (results accumulate in regret.json)",
    )
    p.add_argument("--score-only", action="store_true")
    p.add_argument(
        "--windowed-only",
        action="store_true",
        help="score a model of windowed and full-attention layers by its windowed spec alone (as before 2026-11-27)",
    )
    p.add_argument(
        "--bisect-factor",
        type=float,
        default=None,
        help="tune with this tuner.schedule.BISECT_FACTOR instead of its default (an experiment; kept in regret.json)",
    )
    p.add_argument(
        "--bisect-tactics",
        action="store_true",
        help="tune with tuner.schedule.TACTIC_CROSSOVERS on: also bisect where a winning backend's own tactics cross "
        "(an experiment; kept in regret.json)",
    )
    p.add_argument("--device", default="auto", help="score for a simulated device (synthetic stores)")
    p.add_argument(
        "--as-stored", action="store_true", help="with --score-only: score as the machine that measured train.db"
    )
    args = p.parse_args()
    steps = set(args.steps.split(","))
    if args.bisect_factor:
        from hwtune.tuner import schedule

        schedule.BISECT_FACTOR = args.bisect_factor
    if args.bisect_tactics:
        from hwtune.tuner import schedule

        schedule.TACTIC_CROSSOVERS = True
    for cfg, tp, out in _models(args):
        out.mkdir(parents=True, exist_ok=True)
        result_file = out / "regret.json"
        result = json.loads(result_file.read_text()) if result_file.exists() else {}
        result.update(
            date=time.strftime("%Y-%m-%d"),
            model=cfg.name,
            tp=tp,
            kv_layout=args.kv_layout,
            kv_cache_dtype=args.kv_cache_dtype,
            **({"block_size": args.block_size} if args.block_size else {}),
        )
        if not args.score_only:
            try:
                measure_model(cfg, tp, out, steps, args, result)
            except Interrupted as exc:
                print(exc, flush=True)
                return 130
            finally:
                result_file.write_text(json.dumps(result, indent=2))
        if "score" not in steps and not args.score_only:
            continue
        info = load_model_config(cfg)
        spec = attention_spec(info, tp, **_overrides(args))
        if args.as_stored:
            as_stored(out / "train.db")
        kinds = None if args.windowed_only else layer_kinds(info, spec)
        if kinds and oracle_windows(out) != {s.sliding_window for s, _ in kinds}:
            print("the oracle measured one layer kind only: scored by the windowed spec (as --windowed-only)")
            kinds = None
        result["layer_kinds"] = [[s.sliding_window, n] for s, n in kinds] if kinds else None
        result.update(score(out, spec, args.device, info.max_position_embeddings or 131072, kinds))
        if args.device == "auto" and "latency" in steps:
            result["latency"] = latencies(out, spec)
        result_file.write_text(json.dumps(result, indent=2))
        report(cfg, tp, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where HWTUNE_TRITON_ATTN's prefill loses to FlashInfer's fa2 on tensor cores: a short chunk on a long cached prefix
(issue 17: Llama-3.1-8B with an fp8 cache, 96 tokens on a 6000-token prefix, 1.28x; bf16 models 1.3-2.9x there).

For each model and shape it prints one JSON line per Triton config of a sweep (query tile x KV tile x warps/stages x
KV splits; ``graph_us``, the median time of one call replayed from a CUDA graph without an L2 flush, so configs compare
at their floor), then the fastest config's and auto's GPU kernels (main kernel and split merge apart, torch.profiler),
then the probe's own jobs (the gate against the float32 reference, then its timing) for FlashInfer fa2-tc and the
Triton tactics, as reference points.

    python benchmarks/experiments/short_chunk_prefill.py [--no-sweep] [--skip BACKEND ...] [--models M:TP:KV ...]
        [--shapes CHUNK:CONTEXT ...] [--tiles ROWS:POSITIONS ...] [--warps-stages W:S ...] [--splits N ...]
        [--decode] [--out FILE.jsonl]

(needs a CUDA GPU; ``--no-sweep``: the probe's jobs only; ``--skip``: leave those reference backends out; ``--models``,
``--shapes``, ``--tiles``, ``--warps-stages``, ``--splits``: replace the lists below. Splits of one KV tile are swept
too. ``--decode``: decode workloads instead, ``--shapes`` read as BATCH:CONTEXT, a result line's ``batch`` and
``phase``, FlashInfer's reference point its ``xqa`` tactic.)
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from mla_decode_gap import graph_us, kernels  # noqa: E402
from probe_jobs import ROOT, emit, options, outcome, probe_job  # noqa: E402

from hwtune.core.model_config import attention_spec, load_model_config  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.kernels.configs import TritonAttnConfig  # noqa: E402
from hwtune.probes.attention.candidates.triton_attn import TritonAttnRunner  # noqa: E402
from hwtune.probes.attention.problem import build_problem  # noqa: E402

MODELS = [("llama-3.1-8b.json", 1, "fp8"), ("llama-3.1-8b.json", 1, "auto"), ("llama-3.3-70b-instruct.json", 8, "auto")]
SHAPES = [(96, 6096), (96, 1596), (96, 30096), (384, 6384)]  # (chunk, context including the chunk)
TILES = [(64, 64), (64, 128), (128, 64), (128, 128)]  # (query rows, KV positions)
WARPS_STAGES = [(4, 2), (8, 2), (8, 3)]
SPLITS = [1, 2, 4, 6, 8, 12, 16, 24, 32, 48]
REFERENCES = [("FLASHINFER", "fa2-tc"), ("HWTUNE_TRITON_ATTN", "auto"), ("HWTUNE_TRITON_ATTN", "tuned")]
DECODE_REFERENCES = [("FLASHINFER", "xqa"), ("HWTUNE_TRITON_ATTN", "auto"), ("HWTUNE_TRITON_ATTN", "tuned")]


def sweep(
    named: dict,
    workload: AttentionWorkload,
    out,  # noqa: ANN001
    tiles: list,
    warps_stages: list,
    splits_list: list,
) -> None:
    runner = TritonAttnRunner("auto")
    problem = build_problem(workload, "cuda", seed=0)
    runner.prepare(problem)
    auto = runner.config
    runner.run()
    torch.cuda.synchronize()
    want = runner.out.float().clone()
    best: tuple[float, TritonAttnConfig] | None = None
    for (bm, bn), (warps, stages), splits in itertools.product(tiles, warps_stages, splits_list):
        cfg = TritonAttnConfig(block_n=bn, num_splits=splits, num_warps=warps, num_stages=stages, block_m=bm)
        if splits > max(1, workload.context_len // bn):
            continue
        row = {**named, "config": cfg.name()}
        try:
            runner.config, runner.workspace = cfg, runner._workspace(problem, [cfg])
            runner.out.fill_(float("nan"))
            runner.run()
            torch.cuda.synchronize()
            row["rel_l2_vs_auto"] = float((runner.out.float() - want).norm() / want.norm())
            row["graph_us"] = round(graph_us(runner.run), 2)
            if best is None or row["graph_us"] < best[0]:
                best = (row["graph_us"], cfg)
        except Exception as e:  # noqa: BLE001 - one failing config must not lose the rest
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        emit(row, out)
    for label, cfg in (("auto", auto), ("fastest", best[1] if best else None)):
        if cfg is None:
            continue
        runner.config, runner.workspace = cfg, runner._workspace(problem, [cfg])
        emit({**named, "kernels_of": label, "config": cfg.name(), "graph_us": round(graph_us(runner.run), 2),
              "kernels": kernels(runner.run)}, out)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--skip", nargs="*", default=[])
    ap.add_argument("--models", nargs="*", default=[f"{m}:{tp}:{kv}" for m, tp, kv in MODELS])
    ap.add_argument("--shapes", nargs="*", default=[f"{c}:{x}" for c, x in SHAPES])
    ap.add_argument("--tiles", nargs="*", default=[f"{m}:{n}" for m, n in TILES])
    ap.add_argument("--warps-stages", nargs="*", default=[f"{w}:{st}" for w, st in WARPS_STAGES])
    ap.add_argument("--splits", nargs="*", type=int, default=SPLITS)
    ap.add_argument("--decode", action="store_true", help="decode workloads: --shapes are BATCH:CONTEXT")
    mine, sys.argv[1:] = ap.parse_known_args()
    shapes, tiles, warps_stages = (
        [tuple(int(v) for v in t.split(":")) for t in given] for given in (mine.shapes, mine.tiles, mine.warps_stages)
    )
    timing, out = options(__doc__)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    for model, tp, kv in (m.split(":") for m in mine.models):
        tp = int(tp)
        spec = attention_spec(load_model_config(ROOT / "tests/data/models" / model), tp, kv_cache_dtype=kv)
        for chunk, ctx in shapes:  # with --decode: (batch, context)
            named = {"model": model, "tp": tp, "kv_cache_dtype": kv, "chunk": chunk, "context": ctx}
            if mine.decode:
                named = {k: v for k, v in named.items() if k != "chunk"} | {"phase": "decode", "batch": chunk}
                workload = AttentionWorkload(spec, "decode", chunk, ctx, query_len=spec.query_len_decode)
            else:
                workload = AttentionWorkload(spec, "prefill", 1, ctx, query_len=chunk)
            if not mine.no_sweep:
                sweep(named, workload, out, tiles, warps_stages, mine.splits)
            references = DECODE_REFERENCES if mine.decode else REFERENCES
            for backend, tactic in (ref for ref in references if ref[0] not in mine.skip):
                r = probe_job(workload, backend, tactic, timing)
                emit({**named, "backend": backend, "tactic": tactic, **outcome(r)}, out)


if __name__ == "__main__":
    main()

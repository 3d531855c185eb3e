"""MLA decode and prefill at DeepSeek-V3 shapes through hwtune's probe path (issue 19; docs/probes.md "MLA",
docs/kernels.md "HWTUNE_TRITON_MLA").

Every MLA candidate hwtune runs (FLASHINFER_FA_MLA fa2 / fa3, HWTUNE_TRITON_MLA auto, HWTUNE_TORCH_MLA eager;
each where the catalogue says it is valid on this GPU) goes through ``measure_attention``: the correctness gate
against the float32 MLA reference (latent up-projected by random W_UK / W_UV; LSE checked), then timing. Shapes:
kv_lora_rank 512, rope 64, bf16, 128 query heads (TP 1) and 16 (TP 8); batch {1, 16, 64, 128} x context {1024,
8192, 32768} at ``--grid-page`` (64), and the page sizes ``--pages`` (1, 16, 32, 64) at two shapes per head count.
Each row has the median (us) and the KV bytes read per second (latent bytes = context * 576 * 2 per request) over
the measured copy bandwidth (bytes read + written per second by a 2 GiB device-to-device copy, as kernels_bench.py's
floors). JIT compilation never enters a median: the probe path makes the first plan + call of every row (where a
kernel variant is compiled: FlashInfer once per tactic, hwtune's kernel once per page size and launch shape) before
the correctness gate and the timing, and keeps its seconds as the row's ``compile_s``; the summary lists the largest
per candidate (its JIT) apart from the run time.

Prefill rows (``--prefill-heads``, default 16): one request, a chunk of ``--chunks`` (512, 2048, 8192) new tokens on a
cached prefix of ``--prefixes`` (0, 8192, 32768), every valid tactic: the absorbed ones (fa2, fa3, auto, eager) and
the non-absorbed ``mha-*`` (FlashInfer's ragged wrapper, cuDNN, SDPA, eager; docs/probes.md "MLA prefill"; their
gather and up-projection are not timed). Each has its attention TFLOP/s (``attn_TFLOPs``: 2 * heads * (192 + 128)
FLOPs per (query, visible key) pair, causal, end-aligned).

A time budget (``--budget-s``, default 420) guards the whole run: rows are measured in order of interest (the page
64 grid from the longest contexts down, the prefill rows, then the page sweep) and the rest are listed as skipped.
The torch candidate is measured only up to ``--torch-max-tokens`` (batch x context) per decode row and
``--torch-max-pairs`` (chunk x context) per prefill row.

    python benchmarks/mla.py --out FILE.json        (needs a CUDA GPU; flashinfer for FlashInfer's rows)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hwtune.core import catalogue  # noqa: E402
from hwtune.core.catalogue import Feature  # noqa: E402
from hwtune.core.types import AttentionSpec, AttentionWorkload  # noqa: E402
from hwtune.probes.attention.measure import Planned, measure_attention, plan_candidates  # noqa: E402
from hwtune.probes.attention.worker import WorkerPool  # noqa: E402
from hwtune.probes.timing import TimingOptions  # noqa: E402

LATENT_BYTES = 576 * 2  # one bf16 latent row: ckv 512 + kpe 64


def mla_spec(heads: int, page: int) -> AttentionSpec:
    """DeepSeek-V3's attention per rank at ``heads`` query heads (128 / TP), bf16, page ``page``."""
    return AttentionSpec(
        num_heads=heads, num_kv_heads=1, head_size=576, dtype="bfloat16", block_size=page, use_mla=True,
        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
    )  # fmt: skip


def copy_bandwidth_gbps() -> float:
    """Bytes read + written per second (GB/s) by a 2 GiB device-to-device copy, median of 10."""
    import torch

    nbytes = 2 << 30
    a, b = (torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(2))
    b.copy_(a)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * nbytes / sorted(times)[len(times) // 2] / 1e9


def work_list(args: argparse.Namespace) -> list[tuple[str, int, int, int, int, int]]:
    """(phase, heads, page, batch, context, query_len) in the order of interest: the decode grid at the grid page from
    the longest contexts and largest batches down, the prefill chunks on their prefixes (longest first), then the
    decode page sweep at (64, 8192) and (1, 32768)."""
    items = []
    for heads in args.heads:
        for ctx in sorted(args.contexts, reverse=True):
            for batch in sorted(args.batches, reverse=True):
                items.append(("decode", heads, args.grid_page, batch, ctx, 1))
    for heads in args.prefill_heads:
        for prefix in sorted(args.prefixes, reverse=True):
            for chunk in sorted(args.chunks, reverse=True):
                items.append(("prefill", heads, args.grid_page, 1, prefix + chunk, chunk))
    for heads in args.heads:
        for page in args.pages:
            for batch, ctx in ((64, 8192), (1, 32768)):
                if page != args.grid_page:
                    items.append(("decode", heads, page, batch, ctx, 1))
    return items


def attention_flops(w: AttentionWorkload) -> float:
    """FLOPs of the (non-absorbed) attention: 2 * heads * (192 + 128) per (query, visible key) pair, causal and
    aligned to the end of the context."""
    m, n = (w.query_len, w.context_len) if w.phase == "prefill" else (1, w.context_len)
    pairs = m * (n - m) + m * (m + 1) / 2
    return 2.0 * w.spec.num_heads * (192 + 128) * pairs * w.batch


def candidates(w: AttentionWorkload, profile, args: argparse.Namespace) -> list[Planned]:  # noqa: ANN001
    """The MLA candidates hwtune runs that the catalogue finds valid for ``w`` here (and asked for)."""
    out = []
    for p in plan_candidates(w, profile):
        record = catalogue.get("attention", p.backend)
        if not (p.runnable and record.probe and record.has(Feature.MLA)) or p.backend not in args.backends:
            continue
        if p.backend == "HWTUNE_TORCH_MLA" and w.batch * w.context_len > args.torch_max_tokens:
            continue
        if (
            p.backend == "HWTUNE_TORCH_MLA"
            and w.phase == "prefill"
            and w.query_len * w.context_len > args.torch_max_pairs
        ):
            continue
        out.append(p)
    return out


def row(rec, w: AttentionWorkload, copy_gbps: float) -> dict:  # noqa: ANN001
    """One result row: shape, candidate, status, median, KV bytes per second and its fraction of the copy rate."""
    s = rec.stats
    kv_bytes = w.batch * w.context_len * LATENT_BYTES
    gbps = kv_bytes / (s.median_us * 1e-6) / 1e9 if s and w.phase == "decode" else None
    return {
        "phase": w.phase,
        "query_len": w.query_len if w.phase == "prefill" else 1,
        "attn_TFLOPs": attention_flops(w) / (s.median_us * 1e-6) / 1e12 if s and w.phase == "prefill" else None,
        "heads": w.spec.num_heads,
        "page": w.spec.block_size,
        "batch": w.batch,
        "context": w.context_len,
        "backend": rec.backend,
        "tactic": rec.tactic,
        "status": rec.status,
        "median_us": s.median_us if s else None,
        "p10_us": s.p10_us if s else None,
        "p90_us": s.p90_us if s else None,
        "n": s.n if s else None,
        "timing_method": rec.timing_method,
        "compile_s": rec.compile_time_s,
        "kv_bytes": kv_bytes,
        "kv_GBps": gbps,
        "frac_copy_bw": gbps / copy_gbps if gbps else None,
        "rel_l2": (rec.error or {}).get("rel_l2"),
        "lse_max_abs": (rec.error or {}).get("lse_max_abs"),
        "config": (rec.extra or {}).get("config"),
        "message": (rec.message or "")[:300],
    }


def _print(r: dict) -> None:
    us = f"{r['median_us']:9.1f} us" if r["median_us"] else r["status"]
    frac = f"{r['frac_copy_bw']:.2f} of copy bw" if r["frac_copy_bw"] else (r["message"][:80] or "")
    if r["attn_TFLOPs"]:
        frac = f"{r['attn_TFLOPs']:.0f} attention TFLOP/s"
    shape = f"h{r['heads']} page{r['page']} b{r['batch']} ctx{r['context']}"
    if r["phase"] == "prefill":
        shape = f"prefill h{r['heads']} chunk{r['query_len']} prefix{r['context'] - r['query_len']}"
    print(f"{shape:<34} {r['backend']}/{r['tactic']:<12} {us:>14}  {frac}", flush=True)


def run(args: argparse.Namespace, profile, pool: WorkerPool, copy_gbps: float) -> tuple[list, list]:  # noqa: ANN001
    """The work list within the budget; returns (rows, skipped shapes)."""
    deadline = time.monotonic() + args.budget_s
    timing = TimingOptions(time_cap_s=args.time_cap)
    rows, skipped = [], []
    for phase, heads, page, batch, ctx, query_len in work_list(args):
        if time.monotonic() + args.reserve_s > deadline:
            skipped.append(
                {"phase": phase, "heads": heads, "page": page, "batch": batch, "context": ctx, "query_len": query_len}
            )
            continue
        w = AttentionWorkload(mla_spec(heads, page), phase, batch, ctx, query_len=query_len)
        planned = candidates(w, profile, args)
        recs = measure_attention(w, planned, device="cuda", profile=profile, timing=timing, pool=pool, timeout_s=300)
        for rec in recs:
            rows.append(row(rec, w, copy_gbps))
            _print(rows[-1])
        _save(args, rows, skipped, copy_gbps)
    return rows, skipped


def _environment(copy_gbps: float) -> dict:
    import torch

    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    for name in ("triton", "flashinfer"):
        try:
            env[name] = __import__(name).__version__
        except Exception as exc:  # not installed: its rows say unsupported
            env[name] = f"unavailable ({type(exc).__name__})"
    env["copy_GBps"] = copy_gbps
    return env


def _save(args: argparse.Namespace, rows: list, skipped: list, copy_gbps: float) -> None:
    """Write what is measured so far (a run cut short keeps its rows)."""
    provenance = {**_environment(copy_gbps), "command": " ".join(sys.argv), "budget_s": args.budget_s}
    Path(args.out).write_text(json.dumps({"provenance": provenance, "rows": rows, "skipped": skipped}, indent=1))


def summary(rows: list) -> None:
    """The fastest correct candidate per measured shape, with its share of the copy bandwidth, and each candidate's
    largest first-call time (its JIT compilation), which no median includes."""
    best: dict = {}
    jit: dict = {}
    for r in rows:
        name = f"{r['backend']}/{r['tactic']}"
        jit[name] = max(jit.get(name, 0.0), r["compile_s"] or 0.0)
        if r["status"] != "ok":
            continue
        key = (r["phase"], r["heads"], r["page"], r["batch"], r["context"], r["query_len"])
        if key not in best or r["median_us"] < best[key]["median_us"]:
            best[key] = r
    print(
        "\nfastest per shape (phase, heads, page, batch, context, query_len): backend/tactic, median us, fraction of "
        "copy bandwidth (decode) or attention TFLOP/s (prefill)"
    )
    for key, r in sorted(best.items()):
        figure = f"{r['frac_copy_bw']:.2f}" if r["phase"] == "decode" else f"{r['attn_TFLOPs']:.0f} TFLOP/s"
        print(f"  {key}: {r['backend']}/{r['tactic']} {r['median_us']:.1f} us {figure}")
    print("first call (JIT included), largest per candidate: " + ", ".join(f"{k} {v:.1f} s" for k, v in jit.items()))


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--heads", type=_ints, default=[128, 16])
    ap.add_argument("--batches", type=_ints, default=[1, 16, 64, 128])
    ap.add_argument("--contexts", type=_ints, default=[1024, 8192, 32768])
    ap.add_argument("--grid-page", type=int, default=64)
    ap.add_argument("--pages", type=_ints, default=[1, 16, 32, 64])
    ap.add_argument("--prefill-heads", type=_ints, default=[16], help="prefill rows' heads (none: --prefill-heads '')")
    ap.add_argument("--chunks", type=_ints, default=[512, 2048, 8192], help="prefill chunk (new tokens)")
    ap.add_argument("--prefixes", type=_ints, default=[0, 8192, 32768], help="prefill cached prefix")
    ap.add_argument("--backends", default="FLASHINFER_FA_MLA,HWTUNE_TRITON_MLA,HWTUNE_TORCH_MLA")
    ap.add_argument("--torch-max-tokens", type=int, default=16 * 8192)
    ap.add_argument("--torch-max-pairs", type=int, default=2048 * 10240)
    ap.add_argument("--time-cap", type=float, default=0.3, help="seconds of timing per candidate and shape")
    ap.add_argument("--budget-s", type=float, default=420.0, help="the whole run's wall-clock budget")
    ap.add_argument("--reserve-s", type=float, default=15.0, help="no new shape is started with less left")
    args = ap.parse_args()
    args.backends = set(args.backends.split(","))
    from hwtune.core.detect import detect

    profile = detect()
    copy_gbps = copy_bandwidth_gbps()
    print(f"copy bandwidth {copy_gbps:.0f} GB/s (read + write); {profile.describe()}", flush=True)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with WorkerPool(env={"PYTHONPATH": path}) as pool:
        rows, skipped = run(args, profile, pool, copy_gbps)
    _save(args, rows, skipped, copy_gbps)
    summary(rows)
    if skipped:
        print(f"{len(skipped)} shapes skipped by the budget ({args.budget_s:.0f} s); see 'skipped' in {args.out}")


if __name__ == "__main__":
    main()

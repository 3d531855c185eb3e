"""Time hwtune's Triton kernels (TRITON_ATTN, TURBOQUANT) on a CUDA GPU against measured floors.

Sections (``--sections``, comma-separated; default all):
  quantizer   per-vector error of the quantizer alone, rotation vs none (PyTorch; runs on CPU too)
  floors      copy bandwidth (large device-to-device copy) and bf16 matmul rate (best of 4096^3, 8192^3,
              16384^3), measured here
  decode      TRITON_ATTN decode at long context: KV bytes read / time vs copy bandwidth; FlashInfer decode
              (fa2 CUDA-core, fa2 tensor-core, fa3) on the same paged cache when importable
  prefill     TRITON_ATTN causal prefill (>= 4k tokens, head 128): TFLOP/s vs the matmul rate; FlashInfer
              paged prefill (fa2, fa3) when importable
  turboquant  TURBOQUANT decode (4/8-bit) vs TRITON_ATTN bf16 vs FlashInfer bf16 at 8k..128k; write speed
  memory      cache bytes per token vs bf16
  error       output error vs float32 attention: bf16 TRITON_ATTN, TURBOQUANT 4/8-bit, and a no-rotation
              ablation, on random data and on keys with outlier channels (4 channels x20)
``--tune`` also searches ``config_space`` (the "tuned" tactic) on the headline decode/prefill shapes.

Timing: CUDA-graph replay of ``--inner`` launches between CUDA events, median of ``--reps``; when the data
touched is smaller than 3x L2, one launch per replay and a 256 MiB buffer is written before each replay so
L2 does not flatter the kernel. Prints a table per section; ``--out`` writes everything as JSON.

    python benchmarks/kernels_bench.py --out kernels_h100.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hwtune.kernels import triton_attention as ta
from hwtune.kernels import turboquant as tq
from hwtune.kernels.configs import workspace_size

DEV = "cuda"
H_Q, H_KV, D = 32, 8, 128  # Llama-3-8B-like attention
RESULTS: dict = {}
#: FlashInfer tactics to compare with (``--fi-decode`` / ``--fi-prefill``): each costs a JIT build on first use
FI_DECODE: set[str] = {"fa2", "fa2-tc", "fa3-tc"}
FI_PREFILL: set[str] = {"fa2", "fa3"}


# --- timing ------------------------------------------------------------------------------------------------------
def l2_bytes() -> int:
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20))


_FLUSH: torch.Tensor | None = None


def time_ms(fn: Callable[[], object], *, touched_bytes: int, inner: int, reps: int) -> tuple[float, str]:
    """Median milliseconds per call of ``fn`` and the method used."""
    global _FLUSH
    flush = touched_bytes < 3 * l2_bytes()
    if flush and _FLUSH is None:
        _FLUSH = torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV)
    n = 1 if flush else inner
    fn()
    torch.cuda.synchronize()
    method = "cuda_graph"
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                fn()
        run: Callable[[], object] = graph.replay
    except Exception as exc:  # a library that cannot be captured is timed eagerly, and says so
        torch.cuda.synchronize()
        method = f"eager ({type(exc).__name__})"

        def run() -> None:
            for _ in range(n):
                fn()

    samples = []
    for _ in range(reps):
        if flush:
            _FLUSH.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / n)
    return statistics.median(samples), method + (" +L2 flush" if flush else "")


def table(title: str, rows: list[dict], cols: list[str]) -> None:
    print(f"\n== {title} ==")
    print(" | ".join(f"{c:>14}" for c in cols))
    for r in rows:
        print(" | ".join(f"{_fmt(r.get(c)):>14}" for c in cols))


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


# --- floors ------------------------------------------------------------------------------------------------------
def floors(args: argparse.Namespace) -> None:
    nbytes = 2 * 2**30
    bufs = [torch.empty(nbytes, dtype=torch.uint8, device=DEV) for _ in range(2)]
    ms, _ = time_ms(lambda: bufs[1].copy_(bufs[0]), touched_bytes=2 * nbytes, inner=5, reps=args.reps)
    copy_gbs = 2 * nbytes / ms / 1e6
    bufs.clear()
    torch.cuda.empty_cache()
    # the matmul rate is the best of three square sizes: one size alone varied 681-755 TFLOP/s between runs
    # on the H100, and a ratio to a low reading would flatter the attention kernels
    by_size = {}
    for n in (4096, 8192, 16384):
        a = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
        ms_mm, _ = time_ms(lambda a=a, b=b: a @ b, touched_bytes=3 * n * n * 2, inner=5, reps=args.reps)
        by_size[n] = 2 * n**3 / ms_mm / 1e9
        del a, b
    RESULTS["floors"] = {
        "copy_GBps": copy_gbs,
        "bf16_matmul_TFLOPs": max(by_size.values()),
        "bf16_matmul_TFLOPs_by_size": by_size,
    }
    table("floors (measured)", [RESULTS["floors"]], ["copy_GBps", "bf16_matmul_TFLOPs"])


# --- paged problems ----------------------------------------------------------------------------------------------
def paged(
    batch: int,
    ctx: int,
    *,
    q_len: int = 1,
    page: int = 16,
    kv_dtype=torch.bfloat16,
    layout: str = "NHD",
    head_size: int = D,
    h_q: int = H_Q,
    h_kv: int = H_KV,
    seed: int = 0,
) -> dict:
    """Uniform-context paged problem with shuffled pages and a FlashInfer-style [blocks, 2, ...] cache."""
    torch.manual_seed(seed)
    pages = math.ceil(ctx / page)
    blocks = batch * pages
    inner = (page, h_kv) if layout == "NHD" else (h_kv, page)
    kv = torch.randn(blocks, 2, *inner, head_size, device=DEV, dtype=torch.bfloat16)
    kv = (kv * 0.5).to(kv_dtype) if kv_dtype != torch.bfloat16 else kv
    table = torch.randperm(blocks, device=DEV, dtype=torch.int64).to(torch.int32).view(batch, pages)
    q = torch.randn(batch * q_len, h_q, head_size, device=DEV, dtype=torch.bfloat16)
    return {
        "kv": kv,
        "table": table,
        "q": q,
        "out": torch.empty_like(q),
        "lse": torch.empty(batch * q_len, h_q, device=DEV),
        "seq_lens": torch.full((batch,), ctx, dtype=torch.int32, device=DEV),
        "qsl": torch.arange(0, batch * q_len + 1, q_len, dtype=torch.int32, device=DEV),
        "batch": batch,
        "ctx": ctx,
        "q_len": q_len,
        "page": page,
        "layout": layout,
        "head_size": head_size,
        "kv_dtype": kv_dtype,
        "h_kv": h_kv,
        "h_q": h_q,
    }


def shape_args(p: dict) -> dict:
    """What ``default_config``/``config_space`` take for this problem, as paged_attention passes it."""
    return dict(
        batch=p["batch"],
        max_query_len=p["q_len"],
        max_seq_len=p["ctx"],
        head_size=p["head_size"],
        gqa_group=p["h_q"] // p["h_kv"],
        num_sms=torch.cuda.get_device_properties(0).multi_processor_count,
        num_kv_heads=p["h_kv"],
        kv_cache_bytes=p["kv"].element_size(),
    )


def auto_config(p: dict) -> ta.TritonAttnConfig:
    """The "auto" tactic exactly as paged_attention would pick it (made explicit to size the workspace)."""
    return ta.default_config(phase="decode" if p["q_len"] <= 1 else "mixed", **shape_args(p))


def triton_call(p: dict, config: ta.TritonAttnConfig | None) -> Callable[[], None]:
    config = config or auto_config(p)
    ws = torch.zeros(
        max(
            1,
            workspace_size(
                num_tokens=p["q"].shape[0],
                num_heads=p["h_q"],
                head_size=p["head_size"],
                num_splits=config.num_splits or 1,
            ),
        ),
        device=DEV,
    )
    kw = dict(
        max_query_len=p["q_len"],
        max_seq_len=p["ctx"],
        out=p["out"],
        lse=p["lse"],
        softmax_scale=p["head_size"] ** -0.5,
        kv_layout=p["layout"],
        config=config,
        workspace=ws,
    )
    if p["kv_dtype"] != torch.bfloat16:
        kw.update(k_scale=1.0, v_scale=1.0)
    return lambda: ta.paged_attention(p["q"], p["kv"][:, 0], p["kv"][:, 1], p["table"], p["seq_lens"], p["qsl"], **kw)


def flashinfer_decode_calls(p: dict) -> dict[str, Callable[[], object]]:
    """FlashInfer decode tactics on the same cache; empty when flashinfer is missing."""
    try:
        import flashinfer
    except Exception as exc:
        RESULTS.setdefault("notes", []).append(f"flashinfer not importable: {exc}")
        return {}
    pages = p["table"].shape[1]
    indptr = torch.arange(0, p["batch"] * pages + 1, pages, dtype=torch.int32, device=DEV)
    indices = p["table"].reshape(-1).contiguous()
    last = torch.full((p["batch"],), p["ctx"] - (pages - 1) * p["page"], dtype=torch.int32, device=DEV)
    calls = {}
    for name, kw in (
        ("fa2", {}),
        ("fa2-tc", {"use_tensor_cores": True}),
        ("fa3-tc", {"use_tensor_cores": True, "backend": "fa3"}),
    ):
        if name not in FI_DECODE:
            continue
        try:
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV), p["layout"], **kw
            )
            wrapper.plan(
                indptr,
                indices,
                last,
                p["h_q"],
                p["h_kv"],
                p["head_size"],
                p["page"],
                pos_encoding_mode="NONE",
                q_data_type=torch.bfloat16,
                kv_data_type=p["kv_dtype"],
                sm_scale=p["head_size"] ** -0.5,
            )
            out = torch.empty_like(p["q"])
            call = lambda w=wrapper, o=out, p=p: w.run(p["q"], p["kv"], out=o)
            call()
            torch.cuda.synchronize()
            calls[name] = call
        except Exception as exc:
            RESULTS.setdefault("notes", []).append(
                f"flashinfer {name} unavailable for {_shape(p)}: {type(exc).__name__}: {str(exc)[:200]}"
            )
    return calls


def _shape(p: dict) -> str:
    return (
        f"b{p['batch']} ctx{p['ctx']} q{p['q_len']} d{p['head_size']} page{p['page']} {p['layout']} "
        f"{str(p['kv_dtype'])[6:]}"
    )


def kv_bytes(p: dict) -> int:
    return p["batch"] * p["ctx"] * p["h_kv"] * p["head_size"] * 2 * p["kv"].element_size()


# --- decode ------------------------------------------------------------------------------------------------------
def decode(args: argparse.Namespace) -> None:
    copy = RESULTS.get("floors", {}).get("copy_GBps")
    shapes = [
        (16, 8192, "NHD", torch.bfloat16),
        (16, 8192, "HND", torch.bfloat16),
        (32, 8192, "NHD", torch.bfloat16),
        (64, 8192, "NHD", torch.bfloat16),
        (16, 32768, "NHD", torch.bfloat16),
        (128, 4096, "NHD", torch.bfloat16),
        (1, 131072, "NHD", torch.bfloat16),
        (4, 16384, "NHD", torch.bfloat16),
        (16, 8192, "NHD", torch.float8_e4m3fn),
        (16, 32768, "HND", torch.float8_e4m3fn),
    ]
    rows = []
    for i, (batch, ctx, layout, kvd) in enumerate(shapes):
        p = paged(batch, ctx, layout=layout, kv_dtype=kvd, page=args.page)
        row = {"shape": _shape(p), "kv_MB": kv_bytes(p) / 1e6}
        ms, method = time_ms(triton_call(p, None), touched_bytes=kv_bytes(p), inner=args.inner, reps=args.reps)
        row.update(auto_us=ms * 1e3, auto_GBps=kv_bytes(p) / ms / 1e6, method=method)
        if args.tune and i in (0, 8):
            row.update(_tune(p, args, "decode"))
        best_fi = None
        for name, call in flashinfer_decode_calls(p).items():
            fms, fmethod = time_ms(call, touched_bytes=kv_bytes(p), inner=args.inner, reps=args.reps)
            row[f"fi_{name}_us"] = fms * 1e3
            row[f"fi_{name}_method"] = fmethod
            best_fi = fms if best_fi is None else min(best_fi, fms)
        ours = min(ms, row.get("tuned_us", math.inf) / 1e3)
        row["best_ours_us"] = ours * 1e3
        row["fi_best_us"] = None if best_fi is None else best_fi * 1e3
        row["ours_over_fi"] = None if best_fi is None else ours / best_fi
        row["frac_copy_bw"] = None if not copy else (kv_bytes(p) / ours / 1e6) / copy
        rows.append(row)
        del p
        torch.cuda.empty_cache()
    RESULTS["decode"] = rows
    table(
        "TRITON_ATTN decode (Hq 32, Hkv 8, D 128)",
        rows,
        ["shape", "auto_us", "tuned_us", "fi_best_us", "ours_over_fi", "auto_GBps", "frac_copy_bw"],
    )


def _tune(p: dict, args: argparse.Namespace, phase: str) -> dict:
    space = ta.config_space(phase=phase, **shape_args(p))
    best = (math.inf, None)
    for cfg in space:
        try:
            ms, _ = time_ms(
                triton_call(p, cfg), touched_bytes=kv_bytes(p), inner=args.inner, reps=max(5, args.reps // 3)
            )
        except Exception as exc:  # a config the device cannot compile (shared memory) is reported, not hidden
            RESULTS.setdefault("notes", []).append(f"config {cfg.name()} failed on {_shape(p)}: {type(exc).__name__}")
            continue
        best = min(best, (ms, cfg.name()), key=lambda x: x[0])
    return {"tuned_us": best[0] * 1e3, "tuned_config": best[1], "configs_searched": len(space)}


# --- prefill -----------------------------------------------------------------------------------------------------
def causal_flops(p: dict) -> float:
    prefix = p["ctx"] - p["q_len"]
    attended = p["q_len"] * prefix + p["q_len"] * (p["q_len"] + 1) / 2
    return 4.0 * p["head_size"] * p["h_q"] * p["batch"] * attended


def flashinfer_prefill_calls(p: dict) -> dict[str, Callable[[], object]]:
    try:
        import flashinfer
    except Exception:
        return {}
    pages = p["table"].shape[1]
    qo = torch.arange(0, p["batch"] * p["q_len"] + 1, p["q_len"], dtype=torch.int32, device=DEV)
    indptr = torch.arange(0, p["batch"] * pages + 1, pages, dtype=torch.int32, device=DEV)
    last = torch.full((p["batch"],), p["ctx"] - (pages - 1) * p["page"], dtype=torch.int32, device=DEV)
    calls = {}
    for name in ("fa2", "fa3"):
        if name not in FI_PREFILL:
            continue
        try:
            w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
                torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV), p["layout"], backend=name
            )
            w.plan(
                qo,
                indptr,
                p["table"].reshape(-1).contiguous(),
                last,
                p["h_q"],
                p["h_kv"],
                p["head_size"],
                p["page"],
                causal=True,
                q_data_type=torch.bfloat16,
                kv_data_type=p["kv_dtype"],
            )
            out = torch.empty_like(p["q"])
            call = lambda w=w, o=out, p=p: w.run(p["q"], p["kv"], out=o)
            call()
            torch.cuda.synchronize()
            calls[name] = call
        except Exception as exc:
            RESULTS.setdefault("notes", []).append(f"flashinfer prefill {name}: {type(exc).__name__}: {str(exc)[:200]}")
    return calls


def prefill(args: argparse.Namespace) -> None:
    mm = RESULTS.get("floors", {}).get("bf16_matmul_TFLOPs")
    shapes = [(1, 4096, 4096), (1, 8192, 8192), (1, 16384, 16384), (4, 4096, 4096), (1, 4096, 8192), (2, 8192, 8192)]
    rows = []
    for i, (batch, q_len, ctx) in enumerate(shapes):
        p = paged(batch, ctx, q_len=q_len, page=args.page)
        row = {"shape": _shape(p)}
        ms, method = time_ms(triton_call(p, None), touched_bytes=kv_bytes(p), inner=2, reps=args.reps)
        row.update(auto_ms=ms, auto_TFLOPs=causal_flops(p) / ms / 1e9, method=method)
        if args.tune and i in (0, 1):
            tuned = _tune(p, args, "prefill")
            row.update(
                tuned_ms=tuned["tuned_us"] / 1e3,
                tuned_config=tuned["tuned_config"],
                tuned_TFLOPs=causal_flops(p) / (tuned["tuned_us"] / 1e3) / 1e9,
            )
        for name, call in flashinfer_prefill_calls(p).items():
            fms, _ = time_ms(call, touched_bytes=kv_bytes(p), inner=2, reps=args.reps)
            row[f"fi_{name}_TFLOPs"] = causal_flops(p) / fms / 1e9
        best = max(row["auto_TFLOPs"], row.get("tuned_TFLOPs", 0.0))
        row["frac_matmul"] = None if not mm else best / mm
        rows.append(row)
        del p
        torch.cuda.empty_cache()
    RESULTS["prefill"] = rows
    table(
        "TRITON_ATTN causal prefill (Hq 32, Hkv 8, D 128, bf16)",
        rows,
        ["shape", "auto_TFLOPs", "tuned_TFLOPs", "fi_fa2_TFLOPs", "fi_fa3_TFLOPs", "frac_matmul"],
    )


# --- turboquant --------------------------------------------------------------------------------------------------
def tq_cache_from_bf16(p: dict, bits: int, layout: str = "NHD") -> tq.TurboQuantCache:
    """Quantize the bf16 pages into a TurboQuant cache with the same page ids (chunked: bounded memory)."""
    kv = p["kv"] if p["layout"] == "NHD" else p["kv"].transpose(2, 3)
    blocks, page = kv.shape[0], p["page"]
    cache = tq.allocate_cache(blocks, page, p["h_kv"], p["head_size"], bits, DEV, layout=layout)
    step = max(1, 2**16 // page)
    for b0 in range(0, blocks, step):
        b1 = min(blocks, b0 + step)
        k = kv[b0:b1, 0].reshape(-1, p["h_kv"], p["head_size"])
        v = kv[b0:b1, 1].reshape(-1, p["h_kv"], p["head_size"])
        tq.write(cache, k, v, torch.arange(b0 * page, b1 * page, device=DEV))
    return cache


def turboquant(args: argparse.Namespace) -> None:
    rows = []
    for batch, ctx in ((16, 8192), (16, 32768), (16, 131072), (1, 131072), (64, 8192)):
        p = paged(batch, ctx, page=args.page)
        row = {"shape": f"b{p['batch']} ctx{p['ctx']}", "bf16_MB": kv_bytes(p) / 1e6}
        ms, _ = time_ms(triton_call(p, None), touched_bytes=kv_bytes(p), inner=args.inner, reps=args.reps)
        row["triton_bf16_us"] = ms * 1e3
        fi = [
            time_ms(c, touched_bytes=kv_bytes(p), inner=args.inner, reps=args.reps)[0]
            for c in flashinfer_decode_calls(p).values()
        ]
        row["fi_bf16_best_us"] = min(fi) * 1e3 if fi else None
        for bits in (4, 8):
            for layout in ("NHD", "HND") if bits == 4 else ("NHD",):
                cache = tq_cache_from_bf16(p, bits, layout)
                tq_bytes = p["batch"] * p["ctx"] * tq.bytes_per_token(p["h_kv"], p["head_size"], bits)
                call = lambda c=cache, p=p: tq.paged_attention(
                    p["q"],
                    c,
                    p["table"],
                    p["seq_lens"],
                    p["qsl"],
                    max_query_len=1,
                    max_seq_len=p["ctx"],
                    out=p["out"],
                    lse=p["lse"],
                    softmax_scale=p["head_size"] ** -0.5,
                )
                tms, _ = time_ms(call, touched_bytes=tq_bytes, inner=args.inner, reps=args.reps)
                key = f"tq{bits}_{layout}"
                row[f"{key}_us"] = tms * 1e3
                row[f"{key}_GBps"] = tq_bytes / tms / 1e6
                if row["fi_bf16_best_us"]:
                    row[f"{key}_speedup_vs_fi"] = row["fi_bf16_best_us"] / (tms * 1e3)
                del cache
        rows.append(row)
        del p
        torch.cuda.empty_cache()
    # write kernel: 4096 new tokens
    cache = tq.allocate_cache(math.ceil(4096 / args.page), args.page, H_KV, D, 4, DEV)
    k = torch.randn(4096, H_KV, D, device=DEV, dtype=torch.bfloat16)
    slots = torch.arange(4096, device=DEV)
    wms, _ = time_ms(lambda: tq.write(cache, k, k, slots), touched_bytes=0, inner=1, reps=args.reps)
    RESULTS["turboquant"] = {"decode": rows, "write_4096_tokens_us": wms * 1e3}
    table(
        "TURBOQUANT decode vs bf16 (Hq 32, Hkv 8, D 128)",
        rows,
        [
            "shape",
            "triton_bf16_us",
            "fi_bf16_best_us",
            "tq4_NHD_us",
            "tq4_HND_us",
            "tq8_NHD_us",
            "tq4_NHD_speedup_vs_fi",
            "tq4_NHD_GBps",
        ],
    )
    print(f"TURBOQUANT write of 4096 tokens x 8 heads (4-bit): {wms * 1e3:.1f} us")


# --- memory ------------------------------------------------------------------------------------------------------
def memory(args: argparse.Namespace) -> None:
    rows = []
    for h_kv, d in ((8, 128), (8, 64), (4, 256), (1, 128)):
        bf16 = 2 * 2 * h_kv * d
        row = {"kv_heads": h_kv, "head": d, "bf16_B": bf16, "fp8_B": bf16 // 2}
        for bits in (4, 8):
            b = tq.bytes_per_token(h_kv, d, bits)
            cache = tq.allocate_cache(4, 16, h_kv, d, bits, DEV)
            assert cache.nbytes() == 4 * 16 * b, "allocated bytes disagree with bytes_per_token"
            row[f"tq{bits}_B"] = b
            row[f"tq{bits}_ratio"] = bf16 / b
        rows.append(row)
    RESULTS["memory"] = rows
    table(
        "KV cache bytes per token (all KV heads, K and V)",
        rows,
        ["kv_heads", "head", "bf16_B", "fp8_B", "tq4_B", "tq4_ratio", "tq8_B", "tq8_ratio"],
    )


# --- error -------------------------------------------------------------------------------------------------------
def _ref_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor, ctx: int) -> torch.Tensor:
    """float32 decode attention, k/v [blocks, page, H_kv, D] float."""
    outs = []
    for r in range(table.shape[0]):
        kr = k[table[r].long()].reshape(-1, *k.shape[2:])[:ctx].float()
        vr = v[table[r].long()].reshape(-1, *v.shape[2:])[:ctx].float()
        g = q.shape[1] // kr.shape[1]
        kr, vr = kr.repeat_interleave(g, 1), vr.repeat_interleave(g, 1)
        s = torch.einsum("hd,nhd->hn", q[r].float(), kr) / math.sqrt(q.shape[-1])
        outs.append(torch.einsum("hn,nhd->hd", torch.softmax(s, -1), vr))
    return torch.stack(outs)


def error(args: argparse.Namespace) -> None:
    rows = []
    for data in ("random", "outlier_channels"):
        p = paged(8, 4096, page=args.page)
        if data == "outlier_channels":
            p["kv"][:, 0, ..., :4] *= 20.0
        k, v = p["kv"][:, 0].float(), p["kv"][:, 1].float()
        ref = _ref_decode(p["q"], k, v, p["table"], p["ctx"])

        def rel(o: torch.Tensor, ref: torch.Tensor = ref) -> float:
            return ((o.float() - ref).norm() / ref.norm()).item()

        triton_call(p, None)()
        row = {"data": data, "bf16_triton": rel(p["out"])}
        for bits in (4, 8):
            cache = tq_cache_from_bf16(p, bits)
            tq.paged_attention(
                p["q"],
                cache,
                p["table"],
                p["seq_lens"],
                p["qsl"],
                max_query_len=1,
                max_seq_len=p["ctx"],
                out=p["out"],
                softmax_scale=D**-0.5,
            )
            row[f"tq{bits}"] = rel(p["out"])
            k_raw, v_raw = tq.round_trip_without_rotation(k, bits), tq.round_trip_without_rotation(v, bits)
            row[f"tq{bits}_no_rotation_ref"] = rel(_ref_decode(p["q"], k_raw, v_raw, p["table"], p["ctx"]))
        rows.append(row)
    RESULTS["error"] = rows
    table(
        "relative L2 output error vs float32 attention (b8 ctx4096, Hq 32, Hkv 8, D 128)",
        rows,
        ["data", "bf16_triton", "tq4", "tq8", "tq4_no_rotation_ref", "tq8_no_rotation_ref"],
    )


def quantizer(args: argparse.Namespace) -> None:
    """Per-vector relative error of the quantizer alone (PyTorch reference, CPU is fine): rotation vs none,
    Gaussian vectors vs vectors with 4 channels x20. 4096 vectors x 2 heads, seed 0."""
    from hwtune.kernels import hadamard

    rows = []
    gen = torch.Generator().manual_seed(0)
    for d in (64, 128, 256):
        for outliers in (0, 4):
            x = torch.randn(4096, 2, d, generator=gen)
            x[..., :outliers] *= 20.0
            signs = hadamard.random_signs(2, d)
            row = {"head": d, "data": "outlier_channels" if outliers else "gaussian"}
            for bits in (4, 8):
                codes, scale, zero = tq.quantize_reference(x, signs, bits)
                rot = tq.dequantize_reference(codes, scale, zero, signs)
                row[f"rot{bits}"] = ((rot - x).norm(dim=-1) / x.norm(dim=-1)).mean().item()
                raw = tq.round_trip_without_rotation(x, bits)
                row[f"norot{bits}"] = ((raw - x).norm(dim=-1) / x.norm(dim=-1)).mean().item()
            rows.append(row)
    RESULTS["quantizer"] = rows
    table(
        "quantizer mean relative error per vector (rotated vs not)",
        rows,
        ["head", "data", "rot4", "norot4", "rot8", "norot8"],
    )


SECTIONS = {
    "quantizer": quantizer,
    "floors": floors,
    "decode": decode,
    "prefill": prefill,
    "turboquant": turboquant,
    "memory": memory,
    "error": error,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write results as JSON here")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {list(SECTIONS)}")
    ap.add_argument("--tune", action="store_true", help="also search config_space on headline shapes (slower)")
    ap.add_argument("--page", type=int, default=16, help="page (block) size, default 16")
    ap.add_argument("--inner", type=int, default=5, help="launches per CUDA-graph replay")
    ap.add_argument(
        "--fi-decode",
        default="fa2,fa2-tc,fa3-tc",
        help="FlashInfer decode tactics to compare with (comma-separated; 'none' for none)",
    )
    ap.add_argument("--fi-prefill", default="fa2,fa3", help="FlashInfer prefill tactics ('none' for none)")
    ap.add_argument("--reps", type=int, default=30, help="timed replays per measurement (median)")
    args = ap.parse_args()
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        print(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}", file=sys.stderr)
        return 2
    global FI_DECODE, FI_PREFILL
    FI_DECODE = {t for t in args.fi_decode.split(",") if t and t != "none"}
    FI_PREFILL = {t for t in args.fi_prefill.split(",") if t and t != "none"}
    RESULTS["env"] = {
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "page": args.page,
    }
    if sections != ["quantizer"]:
        if not torch.cuda.is_available():
            print(
                "kernels_bench needs a CUDA GPU for every section but 'quantizer': torch sees none. "
                "Run it on the GPU node.",
                file=sys.stderr,
            )
            return 1
        prop = torch.cuda.get_device_properties(0)
        RESULTS["env"].update(device=prop.name, sms=prop.multi_processor_count, l2_bytes=l2_bytes())
    try:
        RESULTS["env"]["flashinfer"] = __import__("flashinfer").__version__
    except Exception:
        RESULTS["env"]["flashinfer"] = None
    print(json.dumps(RESULTS["env"]))
    for name in sections:
        if name in ("decode", "prefill") and "floors" not in RESULTS:
            floors(args)
        SECTIONS[name](args)
        if args.out:  # written after every section: a timeout keeps what finished
            args.out.write_text(json.dumps(RESULTS, indent=2, default=str))
    for note in RESULTS.get("notes", []):
        print("note:", note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

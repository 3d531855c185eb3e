"""TURBOQUANT 4-bit decode at long context and small batch: the auto tactic against a config search and
FlashInfer's best bf16 tactic on the same data (issue 5: "faster from 32k"; the NHD layout was 0.87x at
1 x 128k with the auto tactic).

For each (batch, context) and code layout: auto config, then every (KV tile, splits, warps, stages) of a
small grid; every config's output is checked against the auto config's (max abs difference) before it is
timed. Timing and problems come from kernels_bench (graph replay, cold L2 when the data fits 3x L2).

    python benchmarks/experiments/tq_long_context.py [seconds]
    python benchmarks/experiments/tq_long_context.py [seconds] --ab   # auto split rule: before vs now

``--ab`` times, on the headline TURBOQUANT grid and the shapes above, the auto config as it was (splits for
about 3 programs per SM, not rounded) against the current one (rounded down to a power of two), alternated
twice, both checked against each other first.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kernels_bench as kb  # noqa: E402

from hwtune.kernels import turboquant as tq  # noqa: E402
from hwtune.kernels._common import num_sms  # noqa: E402
from hwtune.kernels.configs import (  # noqa: E402
    TritonAttnConfig,
    choose_num_splits,
    turboquant_config,
    workspace_size,
)

SHAPES = ((1, 131072), (1, 32768), (2, 65536), (4, 32768))
GRID = list(itertools.product((128, 256), (8, 16, 32, 48, 64, 96, 128), (4, 8), (3, 4)))


def tq_call(p: dict, cache: tq.TurboQuantCache, config: TritonAttnConfig, out: torch.Tensor):
    ws = torch.empty(
        max(
            1,
            workspace_size(
                num_tokens=p["q"].shape[0],
                num_heads=p["h_q"],
                head_size=p["head_size"],
                num_splits=config.num_splits or 1,
            ),
        ),
        device="cuda",
    )
    return lambda: tq.paged_attention(
        p["q"],
        cache,
        p["table"],
        p["seq_lens"],
        p["qsl"],
        max_query_len=1,
        max_seq_len=p["ctx"],
        out=out,
        lse=p["lse"],
        softmax_scale=p["head_size"] ** -0.5,
        config=config,
        workspace=ws,
    )


def ab(budget: float) -> int:
    start = time.time()
    print(torch.cuda.get_device_name(0), time.strftime("%Y-%m-%d"), "auto split rule A/B (old, new)")
    sms = num_sms(torch.device("cuda"))
    for batch, ctx in ((16, 8192), (16, 32768), (16, 131072), (1, 131072), (64, 8192), *SHAPES[1:]):
        p = kb.paged(batch, ctx)
        tq_bytes = batch * ctx * tq.bytes_per_token(p["h_kv"], p["head_size"], 4)
        for layout in ("NHD", "HND"):
            cache = kb.tq_cache_from_bf16(p, 4, layout)
            new = turboquant_config(
                bits=4,
                phase="decode",
                batch=batch,
                max_query_len=1,
                max_seq_len=ctx,
                head_size=p["head_size"],
                gqa_group=p["h_q"] // p["h_kv"],
                num_sms=sms,
                num_kv_heads=p["h_kv"],
            )
            old_splits = choose_num_splits(
                programs=batch * p["h_kv"],
                max_seq_len=ctx,
                num_sms=sms,
                decode=True,
                per_sm=3,
                min_tokens=4 * new.block_n,
            )
            old = TritonAttnConfig(new.block_n, old_splits, new.num_warps, new.num_stages)
            o_old, o_new = torch.empty_like(p["q"]), torch.empty_like(p["q"])
            calls = {"old": tq_call(p, cache, old, o_old), "new": tq_call(p, cache, new, o_new)}
            for c in calls.values():
                c()
            err = (o_old.float() - o_new.float()).abs().max().item()
            times: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(2 if old != new else 1):
                for side in ("old", "new") if old != new else ("new",):
                    times[side].append(kb.time_ms(calls[side], touched_bytes=tq_bytes, inner=5, reps=15)[0] * 1e3)
            print(
                f"b{batch} ctx{ctx} {layout}: old {old.name()} {[round(t, 1) for t in times['old']]} us; "
                f"new {new.name()} {[round(t, 1) for t in times['new']]} us; max|d| {err:.2g}"
            )
            del cache
        del p
        torch.cuda.empty_cache()
        if time.time() - start > budget:
            print("budget spent")
            break
    return 0


def main() -> int:
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
    if "--ab" in sys.argv:
        return ab(budget)
    start = time.time()
    kb.FI_DECODE.clear()
    kb.FI_DECODE.update({"fa2", "fa2-tc"})
    print(torch.cuda.get_device_name(0), time.strftime("%Y-%m-%d"))
    for batch, ctx in SHAPES:
        p = kb.paged(batch, ctx)
        fi = {
            name: kb.time_ms(c, touched_bytes=kb.kv_bytes(p), inner=5, reps=15)[0] * 1e3
            for name, c in kb.flashinfer_decode_calls(p).items()
        }
        fi_best = min(fi.values()) if fi else float("nan")
        tq_bytes = batch * ctx * tq.bytes_per_token(p["h_kv"], p["head_size"], 4)
        for layout in ("NHD", "HND"):
            cache = kb.tq_cache_from_bf16(p, 4, layout)
            auto = turboquant_config(
                bits=4,
                phase="decode",
                batch=batch,
                max_query_len=1,
                max_seq_len=ctx,
                head_size=p["head_size"],
                gqa_group=p["h_q"] // p["h_kv"],
                num_sms=num_sms(torch.device("cuda")),
                num_kv_heads=p["h_kv"],
            )
            ref = torch.empty_like(p["q"])
            tq_call(p, cache, auto, ref)()
            auto_us = kb.time_ms(tq_call(p, cache, auto, ref), touched_bytes=tq_bytes, inner=5, reps=15)[0] * 1e3
            results = []
            for block_n, splits, warps, stages in GRID:
                if time.time() - start > budget:
                    break
                cfg = TritonAttnConfig(block_n, splits, warps, stages)
                out = torch.full_like(p["q"], float("nan"))
                try:
                    call = tq_call(p, cache, cfg, out)
                    call()
                    torch.cuda.synchronize()
                except Exception as exc:  # reported, not timed
                    print(f"  fail {cfg.name()} {type(exc).__name__}: {str(exc)[:100]}")
                    continue
                err = (out.float() - ref.float()).abs().max().item()
                if not err < 2e-2:
                    print(f"  WRONG {cfg.name()} max|d| {err:.3g}")
                    continue
                us = kb.time_ms(call, touched_bytes=tq_bytes, inner=5, reps=15)[0] * 1e3
                results.append((us, cfg.name()))
            results.sort()
            print(
                f"b{batch} ctx{ctx} {layout}: FlashInfer bf16 best {fi_best:.1f} us {fi}; auto {auto.name()} "
                f"{auto_us:.1f} us ({fi_best / auto_us:.2f}x); best {[(round(u, 1), n) for u, n in results[:5]]}"
            )
            del cache
        del p
        torch.cuda.empty_cache()
        if time.time() - start > budget:
            print("budget spent")
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())

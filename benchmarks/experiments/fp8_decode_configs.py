"""TRITON_ATTN decode with an fp8 e4m3 KV cache: the auto config against a config search (issue 5: decode
within 10 % of FlashInfer; fp8 was 1.09-1.19x slower after the fp16-dot change).

An fp8 tile of 64 tokens is half the bytes of a bf16 one, so the per-tile work (page lookups, conversions,
two small dots, the online-softmax update) weighs twice as much per byte; this searches KV tiles of 64, 128
and 256 tokens, split counts around auto, warps and stages. Each config's output is checked against the
auto config's before it is timed; timing is kernels_bench's.

    python benchmarks/experiments/fp8_decode_configs.py [seconds]
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

from hwtune.kernels.configs import TritonAttnConfig  # noqa: E402

SHAPES = ((16, 8192, "NHD"), (16, 32768, "HND"), (64, 8192, "NHD"), (1, 131072, "NHD"), (4, 16384, "NHD"))


def main() -> int:
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
    start = time.time()
    print(torch.cuda.get_device_name(0), time.strftime("%Y-%m-%d"), "fp8 e4m3 KV decode, Hq 32 / Hkv 8 / D 128")
    for batch, ctx, layout in SHAPES:
        p = kb.paged(batch, ctx, layout=layout, kv_dtype=torch.float8_e4m3fn)
        auto = kb.auto_config(p)
        s = auto.num_splits or 1
        ref = p["out"]
        kb.triton_call(p, auto)()
        ref = ref.clone()
        auto_us = kb.time_ms(kb.triton_call(p, auto), touched_bytes=kb.kv_bytes(p), inner=5, reps=15)[0] * 1e3
        results = []
        for bn, sp, warps, stages in itertools.product(
            (64, 128, 256), sorted({max(1, s // 4), max(1, s // 2), s, min(128, 2 * s)}), (4, 8), (2, 3, 4)
        ):
            if time.time() - start > budget:
                break
            cfg = TritonAttnConfig(bn, sp, warps, stages)
            try:
                call = kb.triton_call(p, cfg)
                p["out"].fill_(float("nan"))
                call()
                torch.cuda.synchronize()
            except Exception as exc:  # reported, not timed
                print(f"  fail {cfg.name()} {type(exc).__name__}: {str(exc)[:100]}")
                continue
            err = (p["out"].float() - ref.float()).abs().max().item()
            if not err < 2e-2:
                print(f"  WRONG {cfg.name()} max|d| {err:.3g}")
                continue
            results.append((kb.time_ms(call, touched_bytes=kb.kv_bytes(p), inner=5, reps=15)[0] * 1e3, cfg.name()))
        results.sort()
        print(
            f"b{batch} ctx{ctx} {layout} fp8: auto {auto.name()} {auto_us:.1f} us; "
            f"best {[(round(u, 1), n) for u, n in results[:6]]}"
        )
        del p
        torch.cuda.empty_cache()
        if time.time() - start > budget:
            print("budget spent")
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How many (token, head) rows one split-KV merge program should combine (``split_kv.merge_rows_per_program``).

For prefill-style split launches (96-1024 tokens x 8-32 heads of 128), decode ones (32-128 requests x 32 heads of 128)
and DeepSeek-V3 TP 8 MLA decode (8-128 requests x 16 heads of 512), at the split counts those launches use, it times
``merge_splits`` alone (median of one call replayed from a CUDA graph, no L2 flush) with 1 row per program (the
per-row kernel, head slices by ``merge_block_d``) and with 2-32 rows (``_merge_rows_kernel``), and checks each output
and LSE against a torch logsumexp merge. One JSON line per (shape, rows per program).

    python benchmarks/experiments/merge_rows.py [--out FILE.jsonl]   (needs a CUDA GPU)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from mla_decode_gap import graph_us  # noqa: E402
from probe_jobs import emit  # noqa: E402

from hwtune.kernels import split_kv  # noqa: E402
from hwtune.kernels.configs import next_pow2  # noqa: E402

SHAPES = [  # (tokens, heads, head size, splits)
    (96, 32, 128, 4), (96, 32, 128, 8), (96, 32, 128, 16), (96, 8, 128, 16), (384, 32, 128, 3), (384, 32, 128, 8),
    (1024, 32, 128, 2), (128, 32, 128, 8), (32, 32, 128, 8), (8, 16, 512, 23), (8, 16, 512, 33), (32, 16, 512, 8),
    (128, 16, 512, 2), (48, 16, 512, 5),
]  # fmt: skip


def case(tokens: int, heads: int, head: int, splits: int, rows: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)
    part_o = torch.randn(splits, tokens, heads, head, device="cuda", generator=g)
    part_lse = torch.randn(splits, tokens, heads, device="cuda", generator=g) * 3
    out = torch.empty(tokens, heads, head, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(tokens, heads, device="cuda")
    qsl = torch.tensor([0, tokens], dtype=torch.int32, device="cuda")

    def run() -> None:
        split_kv.merge_splits(part_o, part_lse, out, lse, qsl, 1, rows_per_program=rows)

    run()
    w = torch.softmax(part_lse, 0)
    ref = (w[..., None] * part_o).sum(0)
    err = float((out.float() - ref).norm() / ref.norm())
    lse_err = float((lse - torch.logsumexp(part_lse, 0)).abs().max())
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return {"tokens": tokens, "heads": heads, "head": head, "splits": splits, "rows_per_program": rows,
            "rule": split_kv.merge_rows_per_program(tokens, heads, head, sms),
            "graph_us": round(graph_us(run), 2), "rel_l2": err, "lse_max_abs": lse_err}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    out = args.out.open("a") if args.out else None
    for tokens, heads, head, splits in SHAPES:
        for rows in (1, 2, 4, 8, 16, 32):
            if rows * next_pow2(head) <= 2 * split_kv.MERGE_TILE:
                emit(case(tokens, heads, head, splits, rows), out)


if __name__ == "__main__":
    main()

"""HWTUNE_TRITON_ATTN's prefill with the block table read some tiles at a time outside the pipelined loop
(``page_chunks.BT_CHUNK_TILES`` and ``BT_CHUNK_TILES_TMA``, set together; ``page_chunk``) against reading each tile's
entries in the loop (0, as before 2026-11-28), on the probe's problems (random page order), same process, same
configs: auto's and the tuned space's usual 128 x 128 and 128 x 64 tiles. Every chunk size's output must agree with
the first's bit for bit (the same arithmetic). Times: the
median call replayed from a CUDA graph (no L2 flush; ``mla_decode_gap.graph_us``).

Why: Triton's pipeliner splits a loop's stages among the levels of loads that feed each other, so a block-table load
in the loop costs the K/V tiles a stage of prefetch; with every page computed instead (a contiguous table, an
experiment: bt_free_h200_2026-11-28.jsonl) the prefill took 13-19 % less time on an H200.

    python benchmarks/experiments/bt_chunks.py [--tiles 0,16,32] [--label NAME] [--out FILE.jsonl]   (CUDA GPU)

Each line: the config, ``us`` (median per chunk size, by tiles) and ``identical``. The first committed run
(bt_chunks_h200_2026-11-28.jsonl, an earlier format: ``in_loop_us`` and ``chunked_us`` for 0 and 16 tiles) predates
``bt_chunk``'s rule: 64-position tiles on 16-token pages were chunked too, and measured -5.5 to +5.5 %; they now keep
the load in the loop, so both columns of those rows measure the same launch. The second
(bt_chunk_sizes_h200_2026-11-28.jsonl) compared 0, 16, 32 and 64 tiles (label ``main``), and 0, 16 and 32 with the
outer loop flattened into the inner (label ``flatten``: ``bt_flatten_h200_2026-11-28.patch`` beside it applied, no
effect); a second machine compared 16, 64 and 128 (label ``main_run2``); a third 0, 16 and 64 with the rule widened
to 64-position gathered tiles (label ``n64_chunks``: ``bt_chunks_n64_h200_2026-11-29.patch`` applied, 2026-11-29).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from mla_decode_gap import graph_us  # noqa: E402

from hwtune.core.model_config import attention_spec, load_model_config  # noqa: E402
from hwtune.core.types import AttentionWorkload  # noqa: E402
from hwtune.kernels import page_chunks  # noqa: E402
from hwtune.kernels.configs import TritonAttnConfig  # noqa: E402
from hwtune.probes.attention.candidates.base import load_candidate  # noqa: E402
from hwtune.probes.attention.problem import build_problem  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: (model, TP, page, chunk, cached prefix): long and short chunks of the regret runs' misses, two page sizes
CASES = [
    ("qwen3-30b-a3b.json", 4, 16, 6000, 30000),
    ("qwen3-30b-a3b.json", 4, 16, 3000, 6000),
    ("qwen3-30b-a3b.json", 4, 16, 1536, 1500),
    ("qwen3-30b-a3b.json", 4, 16, 384, 6000),
    ("qwen3-30b-a3b.json", 4, 16, 96, 30000),
    ("qwen3-30b-a3b.json", 4, 128, 6000, 30000),
    ("llama-3.1-8b.json", 1, 16, 4096, 0),
    ("llama-3.1-8b.json", 1, 16, 1536, 6000),
    ("llama-3.3-70b-instruct.json", 8, 16, 3000, 9000),
]
TILES = [(128, 128, 8, 3), (128, 64, 8, 3)]  # (query rows, KV positions, warps, stages), auto's splits


def ab(run, out, tiles_list: list[int]) -> dict:  # noqa: ANN001
    """Each chunk size's median time (``us``, by tiles; 0: the load in the loop) and whether every output equals the
    first's bit for bit."""
    row, want, same = {"us": {}}, None, True
    defaults = page_chunks.BT_CHUNK_TILES, page_chunks.BT_CHUNK_TILES_TMA
    for tiles in tiles_list:  # both kinds of tile at once: a case's configs are gathers or TMA tiles
        page_chunks.BT_CHUNK_TILES = page_chunks.BT_CHUNK_TILES_TMA = tiles
        out.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        if want is None:
            want = out.clone()
        else:
            same = same and bool(torch.equal(out, want))
        row["us"][str(tiles)] = round(graph_us(run), 2)
    page_chunks.BT_CHUNK_TILES, page_chunks.BT_CHUNK_TILES_TMA = defaults
    row["identical"] = same
    return row


def each_config(label: str) -> Iterator[tuple[dict, object]]:
    """For every case and config (auto's and ``TILES``, auto's split count): the result line's fields so far and the
    probe's runner prepared on the case's problem with that config."""
    for model, tp, page, chunk, prefix in CASES:
        spec = attention_spec(load_model_config(ROOT / "tests/data/models" / model), tp)
        w = AttentionWorkload(dataclasses.replace(spec, block_size=page), "prefill", 1, chunk + prefix, query_len=chunk)
        runner = load_candidate("HWTUNE_TRITON_ATTN").runner(w, "auto", "cuda")
        p = build_problem(w, "cuda", seed=0)
        runner.prepare(p)
        auto = runner.config
        configs = [auto] + [
            TritonAttnConfig(block_n=n, num_splits=auto.num_splits, num_warps=wp, num_stages=st, block_m=m)
            for m, n, wp, st in TILES
        ]
        for cfg in dict.fromkeys(configs):
            runner.config, runner.workspace = cfg, runner._workspace(p, [cfg])
            line = {"model": model, "tp": tp, "page": page, "chunk": chunk, "prefix": prefix, "config": cfg.name()}
            yield line | {"label": label}, runner


def write_line(line: dict, out_path: Path | None) -> None:
    """Print one result line and append it to ``out_path`` when given."""
    print(json.dumps(line), flush=True)
    if out_path:
        with out_path.open("a") as f:
            f.write(json.dumps(line) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tiles", default="0,16", help="chunk sizes to compare, comma-separated (0: the load in the loop)")
    ap.add_argument("--label", default="", help="a name for the kernel tree measured (e.g. a patch applied)")
    args = ap.parse_args()
    tiles_list = [int(t) for t in args.tiles.split(",")]
    for line, runner in each_config(args.label):
        try:
            line |= ab(runner.run, runner.out, tiles_list)
        except Exception as e:  # noqa: BLE001 - a config that cannot run is a result line
            line["error"] = repr(e)[:300]
        write_line(line, args.out)


if __name__ == "__main__":
    main()

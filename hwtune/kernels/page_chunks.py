"""TRITON_ATTN's prefill reads its block table in chunks: the entries of ``BT_CHUNK_TILES`` KV tiles at once (TMA
tiles: ``BT_CHUNK_TILES_TMA``), before an inner loop over those tiles (``page_chunk``), each tile taking its own out of
the chunk without a load (``chunk_pages``), and ``bt_chunk`` says for which launches. Used by
``triton_attention._paged_attn_kernel``'s unmasked loop; the masked (diagonal and tail) tiles and decode-style launches
load their entries in the loop.
"""

from __future__ import annotations

import triton
import triton.language as tl

from hwtune.kernels.configs import next_pow2

#: KV tiles whose block-table entries a prefill-style launch reads at once, outside its pipelined loop, for gathered
#: tiles (``page_chunk``; ``bt_chunk`` says where); 0 reads each tile's entries in the loop. WHY: Triton's software
#: pipeline prefetches a load that depends on another load of the same iteration less deeply: with 3 stages it gives the
#: block-table load one stage and the K/V tiles one, instead of two to the K/V tiles. On an H200 (2026-11-28,
#: benchmarks/results/experiments/bt_free_h200_2026-11-28.jsonl) a prefill with every page computed (a contiguous table,
#: no table read in the loop) took 13-19 % less time. Longer chunks gained more, up to 64 tiles
#: (bt_chunk_sizes_h200_2026-11-28.jsonl, bit-identical outputs): auto's 128-position tiles on 16-token pages took
#: 2.9-8.7 % less time than with the load in the loop at 16 tiles a chunk, 7.4-18.5 % at 64 (eight shapes of three
#: models); 128 tiles took longer than 64 at seven of the eight. Fewer chunks mean fewer restarts of the loop's
#: pipeline, but that is not the whole cause: 96 tokens on 30000 cached (15 splits of at most 16 tiles, one chunk each
#: at every size) gained 5.4 % at 16, 10.7 % at 32 and 13.1 % at 64. 64-position gathered tiles gained nothing at 16
#: (-5.5 to +5.5 %, bt_chunks_h200_2026-11-28.jsonl) nor at 64 (-7.8 to +6.6 %, slower at five of eight shapes; label
#: n64_chunks) and keep the load in the loop (docs/kernels.md "The block table read in chunks").
BT_CHUNK_TILES = 64
#: The same for TMA tiles: on 128-token pages, 128- and 64-position tiles took 11.2 and 14.6 % less time at 32 tiles a
#: chunk, 9.7 and 14.5 % at 64 (one shape, bt_chunk_sizes_h200_2026-11-28.jsonl).
BT_CHUNK_TILES_TMA = 32


@triton.jit
def page_chunk(bt_row, c0, kv_end, BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr, BT_PAGES: tl.constexpr):
    """The block-table entries of the pages from tile ``c0``'s on (``BT_PAGES`` of them, those past the context 0):
    (the first one's index, the entries)."""
    first = (c0 * BLOCK_N) // PAGE_SIZE
    idx = first + tl.arange(0, BT_PAGES)
    return first, tl.load(bt_row + idx, mask=idx * PAGE_SIZE < kv_end, other=0)


@triton.jit
def chunk_pages(
    chunk,
    first,
    j,
    BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BT_PAGES: tl.constexpr,
):
    """Tile ``j``'s entries from a ``page_chunk``: its page where a tile lies inside one page, else each position's
    page (tiles of whole pages). No load: the tile's K/V addresses depend on no load of the loop, so the compiler's
    pipeline prefetches them ``num_stages - 1`` tiles ahead (a block-table load in the loop is an indirection it splits
    the stages with)."""
    if PAGE_SIZE % BLOCK_N == 0:
        rel = (j * BLOCK_N) // PAGE_SIZE - first
        return tl.sum(tl.where(tl.arange(0, BT_PAGES) == rel, chunk, 0), axis=0)
    else:  # a select, not tl.gather: gathering these indices hit illegal addresses on an H200 (triton 3.6)
        PPT: tl.constexpr = BLOCK_N // PAGE_SIZE
        row = ((j * BLOCK_N) // PAGE_SIZE - first) // PPT
        rows = tl.reshape(chunk, (BT_PAGES // PPT, PPT))
        sel = tl.sum(tl.where(tl.arange(0, BT_PAGES // PPT)[:, None] == row, rows, 0), axis=0)
        return tl.reshape(tl.broadcast_to(sel[:, None], (PPT, PAGE_SIZE)), (BLOCK_N,))


def bt_chunk(*, prefill_style: bool, page_size: int, block_n: int, tma: bool, num_stages: int) -> tuple[int, int]:
    """(tiles, block-table entries) of one ``page_chunk``, or (0, 1) where the loop reads the table itself. Chunks
    for prefill-style launches at up to 3 stages of TMA tiles of 64 or more positions (inside a page) and of gathered
    tiles of 128 or more positions over whole pages: what was measured faster (``BT_CHUNK_TILES``,
    ``BT_CHUNK_TILES_TMA``; TMA tiles at one shape only). The entries: those a chunk spans from any first tile, a
    power of two. 4-stage configs keep the load in the loop: with it out, a 128 x 128 TMA config at 4 stages needed
    294944 bytes of shared memory on an H200 (limit 232448), where it fits with the load in the loop."""
    tiles = BT_CHUNK_TILES_TMA if tma else BT_CHUNK_TILES
    if not prefill_style or tiles <= 0 or num_stages > 3:
        return 0, 1
    if (tma and block_n >= 64) or (block_n >= 128 and block_n % page_size == 0):
        if block_n % page_size == 0:  # tiles of whole pages: exactly their pages
            return tiles, tiles * block_n // page_size
        return tiles, next_pow2(-(-tiles * block_n // page_size) + 1)  # TMA tiles from mid-page
    return 0, 1

"""Tactics of hwtune's Triton attention kernels: tile sizes, KV splits, warps, stages.

WHY a separate, torch-free module: the tuner enumerates and names tactics (and the selector may show their
names) without importing torch or triton. ``default_config`` is the "auto" tactic: a heuristic that only
needs host integers (batch, lengths, SM count), so picking a config never syncs the device and works while
a CUDA graph is being captured. ``config_space`` is what the "tuned" tactic searches.

The heuristic's reasoning, for an H100 (132 SMs):

- Decode (few query tokens per request) is bound by reading the KV cache. One program handles one
  (request, KV head, KV split) and all query rows that share that KV head (GQA group x query tokens, packed
  into one ``tl.dot`` tile), so every KV page is read once per KV head. Splits are added until there are
  about ``8 x num_sms`` programs (small programs, so the last wave is short), but never fewer than
  ``MIN_TOKENS_PER_SPLIT`` tokens per split (the partials written and merged stay a few percent of the KV
  bytes: ``2 * splits * group / seq_len`` of them).
- Prefill is bound by tensor-core throughput: big query tiles (128 rows), 64-token KV tiles, 8 warps, a
  3-stage pipeline; splits only when the query tiles alone cannot fill the device.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

MAX_DECODE_QUERY_LEN = 16
"""Requests with at most this many new tokens use the decode-style launch (all query rows of a request in
one tile, split-KV); a batch whose longest query is longer uses the prefill-style launch."""

MIN_TOKENS_PER_SPLIT = 256
MAX_SPLITS = 128
HEAD_SIZES = (64, 96, 128, 256)
PAGE_SIZE_RANGE = (16, 128)  # multiples of 16


@dataclass(frozen=True)
class TritonAttnConfig:
    """One tactic of the paged attention kernels.

    block_n: KV positions per inner-loop tile. num_splits: KV splits per (request, KV head); None lets the
    launcher choose from the SM count. block_m: query rows per tile (query tokens x GQA heads); None lets
    the launcher choose (decode: the smallest power of two >= 16 that holds a request's rows; prefill: 128,
    64 for head size 256).
    """

    block_n: int
    num_splits: int | None
    num_warps: int
    num_stages: int
    block_m: int | None = None

    def __post_init__(self) -> None:
        for field, value in (("block_n", self.block_n), ("block_m", self.block_m)):
            if value is not None and (value < 16 or value & (value - 1)):
                raise ValueError(f"TritonAttnConfig.{field} must be a power of two >= 16, got {value}")
        if self.num_splits is not None and not 1 <= self.num_splits <= MAX_SPLITS:
            raise ValueError(f"TritonAttnConfig.num_splits must be in 1..{MAX_SPLITS} or None, got {self.num_splits}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"TritonAttnConfig.num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")
        if not 1 <= self.num_stages <= 6:
            raise ValueError(f"TritonAttnConfig.num_stages must be in 1..6, got {self.num_stages}")

    def name(self) -> str:
        """Short stable name used as the tactic's variant in measurement records, e.g. ``n64-s8-w4-st2``."""
        splits = "auto" if self.num_splits is None else str(self.num_splits)
        base = f"n{self.block_n}-s{splits}-w{self.num_warps}-st{self.num_stages}"
        return base if self.block_m is None else f"{base}-m{self.block_m}"


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (>= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers (host-side; no floats, so exact for any size)."""
    return -(-a // b)


def is_decode_shape(max_query_len: int) -> bool:
    """True when every request's query rows fit the decode-style launch."""
    return max_query_len <= MAX_DECODE_QUERY_LEN


def decode_block_m(max_query_len: int, gqa_group: int) -> int:
    """Rows per tile for the decode-style launch: a request's tokens x its GQA group, at least 16 (the
    smallest ``tl.dot`` M), at most 128 (beyond that a request spans several tiles)."""
    return max(16, min(128, next_pow2(max(1, max_query_len) * gqa_group)), next_pow2(gqa_group))


def prefill_block_m(head_size: int, gqa_group: int) -> int:
    """Query rows per prefill tile: 128 for head 96/128; 64 for head 256 (shared memory) and head 64
    (H100, 4096-token causal prefill, MHA 16 heads: 157 us with 64 rows x 4 warps vs 237 with 128 x 8)."""
    return max(128 if 64 < head_size <= 128 else 64, next_pow2(gqa_group))


def choose_num_splits(
    *,
    programs: int,
    max_seq_len: int,
    num_sms: int,
    decode: bool,
    per_sm: int | None = None,
    min_tokens: int | None = None,
) -> int:
    """KV splits so that ``programs * splits`` reaches about ``per_sm`` programs per SM (default 8 for
    decode, 2 for prefill), keeping at least ``min_tokens`` tokens per split (default MIN_TOKENS_PER_SPLIT
    for decode, 2048 for prefill)."""
    programs = max(1, programs)
    default_per_sm, default_min = (8, MIN_TOKENS_PER_SPLIT) if decode else (2, 2048)
    per_sm = per_sm or default_per_sm
    min_tokens = min_tokens or default_min
    target = per_sm * max(1, num_sms)
    if programs >= target:
        return 1
    splits = min(cdiv(target, programs), cdiv(max(1, max_seq_len), min_tokens), MAX_SPLITS)
    return max(1, splits)


def _prefill_splits(
    *, block_m: int, batch: int, kv_heads: int, max_query_len: int, max_seq_len: int, gqa_group: int, num_sms: int
) -> int:
    """KV splits of a prefill-style launch whose query tiles hold ``block_m`` rows."""
    programs = _query_tile_programs(block_m, batch, kv_heads, max_query_len, gqa_group)
    return choose_num_splits(programs=programs, max_seq_len=max_seq_len, num_sms=num_sms, decode=False)


def _query_tile_programs(block_m: int, batch: int, kv_heads: int, max_query_len: int, gqa_group: int) -> int:
    """Programs of a prefill-style launch before its KV splits: query tiles of ``block_m`` rows x KV heads."""
    return batch * kv_heads * cdiv(max(1, max_query_len), max(1, block_m // gqa_group))


def _big_tile_decode_splits(*, programs: int, max_seq_len: int, num_sms: int, block_n: int) -> int:
    """Splits of a decode launch whose KV tiles hold about 16 KiB (TURBOQUANT codes, fp8 KV): up to about 3
    programs per SM, at least 4 tiles per split, rounded down to a power of two (equal whole tiles per
    split for power-of-two contexts). At 1 x 128k (8 KV heads, TURBOQUANT 4-bit) 32 splits took 140 us, 48
    took 165 and the unrounded 50 took 166; 2 x 64k and 4 x 32k were fastest at 16 and 8 (H100,
    2026-11-21, benchmarks/results/experiments/tq_long_context_h100_2026-11-21.txt)."""
    splits = choose_num_splits(
        programs=programs, max_seq_len=max_seq_len, num_sms=num_sms, decode=True, per_sm=3, min_tokens=4 * block_n
    )
    return 1 << (splits.bit_length() - 1)


def _validate_head_size(head_size: int) -> None:
    if head_size not in HEAD_SIZES:
        raise ValueError(f"hwtune's Triton attention supports head sizes {HEAD_SIZES}, got {head_size}")


def default_config(
    *,
    phase: str,
    batch: int,
    max_query_len: int,
    max_seq_len: int,
    head_size: int,
    gqa_group: int,
    num_sms: int,
    num_kv_heads: int | None = None,
    kv_cache_bytes: int = 2,
) -> TritonAttnConfig:
    """The "auto" tactic. ``phase`` ("decode", "prefill", "mixed") is informative: the launch style follows
    ``max_query_len`` (a mixed batch with a long prefill chunk runs prefill-style). Pass ``num_kv_heads``:
    without it the split count assumes a single KV head (more splits than needed, still correct).
    ``kv_cache_bytes`` is the size of one cache element (2 for bf16/fp16, 1 for fp8).

    fp8 decode keeps a KV tile's bytes (twice the tokens, at most 128) and uses TURBOQUANT's split rule
    (about 3 programs per SM, >= 4 tiles per split, rounded down to a power of two) with 2 stages: a search
    on the H100 (2026-11-21, benchmarks/results/experiments/fp8_decode_configs_h100_2026-11-21.txt) found
    128-token tiles with a quarter to a half of the bf16 rule's splits fastest (the resulting auto configs
    take 21-26 % less time on all five shapes tried), where 64-token fp8 tiles spent their time on per-tile
    work, as TURBOQUANT's 64-token tiles had."""
    if phase not in ("decode", "prefill", "mixed"):
        raise ValueError(f"phase must be 'decode', 'prefill' or 'mixed', got {phase!r}")
    _validate_head_size(head_size)
    kv_heads = num_kv_heads or 1
    if is_decode_shape(max_query_len):
        block_m = decode_block_m(max_query_len, gqa_group)
        block_q = max(1, block_m // gqa_group)
        programs = batch * kv_heads * cdiv(max(1, max_query_len), block_q)
        block_n = {64: 128, 96: 64, 128: 64, 256: 32}[head_size]
        if kv_cache_bytes == 1:
            block_n = min(128, 2 * block_n)
            splits = _big_tile_decode_splits(
                programs=programs, max_seq_len=max_seq_len, num_sms=num_sms, block_n=block_n
            )
            return TritonAttnConfig(block_n=block_n, num_splits=splits, num_warps=4, num_stages=2)
        splits = choose_num_splits(programs=programs, max_seq_len=max_seq_len, num_sms=num_sms, decode=True)
        return TritonAttnConfig(
            block_n=block_n, num_splits=splits, num_warps=4, num_stages=2 if head_size == 256 else 3
        )
    block_m = prefill_block_m(head_size, gqa_group)
    splits = _prefill_splits(
        block_m=block_m,
        batch=batch,
        kv_heads=kv_heads,
        max_query_len=max_query_len,
        max_seq_len=max_seq_len,
        gqa_group=gqa_group,
        num_sms=num_sms,
    )
    if head_size == 256:
        return TritonAttnConfig(block_n=32, num_splits=splits, num_warps=4, num_stages=2, block_m=block_m)
    if head_size == 64:  # measured best on the H100 of config_space (2026-11-21)
        return TritonAttnConfig(
            block_n=64, num_splits=splits, num_warps=4 if block_m <= 64 else 8, num_stages=2, block_m=block_m
        )
    # head 96/128: 128-token KV tiles (4096-token causal prefill on an H100: 392 us vs 457 with 64-token
    # tiles, 2026-11-21), 3 stages with gathers and with TMA loads alike (128-token pages, H100: 334.6 vs
    # 351.8 us with 2 stages at 4096 tokens, 1206 vs 1296 at 8192; prefill_tma_layout_h100_2026-11-21.txt)
    block_n = 128 if block_m >= 128 else 64
    return TritonAttnConfig(
        block_n=block_n, num_splits=splits, num_warps=8 if block_m >= 128 else 4, num_stages=3, block_m=block_m
    )


TQ_TILE_BYTES = 16384
"""TURBOQUANT decode reads about this many bytes of K codes per KV tile (4-bit head 128: 256 tokens), the
size of TRITON_ATTN's bf16 tile: with 4x smaller rows, 64-token tiles spent their time on per-tile work
(four small dots, scale loads) rather than on memory (H100, 16 x 32k: 780 us with 64-token tiles, 538
with 256; 2026-11-21)."""


def turboquant_config(
    *,
    bits: int,
    phase: str,
    batch: int,
    max_query_len: int,
    max_seq_len: int,
    head_size: int,
    gqa_group: int,
    num_sms: int,
    num_kv_heads: int | None = None,
) -> TritonAttnConfig:
    """TURBOQUANT's "auto" tactic. Decode: KV tiles of about ``TQ_TILE_BYTES`` of codes (32..256 tokens),
    4 warps, 3 stages, and fewer splits than TRITON_ATTN (up to about 3 programs per SM, at least 4 tiles
    per split, rounded down to a power of two): bigger tiles already keep each SM busy. Prefill-style launches
    keep the configuration TURBOQUANT was verified with (64-token KV tiles; 32 for head 256)."""
    if bits not in (4, 8):
        raise ValueError(f"TURBOQUANT codes are 4 or 8 bits, got {bits}")
    if phase not in ("decode", "prefill", "mixed"):
        raise ValueError(f"phase must be 'decode', 'prefill' or 'mixed', got {phase!r}")
    _validate_head_size(head_size)
    kv_heads = num_kv_heads or 1
    if not is_decode_shape(max_query_len):
        block_m = max(64 if head_size > 128 else 128, next_pow2(gqa_group))  # head 64 too, unlike TRITON_ATTN
        splits = _prefill_splits(
            block_m=block_m,
            batch=batch,
            kv_heads=kv_heads,
            max_query_len=max_query_len,
            max_seq_len=max_seq_len,
            gqa_group=gqa_group,
            num_sms=num_sms,
        )
        return TritonAttnConfig(
            block_n=32 if head_size == 256 else 64,
            num_splits=splits,
            num_warps=8 if block_m >= 128 else 4,
            num_stages=2 if head_size == 256 else 3,
            block_m=block_m,
        )
    block_n = max(32, min(256, next_pow2(TQ_TILE_BYTES // (head_size * bits // 8))))
    block_q = max(1, decode_block_m(max_query_len, gqa_group) // gqa_group)
    programs = batch * kv_heads * cdiv(max(1, max_query_len), block_q)
    splits = _big_tile_decode_splits(programs=programs, max_seq_len=max_seq_len, num_sms=num_sms, block_n=block_n)
    return TritonAttnConfig(block_n=block_n, num_splits=splits, num_warps=4, num_stages=3)


#: (query rows, KV positions) of the smaller prefill tiles the ``tuned`` search adds (4 warps, 2 stages, head sizes
#: up to 128) where 64-row query tiles leave SMs idle (a short chunk): a chunk of few tokens has few rows, and smaller
#: tiles spread them over more SMs. On an H200 (2026-11-29, Qwen3-30B-A3B TP 4: 8 query heads a KV head;
#: benchmarks/results/experiments/short_chunk_prefill_h200_2026-11-29.jsonl) a 96-token chunk from an empty prefix took
#: 4.9 us with 16-row tiles (16 x 128) against 6.4 with the best 64-row tile; at 384 and 1536 tokens 64-row tiles
#: stayed the fastest.
SMALL_PREFILL_TILES = ((16, 64), (16, 128), (32, 64), (32, 128))


def config_space(
    *,
    phase: str,
    head_size: int,
    batch: int = 1,
    max_query_len: int = 1,
    max_seq_len: int = 4096,
    gqa_group: int = 1,
    num_sms: int = 132,
    num_kv_heads: int | None = None,
    kv_cache_bytes: int = 2,
) -> list[TritonAttnConfig]:
    """Configs the "tuned" tactic searches for one workload; the "auto" config comes first, no duplicates.

    Decode: KV tile x warps x stages x split counts around auto's (60 or fewer). Prefill: (query tile,
    KV tile) pairs x warps x stages (30 or fewer) at auto's split count. Where a config's query tiles alone give fewer
    programs than SMs (a short chunk, often on a long prefix; ``_with_splits``), the config again at the smallest split
    count whose programs cover every SM (at most one split per two KV tiles), so that tiles are compared at the
    parallelism they can reach, and auto's config with 2, 4, 8 and 16 times its splits (the auto rule keeps 2048 tokens
    a split, which leaves most SMs idle under a 96-token chunk); where 64-row query tiles leave SMs idle, smaller query
    tiles (``SMALL_PREFILL_TILES``). Such a search has a second round (``prefill_split_refinements``). Every config
    here runs correctly; only speed differs."""
    auto = default_config(
        phase=phase,
        batch=batch,
        max_query_len=max_query_len,
        max_seq_len=max_seq_len,
        head_size=head_size,
        gqa_group=gqa_group,
        num_sms=num_sms,
        num_kv_heads=num_kv_heads,
        kv_cache_bytes=kv_cache_bytes,
    )
    shape = dict(
        batch=batch, max_query_len=max_query_len, max_seq_len=max_seq_len, gqa_group=gqa_group, num_sms=num_sms,
        num_kv_heads=num_kv_heads,
    )  # fmt: skip
    more = _decode_space(auto, head_size) if is_decode_shape(max_query_len) else _prefill_space(auto, head_size, shape)
    return list(dict.fromkeys([auto, *more]))


def _decode_space(auto: TritonAttnConfig, head_size: int) -> list[TritonAttnConfig]:
    """A decode's configs: KV tile x warps x stages x split counts around auto's: half, a quarter fewer, auto's, a
    quarter more (at least one either way), double. WHY the quarter steps: on an H200 (2026-11-29, 32, 48 and 128
    requests x 700 tokens of Qwen3-30B-A3B TP 4 and ChatGLM2-6B; CUDA-graph medians in
    benchmarks/results/experiments/decode_splits_h200_2026-11-29.jsonl) the best config with 4 splits beat the best
    with auto's 3 at four of six shapes, by 1.5-9.3 % (two of them within the reruns' noise), and 4 was not
    searched."""
    s = auto.num_splits or 1
    q = max(1, s // 4)
    splits = sorted({max(1, s // 2), max(1, s - q), s, min(MAX_SPLITS, s + q), min(MAX_SPLITS, s * 2)})
    block_ns = (16, 32, 64) if head_size == 256 else (32, 64, 128)
    return [
        TritonAttnConfig(block_n=bn, num_splits=sp, num_warps=warps, num_stages=stages)
        for bn in block_ns
        for warps in (4, 8)
        for stages in (2, 3)
        for sp in splits
    ]


def _prefill_space(auto: TritonAttnConfig, head_size: int, shape: dict) -> list[TritonAttnConfig]:
    """A prefill's configs (``config_space``): (query tile, KV tile) x warps x stages at auto's split count; where a
    config's query tiles leave SMs idle, the config again at the smallest split count whose programs cover every SM
    (``cdiv(num_sms, programs)``, at most ``most``); where 64-row query tiles leave SMs idle, the smaller query tiles;
    and auto's config with 2-16x its splits. ``shape``: ``_with_splits``'s keyword arguments."""
    pairs = (
        ((64, 32), (64, 64), (128, 32)) if head_size == 256 else ((128, 64), (128, 128), (64, 64), (64, 128), (128, 32))
    )
    tiles = [
        (bm, bn, warps, stages)
        for bm, bn in pairs
        for warps in (4, 8)
        for stages in (2, 3, 4)
        if not (head_size == 256 and stages > 2 and bn > 32)  # 256-wide K and V tiles, 3+ stages: shared memory
    ]
    if head_size <= 128 and _idle_sms(64, **shape):
        tiles += [(bm, bn, 4, 2) for bm, bn in SMALL_PREFILL_TILES]

    def covering(programs: int, most: int) -> list[int]:  # every SM given a program, at most ``most`` splits
        return [min(cdiv(shape["num_sms"], programs), most)]

    out = []
    for bm, bn, warps, stages in tiles:
        cfg = TritonAttnConfig(
            block_n=bn, num_splits=auto.num_splits, num_warps=warps, num_stages=stages,
            block_m=max(bm, next_pow2(shape["gqa_group"])),
        )  # fmt: skip
        out += [cfg, *_with_splits(cfg, covering, **shape)]
    s = auto.num_splits or 1  # auto's config with 2-16x its splits, where its query tiles leave SMs idle
    return out + _with_splits(auto, lambda _programs, _most: [k * s for k in (2, 4, 8, 16)], **shape)


def _idle_sms(
    block_m: int, *, batch: int, max_query_len: int, gqa_group: int, num_sms: int, num_kv_heads: int | None, **_: int
) -> int:
    """Query-tile programs of ``block_m`` rows (x KV heads) when they are fewer than SMs, else 0."""
    programs = _query_tile_programs(block_m, batch, num_kv_heads or 1, max_query_len, gqa_group)
    return programs if programs < num_sms else 0


def _with_splits(
    config: TritonAttnConfig,
    counts: Callable[[int, int], Iterable[int]],
    *,
    batch: int,
    max_query_len: int,
    max_seq_len: int,
    gqa_group: int,
    num_sms: int,
    num_kv_heads: int | None,
) -> list[TritonAttnConfig]:
    """``config`` with each KV split count ``counts(programs, most)`` proposes (``programs``: its query tiles x KV
    heads; ``most``: the largest count allowed), where those programs are fewer than SMs (a short chunk, often on a
    long prefix), in increasing order, each split at least two KV tiles, at most ``MAX_SPLITS``, ``config``'s own count
    left out; none where the programs fill the SMs."""
    programs = _idle_sms(
        config.block_m or 128, batch=batch, max_query_len=max_query_len, gqa_group=gqa_group, num_sms=num_sms,
        num_kv_heads=num_kv_heads,
    )  # fmt: skip
    if not programs:
        return []
    most = min(MAX_SPLITS, max(1, max_seq_len // (2 * config.block_n)))
    wanted = sorted({n for n in counts(programs, most) if 2 <= n <= most and n != config.num_splits})
    return [replace(config, num_splits=n) for n in wanted]


def prefill_split_refinements(
    config: TritonAttnConfig,
    *,
    batch: int,
    max_query_len: int,
    max_seq_len: int,
    gqa_group: int,
    num_sms: int,
    num_kv_heads: int | None,
) -> list[TritonAttnConfig]:
    """The second round of a prefill search: ``config`` (a first-round finalist) with other KV split counts, where its
    query tiles give fewer programs than SMs (a short chunk, often on a long prefix); none otherwise (``_with_splits``).
    Counts: powers of two from 2 and the counts that fill the SMs one, two and three programs deep (``d * num_sms //
    programs``, d = 1..3). WHY: with few query tiles the best split count is set by how the programs fall into waves,
    which depends on the tile (its occupancy) as much as on the shape; on an H100 (2026-11-27,
    benchmarks/results/experiments/short_chunk_prefill_h100_2026-11-27.jsonl, Llama-3.1-8B, a 96-token chunk) the
    fastest split count was 2 to 16 depending on the tile and prefix, up to 1.3x faster than the first round's."""
    return _with_splits(
        config, lambda programs, _most: [1 << k for k in range(1, 7)] + [d * num_sms // programs for d in (1, 2, 3)],
        batch=batch, max_query_len=max_query_len, max_seq_len=max_seq_len, gqa_group=gqa_group, num_sms=num_sms,
        num_kv_heads=num_kv_heads,
    )  # fmt: skip


#: int32 arrival counters at the head of every split-KV workspace (``split_kv.merge_if_last``): a decode launch whose
#: (query tile, KV head) programs number at most this merges its splits in the kernel, the last split of each to
#: finish combining them, and leaves its counter zero again. 64 KiB: far more tiles than a split launch ever has
#: (splits stop at about 8 programs per SM).
MERGE_COUNTER_WORDS = 16384


def split_words(
    *, num_splits: int, num_tokens: int, num_heads: int, head_size: int, partial_bytes: int = 4
) -> tuple[int, int]:
    """The split-KV scratch's layout in float32 words (``split_kv.split_buffers`` carves it): ``MERGE_COUNTER_WORDS``
    int32 counters first, at the same place for every launch (so counters left zero stay zero whatever shapes
    share the workspace), then the partial outputs (one row of ``head_size`` elements of ``partial_bytes`` each per
    split, token and head) and the float32 partial LSEs. Returns (end of the partial outputs, total words)."""
    rows = num_splits * num_tokens * num_heads
    partials = MERGE_COUNTER_WORDS + (rows * head_size * partial_bytes + 3) // 4
    return partials, partials + rows


def workspace_size(*, num_tokens: int, num_heads: int, head_size: int, num_splits: int) -> int:
    """float32 elements of scratch the split-KV launch needs: the merge counters, and per split one partial output
    row (head_size) and one partial LSE per (token, query head). Zero when ``num_splits == 1``. Allocate it zeroed
    (``torch.zeros``) when it is first given: the counters must start at zero, and every launch leaves them so."""
    if num_splits <= 1:
        return 0
    return split_words(num_splits=num_splits, num_tokens=num_tokens, num_heads=num_heads, head_size=head_size)[1]

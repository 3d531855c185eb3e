"""Tactic heuristics and search space of hwtune's Triton kernels, and their agreement with the catalogue."""

from __future__ import annotations

import dataclasses

import pytest

from hwtune.core.catalogue.attention import HWTUNE_TRITON_ATTN, HWTUNE_TURBOQUANT
from hwtune.kernels.configs import (
    HEAD_SIZES,
    MAX_SPLITS,
    MERGE_COUNTER_WORDS,
    MIN_TOKENS_PER_SPLIT,
    TritonAttnConfig,
    config_space,
    decode_block_m,
    default_config,
    prefill_split_refinements,
    turboquant_config,
    workspace_size,
)


def _decode(**kw):
    args = dict(
        phase="decode",
        batch=16,
        max_query_len=1,
        max_seq_len=8192,
        head_size=128,
        gqa_group=4,
        num_sms=132,
        num_kv_heads=8,
    )
    args.update(kw)
    return default_config(**args)


def test_name_is_short_and_distinct() -> None:
    assert TritonAttnConfig(64, 8, 4, 2).name() == "n64-s8-w4-st2"
    assert TritonAttnConfig(64, None, 8, 3, block_m=128).name() == "n64-sauto-w8-st3-m128"


@pytest.mark.parametrize(
    "bad",
    [dict(block_n=48), dict(block_n=8), dict(num_splits=0), dict(num_warps=3), dict(block_m=24), dict(num_stages=0)],
)
def test_config_rejects_invalid_fields(bad: dict) -> None:
    fields = dict(block_n=64, num_splits=1, num_warps=4, num_stages=2)
    fields.update(bad)
    with pytest.raises(ValueError, match="TritonAttnConfig"):
        TritonAttnConfig(**fields)


def test_decode_long_context_small_batch_splits_to_fill_the_device() -> None:
    cfg = _decode(batch=1, max_seq_len=131072)
    programs = 1 * 8 * cfg.num_splits
    assert programs >= 132  # at least one program per SM
    assert 131072 / cfg.num_splits >= MIN_TOKENS_PER_SPLIT


def test_decode_splits_shrink_as_batch_grows_and_stop_at_a_full_device() -> None:
    splits = [_decode(batch=b).num_splits for b in (1, 4, 16, 64, 256)]
    assert splits == sorted(splits, reverse=True)
    assert _decode(batch=256).num_splits == 1  # 2048 programs already
    assert _decode(batch=16, max_seq_len=8192).num_splits > 1


def test_short_contexts_are_not_split_below_the_minimum_tokens() -> None:
    assert _decode(batch=1, max_seq_len=200).num_splits == 1
    assert _decode(batch=1, max_seq_len=600).num_splits <= 3


def test_splits_never_exceed_the_cap() -> None:
    assert _decode(batch=1, num_kv_heads=1, max_seq_len=10**7, num_sms=1000).num_splits == MAX_SPLITS


def test_prefill_uses_big_query_tiles_and_no_split_when_the_grid_is_full() -> None:
    cfg = default_config(
        phase="prefill",
        batch=4,
        max_query_len=4096,
        max_seq_len=4096,
        head_size=128,
        gqa_group=4,
        num_sms=132,
        num_kv_heads=8,
    )
    assert cfg.block_m == 128 and cfg.num_splits == 1 and cfg.num_warps == 8 and cfg.block_n == 128
    big = default_config(
        phase="prefill",
        batch=1,
        max_query_len=4096,
        max_seq_len=4096,
        head_size=256,
        gqa_group=1,
        num_sms=132,
        num_kv_heads=8,
    )
    assert big.block_m == 64 and big.block_n == 32
    small = default_config(
        phase="prefill",
        batch=1,
        max_query_len=4096,
        max_seq_len=4096,
        head_size=64,
        gqa_group=1,
        num_sms=132,
        num_kv_heads=16,
    )
    assert (small.block_m, small.block_n, small.num_warps, small.num_stages) == (64, 64, 4, 2)


def test_decode_block_m_holds_all_rows_of_a_request() -> None:
    assert decode_block_m(1, 4) == 16
    assert decode_block_m(4, 8) == 32
    assert decode_block_m(9, 8) == 128
    assert decode_block_m(1, 256) == 256


@pytest.mark.parametrize("head_size", HEAD_SIZES)
@pytest.mark.parametrize("phase,max_query_len", [("decode", 1), ("decode", 4), ("prefill", 4096)])
def test_config_space_starts_with_auto_and_has_no_duplicates(head_size: int, phase: str, max_query_len: int) -> None:
    space = config_space(
        phase=phase,
        head_size=head_size,
        batch=8,
        max_query_len=max_query_len,
        max_seq_len=8192,
        gqa_group=4,
        num_kv_heads=8,
    )
    auto = default_config(
        phase=phase,
        batch=8,
        max_query_len=max_query_len,
        max_seq_len=8192,
        head_size=head_size,
        gqa_group=4,
        num_sms=132,
        num_kv_heads=8,
    )
    assert space[0] == auto
    assert len(space) == len(set(space)) and 8 <= len(space) <= 61
    assert len({c.name() for c in space}) == len(space)
    if head_size == 256:
        assert all(c.block_n <= 64 for c in space)


def test_unknown_phase_and_head_size_are_refused() -> None:
    with pytest.raises(ValueError, match="phase"):
        _decode(phase="train")
    with pytest.raises(ValueError, match="head sizes"):
        _decode(head_size=80)


def test_workspace_size() -> None:
    assert workspace_size(num_tokens=16, num_heads=32, head_size=128, num_splits=1) == 0
    size = workspace_size(num_tokens=16, num_heads=32, head_size=128, num_splits=8)
    assert size == MERGE_COUNTER_WORDS + 8 * 16 * 32 * 129


def test_catalogue_declares_what_the_kernels_implement() -> None:
    """HWTUNE_TRITON_ATTN / HWTUNE_TURBOQUANT catalogue allowlists match the kernels' own constants."""
    pytest.importorskip("triton", reason="triton is not installed (a CPU install leaves it out): `pip install triton`")
    from hwtune.kernels import turboquant

    rules = HWTUNE_TRITON_ATTN.rules
    assert {h for h in range(1, 513) if rules.head_sizes.allows(h)} == set(HEAD_SIZES)
    assert {b for b in range(1, 257) if rules.block_sizes.allows(b)} == set(range(16, 129, 16))
    tq = HWTUNE_TURBOQUANT.rules
    assert {h for h in range(1, 513) if tq.head_sizes.allows(h)} == set(turboquant.HEAD_SIZES)
    assert {b for b in range(1, 257) if tq.block_sizes.allows(b)} == set(range(16, 129, 16))
    assert set(tq.kv_cache_dtypes) == set(turboquant.KV_CACHE_DTYPES)


def _tq(bits: int, head_size: int, batch: int, max_seq_len: int, max_query_len: int = 1) -> TritonAttnConfig:
    return turboquant_config(
        bits=bits,
        phase="decode",
        batch=batch,
        max_query_len=max_query_len,
        max_seq_len=max_seq_len,
        head_size=head_size,
        gqa_group=4,
        num_sms=132,
        num_kv_heads=8,
    )


@pytest.mark.parametrize(
    ("bits", "head_size", "block_n"),
    [(4, 128, 256), (8, 128, 128), (4, 64, 256), (8, 64, 256), (4, 256, 128), (8, 256, 64)],
)
def test_turboquant_decode_tiles_hold_about_16_kib_of_codes(bits: int, head_size: int, block_n: int) -> None:
    assert _tq(bits, head_size, batch=16, max_seq_len=32768).block_n == block_n


def test_turboquant_splits_fewer_than_triton_attn_and_keep_four_tiles_per_split() -> None:
    # the shapes measured on the H100 (2026-11-21): 16 x 32k best at 4 splits, 64 x 8k at 1
    assert _tq(4, 128, batch=16, max_seq_len=32768).num_splits == 4
    assert _tq(4, 128, batch=64, max_seq_len=8192).num_splits == 1
    long = _tq(4, 128, batch=1, max_seq_len=131072)
    assert 1 < long.num_splits <= 131072 // (4 * long.block_n)
    assert _tq(4, 128, batch=1, max_seq_len=1000).num_splits == 1  # under 4 tiles of 256: one split


@pytest.mark.parametrize("batch,context,splits", [(1, 131072, 32), (2, 65536, 16), (4, 32768, 8), (1, 32768, 32)])
def test_turboquant_small_batch_splits_are_the_measured_best_powers_of_two(
    batch: int, context: int, splits: int
) -> None:
    # H100 config search (2026-11-21): these were the fastest split counts; 48 or 50 at 1 x 128k were 18 % slower
    assert _tq(4, 128, batch=batch, max_seq_len=context).num_splits == splits


def test_turboquant_prefill_keeps_its_verified_tiles_and_rejects_other_widths() -> None:
    cfg = turboquant_config(
        bits=4,
        phase="prefill",
        batch=1,
        max_query_len=4096,
        max_seq_len=4096,
        head_size=128,
        gqa_group=4,
        num_sms=132,
        num_kv_heads=8,
    )
    assert (cfg.block_n, cfg.block_m, cfg.num_warps) == (64, 128, 8)
    with pytest.raises(ValueError, match="4 or 8 bits"):
        _tq(3, 128, batch=1, max_seq_len=4096)


@pytest.mark.parametrize(
    "batch,context,splits", [(16, 8192, 4), (16, 32768, 4), (64, 8192, 1), (1, 131072, 32), (4, 16384, 8)]
)
def test_fp8_decode_keeps_the_tile_bytes_and_splits_like_turboquant(batch: int, context: int, splits: int) -> None:
    # the five shapes of the H100 fp8 config search (2026-11-21): 128-token tiles, 2 stages; best splits were
    # 2, 2, 1, 32, 8 (4 was within 1.5 % of 2 at batch 16)
    cfg = default_config(
        phase="decode",
        batch=batch,
        max_query_len=1,
        max_seq_len=context,
        head_size=128,
        gqa_group=4,
        num_sms=132,
        num_kv_heads=8,
        kv_cache_bytes=1,
    )
    assert (cfg.block_n, cfg.num_warps, cfg.num_stages, cfg.num_splits) == (128, 4, 2, splits)
    bf16 = default_config(
        phase="decode",
        batch=batch,
        max_query_len=1,
        max_seq_len=context,
        head_size=128,
        gqa_group=4,
        num_sms=132,
        num_kv_heads=8,
    )
    assert bf16.block_n == 64  # bf16 decode keeps its own rule
    space = config_space(
        phase="decode",
        head_size=128,
        batch=batch,
        max_seq_len=context,
        gqa_group=4,
        num_sms=132,
        num_kv_heads=8,
        kv_cache_bytes=1,
    )
    assert space[0] == cfg


@pytest.mark.parametrize("head_size,block_n", [(64, 128), (96, 128), (256, 64)])
def test_fp8_decode_tiles_stay_within_the_searched_widths(head_size: int, block_n: int) -> None:
    cfg = default_config(
        phase="decode",
        batch=16,
        max_query_len=1,
        max_seq_len=8192,
        head_size=head_size,
        gqa_group=4,
        num_sms=132,
        num_kv_heads=8,
        kv_cache_bytes=1,
    )
    assert cfg.block_n == block_n


@pytest.mark.parametrize(("chunk", "context", "group", "kv_heads"), [(96, 6096, 4, 8), (96, 1596, 8, 1)])
def test_a_short_prefill_chunk_searches_more_kv_splits_and_smaller_tiles(
    chunk: int, context: int, group: int, kv_heads: int
) -> None:
    """A 96-token chunk leaves most of 132 SMs idle (Llama-3.1-8B on 6000 cached tokens: 24 programs of 128 rows;
    Qwen3-30B-A3B TP 4 on 1500: 6). Each tile of the first round is searched at auto's split count and, where its own
    programs are fewer than SMs, at the smallest count whose programs cover every SM, at most one split per two KV
    tiles (on 1596 tokens the cap binds: 6 of 128 positions, 12 of 64); auto's tile also at 2-16x its splits; and the
    16- and 32-row tiles join. A long chunk, whose tiles fill the SMs, gets none of them."""
    shape = dict(phase="prefill", head_size=128, batch=1, gqa_group=group, num_sms=132, num_kv_heads=kv_heads)
    auto = default_config(max_query_len=chunk, max_seq_len=context, **shape)
    space = config_space(max_query_len=chunk, max_seq_len=context, **shape)
    counts: dict[TritonAttnConfig, set[int]] = {}
    for c in space:
        counts.setdefault(dataclasses.replace(c, num_splits=None), set()).add(c.num_splits)
    for tile, seen in counts.items():
        programs = kv_heads * -(-chunk // (tile.block_m // group))
        most = context // (2 * tile.block_n)
        want = {auto.num_splits}
        if programs < 132 and min(-(-132 // programs), most) >= 2:
            want.add(min(-(-132 // programs), most))
        if tile == dataclasses.replace(auto, num_splits=None):
            want |= {k * auto.num_splits for k in (2, 4, 8, 16) if k * auto.num_splits <= most}
        assert seen == want, tile
    assert {(16, 64), (16, 128), (32, 64), (32, 128)} <= {(c.block_m, c.block_n) for c in space}
    long = config_space(max_query_len=4096, max_seq_len=8192, **shape)
    assert {c.num_splits for c in long} == {default_config(max_query_len=4096, max_seq_len=8192, **shape).num_splits}
    assert all(c.block_m >= 64 for c in long)


@pytest.mark.parametrize(
    ("batch", "context", "want"),
    [(128, 700, {1, 2, 3, 4, 6}), (8, 12000, {23, 36, 47, 58, 94}), (1, 65536, {64, 96, MAX_SPLITS})],
)
def test_the_decode_space_holds_split_counts_around_autos(batch: int, context: int, want: set[int]) -> None:
    """Decode searches half, a quarter fewer (at least one), auto's, a quarter more and double auto's KV splits, at most
    MAX_SPLITS: at 48 requests x 700 tokens on one KV head (Qwen3-30B-A3B TP 4) 4 splits beat auto's 3 on an H200
    (2026-11-29)."""
    shape = dict(phase="decode", head_size=128, batch=batch, max_query_len=1, gqa_group=8, num_sms=132, num_kv_heads=1)
    auto = default_config(max_seq_len=context, **shape)
    space = config_space(max_seq_len=context, **shape)
    assert {auto.num_splits, min(MAX_SPLITS, auto.num_splits * 2)} <= want == {c.num_splits for c in space}
    assert len(space) == 3 * 2 * 2 * len(want)  # KV tiles x warps x stages x split counts


def test_a_short_prefill_chunk_refines_a_finalists_kv_splits() -> None:
    """The second round of a prefill search: a finalist with powers of two and the one-, two- and three-deep
    wave-filling split counts, each split at least two KV tiles; a chunk whose query tiles fill the SMs gets none."""
    shape = dict(batch=1, gqa_group=4, num_sms=132, num_kv_heads=8)
    tile = TritonAttnConfig(block_n=128, num_splits=3, num_warps=8, num_stages=3, block_m=128)
    more = prefill_split_refinements(tile, max_query_len=96, max_seq_len=6096, **shape)
    # 96 tokens x 4 heads a KV head = 3 tiles of 128 rows x 8 KV heads = 24 programs: 5, 11 and 16 fill the SMs;
    # at most 6096 // 256 = 23 splits
    assert [c.num_splits for c in more] == [2, 4, 5, 8, 11, 16]
    assert all(dataclasses.replace(c, num_splits=3) == tile for c in more)
    small_tiles = dataclasses.replace(tile, block_m=64, block_n=64)  # 48 programs: 2, 5 and 8 fill them
    small = prefill_split_refinements(small_tiles, max_query_len=96, max_seq_len=6096, **shape)
    assert [c.num_splits for c in small] == [2, 4, 5, 8, 16, 32]
    assert prefill_split_refinements(tile, max_query_len=4096, max_seq_len=8192, **shape) == []


def test_the_prefill_space_holds_a_64_row_tile_with_128_kv_positions() -> None:
    """On an H100 (short_chunk_prefill_h100_2026-11-27.jsonl) 64 query rows with 128-token KV tiles were the fastest
    tile for a 96-token chunk on 1500- and 30000-token prefixes."""
    space = config_space(phase="prefill", head_size=128, batch=1, max_query_len=96, max_seq_len=1596, gqa_group=4)
    assert any(c.block_m == 64 and c.block_n == 128 for c in space)

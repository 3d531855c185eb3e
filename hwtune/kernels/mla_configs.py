"""HWTUNE_TRITON_MLA's launch geometry and tactics, host integers only (no torch, no triton, as ``configs.py`` for
TRITON_ATTN): ``MlaConfig``, the ``auto`` tactic (``default_mla_config``), the ``tuned`` tactic's search space
(``mla_config_space``) and the split-KV scratch a config needs (``workspace_size``). The kernel that runs them is
``triton_mla.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwtune.kernels.configs import cdiv, next_pow2, split_words

MAX_ROWS = 64  # query rows per program: a [64, 512] float32 accumulator is what a program can hold
MIN_ROWS = 16  # tl.dot's smallest M
MAX_SPLITS = 128


@dataclass(frozen=True)
class MlaConfig:
    """One launch geometry: heads and query tokens per program (``block_h * block_t`` rows), KV positions per inner
    tile, KV splits per program's rows, warps and pipeline stages; ``half_partials``: split partial outputs stored in
    the output's 16-bit dtype instead of float32 (half their write and read traffic; merged in float32, as
    FlashInfer's MLA keeps its partials in the output dtype); ``tma``: latent tiles copied by TMA
    (``triton_mla.tma_unsupported`` says where that is possible: a 16-bit cache of whole pages, tiles inside one page,
    Hopper or later)."""

    block_h: int
    block_t: int
    block_n: int
    num_splits: int
    num_warps: int
    num_stages: int
    half_partials: bool = False
    tma: bool = False

    def __post_init__(self) -> None:
        for name in ("block_h", "block_t", "block_n"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"MlaConfig.{name} must be a power of two, got {value}")
        if self.block_h * self.block_t < MIN_ROWS or self.block_n < 16:
            raise ValueError("MlaConfig needs block_h * block_t >= 16 rows and block_n >= 16 (tl.dot's minimum)")
        if not 1 <= self.num_splits <= MAX_SPLITS:
            raise ValueError(f"MlaConfig.num_splits must be in 1..{MAX_SPLITS}, got {self.num_splits}")
        if self.half_partials and self.num_splits == 1:
            raise ValueError("MlaConfig.half_partials needs num_splits > 1 (one split writes the output directly)")

    def name(self) -> str:
        """Short stable name kept in measurement records, e.g. ``h64-t1-n32-s8-w8-st2`` (``-p16``: half partials,
        ``-tma``: TMA tiles)."""
        return (
            f"h{self.block_h}-t{self.block_t}-n{self.block_n}-s{self.num_splits}-w{self.num_warps}-st{self.num_stages}"
            + ("-p16" if self.half_partials else "")
            + ("-tma" if self.tma else "")
        )


def default_mla_config(
    *, num_heads: int, max_query_len: int, batch: int, max_seq_len: int, sms: int, kv_bytes: int = 2
) -> MlaConfig:
    """The ``auto`` tactic, from host integers only (no device read: graph-capturable).

    Rows: all of a request's heads x query tokens up to 64 (128 heads: two programs, 64 heads each). Decode is bound
    by reading the latent cache, so KV splits are added until about two programs per SM, but each split keeps
    enough tokens that its partial output (rows x 512 float32, written and read again by the merge) stays under
    half of the latent bytes it reads."""
    rows = min(MAX_ROWS, max(MIN_ROWS, next_pow2(num_heads * max_query_len)))
    block_h = min(next_pow2(num_heads), rows)
    block_t = rows // block_h
    block_n = 32
    programs = batch * cdiv(max_query_len, block_t) * cdiv(num_heads, block_h)
    min_tokens = max(2 * block_n, next_pow2(cdiv(4 * rows * 512 * 4, 576 * kv_bytes)))
    by_tokens = max(1, max_seq_len // min_tokens)
    splits = max(1, min(MAX_SPLITS, by_tokens, 2 * sms // programs))
    return MlaConfig(block_h, block_t, block_n, splits, 8 if rows > 32 else 4, 2)


#: (warps, stages) the ``tuned`` search tries per row count: 64-row programs need 8 warps for their accumulator.
_WARPS_STAGES = {16: ((4, 2), (4, 3), (8, 2)), 32: ((4, 2), (8, 2), (8, 3)), 64: ((8, 2), (8, 1), (4, 2))}


#: The TMA tiles the ``tuned`` search adds (``mla_config_space``'s ``tma_page``): positions, (warps, stages). 4 stages
#: were searched too until 2026-11-29: Triton 3.6 compiles them to the same binary as 3 (the pipeliner divides a
#: config's stages between the block-table load and the latent load, and 2-4 stages all hold one latent buffer; 89 kB of
#: shared memory, two programs per SM; benchmarks/experiments/compiled_buffers.py), so they timed one kernel twice.
_TMA_BLOCK_N = 32
_TMA_WARPS_STAGES = ((4, 3),)
#: Deeper TMA pipelines the search adds where each program can have an SM of its own: 6 and 8 stages hold two and three
#: latent buffers (126 and 163 kB: one program per SM; Triton 3.6, SM 9.0).
_TMA_DEEP_WARPS_STAGES = ((4, 6), (4, 8))


def mla_config_space(
    *, num_heads: int, max_query_len: int, batch: int, max_seq_len: int, sms: int, kv_bytes: int = 2, tma_page: int = 0
) -> list[MlaConfig]:
    """Configs the ``tuned`` tactic searches for one workload, the ``auto`` config first, no duplicates: KV tiles of
    16, 32 and 64 positions x split counts {1, auto / 4, auto / 2, auto, 2 auto, 4 auto, the most that keep all
    programs in one wave of two per SM} (each split keeping at least one tile) x the (warps, stages) pairs of the row
    count. Rows stay auto's (every head of a request per program). Every config computes the same result; only speed
    differs. The one-wave count is auto's without its tokens-per-split floor: a fine sweep on an H100 (DeepSeek-V3 TP 8,
    2026-11-27, ``benchmarks/experiments/mla_split_sweep.py``) found it (32 x 700: 8 splits) or one split below it (8 x
    3000: 32 of 33) fastest where that floor holds auto below it (5 and 23 splits, 4-10 % slower), and calls up to 25 %
    slower one split beyond it (a second wave).

    ``tma_page``: the page size where latent tiles can be TMA copies (``triton_mla.tma_page``), else 0. On pages of a
    multiple of 32 positions, for 16-row programs (one decode token of 16 heads: DeepSeek-V3 at TP 8), the space adds
    32-position TMA tiles at auto's and the one-wave split count with 3 stages (``_TMA_WARPS_STAGES``; 3 and 4 were
    measured, one binary): on an H200 (2026-11-28, ``benchmarks/experiments/mla_tma.py``, screen times) they beat the
    best gathers at 5 of 8 shapes on 64-token pages by 2.2-8.5 % and lost the other three (128 x 3000 by 10.7 %, 48 x
    3000 by 4.9 %, 1 x 3000 by 1.8 %), where the search keeps gathers; 16-position TMA tiles (all a 16-token page
    allows) and 64-position ones were slower than gathers nearly everywhere, and other row counts were not measured
    (docs/kernels.md "TMA latent tiles"). Where the programs are no more than the SMs, it also adds 32-position TMA
    tiles with 6 and 8 stages (``_TMA_DEEP_WARPS_STAGES``: two and three latent buffers, one program per SM) at the most
    splits that keep every program on an SM of its own (``sms // programs``): on an H200 (2026-11-29,
    ``benchmarks/experiments/mla_stages.py``) they were the fastest config at 8 x 3000 and 12000, 32 x 3000 and 128 x
    700 (6-9 % less time: 8 x 12000 49.2 against 53.4 us, 128 x 700 44.3 against 48.5) and 0.5-19 % slower than the best
    at the other six shapes of 132 or fewer requests, where the search keeps the faster (docs/kernels.md "Deeper TMA
    pipelines")."""
    auto = default_mla_config(
        num_heads=num_heads, max_query_len=max_query_len, batch=batch, max_seq_len=max_seq_len, sms=sms,
        kv_bytes=kv_bytes,
    )  # fmt: skip
    rows = auto.block_h * auto.block_t
    programs = batch * cdiv(max_query_len, auto.block_t) * cdiv(num_heads, auto.block_h)
    one_wave = max(1, 2 * sms // programs)
    out, seen = [auto], {auto}
    for block_n in (16, 32, 64):
        most = max(1, min(MAX_SPLITS, max_seq_len // block_n))
        s = auto.num_splits
        for splits in sorted({1, max(1, s // 4), max(1, s // 2), s, 2 * s, 4 * s, one_wave}):
            for warps, stages in _WARPS_STAGES[rows]:
                cfg = MlaConfig(auto.block_h, auto.block_t, block_n, min(splits, most), warps, stages)
                if cfg not in seen:
                    seen.add(cfg)
                    out.append(cfg)
    if tma_page % _TMA_BLOCK_N == 0 and tma_page and rows == MIN_ROWS:
        most = max(1, min(MAX_SPLITS, max_seq_len // _TMA_BLOCK_N))
        for splits in sorted({min(auto.num_splits, most), min(one_wave, most)}):
            for warps, stages in _TMA_WARPS_STAGES:
                out.append(MlaConfig(auto.block_h, auto.block_t, _TMA_BLOCK_N, splits, warps, stages, tma=True))
        if programs <= sms:
            own_sm = min(sms // programs, most)
            for warps, stages in _TMA_DEEP_WARPS_STAGES:
                out.append(MlaConfig(auto.block_h, auto.block_t, _TMA_BLOCK_N, own_sm, warps, stages, tma=True))
    return out


def workspace_size(
    *, num_tokens: int, num_heads: int, kv_lora_rank: int, num_splits: int, half_partials: bool = False
) -> int:
    """float32 elements of the split-KV scratch: partial outputs (16-bit with ``half_partials``) and LSEs (none
    needed without splits)."""
    if num_splits <= 1:
        return 0
    return split_words(
        num_splits=num_splits, num_tokens=num_tokens, num_heads=num_heads, head_size=kv_lora_rank,
        partial_bytes=2 if half_partials else 4,
    )[1]  # fmt: skip


__all__ = ["MAX_SPLITS", "MlaConfig", "default_mla_config", "mla_config_space", "workspace_size"]

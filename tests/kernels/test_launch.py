"""Host-side launch plan and argument checks shared by TRITON_ATTN and TURBOQUANT (CPU, no kernels run)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip(
    "triton",
    reason="triton is not installed (a CPU install leaves it out): `pip install triton` runs these",
)

from hwtune.kernels._common import check_query_io, plan_launch
from hwtune.kernels.configs import TritonAttnConfig

MIB = 2**20


def _prefill_plan(kv_mib: int, l2_mib: int = 50):
    return plan_launch(
        TritonAttnConfig(128, 1, 8, 3),
        num_tokens=4096,
        batch=1,
        max_query_len=4096,
        head_size=128,
        gqa_group=4,
        kv_bytes_per_request=kv_mib * MIB,
        l2=l2_mib * MIB,
    )


def test_prefill_grid_puts_kv_heads_on_the_fastest_axis_when_the_kv_fits_half_the_l2() -> None:
    plan = _prefill_plan(16)  # 4096 tokens x 8 KV heads x 128 x bf16 x (K, V)
    assert plan.heads_fast and plan.block_q == 32
    # 4096 / 32 query tiles (+1 per request: the grid is a bound) x 8 KV heads on axis 0
    assert plan.grid(8) == ((4096 // 32 + 1) * 8, 1, 1)


@pytest.mark.parametrize("kv_mib,l2_mib", [(32, 50), (64, 50), (16, 0), (0, 50)])
def test_prefill_grid_keeps_one_kv_head_at_a_time_when_the_kv_would_overflow_l2(kv_mib: int, l2_mib: int) -> None:
    plan = _prefill_plan(kv_mib, l2_mib)  # unknown sizes (0) keep the L2-friendly order
    assert not plan.heads_fast
    assert plan.grid(8) == (4096 // 32 + 1, 8, 1)


def test_decode_grid_keeps_one_program_per_request_and_kv_head() -> None:
    plan = plan_launch(
        TritonAttnConfig(64, 4, 4, 3),
        num_tokens=16,
        batch=16,
        max_query_len=1,
        head_size=128,
        gqa_group=4,
        kv_bytes_per_request=MIB,
        l2=50 * MIB,
    )
    assert not plan.heads_fast and plan.one_per_req
    assert plan.grid(8) == (16, 8, 4)


def test_speculative_decode_spanning_tiles_keeps_the_decode_grid() -> None:
    # 9 tokens x a group of 16 = 144 rows: two tiles per request, yet equal work per program: no reordering
    plan = plan_launch(
        TritonAttnConfig(64, 2, 4, 3),
        num_tokens=18,
        batch=2,
        max_query_len=9,
        head_size=128,
        gqa_group=16,
        kv_bytes_per_request=MIB,
        l2=50 * MIB,
    )
    assert not plan.one_per_req and plan.block_q == 8
    assert not plan.heads_fast and plan.grid(2) == (18 // 8 + 2, 2, 2)


def _io(**over: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    q = torch.zeros(5, 4, 64, dtype=torch.bfloat16)
    io = {"q": q, "out": torch.zeros_like(q), "lse": torch.zeros(5, 4)}
    io.update(over)
    return io["q"], io["out"], io["lse"]


def test_query_io_accepts_the_contract_and_returns_the_shape() -> None:
    assert check_query_io(*_io()) == (5, 4, 64)
    assert check_query_io(*_io(lse=None)) == (5, 4, 64)


@pytest.mark.parametrize(
    "over,match",
    [
        ({"q": torch.zeros(5, 256, dtype=torch.bfloat16)}, r"\[tokens, heads, head_size\]"),
        ({"q": torch.zeros(5, 4, 64)}, "float16 or bfloat16"),
        ({"out": torch.zeros(5, 4, 64, dtype=torch.float16)}, "same shape"),
        ({"out": torch.zeros(5, 4, 32, dtype=torch.bfloat16)}, "same shape"),
        (
            {
                "q": torch.zeros(5, 4, 128, dtype=torch.bfloat16)[..., ::2],
                "out": torch.zeros(5, 4, 64, dtype=torch.bfloat16),
            },
            "contiguous last dimension",
        ),
        ({"lse": torch.zeros(5, 4, dtype=torch.float16)}, r"lse must be float32 \[5, 4\]"),
        ({"lse": torch.zeros(4, 5)}, r"lse must be float32 \[5, 4\]"),
    ],
)
def test_query_io_refuses_what_the_kernels_would_misread(over: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_query_io(*_io(**over))


def test_block_table_chunks_only_where_measured_faster() -> None:
    """Prefill-style launches read the block table in chunks of 32 tiles for TMA tiles of 64 or more positions and of
    64 tiles for gathered tiles of 128 positions over whole pages, at up to 3 stages (H200, 2026-11-28: 7-19 % faster;
    64-position gathered tiles -5.5 to +5.5 % at 16 tiles; 4 stages ran out of shared memory); elsewhere the loop
    reads it. A chunk's entries cover its tiles from any first tile: TMA tiles of half a page may start mid-page, so
    one page more."""
    from hwtune.kernels.page_chunks import bt_chunk

    def chunk(page, block_n, tma=False, stages=3, prefill=True):  # noqa: ANN001, ANN202
        return bt_chunk(prefill_style=prefill, page_size=page, block_n=block_n, tma=tma, num_stages=stages)

    assert chunk(16, 128) == (64, 512)  # 8 pages a tile
    assert chunk(64, 128) == (64, 128)
    assert chunk(128, 128, tma=True) == (32, 32)
    assert chunk(128, 64, tma=True) == (32, 32)  # 17 pages spanned at most (tiles from mid-page), a power of two
    assert chunk(16, 64) == chunk(128, 64) == chunk(48, 128) == (0, 1)  # small tiles, a tile inside a page, 48
    assert chunk(64, 32, tma=True) == (0, 1)  # TMA tiles under 64 positions: not measured
    assert chunk(16, 128, stages=4) == chunk(16, 128, prefill=False) == (0, 1)

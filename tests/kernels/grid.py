"""The case grids: small shapes for Triton's interpreter (CPU) and real sizes for a GPU.

Each entry maps a case name to a function ``device -> Checks`` (see cases.py). Interpreter shapes are tiny
(a few pages, explicit configs that force split-KV, several query tiles and the binary search) because the
interpreter runs every program in Python, but for the block-table chunk cases (10000-36000 tokens of one KV head, so
that a split holds more than one chunk of 32 or 64 tiles); GPU shapes cover the catalogue's declared grid at real
sizes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from tests.kernels.cases import (
    Checks,
    Problem,
    check_dcp_merge,
    check_metadata_change,
    check_shared_workspace,
    check_triton,
    check_turboquant,
    check_turboquant_write,
)

P = Problem
BF16, FP16, FP8 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
Case = Callable[[str], Checks]


def _t(p: Problem) -> Case:
    return lambda device: check_triton(p, device)


def _tq(p: Problem, bits: int) -> Case:
    return lambda device: check_turboquant(p, bits, device)


def _tqw(p: Problem, bits: int) -> Case:
    return lambda device: check_turboquant_write(p, bits, device)


SPLIT3 = {"block_n": 16, "num_splits": 3}
ONE_LONG_SPLIT = {"block_n": 64, "num_splits": 1}


def _bt(q_lens, ctx_lens, page, block_n, block_m, splits, **kw) -> Case:  # noqa: ANN001
    """A block-table chunk case (``page_chunks.bt_chunk``): one KV head of two query heads, NaN past each context."""
    cfg = {"block_n": block_n, "block_m": block_m, "num_splits": splits}
    return _t(P(q_lens, ctx_lens, num_heads=2, num_kv_heads=1, page_size=page, config=cfg, poison_tail=True, **kw))


INTERP_CASES: dict[str, Case] = {
    # --- TRITON_ATTN ---
    "decode_nhd_bf16_gqa4": _t(P((1, 1, 1), (1, 37, 100))),
    "decode_hnd_fp16_split3": _t(P((1, 1, 1), (1, 37, 100), dtype=FP16, layout="HND", config=SPLIT3)),
    "decode_batch1_page48_split5": _t(P((1,), (300,), page_size=48, config={"block_n": 32, "num_splits": 5})),
    "prefill_prefix_d128_multi_tile": _t(
        P((20, 33), (20, 70), num_heads=4, head_size=128, config={"block_n": 16, "block_m": 16})
    ),
    "prefill_default_config": _t(P((40,), (70,), layout="HND")),
    "mixed_batch_split2": _t(P((1, 17, 3, 1), (50, 40, 3, 90), config={"block_n": 32, "block_m": 32, "num_splits": 2})),
    "spec_decode_4tok": _t(P((4, 4, 4), (30, 64, 5))),
    "spec_decode_9tok_split3": _t(P((9, 2), (70, 33), config=SPLIT3)),
    "fp8_e4m3_kv_scales": _t(P((1, 3), (45, 60), kv_dtype=FP8, k_scale=0.5, v_scale=2.0, config=SPLIT3)),
    "fp8_e4m3_kv_fp16_hnd": _t(P((1, 12), (33, 40), dtype=FP16, kv_dtype=FP8, layout="HND", k_scale=1.5)),
    "mha": _t(P((1, 6), (33, 20), num_heads=4, num_kv_heads=4)),
    "single_kv_head_group8": _t(P((1, 2), (50, 17), num_heads=8, num_kv_heads=1)),
    "gqa_group6_not_pow2": _t(P((1, 20), (29, 41), num_heads=6, num_kv_heads=1, config={"block_n": 16, "block_m": 32})),
    "head96_padded": _t(P((1, 10), (40, 25), head_size=96)),
    "head256_split2": _t(
        P((1, 3), (30, 19), num_heads=2, num_kv_heads=1, head_size=256, config={"block_n": 16, "num_splits": 2})
    ),
    "page128_fp16": _t(P((1,), (130,), page_size=128, dtype=FP16)),
    "padding_rows_untouched_split": _t(P((1, 1), (20, 33), pad_tokens=3, config=SPLIT3)),
    "lse_dcp_merge": lambda d: check_dcp_merge(P((1, 1), (40, 70), config={"block_n": 16, "num_splits": 2}), d),
    "metadata_change_same_buffers": lambda d: check_metadata_change(P((1, 5, 2), (40, 30, 50)), d),
    "shared_workspace_merged_in_kernel": lambda d: check_shared_workspace(P((2, 1, 3), (40, 1, 90), config=SPLIT3), d),
    # --- TURBOQUANT ---
    "tq_write_4bit_nhd": _tqw(P((1,), (40,)), 4),
    "tq_write_8bit_hnd_d128": _tqw(P((1,), (40,), head_size=128, layout="HND", num_heads=2), 8),
    "tq_decode_4bit_split3": _tq(P((1, 1, 1), (1, 37, 100), config=SPLIT3), 4),
    "tq_mixed_8bit_hnd_d128": _tq(
        P((1, 17, 3), (50, 40, 3), head_size=128, layout="HND", config={"block_n": 16, "block_m": 16}), 8
    ),
    "tq_spec_decode_4bit_d256": _tq(P((4, 2), (30, 19), num_heads=4, num_kv_heads=1, head_size=256), 4),
    "tq_prefill_fp16_4bit": _tq(P((40,), (70,), dtype=FP16), 4),
    "tq_lse_dcp_merge_4bit": lambda d: check_dcp_merge(
        P((1, 1), (40, 70), config={"block_n": 16, "num_splits": 2}), d, turboquant_bits=4
    ),
    # thousands of keys in one split: an accumulation error that grows along the KV loop shows only here
    # (TURBOQUANT's old ``1024 + c`` codes failed the lane-0 check even with numpy's round-to-nearest)
    "tq_long_decode_fp16_4bit": _tq(P((1, 1), (2048, 700), head_size=128, dtype=FP16, config=ONE_LONG_SPLIT), 4),
    "tq_long_mixed_8bit": _tq(P((1, 3), (2000, 1500), head_size=128, config=ONE_LONG_SPLIT), 8),
    "long_decode_fp16_d128": _t(P((1, 1), (2048, 700), head_size=128, dtype=FP16, config=ONE_LONG_SPLIT)),
    # KV tiles by TMA descriptors (forced: "auto" takes them only on a Hopper+ GPU), NaN past each context
    "prefill_tma_nhd_page64_poisoned": _t(
        P((40, 70), (100, 70), page_size=64, config={"block_n": 32, "block_m": 32}, kv_loads="tma", poison_tail=True)
    ),
    "prefill_tma_hnd_fp16_split2": _t(
        P(
            (33, 20),
            (90, 20),
            page_size=32,
            dtype=FP16,
            layout="HND",
            kv_loads="tma",
            config={"block_n": 32, "block_m": 16, "num_splits": 2},
            poison_tail=True,
        )
    ),
    "prefill_tma_d128_mha": _t(
        P(
            (20, 9),
            (52, 9),
            num_heads=2,
            num_kv_heads=2,
            head_size=128,
            page_size=32,
            config={"block_n": 16, "block_m": 16},
            kv_loads="tma",
            poison_tail=True,
        )
    ),
    "decode_tma_page32_split3": _t(
        P((1, 1, 1), (1, 37, 100), page_size=32, config=SPLIT3, kv_loads="tma", poison_tail=True)
    ),
    "prefill_gather_poisoned": _t(P((40, 3), (100, 30), poison_tail=True)),
    # the block table read BT_CHUNK_TILES (64) gathered tiles or BT_CHUNK_TILES_TMA (32) TMA tiles at a time
    # (page_chunks.bt_chunk), one and a half chunks a split or so, NaN past each context: gathered 128-position
    # tiles over 8 and 2 pages and over one (fp8 KV, which TMA cannot load), TMA tiles of a page and of half a page
    # (chunks starting mid-page)
    "prefill_bt_chunks_gather_page16": _bt((20, 3), (24000, 90), 16, 128, 16, 2),
    "prefill_bt_chunks_gather_page64": _bt((24,), (36000,), 64, 128, 16, 3),
    "prefill_bt_chunks_gather_page128_fp8": _bt((18,), (14000,), 128, 128, 32, 1, kv_dtype=FP8, k_scale=0.5),
    "prefill_bt_chunks_tma_half_page": _bt((17,), (10000,), 128, 64, 32, 3, kv_loads="tma"),
    "prefill_bt_chunks_tma_whole_page": _bt((40, 17), (6600, 600), 64, 64, 32, 2, kv_loads="tma", layout="HND"),
}

# Run a second time with tensor-core accumulation (interp_runner --tensor-core-dot, tensor_core_model.py):
# every TURBOQUANT attention case, and TRITON_ATTN controls (plain attention must not care).
TENSOR_CORE_CASES: tuple[str, ...] = (
    *(name for name in INTERP_CASES if name.startswith("tq_") and not name.startswith("tq_write")),
    "decode_hnd_fp16_split3",
    "prefill_prefix_d128_multi_tile",
    "long_decode_fp16_d128",
)


def _gpu_grid() -> dict[str, Case]:
    """The declared grid at real sizes: 16 requests up to 4k tokens (plus a 32k one), 32 query heads."""
    cases: dict[str, Case] = {}
    decode_lens = (1, 17, 100, 511, 1000, 2048, 4095, 4096, 33, 64, 129, 777, 3000, 1500, 250, 32768)
    for d, layout, dtype, kv in itertools.product((64, 96, 128, 256), ("NHD", "HND"), (BF16, FP16), (None, FP8)):
        if kv is not None and dtype == FP16 and d in (64, 256):
            continue  # keep the grid small: fp8 with fp16 q at two head sizes is enough
        p = P(
            (1,) * 16,
            decode_lens,
            num_heads=32,
            num_kv_heads=8,
            head_size=d,
            layout=layout,
            dtype=dtype,
            kv_dtype=kv,
            k_scale=0.7 if kv else 1.0,
            v_scale=1.3 if kv else 1.0,
        )
        cases[f"decode_d{d}_{layout}_{str(dtype)[6:]}_kv{'fp8' if kv else 'same'}"] = _t(p)
    for page in (16, 32, 48, 64, 80, 128):
        cases[f"decode_page{page}"] = _t(
            P((1,) * 4, (1, page - 1, page + 1, 5000), num_heads=32, num_kv_heads=8, head_size=128, page_size=page)
        )
    for group, kv_heads in ((1, 8), (4, 8), (8, 4), (16, 1), (32, 1)):
        cases[f"decode_group{group}_kvheads{kv_heads}"] = _t(
            P(
                (1,) * 8,
                (3000, 7, 100, 8192, 64, 1, 512, 2049),
                num_heads=group * kv_heads,
                num_kv_heads=kv_heads,
                head_size=128,
            )
        )
    cases["decode_batch1_128k"] = _t(P((1,), (131072,), num_heads=32, num_kv_heads=8, head_size=128))
    for d in (64, 96, 128, 256):
        cases[f"prefill_d{d}_chunked"] = _t(
            P((2048, 1000, 17), (4096, 1000, 3000), num_heads=16, num_kv_heads=4, head_size=d)
        )
    for d in (64, 128, 256):  # KV tiles by TMA (Hopper+): tiles inside 128-token pages, NaN past each context
        cases[f"prefill_d{d}_page128_tma"] = _t(
            P(
                (2048, 1000, 17),
                (4096, 1000, 3000),
                num_heads=16,
                num_kv_heads=4,
                head_size=d,
                page_size=128,
                kv_loads="tma",
                poison_tail=True,
            )
        )
    cases["prefill_d128_page64_hnd_fp16_tma"] = _t(
        P(
            (1500, 64, 3),
            (5000, 64, 700),
            num_heads=32,
            num_kv_heads=8,
            head_size=128,
            page_size=64,
            layout="HND",
            dtype=FP16,
            kv_loads="tma",
            poison_tail=True,
            config={"block_n": 64, "block_m": 128, "num_warps": 8},
        )
    )
    cases["prefill_page128_tma_split2"] = _t(
        P(
            (3000, 100),
            (3000, 9000),
            num_heads=32,
            num_kv_heads=8,
            head_size=128,
            page_size=128,
            kv_loads="tma",
            poison_tail=True,
            config={"block_n": 128, "block_m": 128, "num_warps": 8, "num_splits": 2},
        )
    )
    cases["mixed_prefill_decode_page128_auto"] = _t(
        P(
            (1, 1500, 3, 1, 8, 1),
            (8000, 2000, 3, 17, 4000, 129),
            num_heads=32,
            num_kv_heads=8,
            head_size=128,
            page_size=128,
            poison_tail=True,
        )
    )
    cases["decode_page128_tma"] = _t(
        P(
            (1,) * 4,
            (1, 127, 129, 5000),
            num_heads=32,
            num_kv_heads=8,
            head_size=128,
            page_size=128,
            kv_loads="tma",
            poison_tail=True,
        )
    )
    cases["mixed_prefill_decode"] = _t(
        P((1, 1500, 3, 1, 8, 1), (8000, 2000, 3, 17, 4000, 129), num_heads=32, num_kv_heads=8, head_size=128)
    )
    for ntok in (2, 4, 8, 9):
        cases[f"spec_decode_{ntok}tok"] = _t(
            P((ntok,) * 8, (ntok, 100, 1000, 4096, 8000, 33, 64, 2000), num_heads=32, num_kv_heads=8, head_size=128)
        )
    cases["lse_dcp_merge"] = lambda dev: check_dcp_merge(
        P((1,) * 8, (100, 4096, 8192, 33, 1000, 17, 65, 30000), num_heads=32, num_kv_heads=8, head_size=128), dev
    )
    cases["metadata_change"] = lambda dev: check_metadata_change(
        P((1, 300, 2, 1), (4000, 300, 50, 900), num_heads=32, num_kv_heads=8, head_size=128), dev
    )
    for bits, d, layout in itertools.product((4, 8), (64, 128, 256), ("NHD", "HND")):
        cases[f"tq_write_{bits}bit_d{d}_{layout}"] = _tqw(
            P((1,), (4096,), num_heads=8, num_kv_heads=8, head_size=d, layout=layout), bits
        )
        cases[f"tq_decode_{bits}bit_d{d}_{layout}"] = _tq(
            P(
                (1,) * 8,
                (1, 100, 1000, 4096, 8000, 33, 5000, 2047),
                num_heads=32,
                num_kv_heads=8,
                head_size=d,
                layout=layout,
            ),
            bits,
        )
    for bits in (4, 8):
        cases[f"tq_mixed_{bits}bit"] = _tq(
            P((1, 1500, 3, 4), (8000, 2000, 3, 4000), num_heads=32, num_kv_heads=8, head_size=128), bits
        )
        cases[f"tq_lse_dcp_merge_{bits}bit"] = lambda dev, b=bits: check_dcp_merge(
            P((1,) * 4, (100, 8192, 4096, 33), num_heads=32, num_kv_heads=8, head_size=128), dev, turboquant_bits=b
        )
    for page in (16, 64, 128):
        cases[f"tq_page{page}_fp16"] = _tq(
            P((1, 3), (page + 3, 3000), num_heads=16, num_kv_heads=2, head_size=128, page_size=page, dtype=FP16), 4
        )
    # the interpreter's block-table chunk cases, compiled: the pipelined loops the interpreter does not build
    cases |= {name: case for name, case in INTERP_CASES.items() if name.startswith("prefill_bt_chunks")}
    return cases


GPU_CASES: dict[str, Case] = _gpu_grid()

"""KV tiles by TMA (Hopper and later): one tensor-memory-access copy per KV tile instead of gathers.

WHY: the gather path computes a 64-bit address per 16-byte vector of every K and V tile, in a prefill
kernel already at 255 registers per thread (3 stages, spills). When a KV tile lies inside one page
(``page_size % block_n == 0``) it is a plain 2-D box of the cache, so one TMA copy moves it, the copy
engine tracks its arrival and no per-element addresses are held. On an H100 (2026-11-21), causal prefill
of 4096 tokens on 128-token pages took 392.1 us with gathers and 348.6 us with TMA loads in the same run
(2 stages; 8192 tokens: 1438.6 vs 1267.3 us), benchmarks/results/experiments/prefill_tma_ab_h100_2026-11-21.txt;
with 3 stages, as the auto config has, TMA took 334.6 us (1206.4 at 8192) in the run of
prefill_tma_layout_h100_2026-11-21.txt, where the K/V layout (interleaved per block or two separate
caches) made no difference.

The cache as a matrix: rows ``S = stride between a page's tokens`` elements apart. Token ``t`` of block
``b``, KV head ``h`` is row ``b * rows_per_block + h * rows_per_head + t``, column ``h * cols_per_head``:
NHD keeps every head of a token in one row (``rows_per_head = 0``), HND gives each head its own rows
(``cols_per_head = 0``). K and V may be views of one interleaved tensor ([blocks, 2, ...]): each gets its
own descriptor over its own rows, and the descriptor's extent stops at the last valid row, so a tile never
reads memory outside the cache (TMA fills rows past it with zeros).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hwtune.kernels._common import interpreting

TMA_DTYPES = (torch.float16, torch.bfloat16)
KV_LOADS = ("auto", "tma", "gather")


@dataclass(frozen=True)
class KvMatrix:
    """Where KV head ``h``'s tokens of a block sit in the cache seen as a 2-D matrix (see module doc)."""

    rows: int
    cols: int
    row_stride: int
    rows_per_block: int
    rows_per_head: int
    cols_per_head: int


def kv_matrix(
    cache: torch.Tensor, *, stride_b: int, stride_t: int, stride_h: int, page_size: int, num_kv_heads: int
) -> KvMatrix | str:
    """The matrix view of one 4-D cache view, or why it has none (strides TMA cannot express)."""
    head, elem = cache.shape[-1], cache.element_size()
    if cache.data_ptr() % 16 or (stride_t * elem) % 16:
        return "the cache's base address and token stride must be multiples of 16 bytes"
    if stride_t < head:
        return f"the token stride ({stride_t}) is shorter than a head ({head}): rows would overlap"
    if stride_b % stride_t:
        return f"the block stride ({stride_b}) must be a multiple of the token stride ({stride_t})"
    rows_per_block = stride_b // stride_t
    if stride_h % stride_t == 0:  # HND-like: each head its own rows
        rows_per_head, cols_per_head, cols = stride_h // stride_t, 0, head
    elif (num_kv_heads - 1) * stride_h + head <= stride_t:  # NHD-like: a token's heads side by side in a row
        rows_per_head, cols_per_head, cols = 0, stride_h, (num_kv_heads - 1) * stride_h + head
    else:
        return f"the head stride ({stride_h}) fits neither a row per head nor the heads within a row"
    rows = (cache.shape[0] - 1) * rows_per_block + (num_kv_heads - 1) * rows_per_head + page_size
    if rows >= 2**31:
        return f"the cache has {rows} token rows; TMA coordinates are 32-bit"
    return KvMatrix(rows, cols, stride_t, rows_per_block, rows_per_head, cols_per_head)


def tma_device_unsupported(q: torch.Tensor) -> str | None:
    """Why ``q``'s device has no TMA copies (None: it has, or Triton's interpreter runs them)."""
    if interpreting():
        return None
    if q.device.type != "cuda":
        return "TMA loads need a CUDA device"
    major, minor = torch.cuda.get_device_capability(q.device)
    if major < 9:
        return f"TMA loads need SM 9.0 or later (Hopper, Blackwell); this GPU is SM {major}.{minor}"
    return None


def tma_unsupported(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k_matrix: KvMatrix | str, v_matrix: KvMatrix | str
) -> str | None:
    """Why these tensors cannot take the TMA path (None: they can, whatever the tile size)."""
    no_tma = tma_device_unsupported(q)
    if no_tma is not None:
        return no_tma
    if k_cache.dtype not in TMA_DTYPES or k_cache.dtype != q.dtype:
        return (
            f"TMA loads feed the tiles straight to the tensor cores, so the KV cache must be float16 or "
            f"bfloat16 and match the queries; got KV {k_cache.dtype}, queries {q.dtype}"
        )
    head = q.shape[-1]
    if head & (head - 1):
        return f"TMA loads need a power-of-two head size (head {head} runs padded to {1 << head.bit_length()})"
    for name, m in (("K", k_matrix), ("V", v_matrix)):
        if isinstance(m, str):
            return f"{name} cache: {m}"
    if (k_matrix.rows_per_block, k_matrix.rows_per_head, k_matrix.cols_per_head) != (  # type: ignore[union-attr]
        v_matrix.rows_per_block,
        v_matrix.rows_per_head,
        v_matrix.cols_per_head,
    ):  # type: ignore[union-attr]
        return "TMA loads need K and V caches with the same strides"
    return None


def choose_kv_loads(
    kv_loads: str, *, unsupported: str | None, page_size: int, block_n: int, prefill_style: bool
) -> bool:
    """Whether this launch loads KV tiles by TMA. ``auto``: wherever it can, for prefill-style launches
    (where it was measured); ``tma``: required, an error saying why when it cannot; ``gather``: never.
    Triton's interpreter runs TMA only when asked, so its test cases keep covering the gathers."""
    if kv_loads not in KV_LOADS:
        raise ValueError(f"kv_loads must be one of {KV_LOADS}, got {kv_loads!r}")
    if kv_loads == "gather":
        return False
    reason = unsupported
    if reason is None and page_size % block_n:
        reason = (
            f"a {block_n}-token KV tile must lie inside one page, but pages hold {page_size} tokens; "
            f"use a config with block_n dividing {page_size}, or kv_loads='gather'"
        )
    if kv_loads == "tma":
        if reason is not None:
            raise ValueError(f"kv_loads='tma' is not possible here: {reason}")
        return True
    return reason is None and prefill_style and not interpreting()


def kv_descriptors(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k_matrix: KvMatrix, v_matrix: KvMatrix, block_n: int
) -> tuple[object, object]:
    """Host-side TMA descriptors of K and V tiles ([block_n, head] boxes)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    head = k_cache.shape[-1]
    return tuple(
        TensorDescriptor(c, [m.rows, m.cols], [m.row_stride, 1], [block_n, head])  # type: ignore[return-value]
        for c, m in ((k_cache, k_matrix), (v_cache, v_matrix))
    )

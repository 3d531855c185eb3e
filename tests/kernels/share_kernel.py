"""A launch of ``split_kv.merge_share`` alone, for tests in Triton's interpreter: the merge inside an attention
launch after its grid barrier, whose barrier the interpreter cannot run (it runs programs one at a time). Every
program merges its share as the attention kernel's programs do after ``grid_barrier``; the share partition and the
merge itself are what is tested."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hwtune.kernels.split_kv import grid_merge_blocks, merge_share


@triton.jit
def _share_kernel(
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    lse_ptr,
    qsl_ptr,
    batch,
    num_rows,
    num_heads,
    num_splits,
    stride_ps,
    stride_pt,
    stride_ph,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    HEAD_D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    CHUNK: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    merge_share(
        tl.program_id(0), tl.num_programs(0), tl.load(qsl_ptr + batch), num_rows, num_heads, num_splits, part_o_ptr,
        part_lse_ptr, out_ptr, lse_ptr, stride_ps, stride_pt, stride_ph, stride_ot, stride_oh, stride_lt, stride_lh,
        HEAD_D, BLOCK_D, CHUNK, WRITE_LSE,
    )  # fmt: skip


def merge_in_shares(
    part_o: torch.Tensor,
    part_lse: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    query_start_loc: torch.Tensor,
    batch: int,
    programs: int,
) -> None:
    """``split_kv.merge_splits``'s contract, done by ``programs`` programs each merging its ``merge_share``."""
    splits, tokens, heads, head = part_o.shape
    lse_arg = lse if lse is not None else part_lse
    block_d, chunk = grid_merge_blocks(head, splits)
    _share_kernel[(programs,)](
        part_o, part_lse, out, lse_arg, query_start_loc, batch, tokens * heads, heads, splits,
        part_lse.stride(0), part_lse.stride(1), part_lse.stride(2), out.stride(0), out.stride(1),
        lse_arg.stride(0), lse_arg.stride(1), HEAD_D=head, BLOCK_D=block_d, CHUNK=chunk, WRITE_LSE=lse is not None,
    )  # fmt: skip

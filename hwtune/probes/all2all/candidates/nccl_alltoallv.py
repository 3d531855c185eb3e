"""nccl_alltoallv: the textbook expert-parallel dispatch/combine with ``all_to_all_single`` and splits.

Dispatch sorts the (token, expert) pairs by expert, exchanges the per-rank row counts (an all-gather of
each rank's send counts, so every rank knows the whole count matrix), then moves one row per pair with
``all_to_all_single`` and uneven splits: rows arrive grouped by source rank and, within it, by expert,
ready for a grouped GEMM. Combine sends the expert outputs back the same way and sums them per token on the
source rank. NCCL on CUDA (grouped send/recv), gloo on CPU. The split sizes go through the host each step,
so it is not CUDA-graph safe.

Capacity: by default receive buffers are sized from the exchanged counts (no limit). With the option
``capacity_factor`` set, each rank's receive buffer holds ``ceil(capacity_factor * T * top_k)`` rows, as a
fixed-buffer engine would size it; a routing that needs more raises ``CapacityExceeded`` on every rank (the
count matrix is shared, so all ranks decide alike) instead of dropping tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from hwtune.probes.all2all.candidates.base import Candidate, CapacityExceeded, Dispatched, LocalBatch
from hwtune.probes.all2all.payload import pack_rows, part_dtypes, part_widths, unpack_rows


@dataclass
class _State:
    tokens: int
    pair_token: torch.Tensor  # int64 [T*k]: source token of each sent row, in send order
    send_counts: list[int]
    recv_counts: list[int]


class AllToAllVCandidate(Candidate):
    """Wraps ``dist.all_to_all_single`` with uneven splits, one row per (token, expert) pair; the splits go through
    the host, so not graph-safe; option ``capacity_factor`` emulates fixed receive buffers."""

    name = "nccl_alltoallv"
    graph_safe = False

    def setup(self) -> None:
        cf = self.options.get("capacity_factor")
        self.capacity_factor = None if cf is None else float(cf)
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValueError(f"capacity_factor must be positive, got {cf!r}")

    def _count_matrix(self, send_counts: torch.Tensor) -> torch.Tensor:
        ws = self.ctx.world_size
        gathered = torch.empty(ws * ws, dtype=torch.int64, device=send_counts.device)
        dist.all_gather_into_tensor(gathered, send_counts, group=self.ctx.group)
        return gathered.view(ws, ws).cpu()  # [source, destination]

    def _check_capacity(self, matrix: torch.Tensor, tokens: int) -> int | None:
        if self.capacity_factor is None:
            return None
        cap = math.ceil(self.capacity_factor * tokens * self.spec.topk)
        loads = matrix.sum(dim=0).tolist()
        worst = max(range(len(loads)), key=lambda r: loads[r])
        if loads[worst] > cap:
            raise CapacityExceeded(
                f"nccl_alltoallv: rank {worst} would receive {loads[worst]} (token, expert) rows but each "
                f"receive buffer holds {cap} (capacity factor {self.capacity_factor:g} x {tokens} tokens x "
                f"top-k {self.spec.topk}); the routing is too skewed for this capacity. Raise the capacity "
                "factor or leave it unset (buffers sized from the exchanged counts); "
                "tokens are never dropped."
            )
        return cap

    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        ws, k, t = self.ctx.world_size, self.spec.topk, batch.num_tokens
        dev = batch.topk_ids.device
        flat_e = batch.topk_ids.reshape(-1).to(torch.int64)
        order = torch.argsort(flat_e, stable=True)
        sorted_e = flat_e.index_select(0, order)
        pair_token = torch.div(order, k, rounding_mode="floor")
        dest = torch.div(sorted_e, self.experts_per_rank, rounding_mode="floor")
        send_counts_t = torch.bincount(dest, minlength=ws)
        matrix = self._count_matrix(send_counts_t)
        cap = self._check_capacity(matrix, t)
        send_counts = matrix[self.ctx.rank].tolist()
        recv_counts = matrix[:, self.ctx.rank].tolist()

        meta = [
            batch.topk_weights.reshape(-1).index_select(0, order).float()[:, None],
            sorted_e.to(torch.int32)[:, None],
        ]
        if verify:
            meta.append(pair_token.to(torch.int32)[:, None])
        token_rows = pack_rows(batch.payload.parts)
        send = pack_rows([token_rows.index_select(0, pair_token), *meta])
        total = sum(recv_counts)
        buf = torch.empty((cap if cap is not None else total, send.shape[1]), dtype=torch.uint8, device=dev)
        recv = buf[:total]
        dist.all_to_all_single(recv, send, recv_counts, send_counts, group=self.ctx.group)

        like = batch.payload
        dtypes = [*part_dtypes(like.kind), torch.float32, torch.int32] + ([torch.int32] if verify else [])
        widths = [*part_widths(like.kind, like.hidden), 1, 1] + ([1] if verify else [])
        cols = unpack_rows(recv, dtypes, widths)
        n = len(like.parts)
        out = Dispatched(
            payload=like.with_parts(cols[:n]),
            expert_ids=cols[n + 1],
            weights=cols[n],
            state=_State(t, pair_token, send_counts, recv_counts),
        )
        if verify:
            counts = torch.tensor(recv_counts, dtype=torch.int64, device=dev)
            out.src_rank = torch.repeat_interleave(torch.arange(ws, device=dev), counts)
            out.src_token = cols[n + 2][:, 0].to(torch.int64)
        return out

    def combine(self, dispatched: Dispatched, expert_out: torch.Tensor) -> torch.Tensor:
        st: _State = dispatched.state
        back = torch.empty((sum(st.send_counts), expert_out.shape[1]), dtype=expert_out.dtype, device=expert_out.device)
        dist.all_to_all_single(back, expert_out.contiguous(), st.send_counts, st.recv_counts, group=self.ctx.group)
        out = torch.zeros((st.tokens, expert_out.shape[1]), dtype=torch.float32, device=expert_out.device)
        out.index_add_(0, st.pair_token, back.float())
        return out.to(expert_out.dtype)

"""flashinfer_nvlink_two_sided: FlashInfer's ``MnnvlMoe`` all-to-all-v (vLLM's flashinfer_all2allv).

``mnnvl_moe_alltoallv_prepare_without_allgather`` exchanges the routing through a small prepare
workspace and returns the send/receive plan (``MoEAlltoallInfo``); ``mnnvl_moe_alltoallv`` then moves each
2-D payload (rows must be 16-byte aligned) through FIFO channels in NVLink-mapped workspaces, one copy per
destination rank; ``mnnvl_moe_alltoallv_combine`` returns the rows and sums them per token. Received rows
are packed from row 0 (``recv_rank_count_cumsum[-1]`` of them); experts of other ranks and padding rows
carry the id ``num_experts``. In verify mode each row's origin (token, source rank) travels as data, so
the check does not rest on how the rows are ordered. The valid-row count is read on the host, so hwtune
does not capture it in CUDA graphs (vLLM does not declare it graph-safe either).
"""

from __future__ import annotations

from typing import Any

import torch

from hwtune.probes.all2all.candidates.base import Candidate, Dispatched, LocalBatch
from hwtune.probes.all2all.candidates.flashinfer_common import (
    TorchGroupComm,
    flashinfer_reason,
    pad_to_16_bytes,
    require_cuda,
)


class TwoSidedCandidate(Candidate):
    """Wraps FlashInfer's ``MnnvlMoe`` all-to-all-v (``mnnvl_moe_alltoallv_prepare_without_allgather``,
    ``mnnvl_moe_alltoallv``, ``mnnvl_moe_alltoallv_combine``); not graph-safe, since the valid-row count is read on
    the host."""

    name = "flashinfer_nvlink_two_sided"
    graph_safe = False

    def setup(self) -> None:
        require_cuda(self.ctx, self.name)
        try:
            from flashinfer.comm import Mapping
            from flashinfer.comm.mnnvl import MnnvlConfig
            from flashinfer.comm.trtllm_alltoall import MnnvlMoe
        except ImportError as exc:
            raise flashinfer_reason("import of flashinfer.comm.trtllm_alltoall.MnnvlMoe", exc) from exc
        ws, rank = self.ctx.world_size, self.ctx.rank
        self._moe, self._proven = MnnvlMoe, False
        try:
            mapping = Mapping(ws, rank, ws, tp_size=ws)
            cfg = MnnvlConfig(
                comm_backend=TorchGroupComm(self.ctx.cpu_group),
                fabric_page_size=1 << 29,
                allocation_granularity=0,
            )
            self.workspace = MnnvlMoe.get_moe_workspaces(mapping, cfg)
            self.prepare_workspace = MnnvlMoe.get_moe_prepare_workspace(mapping, cfg)
        except Exception as exc:
            raise flashinfer_reason("MnnvlMoe workspace set-up", exc) from exc

    def _guard(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except (RuntimeError, AssertionError, ValueError, TypeError) as exc:
            if self._proven:
                raise
            raise flashinfer_reason(what, exc) from exc

    def _move(self, x: torch.Tensor, info: Any) -> torch.Tensor:
        wire = x.view(torch.uint8) if x.element_size() == 1 else x
        got = self._guard(
            "mnnvl_moe_alltoallv",
            lambda: self._moe.mnnvl_moe_alltoallv(
                wire.contiguous(), info, self.workspace, self.ctx.rank, self.ctx.world_size
            ),
        )
        return got.view(x.dtype)

    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        ws, rank, t, e = self.ctx.world_size, self.ctx.rank, batch.num_tokens, self.spec.num_experts
        info, local_ids, local_w, _ = self._guard(
            "mnnvl_moe_alltoallv_prepare_without_allgather",
            lambda: self._moe.mnnvl_moe_alltoallv_prepare_without_allgather(
                batch.topk_ids.to(torch.int32).contiguous(),
                batch.topk_weights.float().contiguous(),
                None,
                self.prepare_workspace,
                t,
                rank,
                ws,
                e,
                e,
                self.spec.topk,
            ),
        )
        parts = [self._move(p, info) for p in batch.payload.parts]
        rows = int(local_ids.shape[0])
        ids = torch.where(local_ids == e, torch.full_like(local_ids, -1), local_ids)
        out = Dispatched(
            payload=batch.payload.with_parts(parts),
            expert_ids=self.local_expert_ids(ids),
            weights=local_w,
            state=(info, t),
        )
        cumsum = [int(v) for v in info.recv_rank_count_cumsum.tolist()]
        out.valid = torch.arange(rows, device=ids.device) < cumsum[-1]
        if verify:  # the origin travels as data: (token index, source rank), padded to a 16-byte row
            origin = torch.stack(
                [
                    torch.arange(t, dtype=torch.int32, device=ids.device),
                    torch.full((t,), rank, dtype=torch.int32, device=ids.device),
                ],
                dim=1,
            )
            got = self._move(pad_to_16_bytes(origin), info)
            out.src_token, out.src_rank = got[:, 0].to(torch.int64), got[:, 1].to(torch.int64)
        return out

    def combine(self, dispatched: Dispatched, expert_out: torch.Tensor) -> torch.Tensor:
        info, t = dispatched.state
        out = self._guard(
            "mnnvl_moe_alltoallv_combine",
            lambda: self._moe.mnnvl_moe_alltoallv_combine(
                expert_out.contiguous(),
                info,
                self.workspace,
                self.ctx.rank,
                self.ctx.world_size,
                top_k=self.spec.topk,
                token_count=t,
            ),
        )
        self._proven = True
        return out

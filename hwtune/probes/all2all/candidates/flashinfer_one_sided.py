"""flashinfer_nvlink_one_sided: FlashInfer's ``MoeAlltoAll`` (TensorRT-LLM's throughput all-to-all).

Each rank writes its tokens straight into the receiving ranks' workspaces (NVLink peer mappings made by
``MnnvlMemory``), once per destination rank even when several of a token's experts live there. Received
rows sit at ``[source rank, slot]`` in a ``[ep_size, T, *]`` view; combine reads the experts' outputs back
from the same slots and sums them per token. Fixed-size workspace and no host synchronisation: graph-safe.

The workspace is sized for what hwtune actually sends (payload parts plus top-k ids and weights, and in
verify mode the token index), not for a fixed nvfp4 layout: vLLM once sized it for nvfp4 and corrupted
bf16, which is exactly what the correctness check would catch. FlashInfer's refusals (its asserts and
``TVM_FFI_ICHECK`` messages) before the first successful round become ``unsupported`` with its words.
"""

from __future__ import annotations

from typing import Any

import torch

from hwtune.probes.all2all.candidates.base import Candidate, Dispatched, LocalBatch
from hwtune.probes.all2all.candidates.flashinfer_common import TorchGroupComm, flashinfer_reason, require_cuda


class OneSidedCandidate(Candidate):
    """Wraps FlashInfer's ``MoeAlltoAll.dispatch``/``combine`` (one-sided writes into peers' NVLink-mapped
    workspaces); graph-safe, and FlashInfer's refusals before the first full round count as ``unsupported``."""

    name = "flashinfer_nvlink_one_sided"
    graph_safe = True

    def setup(self) -> None:
        require_cuda(self.ctx, self.name)
        try:
            from flashinfer.comm import Mapping, MoeAlltoAll
            from flashinfer.comm.mnnvl import MnnvlConfig
            from flashinfer.comm.trtllm_moe_alltoall import moe_a2a_get_workspace_size_per_rank
        except ImportError as exc:
            raise flashinfer_reason("import of flashinfer.comm.MoeAlltoAll", exc) from exc
        ws, rank, spec = self.ctx.world_size, self.ctx.rank, self.spec
        probe = self._payloads_for(
            torch.empty((1, spec.topk), dtype=torch.int32),
            torch.empty((1, spec.topk)),
            self._dummy_parts(),
            verify=True,
        )[0]
        dispatch_bytes = sum(p.shape[1] * p.element_size() for p in probe)
        self._proven = False
        try:
            size = moe_a2a_get_workspace_size_per_rank(ws, self.max_tokens, dispatch_bytes, spec.hidden_size * 2)
            mapping = Mapping(world_size=ws, rank=rank, gpus_per_node=ws, tp_size=ws, moe_ep_size=ws)
            self.a2a = MoeAlltoAll(
                mapping,
                max_num_tokens=self.max_tokens,
                top_k=spec.topk,
                num_experts=spec.num_experts,
                workspace_size_per_rank=size,
                mnnvl_config=MnnvlConfig(comm_backend=TorchGroupComm(self.ctx.cpu_group)),
            )
        except Exception as exc:  # FlashInfer's own reason: JIT build, MNNVL memory, argument checks
            raise flashinfer_reason("MoeAlltoAll set-up", exc) from exc

    def _dummy_parts(self) -> list[torch.Tensor]:
        from hwtune.probes.all2all.payload import part_dtypes, part_widths

        return [
            torch.empty((1, w), dtype=d)
            for d, w in zip(
                part_dtypes(self.spec.quant_dtype), part_widths(self.spec.quant_dtype, self.spec.hidden_size)
            )
        ]

    @staticmethod
    def _payloads_for(
        ids: torch.Tensor, weights: torch.Tensor, parts: list[torch.Tensor], verify: bool
    ) -> tuple[list[torch.Tensor], list[tuple[str, Any]]]:
        """Payload list, largest element size first (FlashInfer keeps each payload aligned that way);
        1-byte types travel as uint8. Returns the tensors and (name, original dtype) per position."""
        items: list[tuple[str, torch.Tensor, Any]] = [
            ("ids", ids.to(torch.int32), torch.int32),
            ("weights", weights.float(), torch.float32),
        ]
        if verify:
            tok = torch.arange(ids.shape[0], dtype=torch.int32, device=ids.device)[:, None]
            items.append(("token", tok, torch.int32))
        for i, p in enumerate(parts):
            items.append((f"part{i}", p.view(torch.uint8) if p.element_size() == 1 else p, p.dtype))
        items.sort(key=lambda it: -it[1].element_size())  # stable: ids stay first
        return [t.contiguous() for _, t, _ in items], [(n, d) for n, _, d in items]

    def _guard(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except (RuntimeError, AssertionError, ValueError, TypeError) as exc:
            if self._proven:
                raise
            raise flashinfer_reason(what, exc) from exc

    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        ws, t = self.ctx.world_size, batch.num_tokens
        payloads, names = self._payloads_for(batch.topk_ids, batch.topk_weights, batch.payload.parts, verify)
        recv = self._guard(
            "MoeAlltoAll.dispatch",
            lambda: self.a2a.dispatch(
                batch.topk_ids.to(torch.int32).contiguous(),
                payloads,
                t,
                invalid_token_expert_id=-1,
                expert_id_payload_index=0,
            ),
        )
        got = {name: r.reshape(ws * t, -1) for (name, _), r in zip(names, recv)}
        dtypes = dict(names)
        parts = [got[f"part{i}"].view(dtypes[f"part{i}"]) for i in range(len(batch.payload.parts))]
        ids = self.local_expert_ids(got["ids"])
        out = Dispatched(
            payload=batch.payload.with_parts(parts),
            expert_ids=ids,
            weights=got["weights"],
            valid=(ids >= 0).any(dim=1),
            state=t,
        )
        if verify:
            out.src_rank = torch.arange(ws, device=ids.device).repeat_interleave(t)
            out.src_token = got["token"][:, 0].to(torch.int64)
        return out

    def combine(self, dispatched: Dispatched, expert_out: torch.Tensor) -> torch.Tensor:
        t, ws = dispatched.state, self.ctx.world_size
        payload = expert_out.reshape(ws, t, expert_out.shape[1])
        out = self._guard("MoeAlltoAll.combine", lambda: self.a2a.combine(payload, t))
        self._proven = True
        return out

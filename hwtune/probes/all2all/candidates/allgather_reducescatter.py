"""allgather_reducescatter: all-gather every rank's tokens, reduce-scatter the expert outputs.

As vLLM's ``AgRsAll2AllManager`` (its default backend) does it: ``all_gatherv`` of hidden states, top-k
weights and ids, then ``reduce_scatterv`` of the expert output. With equal token counts per rank (the
harness's case) these are NCCL's ``AllGather`` and ``ReduceScatter``; here the tokens' parts travel packed
in one uint8 row so one all-gather moves them. Fixed-shape collectives, so dispatch and combine can each be
captured in a CUDA graph. On gloo, reduce-scatter is emulated as an all-reduce (about twice the traffic).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from hwtune.probes.all2all.candidates.base import (
    Candidate,
    Dispatched,
    LocalBatch,
    pack_batch_rows,
)


class AllGatherReduceScatterCandidate(Candidate):
    """Wraps ``dist.all_gather_into_tensor`` (dispatch, all tokens' packed rows) and ``dist.reduce_scatter_tensor``
    (combine), as vLLM's AgRsAll2AllManager; fixed shapes, so graph-safe."""

    name = "allgather_reducescatter"
    graph_safe = True

    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        ws, t = self.ctx.world_size, batch.num_tokens
        rows = pack_batch_rows(batch)
        gathered = torch.empty((ws * t, rows.shape[1]), dtype=torch.uint8, device=rows.device)
        dist.all_gather_into_tensor(gathered, rows, group=self.ctx.group)
        return self.dispatched_from_gathered(gathered, batch, verify=verify)

    def combine(self, dispatched: Dispatched, expert_out: torch.Tensor) -> torch.Tensor:
        t = dispatched.state
        out = torch.empty((t, expert_out.shape[1]), dtype=expert_out.dtype, device=expert_out.device)
        dist.reduce_scatter_tensor(out, expert_out.contiguous(), group=self.ctx.group)
        return out

"""naive: every rank broadcasts its tokens to all; combine is an all-reduce, then each rank keeps its rows.

As vLLM's ``NaiveAll2AllManager`` does it (``naive_multicast``: one broadcast per source rank; ``combine``:
``all_reduce`` of the full ``[ep * T, H]`` expert output, then a slice). Every rank receives every token,
so the traffic grows with ``ep_size * T`` whatever the routing; kept as the baseline.
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


class NaiveCandidate(Candidate):
    """Wraps one ``dist.broadcast`` per source rank (dispatch) and a full ``dist.all_reduce`` then a slice (combine),
    as vLLM's NaiveAll2AllManager: the baseline whose traffic ignores the routing."""

    name = "naive"
    graph_safe = False

    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        ws, rank, t = self.ctx.world_size, self.ctx.rank, batch.num_tokens
        rows = pack_batch_rows(batch)
        buf = torch.empty((ws * t, rows.shape[1]), dtype=torch.uint8, device=rows.device)
        buf[rank * t : (rank + 1) * t].copy_(rows)
        for src in range(ws):
            dist.broadcast(buf[src * t : (src + 1) * t], src=src, group=self.ctx.group)
        return self.dispatched_from_gathered(buf, batch, verify=verify)

    def combine(self, dispatched: Dispatched, expert_out: torch.Tensor) -> torch.Tensor:
        t = dispatched.state
        summed = expert_out.contiguous().clone()
        dist.all_reduce(summed, group=self.ctx.group)
        return summed[self.ctx.rank * t : (self.ctx.rank + 1) * t]

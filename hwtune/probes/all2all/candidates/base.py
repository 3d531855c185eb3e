"""The contract every all2all candidate implements, and the errors it raises.

A candidate moves one rank's quantised tokens to the ranks that hold their experts (``dispatch``) and
brings the experts' outputs back, summed per token (``combine``). The harness, not the candidate, runs the
"experts" (identity experts that scale each row by its local routing weights), checks what arrived, and
times the two halves. So every candidate reports what it received in one shape, ``Dispatched``:

* one row per received unit of work (a token for per-rank candidates, a (token, expert) pair for the
  textbook all-to-all, every token of every rank for the all-gather ones);
* for each row, the *global* ids of this rank's experts it must visit (-1 in unused slots) and their
  routing weights;
* in verify mode, where each row came from (source rank, source token index), so that the harness can
  compare counts and contents against the routing without trusting the candidate.

The expert output of a row is ``dequant(row) * sum(weights of its local experts)``; ``combine`` must
return, for each local token, the sum of the rows sent back for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from hwtune.core.types import All2AllSpec
from hwtune.probes.all2all.payload import Payload


class CapacityExceeded(Exception):
    """The routing sends more rows to a rank than the candidate's fixed buffers hold.

    Raised on every rank alike (the decision uses counts all ranks share), so the group fails loudly and
    in agreement instead of truncating tokens or deadlocking.
    """


@dataclass
class RankContext:
    """This rank's place in the trial: its group (NCCL on CUDA, gloo on CPU) and a gloo group for control."""

    rank: int
    world_size: int
    device: torch.device
    group: Any  # dist.ProcessGroup
    cpu_group: Any  # gloo dist.ProcessGroup, for object collectives and flashinfer's handle exchange

    @property
    def is_cuda(self) -> bool:
        """Whether this rank runs on a GPU (NCCL) rather than the CPU (gloo)."""
        return self.device.type == "cuda"

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` in rank order, through the gloo control group (host objects never touch NCCL)."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.cpu_group)
        return out


@dataclass
class LocalBatch:
    """One rank's tokens: the quantised payload and its routing."""

    payload: Payload
    topk_ids: torch.Tensor  # int32 [T, k], global expert ids
    topk_weights: torch.Tensor  # fp32 [T, k]

    @property
    def num_tokens(self) -> int:
        """Tokens this rank sends (rows of the routing)."""
        return int(self.topk_ids.shape[0])


@dataclass
class Dispatched:
    """What arrived on this rank (see the module docstring). ``state`` is the candidate's own, for combine."""

    payload: Payload  # received rows, [R, *] parts
    expert_ids: torch.Tensor  # int [R, j]: global ids of this rank's experts for the row, -1 elsewhere
    weights: torch.Tensor  # fp32 [R, j]
    src_rank: torch.Tensor | None = None  # int64 [R] (verify mode)
    src_token: torch.Tensor | None = None  # int64 [R] (verify mode)
    valid: torch.Tensor | None = None  # bool [R]; None: every row carries a token
    state: Any = None

    @property
    def num_rows(self) -> int:
        """Received rows, padding included (see ``valid``)."""
        return int(self.expert_ids.shape[0])


@dataclass
class Candidate:
    """Base class: subclasses set ``name`` and implement ``dispatch`` and ``combine``.

    ``__init__`` runs once per trial (workspaces, communicators, JIT builds) sized for ``max_tokens``
    tokens per rank; its time is recorded as the compile/setup time. ``graph_safe`` means dispatch and
    combine can each be captured in a CUDA graph and replayed (no host synchronisation, static buffers).
    """

    ctx: RankContext
    spec: All2AllSpec
    max_tokens: int
    options: Mapping[str, Any] = field(default_factory=dict)

    name: ClassVar[str] = "base"
    graph_safe: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.setup()

    def setup(self) -> None:
        """Allocate what the candidate needs for the whole trial."""

    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        """Send ``batch``'s tokens to the ranks of their experts and report what arrived here as ``Dispatched``; with
        ``verify``, fill ``src_rank``/``src_token`` so the harness can check every row's origin."""
        raise NotImplementedError

    def combine(self, dispatched: Dispatched, expert_out: torch.Tensor) -> torch.Tensor:
        """Sum the expert outputs (bf16 ``[R, H]``, row-aligned with ``dispatched``) back per local token."""
        raise NotImplementedError

    # helpers shared by candidates ---------------------------------------------------------------------

    @property
    def experts_per_rank(self) -> int:
        """Experts each rank holds (contiguous placement: expert e lives on rank e // experts_per_rank)."""
        return self.spec.num_experts // self.ctx.world_size

    def local_expert_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Global ids of this rank's experts, -1 for every other expert."""
        lo = self.ctx.rank * self.experts_per_rank
        mine = (ids >= lo) & (ids < lo + self.experts_per_rank)
        return torch.where(mine, ids, torch.full_like(ids, -1))

    def dispatched_from_gathered(self, rows: torch.Tensor, batch: LocalBatch, *, verify: bool) -> Dispatched:
        """Dispatch result when every rank holds all ranks' packed rows in rank order (``world x tokens``
        rows, as the broadcast and all-gather candidates build them); ``state`` keeps the per-rank token
        count for the combine."""
        t = batch.num_tokens
        payload, ids, weights, _ = unpack_batch_rows(rows, batch.payload, self.spec.topk)
        out = Dispatched(payload=payload, expert_ids=self.local_expert_ids(ids), weights=weights, state=t)
        if verify:
            idx = torch.arange(rows.shape[0], device=rows.device)
            out.src_rank, out.src_token = idx // t, idx % t
        return out


# --- packed rows: payload parts + routing in one uint8 row per token --------------------------------------


def pack_batch_rows(batch: LocalBatch, extra: list[torch.Tensor] | None = None) -> torch.Tensor:
    """One uint8 row per token: the payload parts, then top-k ids (int32) and weights (fp32), then
    ``extra`` row-aligned tensors. One collective then moves everything a token needs."""
    from hwtune.probes.all2all.payload import pack_rows

    return pack_rows([*batch.payload.parts, batch.topk_ids.to(torch.int32), batch.topk_weights.float(), *(extra or [])])


def unpack_batch_rows(
    rows: torch.Tensor,
    like: Payload,
    topk: int,
    extra: list[tuple[torch.dtype, int]] | None = None,
) -> tuple[Payload, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Inverse of :func:`pack_batch_rows`: (payload, topk ids, topk weights, extra tensors)."""
    from hwtune.probes.all2all.payload import part_dtypes, part_widths, unpack_rows

    dtypes = [*part_dtypes(like.kind), torch.int32, torch.float32, *(d for d, _ in extra or [])]
    widths = [*part_widths(like.kind, like.hidden), topk, topk, *(w for _, w in extra or [])]
    parts = unpack_rows(rows, dtypes, widths)
    n = len(like.parts)
    return like.with_parts(parts[:n]), parts[n], parts[n + 1], parts[n + 2 :]

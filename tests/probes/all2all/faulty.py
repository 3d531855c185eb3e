"""Deliberately broken candidates, loaded by spawned ranks through ``candidate_refs`` (tests only)."""

from __future__ import annotations

import ctypes
import os
import time

import torch

from hwtune.probes.all2all.candidates.allgather_reducescatter import AllGatherReduceScatterCandidate
from hwtune.probes.all2all.candidates.base import Dispatched, LocalBatch
from hwtune.probes.contract import Unsupported


class WrongCombineOnRank1(AllGatherReduceScatterCandidate):
    """Rank 1 returns its tokens 10 % too large; rank 0 is right."""

    def combine(self, dispatched: Dispatched, expert_out: torch.Tensor) -> torch.Tensor:
        out = super().combine(dispatched, expert_out)
        return (out.float() * 1.1).to(out.dtype) if self.ctx.rank == 1 else out


class DropsLastToken(AllGatherReduceScatterCandidate):
    """Dispatch loses the last token of every source rank (a truncating candidate)."""

    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        d = super().dispatch(batch, verify=verify)
        t = batch.num_tokens
        last = torch.arange(d.num_rows, device=d.expert_ids.device) % t == t - 1
        d.expert_ids = torch.where(last[:, None], torch.full_like(d.expert_ids, -1), d.expert_ids)
        return d


class SegfaultOnRank1(AllGatherReduceScatterCandidate):
    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        if self.ctx.rank == 1:
            ctypes.string_at(0)  # SIGSEGV
        return super().dispatch(batch, verify=verify)


class HangOnRank1(AllGatherReduceScatterCandidate):
    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        if self.ctx.rank == 1:
            time.sleep(3600)
        return super().dispatch(batch, verify=verify)


class SilentExitOnRank1(AllGatherReduceScatterCandidate):
    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        if self.ctx.rank == 1:
            os._exit(0)
        return super().dispatch(batch, verify=verify)


class RaisesOnFirstWorkload(AllGatherReduceScatterCandidate):
    """Rank 0 raises on 8-token workloads while rank 1 waits in the collective."""

    def dispatch(self, batch: LocalBatch, *, verify: bool) -> Dispatched:
        if self.ctx.rank == 0 and batch.num_tokens == 8:
            raise RuntimeError("simulated kernel failure on rank 0")
        return super().dispatch(batch, verify=verify)


class RefusesSetup(AllGatherReduceScatterCandidate):
    def setup(self) -> None:
        raise Unsupported("this candidate needs a frobnicator, which this host lacks")


class RefusesSetupOnRank1WhilePeerWaits(AllGatherReduceScatterCandidate):
    """Rank 1 refuses set-up and exits; rank 0 sits in a collective with it, so it fails only afterwards,
    with the connection error a peer sees (a consequence, reported later than the cause)."""

    def setup(self) -> None:
        if self.ctx.rank == 1:
            raise Unsupported("rank 1 lacks a frobnicator")
        import torch.distributed as dist

        dist.barrier(group=self.ctx.cpu_group)


class ExitsInTheFinalBarrierOnRank1(AllGatherReduceScatterCandidate):
    """Rank 1 exits (code 0) in the worker's final barrier, after it reported every workload."""

    def setup(self) -> None:
        super().setup()
        if self.ctx.rank != 1:
            return
        import sys

        import torch.distributed as dist

        real = dist.barrier

        def barrier(*args: object, **kwargs: object) -> object:
            if sys._getframe(1).f_code.co_name == "main":  # the worker's own barrier, not a timing one
                os._exit(0)
            return real(*args, **kwargs)

        dist.barrier = barrier  # type: ignore[assignment]

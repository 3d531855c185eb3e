"""Timing one candidate across ranks: barrier, dispatch, combine; the slowest rank defines each iteration.

* Every timed iteration starts with a barrier, so all ranks begin together. On CUDA the barrier is
  ``synchronize(); all_reduce(1 element); synchronize()`` on the measured group, then each rank times
  dispatch and combine with CUDA events; on CPU (gloo) ``perf_counter`` around the same calls.
* The iteration's time is the *slowest* rank's: each rank keeps its own samples and one all-reduce (MAX)
  over the gloo control group turns them into per-iteration maxima, which every rank then holds alike.
* The number of timed iterations is decided collectively: each rank's warm-up estimate is reduced with
  MAX, and ``n = clamp(time_cap / estimate, min_iters, max_iters)`` is the same on every rank (ranks that
  ran different counts would deadlock).
* CUDA graphs where the candidate is graph-safe: dispatch and combine are captured as two graphs and
  replayed. If capture fails on any rank, all ranks fall back to eager launches (and say why).
* Warm-up iterations are excluded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from hwtune.probes.all2all.candidates.base import LocalBatch, RankContext
from hwtune.probes.timing import median_ci_rel


@dataclass
class TimingResult:
    """One candidate's per-iteration times in microseconds (each the slowest rank's), identical on every rank, with
    the method used and notes such as why CUDA graphs were not used."""

    total_us: list[float]
    dispatch_us: list[float]
    combine_us: list[float]
    method: str  # "cuda_graph", "cuda_event" or "perf_counter"
    warmup: int
    notes: list[str] = field(default_factory=list)


def barrier(ctx: RankContext, flag: torch.Tensor | None = None) -> None:
    """All ranks leave together; on CUDA no work is left in flight on either side of it."""
    if ctx.is_cuda:
        torch.cuda.synchronize()
        dist.all_reduce(flag if flag is not None else torch.ones(1, device=ctx.device), group=ctx.group)
        torch.cuda.synchronize()
    else:
        dist.barrier(group=ctx.group)


def reduce_max(ctx: RankContext, values: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum over ranks (through the gloo control group, on the host)."""
    t = values.detach().to("cpu", torch.float64).contiguous()
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.cpu_group)
    return t


def median_ci95_rel(samples: list[float]) -> float | None:
    """The median's relative 95 % confidence half-width (``hwtune.probes.timing.median_ci_rel``), None when
    too few samples pin it down (the record's field is nullable)."""
    ci = median_ci_rel(samples)
    return ci if math.isfinite(ci) else None


def _capture(
    candidate: Any, ctx: RankContext, batch: LocalBatch, expert_out: torch.Tensor
) -> tuple[Callable[[], None], Callable[[], None]] | str:
    """Capture dispatch and combine as two CUDA graphs; returns the replays, or why capture failed."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                candidate.combine(candidate.dispatch(batch, verify=False), expert_out)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        gd, gc = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(gd):
            d = candidate.dispatch(batch, verify=False)
        with torch.cuda.graph(gc, pool=gd.pool()):
            candidate.combine(d, expert_out)
        torch.cuda.synchronize()
        keep = (d,)  # keep the captured dispatch's tensors alive for the combine graph

        def replay_d() -> None:
            gd.replay()

        def replay_c() -> None:
            _ = keep
            gc.replay()

        return replay_d, replay_c
    except Exception as exc:  # capture is an optimisation; eager timing stays valid
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        return f"CUDA graph capture failed ({type(exc).__name__}: {first}); timed eagerly"


def time_candidate(
    candidate: Any,
    ctx: RankContext,
    batch: LocalBatch,
    expert_out: torch.Tensor,
    *,
    time_cap_s: float,
    warmup: int,
    min_iters: int,
    max_iters: int,
    use_graphs: bool,
    declared_graph_safe: bool,
) -> TimingResult:
    """Time ``candidate`` on ``batch``; CUDA graphs only where the catalogue declares the backend graph-safe
    (``declared_graph_safe``) and hwtune's driver of it can be captured (``candidate.graph_safe``)."""
    notes: list[str] = []
    state: dict[str, Any] = {}

    def eager_d() -> None:
        state["d"] = candidate.dispatch(batch, verify=False)

    def eager_c() -> None:
        candidate.combine(state.pop("d"), expert_out)

    step_d, step_c = eager_d, eager_c
    method = "cuda_event" if ctx.is_cuda else "perf_counter"
    can_capture = declared_graph_safe and getattr(candidate, "graph_safe", False)
    if ctx.is_cuda and use_graphs and can_capture:
        captured = _capture(candidate, ctx, batch, expert_out)
        ok = not isinstance(captured, str)
        all_ok = all(ctx.all_gather_object(ok))
        if all_ok:
            assert not isinstance(captured, str)
            step_d, step_c = captured
            method = "cuda_graph"
        else:
            notes.append(
                captured
                if isinstance(captured, str)
                else "CUDA graph capture failed on another rank; all ranks timed eagerly"
            )
    elif ctx.is_cuda and use_graphs and not declared_graph_safe:
        notes.append(f"{candidate.name} is not declared CUDA-graph safe; timed with eager launches")
    elif ctx.is_cuda and use_graphs:
        notes.append(
            f"the catalogue declares CUDA graphs for {candidate.name}, but hwtune's driver of it "
            "cannot be captured; timed with eager launches"
        )

    flag = torch.ones(1, device=ctx.device) if ctx.is_cuda else None
    t0 = time.perf_counter()
    for _ in range(max(1, warmup)):
        barrier(ctx, flag)
        step_d()
        step_c()
    barrier(ctx, flag)
    est = (time.perf_counter() - t0) / max(1, warmup)
    est = float(reduce_max(ctx, torch.tensor([est]))[0])
    n = int(min(max_iters, max(min_iters, time_cap_s / max(est, 1e-9))))

    samples = torch.zeros((n, 3), dtype=torch.float64)
    if ctx.is_cuda:
        events = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(n)]
        for i in range(n):
            barrier(ctx, flag)
            events[i][0].record()
            step_d()
            events[i][1].record()
            step_c()
            events[i][2].record()
        torch.cuda.synchronize()
        for i, (a, b, c) in enumerate(events):
            samples[i, 0] = a.elapsed_time(b) * 1e3
            samples[i, 1] = b.elapsed_time(c) * 1e3
            samples[i, 2] = a.elapsed_time(c) * 1e3
    else:
        for i in range(n):
            barrier(ctx)
            t_start = time.perf_counter()
            step_d()
            t_mid = time.perf_counter()
            step_c()
            t_end = time.perf_counter()
            samples[i, 0] = (t_mid - t_start) * 1e6
            samples[i, 1] = (t_end - t_mid) * 1e6
            samples[i, 2] = (t_end - t_start) * 1e6
    worst = reduce_max(ctx, samples)
    return TimingResult(
        total_us=worst[:, 2].tolist(),
        dispatch_us=worst[:, 0].tolist(),
        combine_us=worst[:, 1].tolist(),
        method=method,
        warmup=max(1, warmup),
        notes=notes,
    )

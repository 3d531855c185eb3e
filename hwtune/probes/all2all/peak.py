"""The interconnect's measured all-to-all peak: one large ``all_to_all_single`` with equal splits.

Achieved bandwidth of a candidate means little alone; this is what the same GPUs and library reach when
every rank sends a large, evenly split buffer to every other rank (NCCL on CUDA, gloo on CPU). Reported as
algorithm bandwidth: bytes each rank sends to *other* ranks, divided by the slowest rank's time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist

from hwtune.probes.all2all.timing import barrier, reduce_max
from hwtune.probes.all2all.trial import ItemResult, TrialSpec


def measure_peak(ctx: Any, spec: TrialSpec, iters: int = 20, warmup: int = 5) -> ItemResult:
    """The interconnect's all-to-all peak on this group: median (over iterations) of the slowest rank's time for one
    evenly split ``all_to_all_single`` of ``spec.peak_bytes``, as algorithm bandwidth in ``extra``."""
    from hwtune.core.records import LatencyStats

    ws = ctx.world_size
    n = max(ws, spec.peak_bytes // ws * ws)
    send = torch.ones(n, dtype=torch.uint8, device=ctx.device)
    recv = torch.empty_like(send)
    flag = torch.ones(1, device=ctx.device) if ctx.is_cuda else None
    for _ in range(warmup):
        barrier(ctx, flag)
        dist.all_to_all_single(recv, send, group=ctx.group)
    samples = torch.zeros(iters, dtype=torch.float64)
    for i in range(iters):
        barrier(ctx, flag)
        if ctx.is_cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dist.all_to_all_single(recv, send, group=ctx.group)
            b.record()
            b.synchronize()
            samples[i] = a.elapsed_time(b) * 1e3
        else:
            import time

            t0 = time.perf_counter()
            dist.all_to_all_single(recv, send, group=ctx.group)
            samples[i] = (time.perf_counter() - t0) * 1e6
    worst = reduce_max(ctx, samples).tolist()
    stats = LatencyStats.from_samples(worst)
    sent = n * (ws - 1) / ws
    gbps = sent / (stats.median_us * 1e-6) / 1e9
    return ItemResult(
        "ok",
        "",
        stats=dataclasses.asdict(stats),
        timing_method="cuda_event" if ctx.is_cuda else "perf_counter",
        extra={"peak_gbps": gbps, "bytes_per_rank": n, "bytes_to_other_ranks": sent, "world_size": ws},
    )

"""The timing harness: cold-cache, per-iteration GPU times until the median is pinned down.

Each timed iteration: flush L2 (zero a buffer twice its size, so small shapes are not timed from cache),
let the GPU spin briefly so the host can enqueue the candidate ahead of it (launch overhead stays out of
the interval), then time the candidate alone between two CUDA events; CUDA-graph replay where the
candidate supports graphs, plain calls otherwise. A plain call's spin is sized to its host time, measured
after warm-up while the GPU is busy (``host_lead``): a fixed spin shorter than the host's launch sequence (PyTorch
ops, dynamo's guards) put host time into the interval, and that varies between processes (a fresh `bench` against a
long-lived tune worker). A call that waits for the GPU (a host sync) cannot be timed free of host time; it is
said in the report. Iterations continue in batches until the distribution-free
95 % confidence interval of the median is within ``target_ci`` of it, or the per-candidate time cap is hit.
Warm-up (and JIT compilation, which happens at the first call) is excluded.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from hwtune.core.records import LatencyStats


@dataclass(frozen=True)
class TimingOptions:
    """How long and how carefully to time one candidate: the time cap, the median's target confidence, rep limits,
    warm-up, L2 flushing, CUDA graphs and the GPU lead spin."""

    time_cap_s: float = 3.0
    target_ci: float = 0.01
    min_reps: int = 20
    max_reps: int = 5000
    warmup: int = 3
    #: Warm-up lasts at least this long (and ``warmup`` calls), so clocks have ramped before timing.
    warmup_ms: float = 30.0
    batch: int = 20
    flush_l2: bool = True
    use_graphs: bool = True
    #: GPU spin before each timed iteration, in microseconds (hides host launch overhead of eager calls); at least
    #: this, longer for a plain call whose host time needs it (``host_lead``). 0: no spin.
    lead_us: float = 80.0


#: GPU spin while a plain call's host time is measured: longer than any launch sequence, so a call that returns
#: only after it ended waited for the GPU.
PROBE_SPIN_US = 5000.0


def median_ci_rel(samples: list[float]) -> float:
    """Half-width of the distribution-free 95 % confidence interval of the median, over the median (inf
    below 6 samples). Order statistics: ranks n/2 -/+ 1.96 sqrt(n)/2, the upper one 1-based."""
    n = len(samples)
    if n < 6:
        return math.inf
    xs = sorted(samples)
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)) - 1)
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    med = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    return (xs[hi] - xs[lo]) / 2 / med if med > 0 else math.inf


def _done(samples: list[float], opts: TimingOptions, started: float) -> bool:
    if len(samples) >= opts.max_reps:
        return True
    if len(samples) < opts.min_reps:
        return time.perf_counter() - started > 4 * opts.time_cap_s  # a very slow candidate: stop anyway
    return median_ci_rel(samples) <= opts.target_ci or time.perf_counter() - started > opts.time_cap_s


def time_cpu(fn: Callable[[], Any], opts: TimingOptions | None = None) -> tuple[LatencyStats, str]:
    """Wall-clock per call (CPU candidates)."""
    opts = opts or TimingOptions()
    for _ in range(opts.warmup):
        fn()
    samples: list[float] = []
    started = time.perf_counter()
    while not _done(samples, opts, started):
        for _ in range(opts.batch):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e6)
    return LatencyStats.from_samples(samples, ci95_rel=median_ci_rel(samples)), "wall_clock"


def time_cuda(
    fn: Callable[[], Any],
    *,
    l2_bytes: int,
    opts: TimingOptions | None = None,
    graph: Any | None = None,
    report: dict[str, Any] | None = None,
) -> tuple[LatencyStats, str]:
    """Per-iteration CUDA-event times of ``fn`` (or of ``graph.replay()`` when a captured graph is given). For a
    plain call, ``report`` (if given) gets its host time, the spin used and whether it synchronised."""
    import torch

    opts = opts or TimingOptions()
    run = graph.replay if graph is not None else fn
    flush = torch.empty(max(2 * l2_bytes, 1 << 20), dtype=torch.uint8, device="cuda") if opts.flush_l2 else None
    _warm_up(run, flush, opts)
    lead_us = opts.lead_us
    if graph is None and lead_us > 0:
        host_us, synced = host_lead(run)
        lead_us = lead_us if synced else max(lead_us, 1.5 * host_us + 20.0)
        if report is not None:
            report.update(host_us=round(host_us, 1), lead_us=round(lead_us, 1), host_sync=synced)
    cycles = int(lead_us * _clock_mhz())
    samples: list[float] = []
    started = time.perf_counter()
    while not _done(samples, opts, started):
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(opts.batch)
        ]
        for start, end in events:
            if flush is not None:
                flush.zero_()
            if cycles:
                torch.cuda._sleep(cycles)
            start.record()
            run()
            end.record()
        torch.cuda.synchronize()
        samples.extend(start.elapsed_time(end) * 1e3 for start, end in events)
    method = "cuda_graph" if graph is not None else "cuda_events"
    return LatencyStats.from_samples(samples, ci95_rel=median_ci_rel(samples)), method


def _warm_up(run: Callable[[], Any], flush: Any, opts: TimingOptions) -> None:
    """``opts.warmup`` calls and at least ``opts.warmup_ms``, so clocks have ramped before timing."""
    import torch

    warm_start = time.perf_counter()
    n = 0
    while n < opts.warmup or (time.perf_counter() - warm_start) * 1e3 < opts.warmup_ms:
        if flush is not None:
            flush.zero_()
        run()
        n += 1
        if n % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()


def host_lead(run: Callable[[], Any], tries: int = 3) -> tuple[float, bool]:
    """The host time of one call of ``run`` in microseconds (the median of ``tries``), each call made while the GPU
    spins ``PROBE_SPIN_US``, and whether the call waits for the GPU: even its fastest try returned only after most of
    the spin (one slow try, a garbage collection or an allocator's slow path, is not a sync)."""
    import torch

    times = []
    for _ in range(tries):
        torch.cuda._sleep(int(PROBE_SPIN_US * _clock_mhz()))
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    times.sort()
    return times[len(times) // 2], times[0] >= 0.8 * PROBE_SPIN_US


@functools.cache
def _clock_mhz() -> float:
    """SM clock for torch.cuda._sleep's cycle count; NVML's max clock, else a Hopper-like 1980 MHz. Read once per
    process: NVML's init and shutdown on every timed call added up in the config searches, which time dozens."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            return float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 1980.0


def capture_graph(fn: Callable[[], Any]) -> Any:
    """Capture ``fn`` in a CUDA graph on a side stream (after it has run once eagerly)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm the side stream (allocator, lazy inits)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph

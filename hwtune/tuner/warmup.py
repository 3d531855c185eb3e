"""Kernel JIT before timing, in parallel: compile each (backend, tactic, phase) once on a small batch.

FlashInfer JIT-compiles one module per kernel variant (12 s for a decode variant, 80-95 s for Hopper's
prefill on an H100) and caches it on disk; Triton caches compiled kernels too. Compiling them up front in
several worker processes at once means the measurement loop finds them cached, and the compile time is
reported apart from run time. Variants depend on the spec (dtype, head size, page size, masks), not on batch
or length, so a small batch of the same spec compiles the same modules. Backends compiled per shape
(``Backend.compile_per_shape``: torch.compile specialises on shapes) are left out: their compilation
belongs to each measurement (recorded there).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable

from hwtune.core import catalogue
from hwtune.core.devices import DeviceProfile
from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.measure import Planned, measure_attention, plan_candidates
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.timing import TimingOptions
from hwtune.tuner.plan import Plan

_TINY = TimingOptions(time_cap_s=0.01, min_reps=1, max_reps=2, batch=1, warmup=0, flush_l2=False)


def _small(w: AttentionWorkload) -> AttentionWorkload:
    page = w.spec.block_size
    ctx = max(2 * page, min(w.context_len, 4 * page) if w.phase == "decode" else w.query_len + page)
    q = w.query_len if w.phase == "decode" else min(w.query_len, 64)
    return replace(
        w, batch=2 if w.phase != "mixed" else 3, context_len=max(ctx, q + page), query_len=q, context_lens=None
    )


def jobs(
    plan: Plan, profile: DeviceProfile, backends: tuple[str, ...] | None
) -> list[tuple[AttentionWorkload, Planned]]:
    """One small job per (spec, phase, backend, tactic) the plan will run."""
    seen: set[tuple] = set()
    out = []
    for item in plan.items:
        w = item.workload
        if not isinstance(w, AttentionWorkload):
            continue
        for c in plan_candidates(w, profile, item.backends or backends):
            key = (w.spec, w.phase, w.query_len if w.phase == "decode" else 0, c.backend, c.tactic)
            if c.runnable and not catalogue.get("attention", c.backend).compile_per_shape and key not in seen:
                seen.add(key)
                out.append((_small(w), c))
    return out


def warm_up(
    plan: Plan,
    profile: DeviceProfile,
    backends: tuple[str, ...] | None,
    *,
    parallel: int = 4,
    progress: Callable[[str, int, int, str], None] | None = None,
) -> dict[str, float]:
    """Compile every variant the plan needs; returns the longest compile time per backend/tactic."""
    todo = jobs(plan, profile, backends)
    if not todo:
        return {}
    times: dict[str, float] = {}
    done = 0

    def run(chunk: list[tuple[AttentionWorkload, Planned]]) -> list[tuple[str, float | None]]:
        out = []
        with WorkerPool() as pool:
            for w, c in chunk:
                [rec] = measure_attention(
                    w, [c], device="cuda", profile=profile, timing=_TINY, timeout_s=900, pool=pool
                )
                out.append((f"{c.backend}/{c.tactic}", rec.compile_time_s))
        return out

    n = max(1, min(parallel, len(todo)))
    chunks = [todo[i::n] for i in range(n)]
    if progress:
        progress("warmup", 0, len(todo), f"compiling {len(todo)} kernel variants in {n} processes")
    with ThreadPoolExecutor(max_workers=n) as ex:
        for result in ex.map(run, chunks):
            for name, seconds in result:
                done += 1
                if seconds is not None:
                    times[name] = max(times.get(name, 0.0), seconds)
    if progress:
        progress("warmup", done, len(todo), "kernels compiled")
    return times

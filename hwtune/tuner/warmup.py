"""Kernel JIT before timing, in parallel: compile each (backend, tactic, phase) once on a small batch.

FlashInfer JIT-compiles one module per kernel variant (12 s for a decode variant, 80-95 s for Hopper's
prefill on an H100) and caches it on disk; Triton caches compiled kernels too. Compiling them up front in
several worker processes at once means the measurement loop finds them cached, and the compile time is
reported apart from run time. Variants depend on the spec (dtype, head size, page size, masks), not on batch
or length, so a small batch of the same spec compiles the same modules. Backends compiled per shape
(``Backend.compile_per_shape``: torch.compile specialises on shapes) are left out: their compilation
belongs to each measurement (recorded there).

A tactic that searches its configs per workload (``Tactic.recompile_s`` set: HWTUNE_TRITON_ATTN and HWTUNE_TRITON_MLA
``tuned``) compiles its whole space once per set of kernel constexprs, and which set a workload needs depends on its
length (split-KV or not, KV within L2 or not): 36-40 s each on an H100 (2026-11-27), paid inside the measurement
loop. Such a tactic is also warmed up at the longest context of each group (decode: per query length; prefill: per
chunk, on the longest prefix), so those compiles run here in parallel with FlashInfer's JIT instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable

from hwtune.core import catalogue
from hwtune.core.devices import DeviceProfile
from hwtune.core.records import FAILED
from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.measure import Planned, measure_attention
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.timing import TimingOptions
from hwtune.tuner.plan import Plan, PlanItem
from hwtune.tuner.run import describe_item
from hwtune.tuner.schedule import narrowed

#: Statuses of a warm-up job whose kernels may not have compiled: the failures but a wrong answer, which ran them.
UNCOMPILED = FAILED - {"wrong_answer"}

log = logging.getLogger(__name__)

_TINY = TimingOptions(time_cap_s=0.01, min_reps=1, max_reps=2, batch=1, warmup=0, flush_l2=False)


def _small(w: AttentionWorkload) -> AttentionWorkload:
    page = w.spec.block_size
    ctx = max(2 * page, min(w.context_len, 4 * page) if w.phase == "decode" else w.query_len + page)
    q = w.query_len if w.phase == "decode" else min(w.query_len, 64)
    return replace(
        w, batch=2 if w.phase != "mixed" else 3, context_len=max(ctx, q + page), query_len=q, context_lens=None
    )


def _searched(c: Planned) -> bool:
    """Whether a candidate searches its configs per workload (module docstring)."""
    record = catalogue.get("attention", c.backend)
    tactic = record.tactic(c.tactic)
    return not record.compile_per_shape and tactic is not None and tactic.recompile_s is not None


def _longest(w: AttentionWorkload, longest: AttentionWorkload) -> AttentionWorkload:
    """The small job of ``w``'s group at the group's longest context (decode: batch 2; prefill: one chunk)."""
    if w.phase == "decode":
        return replace(w, batch=min(2, longest.batch), context_len=longest.context_len, context_lens=None)
    return replace(longest, batch=1, context_lens=None)


def jobs(
    plan: Plan, profile: DeviceProfile, backends: tuple[str, ...] | None, *, assume_installed: bool = False
) -> list[tuple[AttentionWorkload, Planned]]:
    """One small job per (spec, phase, backend, tactic) the plan will run, and for a searched tactic one more at its
    group's longest context (module docstring). ``assume_installed``: as ``plan_candidates`` (a dry run's estimate
    for another machine)."""
    seen: set[tuple] = set()
    out = []
    longest: dict[tuple, AttentionWorkload] = {}
    for item in plan.items:
        w = item.workload
        if isinstance(w, AttentionWorkload) and w.phase in ("decode", "prefill") and not w.context_lens:
            group = (w.spec, w.phase, w.query_len)
            if group not in longest or w.context_len > longest[group].context_len:
                longest[group] = w
    for item in plan.items:
        w = item.workload
        if not isinstance(w, AttentionWorkload):
            continue
        for c in plan.candidates(w, profile, narrowed(item, backends), assume_installed=assume_installed):
            key = (w.spec, w.phase, w.query_len if w.phase == "decode" else 0, c.backend, c.tactic)
            if c.runnable and not catalogue.get("attention", c.backend).compile_per_shape and key not in seen:
                seen.add(key)
                out.append((_small(w), c))
            group = (w.spec, w.phase, w.query_len)
            if c.runnable and group in longest and _searched(c) and (group, c.backend, c.tactic) not in seen:
                seen.add((group, c.backend, c.tactic))
                out.append((_longest(w, longest[group]), c))
    return out


def warm_up(
    plan: Plan,
    profile: DeviceProfile,
    backends: tuple[str, ...] | None,
    *,
    parallel: int = 4,
    progress: Callable[[str, int, int, str], None] | None = None,
    notes: list[str] | None = None,
) -> dict[str, float]:
    """Compile every variant the plan needs; returns the longest compile time per backend/tactic. ``parallel``
    worker processes take the jobs from one queue, longest expected compile first (``by_expected_compile``), so that
    no process is left with several long ones while the others idle, and never two jobs of one ``family`` at once
    (the second would wait for the first's compile). A job that fails (its kernels then compile when
    first measured) is said in ``notes``."""
    todo = by_expected_compile(jobs(plan, profile, backends))
    if not todo:
        return {}
    times: dict[str, float] = {}
    queue = _Jobs(todo)
    start = time.monotonic()

    def run() -> list[tuple[str, float | None, str | None]]:
        out = []
        with WorkerPool() as pool:
            while (job := queue.take()) is not None:
                w, c = job
                t0 = time.monotonic()
                rec = None
                try:
                    [rec] = measure_attention(
                        w, [c], device="cuda", profile=profile, timing=_TINY, timeout_s=900, pool=pool
                    )
                finally:
                    queue.done(job, failed=rec is None or rec.status in UNCOMPILED)
                name = f"{c.backend}/{c.tactic}"
                log.info(
                    "warm-up %s %s: %s, compile %.1f s, from %.1f s to %.1f s",
                    name,
                    describe_item(PlanItem(w)),
                    rec.status,
                    rec.compile_time_s or 0.0,
                    t0 - start,
                    time.monotonic() - start,
                )
                failed = f"{name} {describe_item(PlanItem(w))}: {rec.status} {rec.message}"
                out.append((name, rec.compile_time_s, failed if rec.status in UNCOMPILED else None))
        return out

    n = max(1, min(parallel, len(todo)))
    if progress:
        progress("warmup", 0, len(todo), f"compiling {len(todo)} kernel variants in {n} processes")
    with ThreadPoolExecutor(max_workers=n) as ex:
        results = [f.result() for f in [ex.submit(run) for _ in range(n)]]
    failures = []
    for name, seconds, failure in (r for result in results for r in result):
        if seconds is not None:
            times[name] = max(times.get(name, 0.0), seconds)
        if failure:
            failures.append(failure[:300])
    if failures and notes is not None:
        skipped = f" ({queue.dropped} more of their compile families not tried)" if queue.dropped else ""
        notes.append(
            f"warm-up: {len(failures)} of {len(todo)} kernel variant job(s) failed{skipped}, so their kernels compile "
            f"when first measured (timed there as compilation): {'; '.join(failures)}"
        )
    if progress:
        progress("warmup", len(todo), len(todo), "kernels compiled")
    return times


def family(job: tuple[AttentionWorkload, Planned]) -> tuple:
    """The jobs that compile the same kernels as ``job``. A JIT tactic builds one module per spec that serves every
    phase and KV layout (FlashInfer's fa3 decode, prefill and mixed jobs all waited 93 s on one module build in a tune
    on an H100, 2026-11-27, holding three of four processes; FlashInfer locks a module while it builds it); a searched
    tactic compiles per kernel class, so its family is the job's own workload, in either layout."""
    w, c = job
    spec = w.spec.any_layout()
    if _searched(c):
        return spec, c.backend, c.tactic, w.phase, w.query_len, w.batch, w.context_len
    return spec, c.backend, c.tactic


class _Jobs:
    """The warm-up's jobs in order; ``take`` gives the first whose family has no job running, waiting while every job
    left has one (``family``), and None when none is left. A failed job drops the rest of its family (they would
    only try the same compile again, one after another, up to the job timeout each); ``dropped`` counts them."""

    def __init__(self, todo: list[tuple[AttentionWorkload, Planned]]) -> None:
        self.todo = list(todo)
        self.running: Counter[tuple] = Counter()
        self.changed = threading.Condition()
        self.dropped = 0

    def take(self) -> tuple[AttentionWorkload, Planned] | None:
        with self.changed:
            while self.todo:
                for i, job in enumerate(self.todo):
                    if not self.running[family(job)]:
                        self.running[family(job)] += 1
                        return self.todo.pop(i)
                self.changed.wait()
            return None

    def done(self, job: tuple[AttentionWorkload, Planned], failed: bool = False) -> None:
        with self.changed:
            fam = family(job)
            self.running[fam] -= 1
            if failed:
                left = [j for j in self.todo if family(j) != fam]
                self.dropped += len(self.todo) - len(left)
                self.todo = left
            self.changed.notify_all()


def by_expected_compile(todo: list[tuple[AttentionWorkload, Planned]]) -> list[tuple[AttentionWorkload, Planned]]:
    """Jobs longest expected first-use compile first (``Tactic.compile_s`` from the catalogue; unstated: 5 s), in
    their planned order among equals; a job that repeats an earlier one in another KV layout waits until every first
    one has started. The layout is a run-time argument of the kernels (FlashInfer's ``kv_layout``, the Triton kernels'
    strides), so a repeat mostly finds its kernels cached; started together, it would only wait for the same compile
    (FlashInfer locks a module while it builds it) and keep a process from compiling something else."""

    def expected(job: tuple[AttentionWorkload, Planned]) -> float:
        tactic = catalogue.get("attention", job[1].backend).tactic(job[1].tactic)
        return tactic.compile_s if tactic is not None and tactic.compile_s is not None else 5.0

    first_layout: dict[tuple, str] = {}
    repeats: set[int] = set()
    for i, (w, c) in enumerate(todo):
        same = (replace(w, spec=w.spec.any_layout()), c.backend, c.tactic)
        if first_layout.setdefault(same, w.spec.kv_layout) != w.spec.kv_layout:
            repeats.add(i)
    order = sorted(range(len(todo)), key=lambda i: (i in repeats, -expected(todo[i])))
    return [todo[i] for i in order]

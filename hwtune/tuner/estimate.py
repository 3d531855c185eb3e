"""How long a plan takes to measure (``hwtune tune --dry-run``): compilation from the catalogue plus a per-candidate
cost calibrated on measured H100 tunes."""

from __future__ import annotations

import math

from hwtune.core import catalogue
from hwtune.core.devices import DeviceProfile
from hwtune.core.types import AttentionWorkload
from hwtune.tuner.plan import Plan
from hwtune.tuner.schedule import narrowed


def _compile_seconds(backend: str, tactic: str, first: bool = True) -> float:
    """Compile estimate of a (backend, tactic) on one workload from its catalogue record: first use (5 s when
    unstated); on a later workload ``Tactic.recompile_s``, else the first-use figure again for a backend compiled per
    shape and nothing for a JIT kernel."""
    record = catalogue.get("attention", backend)
    found = record.tactic(tactic)
    first_s = found.compile_s if found is not None and found.compile_s is not None else 5.0
    if first:
        return first_s
    if found is not None and found.recompile_s is not None:
        return found.recompile_s
    return first_s if record.compile_per_shape else 0.0


def candidate_seconds(time_cap_s: float) -> float:
    """Seconds one candidate takes on one workload besides compilation (worker round trip, correctness gate,
    timing), from H100 tunes at a 2 s cap: (elapsed - compile) / records was 0.19-0.39 s and 0.29-0.59 s per record
    that passed (benchmarks/results/regret_*_h100_2026-11-2*.json); timing stops well before the cap once its
    interval is tight, so the cap enters only a quarter."""
    return 0.1 + 0.25 * time_cap_s


#: A warm-up job whose kernels its family already compiled: a worker round trip, inputs, the gate (H100, 2026-11-27:
#: 0.1-2 s in the warm-up timeline of benchmarks/results/tune_every_backend_llama-3.1-8b_h100_2026-11-27_host_lead.log).
WARM_JOB_S = 0.5


def warmup_seconds(
    plan: Plan, profile: DeviceProfile, backends: tuple[str, ...] | None = None, parallel: int = 4
) -> float:
    """Wall time of the tune's JIT warm-up (``tuner/warmup.py``): its jobs on ``parallel`` processes, each taking the
    longest expected job left; a job costs its tactic's first-use compile (``Tactic.compile_s``) the first time its
    compile family meets it (every job of a searched tactic: each compiles its own kernel class) and ``WARM_JOB_S``
    after."""
    from hwtune.tuner.warmup import by_expected_compile, family, jobs

    todo = by_expected_compile(jobs(plan, profile, (backends or plan.backends), assume_installed=profile.simulated))
    compiled: set[tuple] = set()
    costs = []
    for job in todo:
        fam = family(job)
        costs.append(WARM_JOB_S if fam in compiled else _compile_seconds(job[1].backend, job[1].tactic))
        compiled.add(fam)
    free = [0.0] * max(1, parallel)
    for cost in sorted(costs, reverse=True):
        i = free.index(min(free))
        free[i] += cost
    return max(free)


def estimate_seconds(
    plan: Plan, profile: DeviceProfile, backends: tuple[str, ...] | None = None, parallel: int = 4
) -> float:
    """Rough wall time of a plan: the JIT warm-up (``warmup_seconds``; what it compiles costs nothing later), then
    per candidate ``candidate_seconds``, plus compilation from the catalogue for a backend compiled per shape
    (``Tactic.compile_s`` at its first workload) and ``Tactic.recompile_s`` per later workload for tactics compiled or
    searched per workload (``_compile_seconds``). For a simulated device (a dry run planning for another machine) the
    backends' packages are assumed installed there."""
    warmed = profile.is_cuda  # the warm-up runs on CUDA devices only
    seconds, seen = (warmup_seconds(plan, profile, backends, parallel) if warmed else 0.0), set()
    for item in plan.items:
        if not isinstance(item.workload, AttentionWorkload):
            seconds += 8 * (5 + plan.time_cap_s)
            continue
        names = narrowed(item, backends or plan.backends)
        planned = plan.candidates(item.workload, profile, names, assume_installed=profile.simulated)
        cands = [c for c in planned if c.runnable]
        for c in cands:
            first = (c.backend, c.tactic) not in seen
            if not warmed or catalogue.get("attention", c.backend).compile_per_shape or not first:
                seconds += _compile_seconds(c.backend, c.tactic, first=first)
            seen.add((c.backend, c.tactic))
        seconds += len(cands) * candidate_seconds(plan.time_cap_s)
    return math.ceil(seconds)

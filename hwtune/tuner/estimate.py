"""How long a plan takes to measure (``hwtune tune --dry-run``): compilation from the catalogue plus a per-candidate
cost calibrated on measured H100 tunes."""

from __future__ import annotations

import math

from hwtune.core import catalogue
from hwtune.core.devices import DeviceProfile
from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.measure import plan_candidates
from hwtune.tuner.plan import Plan


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


def estimate_seconds(plan: Plan, profile: DeviceProfile, backends: tuple[str, ...] | None = None) -> float:
    """Rough wall time of a plan: per candidate ``candidate_seconds``, plus compilation from the catalogue
    (``Tactic.compile_s``, measured on an H100) at each (backend, tactic)'s first workload, then ``Tactic.recompile_s``
    per later one for tactics compiled or searched per workload (``_compile_seconds``). For a simulated device
    (a dry run planning for another machine) the backends' packages are assumed installed there."""
    seconds, seen = 0.0, set()
    for item in plan.items:
        if not isinstance(item.workload, AttentionWorkload):
            seconds += 8 * (5 + plan.time_cap_s)
            continue
        names = item.backends or backends or plan.backends
        planned = plan_candidates(item.workload, profile, names, assume_installed=profile.simulated)
        cands = [c for c in planned if c.runnable]
        for c in cands:
            seconds += _compile_seconds(c.backend, c.tactic, first=(c.backend, c.tactic) not in seen)
            seen.add((c.backend, c.tactic))
        seconds += len(cands) * candidate_seconds(plan.time_cap_s)
    return math.ceil(seconds)

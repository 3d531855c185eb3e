"""The library entry the tuner calls: measure all2all candidates, one MeasurementRecord per backend.

For each backend: validate against the catalogue first (an invalid candidate is ``unsupported`` with the
catalogue's reasons and never runs), check its Python modules without importing them, then run it in a
fresh process group (``launcher.run_trial``): correctness on every rank, timing only when all ranks agree
it is correct. Nothing here imports torch: only the spawned ranks do.

``measure_all2all_sweep`` runs several workloads that share a spec (a token-count sweep) in one process
group per backend, which is how the GPU grid stays affordable; a crash or hang still ends only the
workload it happened in, and the rest continue in a fresh group.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from hwtune.core import catalogue
from hwtune.core.devices import CPU_PROFILE, DeviceProfile
from hwtune.core.environment import Environment, current_environment
from hwtune.core.errors import InvalidSpecError
from hwtune.core.records import MeasurementRecord
from hwtune.core.types import All2AllSpec, All2AllWorkload
from hwtune.core.validation import check, only_liftable
from hwtune.probes.all2all.launcher import run_trial
from hwtune.probes.all2all.trial import ItemResult, TrialItem, TrialSpec
from hwtune.probes.contract import to_record
from hwtune.probes.registry import missing_modules, probe_ref

DeviceKind = Literal["cuda", "cpu"]


def device_profile(device: str) -> DeviceProfile:
    """The profile validation runs against: NVML's view of this machine's GPU, or the CPU profile."""
    if device == "cpu":
        return CPU_PROFILE
    if device != "cuda":
        raise InvalidSpecError(f"unknown device {device!r} for all2all measurement; use 'cuda' or 'cpu'")
    from hwtune.core.detect import detect

    return detect()


def visible_gpus(profile: DeviceProfile) -> int:
    """GPUs a trial may use: those CUDA_VISIBLE_DEVICES lists when set (empty or -1 means none), else NVML's count."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"])
    return profile.gpu_count if profile.is_cuda else 0


def _preflight(
    backend: catalogue.Backend,
    spec: All2AllSpec,
    device: str,
    profile: DeviceProfile,
    *,
    explore: bool,
    ref: str | None,
    named: bool = False,
) -> tuple[str | None, list[str]]:
    """Why this backend cannot run this spec here (None: run it), and the catalogue's rejections. A backend a person
    ``named`` whose only rejection is its activation-dtype rule runs: its correctness gate decides."""
    found = check(backend, spec, profile)
    rejections = [r.message for r in found]
    entry = backend.probe
    missing = missing_modules(entry.modules if entry and ref is None else ())
    if missing:  # the module first, in the words people search for; then what else the catalogue said
        others = [r.message for r in found if r.code != "package"]
        return " ".join([f"{', '.join(missing)} is not installed.", *others]), rejections
    if rejections and not explore and not (named and only_liftable(found)):
        return " ".join(rejections), rejections
    if ref is None and entry is None:
        return f"hwtune has no runnable implementation of {backend.name}.", rejections
    if device == "cuda":
        if not profile.is_cuda:
            return (
                "no NVIDIA GPU is visible (NVML reports none); measure on a GPU node or use --device cpu.",
                rejections,
            )
        if visible_gpus(profile) < spec.ep_size:
            return (
                f"EP size {spec.ep_size} needs {spec.ep_size} GPUs (one per rank); "
                f"{visible_gpus(profile)} are visible.",
                rejections,
            )
    return None, rejections


def _record(
    wl: All2AllWorkload,
    backend: str,
    res: ItemResult,
    env: Environment,
    run_id: str | None,
    device: str,
    extra: Mapping[str, Any],
) -> MeasurementRecord:
    return to_record(
        "all2all", wl, backend, "default", res.to_dict(), env=env, run_id=run_id, extra={**extra, "device": device}
    )


def _dtype_test_message(status: str, message: str, rejections: list[str]) -> str:
    """What a record of a named backend measured despite its activation-dtype rule says: the gate decided."""
    rule = " ".join(rejections)
    if status == "ok":
        return (
            f"measured although the catalogue rejects its activation dtype, because it was named ({rule}); its "
            "correctness gate passed, so once this record is stored, and unless a measurement of it fails here, "
            "selection in this environment lifts the rule for this exact spec"
        )
    outcome = {"wrong_answer": "wrong answer", "crashed": "crash", "unsupported": "refusal"}.get(status, status)
    return (
        f"{message} (measured although the catalogue rejects its activation dtype, because it was named: "
        f"{rule} This {outcome} keeps the rule closed.)"
    ).strip()


def _labels(reason: str | None, rejections: list[str], explore: bool) -> tuple[dict[str, Any], bool]:
    """A record's extra fields for the catalogue's rejections, and whether the run tests a named backend's
    activation-dtype rule (the only rejection ``_preflight`` lets through without ``explore``)."""
    extra: dict[str, Any] = {"catalogue_rejections": rejections} if rejections else {}
    if explore and rejections:
        extra["explore"] = True
    dtype_test = reason is None and bool(rejections) and not explore
    if dtype_test:
        extra["dtype_rule_tested"] = True
    return extra, dtype_test


def _explain(res: ItemResult, rejections: list[str], explore: bool, dtype_test: bool) -> None:
    """Say in the result's message that it was measured although the catalogue rejects it, and what follows."""
    if explore and rejections and res.status == "ok":
        res.message = "measured although the catalogue rejects it (explore mode): " + " ".join(rejections)
    if dtype_test:
        res.message = _dtype_test_message(res.status, res.message, rejections)


def measure_all2all_sweep(
    workloads: Sequence[All2AllWorkload],
    backends: Sequence[str],
    *,
    device: DeviceKind = "cuda",
    world_size: int | None = None,
    timeout_s: float = 120,
    time_cap_s: float = 10,
    environment: Environment | None = None,
    run_id: str | None = None,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    peak_gbps: float | None = None,
    explore: bool = False,
    use_cuda_graphs: bool = True,
    warmup_iters: int = 3,
    min_iters: int = 5,
    max_iters: int = 1000,
    candidate_refs: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    named: Collection[str] = (),
) -> list[MeasurementRecord]:
    """Measure every backend on every workload; records are ordered by backend, then workload.

    ``explore`` runs candidates the catalogue rejects (their correctness is still checked), to find their
    real constraints; ``named`` lists backends a person asked for by name: one whose only rejection is its
    activation-dtype rule runs anyway and its correctness gate decides (an ``ok`` record, once stored, lets
    selection lift the rule for that exact spec in this environment: ``hwtune.selector.lifted``);
    ``candidate_refs`` maps a backend name to another implementation (``module:Class``), for tests and
    out-of-tree candidates; ``env`` adds variables to the spawned ranks' environment.
    """
    profile = device_profile(device)
    env_fp = environment or current_environment(profile)
    groups: dict[str, list[All2AllWorkload]] = {}
    for wl in workloads:
        if world_size is not None and world_size != wl.spec.ep_size:
            raise InvalidSpecError(
                f"world size {world_size} must equal the workload's EP size {wl.spec.ep_size}: "
                "each rank holds one EP shard"
            )
        groups.setdefault(wl.spec.key(), []).append(wl)
    records: list[MeasurementRecord] = []
    for name in backends:
        backend = catalogue.get("all2all", name)
        ref = (candidate_refs or {}).get(backend.name)
        for group in groups.values():
            spec = group[0].spec
            reason, rejections = _preflight(
                backend, spec, device, profile, explore=explore, ref=ref, named=backend.name in named
            )
            extra, dtype_test = _labels(reason, rejections, explore)
            if reason is not None:
                records += [
                    _record(wl, backend.name, ItemResult("unsupported", reason), env_fp, run_id, device, extra)
                    for wl in group
                ]
                continue
            trial = TrialSpec(
                backend=backend.name,
                candidate_ref=ref or probe_ref("all2all", backend.name),
                spec=spec.to_dict(),
                items=tuple(TrialItem(wl.tokens_per_rank, wl.routing) for wl in group),
                device=device,
                world_size=spec.ep_size,
                seed=seed,
                time_cap_s=time_cap_s,
                warmup_iters=warmup_iters,
                min_iters=min_iters,
                max_iters=max_iters,
                use_cuda_graphs=use_cuda_graphs,
                options=dict(options or {}),
                peak_gbps=peak_gbps,
                pg_timeout_s=max(1800.0, timeout_s * 4),
            )
            outcome = run_trial(trial, timeout_s=timeout_s, env=env)
            for wl, res in zip(group, outcome.results):
                _explain(res, rejections, explore, dtype_test)
                records.append(
                    _record(
                        wl,
                        backend.name,
                        res,
                        env_fp,
                        run_id,
                        device,
                        {**extra, "groups_spawned": outcome.groups_spawned},
                    )
                )
    return records


def measure_all2all(
    workload: All2AllWorkload,
    backends: Sequence[str],
    *,
    device: DeviceKind = "cuda",
    world_size: int | None = None,
    timeout_s: float = 120,
    time_cap_s: float = 10,
    environment: Environment | None = None,
    run_id: str | None = None,
    **kwargs: Any,
) -> list[MeasurementRecord]:
    """One record per backend (tactic "default") for one workload; see ``measure_all2all_sweep``."""
    return measure_all2all_sweep(
        [workload],
        backends,
        device=device,
        world_size=world_size,
        timeout_s=timeout_s,
        time_cap_s=time_cap_s,
        environment=environment,
        run_id=run_id,
        **kwargs,
    )


def measure_peak_bandwidth(
    world_size: int,
    *,
    device: DeviceKind = "cuda",
    nbytes: int = 256 * 1024 * 1024,
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
) -> ItemResult:
    """The interconnect's all-to-all peak (``peak.py``): ``extra["peak_gbps"]`` on success."""
    spec = All2AllSpec(ep_size=world_size, num_experts=world_size, topk=1, hidden_size=1)
    trial = TrialSpec(
        backend="peak",
        candidate_ref="",
        spec=spec.to_dict(),
        items=(TrialItem(1),),
        device=device,
        world_size=world_size,
        mode="peak",
        peak_bytes=nbytes,
    )
    return run_trial(trial, timeout_s=timeout_s, env=env).results[0]

"""select_attention / select_all2all: the engine-init entry points.

Cheap and safe at engine start: no torch import, no CUDA initialisation (devices come from NVML or a
simulated profile), and a process-wide cache so that asking again for the same spec costs microseconds.
Validation runs first; an explicit request is honoured only when valid and is a loud error otherwise;
ranking is by the static priorities of the device's architecture family (measured ranking plugs in via
``ranker``).
"""

from __future__ import annotations

import functools
import os
from typing import Callable, Sequence

from hwtune.selector import catalogue
from hwtune.selector.catalogue import Backend
from hwtune.selector.device import DeviceProfile, simulated
from hwtune.selector.errors import BackendNotValidError, NoValidBackendError
from hwtune.selector.messages import ENV_VARS, no_valid_message, not_valid_message
from hwtune.selector.priorities import backend_order, describe_family, tactic_order
from hwtune.selector.selection import RankedBackend, Selection
from hwtune.selector.types import All2AllSpec, AttentionSpec, Spec
from hwtune.selector.validation import Rejection, check, phases_of, valid_tactics

DeviceArg = str | DeviceProfile


def resolve_device(device: DeviceArg) -> DeviceProfile:
    """``"auto"`` reads this machine through NVML (no CUDA init); a name gives a simulated profile."""
    if isinstance(device, DeviceProfile):
        return device
    if device.strip().lower() == "auto":
        from hwtune.probes.device import detect  # NVML only; never imports torch

        return detect()
    return simulated(device)


def static_tactics(backend: Backend, spec: Spec, device: DeviceProfile, *, assume_installed: bool) -> dict[str, str]:
    """The preferred valid tactic per phase, by the family's tactic order, else declaration order."""
    out: dict[str, str] = {}
    for phase in phases_of(spec):
        valid = [t.name for t in valid_tactics(backend, spec, device, phase, assume_installed=assume_installed)]
        preferred = [n for n in tactic_order(backend.name, device.family, phase) if n in valid]
        out[phase] = (preferred or valid)[0]
    return out


def _requested(kind: str, backend: str | None) -> tuple[str | None, str]:
    if backend and backend.strip().lower() != "auto":
        return backend, "backend argument / --backend"
    env = os.environ.get(ENV_VARS[kind], "").strip()
    if env and env.lower() != "auto":
        return env, f"{ENV_VARS[kind]}={env}"
    return None, ""


Ranker = Callable[[str, Spec, DeviceProfile, Sequence[RankedBackend]], tuple[list[RankedBackend], list[str]]]


def _select(
    kind: str, spec: Spec, device: DeviceProfile, requested: str | None, how: str, assume_installed: bool,
    ranker: Ranker | None = None,
) -> Selection:
    mla = isinstance(spec, AttentionSpec) and spec.use_mla
    declared = catalogue.backends(kind)
    requested_backend = catalogue.get(kind, requested) if requested else None  # unknown name: exit 2

    rejections: dict[str, list[Rejection]] = {}
    valid: list[Backend] = []
    for b in declared:
        reasons = check(b, spec, device, assume_installed=assume_installed)
        if reasons:
            rejections[b.name] = reasons
        else:
            valid.append(b)

    order = list(backend_order(kind, mla, device.family))
    position = {name: i for i, name in enumerate(order)}
    valid.sort(key=lambda b: (position.get(b.name, len(order)), declared.index(b)))
    static = [
        RankedBackend(
            backend=b.name, source="static",
            tactics=static_tactics(b, spec, device, assume_installed=assume_installed),
            detail=f"static priority for {describe_family(device.family)}",
        )
        for b in valid
    ]
    notes: list[str] = []
    if ranker is not None:
        ranked, ranker_notes = ranker(kind, spec, device, static)
        notes += ranker_notes
    else:
        ranked = static
        notes.append(f"no measurement store consulted: static priorities for {describe_family(device.family)}")

    if requested_backend is not None:
        if requested_backend.name in rejections:
            raise BackendNotValidError(
                not_valid_message(kind, requested_backend, rejections[requested_backend.name],
                                  [r.backend for r in ranked], spec, device, how),
                backend=requested_backend.name,
                reasons=[r.message for r in rejections[requested_backend.name]],
                valid=[r.backend for r in ranked],
            )
        chosen = next(r for r in ranked if r.backend == requested_backend.name)
    elif not ranked:
        raise NoValidBackendError(
            no_valid_message(kind, rejections, spec, device),
            {name: [r.message for r in rs] for name, rs in rejections.items()},
        )
    else:
        chosen = ranked[0]

    return Selection(
        kind=kind,
        spec=spec.to_dict(),
        device=device,
        backend=chosen.backend,
        tactics=dict(chosen.tactics),
        ranked=tuple(ranked),
        rejected={name: tuple(r.message for r in rs) for name, rs in rejections.items()},
        requested=requested_backend.name if requested_backend else None,
        notes=tuple(notes),
    )


@functools.lru_cache(maxsize=1024)
def _cached(kind: str, spec: Spec, device: DeviceProfile, requested: str | None, how: str,
            assume_installed: bool) -> Selection:
    return _select(kind, spec, device, requested, how, assume_installed)


def select_attention(
    spec: AttentionSpec, device: DeviceArg = "auto", backend: str | None = None, *,
    assume_installed: bool = False,
) -> Selection:
    """Rank the valid attention backends for ``spec`` on ``device``; honour ``backend`` (or
    ``HWTUNE_ATTENTION_BACKEND``) when valid, raise ``BackendNotValidError`` when not."""
    if not isinstance(spec, AttentionSpec):
        raise TypeError("select_attention needs an AttentionSpec")
    requested, how = _requested("attention", backend)
    return _cached("attention", spec, resolve_device(device), requested, how, assume_installed)


def select_all2all(
    spec: All2AllSpec, device: DeviceArg = "auto", backend: str | None = None, *,
    assume_installed: bool = False,
) -> Selection:
    """Rank the valid MoE all2all backends for ``spec`` on ``device`` (see select_attention)."""
    if not isinstance(spec, All2AllSpec):
        raise TypeError("select_all2all needs an All2AllSpec")
    requested, how = _requested("all2all", backend)
    return _cached("all2all", spec, resolve_device(device), requested, how, assume_installed)

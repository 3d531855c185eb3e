"""The tuning plan: what a run measures (``Plan``: its workloads, each a ``PlanItem`` with a grid level and the
backends to try), and whether a workload's KV cache fits the device (``kv_fits``). Plans are built from a model or the
defaults (``tuner.plan_model``) or a TOML file (``tuner.plan_file``).

Level 0 is the coarse grid (measured first, so that a budget-limited run still covers the whole space), level 1 the
refinement points between coarse neighbours (measured only where the winner changes between them, see
``tuner.schedule``). Workloads whose KV cache would not fit in a fraction of the device's memory are dropped at
planning time, with a note.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from hwtune.core.devices import DeviceProfile
from hwtune.core.types import AttentionSpec, AttentionWorkload, Workload, workload_from_dict

if TYPE_CHECKING:
    from hwtune.probes.attention.measure import Planned

#: Fraction of device memory a planned workload's KV cache (plus the reference's copies) may take.
MEMORY_FRACTION = 0.35


@dataclass(frozen=True)
class PlanItem:
    """One workload of a plan, its grid level (0 coarse, 1 refinement) and the backends to try (None: the plan's
    default). ``contenders``: hwtune chose the backends (a bisection point's contenders, ``name:tactic``, from the
    store's timings; or the backends planned at a block size of their own, ``plan_model.own_block_size_items``), so
    the run's and the plan's backends still bound them (``schedule.narrowed``); a plan section's own backends are
    not."""

    workload: Workload
    level: int = 0
    backends: tuple[str, ...] | None = None  # None: every valid backend
    contenders: bool = False

    @property
    def kind(self) -> str:
        """The workload's kind, "attention" or "all2all"."""
        return self.workload.kind

    @property
    def key(self) -> str:
        return self.workload.key()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "workload": self.workload.to_dict(),
            "level": self.level,
            "backends": list(self.backends) if self.backends else None,
            **({"contenders": True} if self.contenders else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanItem:
        """The item ``to_dict`` wrote (a queued work item's payload), its backends included."""
        backends = data.get("backends")
        return cls(
            workload_from_dict(data["kind"], data["workload"]),
            int(data.get("level", 0)),
            tuple(backends) if backends else None,
            bool(data.get("contenders", False)),
        )


#: --quick measures the backends engines choose between (vLLM's priority lists) with their cheap tactics:
#: TORCH_SDPA and FLEX_ATTENTION (compiled per shape) are left to full plans.
@dataclass
class Plan:
    """What a tuning run measures: its items (one per workload), notes for people, the time cap per candidate, the
    default backends for items that name none, and the windows of a model's kinds of layers where it mixes them."""

    name: str
    items: list[PlanItem]
    notes: list[str] = field(default_factory=list)
    time_cap_s: float = 2.0
    backends: tuple[str, ...] | None = None  # default for items that name none
    #: The sliding windows of a model's kinds of layers (None: full attention), for a model that mixes them; empty
    #: for one kind. One backend serves every layer, so a candidate is measured only where it can serve every kind.
    layer_windows: tuple[int | None, ...] = ()

    def __post_init__(self) -> None:
        """One item per workload: duplicates (a grid point listed twice) merge their backend lists."""
        merged: dict[str, PlanItem] = {}
        for item in self.items:
            seen = merged.get(item.key)
            if seen is None:
                merged[item.key] = item
            else:
                both = (
                    None
                    if seen.backends is None or item.backends is None
                    else tuple(dict.fromkeys(seen.backends + item.backends))
                )
                merged[item.key] = PlanItem(seen.workload, min(seen.level, item.level), both)
        self.items = list(merged.values())

    def other_layer_specs(self, spec: AttentionSpec) -> list[AttentionSpec]:
        """``spec`` as the model's other kinds of layers have it (their windows): what a backend measured at ``spec``
        must serve too (``measure.plan_candidates(other_layers=)``). Empty for a spec that is none of the model's
        kinds (a plan file's table with a window of its own: a what-if, not a layer the engine runs)."""
        if spec.sliding_window not in self.layer_windows:
            return []
        return [replace(spec, sliding_window=w) for w in self.layer_windows if w != spec.sliding_window]

    def candidates(
        self, workload: AttentionWorkload, profile: DeviceProfile, backends: Iterable[str] | None, **kw: Any
    ) -> list[Planned]:
        """``measure.plan_candidates`` for one of this plan's workloads (``kw``: its keywords): a backend that cannot
        serve the model's other kinds of layers is planned unsupported here too (``other_layer_specs``)."""
        from hwtune.probes.attention.measure import plan_candidates

        return plan_candidates(workload, profile, backends, other_layers=self.other_layer_specs(workload.spec), **kw)

    def digest(self) -> str:
        """Stable identity of the plan's content: resuming and sharing a plan across nodes key on it. The
        default backends, the timing cap and the layer windows are content too: a plan that measures other backends,
        times them otherwise or refuses others for the model's other layers is another plan (its results must not be
        skipped as already done)."""
        content = {
            "items": [i.to_dict() for i in self.items],
            "time_cap_s": self.time_cap_s,
            "backends": list(self.backends) if self.backends else None,
            **({"layer_windows": list(self.layer_windows)} if self.layer_windows else {}),
        }
        payload = json.dumps(content, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "digest": self.digest(),
            "notes": self.notes,
            "time_cap_s": self.time_cap_s,
            **({"layer_windows": list(self.layer_windows)} if self.layer_windows else {}),
            "items": [i.to_dict() for i in self.items],
        }


def kv_fits(workload: AttentionWorkload, device: DeviceProfile | None) -> bool:
    """Whether ``workload``'s KV cache, a second batch written in place and the reference's gathers fit in
    ``MEMORY_FRACTION`` of ``device``'s memory (always, for no device or one of unknown memory)."""
    if device is None or not device.memory_bytes:
        return True
    spec = workload.spec
    per_token = 2 * spec.num_kv_heads * spec.head_size * (1 if spec.kv_cache_dtype.startswith("fp8") else 2)
    tokens = sum(workload.context_lens) if workload.context_lens else workload.batch * workload.context_len
    # the cache, a second batch written in place, and the reference's float32 gathers of one request
    return 3 * per_token * tokens <= MEMORY_FRACTION * device.memory_bytes

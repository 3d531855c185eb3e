"""The engines hwtune configures, version by version: dated snapshots of their attention selectors.

``vllm.json`` and ``sglang.json`` beside this module hold, for each supported engine version, what its selector
does: the priority list per device family (vLLM) or the decision list (SGLang, with what it accepts when a backend
is given explicitly), and every backend's compute capabilities, dtypes, kv-cache dtypes, head sizes, kernel block
sizes and features, each with the engine file and function that states it (docs/engines.md says how a snapshot is
taken and refreshed). Selection for an engine target takes its backends, order and rules from here; hwtune's
catalogue records add what hwtune itself measures and runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hwtune.core.catalogue.engines.conditions import EngineConfig
from hwtune.core.catalogue.engines.evaluate import (
    EngineReason,
    decide,
    engine_page_size,
    explicit_order,
    explicit_reasons,
    hwtune_tactics,
    order,
    preferred_block_size,
    priorities_source,
    selection_reasons,
    serves,
    short_source,
    start_reasons,
)
from hwtune.core.catalogue.engines.snapshot import ENGINES, Snapshot, known_kv_cache_dtypes, snapshot
from hwtune.core.errors import InvalidSpecError

if TYPE_CHECKING:
    from hwtune.core.devices import DeviceProfile
    from hwtune.core.types import AttentionSpec

#: What ``--engine`` accepts to select among hwtune's own catalogue, for no engine in particular.
NO_ENGINE = ("none", "hwtune")
DEFAULT_ENGINE = "vllm"


@dataclass(frozen=True)
class EngineTarget:
    """The engine and version a selection configures (its flags, backends, order and rules)."""

    engine: str
    version: str

    @property
    def snapshot(self) -> Snapshot:
        """This engine's snapshot."""
        return snapshot(self.engine)

    def describe(self) -> str:
        """ "vLLM 0.33.0"."""
        return self.snapshot.describe(self.version)

    def to_dict(self) -> dict[str, str]:
        return {"engine": self.engine, "version": self.version}


@functools.lru_cache(maxsize=64)
def resolve_target(engine: str | None = DEFAULT_ENGINE, version: str | None = None) -> EngineTarget | None:
    """The target for ``engine`` (default vLLM) at ``version`` (default: the newest snapshot); None for
    "none"/"hwtune" (hwtune's own catalogue, no engine). Unknown names are an InvalidSpecError listing the known
    ones."""
    name = (engine or DEFAULT_ENGINE).strip().lower()
    if name in NO_ENGINE:
        if version:
            raise InvalidSpecError(f"--engine-version {version} needs an engine (--engine {', '.join(ENGINES)})")
        return None
    if name not in ENGINES:
        raise InvalidSpecError(f"unknown engine {engine!r}; known: {', '.join(ENGINES + NO_ENGINE[:1])}")
    snap = snapshot(name)
    chosen = (version or snap.newest).strip()
    if chosen not in snap.versions:
        raise InvalidSpecError(
            f"hwtune has no snapshot of {snap.display} {chosen}; known: {', '.join(snap.versions)} "
            "(docs/engines.md says how to add one), or select with --engine none"
        )
    return EngineTarget(name, chosen)


def engine_config(spec: "AttentionSpec", device: "DeviceProfile", installed: frozenset[str] | None) -> EngineConfig:
    """The configuration an engine's selector sees for ``spec`` on CUDA ``device``. ``installed``: the optional
    packages present (None: assume every one is)."""
    assert device.compute_capability is not None, "engine rules are stated for CUDA devices"
    return EngineConfig(
        cc=device.compute_capability,
        head_size=spec.head_size,
        dtype=spec.dtype,
        kv_cache_dtype=spec.kv_cache_dtype,
        block_size=spec.block_size,
        num_heads=spec.num_heads,
        num_kv_heads=spec.num_kv_heads,
        mla=spec.use_mla,
        sinks=spec.sinks,
        sliding_window=spec.sliding_window is not None,
        soft_cap=spec.logits_soft_cap is not None,
        dcp=spec.dcp_size > 1,
        pcp=spec.pcp_size > 1,
        spec_decode=spec.spec_tokens > 0,
        cp_interleave_gt1=spec.cp_interleave > 1,
        qk_nope_head_dim=spec.qk_nope_head_dim,
        qk_rope_head_dim=spec.qk_rope_head_dim,
        v_head_dim=spec.v_head_dim,
        installed=installed,
        architecture=spec.architecture,
    )


__all__ = [
    "ENGINES",
    "DEFAULT_ENGINE",
    "NO_ENGINE",
    "EngineConfig",
    "EngineReason",
    "EngineTarget",
    "Snapshot",
    "decide",
    "engine_config",
    "engine_page_size",
    "explicit_order",
    "explicit_reasons",
    "hwtune_tactics",
    "known_kv_cache_dtypes",
    "order",
    "preferred_block_size",
    "priorities_source",
    "resolve_target",
    "selection_reasons",
    "serves",
    "short_source",
    "snapshot",
    "start_reasons",
]

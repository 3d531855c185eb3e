"""Selection: the answer to "which backend?", with where each rank came from and why others were rejected."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping

from hwtune.core.devices import DeviceProfile

if TYPE_CHECKING:
    from hwtune.selector.engine_flags import EngineLaunch
    from hwtune.selector.measured import Evidence
    from hwtune.selector.mix import MixPoint

Source = Literal["measured", "interpolated", "static"]


@dataclass(frozen=True)
class RankedBackend:
    """One valid backend in rank order, with the tactic per phase and the evidence behind its rank."""

    backend: str
    source: Source
    tactics: Mapping[str, str]
    latency_us: float | None = None
    confidence: float | None = None
    detail: str = ""
    #: The phases ``latency_us`` covers where fewer than the mix's (a backend measured in those alone, such as
    #: FLASHMLA's decode); empty: every phase.
    measured_phases: tuple[str, ...] = ()
    #: The typical latency over the mix: the geometric mean of the latencies, weighted by the points' shares of GPU
    #: time (``decision.deciding_cost``), what decisions between backends, KV layouts and block sizes compare;
    #: ``latency_us`` is the weighted mean.
    typical_us: float | None = None

    @property
    def compared_us(self) -> float | None:
        """What comparisons between selections use: the typical latency, the weighted latency where there is none (a
        rank built without one)."""
        return self.typical_us if self.typical_us is not None else self.latency_us

    def to_dict(self) -> dict[str, Any]:
        out = {
            "backend": self.backend,
            "source": self.source,
            "tactics": dict(self.tactics),
            "latency_us": self.latency_us,
            "confidence": self.confidence,
            "detail": self.detail,
        }
        if self.typical_us is not None and math.isfinite(self.typical_us):
            out["typical_us"] = self.typical_us
        return {**out, "measured_phases": list(self.measured_phases)} if self.measured_phases else out


@dataclass(frozen=True)
class DispatchEntry:
    """Best tactic of the chosen backend for one workload bucket (phase x row bucket x context bucket); the row
    is the batch in decode, the chunk (new tokens per request) in prefill, tokens per rank in all2all."""

    phase: str
    batch_max: int
    context_max: int
    tactic: str
    latency_us: float
    source: Source


@dataclass(frozen=True)
class Basis:
    """What a measured ranking was built on: the evidence (read, never changed), the workload mix and the dispatch
    grid's limits; kept on each layer kind's Selection so that ``selector/layer_kinds.py`` can cost one tactic per
    shape over every layer."""

    evidence: "Evidence"
    mix: tuple["MixPoint", ...]
    max_batch: int
    max_context: int
    #: The notes of this spec's own decision between backends (``decision.rank``), which a combined ranking replaces.
    decided: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selection:
    """Chosen backend and tactic, every valid backend ranked, every rejected one with its reasons.

    Immutable, because warm selections are served from a cache shared by every caller in the process.
    """

    kind: str
    spec: Mapping[str, Any]
    device: DeviceProfile
    backend: str
    tactics: Mapping[str, str]
    ranked: tuple[RankedBackend, ...]
    rejected: Mapping[str, tuple[str, ...]]
    requested: str | None = None
    notes: tuple[str, ...] = ()
    per_phase: Mapping[str, str] = field(default_factory=dict)
    dispatch: tuple[DispatchEntry, ...] = ()
    #: Each phase that ``per_phase`` routes to another backend than ``backend``: that backend's dispatch cells for that
    #: phase, which ``tactic_for(..., backend=per_phase[phase])`` answers from.
    phase_dispatch: tuple[DispatchEntry, ...] = ()
    #: The engine and version the selection configures ({"engine": "vllm", "version": "0.33.0"}); None: hwtune's
    #: own catalogue (``engine=None``) or all2all.
    engine: Mapping[str, str] | None = None
    #: hwtune's deliberate differences from that engine version that apply to this spec: backends its selector
    #: accepts and which then fail at start, rejected up front (each sentence names the engine source).
    differences: tuple[str, ...] = ()
    #: For a model of several layer kinds (``selector/layer_kinds.py``): the kinds nothing was measured for, whose
    #: cost the ranking leaves out; empty otherwise.
    unmeasured_layers: tuple[str, ...] = ()
    #: The measurements and mix one spec's ranking came from, kept only on the per-kind selections that
    #: ``layer_kinds.combine`` joins (None otherwise, and on every selection callers get); not part of the answer.
    basis: Basis | None = field(default=None, repr=False, compare=False)
    _table: tuple = field(default=(), init=False, repr=False, compare=False)
    _phase_table: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from hwtune.selector.dispatch import build_table

        object.__setattr__(self, "_table", build_table(self.dispatch))  # frozen: set once, here
        object.__setattr__(self, "_phase_table", build_table(self.phase_dispatch))

    @property
    def kv_layout(self) -> str | None:
        """The KV-cache layout of the selection (attention): the requested one, or with ``auto`` the measured
        winner's (``selector/layouts.py``); "auto" when nothing decided it; None for all2all."""
        return self.spec.get("kv_layout")

    @property
    def block_size(self) -> int | None:
        """The KV block size of the selection (attention): the given one, or without one the measured winner's
        (``selector/block_sizes.py``); None when nothing decided it (the engine's own choice) and for all2all."""
        return self.spec.get("block_size")

    @property
    def engine_name(self) -> str:
        """The engine target in words ("vLLM 0.33.0"); empty for none."""
        if not self.engine:
            return ""
        from hwtune.core.catalogue.engines import snapshot

        return snapshot(self.engine["engine"]).describe(self.engine["version"])

    @property
    def tactic(self) -> str:
        """The tactic of the first phase (decode for attention): what an engine configures at start."""
        return next(iter(self.tactics.values()), "default")

    def tactic_for(
        self, phase: str, batch: int, context: int, query_len: int | None = None, *, backend: str | None = None
    ) -> str:
        """The best measured tactic of ``backend`` (default: the chosen one) for one step's shape (a prefill by its
        chunk, ``query_len``, and context); falls back to the phase's ranked tactic. An engine that routes phases
        to different backends passes ``backend=per_phase[phase]``: a phase routed away answers from that backend's
        own cells (``phase_dispatch``), never from the chosen backend's tactics."""
        from hwtune.selector.dispatch import lookup

        if backend is None or backend == self.backend:
            return lookup(self._table, self.tactics, phase, batch, context, query_len)
        ranked = next((r.tactics for r in self.ranked if r.backend == backend), None)
        if ranked is None:
            valid = [r.backend for r in self.ranked]
            raise ValueError(f"{backend} is not among the valid backends ranked here: {valid}")
        table = self._phase_table if self.per_phase.get(phase) == backend else ({}, {})
        return lookup(table, ranked, phase, batch, context, query_len)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "backend": self.backend,
            "tactic": self.tactic,
            "tactics": dict(self.tactics),
            "kv_layout": self.kv_layout,
            "block_size": self.block_size,
            "per_phase": dict(self.per_phase),
            "ranked": [r.to_dict() for r in self.ranked],
            "rejected": {k: list(v) for k, v in self.rejected.items()},
            "requested": self.requested,
            "device": self.device.to_dict(),
            "spec": dict(self.spec),
            "notes": list(self.notes),
            "dispatch": [vars(e) for e in self.dispatch],
            "phase_dispatch": [vars(e) for e in self.phase_dispatch],
            "engine": dict(self.engine) if self.engine else None,
            "differences": list(self.differences),
            "unmeasured_layers": list(self.unmeasured_layers),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def explain(self) -> str:
        """The selection for people: the choice, notes, each ranked backend with its source and estimate, and every
        rejection with its reasons (``hwtune select --explain``)."""
        layout = f", KV layout {self.kv_layout}" if self.kv_layout else ""
        layout += f", block size {self.block_size}" if self.block_size else ""
        target = f" with {self.engine_name}" if self.engine else ""
        lines = [
            f"{self.kind} backend for {self.device.describe()}{target}: {self.backend} (tactic {self.tactic}{layout})"
        ]
        if self.requested:
            lines.append(f"  requested explicitly: {self.requested}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        if self.per_phase:
            lines.append("  per phase: " + ", ".join(f"{p} -> {b}" for p, b in self.per_phase.items()))
        lines.append("ranked (valid):")
        for i, r in enumerate(self.ranked, 1):
            est = f", ~{r.latency_us:.1f} us" if r.latency_us is not None else ""
            est += f" ({' and '.join(r.measured_phases)} only)" if est and r.measured_phases else ""
            conf = f", confidence {r.confidence:.2f}" if r.confidence is not None else ""
            tac = ", ".join(f"{p}: {t}" for p, t in r.tactics.items())
            lines.append(
                f"  {i}. {r.backend} [{r.source}{est}{conf}] tactics {tac}" + (f" - {r.detail}" if r.detail else "")
            )
        if self.differences:
            lines.append(f"deliberate differences from {self.engine_name} (rejected up front):")
            lines += [f"  - {d}" for d in self.differences]
        if self.rejected:
            lines.append("rejected:")
            for name, reasons in self.rejected.items():
                lines.append(f"  {name}:")
                lines += [f"    - {reason}" for reason in reasons]
        return "\n".join(lines)

    def launch(self, engine: str | None = None, all2all: "Selection | None" = None) -> "EngineLaunch":
        """How to start ``engine`` (default: the engine this selection was made for) with it, and with an all2all
        selection for a MoE model: flags, environment variables and notes (``hwtune.selector.engine_flags``)."""
        from hwtune.selector.engine_flags import launch

        return launch(self, engine, all2all)

    def to_vllm_args(self, all2all: "Selection | None" = None) -> list[str]:
        """The vLLM command-line flags for this selection (backend, per phase where the version can, block size,
        kv-cache dtype, and ``all2all``'s backend); the KV layout is an environment variable (``to_env``)."""
        return list(self.launch("vllm", all2all).args)

    def to_sglang_args(self, all2all: "Selection | None" = None) -> list[str]:
        """The SGLang command-line flags for this selection (prefill and decode backends where they differ)."""
        return list(self.launch("sglang", all2all).args)

    def to_env(self, engine: str | None = None, all2all: "Selection | None" = None) -> dict[str, str]:
        """Environment variables for the engine: its own (vLLM's VLLM_KV_CACHE_LAYOUT) and the flags in
        HWTUNE_<ENGINE>_ARGS, for launch scripts."""
        return self.launch(engine, all2all).to_env()

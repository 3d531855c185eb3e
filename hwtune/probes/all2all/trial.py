"""What one trial runs and what it reports, as plain JSON-able data (no torch here).

A trial is one candidate backend run in one freshly spawned process group over a list of workloads that
share an ``All2AllSpec`` (a token-count sweep, say). The parent writes a ``TrialSpec`` as JSON; every rank
appends JSON lines to its own result file. JSON, never pickle: the parent must not execute what a
crashed or misbehaving worker left behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Mode = Literal["candidate", "peak"]
#: A rank's exit code after it wrote its own failure (its peers may still be stuck in a collective).
EXIT_REPORTED = 3


@dataclass(frozen=True)
class TrialItem:
    """One workload of the sweep: the spec is shared, tokens per rank and routing vary."""

    tokens_per_rank: int
    routing: str = "uniform"


@dataclass(frozen=True)
class TrialSpec:
    """Everything a rank needs to run its part of a trial; written by the parent, read by each rank."""

    backend: str
    candidate_ref: str  # "package.module:ClassName"
    spec: Mapping[str, Any]  # All2AllSpec.to_dict()
    items: tuple[TrialItem, ...]
    device: Literal["cuda", "cpu"]
    world_size: int
    mode: Mode = "candidate"
    seed: int = 0
    time_cap_s: float = 10.0
    warmup_iters: int = 3
    min_iters: int = 5
    max_iters: int = 1000
    use_cuda_graphs: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)
    peak_gbps: float | None = None
    peak_bytes: int = 256 * 1024 * 1024
    pg_timeout_s: float = 1800.0
    master_port: int = 0

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["items"] = [dataclasses.asdict(i) for i in self.items]
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> TrialSpec:
        d = json.loads(text)
        d["items"] = tuple(TrialItem(**i) for i in d["items"])
        return cls(**d)

    def with_items(self, items: tuple[TrialItem, ...]) -> TrialSpec:
        """The same trial over other workloads (the launcher restarts the rest of a sweep in a new group)."""
        return dataclasses.replace(self, items=items)

    def with_port(self, port: int) -> TrialSpec:
        """The same trial with the rendezvous port of a new process group."""
        return dataclasses.replace(self, master_port=port)


@dataclass
class ItemResult:
    """The outcome of one workload of a trial (what becomes one MeasurementRecord)."""

    status: str
    message: str = ""
    stats: Mapping[str, Any] | None = None
    error: Mapping[str, float] | None = None
    timing_method: str | None = None
    compile_time_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ItemResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class TrialOutcome:
    """What the launcher observed: one result per item, plus how the process groups ended."""

    results: list[ItemResult]
    groups_spawned: int = 0
    pids: list[int] = field(default_factory=list)
    wall_s: float = 0.0


def write_line(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line in a single write, so a reader never sees half a record from a live writer."""
    data = (json.dumps(record, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)

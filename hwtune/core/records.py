"""The measurement record: one candidate (backend + tactic) on one workload in one environment.

Produced by the probes, stored by ``hwtune.db``, read back by the selector. Kept here, in the light layer,
because all three use it and the selector must not import the heavy ones. Failed candidates are records
too (Triton's "failed configs scored as unusable"): a crash or a wrong answer is evidence that steers
selection away from a backend.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping

from hwtune._version import __version__

Status = Literal["ok", "wrong_answer", "crashed", "timeout", "unsupported", "error"]
STATUSES: tuple[str, ...] = ("ok", "wrong_answer", "crashed", "timeout", "unsupported", "error")
#: Statuses that mean "this backend must not serve this spec here" (not merely "not measured").
DISQUALIFYING: frozenset[str] = frozenset({"wrong_answer", "crashed"})
#: Statuses of a candidate that ran and gave no timing (the tuner's pruning counts them as infinitely slow).
FAILED: frozenset[str] = frozenset({"wrong_answer", "crashed", "timeout", "error"})


@dataclass(frozen=True)
class LatencyStats:
    """Distribution of one candidate's latency, in microseconds; ``spread`` = (p90 - p10) / median."""

    median_us: float
    p10_us: float
    p90_us: float
    mean_us: float
    n: int
    spread: float
    ci95_rel: float | None = None  # half-width of the median's 95 % confidence interval / median

    def __post_init__(self) -> None:
        for name in ("median_us", "p10_us", "p90_us", "mean_us", "spread"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n <= 0:
            raise ValueError(f"n must be a positive integer, got {self.n!r}")
        if not self.p10_us <= self.median_us <= self.p90_us:
            raise ValueError("latency statistics must satisfy p10 <= median <= p90")

    @classmethod
    def from_samples(cls, samples_us: list[float], ci95_rel: float | None = None) -> "LatencyStats":
        """Statistics of raw latency samples (linearly interpolated quantiles); ``ci95_rel`` comes from the timer,
        which alone knows how its samples were taken."""
        if not samples_us:
            raise ValueError("no samples")
        xs = sorted(samples_us)
        n = len(xs)

        def q(p: float) -> float:
            pos = p * (n - 1)
            lo, hi = math.floor(pos), math.ceil(pos)
            return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

        med = q(0.5)
        p10, p90 = q(0.1), q(0.9)
        return cls(
            median_us=med,
            p10_us=p10,
            p90_us=p90,
            mean_us=sum(xs) / n,
            n=n,
            spread=(p90 - p10) / med if med > 0 else 0.0,
            ci95_rel=ci95_rel,
        )


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


@dataclass
class MeasurementRecord:
    """Everything one measurement produced. ``workload`` is the normalised workload dict whose canonical
    key is ``workload_key``; ``environment`` is the fingerprint whose hash is ``environment_hash``."""

    kind: str
    workload: Mapping[str, Any]
    workload_key: str
    backend: str
    tactic: str
    status: Status
    message: str = ""
    stats: LatencyStats | None = None
    error: Mapping[str, float] | None = None
    timing_method: str | None = None
    compile_time_s: float | None = None
    environment: Mapping[str, Any] = field(default_factory=dict)
    environment_hash: str = ""
    host: str = field(default_factory=_hostname)
    gpu_uuid: str | None = None
    run_id: str | None = None
    hwtune_version: str = __version__
    created_at: _dt.datetime = field(default_factory=_now)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; known: {', '.join(STATUSES)}")
        if self.kind not in ("attention", "all2all"):
            raise ValueError(f"unknown kind {self.kind!r}; known: attention, all2all")
        if self.status == "ok" and self.stats is None:
            raise ValueError("an ok measurement needs latency statistics")
        if self.compile_time_s is not None and (not math.isfinite(self.compile_time_s) or self.compile_time_s < 0):
            raise ValueError("compile_time_s must be finite and non-negative")

    @property
    def ok(self) -> bool:
        """Whether the candidate passed the correctness gate and was timed (only then does it have stats)."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["created_at"] = self.created_at.isoformat()
        d["workload"] = dict(self.workload)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MeasurementRecord":
        d = dict(data)
        if d.get("stats") is not None and not isinstance(d["stats"], LatencyStats):
            d["stats"] = LatencyStats(**d["stats"])
        if isinstance(d.get("created_at"), str):
            d["created_at"] = _dt.datetime.fromisoformat(d["created_at"])
        return cls(**d)


def new_run_id() -> str:
    """A fresh random id that groups the records of one tuning run."""
    import uuid

    return uuid.uuid4().hex

"""Between ``MeasurementRecord`` (what probes produce and the selector reads) and table rows.

Writes are checked here, once: the workload must parse as a real workload and its canonical key must be
the key the record claims (a mismatch would file a result under someone else's shape), and the environment
hash must be the hash of the fingerprint it came with. Keys are recomputed from the normalised form, so two
spellings of one workload ("bf16", "bfloat16") land on one row.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

from hwtune.core.environment import fingerprint_hash
from hwtune.core.errors import HwtuneError, StoreDataError
from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import AttentionWorkload, workload_from_dict

STAT_FIELDS: tuple[str, ...] = ("median_us", "p10_us", "p90_us", "mean_us", "n", "spread", "ci95_rel")


@dataclass(frozen=True)
class WorkloadInfo:
    """A workload as stored: its canonical key, its spec's key, the normalised dict and the shape columns."""

    kind: str
    key: str
    spec_key: str
    normalized: dict[str, Any]

    def row(self) -> dict[str, Any]:
        """The workloads-table row: shape columns filled for this kind, NULL for the other kind's."""
        d = self.normalized
        if self.kind == "attention":
            shape = {
                "phase": d["phase"],
                "batch": d["batch"],
                "context_len": d["context_len"],
                "query_len": d["query_len"],
                "tokens_per_rank": None,
            }
        else:
            shape = {
                "phase": None,
                "batch": None,
                "context_len": None,
                "query_len": None,
                "tokens_per_rank": d["tokens_per_rank"],
            }
        return {"kind": self.kind, "key": self.key, "spec_key": self.spec_key, "normalized": d, **shape}


def workload_info(kind: str, workload: Mapping[str, Any], claimed_key: str = "") -> WorkloadInfo:
    """Parse and normalise ``workload``; refuse it when ``claimed_key`` is not its canonical key."""
    try:
        wl = workload_from_dict(kind, workload)
    except (HwtuneError, TypeError, KeyError, ValueError) as exc:
        raise StoreDataError(f"the {kind} workload {dict(workload)!r} is not valid: {exc}") from None
    key = wl.key()
    if claimed_key and claimed_key != key:
        raise StoreDataError(
            f"workload_key {claimed_key} does not match its {kind} workload (whose key is {key}); "
            "the record would be filed under another shape"
        )
    spec_key = wl.spec.key()
    normalized = wl.to_dict()
    if isinstance(wl, AttentionWorkload) and normalized.get("context_lens") is not None:
        normalized["context_lens"] = list(normalized["context_lens"])
    return WorkloadInfo(kind=kind, key=key, spec_key=spec_key, normalized=normalized)


def environment_hash(fingerprint: Mapping[str, Any], claimed_hash: str = "") -> str:
    """The fingerprint's hash, refusing a ``claimed_hash`` that differs: a stale or edited fingerprint would steer
    selection for the wrong machine."""
    computed = fingerprint_hash(fingerprint)
    if claimed_hash and claimed_hash != computed:
        raise StoreDataError(
            f"environment_hash {claimed_hash} is not the hash of its fingerprint ({computed}); "
            "a stale or edited fingerprint would steer selection for the wrong machine"
        )
    return computed


def environment_row(fingerprint: Mapping[str, Any], hash_: str, now: _dt.datetime) -> dict[str, Any]:
    """The environments-table row for a fingerprint, with the fields people query copied into columns."""
    device = fingerprint.get("device") or {}
    stack = fingerprint.get("stack") or {}
    cc = device.get("compute_capability")
    return {
        "hash": hash_,
        "fingerprint": dict(fingerprint),
        "device_name": device.get("name"),
        "compute_capability": f"{cc[0]}.{cc[1]}" if isinstance(cc, (list, tuple)) and len(cc) == 2 else None,
        "driver": device.get("driver"),
        "torch": stack.get("torch"),
        "cuda_runtime": stack.get("cuda_runtime"),
        "flashinfer": stack.get("flashinfer"),
        "created_at": now,
    }


def measurement_row(rec: MeasurementRecord, environment_id: int, workload_id: int) -> dict[str, Any]:
    """The measurements-table row for ``rec``; refuses a naive ``created_at`` because the store holds UTC."""
    stats = rec.stats
    if rec.created_at.tzinfo is None:
        raise StoreDataError("created_at must carry a time zone (hwtune stores UTC)")
    row: dict[str, Any] = {
        "environment_id": environment_id,
        "workload_id": workload_id,
        "backend": rec.backend,
        "tactic": rec.tactic,
        "status": rec.status,
        "message": rec.message or "",
        "error": dict(rec.error) if rec.error is not None else None,
        "timing_method": rec.timing_method,
        "compile_time_s": rec.compile_time_s,
        "host": rec.host,
        "gpu_uuid": rec.gpu_uuid,
        "run_id": rec.run_id or "",
        "hwtune_version": rec.hwtune_version,
        "created_at": rec.created_at,
        "extra": dict(rec.extra or {}),
    }
    for name in STAT_FIELDS:
        row[name] = getattr(stats, name) if stats is not None else None
    return row


#: Measurement columns the upsert may change when the same candidate is written again.
UPDATABLE: tuple[str, ...] = (
    "status",
    "message",
    *STAT_FIELDS,
    "error",
    "timing_method",
    "compile_time_s",
    "host",
    "gpu_uuid",
    "hwtune_version",
    "created_at",
    "extra",
)
CONFLICT: tuple[str, ...] = ("run_id", "environment_id", "workload_id", "backend", "tactic")


def record_from_row(
    row: Mapping[str, Any],
    kind: str,
    workload_key: str,
    workload: dict[str, Any],
    environment_hash: str,
    fingerprint: dict[str, Any],
) -> MeasurementRecord:
    """A record from a measurements row plus its (shared, read-only) workload and environment."""
    stats = None
    if row["median_us"] is not None:
        stats = LatencyStats(
            median_us=row["median_us"],
            p10_us=row["p10_us"],
            p90_us=row["p90_us"],
            mean_us=row["mean_us"],
            n=row["n"],
            spread=row["spread"],
            ci95_rel=row["ci95_rel"],
        )
    return MeasurementRecord(
        kind=kind,
        workload=workload,
        workload_key=workload_key,
        backend=row["backend"],
        tactic=row["tactic"],
        status=row["status"],
        message=row["message"],
        stats=stats,
        error=row["error"],
        timing_method=row["timing_method"],
        compile_time_s=row["compile_time_s"],
        environment=fingerprint,
        environment_hash=environment_hash,
        host=row["host"],
        gpu_uuid=row["gpu_uuid"],
        run_id=row["run_id"] or None,
        hwtune_version=row["hwtune_version"],
        created_at=row["created_at"],
        extra=row["extra"],
    )


class LatencyRow(NamedTuple):
    """What ranking needs of one measurement, without JSON or records: the selector's hot path.

    ``Store.latencies`` returns these straight from index lookups; use ``Store.measurements`` for whole
    records (host, error versus reference, extra, ...)."""

    workload_key: str
    phase: str | None
    batch: int | None
    context_len: int | None
    query_len: int | None
    tokens_per_rank: int | None
    backend: str
    tactic: str
    status: str
    median_us: float | None
    p10_us: float | None
    p90_us: float | None
    n: int | None
    spread: float | None
    ci95_rel: float | None
    message: str
    run_id: str
    created_at: _dt.datetime

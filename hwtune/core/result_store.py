"""What the tuner needs of a result store, as a type: ``hwtune.db.store.Store`` implements it (SQLite or
PostgreSQL), and tests may pass anything else that does. Kept in core so that the tuner is typed against
the contract, not against SQLAlchemy."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from hwtune.core.records import MeasurementRecord


@runtime_checkable
class ResultStore(Protocol):
    """Measurements, runs and the shared work queue (items claimed under leases renewed by heartbeats)."""

    def write(self, records: Sequence[MeasurementRecord]) -> int:
        """Store records as measured; returns how many rows were inserted or changed."""
        ...

    def measurements(
        self,
        kind: str | None = None,
        *,
        workload_keys: Sequence[str] | None = None,
        spec_key: str | None = None,
        environment_hash: str | None = None,
        backend: str | None = None,
        statuses: Sequence[str] | None = None,
        run_id: str | None = None,
        limit: int | None = None,
    ) -> list[MeasurementRecord]:
        """Stored measurements matching every given filter, oldest first."""
        ...

    def start_run(
        self,
        *,
        who: str | None = None,
        host: str | None = None,
        plan: Mapping[str, Any] | None = None,
        budget_s: float | None = None,
        run_id: str | None = None,
    ) -> str:
        """Record the start of a tuning run; returns its id."""
        ...

    def finish_run(self, run_id: str, state: str = "done") -> None:
        """Mark a run ended (done, failed or interrupted)."""
        ...

    def enqueue(self, plan_id: str, items: Sequence[tuple[str, Mapping[str, Any]]]) -> int:
        """Add work items (key, payload) to a plan's queue; existing keys are kept."""
        ...

    def claim(
        self, plan_id: str, worker: str, n: int, lease_s: float, max_attempts: int = 3
    ) -> list[tuple[str, dict[str, Any]]]:
        """Take up to ``n`` pending (or lease-expired) items for ``worker``."""
        ...

    def heartbeat(self, plan_id: str, worker: str, keys: Sequence[str], lease_s: float) -> list[str]:
        """Renew ``worker``'s leases on ``keys``; returns the keys it still holds."""
        ...

    def complete(self, plan_id: str, key: str, ok: bool, worker: str | None = None) -> bool:
        """Mark an item done (or failed); False if another worker holds it now."""
        ...

    def queue_state(self, plan_id: str) -> dict[str, int]:
        """Item counts per state (pending, claimed, done, failed)."""
        ...

    def claims(self, plan_id: str) -> list[tuple[str, str, float]]:
        """(item key, worker, seconds until its lease ends) of every claimed item."""
        ...

    def release(self, plan_id: str, held: Sequence[tuple[str, str]]) -> int:
        """Return items (key, worker) to pending, each only if that worker still holds it."""
        ...

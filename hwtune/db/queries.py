"""Reading measurements back: whole records, the lean ranking view, and batched scans for export.

Split from ``store.py`` to keep one concept per module; ``Store`` inherits these methods. Reads resolve the
environment hash to its id before querying (with a subquery instead, SQLite's planner chose the wrong
index), and fetch each workload's and environment's JSON once per store (a per-store cache), so building
records costs mostly the record objects themselves.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from hwtune.core.records import MeasurementRecord
from hwtune.db.models import EnvironmentRow, MeasurementRow, WorkloadRow, table
from hwtune.db.rows import LatencyRow, record_from_row

M, W, E = table(MeasurementRow), table(WorkloadRow), table(EnvironmentRow)
_M_COLS = [c for c in M.c if c.name != "id"]
_CHUNK = 500


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class StoreReads:
    """The read half of ``Store`` (see store.py for the connection handling it relies on)."""

    _env_ids: dict[str, int]
    _env_docs: dict[int, tuple[str, dict[str, Any]]]
    _wl_docs: dict[int, tuple[str, str, dict[str, Any]]]

    def _read(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError

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
        """Stored measurements matching every given filter, oldest first. Records share their workload and
        environment dicts with each other (and a per-store cache): treat them as read-only."""
        query = select(M.c.id, *_M_COLS).select_from(M.join(W, M.c.workload_id == W.c.id))
        if kind is not None:
            query = query.where(W.c.kind == kind)
        if workload_keys is not None:
            query = query.where(W.c.key.in_(list(workload_keys)))
        if spec_key is not None:
            query = query.where(W.c.spec_key == spec_key)
        if backend is not None:
            query = query.where(M.c.backend == backend)
        if statuses is not None:
            query = query.where(M.c.status.in_(list(statuses)))
        if run_id is not None:
            query = query.where(M.c.run_id == run_id)
        query = query.order_by(M.c.id)
        if limit is not None:
            query = query.limit(limit)
        with self._read() as conn:
            query = self._in_environment(conn, query, environment_hash)
            if query is None:
                return []
            return self._records(conn, conn.execute(query).mappings().all())

    def latencies(
        self, spec_key: str, *, environment_hash: str | None = None, statuses: Sequence[str] | None = None
    ) -> list[LatencyRow]:
        """Every measurement of one engine spec (in one environment) as ``LatencyRow`` tuples, oldest first:
        the shape columns, candidate, status and latency statistics, read without building records."""
        query = (
            select(
                W.c.key,
                W.c.phase,
                W.c.batch,
                W.c.context_len,
                W.c.query_len,
                W.c.tokens_per_rank,
                M.c.backend,
                M.c.tactic,
                M.c.status,
                M.c.median_us,
                M.c.p10_us,
                M.c.p90_us,
                M.c.n,
                M.c.spread,
                M.c.ci95_rel,
                M.c.message,
                M.c.run_id,
                M.c.created_at,
            )
            .select_from(M.join(W, M.c.workload_id == W.c.id))
            .where(W.c.spec_key == spec_key)
        )
        with self._read() as conn:
            query = self._in_environment(conn, query, environment_hash)
            if query is None:
                return []
            if statuses is not None:
                query = query.where(M.c.status.in_(list(statuses)))
            make = LatencyRow._make
            return [make(row) for row in conn.execute(query.order_by(M.c.id))]

    def _in_environment(self, conn: Connection, query: Any, environment_hash: str | None) -> Any:
        """``query`` limited to one environment's measurements; None when that environment was never stored
        (nothing can match). An id, not a subquery: SQLite's planner then keeps the workload index (see
        models.py)."""
        if environment_hash is None:
            return query
        env_id = self._environment_id(conn, environment_hash)
        return None if env_id is None else query.where(M.c.environment_id == env_id)

    def _environment_id(self, conn: Connection, environment_hash: str) -> int | None:
        env_id = self._env_ids.get(environment_hash)
        if env_id is None:
            env_id = conn.execute(select(E.c.id).where(E.c.hash == environment_hash)).scalar()
            if env_id is not None:
                self._env_ids[environment_hash] = env_id
        return env_id

    def environments(self, environment_hash: str | None = None) -> list[dict[str, Any]]:
        """Every stored environment (or the one with ``environment_hash``), oldest first: its hash, fingerprint,
        the columns copied out of it for people, and how many measurements it holds (``hwtune serve`` lists them).
        Counting scans the measurements once; callers that list often should cache the answer."""
        counts = select(M.c.environment_id, func.count().label("n")).group_by(M.c.environment_id).subquery("counts")
        query = (
            select(
                E.c.hash,
                E.c.device_name,
                E.c.compute_capability,
                E.c.driver,
                E.c.torch,
                E.c.cuda_runtime,
                E.c.flashinfer,
                E.c.created_at,
                E.c.fingerprint,
                func.coalesce(counts.c.n, 0).label("measurements"),
            )
            .select_from(E.outerjoin(counts, counts.c.environment_id == E.c.id))
            .order_by(E.c.id)
        )
        if environment_hash is not None:
            query = query.where(E.c.hash == environment_hash)
        with self._read() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def snapshot(self, kind: str | None = None) -> tuple[int, int]:
        """(highest measurement id, how many measurements of ``kind`` up to it): a fixed view for export."""
        with self._read() as conn:
            last = int(conn.execute(select(func.max(M.c.id))).scalar() or 0)
            query = select(func.count()).select_from(M.join(W, M.c.workload_id == W.c.id)).where(M.c.id <= last)
            if kind is not None:
                query = query.where(W.c.kind == kind)
            return last, int(conn.execute(query).scalar_one())

    def iter_measurements(
        self, batch: int = 2000, *, kind: str | None = None, max_id: int | None = None
    ) -> Iterator[list[MeasurementRecord]]:
        """Every measurement (of ``kind``; with id up to ``max_id``) in id order, ``batch`` at a time; each
        batch is its own short read, so a long export holds no transaction open."""
        last = 0
        while True:
            query = (
                select(M.c.id, *_M_COLS)
                .select_from(M.join(W, M.c.workload_id == W.c.id))
                .where(M.c.id > last)
                .order_by(M.c.id)
                .limit(batch)
            )
            if kind is not None:
                query = query.where(W.c.kind == kind)
            if max_id is not None:
                query = query.where(M.c.id <= max_id)
            with self._read() as conn:
                rows = conn.execute(query).mappings().all()
                if not rows:
                    return
                last = rows[-1]["id"]
                records = self._records(conn, rows)
            yield records

    def _records(self, conn: Connection, rows: Sequence[Any]) -> list[MeasurementRecord]:
        wl_missing = sorted({r["workload_id"] for r in rows} - self._wl_docs.keys())
        for chunk in _chunks(wl_missing):
            for i, k, key, doc in conn.execute(
                select(W.c.id, W.c.kind, W.c.key, W.c.normalized).where(W.c.id.in_(chunk))
            ):
                self._wl_docs[i] = (k, key, doc)
        env_missing = sorted({r["environment_id"] for r in rows} - self._env_docs.keys())
        for chunk in _chunks(env_missing):
            for i, h, fp in conn.execute(select(E.c.id, E.c.hash, E.c.fingerprint).where(E.c.id.in_(chunk))):
                self._env_docs[i] = (h, fp)
        out = []
        for r in rows:
            kind, key, doc = self._wl_docs[r["workload_id"]]
            h, fp = self._env_docs[r["environment_id"]]
            out.append(record_from_row(r, kind, key, doc, h, fp))
        return out

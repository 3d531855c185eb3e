"""``Store``: the result store's one entry point for the tuner, the selector and the CLI.

Every SQL statement of hwtune lives in ``hwtune.db``; callers get records and plain values. What the class
guarantees (details in docs/store.md):

* writes are idempotent (same run, environment, workload, backend and tactic -> one row) and atomic per
  call: a ``write`` lands whole or not at all, even when the process is killed mid-way;
* every write runs in one short transaction, retried on a lock timeout or a deadlock;
* a store opened ``read_only`` cannot write (SQLite ``mode=ro``; PostgreSQL read-only transactions);
* no error text carries a password; failures become ``StoreError`` subclasses with what to do next.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

from sqlalchemy import func, inspect, select
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from hwtune.core.errors import HwtuneError, StoreError, StoreOutdatedError, StoreUnavailableError
from hwtune.core.records import MeasurementRecord, new_run_id
from hwtune.db import migrate, queue, runs
from hwtune.db.engine import BUSY_TIMEOUT_S, WRITE_OPTION, journal_mode, make_engine, sqlite_file
from hwtune.db.errors import describe, is_transient, reason, translate
from hwtune.db.models import RUN_STATES, RunRow, table
from hwtune.db.queries import E, M, StoreReads, W, _chunks
from hwtune.db.rows import (
    CONFLICT,
    UPDATABLE,
    WorkloadInfo,
    environment_hash,
    environment_row,
    measurement_row,
    workload_info,
)
from hwtune.db.upsert import upsert
from hwtune.db.urls import mask, resolve

R = table(RunRow)
_RESULT = TypeVar("_RESULT")
log = logging.getLogger("hwtune.db")
_TABLES = {"environments": E, "workloads": W, "measurements": M, "runs": R, "work_items": queue.T}


class Store(StoreReads):
    """A connection to one result store (SQLite file or PostgreSQL database). Use ``Store.open``."""

    def __init__(self, engine: Engine, url: URL, *, read_only: bool) -> None:
        self.engine = engine
        self.url = url
        self.read_only = read_only
        self._pid = os.getpid()
        self._env_ids: dict[str, int] = {}
        self._wl_ids: dict[str, int] = {}
        self._env_docs: dict[int, tuple[str, dict[str, Any]]] = {}
        self._wl_docs: dict[int, tuple[str, str, dict[str, Any]]] = {}
        self._infos: dict[tuple[str, str], WorkloadInfo] = {}

    # --- opening ------------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        read_only: bool = False,
        connect_timeout: float = 5.0,
        create: bool = True,
        check_revision: bool = True,
        statement_timeout_s: float | None = None,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> "Store":
        """Open the store at ``url`` (else ``HWTUNE_DATABASE_URL``, else the per-user SQLite file).

        With ``create`` (and not ``read_only``) a missing or older schema is created or upgraded under the
        cross-process lock; otherwise an older schema raises ``StoreOutdatedError`` naming
        ``hwtune db upgrade``. ``check_revision=False`` skips that check (``hwtune db status`` uses it)."""
        resolved = resolve(url)
        engine = make_engine(
            resolved,
            read_only=read_only,
            connect_timeout=connect_timeout,
            statement_timeout_s=statement_timeout_s,
            busy_timeout_s=busy_timeout_s,
        )
        store = cls(engine, resolved, read_only=read_only)
        try:
            if check_revision:
                store._ensure_current(create=create and not read_only)
        except HwtuneError:
            engine.dispose()
            raise
        except SQLAlchemyError as exc:
            engine.dispose()
            error = StoreUnavailableError(describe(exc, resolved, "open the store"))
            error.reason = reason(exc, resolved)  # type: ignore[attr-defined]  # the driver's words, for notes
            raise error from None
        return store

    def _ensure_current(self, *, create: bool) -> None:
        current = migrate.revision_of(self.engine)
        message = migrate.outdated_message(self.engine, current)
        if message is None:
            if create and self.dialect == "sqlite" and journal_mode(self.engine) != "wal":
                migrate.upgrade(self.engine)  # under the lock: switches to WAL, no-op upgrade
            return
        if not create or (current is not None and current not in migrate.known_revisions()):
            raise StoreOutdatedError(message)
        self.upgrade()

    def upgrade(self, target: str = "head") -> tuple[str | None, str | None]:
        """Create or migrate the schema under the cross-process lock; (revision before, after)."""
        if self.read_only:
            raise StoreError(f"cannot upgrade {self.masked_url}: it was opened read-only")
        try:
            return migrate.upgrade(self.engine, target)
        except SQLAlchemyError as exc:
            raise translate(exc, self.url, "upgrade the store") from None

    @property
    def dialect(self) -> str:
        """The SQLAlchemy dialect name, "sqlite" or "postgresql": where behaviour differs (locking, WAL, ANALYZE)."""
        return self.engine.dialect.name

    @property
    def masked_url(self) -> str:
        """The store's URL with the password masked: the only form that goes into messages and logs."""
        return mask(self.url)

    def close(self) -> None:
        """Release the engine's pooled connections (``with Store.open(...)`` calls it on exit)."""
        self.engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.masked_url}{', read-only' if self.read_only else ''})"

    # --- transactions -------------------------------------------------------------------------------------

    def _fork_check(self) -> None:
        if os.getpid() != self._pid:  # belt and braces next to engine.py's at-fork hook
            self.engine.dispose(close=False)
            self._pid = os.getpid()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        self._fork_check()
        try:
            with self.engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise translate(exc, self.url, "read from the store") from None

    def _write(self, fn: Callable[[Connection], _RESULT], what: str, attempts: int = 5) -> _RESULT:
        """Run ``fn`` in one write transaction (``BEGIN IMMEDIATE`` on SQLite); retry lock timeouts and
        deadlocks, which roll back whole and so are safe to repeat."""
        if self.read_only:
            raise StoreError(f"cannot {what}: the store {self.masked_url} was opened read-only")
        self._fork_check()
        for attempt in range(attempts):
            try:
                with self.engine.connect() as conn:
                    conn = conn.execution_options(**{WRITE_OPTION: True})
                    with conn.begin():
                        return fn(conn)
            except DBAPIError as exc:
                if attempt + 1 < attempts and is_transient(exc):
                    time.sleep(0.05 * 2**attempt)
                    continue
                raise translate(exc, self.url, what) from None
            except SQLAlchemyError as exc:
                raise translate(exc, self.url, what) from None
        raise AssertionError("unreachable")

    # --- measurements -------------------------------------------------------------------------------------

    def _info(self, rec: MeasurementRecord) -> WorkloadInfo:
        cache_key = (rec.kind, rec.workload_key)
        info = self._infos.get(cache_key) if rec.workload_key else None
        if info is None or info.normalized != dict(rec.workload):  # re-check anything not seen verbatim
            info = workload_info(rec.kind, rec.workload, rec.workload_key)
            if len(self._infos) > 100_000:
                self._infos.clear()
            self._infos[cache_key] = info
        return info

    def write(self, records: Sequence[MeasurementRecord]) -> int:
        """Store ``records`` in one transaction; returns how many rows were inserted or changed (writing the
        same records again returns 0)."""
        if not records:
            return 0
        envs: dict[str, Mapping[str, Any]] = {}
        prepared = []
        for rec in records:
            h = environment_hash(rec.environment, rec.environment_hash)
            envs.setdefault(h, rec.environment)
            prepared.append((rec, h, self._info(rec)))
        infos = {info.key: info for _, _, info in prepared}

        def tx(conn: Connection) -> tuple[int, dict[str, int], dict[str, int]]:
            env_ids = self._ensure_environments(conn, envs)
            wl_ids = self._ensure_workloads(conn, infos)
            rows: dict[tuple[Any, ...], dict[str, Any]] = {}
            for rec, h, info in prepared:  # the last of duplicate candidates in one call wins
                row = measurement_row(rec, env_ids[h], wl_ids[info.key])
                rows[tuple(row[c] for c in CONFLICT)] = row
            ordered = [rows[k] for k in sorted(rows)]  # one lock order for every writer: no deadlocks
            changed = sum(upsert(conn, M, chunk, conflict=CONFLICT, update=UPDATABLE) for chunk in _chunks(ordered))
            return changed, env_ids, wl_ids

        changed, env_ids, wl_ids = self._write(tx, "write measurements")
        self._env_ids.update(env_ids)  # cached only after commit: a rolled-back id must not be reused
        self._wl_ids.update(wl_ids)
        return changed

    def _ensure_environments(self, conn: Connection, envs: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
        ids = {h: self._env_ids[h] for h in envs if h in self._env_ids}
        missing = sorted(h for h in envs if h not in ids)
        now = _dt.datetime.now(_dt.timezone.utc)
        for chunk in _chunks(missing):
            upsert(conn, E, [environment_row(envs[h], h, now) for h in chunk], conflict=("hash",))
            ids.update(dict(conn.execute(select(E.c.hash, E.c.id).where(E.c.hash.in_(chunk))).all()))
        return ids

    def _ensure_workloads(self, conn: Connection, infos: Mapping[str, WorkloadInfo]) -> dict[str, int]:
        ids = {k: self._wl_ids[k] for k in infos if k in self._wl_ids}
        missing = sorted(k for k in infos if k not in ids)
        for chunk in _chunks(missing):
            upsert(conn, W, [infos[k].row() for k in chunk], conflict=("key",))
            ids.update(dict(conn.execute(select(W.c.key, W.c.id).where(W.c.key.in_(chunk))).all()))
        return ids

    # --- runs ---------------------------------------------------------------------------------------------

    def start_run(
        self,
        *,
        who: str | None = None,
        host: str | None = None,
        plan: Mapping[str, Any] | None = None,
        budget_s: float | None = None,
        run_id: str | None = None,
    ) -> str:
        """Record the start of a tuning run; returns its id (new unless ``run_id`` resumes one)."""
        rid = run_id or new_run_id()
        self._write(lambda c: runs.start(c, rid, who=who, host=host, plan=plan, budget_s=budget_s), "start a run")
        return rid

    def finish_run(self, run_id: str, state: str = "done") -> None:
        """Mark a run ended: ``done``, ``failed`` or ``interrupted``."""
        if state not in RUN_STATES:
            raise StoreError(f"unknown run state {state!r}; known: {', '.join(RUN_STATES)}")
        if not self._write(lambda c: runs.finish(c, run_id, state), "finish a run"):
            raise StoreError(f"no run {run_id!r} in the store {self.masked_url}")
        self.optimize()

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The run's row (who, host, plan, budget_s, started_at, ended_at, state), or None."""
        with self._read() as conn:
            return runs.get(conn, run_id)

    def runs(self, limit: int = 50, state: str | None = None) -> list[dict[str, Any]]:
        """The ``limit`` newest runs (of ``state``), newest first, each without its plan and with its stored
        measurements per status (``measurements``: {status: count})."""
        with self._read() as conn:
            found = runs.recent(conn, limit, state)
            counts = runs.status_counts(conn, [r["id"] for r in found])
        return [{**r, "measurements": counts.get(r["id"], {})} for r in found]

    def run_summary(self, run_id: str) -> dict[str, Any] | None:
        """The run's row with its plan (as ``run``) and its stored measurements per status, or None."""
        with self._read() as conn:
            row = runs.get(conn, run_id)
            counts = runs.status_counts(conn, [run_id]) if row else {}
        return None if row is None else {**row, "measurements": counts.get(run_id, {})}

    def measured_keys(self, run_id: str) -> set[tuple[str, str, str]]:
        """(workload key, backend, tactic) already stored for ``run_id``: what a resumed run can skip."""
        with self._read() as conn:
            return runs.measured_keys(conn, run_id)

    # --- work queue ---------------------------------------------------------------------------------------

    def enqueue(self, plan_id: str, items: Sequence[tuple[str, Mapping[str, Any]]]) -> int:
        """Add (key, payload) items to a distributed plan; see ``hwtune.db.queue.enqueue``."""
        return self._write(lambda c: queue.enqueue(c, plan_id, items), "enqueue work items")

    def claim(
        self, plan_id: str, worker: str, n: int, lease_s: float, max_attempts: int = 3
    ) -> list[tuple[str, dict[str, Any]]]:
        """Lease up to ``n`` items of a plan to ``worker``; see ``hwtune.db.queue.claim``."""
        return self._write(lambda c: queue.claim(c, plan_id, worker, n, lease_s, max_attempts), "claim work")

    def heartbeat(self, plan_id: str, worker: str, keys: Sequence[str], lease_s: float) -> list[str]:
        """Extend ``worker``'s leases on ``keys``; see ``hwtune.db.queue.heartbeat``."""
        return self._write(lambda c: queue.heartbeat(c, plan_id, worker, keys, lease_s), "renew leases")

    def complete(self, plan_id: str, key: str, ok: bool, worker: str | None = None) -> bool:
        """Mark a work item done or failed; see ``hwtune.db.queue.complete``."""
        return self._write(lambda c: queue.complete(c, plan_id, key, ok, worker), "complete a work item")

    def queue_state(self, plan_id: str) -> dict[str, int]:
        """Items per state of one plan; see ``hwtune.db.queue.queue_state``."""
        with self._read() as conn:
            return queue.queue_state(conn, plan_id)

    def claims(self, plan_id: str) -> list[tuple[str, str, float]]:
        """(key, worker, seconds left on its lease) of a plan's claimed items; see ``hwtune.db.queue.claims``."""
        with self._read() as conn:
            return queue.claims(conn, plan_id)

    def release(self, plan_id: str, held: Sequence[tuple[str, str]]) -> int:
        """Return (key, worker) items to pending if that worker still holds them; see ``hwtune.db.queue.release``."""
        return self._write(lambda c: queue.release(c, plan_id, held), "release work items")

    def optimize(self) -> None:
        """Refresh PostgreSQL's planner statistics after a bulk write (import, push, pull, a finished run).

        Until autovacuum gets to it, PostgreSQL plans against statistics of a smaller table and may scan
        all measurements instead of using the workload index (50 ms instead of 0.3 ms at 300,000 rows).
        Only the tables' owner may ANALYZE; for other roles PostgreSQL skips it with a warning. SQLite
        needs nothing: without statistics its planner already takes the indexes (a test checks)."""
        if self.dialect != "postgresql" or self.read_only:
            return
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE environments, workloads, measurements")
                conn.commit()
        except SQLAlchemyError as exc:  # statistics are an optimisation: never fail the write for them
            log.warning("could not refresh statistics of %s: %s", self.masked_url, reason(exc, self.url))

    # --- inspection ---------------------------------------------------------------------------------------

    def revision(self) -> str | None:
        """The store's schema revision (None for an empty database)."""
        with self._read() as conn:
            return migrate.current_revision(conn)

    def counts(self) -> dict[str, int]:
        """Rows per table (tables this store's revision does not have yet are left out)."""
        with self._read() as conn:
            present = set(inspect(conn).get_table_names())
            return {
                name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                for name, t in _TABLES.items()
                if name in present
            }

    def status(self) -> dict[str, Any]:
        """Where the store is (password masked), its revision against this hwtune's, and row counts."""
        rev = self.revision()
        message = migrate.outdated_message(self.engine, rev)
        path = sqlite_file(self.engine)
        return {
            "url": self.masked_url,
            "dialect": self.dialect,
            "path": str(path) if path else None,
            "revision": rev,
            "head": migrate.head(),
            "up_to_date": message is None,
            "message": message,
            "read_only": self.read_only,
            "journal_mode": journal_mode(self.engine) if path else None,
            "counts": self.counts(),
        }

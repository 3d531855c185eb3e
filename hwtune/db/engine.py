"""Engines configured for the store's guarantees: SQLite and PostgreSQL each get what makes them safe here.

SQLite (https://www.sqlite.org/wal.html, https://www.sqlite.org/lang_transaction.html):

* WAL journal, so readers never block the writer; ``PRAGMA journal_mode=WAL`` answers the mode actually in
  force, and a filesystem that refuses WAL leaves the rollback journal (still correct, just slower): we
  record what it said instead of assuming.
* ``busy_timeout`` so a writer waits for the lock instead of failing at once; ``foreign_keys=ON``.
* Python's sqlite3 module starts transactions lazily and only before DML; SQLAlchemy's documented recipe
  (dialects/sqlite "Serializable isolation / Savepoints / Transactional DDL") turns that off and emits
  BEGIN itself. We emit ``BEGIN IMMEDIATE`` for writes, so a write transaction takes the write lock up front
  and the busy timeout applies to it, rather than failing with SQLITE_BUSY when a deferred read transaction
  tries to upgrade to a write.
* Read-only stores open the file with ``mode=ro``: the engine read path can then not write by construction.

PostgreSQL: a connect timeout, ``pool_pre_ping`` (a shared server restarts under us), and for read-only
stores ``default_transaction_read_only=on`` so the server itself refuses any write.

No connection crosses a fork: a child process inherits the parent's pooled sockets and file handles, and two
processes speaking on one socket (or one SQLite handle) corrupt each other's state. Every engine made here is
disposed (without closing the parent's connections) in the child, via ``os.register_at_fork``.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import weakref
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine

from hwtune.core.errors import StorePathError, StoreUnavailableError
from hwtune.db.columns import dumps
from hwtune.db.urls import check_local_filesystem, mask, sqlite_path

log = logging.getLogger("hwtune.db")

#: Execution option that makes SQLite's BEGIN an IMMEDIATE one (set by ``Store`` for every write).
WRITE_OPTION = "hwtune_write"
BUSY_TIMEOUT_S = 60.0

_ENGINES: "weakref.WeakSet[Engine]" = weakref.WeakSet()


def _dispose_in_child() -> None:
    for engine in list(_ENGINES):
        engine.dispose(close=False)  # drop the parent's pool in the child; never close the parent's sockets


os.register_at_fork(after_in_child=_dispose_in_child)


def _prepare_writable(path: Path) -> None:
    """Make sure a SQLite store can be written at ``path``: its folder is created (with a logged notice) when
    missing; a folder in its place, or a file or folder this user may not write, is a StorePathError that says what
    to do. SQLite writes its WAL and shared-memory files beside the store, so the folder must be writable too."""
    if path.is_dir():
        raise StorePathError(f"the SQLite store {path} is a folder; name a file in it, e.g. --db {path / 'hwtune.db'}")
    if not path.parent.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorePathError(
                f"cannot create the folder {path.parent} for the SQLite store {path}: {exc.strerror or exc}; "
                "choose another place with --db PATH or HWTUNE_DATABASE_URL"
            ) from None
        log.warning("created the folder %s for the SQLite store %s", path.parent, path.name)
    if path.exists() and not os.access(path, os.W_OK):
        raise StorePathError(
            f"the SQLite store {path} is read-only for this user, and this command writes to it: make it writable "
            f"(chmod u+w {path}) or write to another store (--db PATH); reading it works as it is (hwtune show)"
        )
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise StorePathError(
            f"the folder {path.parent} is read-only for this user, and SQLite writes the store {path.name} and its "
            f"journal files there: make the folder writable or choose another place with --db PATH"
        )


def _sqlite_engine(url: URL, *, read_only: bool, busy_timeout_s: float) -> Engine:
    path = sqlite_path(url)
    if path is not None:
        check_local_filesystem(path)
        if read_only and not path.exists():
            raise StoreUnavailableError(f"no store at {path} (the file does not exist)")
        if not read_only:
            _prepare_writable(path)

    def creator() -> sqlite3.Connection:
        if path is None:
            return sqlite3.connect(url.database or ":memory:", timeout=busy_timeout_s, check_same_thread=False)
        mode = "ro" if read_only else "rwc"
        return sqlite3.connect(
            f"file:{quote(str(path))}?mode={mode}", uri=True, timeout=busy_timeout_s, check_same_thread=False
        )

    engine = create_engine(url, creator=creator, json_serializer=dumps)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see module docstring)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write and not read_only else "BEGIN")

    return engine


def _postgres_engine(url: URL, *, read_only: bool, connect_timeout: float, statement_timeout_s: float | None) -> Engine:
    options = []
    if read_only:
        options.append("-c default_transaction_read_only=on")
    if statement_timeout_s:
        options.append(f"-c statement_timeout={int(statement_timeout_s * 1000)}")
    connect_args: dict[str, Any] = {
        # libpq (and psycopg) round this up to whole seconds, at least 2; the engine read path enforces its
        # own tighter deadline around the whole attempt (hwtune.db.readonly).
        "connect_timeout": max(2, math.ceil(connect_timeout)),
        "application_name": "hwtune",
    }
    if options:
        connect_args["options"] = " ".join(options)
    return create_engine(
        url, connect_args=connect_args, pool_pre_ping=True, json_serializer=dumps, pool_size=2, max_overflow=4
    )


def make_engine(
    url: URL,
    *,
    read_only: bool = False,
    connect_timeout: float = 5.0,
    busy_timeout_s: float = BUSY_TIMEOUT_S,
    statement_timeout_s: float | None = None,
) -> Engine:
    """An engine for ``url`` with the pragmas, hooks and timeouts above, registered for fork safety."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        engine = _sqlite_engine(url, read_only=read_only, busy_timeout_s=busy_timeout_s)
    elif backend == "postgresql":
        engine = _postgres_engine(
            url, read_only=read_only, connect_timeout=connect_timeout, statement_timeout_s=statement_timeout_s
        )
    else:  # resolve() already refused it; kept for callers that build URLs themselves
        raise StoreUnavailableError(f"unsupported store {mask(url)}")
    _ENGINES.add(engine)
    return engine


def _pragma(engine: Engine, sql: str) -> str:
    # Outside any transaction: SQLite refuses to change the journal mode inside one.
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(sql)
        row = cur.fetchone()
        cur.close()
        return str(row[0] if row else "").lower()
    finally:
        raw.close()


def enable_wal(engine: Engine) -> str:
    """Switch a SQLite file to WAL and return the journal mode in force (what the pragma answered)."""
    mode = _pragma(engine, "PRAGMA journal_mode")
    if mode != "wal":
        mode = _pragma(engine, "PRAGMA journal_mode=WAL")
    if mode != "wal":
        log.warning(
            "SQLite refused WAL for %s (journal mode stays %r): readers will wait for writers", mask(engine.url), mode
        )
    return mode


def journal_mode(engine: Engine) -> str | None:
    """The SQLite journal mode in force (``wal`` normally); None for PostgreSQL."""
    return _pragma(engine, "PRAGMA journal_mode") if engine.dialect.name == "sqlite" else None


def sqlite_file(engine: Engine) -> Path | None:
    """The database file behind a SQLite engine (None for PostgreSQL or in-memory SQLite), for status and file
    checks."""
    return sqlite_path(engine.url) if engine.dialect.name == "sqlite" else None

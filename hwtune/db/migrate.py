"""Schema revisions: where the store stands, and upgrading it under a cross-process lock.

A hundred ranks may open a fresh store at once. Each reads the revision without a lock (cheap, and enough
when the store is current); only when it is behind does a process take the migration lock (a file lock
beside a SQLite file, ``pg_advisory_lock`` on PostgreSQL), read the revision again, and upgrade inside one
transaction. Every other process waits on the lock and then finds the store current.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from filelock import FileLock, Timeout
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from hwtune.core.errors import StoreOutdatedError, StoreUnavailableError
from hwtune.db.engine import WRITE_OPTION, enable_wal, sqlite_file
from hwtune.db.urls import mask

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
#: One advisory-lock id for "migrating the hwtune schema", the same in every process and version.
ADVISORY_KEY = int.from_bytes(hashlib.sha256(b"hwtune.db.migrate").digest()[:8], "big", signed=True)
LOCK_TIMEOUT_S = 300.0


def config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for hwtune's own migrations directory; with ``connection``, env.py migrates on that
    connection (inside the caller's lock) instead of opening its own."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(config())


def head() -> str:
    """The newest revision this hwtune knows."""
    rev = _script().get_current_head()
    assert rev is not None
    return rev


def known_revisions() -> list[str]:
    """Every revision this hwtune ships, oldest first."""
    return [s.revision for s in reversed(list(_script().walk_revisions()))]


def current_revision(conn: Connection) -> str | None:
    """The store's revision (None for an empty database). Reads only."""
    return MigrationContext.configure(conn).get_current_revision()


def revision_of(engine: Engine) -> str | None:
    """The store's current schema revision (None: empty database), read on a fresh connection."""
    with engine.connect() as conn:
        return current_revision(conn)


def outdated_message(engine: Engine, current: str | None) -> str | None:
    """None when the store is current, else what is wrong and the command that fixes it."""
    target = head()
    where = mask(engine.url)
    if current == target:
        return None
    if current is None:
        return (
            f"no hwtune store at {where} yet (no schema); create it with `hwtune db upgrade --db URL` "
            "(or let `hwtune tune` create it)"
        )
    if current not in known_revisions():
        return (
            f"the store at {where} is at schema revision {current}, which this hwtune does not know: "
            f"a newer hwtune migrated it (this one knows up to {target}). Upgrade hwtune here."
        )
    return (
        f"the store at {where} is at schema revision {current}; this hwtune needs {target}. "
        f"Run `hwtune db upgrade --db {where}` (with a role allowed to change the schema)."
    )


def _upgrade_locked(engine: Engine, target: str) -> tuple[str | None, str | None]:
    with engine.connect() as conn:
        conn = conn.execution_options(**{WRITE_OPTION: True})
        before = current_revision(conn)
        conn.rollback()
        if before is not None and before not in known_revisions():
            raise StoreOutdatedError(outdated_message(engine, before) or "")
        if before != target:
            with conn.begin():  # one transaction: the whole upgrade lands or none of it
                command.upgrade(config(conn), target)
        after = current_revision(conn)
        conn.rollback()
    return before, after


def upgrade(engine: Engine, target: str = "head") -> tuple[str | None, str | None]:
    """Upgrade to ``target`` under the cross-process lock; returns (revision before, revision after)."""
    target = head() if target == "head" else target
    path = sqlite_file(engine)
    if engine.dialect.name == "sqlite":
        lock = FileLock(str(path) + ".lock") if path is not None else None
        try:
            if lock is not None:
                lock.acquire(timeout=LOCK_TIMEOUT_S)
        except Timeout:
            raise StoreUnavailableError(
                f"waited {LOCK_TIMEOUT_S:.0f} s for the migration lock {path}.lock held by another process; "
                "if no hwtune process is running, delete that file and retry"
            ) from None
        try:
            if path is not None:
                enable_wal(engine)
            return _upgrade_locked(engine, target)
        finally:
            if lock is not None:
                lock.release()
    with engine.connect() as lock_conn:  # PostgreSQL: a session-level advisory lock on its own connection
        lock_conn.execute(text(f"SET lock_timeout = '{int(LOCK_TIMEOUT_S)}s'"))
        lock_conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": ADVISORY_KEY})
        lock_conn.commit()
        try:
            return _upgrade_locked(engine, target)
        finally:
            lock_conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_KEY})
            lock_conn.commit()


def downgrade(engine: Engine, target: str) -> None:
    """Downgrade to ``target`` (tests and emergencies only; measurements in dropped tables are lost)."""
    with engine.connect() as conn:
        conn = conn.execution_options(**{WRITE_OPTION: True})
        with conn.begin():
            command.downgrade(config(conn), target)

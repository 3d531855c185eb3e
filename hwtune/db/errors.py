"""Database failures in words people can act on, with every password scrubbed.

SQLAlchemy's exception text includes the SQL and its parameters, and drivers echo connection strings; neither
belongs in front of a person. We keep the driver's first line (the actual reason: "connection refused",
"permission denied for table measurements"), redact it, and add what to do.
"""

from __future__ import annotations

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from hwtune.core.errors import StoreDataError, StoreError, StoreUnavailableError
from hwtune.db.urls import mask, redact

#: PostgreSQL SQLSTATEs that mean "this transaction lost a race; run it again".
#: serialization failure, deadlock detected, lock not available
_RETRY_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
_PERMISSION_SQLSTATES = frozenset({"42501", "25006"})  # insufficient privilege, read-only transaction


def reason(exc: BaseException, url: URL | None = None) -> str:
    """The driver's own first line for ``exc``, without passwords."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    first = text[0] if text else type(orig).__name__
    return redact(first, url)


def describe(exc: BaseException, url: URL, what: str) -> str:
    """A one-line, password-free error for people: "could not <what> at <masked url>: <driver's reason>"."""
    return f"could not {what} at {mask(url)}: {reason(exc, url)}"


def sqlstate(exc: BaseException) -> str | None:
    """The PostgreSQL SQLSTATE of a driver error (None for SQLite and non-driver errors): how failures are classified
    without parsing message text."""
    return getattr(getattr(exc, "orig", None), "sqlstate", None)


def is_transient(exc: DBAPIError) -> bool:
    """A lost race (SQLite busy beyond the timeout, a PostgreSQL deadlock): safe to retry the transaction."""
    if sqlstate(exc) in _RETRY_SQLSTATES:
        return True
    text = str(getattr(exc, "orig", exc)).lower()
    return "database is locked" in text or "database is busy" in text


def translate(exc: SQLAlchemyError, url: URL, what: str) -> StoreError:
    """The ``StoreError`` subclass (with advice) for a failed ``what``."""
    text = reason(exc, url)
    lowered = text.lower()
    if sqlstate(exc) in _PERMISSION_SQLSTATES or "readonly database" in lowered or "read-only" in lowered:
        return StoreError(
            f"could not {what} at {mask(url)}: {text}. This connection may only read: tuning nodes write "
            "with the writer role (see `hwtune db roles`), engines read with the reader role."
        )
    if sqlstate(exc) in ("23505", "23503", "23514", "22001") or "constraint failed" in lowered:
        return StoreDataError(f"could not {what} at {mask(url)}: the data broke a rule of the schema: {text}")
    if (isinstance(exc, DBAPIError) and exc.connection_invalidated) or "connect" in lowered:
        return StoreUnavailableError(f"could not {what}: the store at {mask(url)} is unreachable: {text}")
    if "no such table" in lowered or ("does not exist" in lowered and "relation" in lowered):
        return StoreError(f"could not {what} at {mask(url)}: {text}. Run `hwtune db upgrade --db URL`.")
    return StoreError(f"could not {what} at {mask(url)}: {text}")

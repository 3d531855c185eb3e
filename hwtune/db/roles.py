"""PostgreSQL roles for a shared store: the SQL shipped in ``hwtune/db/sql/roles.sql``, rendered or applied.

The file is the single source: ``psql -v writer=... -v reader=... -v dbname=... -f roles.sql`` runs it as is,
and ``hwtune db roles`` renders the same file (psql's ``:"name"`` becomes a quoted identifier) and can apply
it. Applying skips ``CREATE ROLE`` for a role that already exists, so it can be re-run after a migration to
grant on new tables.
"""

from __future__ import annotations

import importlib.resources
import re

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from hwtune.core.errors import InvalidSpecError, StoreError
from hwtune.db.errors import translate
from hwtune.db.store import Store

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_VAR = re.compile(r':"(\w+)"')
_CREATE_ROLE = re.compile(r'^CREATE ROLE "([^"]+)"', re.IGNORECASE)


def template() -> str:
    """roles.sql as shipped in the package, psql variables unfilled (the single source for render and apply)."""
    return importlib.resources.files("hwtune.db").joinpath("sql/roles.sql").read_text()


def _quote(name: str) -> str:
    if not _NAME.match(name):
        raise InvalidSpecError(f"role or database name {name!r} must be a plain identifier (letters, digits, _)")
    return f'"{name}"'


def render(writer: str, reader: str, dbname: str) -> str:
    """roles.sql with the psql variables filled in."""
    if writer == reader:
        raise InvalidSpecError("the writer and reader roles must be different roles")
    values = {"writer": _quote(writer), "reader": _quote(reader), "dbname": _quote(dbname)}
    return _VAR.sub(lambda m: values[m.group(1)], template())


def statements(sql: str) -> list[str]:
    """The SQL statements of ``sql`` without comments (the file has no semicolons inside literals)."""
    body = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


def apply(store: Store, writer: str, reader: str) -> list[str]:
    """Run the rendered statements on ``store`` (a PostgreSQL store opened by its owner); returns them."""
    if store.dialect != "postgresql":
        raise StoreError("roles are a PostgreSQL feature; a SQLite store is protected by file permissions")
    dbname = store.url.database or ""
    done: list[str] = []
    try:
        with store.engine.begin() as conn:
            existing = {r[0] for r in conn.execute(text("SELECT rolname FROM pg_roles"))}
            for stmt in statements(render(writer, reader, dbname)):
                created = _CREATE_ROLE.match(stmt)
                if created and created.group(1) in existing:
                    continue
                conn.exec_driver_sql(stmt)
                done.append(stmt)
    except SQLAlchemyError as exc:
        raise translate(exc, store.url, "set up the roles") from None
    return done

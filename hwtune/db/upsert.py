"""The one idempotent-write helper: ``INSERT ... ON CONFLICT`` in the dialect's own spelling.

SQLite and PostgreSQL both support ``ON CONFLICT (cols) DO UPDATE SET ... WHERE ...``; SQLAlchemy exposes it
as ``sqlalchemy.dialects.{sqlite,postgresql}.insert(...).on_conflict_do_update``. The ``WHERE`` clause
("only if some value differs") matters: with it, the affected-row count is exactly the rows that were
inserted or changed, so writing the same thing twice reports 0 and a push with nothing new copies nothing.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sqlalchemy import Table, or_
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    conflict: Sequence[str],
    update: Sequence[str] = (),
) -> int:
    """Insert ``rows``; on a ``conflict`` key collision update the ``update`` columns where they differ
    (or do nothing when ``update`` is empty). Returns how many rows were inserted or changed."""
    if not rows:
        return 0
    insert = sqlite_insert if conn.dialect.name == "sqlite" else pg_insert
    stmt = insert(table)
    if update:
        stmt = stmt.on_conflict_do_update(
            index_elements=list(conflict),
            set_={name: stmt.excluded[name] for name in update},
            where=or_(*(table.c[name].is_distinct_from(stmt.excluded[name]) for name in update)),
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(conflict))
    # executemany (psycopg 3 pipelines it; sqlite3 reuses one prepared statement) and the driver's summed
    # rowcount: inserted + changed rows, skipped ones excluded. RETURNING would make SQLAlchemy render one
    # giant multi-VALUES statement instead, which psycopg parses several times slower.
    result = conn.execute(stmt, list(rows), execution_options={"preserve_rowcount": True})
    return int(result.rowcount)

"""Alembic environment for the hwtune store.

hwtune never runs Alembic from a command line or an alembic.ini: ``hwtune.db.migrate`` builds the Config in
code and hands over a connection that is already inside a transaction (and, for SQLite, inside
``BEGIN IMMEDIATE``) and under the cross-process migration lock, so every upgrade is all-or-nothing and
only one process runs it. Offline (``--sql``) mode is not supported: run ``hwtune db upgrade``.
"""

from __future__ import annotations

from alembic import context

from hwtune.db.models import Base

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("hwtune migrations run through `hwtune db upgrade`, with a live connection")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    transactional_ddl=True,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite ALTER TABLE goes through table copies
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

"""Work queue for multi-node tuning: one row per item of a plan, claimed under a lease.

Why a table and not a message broker: the tuning nodes already share this database, and a row lock
(``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite) is enough to hand each
item to exactly one worker; an expired lease hands it to another worker when one dies.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

from hwtune.db.columns import JSONDoc, UTCDateTime

revision: str = "0002"
down_revision: Union[str, Sequence[str], None] = "0001"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "work_items",
        sa.Column("id", BigId, nullable=False),
        sa.Column("plan_id", sa.String(128), nullable=False),
        sa.Column("item_key", sa.String(255), nullable=False),
        sa.Column("payload", JSONDoc(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("claimed_by", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_work_items"),
        sa.UniqueConstraint("plan_id", "item_key", name="uq_work_items_plan_item"),
        sa.CheckConstraint("state IN ('pending', 'claimed', 'done', 'failed')", name=op.f("ck_work_items_state")),
    )
    op.create_index("ix_work_items_plan_state", "work_items", ["plan_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_work_items_plan_state", table_name="work_items")
    op.drop_table("work_items")

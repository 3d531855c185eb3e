"""hwtune's own kernels get names of their own: measurements recorded as TRITON_ATTN / TURBOQUANT become
HWTUNE_TRITON_ATTN / HWTUNE_TURBOQUANT.

Why: those names now mean vLLM's backends (issue 18), which hwtune does not run; every attention measurement
stored under them before this revision was of hwtune's kernels (``hwtune.core.catalogue.RENAMED_MEASUREMENTS``),
and left as they were they would rank vLLM's backends by another kernel's timings. The mapping is frozen here,
as a migration must be.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: Union[str, Sequence[str], None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

RENAMED = {"TRITON_ATTN": "HWTUNE_TRITON_ATTN", "TURBOQUANT": "HWTUNE_TURBOQUANT"}
_RENAME = sa.text(
    "UPDATE measurements SET backend = :new WHERE backend = :old "
    "AND workload_id IN (SELECT id FROM workloads WHERE kind = 'attention')"
)


def upgrade() -> None:
    for old, new in RENAMED.items():
        op.execute(_RENAME.bindparams(old=old, new=new))


def downgrade() -> None:
    for old, new in RENAMED.items():
        op.execute(_RENAME.bindparams(old=new, new=old))

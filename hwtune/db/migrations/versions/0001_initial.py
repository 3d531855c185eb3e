"""Initial store: environments, workloads, measurements, runs.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

from hwtune.db.columns import JSONDoc, UTCDateTime

revision: str = "0001"
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
STATUSES = "status IN ('ok', 'wrong_answer', 'crashed', 'timeout', 'unsupported', 'error')"
RUN_STATES = "state IN ('running', 'done', 'failed', 'interrupted')"


def upgrade() -> None:
    op.create_table(
        "environments",
        sa.Column("id", BigId, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("fingerprint", JSONDoc(), nullable=False),
        sa.Column("device_name", sa.String(200), nullable=True),
        sa.Column("compute_capability", sa.String(16), nullable=True),
        sa.Column("driver", sa.String(64), nullable=True),
        sa.Column("torch", sa.String(64), nullable=True),
        sa.Column("cuda_runtime", sa.String(64), nullable=True),
        sa.Column("flashinfer", sa.String(64), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_environments"),
        sa.UniqueConstraint("hash", name="uq_environments_hash"),
    )
    op.create_table(
        "workloads",
        sa.Column("id", BigId, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("spec_key", sa.String(64), nullable=False),
        sa.Column("normalized", JSONDoc(), nullable=False),
        sa.Column("phase", sa.String(16), nullable=True),
        sa.Column("batch", sa.Integer(), nullable=True),
        sa.Column("context_len", sa.Integer(), nullable=True),
        sa.Column("query_len", sa.Integer(), nullable=True),
        sa.Column("tokens_per_rank", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_workloads"),
        sa.UniqueConstraint("key", name="uq_workloads_key"),
        sa.CheckConstraint("kind IN ('attention', 'all2all')", name=op.f("ck_workloads_kind")),
    )
    op.create_index("ix_workloads_spec_shape", "workloads", ["spec_key", "phase", "batch", "context_len", "query_len"])
    op.create_index("ix_workloads_spec_tokens", "workloads", ["spec_key", "tokens_per_rank"])
    op.create_table(
        "measurements",
        sa.Column("id", BigId, nullable=False),
        sa.Column("environment_id", BigId, nullable=False),
        sa.Column("workload_id", BigId, nullable=False),
        sa.Column("backend", sa.String(100), nullable=False),
        sa.Column("tactic", sa.String(100), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("median_us", sa.Double(), nullable=True),
        sa.Column("p10_us", sa.Double(), nullable=True),
        sa.Column("p90_us", sa.Double(), nullable=True),
        sa.Column("mean_us", sa.Double(), nullable=True),
        sa.Column("n", sa.Integer(), nullable=True),
        sa.Column("spread", sa.Double(), nullable=True),
        sa.Column("ci95_rel", sa.Double(), nullable=True),
        sa.Column("error", JSONDoc(), nullable=True),
        sa.Column("timing_method", sa.String(64), nullable=True),
        sa.Column("compile_time_s", sa.Double(), nullable=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_uuid", sa.String(100), nullable=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("hwtune_version", sa.String(32), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("extra", JSONDoc(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_measurements"),
        sa.ForeignKeyConstraint(
            ["environment_id"], ["environments.id"], name="fk_measurements_environment_id_environments"
        ),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], name="fk_measurements_workload_id_workloads"),
        sa.UniqueConstraint(
            "run_id", "environment_id", "workload_id", "backend", "tactic", name="uq_measurements_candidate"
        ),
        sa.CheckConstraint(STATUSES, name=op.f("ck_measurements_status")),
    )
    op.create_index("ix_measurements_workload_env", "measurements", ["workload_id", "environment_id"])
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("who", sa.String(200), nullable=True),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("plan", JSONDoc(), nullable=True),
        sa.Column("budget_s", sa.Double(), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("hwtune_version", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.CheckConstraint(RUN_STATES, name=op.f("ck_runs_state")),
    )
    op.create_index("ix_runs_started_at", "runs", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_started_at", table_name="runs")
    op.drop_table("runs")
    op.drop_index("ix_measurements_workload_env", table_name="measurements")
    op.drop_table("measurements")
    op.drop_index("ix_workloads_spec_tokens", table_name="workloads")
    op.drop_index("ix_workloads_spec_shape", table_name="workloads")
    op.drop_table("workloads")
    op.drop_table("environments")

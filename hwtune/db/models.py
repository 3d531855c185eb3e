"""The store's schema (SQLAlchemy 2.0 typed ORM). Migrations in ``hwtune/db/migrations`` build exactly this
(a test compares them), so change both together: a new revision for every change here.

Why the shape:

* ``environments`` holds each fingerprint once (device identity + software stack, no host identifiers), so
  identical nodes share results; ``hash`` is the selector's lookup key.
* ``workloads`` holds each normalised workload once under its canonical ``key``; ``spec_key`` (the key of
  the engine-level spec) lets the selector fetch every measurement of one engine spec with one index range,
  and the numeric shape columns let it narrow by phase, batch and lengths without parsing JSON.
* ``measurements`` is append-only evidence. Its unique key (run, environment, workload, backend, tactic)
  makes re-writing the same result idempotent. ``run_id`` is ``''`` (not NULL) for results that belong to
  no run, because NULLs never collide in a unique index and the upsert would then duplicate them.
* ``runs`` records who tuned what and how it ended; ``work_items`` is the multi-node tuning queue.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Optional

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from hwtune.core.records import STATUSES
from hwtune.db.columns import JSONDoc, UTCDateTime

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
#: 64-bit ids on PostgreSQL; SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")
WORK_STATES: tuple[str, ...] = ("pending", "claimed", "done", "failed")
RUN_STATES: tuple[str, ...] = ("running", "done", "failed", "interrupted")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    """Declarative base whose metadata names constraints and indexes deterministically, so migrations can refer to
    them by name on both SQLite and PostgreSQL."""

    metadata = MetaData(naming_convention=NAMING)


class EnvironmentRow(Base):
    """One environment fingerprint, stored once and shared by its measurements; the hash is the lookup key and a few
    fields are copied into columns for people to query."""

    __tablename__ = "environments"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    hash: Mapped[str] = mapped_column(String(64), unique=True)
    fingerprint: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    device_name: Mapped[Optional[str]] = mapped_column(String(200))
    compute_capability: Mapped[Optional[str]] = mapped_column(String(16))
    driver: Mapped[Optional[str]] = mapped_column(String(64))
    torch: Mapped[Optional[str]] = mapped_column(String(64))
    cuda_runtime: Mapped[Optional[str]] = mapped_column(String(64))
    flashinfer: Mapped[Optional[str]] = mapped_column(String(64))
    created_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime)


class WorkloadRow(Base):
    """One normalised workload under its canonical key, with the spec key and shape columns the selector's indexes
    look up."""

    __tablename__ = "workloads"
    __table_args__ = (
        Index("ix_workloads_spec_shape", "spec_key", "phase", "batch", "context_len", "query_len"),
        Index("ix_workloads_spec_tokens", "spec_key", "tokens_per_rank"),
        CheckConstraint("kind IN ('attention', 'all2all')", name="kind"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    key: Mapped[str] = mapped_column(String(64), unique=True)
    spec_key: Mapped[str] = mapped_column(String(64))
    normalized: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    phase: Mapped[Optional[str]] = mapped_column(String(16))
    batch: Mapped[Optional[int]] = mapped_column(Integer)
    context_len: Mapped[Optional[int]] = mapped_column(Integer)
    query_len: Mapped[Optional[int]] = mapped_column(Integer)
    tokens_per_rank: Mapped[Optional[int]] = mapped_column(Integer)


class MeasurementRow(Base):
    """One candidate's result on one workload in one environment; unique per run, so re-writing it updates in place
    while another run's measurement of the same candidate is kept beside it."""

    __tablename__ = "measurements"
    __table_args__ = (
        UniqueConstraint(
            "run_id", "environment_id", "workload_id", "backend", "tactic", name="uq_measurements_candidate"
        ),
        # The selector's path: workloads by key or spec_key, then this index. No index on environment_id
        # alone: SQLite's planner (no statistics) would prefer it and scan half the table per lookup.
        Index("ix_measurements_workload_env", "workload_id", "environment_id"),
        CheckConstraint(_in("status", STATUSES), name="status"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    backend: Mapped[str] = mapped_column(String(100))
    tactic: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
    median_us: Mapped[Optional[float]] = mapped_column(Double)
    p10_us: Mapped[Optional[float]] = mapped_column(Double)
    p90_us: Mapped[Optional[float]] = mapped_column(Double)
    mean_us: Mapped[Optional[float]] = mapped_column(Double)
    n: Mapped[Optional[int]] = mapped_column(Integer)
    spread: Mapped[Optional[float]] = mapped_column(Double)
    ci95_rel: Mapped[Optional[float]] = mapped_column(Double)
    error: Mapped[Optional[dict[str, Any]]] = mapped_column(JSONDoc)
    timing_method: Mapped[Optional[str]] = mapped_column(String(64))
    compile_time_s: Mapped[Optional[float]] = mapped_column(Double)
    host: Mapped[str] = mapped_column(String(255))
    gpu_uuid: Mapped[Optional[str]] = mapped_column(String(100))
    run_id: Mapped[str] = mapped_column(String(64), default="")
    hwtune_version: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime)
    extra: Mapped[dict[str, Any]] = mapped_column(JSONDoc)


class RunRow(Base):
    """One ``hwtune tune`` run: who, where, plan, budget, start and end, and its state; resumes look it up by id."""

    __tablename__ = "runs"
    __table_args__ = (CheckConstraint(_in("state", RUN_STATES), name="state"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    who: Mapped[Optional[str]] = mapped_column(String(200))
    host: Mapped[Optional[str]] = mapped_column(String(255))
    plan: Mapped[Optional[dict[str, Any]]] = mapped_column(JSONDoc)
    budget_s: Mapped[Optional[float]] = mapped_column(Double)
    started_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime, index=True)
    ended_at: Mapped[Optional[_dt.datetime]] = mapped_column(UTCDateTime)
    state: Mapped[str] = mapped_column(String(16))
    hwtune_version: Mapped[str] = mapped_column(String(32))


class WorkItemRow(Base):
    """One unit of a distributed tuning plan; added by revision 0002."""

    __tablename__ = "work_items"
    __table_args__ = (
        UniqueConstraint("plan_id", "item_key", name="uq_work_items_plan_item"),
        Index("ix_work_items_plan_state", "plan_id", "state"),
        CheckConstraint(_in("state", WORK_STATES), name="state"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    plan_id: Mapped[str] = mapped_column(String(128))
    item_key: Mapped[str] = mapped_column(String(255))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    claimed_by: Mapped[Optional[str]] = mapped_column(String(255))
    lease_expires_at: Mapped[Optional[_dt.datetime]] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime)


TABLES: tuple[str, ...] = ("environments", "workloads", "measurements", "runs", "work_items")


def table(model: type[Base]) -> Table:
    """The Core ``Table`` of a model (typed as such, for the Core statements in store.py and queue.py)."""
    return model.__table__  # type: ignore[return-value]

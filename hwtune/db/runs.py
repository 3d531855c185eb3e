"""Tuning runs: one row per ``hwtune tune`` (who, where, plan, budget, start/end, state), and the resume set.

A run id tags every measurement it writes, so a run killed half-way resumes by skipping the candidates
``measured_keys`` returns; re-writing one it had already stored is harmless (the upsert is idempotent).
"""

from __future__ import annotations

import datetime as _dt
import getpass
import os
import socket
from typing import Any, Mapping, Sequence

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection

from hwtune._version import __version__
from hwtune.db.models import MeasurementRow, RunRow, WorkloadRow, table
from hwtune.db.upsert import upsert

R, M, W = table(RunRow), table(MeasurementRow), table(WorkloadRow)


def _who() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # containers without a passwd entry
        return os.environ.get("USER")


def start(
    conn: Connection,
    run_id: str,
    *,
    who: str | None,
    host: str | None,
    plan: Mapping[str, Any] | None,
    budget_s: float | None,
) -> None:
    """Insert the run as ``running`` (or mark a resumed one running again)."""
    row = {
        "id": run_id,
        "who": who or _who(),
        "host": host or socket.gethostname(),
        "plan": dict(plan) if plan is not None else None,
        "budget_s": budget_s,
        "started_at": _dt.datetime.now(_dt.timezone.utc),
        "ended_at": None,
        "state": "running",
        "hwtune_version": __version__,
    }
    upsert(conn, R, [row], conflict=("id",), update=("state", "ended_at"))


def finish(conn: Connection, run_id: str, state: str) -> bool:
    """Set the end state and time; False when there is no such run."""
    done = conn.execute(
        update(R)
        .where(R.c.id == run_id)
        .values(state=state, ended_at=_dt.datetime.now(_dt.timezone.utc))
        .returning(R.c.id)
    )
    return bool(done.all())


def get(conn: Connection, run_id: str) -> dict[str, Any] | None:
    """The run's row as a dict, or None when there is no such run."""
    row = conn.execute(select(R).where(R.c.id == run_id)).mappings().first()
    return dict(row) if row else None


def measured_keys(conn: Connection, run_id: str) -> set[tuple[str, str, str]]:
    """(workload key, backend, tactic) of every measurement stored under ``run_id``, whatever its status: the
    candidates a resumed run skips."""
    query = (
        select(W.c.key, M.c.backend, M.c.tactic)
        .select_from(M.join(W, M.c.workload_id == W.c.id))
        .where(M.c.run_id == run_id)
    )
    return {(k, b, t) for k, b, t in conn.execute(query)}


def recent(conn: Connection, limit: int, state: str | None = None) -> list[dict[str, Any]]:
    """The ``limit`` newest runs (of ``state``), newest first, without their plans (``get`` has the plan)."""
    query = select(*(c for c in R.c if c.name != "plan")).order_by(R.c.started_at.desc(), R.c.id).limit(limit)
    if state is not None:
        query = query.where(R.c.state == state)
    return [dict(row) for row in conn.execute(query).mappings()]


def status_counts(conn: Connection, run_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """Measurements stored under each of ``run_ids``, per status (runs with none are left out); the unique
    key's leading ``run_id`` column serves the lookup."""
    out: dict[str, dict[str, int]] = {}
    for start in range(0, len(run_ids), 500):
        chunk = list(run_ids[start : start + 500])
        query = select(M.c.run_id, M.c.status, func.count()).where(M.c.run_id.in_(chunk))
        for run_id, status, n in conn.execute(query.group_by(M.c.run_id, M.c.status)):
            out.setdefault(run_id, {})[status] = int(n)
    return out

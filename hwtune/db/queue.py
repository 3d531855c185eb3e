"""The multi-node tuning queue: each item of a plan goes to exactly one worker at a time, under a lease.

``claim`` picks pending items, and items whose worker's lease ran out (the worker died or hung), and marks
them claimed by the caller until ``now + lease_s``. On PostgreSQL the pick is ``SELECT ... FOR UPDATE SKIP
LOCKED``: concurrent workers skip rows another worker is claiming instead of waiting or taking them twice.
On SQLite the whole claim runs under ``BEGIN IMMEDIATE``, which serialises writers. An item whose lease
expired ``max_attempts`` times is marked failed rather than handed out again: it probably kills workers.
Lease times come from the database server's clock on PostgreSQL, so nodes with skewed clocks agree.

A worker is named ``host:pid:start:tag`` (``worker_id``): with the process's start time the name stays true when
the pid is reused, so ``holder_is_gone`` tells a dead holder of this host from a live one at once, without
waiting for its lease.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import uuid
from typing import Any, Mapping, Sequence

from sqlalchemy import and_, func, or_, select, text, update
from sqlalchemy.engine import Connection

from hwtune.db.models import WORK_STATES, WorkItemRow, table
from hwtune.db.upsert import upsert

T = table(WorkItemRow)


def db_now(conn: Connection) -> _dt.datetime:
    """The time all lease arithmetic uses: the server's on PostgreSQL, this host's on SQLite (one host)."""
    if conn.dialect.name == "postgresql":
        value = conn.execute(text("SELECT now()")).scalar_one()
        return value.astimezone(_dt.timezone.utc)
    return _dt.datetime.now(_dt.timezone.utc)


def enqueue(conn: Connection, plan_id: str, items: Sequence[tuple[str, Mapping[str, Any]]]) -> int:
    """Add items (key, payload) to a plan; keys already there are left alone. Returns how many were new."""
    now = db_now(conn)
    rows = [
        {
            "plan_id": plan_id,
            "item_key": key,
            "payload": dict(payload),
            "state": "pending",
            "claimed_by": None,
            "lease_expires_at": None,
            "attempts": 0,
            "updated_at": now,
        }
        for key, payload in items
    ]
    return upsert(conn, T, rows, conflict=("plan_id", "item_key"))


def claim(
    conn: Connection, plan_id: str, worker: str, n: int, lease_s: float, max_attempts: int = 3
) -> list[tuple[str, dict[str, Any]]]:
    """Claim up to ``n`` items for ``worker`` until now + ``lease_s``; (key, payload) in plan order."""
    now = db_now(conn)
    expired = and_(T.c.state == "claimed", T.c.lease_expires_at < now)
    conn.execute(  # items that have already used up their attempts are failed, not handed out again
        update(T)
        .where(T.c.plan_id == plan_id, expired, T.c.attempts >= max_attempts)
        .values(state="failed", lease_expires_at=None, updated_at=now)
    )
    pick = (
        select(T.c.id)
        .where(T.c.plan_id == plan_id, or_(T.c.state == "pending", expired), T.c.attempts < max_attempts)
        .order_by(T.c.id)
        .limit(n)
    )
    if conn.dialect.name == "postgresql":
        pick = pick.with_for_update(skip_locked=True)
    ids = [row[0] for row in conn.execute(pick)]
    if not ids:
        return []
    claimed = conn.execute(
        update(T)
        .where(T.c.id.in_(ids))
        .values(
            state="claimed",
            claimed_by=worker,
            attempts=T.c.attempts + 1,
            updated_at=now,
            lease_expires_at=now + _dt.timedelta(seconds=lease_s),
        )
        .returning(T.c.id, T.c.item_key, T.c.payload)
    ).all()
    return [(key, payload) for _, key, payload in sorted(claimed, key=lambda r: r[0])]


def heartbeat(conn: Connection, plan_id: str, worker: str, keys: Sequence[str], lease_s: float) -> list[str]:
    """Extend ``worker``'s lease on ``keys``; returns the keys it still holds (others were lost)."""
    if not keys:
        return []
    now = db_now(conn)
    rows = conn.execute(
        update(T)
        .where(T.c.plan_id == plan_id, T.c.item_key.in_(list(keys)), T.c.claimed_by == worker, T.c.state == "claimed")
        .values(lease_expires_at=now + _dt.timedelta(seconds=lease_s), updated_at=now)
        .returning(T.c.item_key)
    ).all()
    return sorted(r[0] for r in rows)


def complete(conn: Connection, plan_id: str, key: str, ok: bool, worker: str | None = None) -> bool:
    """Mark an item done (or failed); with ``worker``, only if that worker still holds it."""
    now = db_now(conn)
    cond = [T.c.plan_id == plan_id, T.c.item_key == key]
    if worker is not None:
        cond.append(T.c.claimed_by == worker)
    rows = conn.execute(
        update(T)
        .where(*cond)
        .values(state="done" if ok else "failed", lease_expires_at=None, updated_at=now)
        .returning(T.c.id)
    ).all()
    return bool(rows)


def queue_state(conn: Connection, plan_id: str) -> dict[str, int]:
    """Items per state (pending, claimed, done, failed) for one plan."""
    out = {state: 0 for state in WORK_STATES}
    for state, count in conn.execute(select(T.c.state, func.count()).where(T.c.plan_id == plan_id).group_by(T.c.state)):
        out[state] = int(count)
    return out


def claims(conn: Connection, plan_id: str) -> list[tuple[str, str, float]]:
    """(item key, worker, seconds until its lease ends) of every claimed item of a plan, by key."""
    now = db_now(conn)
    rows = conn.execute(
        select(T.c.item_key, T.c.claimed_by, T.c.lease_expires_at)
        .where(T.c.plan_id == plan_id, T.c.state == "claimed")
        .order_by(T.c.item_key)
    ).all()
    out = []
    for key, worker, expires in rows:
        if expires is not None and expires.tzinfo is None:  # SQLite hands back naive UTC
            expires = expires.replace(tzinfo=_dt.timezone.utc)
        left = (expires - now).total_seconds() if expires is not None else 0.0
        out.append((key, worker or "", left))
    return out


def release(conn: Connection, plan_id: str, held: Sequence[tuple[str, str]]) -> int:
    """Return items (key, worker) to pending, each only if that worker still holds it: how a run takes over the
    leases of a process that is gone. Returns how many were released."""
    now = db_now(conn)
    released = 0
    for key, worker in held:
        rows = conn.execute(
            update(T)
            .where(T.c.plan_id == plan_id, T.c.item_key == key, T.c.claimed_by == worker, T.c.state == "claimed")
            .values(state="pending", claimed_by=None, lease_expires_at=None, updated_at=now)
            .returning(T.c.id)
        ).all()
        released += len(rows)
    return released


# --- who holds an item ---------------------------------------------------------------------------------------


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat`` field 22), or None where
    /proc cannot say (no such process, or not Linux). With the pid it names one process, even once the pid is
    reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # after "pid (comm) ": field 3 on; comm may hold spaces and ")"
    return fields[19].decode() if len(fields) > 19 else None


def worker_id(tag: str | None = None) -> str:
    """This process's name in the queue: ``host:pid:start:tag`` (``host:pid:tag`` where /proc cannot give the start
    time); the tag tells apart workers of one process."""
    pid = os.getpid()
    start = process_start(pid)
    return ":".join([socket.gethostname(), str(pid), *([start] if start else []), tag or uuid.uuid4().hex[:6]])


def holder_is_gone(worker: str) -> bool:
    """Whether a worker (``worker_id``, or the older ``host:pid:tag``) names a process of this host that no longer
    exists: no process has its pid, or the one that has it started at another time (the pid was reused, by this
    process too). Another host's process, or one of this host that this user may not signal and whose start time
    is not known, is never taken for gone: its lease decides."""
    parts = worker.split(":")
    if len(parts) not in (3, 4) or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid, started = int(parts[1]), parts[2] if len(parts) == 4 else None
    now = process_start(pid)
    if started is not None and now is not None:
        return now != started
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists but belongs to another user, or cannot be asked: not ours to take over
        return False
    return False

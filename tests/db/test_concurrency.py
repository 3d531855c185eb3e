"""Many writers at once, writers killed mid-transaction, and many `hwtune db upgrade` at once."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from hwtune.core.records import MeasurementRecord
from hwtune.db.store import Store
from tests.db.helpers import attention

PROCS, PER_PROC, BATCH = 8, 500, 25
CTX = mp.get_context("fork")  # fork also exercises the engine's at-fork disposal


def _records(worker: int, n: int, start: int = 0) -> list[MeasurementRecord]:
    # Every worker shares the same workloads (get-or-create races) but has its own run id (distinct rows).
    return [attention(batch=1 + i, context=4096, run_id=f"proc-{worker}", seq=i) for i in range(start, start + n)]


def _writer(url: str, worker: int, barrier: Any, errors: Any) -> None:
    try:
        barrier.wait(timeout=60)
        with Store.open(url) as store:  # all open a fresh store at once: creation runs under the lock
            records = _records(worker, PER_PROC)
            for i in range(0, PER_PROC, BATCH):
                store.write(records[i : i + BATCH])
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
        errors.put(f"worker {worker}: {traceback.format_exc()}")
        os._exit(1)
    os._exit(0)


def _many_writers(url: str) -> None:
    barrier, errors = CTX.Barrier(PROCS), CTX.SimpleQueue()  # put() is synchronous: survives os._exit
    procs = [CTX.Process(target=_writer, args=(url, w, barrier, errors)) for w in range(PROCS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert not problems, "\n".join(problems)
    assert [p.exitcode for p in procs] == [0] * PROCS
    with Store.open(url, create=False) as store:
        counts = store.counts()
        assert counts["measurements"] == PROCS * PER_PROC
        assert counts["workloads"] == PER_PROC and counts["environments"] == 1
        for w in range(PROCS):
            assert len(store.measured_keys(f"proc-{w}")) == PER_PROC


def test_eight_processes_into_sqlite(sqlite_url: str) -> None:
    _many_writers(sqlite_url)
    con = sqlite3.connect(sqlite_url)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


@pytest.mark.postgres
def test_eight_processes_into_postgres(pg_url: str) -> None:
    _many_writers(pg_url)


def _killable_writer(url: str, progress: str, hang_in_transaction: bool) -> None:
    """Write batches forever, appending each batch number to ``progress`` after its commit. With
    ``hang_in_transaction``, the 4th batch stops inside its transaction (rows inserted, not committed)."""
    import hwtune.db.store as store_module

    real_upsert = store_module.upsert
    state = {"batch": 0}

    def upsert_then_hang(conn: Any, table: Any, rows: Any, **kw: Any) -> int:
        n = real_upsert(conn, table, rows, **kw)
        if table.name == "measurements" and state["batch"] == 3:
            with open(progress + ".hang", "w") as f:
                f.write("in transaction")
            time.sleep(600)
        return n

    if hang_in_transaction:
        store_module.upsert = upsert_then_hang  # type: ignore[assignment]
    with Store.open(url) as store:
        for batch in range(10_000):
            state["batch"] = batch
            store.write(_records(0, 20, start=batch * 20))
            with open(progress, "a") as f:
                f.write(f"{batch}\n")
    os._exit(0)


def _kill_and_check(tmp_path: Path, hang: bool) -> None:
    url = str(tmp_path / "kill.db")
    progress = str(tmp_path / "progress")
    Path(progress).touch()
    proc = CTX.Process(target=_killable_writer, args=(url, progress, hang))
    proc.start()
    deadline = time.monotonic() + 60
    if hang:
        while not Path(progress + ".hang").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert Path(progress + ".hang").exists(), "the writer never reached the hanging transaction"
    else:
        while len(Path(progress).read_text().split()) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.013)  # land somewhere inside the write loop
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL

    committed = [int(x) for x in Path(progress).read_text().split()]
    con = sqlite3.connect(url)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    with Store.open(url) as store:  # opening after the kill recovers the WAL and can write again
        counts = store.counts()
        rows = counts["measurements"]
        assert rows % 20 == 0, f"{rows} rows: a batch was half-written"
        stored = {(r.workload["batch"] - 1) // 20 for r in store.measurements()}
        assert set(committed) <= stored, "a committed batch is missing"
        # at most one batch may have committed without reaching the progress file before the kill
        assert stored <= set(committed) | {len(committed)}
        if hang:
            assert stored == {0, 1, 2}, "rows of the uncommitted transaction are visible"
        assert store.write(_records(1, 5)) == 5


def test_sigkill_mid_transaction_loses_nothing_committed(tmp_path: Path) -> None:
    _kill_and_check(tmp_path, hang=True)


def test_sigkill_at_a_random_moment(tmp_path: Path) -> None:
    _kill_and_check(tmp_path, hang=False)


def _concurrent_upgrades(url: str, n: int = 4) -> None:
    cmd = [sys.executable, "-m", "hwtune", "db", "upgrade", "--db", url, "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * n, [err for _, err in outs]
    results = [json.loads(out) for out, _ in outs]
    assert sum(r["changed"] for r in results) == 1  # exactly one process migrated; the others found it done
    assert {r["after"] for r in results} == {"0003"}
    with Store.open(url, create=False) as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM alembic_version").scalar() == 1


def test_concurrent_upgrade_sqlite(sqlite_url: str) -> None:
    _concurrent_upgrades(sqlite_url)


@pytest.mark.postgres
def test_concurrent_upgrade_postgres(pg_url: str) -> None:
    _concurrent_upgrades(pg_url)

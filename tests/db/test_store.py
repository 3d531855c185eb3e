"""Store basics on SQLite and PostgreSQL: round trips, idempotent upserts, filters, runs, resume keys."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from hwtune.core.errors import StoreDataError, StoreError
from hwtune.db.store import Store
from tests.db.helpers import B200, H100, SPEC, SPEC_FP8, all2all, attention, comparable, same_records, variety


def test_write_then_read_preserves_every_field(store_url: str) -> None:
    records = variety()
    with Store.open(store_url) as store:
        assert store.write(records) == len(records)
        got = store.measurements()
    assert same_records(got, records)
    wrong = next(r for r in got if r.status == "wrong_answer")
    assert math.isnan(wrong.error["max_abs"]) and wrong.error["max_rel"] == math.inf  # type: ignore[index]
    assert wrong.error["neg"] == -math.inf  # type: ignore[index]
    assert all(r.created_at.tzinfo is not None for r in got)
    assert next(r for r in got if r.kind == "all2all" and r.run_id is None).extra == {"nested": {"list": [1, 2.5, "x"]}}


def test_write_is_idempotent_and_updates_a_rerun(store_url: str) -> None:
    records = variety()
    with Store.open(store_url) as store:
        assert store.write(records) == len(records)
        assert store.write(records) == 0
        assert store.write(list(reversed(records))) == 0
        redo = dataclasses.replace(records[0], stats=dataclasses.replace(records[0].stats, median_us=39.0))
        assert store.write([redo]) == 1  # same candidate, same run: the row is updated, not duplicated
        counts = store.counts()
        assert counts["measurements"] == len(records)
        assert counts["environments"] == 2
        latest = store.measurements(workload_keys=[redo.workload_key], backend="FLASH_ATTN", run_id="run-1")
        assert [r.stats.median_us for r in latest] == [39.0]  # type: ignore[union-attr]


def test_records_without_run_do_not_duplicate(store_url: str) -> None:
    rec = attention(run_id=None)
    with Store.open(store_url) as store:
        assert store.write([rec]) == 1
        assert store.write([rec]) == 0
        assert store.counts()["measurements"] == 1
        assert store.measurements()[0].run_id is None


def test_duplicates_within_one_call_keep_the_last(store_url: str) -> None:
    a = attention(median=10.0)
    b = attention(median=20.0)
    with Store.open(store_url) as store:
        assert store.write([a, b]) == 1
        assert store.measurements()[0].stats.median_us == 20.0  # type: ignore[union-attr]


def test_filters(store_url: str) -> None:
    records = variety()
    with Store.open(store_url) as store:
        store.write(records)
        by_spec = store.measurements(spec_key=SPEC.key())
        assert {r.workload_key for r in by_spec} == {
            r.workload_key for r in records if r.kind == "attention" and r.workload["spec"] == SPEC.to_dict()
        }
        assert len(store.measurements(spec_key=SPEC_FP8.key())) == 1
        assert len(store.measurements("all2all")) == 2
        on_b200 = store.measurements(environment_hash=B200.hash())
        assert on_b200 and all(r.environment_hash == B200.hash() for r in on_b200)
        assert len(store.measurements(environment_hash=H100.hash())) == 8
        assert len(store.measurements(environment_hash="0" * 32)) == 0
        assert {r.status for r in store.measurements(statuses=["crashed", "wrong_answer"])} == {
            "crashed",
            "wrong_answer",
        }
        key = records[1].workload_key
        assert {(r.backend, r.tactic) for r in store.measurements(workload_keys=[key])} == {
            ("FLASH_ATTN", "fa3"),
            ("FLASHINFER", "fa2"),
            ("HWTUNE_TRITON_ATTN", "default"),
            ("FLEX_ATTENTION", "default"),
        }
        assert len(store.measurements(limit=3)) == 3
        assert store.measurements(backend="naive")[0].kind == "all2all"


def test_runs_and_resume_keys(store_url: str) -> None:
    with Store.open(store_url) as store:
        run = store.start_run(plan={"model": "llama-3.1-8b", "tp": 1}, budget_s=600.0, who="ci")
        recs = [attention(batch=b, run_id=run) for b in (1, 2, 4)]
        store.write(recs)
        assert store.measured_keys(run) == {(r.workload_key, "FLASH_ATTN", "fa3") for r in recs}
        assert store.measured_keys("other") == set()
        assert store.run(run)["state"] == "running"  # type: ignore[index]
        store.finish_run(run, "interrupted")
        row = store.run(run)
        assert row is not None and row["state"] == "interrupted" and row["ended_at"] >= row["started_at"]
        assert row["plan"] == {"model": "llama-3.1-8b", "tp": 1} and row["who"] == "ci"
        with pytest.raises(StoreError, match="unknown run state"):
            store.finish_run(run, "exploded")
        with pytest.raises(StoreError, match="no run"):
            store.finish_run("missing")


def test_refuses_a_record_filed_under_the_wrong_key(store_url: str) -> None:
    good = attention()
    with Store.open(store_url) as store:
        with pytest.raises(StoreDataError, match="does not match its attention workload"):
            store.write([dataclasses.replace(good, workload_key="f" * 32)])
        with pytest.raises(StoreDataError, match="not the hash of its fingerprint"):
            store.write([dataclasses.replace(good, environment_hash="e" * 32)])
        with pytest.raises(StoreDataError, match="not valid"):
            store.write([dataclasses.replace(good, workload={"spec": {"num_heads": 0}}, workload_key="")])
        assert store.counts()["measurements"] == 0  # the bad call wrote nothing, not even its environment


def test_read_only_store_cannot_write(store_url: str) -> None:
    Store.open(store_url).close()
    with Store.open(store_url, read_only=True, create=False) as ro:
        with pytest.raises(StoreError, match="read-only"):
            ro.write([attention()])
        assert ro.measurements() == []


def test_sqlite_pragmas_and_begin_immediate(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        assert store.status()["journal_mode"] == "wal"
        seen: list[str] = []
        sa.event.listen(store.engine, "before_cursor_execute", lambda conn, cur, stmt, *a: seen.append(stmt))
        store.write([attention()])
        store.measurements()
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60000
    begins = [s for s in seen if s.startswith("BEGIN")]
    assert begins[:2] == ["BEGIN IMMEDIATE", "BEGIN"]  # the write locks up front; the read does not


def test_wal_refusal_is_reported_not_assumed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from hwtune.db.engine import enable_wal, make_engine
    from hwtune.db.urls import resolve

    engine = make_engine(resolve("sqlite://"))  # in-memory databases answer "memory" to journal_mode=WAL
    assert enable_wal(engine) == "memory"
    assert "refused WAL" in caplog.text
    engine.dispose()


def test_no_connection_crosses_a_fork(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        store.write([attention(batch=1)])
        parent_conn = store.engine.pool.checkedin()
        assert parent_conn >= 1
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: uses the inherited Store; must open its own connection
            code = 1
            try:
                assert store.engine.pool.checkedin() == 0  # the parent's pool was dropped at fork
                store.write([attention(batch=2)])
                code = 0 if len(store.measurements()) == 2 else 3
            finally:
                os.write(write, bytes([code]))
                os._exit(code)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        assert os.read(read, 1) == b"\x00" and os.WEXITSTATUS(status) == 0
        assert len(store.measurements()) == 2  # the parent's own connection still works


def test_all2all_and_attention_share_nothing(store_url: str) -> None:
    with Store.open(store_url) as store:
        store.write([all2all(tokens=t, seq=t) for t in (64, 128, 256)])
        got = store.measurements("all2all")
        assert sorted(r.workload["tokens_per_rank"] for r in got) == [64, 128, 256]
        assert store.measurements("attention") == []
        assert comparable(got[0])["kind"] == "all2all"


def test_latencies_is_the_lean_view_of_measurements(store_url: str) -> None:
    records = variety()
    with Store.open(store_url) as store:
        store.write(records)
        rows = store.latencies(SPEC.key(), environment_hash=H100.hash())
        full = store.measurements(spec_key=SPEC.key(), environment_hash=H100.hash())
        assert [(r.workload_key, r.backend, r.tactic, r.status) for r in rows] == [
            (r.workload_key, r.backend, r.tactic, r.status) for r in full
        ]
        ok = next(r for r in rows if r.status == "ok" and r.batch == 64)
        assert (ok.phase, ok.context_len, ok.query_len, ok.median_us, ok.n) == ("decode", 8192, 1, 40.0, 200)
        assert ok.created_at.tzinfo is not None and ok.run_id == "run-1"
        assert store.latencies(SPEC.key(), environment_hash="0" * 32) == []
        assert {r.status for r in store.latencies(SPEC.key(), statuses=["crashed"])} == {"crashed"}
        assert store.latencies(SPEC.key(), environment_hash=B200.hash())[0].phase == "prefill"


def test_sqlite_lookups_use_the_indexes(sqlite_url: str) -> None:
    """The selector's lookups must be index searches, never a scan of measurements (1,000,000 rows)."""
    with Store.open(sqlite_url) as store:
        store.write(variety())
        captured: list[tuple[str, object]] = []
        sa.event.listen(
            store.engine, "before_cursor_execute", lambda conn, cur, stmt, params, *a: captured.append((stmt, params))
        )
        store.measurements(workload_keys=[attention().workload_key], environment_hash=H100.hash())
        store.measurements(spec_key=SPEC.key(), environment_hash=H100.hash())
        store.latencies(SPEC.key(), environment_hash=H100.hash())
        store.latencies(SPEC.key())
        lookups = [(s, p) for s, p in captured if "FROM measurements JOIN workloads" in s]
        assert len(lookups) == 4
        with store.engine.connect() as conn:
            for stmt, params in lookups:
                steps = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + stmt, params)
                plan = " | ".join(row[3] for row in steps)
                assert "ix_measurements_workload_env" in plan, plan
                assert "SCAN measurements" not in plan, plan


def test_optimize_is_harmless(store_url: str) -> None:
    with Store.open(store_url) as store:
        store.write(variety())
        store.optimize()
        run = store.start_run()
        store.finish_run(run)  # finishing a run refreshes the statistics too
        assert store.counts()["measurements"] == len(variety())


def test_store_implements_the_result_store_protocol(sqlite_url: str) -> None:
    """The tuner is typed against ResultStore; Store must offer every method with the same parameters."""
    import inspect

    from hwtune.core.result_store import ResultStore

    with Store.open(sqlite_url) as store:
        assert isinstance(store, ResultStore)
    for name, member in inspect.getmembers(ResultStore, inspect.isfunction):
        if name.startswith("_"):
            continue
        want = list(inspect.signature(member).parameters)
        have = list(inspect.signature(getattr(Store, name)).parameters)
        assert have == want, f"Store.{name}{have} differs from ResultStore.{name}{want}"

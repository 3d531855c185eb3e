"""Schema revisions: from empty, from the previous revision (data kept), outdated/newer stores, and the ORM
models matching what the migrations build."""

from __future__ import annotations

import datetime as _dt
import json

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from hwtune.core.errors import StoreOutdatedError
from hwtune.db import migrate
from hwtune.db.engine import make_engine
from hwtune.db.models import TABLES, Base
from hwtune.db.store import Store
from hwtune.db.urls import resolve
from tests.db.helpers import attention, cli


def test_revisions_are_a_line_and_head_is_newest() -> None:
    assert migrate.known_revisions() == ["0001", "0002", "0003"]
    assert migrate.head() == "0003"


def test_upgrade_from_empty(store_url: str) -> None:
    out = cli("upgrade", "--db", store_url, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["before"] is None and result["after"] == "0003" and result["changed"]
    with Store.open(store_url, create=False) as store:
        assert store.revision() == "0003"
        assert set(store.counts()) == set(TABLES)
    again = json.loads(cli("upgrade", "--db", store_url, "--json").stdout)
    assert again["changed"] is False


def test_models_match_migrations(store_url: str) -> None:
    with Store.open(store_url) as store, store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


def test_upgrade_from_previous_revision_keeps_data(store_url: str) -> None:
    engine = make_engine(resolve(store_url))
    migrate.upgrade(engine, "0001")
    assert migrate.revision_of(engine) == "0001"
    rec = attention()
    with engine.begin() as conn:  # a measurement written by the 0001-era schema
        tables = sa.MetaData()
        tables.reflect(conn)
        assert "work_items" not in tables.tables
        env = conn.execute(
            sa.insert(tables.tables["environments"])
            .values(
                hash=rec.environment_hash,
                fingerprint=rec.environment,
                device_name="NVIDIA H100 80GB HBM3",
                created_at=_dt.datetime(2026, 1, 1),
            )
            .returning(sa.column("id"))
        ).scalar_one()
        wl = conn.execute(
            sa.insert(tables.tables["workloads"])
            .values(
                kind="attention",
                key=rec.workload_key,
                spec_key="s",
                normalized=rec.workload,
                phase="decode",
                batch=8,
                context_len=2048,
                query_len=1,
            )
            .returning(sa.column("id"))
        ).scalar_one()
        conn.execute(
            sa.insert(tables.tables["measurements"]).values(
                environment_id=env,
                workload_id=wl,
                backend="FLASH_ATTN",
                tactic="fa3",
                status="ok",
                message="",
                median_us=40.0,
                p10_us=38.0,
                p90_us=44.0,
                mean_us=40.4,
                n=200,
                spread=0.15,
                host="node-07",
                run_id="old",
                hwtune_version="0.0.9",
                created_at=_dt.datetime(2026, 1, 1),
                extra={},
            )
        )
    engine.dispose()

    with pytest.raises(StoreOutdatedError, match=r"revision 0001; this hwtune needs 0003. Run `hwtune db up"):
        Store.open(store_url, create=False)
    with pytest.raises(StoreOutdatedError, match="hwtune db upgrade"):
        Store.open(store_url, read_only=True, create=False)
    status = json.loads(cli("status", "--db", store_url, "--json").stdout)
    assert status["revision"] == "0001" and not status["up_to_date"] and "work_items" not in status["counts"]

    out = cli("upgrade", "--db", store_url)
    assert out.returncode == 0, out.stderr
    assert "revision 0001 -> 0003" in out.stderr
    with Store.open(store_url, create=False) as store:
        (old,) = store.measurements()
        assert (old.run_id, old.hwtune_version, old.stats.median_us) == ("old", "0.0.9", 40.0)  # type: ignore[union-attr]
        assert store.enqueue("plan", [("a", {"x": 1})]) == 1  # the new table works


def test_open_with_create_upgrades_an_old_store(store_url: str) -> None:
    engine = make_engine(resolve(store_url))
    migrate.upgrade(engine, "0001")
    engine.dispose()
    with Store.open(store_url) as store:
        assert store.revision() == "0003"


def test_downgrade_and_upgrade_again(store_url: str) -> None:
    with Store.open(store_url) as store:
        store.write([attention()])
        migrate.downgrade(store.engine, "0001")
        assert store.revision() == "0001"
        store.upgrade()
        assert store.revision() == "0003" and store.counts()["measurements"] == 1


def test_store_from_a_newer_hwtune_is_refused(store_url: str) -> None:
    with Store.open(store_url) as store, store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    for kwargs in ({}, {"read_only": True, "create": False}):
        with pytest.raises(StoreOutdatedError, match="newer hwtune migrated it"):
            Store.open(store_url, **kwargs)  # type: ignore[arg-type]
    out = cli("upgrade", "--db", store_url)
    assert out.returncode == 1 and "Upgrade hwtune" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.postgres
def test_empty_database_read_only_says_what_to_do(pg_url: str) -> None:
    with pytest.raises(StoreOutdatedError, match="no hwtune store .* yet .*hwtune db upgrade"):
        Store.open(pg_url, read_only=True, create=False)


def test_measurements_of_hwtunes_kernels_get_their_own_names(store_url: str) -> None:
    """Stores written before hwtune's kernels had names of their own (revision 0002) recorded them as
    TRITON_ATTN / TURBOQUANT, names that now mean vLLM's backends: the upgrade renames them, the downgrade
    back; other backends are left alone."""
    with Store.open(store_url) as store:
        migrate.downgrade(store.engine, "0002")
        store.write(
            [attention(backend="TRITON_ATTN", tactic="auto"), attention(backend="FLASH_ATTN", batch=4, seq=1)]
            + [attention(backend="TURBOQUANT", tactic="auto", batch=2, seq=2)]
        )
        store.upgrade()
        assert sorted(r.backend for r in store.measurements()) == [
            "FLASH_ATTN",
            "HWTUNE_TRITON_ATTN",
            "HWTUNE_TURBOQUANT",
        ]
        migrate.downgrade(store.engine, "0002")
        assert sorted(r.backend for r in store.measurements()) == ["FLASH_ATTN", "TRITON_ATTN", "TURBOQUANT"]


def test_an_export_from_before_the_rename_imports_under_todays_names() -> None:
    from hwtune.db.import_checks import parse_line
    from hwtune.db.transfer import record_line

    line = record_line(attention(backend="TRITON_ATTN", tactic="auto"))
    assert parse_line(line).backend == "HWTUNE_TRITON_ATTN"
    assert parse_line(record_line(attention())).backend == "FLASH_ATTN"

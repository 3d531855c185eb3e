"""The service over a PostgreSQL store: the same answers, listings on the server, and a database that goes away."""

from __future__ import annotations

import time

import pytest

from tests.db.conftest import admin_engine, pg_database, pg_url  # noqa: F401  (fixtures)
from tests.serve.conftest import BODY, make_store, serving, static_ranking

pytestmark = pytest.mark.postgres


def test_postgres_store_answers_then_goes_away(pg_url: str, pg_database: str, tmp_path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))  # no per-user local store to fall back to
    make_store(pg_url)
    with serving(pg_url, refresh_s=0.3) as client:
        data = client.post("/v1/select/attention", json=BODY).json()
        assert data["backend"] == "FLASHINFER" and data["static_fallback"] is False and not data["store"]["fallback"]
        assert pg_database in data["store"]["used"] and "using shared store" in data["store"]["note"]
        assert client.get("/v1/environments").json()["environments"][0]["measurements"] == 79
        assert client.get("/v1/runs").json()["runs"][0]["measurements"] == {"ok": 78, "unsupported": 1}
        with admin_engine().connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{pg_database}" WITH (FORCE)')
        time.sleep(0.4)  # a server store is read again every refresh_s
        gone = client.post("/v1/select/attention", json=BODY).json()
        assert gone["static_fallback"] is True and gone["store"]["fallback"] is True
        assert [r["backend"] for r in gone["ranked"]] == static_ranking()
        assert "unreachable" in gone["store"]["note"] or "not usable" in gone["store"]["note"]
        assert client.get("/v1/environments").status_code == 503
        assert client.get("/v1/health").json()["status"] == "degraded"


def test_a_postgres_store_that_goes_away_is_flagged_when_the_local_store_answers(tmp_path, monkeypatch) -> None:
    """A server that cannot be reached falls back to the per-user local store: the answer says the configured store
    did not answer (``store.fallback``), though it is no static fallback."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    make_store(f"sqlite:///{tmp_path / 'hwtune' / 'hwtune.db'}")
    with serving("postgresql+psycopg://hwtune@127.0.0.1:1/nowhere?connect_timeout=1", refresh_s=0.3) as client:
        data = client.post("/v1/select/attention", json=BODY).json()
        assert data["static_fallback"] is False and data["store"]["fallback"] is True, data["store"]
        assert "using local store" in data["store"]["note"] and data["backend"] == "FLASHINFER"

"""Store fixtures: a fresh SQLite file per test, and a fresh PostgreSQL database per test.

PostgreSQL tests create ``hwtune_test_<random>`` through the CI server's ``test`` database and drop it
afterwards (``WITH (FORCE)``), so parallel CI runs and repeated runs never see each other's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import POSTGRES_URL


def admin_engine() -> sa.Engine:
    return sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})


def pg_url_for(database: str, user: str | None = None) -> str:
    url = sa.make_url(POSTGRES_URL).set(database=database)
    if user is not None:
        url = url.set(username=user, password=None)
    return url.render_as_string(hide_password=False)


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database's name, dropped after the test."""
    name = f"hwtune_test_{uuid.uuid4().hex[:12]}"
    engine = admin_engine()
    with engine.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        engine.dispose()


@pytest.fixture
def pg_url(pg_database: str) -> str:
    return pg_url_for(pg_database)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "store" / "hwtune.db")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test using this runs twice: on a SQLite file and on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "store" / "hwtune.db")
    return request.getfixturevalue("pg_url")

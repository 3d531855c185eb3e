"""Store URLs for tuner tests: a SQLite file, or a fresh PostgreSQL database (dropped afterwards)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.db.conftest import pg_database, pg_url  # noqa: F401 - fixtures re-exported for these tests


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        yield request.getfixturevalue("pg_url")

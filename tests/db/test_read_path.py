"""The engine read path: shared store, else local, else None, within 2 s, read-only, never raising."""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from hwtune.core.errors import StoreError
from hwtune.db.readonly import open_for_selection
from hwtune.db.store import Store
from tests.db.helpers import SPEC, attention

SECRET = "hunter2-Sup3rS3cret"
DOWN = f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:1/test"  # nothing listens on port 1


@pytest.fixture
def local(tmp_path: Path) -> str:
    path = str(tmp_path / "local.db")
    with Store.open(path) as store:
        store.write([attention(batch=b) for b in (1, 2, 4)])
    return path


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word: a hung server, as libpq sees it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_shared_store_down_falls_back_to_local_within_budget(local: str) -> None:
    start = time.monotonic()
    store, notes = open_for_selection(DOWN, budget_s=2.0, local_url=local)
    elapsed = time.monotonic() - start
    assert elapsed < 2.0
    assert store is not None and store.dialect == "sqlite"
    assert len(store.measurements(spec_key=SPEC.key())) == 3
    text = " ".join(notes)
    assert "shared store postgresql+psycopg://postgres:***@127.0.0.1:1/test unreachable" in text
    assert "refused" in text.lower() and f"using local store {local}" in text
    assert SECRET not in text
    store.close()


def test_hung_shared_store_is_abandoned_at_the_deadline(local: str, black_hole: int) -> None:
    url = f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:{black_hole}/test"
    start = time.monotonic()
    store, notes = open_for_selection(url, budget_s=2.0, local_url=local)
    elapsed = time.monotonic() - start
    assert elapsed < 2.0, f"took {elapsed:.2f} s"
    assert store is not None and store.dialect == "sqlite"
    assert "no answer within" in notes[0] and SECRET not in notes[0]
    store.close()


def test_nothing_reachable_means_static_priorities(tmp_path: Path) -> None:
    start = time.monotonic()
    store, notes = open_for_selection(DOWN, budget_s=2.0, local_url=str(tmp_path / "absent.db"))
    assert time.monotonic() - start < 2.0
    assert store is None
    assert "no local store at" in notes[0] and "using static priorities" in notes[0]
    assert not (tmp_path / "absent.db").exists()  # the read path never creates a store


def test_env_var_and_garbage_never_raise(local: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HWTUNE_DATABASE_URL", "mysql://root:pw@db/x")
    store, notes = open_for_selection(budget_s=2.0, local_url=local)
    assert store is not None and "using local store" in notes[0] and "pw@" not in notes[0]
    store.close()


def test_local_read_path_never_writes(local: str) -> None:
    Store.open(local).close()  # checkpoint, so that the file is quiescent
    before = _digest(local)
    store, _ = open_for_selection(None, budget_s=2.0, local_url=local)
    assert store is not None and store.read_only
    store.measurements()
    with pytest.raises(StoreError, match="read-only"):
        store.write([attention(batch=8)])
    with pytest.raises(sa.exc.OperationalError, match="readonly database"), store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM measurements")
    store.close()
    assert _digest(local) == before


def test_outdated_local_store_is_skipped_with_the_reason(tmp_path: Path) -> None:
    from hwtune.db import migrate
    from hwtune.db.engine import make_engine
    from hwtune.db.urls import resolve

    path = str(tmp_path / "old.db")
    engine = make_engine(resolve(path))
    migrate.upgrade(engine, "0001")
    engine.dispose()
    store, notes = open_for_selection(None, budget_s=2.0, local_url=path)
    assert store is None and "hwtune db upgrade" in notes[0]


@pytest.mark.postgres
def test_reachable_shared_store_is_used_read_only(pg_url: str, local: str) -> None:
    with Store.open(pg_url) as writer:
        writer.write([attention(batch=64)])
    store, notes = open_for_selection(pg_url, budget_s=2.0, local_url=local)
    assert store is not None and store.dialect == "postgresql"
    assert notes == [f"using shared store {store.masked_url}"]
    assert [r.workload["batch"] for r in store.measurements()] == [64]
    with pytest.raises(sa.exc.InternalError, match="read-only transaction"), store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM measurements")
    store.close()

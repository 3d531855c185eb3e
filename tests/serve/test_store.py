"""The service and its store: it answers while the store is away (flagged), sees new measurements without a
restart, and never writes."""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from hwtune.db.store import Store
from hwtune.serve.service import store_use
from tests.selector.test_measured import base, grid
from tests.serve.conftest import A2A_BODY, BODY, make_store, serving, static_ranking


def measured(client) -> dict:
    got = client.post("/v1/select/attention", json=BODY)
    assert got.status_code == 200, got.text
    return got.json()


@pytest.mark.parametrize("how", ["rename", "delete"])
def test_store_that_disappears_mid_run_gives_flagged_static_answers(tmp_path, how: str) -> None:
    path = make_store(tmp_path / "store.db")
    with serving(path) as client:
        before = measured(client)
        assert before["backend"] == "FLASHINFER" and not before["static_fallback"]
        if how == "rename":
            path.rename(tmp_path / "elsewhere.db")
        else:
            path.unlink()
        after = measured(client)  # the same request, which was cached: the store's change is seen
        assert after["static_fallback"] is True and after["store"]["used"] is None
        assert f"no store at {path}" in after["store"]["note"] and after["store"]["note"] in after["notes"]
        assert [r["backend"] for r in after["ranked"]] == static_ranking()
        assert all(r["source"] == "static" for r in after["ranked"])
        a2a = client.post("/v1/select/all2all", json=A2A_BODY)
        assert a2a.status_code == 200 and a2a.json()["static_fallback"] is True
        health = client.get("/v1/health").json()
        assert health["status"] == "degraded" and not health["store"]["available"]
        listing = client.get("/v1/environments")
        assert listing.status_code == 503 and "selection still answers" in listing.json()["error"]["message"]
        if how == "rename":
            (tmp_path / "elsewhere.db").rename(path)
            back = measured(client)
            assert not back["static_fallback"] and back["ranked"] == before["ranked"]
            assert client.get("/v1/environments").status_code == 200


def test_new_measurements_are_seen_without_a_restart(tmp_path) -> None:
    path = make_store(tmp_path / "store.db", [])  # nothing measured yet
    with serving(path) as client:
        before = measured(client)
        assert not before["static_fallback"] and all(r["source"] == "static" for r in before["ranked"])
        with Store.open(str(path)) as store:  # a tuning run writes while the service runs
            store.write(grid(base))
        after = measured(client)
        assert after["backend"] == "FLASHINFER" and after["ranked"][0]["source"] != "static"


def test_a_file_put_in_place_of_the_store_is_read(tmp_path) -> None:
    path = make_store(tmp_path / "store.db", [])
    other = make_store(tmp_path / "other.db")
    with serving(path) as client:
        assert measured(client)["ranked"][0]["source"] == "static"
        os.replace(other, path)  # how a store is swapped atomically
        assert measured(client)["ranked"][0]["source"] != "static"


def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_the_service_never_writes(tmp_path) -> None:
    source = make_store(tmp_path / "source.db")
    folder = tmp_path / "served"
    folder.mkdir()
    shutil.copy(source, folder / "store.db")  # a checkpointed file alone: no WAL, no lock file
    before = _digest(folder)
    with serving(folder / "store.db") as client:
        for body in (BODY, {**BODY, "explain": True}, {**BODY, "spec": {**BODY["spec"], "kv_layout": "HND"}}):
            assert client.post("/v1/select/attention", json=body).status_code == 200
        assert client.post("/v1/select/all2all", json=A2A_BODY).status_code == 200
        for path in ("/v1/environments", "/v1/runs", "/v1/runs/run-node-a", "/v1/health"):
            assert client.get(path).status_code == 200, path
        assert client.service._reader.read_only
    after = _digest(folder)
    assert after["store.db"] == before["store.db"]
    empty = hashlib.sha256(b"").hexdigest()  # a WAL reader may create an empty log and SQLite's shared-memory index
    assert set(after) <= {"store.db", "store.db-wal", "store.db-shm"} and after.get("store.db-wal", empty) == empty


@pytest.mark.parametrize(
    ("notes", "used"),
    [
        (["using configured store /s.db", "static priorities for SM 9.x"], "/s.db"),
        (["shared store pg://h/db unreachable (refused); using local store /l.db"], "/l.db"),
        (["using shared store pg://h/db", "measurement query failed (OperationalError); static priorities"], None),
        (["no store at /s.db: static priorities", "static priorities for SM 9.x"], None),
        (["shared store pg://h/db unreachable (refused); no measurements consulted: using static priorities"], None),
    ],
)
def test_which_store_an_answer_read_comes_from_the_library_notes(notes: list[str], used: str | None) -> None:
    assert store_use(notes)[0] == used

"""The multi-node work queue: each item to one worker at a time, leases, expiry, attempts, concurrency."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from typing import Any

import pytest

from hwtune.db.store import Store

CTX = mp.get_context("fork")


def test_enqueue_claim_heartbeat_complete(store_url: str) -> None:
    items = [(f"item-{i:02d}", {"batch": i}) for i in range(10)]
    with Store.open(store_url) as store:
        assert store.enqueue("plan-1", items) == 10
        assert store.enqueue("plan-1", items) == 0  # re-planning adds nothing twice
        assert store.enqueue("plan-2", items[:2]) == 2  # another plan is another queue
        first = store.claim("plan-1", "w1", 3, lease_s=60)
        assert first == items[:3]
        assert store.claim("plan-1", "w2", 3, lease_s=60) == items[3:6]
        held = store.heartbeat("plan-1", "w1", [k for k, _ in first], lease_s=60)
        assert held == ["item-00", "item-01", "item-02"]
        assert store.heartbeat("plan-1", "w2", ["item-00"], lease_s=60) == []  # not w2's
        assert store.complete("plan-1", "item-00", ok=True, worker="w1")
        assert not store.complete("plan-1", "item-01", ok=True, worker="w2")
        assert store.complete("plan-1", "item-01", ok=False)
        assert store.queue_state("plan-1") == {"pending": 4, "claimed": 4, "done": 1, "failed": 1}
        assert store.queue_state("plan-2") == {"pending": 2, "claimed": 0, "done": 0, "failed": 0}


def test_expired_lease_goes_to_another_worker_then_fails(store_url: str) -> None:
    with Store.open(store_url) as store:
        store.enqueue("p", [("a", {}), ("b", {})])
        assert [k for k, _ in store.claim("p", "dead", 1, lease_s=0.2)] == ["a"]
        assert [k for k, _ in store.claim("p", "w2", 1, lease_s=60)] == ["b"]  # a is still leased
        time.sleep(0.3)
        assert [k for k, _ in store.claim("p", "w2", 5, lease_s=0.2)] == ["a"]  # reclaimed (attempt 2)
        assert store.heartbeat("p", "dead", ["a"], lease_s=60) == []  # the old worker lost it
        assert not store.complete("p", "a", ok=True, worker="dead")
        time.sleep(0.3)
        assert [k for k, _ in store.claim("p", "w3", 5, lease_s=0.2)] == ["a"]  # attempt 3
        time.sleep(0.3)
        assert store.claim("p", "w4", 5, lease_s=60, max_attempts=3) == []  # a killed three workers
        assert store.queue_state("p") == {"pending": 0, "claimed": 1, "done": 0, "failed": 1}


def _worker(url: str, name: str, barrier: Any, results: Any) -> None:
    try:
        barrier.wait(timeout=60)
        got = []
        with Store.open(url, create=False) as store:
            while batch := store.claim("plan", name, 3, lease_s=120):
                for key, _ in batch:
                    store.complete("plan", key, ok=True, worker=name)
                    got.append(key)
        results.put((name, got))
    except BaseException:  # noqa: BLE001
        results.put((name, traceback.format_exc()))
        os._exit(1)
    os._exit(0)


def _concurrent_claims(url: str, workers: int = 4, items: int = 120) -> None:
    with Store.open(url) as store:
        store.enqueue("plan", [(f"k{i:03d}", {"i": i}) for i in range(items)])
    barrier, results = CTX.Barrier(workers), CTX.SimpleQueue()
    procs = [CTX.Process(target=_worker, args=(url, f"w{i}", barrier, results)) for i in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    got = dict(results.get() for _ in procs if not results.empty())
    assert [p.exitcode for p in procs] == [0] * workers, got
    errors = [v for v in got.values() if isinstance(v, str)]
    assert not errors, errors
    claimed = [k for keys in got.values() for k in keys]
    assert len(claimed) == items and len(set(claimed)) == items  # every item exactly once
    with Store.open(url, create=False) as store:
        assert store.queue_state("plan") == {"pending": 0, "claimed": 0, "done": items, "failed": 0}


def test_concurrent_claims_sqlite(sqlite_url: str) -> None:
    _concurrent_claims(sqlite_url)


@pytest.mark.postgres
def test_concurrent_claims_postgres(pg_url: str) -> None:
    _concurrent_claims(pg_url)

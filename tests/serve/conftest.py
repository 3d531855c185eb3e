"""Fixtures for the selection service: a SQLite store with measurements, and the real server over it (uvicorn
on a free port, in a thread), queried over HTTP with httpx."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="hwtune serve needs the serve extra: pip install 'hwtune[serve]'")
httpx = pytest.importorskip("httpx")

from hwtune.core.types import AttentionSpec, AttentionWorkload  # noqa: E402
from hwtune.db.store import Store  # noqa: E402
from hwtune.selector.api import clear_cache  # noqa: E402
from hwtune.serve.server import start_in_thread  # noqa: E402
from hwtune.serve.service import SelectionService  # noqa: E402
from tests.selector.test_measured import base, grid, rec  # noqa: E402

#: The measured spec of tests/selector/test_measured.py, as a request body.
SPEC = {"num_heads": 32, "num_kv_heads": 8, "head_size": 128}
BODY = {"spec": SPEC, "device": "h100", "assume_installed": True}
A2A_BODY = {
    "spec": {"ep_size": 8, "num_experts": 256, "topk": 8, "hidden_size": 7168},
    "device": "b200",
    "assume_installed": True,
}


def static_ranking() -> list[str]:
    """The attention backends the library ranks for BODY from static priorities alone (no store)."""
    import hwtune

    sel = hwtune.select_attention(AttentionSpec(**SPEC), device="h100", assume_installed=True, db=False)
    return [r.backend for r in sel.ranked]


def records() -> list:
    """The measured grid (78 ``ok`` records, FLASHINFER fastest) and one ``unsupported`` TORCH_SDPA record."""
    w = AttentionWorkload(AttentionSpec(**SPEC), "decode", 1, 512)
    return grid(base) + [rec(w, "TORCH_SDPA", "default", 0, status="unsupported", message="not on this GPU")]


def make_store(path: Path | str, stored: list | None = None) -> Path | str:
    """A store at ``path`` (a SQLite file, or a database URL) holding ``stored`` (default: ``records()``), all
    from one finished run."""
    with Store.open(str(path)) as store:
        store.write(records() if stored is None else stored)
        run_id = store.start_run(host="node-a", plan={"name": "grid"}, run_id="run-node-a")
        store.finish_run(run_id)
    return path


@contextlib.contextmanager
def serving(db: Path | str, token: str | None = None, **service_kw) -> Iterator[httpx.Client]:
    """The real server over ``db`` and an HTTP client bound to it (``client.service``: the service)."""
    service = SelectionService(str(db), **service_kw)
    running = start_in_thread(service, token)
    try:
        with httpx.Client(base_url=running.url, timeout=30) as client:
            client.service = service  # type: ignore[attr-defined]
            yield client
    finally:
        running.stop()
        clear_cache()  # the library's warm selections are process-wide: leave none behind for other tests


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("serve") / "store.db")


@pytest.fixture(scope="module")
def client(store_path: Path) -> Iterator[httpx.Client]:
    """A server shared by the tests of one module that only read."""
    with serving(store_path) as c:
        yield c

"""Shared fixtures and the GPU / PostgreSQL skips.

GPU tests are marked ``gpu`` and skip (visibly) without CUDA; store tests marked ``postgres`` skip when the
server at HWTUNE_TEST_POSTGRES_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/test) is down.
"""

from __future__ import annotations

import functools
import os

import pytest

POSTGRES_URL = os.environ.get("HWTUNE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@functools.lru_cache(maxsize=1)
def postgres_reason() -> str | None:
    """None when the test PostgreSQL server answers, else why not."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'hwtune[postgres]')"
    try:
        import sqlalchemy as sa

        engine = sa.create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
        engine.dispose()
    except Exception as exc:  # server down, auth refused, database missing
        return f"PostgreSQL at {POSTGRES_URL} is not reachable: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    need_gpu = any("gpu" in item.keywords or "multigpu" in item.keywords for item in items)
    has_gpu = cuda_available() if need_gpu else False
    for item in items:
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (none visible to torch)"))
        if "multigpu" in item.keywords:
            import torch

            if not has_gpu or torch.cuda.device_count() < 2:
                item.add_marker(pytest.mark.skip(reason="needs two or more CUDA GPUs"))
        if "postgres" in item.keywords:
            reason = postgres_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The developer's shell and stores must not leak into tests: no explicit-request variables, no
    HWTUNE_DATABASE_URL, and a fresh per-user data directory (so the default SQLite store is a new file)."""
    for var in ("HWTUNE_ATTENTION_BACKEND", "HWTUNE_ALL2ALL_BACKEND", "HWTUNE_DATABASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))

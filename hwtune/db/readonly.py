"""The engine's read path: a read-only store within a time budget, or None, and never an exception.

Engine start must not wait on a database. ``open_for_selection`` tries the configured (usually shared)
store, then the local SQLite file, then gives up so that the selector falls back to static priorities, all
within ``budget_s`` (2 s by default). Each attempt runs in a daemon thread with a deadline, because libpq
will not time out a connect in less than 2 s and a DNS lookup or a half-open TCP connection can hang far
longer; an attempt that misses its deadline is abandoned (and closes itself if it ever finishes). The
stores it returns are opened read-only (SQLite ``mode=ro``; PostgreSQL ``default_transaction_read_only``),
so this path cannot write, and with a statement timeout so later queries cannot hang the engine either.
The notes say what happened in words ``explain()`` can show, with passwords masked.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from hwtune.core.errors import StoreOutdatedError
from hwtune.db.errors import reason
from hwtune.db.urls import ENV_VAR, default_path, mask, resolve, sqlite_path

#: Time kept back from the shared attempt for the local fallback (opening a local SQLite file takes ms).
LOCAL_RESERVE_S = 0.3


class _Attempt:
    """Open one store in a daemon thread; the caller waits at most until its deadline."""

    def __init__(self, url: str, connect_timeout: float, statement_timeout_s: float) -> None:
        self.url = url
        self.store: Any = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._abandoned = False
        self._done = threading.Event()
        self._args = (connect_timeout, statement_timeout_s)
        threading.Thread(target=self._run, name="hwtune-store-open", daemon=True).start()

    def _run(self) -> None:
        from hwtune.db.store import Store

        connect_timeout, statement_timeout_s = self._args
        try:
            store = Store.open(
                self.url,
                read_only=True,
                create=False,
                connect_timeout=connect_timeout,
                statement_timeout_s=statement_timeout_s,
                busy_timeout_s=0.5,
            )
            store.counts()  # prove the tables answer, not just the revision row
        except BaseException as exc:  # noqa: BLE001 - reported as a note, never raised into the engine
            with self._lock:
                self.error = exc
            self._done.set()
            return
        with self._lock:
            if self._abandoned:
                store.close()
            else:
                self.store = store
        self._done.set()

    def wait(self, timeout: float) -> bool:
        finished = self._done.wait(max(0.0, timeout))
        with self._lock:
            if not finished:
                self._abandoned = True
            return self.store is not None


def _why(attempt: _Attempt, waited: float) -> str:
    if attempt.error is None:
        return f"no answer within {waited:.1f} s"
    return getattr(attempt.error, "reason", None) or reason(attempt.error, _safe_resolve(attempt.url))


def _safe_resolve(url: str) -> Any:
    try:
        return resolve(url)
    except Exception:  # noqa: BLE001
        return None


def _describe(url: str) -> str:
    resolved = _safe_resolve(url)
    if resolved is None:
        return mask(url)
    path = sqlite_path(resolved)
    return str(path) if path is not None else mask(resolved)


def open_for_selection(
    url: str | None = None, budget_s: float = 2.0, *, local_url: str | None = None
) -> tuple[Any, list[str]]:
    """(read-only ``Store`` or None, notes). Tries ``url`` (else ``HWTUNE_DATABASE_URL``), then the local
    SQLite store (``local_url``, else the per-user file), within ``budget_s`` in total. Never raises."""
    import os

    start = time.monotonic()
    notes: list[str] = []
    try:
        configured = (url or "").strip() or os.environ.get(ENV_VAR, "").strip() or None
        local = local_url or str(default_path())
        candidates: list[tuple[str, str]] = []
        if configured:
            candidates.append(
                ("shared" if "://" in configured and not configured.startswith("sqlite") else "configured", configured)
            )
        if not configured or _describe(configured) != _describe(local):
            candidates.append(("local", local))
        failures: list[str] = []
        for i, (role, candidate) in enumerate(candidates):
            remaining = budget_s - (time.monotonic() - start)
            last = i == len(candidates) - 1
            allowance = remaining if last else max(0.1, remaining - LOCAL_RESERVE_S)
            if allowance <= 0:
                failures.append(f"{role} store {_describe(candidate)} not tried (time budget spent)")
                continue
            where = _describe(candidate)
            resolved = _safe_resolve(candidate)
            if role == "local" and resolved is not None:
                path = sqlite_path(resolved)
                if path is not None and not path.exists():
                    failures.append(f"no local store at {where}")
                    continue
            attempt = _Attempt(candidate, connect_timeout=allowance, statement_timeout_s=max(budget_s, 1.0))
            t0 = time.monotonic()
            if attempt.wait(allowance):
                used = f"using {role} store {where}"
                notes.append(f"{'; '.join(failures)}; {used}" if failures else used)
                return attempt.store, notes
            state = "not usable" if isinstance(attempt.error, StoreOutdatedError) else "unreachable"
            failures.append(f"{role} store {where} {state} ({_why(attempt, time.monotonic() - t0)})")
        failures.append("no measurements consulted: using static priorities")
        notes.append("; ".join(failures))
        return None, notes
    except Exception as exc:  # noqa: BLE001 - engine start must never fail here
        notes.append(f"measurement store not consulted ({type(exc).__name__}: {reason(exc)}); using static priorities")
        return None, notes

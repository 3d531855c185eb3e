"""The selection service's logic, without the web framework: the store it reads, its answer cache, and the
calls into the library.

* **Read-only.** Selection reads the store through the engine's read path (``hwtune.db.sqlite_direct``:
  SQLite ``mode=ro``; ``hwtune.db.readonly`` for PostgreSQL, read-only transactions), and the listings
  through a ``Store`` opened ``read_only=True, create=False``. Nothing here can write.
* **Cached, and fresh.** Answers are kept per request (an LRU of ``cache_size``) and per store state
  (``StoreWatch.token``): the SQLite file's and its WAL's identity, size and modification time, checked with
  two ``stat`` calls per request, or for a database server a clock that ticks every ``refresh_s``. When the
  token changes (a tuning run wrote, the file was replaced or deleted) every answer, the library's warm
  selections included, is computed again.
* **Never down with the store.** When the store cannot be read, the library answers from static priorities;
  the answer says so (``static_fallback: true`` and ``store.note``) and is computed again after ``retry_s``.
* **One computation at a time.** A cache miss runs the library in a worker thread under one lock (a store on a
  server may take up to the read path's 2 s budget); hits never wait for it.
* The library's torch.distributed agreement is off (``distributed=False``): a server is no engine rank.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from hwtune._version import __version__
from hwtune.core.errors import (
    BackendNotValidError,
    HwtuneError,
    InvalidSpecError,
    NoValidBackendError,
    StoreError,
    UnknownBackendError,
)
from hwtune.db.urls import mask, resolve, sqlite_path
from hwtune.selector.api import clear_cache, resolve_device, select_all2all, select_attention
from hwtune.selector.selection import Selection
from hwtune.serve.requests import BadRequest, SelectRequest

#: How the library's read path says it used a store ("...; using local store PATH" after a fallback).
_USING = re.compile(r"(?:^|; )using (configured|shared|local) store (.+)$")


@dataclass(frozen=True)
class Answer:
    """One response: HTTP status and JSON body; ``expires`` (monotonic seconds) makes it be computed again."""

    status: int
    body: bytes
    expires: float | None = None
    data: Any = None


def to_json(payload: Any) -> bytes:
    """``payload`` as compact JSON bytes (times as ISO 8601 strings)."""

    def default(value: Any) -> Any:
        return value.isoformat() if isinstance(value, (_dt.datetime, _dt.date)) else str(value)

    return json.dumps(payload, default=default, separators=(",", ":")).encode()


def error_payload(exc: Exception, field: str | None = None) -> dict[str, Any]:
    """The JSON error object: type, message, the field at fault, and the library error's own details (as
    ``hwtune select --json`` prints them)."""
    body: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    field = field or getattr(exc, "field", None)
    if field:
        body["field"] = field
    if isinstance(exc, HwtuneError):
        body["exit_code"] = exc.exit_code  # what `hwtune select` would exit with
    if isinstance(exc, BackendNotValidError):
        body.update(backend=exc.backend, reasons=exc.reasons, valid=exc.valid)
    if isinstance(exc, NoValidBackendError):
        body["rejected"] = exc.rejected
    return {"error": body}


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class StoreWatch:
    """The store the service reads (``db``, else HWTUNE_DATABASE_URL, else the per-user SQLite file), and a
    cheap token that changes whenever its content may have."""

    def __init__(self, db: str | None = None, refresh_s: float = 10.0) -> None:
        resolved = resolve(db)  # StoreError (exit 1) for an address that is no database URL
        self.path = sqlite_path(resolved)
        self.masked = str(self.path) if self.path is not None else mask(resolved)
        #: What the library's read path is given (a SQLite file by path: its standard-library reader).
        self.url = str(self.path) if self.path is not None else resolved.render_as_string(hide_password=False)
        self.refresh_s = refresh_s

    def token(self) -> Hashable:
        """Equal tokens: the store has not changed (SQLite: file and WAL unchanged; a server: same period)."""
        if self.path is None:
            return "every", int(time.monotonic() // self.refresh_s)
        return _stat(self.path), _stat(self.path.with_name(self.path.name + "-wal"))

    def check(self) -> tuple[bool, str]:
        """Whether the store answers now, and the read path's words for it (at most about 2 s)."""
        if self.path is not None:
            from hwtune.db.sqlite_direct import read_spec

            got = read_spec(self.path, "")  # the selection's own query, for a key no spec has
            return (False, got) if isinstance(got, str) else (True, f"using configured store {self.path}")
        from hwtune.db.readonly import open_for_selection

        store, notes = open_for_selection(self.url, 2.0, local_url=self.url)  # this store alone, no local fallback
        if store is not None:
            store.close()
        return store is not None, "; ".join(notes)


def store_use(notes: Sequence[str]) -> tuple[str | None, str | None]:
    """(the store a selection read, or None when it fell back to static priorities; the note saying so)."""
    for note in notes:
        if note.endswith("static priorities"):  # "no store at X: static priorities", "... ; static priorities"
            return None, note
    for note in notes:
        found = _USING.search(note)
        if found:
            return found.group(2), note
    return None, next((n for n in notes if "store" in n), None)


def option_at_fault(message: str, options: dict[str, Any]) -> str:
    """The option a library error is about: the one whose (string) value it quotes ("no snapshot of vLLM 0.1"),
    else the one it names ("unknown engine"), else "spec"."""
    for name, value in options.items():
        if isinstance(value, str) and value and re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.])", message):
            return name
    named = [n for n in options if re.search(rf"\b{n.replace('_', '[ _-]')}\b", message)]
    return max(named, key=len) if named else "spec"


def fell_back(used: str | None, note: str | None) -> bool:
    """Whether the configured store did not answer: static priorities, or the local store after the configured one
    failed ("shared store ... unreachable ...; using local store PATH")."""
    found = _USING.search(note or "")
    return used is None or (found is not None and found.group(1) == "local" and found.start() > 0)


def selection_payload(selection: Selection, configured: str, explain: bool) -> dict[str, Any]:
    """``Selection.to_dict()`` plus what the service adds: ``static_fallback``, ``store`` (with ``fallback``: the
    configured store did not answer), ``launch`` (the engine's flags and environment, for an engine target) and,
    when asked, ``explain``."""
    body = selection.to_dict()
    used, note = store_use(selection.notes)
    body["static_fallback"] = used is None
    body["store"] = {"configured": configured, "used": used, "note": note, "fallback": fell_back(used, note)}
    body["launch"] = None
    if selection.engine is not None:
        try:
            body["launch"] = selection.launch().to_dict()
        except InvalidSpecError as exc:  # nothing the engine can be told: the selection still stands
            body["launch"] = {"error": str(exc)}
    if explain:
        body["explain"] = selection.explain()
    return body


class SelectionService:
    """Answers for the HTTP layer (``hwtune.serve.app``): select, environments, runs, health; cached per
    request and store state. Thread-safe: hits are served from any thread, misses one at a time."""

    def __init__(
        self, db: str | None = None, *, cache_size: int = 2048, refresh_s: float = 10.0, retry_s: float = 5.0
    ) -> None:
        self.watch = StoreWatch(db, refresh_s)
        self.cache_size = cache_size
        self.retry_s = retry_s
        self.hits = 0
        self.misses = 0
        self.started = time.monotonic()
        self._cache: OrderedDict[Hashable, Answer] = OrderedDict()
        self._lock = threading.Lock()  # the cache, the counters and the token
        self._compute = threading.Lock()  # one miss at a time: the library and the reader store
        self._token: Hashable = object()
        self._reader: Any = None
        self._reader_token: Hashable = None

    # --- the cache ----------------------------------------------------------------------------------------

    def cached(self, key: Hashable) -> Answer | None:
        """The cached answer for ``key`` if the store has not changed since it was computed (no I/O but two
        ``stat`` calls: safe on the event loop)."""
        token = self.watch.token()
        with self._lock:
            if token != self._token:  # the store changed: nothing computed before counts
                self._cache.clear()
                clear_cache()
                self._token = token
            answer = self._cache.get(key)
            if answer is None or (answer.expires is not None and answer.expires <= time.monotonic()):
                return None
            self._cache.move_to_end(key)
            self.hits += 1
            return answer

    def answer(self, key: Hashable, compute: Callable[[], Answer]) -> Answer:
        """The cached answer for ``key``, else ``compute()``'s, cached (blocking: call from a worker thread)."""
        with self._compute:
            found = self.cached(key)
            if found is not None:
                return found
            token = self._token
            answer = compute()
            with self._lock:
                self.misses += 1
                if self._token != token:  # the store changed while computing: keep neither this nor the library's
                    clear_cache()
                    return answer
                self._cache[key] = answer
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
            return answer

    def _retry_at(self) -> float:
        return time.monotonic() + self.retry_s

    # --- selection ----------------------------------------------------------------------------------------

    def cached_select(self, request: SelectRequest) -> Answer | None:
        """The cached answer to ``request``, if any (safe on the event loop; see ``cached``)."""
        return self.cached(("select", request))

    def select(self, request: SelectRequest) -> Answer:
        """The selection for ``request`` as the library answers it: 200 with the selection, 400 for input the
        library refuses (naming the field), 422 when no backend (or not the requested one) can serve it."""
        return self.answer(("select", request), lambda: self._select(request))

    def _select(self, request: SelectRequest) -> Answer:
        kwargs = request.kwargs
        try:
            device = resolve_device(kwargs.pop("device", "auto"))
        except InvalidSpecError as exc:
            return Answer(400, to_json(error_payload(BadRequest(f"device: {exc}", "device"))))
        call = select_attention if request.kind == "attention" else select_all2all
        try:  # distributed=False: a server is no rank of an engine's process group
            selection = call(request.spec, device, db=self.watch.url, distributed=False, **kwargs)  # type: ignore[arg-type]
        except BackendNotValidError as exc:
            return Answer(422, to_json(error_payload(exc, "backend")))
        except NoValidBackendError as exc:
            return Answer(422, to_json(error_payload(exc, "spec")))
        except UnknownBackendError as exc:
            return Answer(400, to_json(error_payload(BadRequest(f"backend: {exc}", "backend"))))
        except InvalidSpecError as exc:  # an option the library refuses (an engine version it has no snapshot of)
            field = option_at_fault(str(exc), kwargs)
            return Answer(400, to_json(error_payload(BadRequest(f"{field}: {exc}", field))))
        payload = selection_payload(selection, self.watch.masked, request.explain)
        return Answer(200, to_json(payload), self._retry_at() if payload["store"]["fallback"] else None)

    # --- the store's contents -----------------------------------------------------------------------------

    def _store(self) -> Any:
        """A read-only ``Store`` (reopened when a SQLite file changed identity or vanished); under ``_compute``."""
        from hwtune.db.store import Store

        token = self.watch.token()
        if self._reader is not None and (self.watch.path is None or token == self._reader_token):
            return self._reader
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._reader = Store.open(
            self.watch.url,
            read_only=True,
            create=False,
            connect_timeout=2.0,
            statement_timeout_s=5.0,
            busy_timeout_s=1.0,
        )
        self._reader_token = token
        return self._reader

    def _listing(self, read: Callable[[Any], Any], missing: str | None = None) -> Answer:
        """``read(store)`` as a 200 answer; 404 with ``missing`` when it found nothing; 503 when the store
        cannot be read (selection still answers, from static priorities)."""
        try:
            found = read(self._store())
        except StoreError as exc:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            error = error_payload(exc)
            error["error"]["message"] += "; selection still answers, from static priorities (static_fallback: true)"
            return Answer(503, to_json(error), self._retry_at())
        if found is None and missing is not None:
            return Answer(404, to_json(error_payload(BadRequest(missing, "path", 404))))
        return Answer(200, to_json(found))

    def environments(self, environment_hash: str | None = None) -> Answer:
        """Every environment in the store with its measurement count, or the one with ``environment_hash``."""
        if environment_hash is None:
            return self.answer(("environments",), lambda: self._listing(lambda s: {"environments": s.environments()}))
        missing = (
            f"no environment {environment_hash!r} in the store {self.watch.masked}; GET /v1/environments lists them"
        )
        return self.answer(
            ("environment", environment_hash),
            lambda: self._listing(lambda s: next(iter(s.environments(environment_hash)), None), missing),
        )

    def runs(self, limit: int = 50, state: str | None = None) -> Answer:
        """The newest ``limit`` tuning runs (of ``state``), each with its measurements per status."""
        return self.answer(("runs", limit, state), lambda: self._listing(lambda s: {"runs": s.runs(limit, state)}))

    def run(self, run_id: str) -> Answer:
        """One tuning run with its plan and its measurements per status."""
        missing = f"no run {run_id!r} in the store {self.watch.masked}; GET /v1/runs lists the newest"
        return self.answer(("run", run_id), lambda: self._listing(lambda s: s.run_summary(run_id), missing))

    # --- health -------------------------------------------------------------------------------------------

    def health(self) -> Answer:
        """Always 200 while the service runs: ``status`` "ok", or "degraded" when the store cannot be read
        (answers then come from static priorities); the store check is repeated at most every ``retry_s``."""

        def check() -> Answer:
            ok, note = self.watch.check()
            return Answer(200, b"", self._retry_at(), {"configured": self.watch.masked, "available": ok, "note": note})

        store = self.answer(("health",), check).data
        with self._lock:
            cache = {"entries": len(self._cache), "hits": self.hits, "misses": self.misses}
        payload = {
            "status": "ok" if store["available"] else "degraded",
            "version": __version__,
            "store": store,
            "cache": cache,
            "uptime_s": round(time.monotonic() - self.started, 3),
        }
        return Answer(200, to_json(payload))

    def close(self) -> None:
        """Release the reader store's connections."""
        with self._compute:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

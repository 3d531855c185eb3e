"""The engine's fast read of a local SQLite store: one indexed query through the standard library.

Engine start has a budget of about 150 ms for ``import hwtune`` plus one selection; importing SQLAlchemy
and Alembic alone costs more than that. For a SQLite store this module opens the file read-only
(``mode=ro``), checks the schema revision against the one this hwtune's models describe, and reads the
rows the selector ranks from, with the same SQL the ORM would emit over the same indexes. Anything
unexpected (a missing file, another revision, a locked or corrupt database) returns None with the reason,
and the caller falls back to the full path (which explains itself) or to static priorities.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import unquote

#: The schema revision this module's query is written for; tests check it equals Alembic's head.
SCHEMA_REVISION = "0003"

_QUERY = """
SELECT w.kind, w.phase, w.batch, w.context_len, w.query_len, w.tokens_per_rank, w.normalized,
       m.backend, m.tactic, m.status, m.median_us, m.message, m.host, m.created_at, e.hash
FROM measurements AS m
JOIN workloads AS w ON m.workload_id = w.id
JOIN environments AS e ON m.environment_id = e.id
WHERE w.spec_key = ?
ORDER BY m.id
"""


def database_path(database: str | None) -> Path | None:
    """The file a SQLite URL's database part names (already %-decoded), as an absolute path; None for an in-memory
    database. The one resolution of a SQLite store's file: the full path (``hwtune.db.urls.sqlite_path``) uses it
    too, so the engine's light read and SQLAlchemy always open the same file."""
    if database in (None, "", ":memory:") or str(database).startswith("file:"):
        return None
    return Path(str(database)).expanduser().resolve()


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL (or bare path) names, resolved as SQLAlchemy resolves it (the part after
    ``sqlite:///`` up to ``?``, %-decoded, relative to the working folder unless absolute); None for other databases
    and in-memory SQLite."""
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        return database_path(text)  # a bare path names a SQLite file
    if scheme.split("+", 1)[0].lower() != "sqlite":
        return None
    if not rest.startswith("/"):
        return None  # sqlite:// with a host part or nothing: not a file SQLAlchemy would open
    return database_path(unquote(rest[1:].split("?", 1)[0]))


def read_spec(path: Path, spec_key: str, timeout_s: float = 1.0) -> tuple[list[tuple], dict[str, Any]] | str:
    """(rows, environment fingerprints by hash) of one spec, or a sentence saying why not."""
    if not path.exists():
        return f"no store at {path}"
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout_s)
    except sqlite3.Error as exc:
        return f"cannot open {path} read-only ({exc})"
    try:
        rev = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        if not rev or rev[0] != SCHEMA_REVISION:
            return f"store {path} is at schema revision {rev[0] if rev else 'none'}, not {SCHEMA_REVISION}"
        rows = conn.execute(_QUERY, (spec_key,)).fetchall()
        hashes = {r[-1] for r in rows}
        fps: dict[str, Any] = {}
        for h in hashes:
            fp = conn.execute("SELECT fingerprint FROM environments WHERE hash = ?", (h,)).fetchone()
            fps[h] = json.loads(fp[0]) if fp else {}
        return rows, fps
    except (sqlite3.Error, ValueError) as exc:
        return f"cannot read {path} ({type(exc).__name__}: {exc})"
    finally:
        conn.close()


def read_for_selection(
    db: str | None, spec_key: str, kind: str, budget_s: float = 2.0
) -> tuple[list[tuple] | None, dict[str, Any], list[str]]:
    """Rows of one spec for the selector: (rows or None, fingerprints, notes). Never raises.

    ``db`` None means HWTUNE_DATABASE_URL, else the per-user SQLite file. SQLite stores are read here
    through the standard library; other databases (PostgreSQL) go through ``hwtune.db.readonly``, which
    bounds connection time and falls back to the local store.
    """
    import os

    configured = (db or "").strip() or os.environ.get("HWTUNE_DATABASE_URL", "").strip()
    try:
        if configured and sqlite_file(configured) is None:  # a server: the full, time-bounded path
            return _full_path(configured, spec_key, kind, budget_s)
        if configured:
            path = sqlite_file(configured)
            role = "configured"
        else:
            import platformdirs

            path = Path(platformdirs.user_data_dir("hwtune", appauthor=False)) / "hwtune.db"
            role = "local"
        assert path is not None
        got = read_spec(path, spec_key)
        if isinstance(got, str):
            if "schema revision" in got and path.exists():  # let the full path explain or upgrade-hint
                return _full_path(str(path), spec_key, kind, budget_s)
            return None, {}, [f"{got}: static priorities"]
        rows, fps = got
        return [r for r in rows if r[0] == kind], fps, [f"using {role} store {path}"]
    except Exception as exc:  # engine start must never fail here
        return None, {}, [f"measurement store not consulted ({type(exc).__name__}); static priorities"]


def _full_path(
    url: str, spec_key: str, kind: str, budget_s: float
) -> tuple[list[tuple] | None, dict[str, Any], list[str]]:
    from hwtune.db.readonly import open_for_selection

    store, notes = open_for_selection(url, budget_s)
    if store is None:
        return None, {}, notes
    try:
        records = store.measurements(kind, spec_key=spec_key)
    except Exception as exc:
        return None, {}, notes + [f"measurement query failed ({type(exc).__name__}); static priorities"]
    finally:
        store.close()
    rows = [
        (
            r.kind,
            r.workload.get("phase"),
            r.workload.get("batch"),
            r.workload.get("context_len"),
            r.workload.get("query_len"),
            r.workload.get("tokens_per_rank"),
            dict(r.workload),
            r.backend,
            r.tactic,
            r.status,
            r.stats.median_us if r.stats else None,
            r.message,
            r.host,
            r.created_at.isoformat(),
            r.environment_hash,
        )
        for r in records
    ]
    fps = {r.environment_hash: dict(r.environment) for r in records}
    return rows, fps, notes

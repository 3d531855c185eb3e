"""``hwtune db ...``: create, inspect, export, import and synchronise the result store.

Thin by design: every command opens a ``hwtune.db.Store`` and calls one library function. ``hwtune.db`` is
imported inside the commands so that ``hwtune --help`` does not pay for SQLAlchemy and Alembic.
"""

from __future__ import annotations

import os
import sys
import tempfile
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from hwtune.cli.common import JsonOpt, Kind, console, emit_json, guarded
from hwtune.core.errors import StoreDataError, StoreUnavailableError

if TYPE_CHECKING:
    from hwtune.db.store import Store

app = typer.Typer(
    help="The result store: create or upgrade it, show it, export/import, push/pull.", no_args_is_help=True
)

DbOpt = typer.Option(
    None,
    "--db",
    envvar="HWTUNE_DATABASE_URL",
    help="Store URL or SQLite path; default: the per-user SQLite file.",
    show_default=False,
)


class OnError(str, Enum):
    """What ``hwtune db import`` does with a bad line: abort (write nothing) or skip it."""

    skip = "skip"
    abort = "abort"


@app.command("upgrade")
@guarded
def upgrade(db: Optional[str] = DbOpt, json_out: bool = JsonOpt) -> None:
    """Create the store, or migrate it to this hwtune's schema (safe to run from many processes at once)."""
    from hwtune.db.store import Store

    with Store.open(db, check_revision=False) as store:
        before, after = store.upgrade()
        result = {"url": store.masked_url, "before": before, "after": after, "changed": before != after}
    if json_out:
        emit_json(result)
    elif before == after:
        console.print(f"{result['url']}: already at revision {after}", markup=False)
    else:
        console.print(f"{result['url']}: revision {before or '(empty)'} -> {after}", markup=False)


def _open_existing(db: Optional[str], *, check_revision: bool) -> "Store":
    """A read-only store that must already exist: status and export never create one."""
    from hwtune.db.store import Store
    from hwtune.db.urls import resolve, sqlite_path

    path = sqlite_path(resolve(db))
    if path is not None and not path.exists():
        raise StoreUnavailableError(
            f"no store at {path} yet; create it with `hwtune db upgrade` (or run `hwtune tune`)"
        )
    return Store.open(db, read_only=True, create=False, check_revision=check_revision)


@app.command("status")
@guarded
def status(db: Optional[str] = DbOpt, json_out: bool = JsonOpt) -> None:
    """Where the store is (password masked), its schema revision, and rows per table."""
    with _open_existing(db, check_revision=False) as store:
        info = store.status()
    if json_out:
        emit_json(info)
        return
    console.print(f"store     {info['url']}", markup=False)
    console.print(f"revision  {info['revision'] or '(empty)'} (this hwtune: {info['head']})", markup=False)
    if info["journal_mode"]:
        console.print(f"journal   {info['journal_mode']}", markup=False)
    for table, count in info["counts"].items():
        console.print(f"{table:<14}{count:>10}", markup=False)
    if info["message"]:
        console.print(f"[yellow]{escape(info['message'])}[/]")


@app.command("export")
@guarded
def export(
    file: str = typer.Argument(..., help="Output .jsonl file, or - for stdout."),
    db: Optional[str] = DbOpt,
    kind: Optional[Kind] = typer.Option(None, "--kind", help="Only attention or all2all."),  # type: ignore[valid-type]
    json_out: bool = JsonOpt,
) -> None:
    """Write every measurement to a versioned JSON Lines file (header line, then one measurement per line)."""
    from hwtune.db.transfer import export_jsonl

    wanted = kind.value if kind is not None else None
    with _open_existing(db, check_revision=True) as store:
        if file == "-":
            count = export_jsonl(store, sys.stdout, kind=wanted)
        else:
            count = _export_atomically(store, Path(file), wanted)
    if json_out and file != "-":
        emit_json({"file": file, "count": count})
    else:
        console.print(f"exported {count} measurements from {store.masked_url} to {file}", markup=False)


def _export_atomically(store: "Store", target: Path, kind: Optional[str]) -> int:
    """Export into a temporary file beside ``target`` and move it into place: a reader never sees half a file, and
    a failed export leaves neither a partial file nor an earlier one changed."""
    from hwtune.db.transfer import export_jsonl

    folder = target.parent
    if not folder.is_dir():
        raise StoreDataError(f"cannot export to {target}: the folder {folder} does not exist (create it first)")
    if target.is_dir():
        raise StoreDataError(f"cannot export to {target}: it is a folder; name a file, e.g. {target / 'hwtune.jsonl'}")
    fd, name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            count = export_jsonl(store, out, kind=kind)
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return count


@app.command("import")
@guarded
def import_(
    file: str = typer.Argument(..., help="A file written by `hwtune db export`, or - for stdin."),
    db: Optional[str] = DbOpt,
    on_error: OnError = typer.Option(
        OnError.abort, "--on-error", help="abort: write nothing if any line is bad; skip: leave bad lines out."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Check and import measurements; bad lines are reported with their numbers."""
    from hwtune.db.store import Store
    from hwtune.db.transfer import import_jsonl

    with Store.open(db) as store:
        if file == "-":
            report = import_jsonl(store, sys.stdin, on_error=on_error.value, name="stdin")
        else:
            path = Path(file)
            if not path.is_file():
                raise StoreDataError(f"no file {file} to import")
            with path.open(encoding="utf-8") as source:
                report = import_jsonl(store, source, on_error=on_error.value, name=file)
        where = store.masked_url
    if json_out:
        emit_json(report.to_dict())
        return
    for number, why in report.errors:
        console.print(f"skipped {'line ' + str(number) if number else file}: {why}", markup=False)
    console.print(
        f"imported {report.valid} valid of {report.read} measurements into {where}: {report.written} new or changed",
        markup=False,
    )


def _copy(source_url: Optional[str], target_url: Optional[str], verb: str, json_out: bool) -> None:
    from hwtune.db.store import Store
    from hwtune.db.transfer import copy_measurements

    with Store.open(source_url, read_only=True, create=False) as source, Store.open(target_url) as target:
        report = copy_measurements(source, target)
        info = {"from": source.masked_url, "to": target.masked_url, **report.to_dict()}
    if json_out:
        emit_json(info)
    else:
        console.print(
            f"{verb}: read {report.read} measurements from {info['from']}, "
            f"{report.copied} new or changed in {info['to']}",
            markup=False,
        )


@app.command("push")
@guarded
def push(
    to: str = typer.Option(..., "--to", help="The store to copy into (usually the shared PostgreSQL)."),
    db: Optional[str] = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Copy this store's measurements into another store; running it again copies nothing."""
    _copy(db, to, "push", json_out)


@app.command("pull")
@guarded
def pull(
    source: str = typer.Option(..., "--from", help="The store to copy from (usually the shared one)."),
    db: Optional[str] = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Copy another store's measurements into this one; running it again copies nothing."""
    _copy(source, db, "pull", json_out)


@app.command("roles")
@guarded
def roles(
    db: Optional[str] = DbOpt,
    writer: str = typer.Option("hwtune_writer", "--writer", help="Role for tuning nodes."),
    reader: str = typer.Option("hwtune_reader", "--reader", help="Read-only role for engines."),
    apply: bool = typer.Option(
        False, "--apply", help="Run the SQL on --db (as the schema owner) instead of printing it."
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Print (or apply) the PostgreSQL writer/reader role setup shipped as hwtune/db/sql/roles.sql."""
    from hwtune.db import roles as role_sql
    from hwtune.db.store import Store
    from hwtune.db.urls import resolve

    if not apply:
        url = resolve(db)
        dbname = url.database if url.get_backend_name() == "postgresql" and url.database else "hwtune"
        sql = role_sql.render(writer, reader, dbname)
        if json_out:
            emit_json({"sql": sql, "statements": role_sql.statements(sql)})
        else:
            print(sql)
        return
    with Store.open(db) as store:
        done = role_sql.apply(store, writer, reader)
        where = store.masked_url
    if json_out:
        emit_json({"url": where, "applied": done})
    else:
        console.print(
            f"applied {len(done)} statements on {where}; set passwords with psql's "
            f"\\password {writer} and \\password {reader}",
            markup=False,
        )

"""``hwtune show`` and ``hwtune report``: look at stored results."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from hwtune.cli.common import JsonOpt, Kind, console, emit_json, guarded, winners_table
from hwtune.core.errors import InvalidSpecError
from hwtune.core.records import STATUSES
from hwtune.core.types import PHASES

#: What ``--phase`` takes: the attention phases.
Phase = Enum("Phase", {p: p for p in PHASES}, type=str)  # type: ignore[misc]
#: What ``--status`` takes: the record statuses.
Status = Enum("Status", {s: s for s in STATUSES}, type=str)  # type: ignore[misc]
KindOpt = typer.Option(None, "--kind", help="Only attention or all2all.")
DbOpt = typer.Option(
    None, "--db", envvar="HWTUNE_DATABASE_URL", help="Store URL (default: a SQLite file in the user data directory)."
)


def _value(choice: Enum | None) -> str | None:
    return None if choice is None else str(choice.value)


def _records(
    db: Optional[str],
    kind: Optional[str],
    backend: Optional[str],
    status: Optional[str],
    this_env: bool,
    run: Optional[str],
) -> list:
    from hwtune.db.store import Store

    if status is not None and status not in STATUSES:
        raise InvalidSpecError(f"unknown --status {status!r}; known: {', '.join(STATUSES)}")
    if kind not in (None, "attention", "all2all"):
        raise InvalidSpecError(f"unknown --kind {kind!r}; known: attention, all2all")
    env_hash = None
    if this_env:
        from hwtune.core.detect import detect
        from hwtune.core.environment import current_environment

        env_hash = current_environment(detect()).hash()
    with Store.open(db, read_only=True, create=False) as store:
        return store.measurements(
            kind, backend=backend, statuses=[status] if status else None, environment_hash=env_hash, run_id=run
        )


@guarded
def show(
    kind: Optional[Kind] = KindOpt,  # type: ignore[valid-type]
    backend: Optional[str] = typer.Option(None, "--backend"),
    status: Optional[Status] = typer.Option(None, "--status", help="Only records of this status."),  # type: ignore[valid-type]
    phase: Optional[Phase] = typer.Option(None, "--phase", help="Only attention workloads of this phase."),  # type: ignore[valid-type]
    this_env: bool = typer.Option(False, "--this-env", help="Only measurements from this machine's environment."),
    run: Optional[str] = typer.Option(None, "--run", help="Only one tuning run's measurements."),
    winners_only: bool = typer.Option(False, "--winners", help="One row per workload: its fastest candidate."),
    limit: int = typer.Option(200, "--limit", min=1, help="At most this many rows (newest last)."),
    db: Optional[str] = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Stored measurements as a table (or JSON), filterable."""
    from hwtune.tuner.report import winners, workload_label

    recs = _records(db, _value(kind), backend, _value(status), this_env, run)
    if phase is not None:
        recs = [r for r in recs if r.workload.get("phase") == phase.value]
    if winners_only:
        rows = [w.to_dict() for w in winners(recs)]
        if json_out:
            emit_json(rows)
            return
        console.print(winners_table(rows, title="winners"))
        return
    recs = recs[-limit:]
    if json_out:
        emit_json([r.to_dict() for r in recs])
        return
    table = Table(title=f"{len(recs)} measurements")
    for col in ("when", "workload", "backend", "tactic", "status", "median us", "p10-p90", "host", "message"):
        table.add_column(col, overflow="fold")
    for r in recs:
        s = r.stats
        table.add_row(
            f"{r.created_at:%Y-%m-%d %H:%M}",
            Text(workload_label(r)[1]),  # "[h32/8/128, ...]" is data, not rich markup
            r.backend,
            r.tactic,
            r.status,
            f"{s.median_us:.2f}" if s else "",
            f"{s.p10_us:.1f}-{s.p90_us:.1f}" if s else "",
            r.host,
            (r.message or "")[:120],
        )
    console.print(table)


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``--out`` that is a file, or a folder holding earlier output (unless ``overwrite``)."""
    if out.exists() and not out.is_dir():
        raise InvalidSpecError(f"--out {out} is a file, not a folder: give a folder for index.html and the plots")
    earlier = (
        sorted(p.name for p in out.glob("*") if p.name == "index.html" or p.suffix == ".png") if out.is_dir() else []
    )
    if earlier and not overwrite:
        shown = ", ".join(earlier[:4]) + (f" and {len(earlier) - 4} more" if len(earlier) > 4 else "")
        raise InvalidSpecError(
            f"--out {out} already holds a report ({shown}); choose a new folder, or add --overwrite to replace it"
        )


@guarded
def report(
    out: Path = typer.Option(..., "--out", help="Folder for index.html and the PNG plots (new, or empty)."),
    kind: Optional[Kind] = KindOpt,  # type: ignore[valid-type]
    this_env: bool = typer.Option(False, "--this-env", help="Only this machine's environment."),
    run: Optional[str] = typer.Option(None, "--run", help="Only one tuning run's measurements."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the report already in --out."),
    db: Optional[str] = DbOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Write PNG plots and an HTML page of stored results, with the environment each came from."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InvalidSpecError("hwtune report needs matplotlib: pip install 'hwtune[plot]'") from None
    from hwtune.tuner.plots import write_report

    _check_out(out, overwrite)
    recs = _records(db, _value(kind), None, None, this_env, run)
    if not recs:
        raise InvalidSpecError("no stored measurements match: run `hwtune tune` first, or relax the filters")
    try:
        page = write_report(recs, out)
    except OSError as exc:
        raise InvalidSpecError(f"cannot write the report into {out}: {exc.strerror or exc}") from None
    if json_out:
        emit_json({"page": str(page), "measurements": len(recs)})
        return
    console.print(f"wrote {page} ({len(recs)} measurements)")
    print(page)

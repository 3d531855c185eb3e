"""``hwtune show`` and ``hwtune report``: look at stored results."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from hwtune.cli.common import JsonOpt, console, emit_json, guarded
from hwtune.core.errors import InvalidSpecError
from hwtune.core.records import STATUSES


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
    kind: Optional[str] = typer.Option(None, "--kind", help="attention or all2all."),
    backend: Optional[str] = typer.Option(None, "--backend"),
    status: Optional[str] = typer.Option(
        None, "--status", help="ok, wrong_answer, crashed, timeout, unsupported, error."
    ),
    phase: Optional[str] = typer.Option(None, "--phase", help="decode, prefill or mixed."),
    this_env: bool = typer.Option(False, "--this-env", help="Only measurements from this machine's environment."),
    run: Optional[str] = typer.Option(None, "--run", help="Only one tuning run's measurements."),
    winners_only: bool = typer.Option(False, "--winners", help="One row per workload: its fastest candidate."),
    limit: int = typer.Option(200, "--limit", help="At most this many rows (newest last)."),
    db: Optional[str] = typer.Option(None, "--db", help="Store URL (default: HWTUNE_DATABASE_URL, else local SQLite)."),
    json_out: bool = JsonOpt,
) -> None:
    """Stored measurements as a table (or JSON), filterable."""
    from hwtune.tuner.report import winners, workload_label

    recs = _records(db, kind, backend, status, this_env, run)
    if phase is not None:
        recs = [r for r in recs if r.workload.get("phase") == phase]
    if winners_only:
        rows = [w.to_dict() for w in winners(recs)]
        if json_out:
            emit_json(rows)
            return
        table = Table(title="winners")
        for col in ("workload", "winner", "median us", "runner-up", "margin"):
            table.add_column(col)
        for w in rows:
            table.add_row(
                w["label"],
                f"{w['backend']}/{w['tactic']}",
                f"{w['median_us']:.2f}",
                w["runner_up"] or "",
                f"+{w['margin']:.1%}" if w["margin"] is not None else "",
            )
        console.print(table)
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
            workload_label(r)[1],
            r.backend,
            r.tactic,
            r.status,
            f"{s.median_us:.2f}" if s else "",
            f"{s.p10_us:.1f}-{s.p90_us:.1f}" if s else "",
            r.host,
            (r.message or "")[:120],
        )
    console.print(table)


@guarded
def report(
    out: Path = typer.Option(..., "--out", help="Folder for index.html and the PNG plots."),
    kind: Optional[str] = typer.Option(None, "--kind"),
    this_env: bool = typer.Option(False, "--this-env", help="Only this machine's environment."),
    run: Optional[str] = typer.Option(None, "--run"),
    db: Optional[str] = typer.Option(None, "--db"),
) -> None:
    """Write PNG plots and an HTML page of stored results, with the environment each came from."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InvalidSpecError("hwtune report needs matplotlib: pip install 'hwtune[plot]'") from None
    from hwtune.tuner.plots import write_report

    recs = _records(db, kind, None, None, this_env, run)
    if not recs:
        raise InvalidSpecError("no stored measurements match: run `hwtune tune` first, or relax the filters")
    page = write_report(recs, out)
    console.print(f"wrote {page} ({len(recs)} measurements)")
    print(page)

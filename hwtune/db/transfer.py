"""Moving measurements: JSON Lines export/import, and push/pull between two stores.

The file format (version 1) is strict JSON, one object per line, never pickle (a pickle runs code when it is
loaded, and a results file travels between clusters and people). Line 1 is a header::

    {"format": "hwtune-measurements", "version": 1, "exported_at": "...", "hwtune_version": "...", "count": N}

and each of the N following lines is one measurement: the fields of ``MeasurementRecord.to_dict()`` with its
environment fingerprint and normalised workload; non-finite floats (legal only in ``error`` and ``extra``)
are written ``{"$float": "nan"}``. Import checks every line (``hwtune.db.import_checks``) before it writes
anything, and reports bad lines by number: ``on_error="abort"`` then writes nothing, ``"skip"`` writes the
good ones. Writes go through the store's idempotent upsert, so importing, pushing or pulling the same
measurements again changes nothing and reports 0.
"""

from __future__ import annotations

import datetime as _dt
import io
from dataclasses import dataclass, field
from typing import IO, Iterator, Literal

from hwtune._version import __version__
from hwtune.core.errors import StoreDataError
from hwtune.core.records import MeasurementRecord
from hwtune.db.columns import dumps, encode_json
from hwtune.db.import_checks import FORMAT, VERSION, check_header, parse_line
from hwtune.db.store import Store

OnError = Literal["skip", "abort"]
BATCH = 1000
SHOWN_ERRORS = 20


def record_line(rec: MeasurementRecord) -> str:
    """One measurement as one line of the export format."""
    return dumps(encode_json(rec.to_dict()))


def export_jsonl(store: Store, out: IO[str], *, kind: str | None = None) -> int:
    """Write the header and every measurement (of ``kind``) to ``out``; returns how many.

    The header's count is exact: the export fixes the highest id first and writes only up to it, so rows
    that land meanwhile wait for the next export."""
    last_id, count = store.snapshot(kind)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "hwtune_version": __version__,
        "count": count,
        "exported_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
    }
    out.write(dumps(header) + "\n")
    written = 0
    for batch in store.iter_measurements(kind=kind, max_id=last_id):
        out.writelines(record_line(rec) + "\n" for rec in batch)
        written += len(batch)
    if written != count:  # cannot happen for an append-only table; say so loudly if it ever does
        raise StoreDataError(f"export wrote {written} measurements but announced {count}; export again")
    return written


@dataclass
class ImportReport:
    """What an import read, found valid, and changed; ``errors`` are (line number, reason)."""

    announced: int = 0
    read: int = 0
    valid: int = 0
    written: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "announced": self.announced,
            "read": self.read,
            "valid": self.valid,
            "written": self.written,
            "skipped": len(self.errors),
            "errors": [{"line": n, "reason": r} for n, r in self.errors],
        }


def _lines(text: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text, start=1):
        if line.strip():
            yield number, line


def _check_all(text: IO[str], report: ImportReport) -> None:
    first = text.readline()
    try:
        report.announced = check_header(first)
    except ValueError as exc:
        raise StoreDataError(f"line 1: {exc}") from None
    for number, line in _lines(text):
        number += 1  # _lines counts from the line after the header
        report.read += 1
        try:
            parse_line(line)
            report.valid += 1
        except (ValueError, StoreDataError) as exc:
            report.errors.append((number, str(exc)))
    if report.read != report.announced:
        report.errors.append(
            (
                0,
                f"the header announces {report.announced} measurements but the file holds "
                f"{report.read} (a truncated or edited file?)",
            )
        )


def _summary(report: ImportReport, name: str) -> str:
    shown = "; ".join(f"line {n}: {r}" if n else r for n, r in report.errors[:SHOWN_ERRORS])
    more = f" (and {len(report.errors) - SHOWN_ERRORS} more)" if len(report.errors) > SHOWN_ERRORS else ""
    return f"{len(report.errors)} problem(s) in {name}: {shown}{more}"


def import_jsonl(
    store: Store, source: IO[str], *, on_error: OnError = "abort", name: str = "the file", batch: int = BATCH
) -> ImportReport:
    """Check every line of ``source``, then write the valid measurements in batches.

    ``abort``: any bad line (or a count that does not match the header) raises ``StoreDataError`` listing
    the lines, and nothing is written. ``skip``: bad lines are left out and listed in the report."""
    if on_error not in ("skip", "abort"):
        raise StoreDataError(f"on_error must be 'skip' or 'abort', got {on_error!r}")
    if not source.seekable():
        source = io.StringIO(source.read())
    start = source.tell()
    report = ImportReport()
    _check_all(source, report)  # first pass: nothing is written until every line has been looked at
    if report.errors and on_error == "abort":
        raise StoreDataError(
            f"import aborted, nothing written: {_summary(report, name)}. Fix those lines, "
            "or "
            "pass --on-error skip to import the valid ones."
        )
    bad = {n for n, _ in report.errors}
    source.seek(start)
    source.readline()
    pending: list[MeasurementRecord] = []
    for number, line in _lines(source):
        if number + 1 in bad:
            continue
        pending.append(parse_line(line))
        if len(pending) >= batch:
            report.written += store.write(pending)
            pending = []
    report.written += store.write(pending)
    if report.written:
        store.optimize()
    return report


@dataclass
class CopyReport:
    """What a push or pull did: measurements read from the source, and rows new or changed in the target."""

    read: int = 0
    copied: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"read": self.read, "copied": self.copied}


def copy_measurements(source: Store, target: Store, *, batch: int = 2000) -> CopyReport:
    """Copy every measurement of ``source`` into ``target`` (push/pull), field for field; ``copied`` counts
    rows that were new or different in ``target``, so a second copy reports 0."""
    report = CopyReport()
    last_id, _ = source.snapshot()
    for records in source.iter_measurements(batch=batch, max_id=last_id):
        report.read += len(records)
        report.copied += target.write(records)
    if report.copied:
        target.optimize()
    return report

"""Export/import and push/pull: round trips keep every field; repeating them changes nothing; bad lines
are reported by number and skipped or abort the import."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hwtune.core.errors import StoreDataError
from hwtune.db.store import Store
from hwtune.db.transfer import copy_measurements, export_jsonl, import_jsonl, record_line
from tests.db.helpers import attention, cli, same_records, variety


def _export(store: Store) -> str:
    out = io.StringIO()
    export_jsonl(store, out)
    return out.getvalue()


def test_export_format_is_strict_versioned_json_lines(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        store.write(variety())
        text = _export(store)
    lines = text.splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "hwtune-measurements" and header["version"] == 1
    assert header["count"] == len(lines) - 1 == len(variety())
    assert set(header) == {"format", "version", "exported_at", "hwtune_version", "count"}
    for line in lines[1:]:
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON token {c}"))
    assert '{"$float":"nan"}' in text and '{"$float":"-inf"}' in text


def test_export_import_round_trip_and_repeat(store_url: str, tmp_path: Path) -> None:
    records = variety()
    with Store.open(str(tmp_path / "source.db")) as source:
        source.write(records)
        text = _export(source)
    with Store.open(store_url) as target:
        report = import_jsonl(target, io.StringIO(text))
        assert (report.read, report.valid, report.written, report.errors) == (len(records),) * 3 + ([],)
        assert same_records(target.measurements(), records)
        again = import_jsonl(target, io.StringIO(text))
        assert again.written == 0 and again.valid == len(records)
        assert target.counts()["measurements"] == len(records)
        assert _export(target).splitlines()[1:] == text.splitlines()[1:]  # byte-identical measurement lines


def _bad_file() -> tuple[str, dict[int, str]]:
    good = [record_line(attention(batch=b)) for b in (1, 2, 3)]
    base = json.loads(good[0])
    variants = {
        "negative latency": {**base, "stats": {**base["stats"], "p10_us": -1.0}},
        "unknown status": {**base, "status": "fast"},
        "unknown field": {**base, "colour": "blue"},
        "wrong type": {**base, "backend": 7},
        "naive time": {**base, "created_at": "2026-11-20T12:00:00"},
        "wrong key": {**base, "workload_key": "0" * 32},
        "bool count": {**base, "stats": {**base["stats"], "n": True}},
    }
    lines = [
        json.dumps(
            {
                "format": "hwtune-measurements",
                "version": 1,
                "exported_at": "x",
                "hwtune_version": "0.1.0",
                "count": 3 + len(variants) + 2,
            }
        )
    ]
    lines += good
    expected: dict[int, str] = {}
    for what, obj in variants.items():
        lines.append(json.dumps(obj))
        expected[len(lines)] = what
    nan_line = record_line(attention(batch=9)).replace('"median_us":40.0', '"median_us":NaN')
    lines.append(nan_line)
    expected[len(lines)] = "NaN"
    lines.append("{not json")
    expected[len(lines)] = "broken"
    return "\n".join(lines) + "\n", expected


def test_bad_lines_abort_with_line_numbers(store_url: str) -> None:
    text, expected = _bad_file()
    with Store.open(store_url) as store:
        with pytest.raises(StoreDataError, match="nothing written") as info:
            import_jsonl(store, io.StringIO(text), on_error="abort")
        message = str(info.value)
        for number in expected:
            assert f"line {number}:" in message
        assert "finite and non-negative" in message and "unknown status 'fast'" in message
        assert "unknown fields: colour" in message and "no time zone" in message
        assert "NaN is not a JSON number" in message and "does not match" in message
        assert store.counts()["measurements"] == 0


def test_bad_lines_skipped_with_line_numbers(store_url: str) -> None:
    text, expected = _bad_file()
    with Store.open(store_url) as store:
        report = import_jsonl(store, io.StringIO(text), on_error="skip")
        assert [n for n, _ in report.errors] == sorted(expected)
        assert report.written == 3 and store.counts()["measurements"] == 3


def test_header_problems_always_abort(sqlite_url: str) -> None:
    line = record_line(attention())
    with Store.open(sqlite_url) as store:
        for header, why in [
            ("", "not a JSON header"),
            ('{"format": "csv"}', "not an hwtune measurements file"),
            ('{"format": "hwtune-measurements", "version": 2, "count": 1}', "version 2"),
            ('{"format": "hwtune-measurements", "version": 1, "count": -1}', "non-negative"),
        ]:
            with pytest.raises(StoreDataError, match=why):
                import_jsonl(store, io.StringIO(header + "\n" + line + "\n"), on_error="skip")


def test_truncated_file_is_detected(sqlite_url: str, tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "s.db")) as source:
        source.write(variety())
        text = _export(source)
    truncated = "\n".join(text.splitlines()[:4]) + "\n"
    with Store.open(sqlite_url) as store:
        with pytest.raises(StoreDataError, match="announces 11 measurements but the file holds 3"):
            import_jsonl(store, io.StringIO(truncated))


def _push_pull(local: str, shared: str, tmp_path: Path) -> None:
    records = variety()
    with Store.open(local) as store:
        store.write(records)
    out = cli("push", "--db", local, "--to", shared, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["copied"] == len(records)
    assert json.loads(cli("push", "--db", local, "--to", shared, "--json").stdout)["copied"] == 0
    fresh = str(tmp_path / "fresh.db")
    pulled = json.loads(cli("pull", "--db", fresh, "--from", shared, "--json").stdout)
    assert (pulled["read"], pulled["copied"]) == (len(records), len(records))
    assert json.loads(cli("pull", "--db", fresh, "--from", shared, "--json").stdout)["copied"] == 0
    with Store.open(shared, create=False) as s, Store.open(fresh, create=False) as f:
        assert same_records(s.measurements(), records)
        assert same_records(f.measurements(), records)


def test_push_pull_between_sqlite_files(tmp_path: Path) -> None:
    _push_pull(str(tmp_path / "local.db"), str(tmp_path / "shared.db"), tmp_path)


@pytest.mark.postgres
def test_push_pull_with_postgres(tmp_path: Path, pg_url: str) -> None:
    _push_pull(str(tmp_path / "local.db"), pg_url, tmp_path)


def test_copy_function_counts_only_changes(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "a.db")) as a, Store.open(str(tmp_path / "b.db")) as b:
        a.write(variety())
        assert copy_measurements(a, b).copied == len(variety())
        b.write([attention(median=99.0)])  # the target now holds a different value for one candidate
        assert copy_measurements(a, b).copied == 1  # the source's value is written back; nothing else
        assert copy_measurements(a, b).copied == 0


def test_cli_export_import(tmp_path: Path) -> None:
    src, dst, file = str(tmp_path / "a.db"), str(tmp_path / "b.db"), tmp_path / "m.jsonl"
    with Store.open(src) as store:
        store.write(variety())
    out = cli("export", str(file), "--db", src, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"file": str(file), "count": len(variety())}
    assert not (tmp_path / "m.jsonl.partial").exists()
    imported = json.loads(cli("import", str(file), "--db", dst, "--json").stdout)
    assert imported["written"] == len(variety()) and imported["skipped"] == 0
    again = cli("import", "-", "--db", dst, stdin=file.read_text())
    assert again.returncode == 0 and "0 new or changed" in again.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(file.read_text().replace('"status":"crashed"', '"status":"melted"'))
    aborted = cli("import", str(bad), "--db", dst)
    assert aborted.returncode == 2 and "line " in aborted.stderr and "Traceback" not in aborted.stderr
    skipped = cli("import", str(bad), "--db", dst, "--on-error", "skip", "--json")
    assert skipped.returncode == 0 and json.loads(skipped.stdout)["skipped"] == 1
    missing = cli("export", str(file), "--db", str(tmp_path / "none.db"))
    assert missing.returncode == 1 and "no store at" in missing.stderr

"""Checking one line of an import file before it can reach a store.

An import file may come from another cluster, another hwtune version or a text editor; a bad number in it
would steer engines. So every field is checked for type and range, unknown fields are refused (a misspelt
field would otherwise vanish silently), JSON's non-standard NaN/Infinity tokens are refused, latencies
must be finite and non-negative, statuses must be known, and the workload key and environment hash must be
the ones their workload and fingerprint produce.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from typing import Any, Mapping

from hwtune.core.catalogue import RENAMED_MEASUREMENTS
from hwtune.core.errors import HwtuneError
from hwtune.core.records import STATUSES, LatencyStats, MeasurementRecord
from hwtune.db.columns import decode_json
from hwtune.db.rows import environment_hash, workload_info

FORMAT = "hwtune-measurements"
VERSION = 1
HEADER_FIELDS = frozenset({"format", "version", "exported_at", "hwtune_version", "count"})

_STR = (str,)
_OPT_STR = (str, type(None))
REQUIRED: Mapping[str, tuple[type, ...]] = {
    "kind": _STR,
    "workload": (dict,),
    "workload_key": _STR,
    "backend": _STR,
    "tactic": _STR,
    "status": _STR,
    "environment": (dict,),
    "environment_hash": _STR,
    "host": _STR,
    "hwtune_version": _STR,
    "created_at": _STR,
}
OPTIONAL: Mapping[str, tuple[type, ...]] = {
    "message": _STR,
    "stats": (dict, type(None)),
    "error": (dict, type(None)),
    "timing_method": _OPT_STR,
    "compile_time_s": (int, float, type(None)),
    "gpu_uuid": _OPT_STR,
    "run_id": _OPT_STR,
    "extra": (dict,),
}
STATS_REQUIRED = ("median_us", "p10_us", "p90_us", "mean_us", "n", "spread")


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number (non-finite values are not allowed)")


def loads(line: str) -> Any:
    """Strict JSON: NaN and Infinity tokens are refused."""
    return json.loads(line, parse_constant=_reject_constant)


def check_header(line: str) -> int:
    """The measurement count a header line announces; ValueError when it is not a version-1 header."""
    try:
        header = loads(line)
    except ValueError as exc:
        raise ValueError(f"the first line is not a JSON header ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f'not an hwtune measurements file: the first line must be a header with "format": "{FORMAT}"')
    version = header.get("version")
    if version != VERSION:
        raise ValueError(
            f"format version {version!r} is not one this hwtune reads (it reads version "
            f"{VERSION}); "
            "export again with this hwtune, or upgrade hwtune"
        )
    unknown = set(header) - HEADER_FIELDS
    if unknown:
        raise ValueError(f"unknown header fields: {', '.join(sorted(unknown))}")
    count = header.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"header count must be a non-negative integer, got {count!r}")
    return count


def _number(name: str, value: Any, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise ValueError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and non-negative, got {value!r}")
    return value


def _stats(raw: dict[str, Any]) -> LatencyStats:
    unknown = set(raw) - set(STATS_REQUIRED) - {"ci95_rel"}
    if unknown:
        raise ValueError(f"unknown stats fields: {', '.join(sorted(unknown))}")
    missing = [k for k in STATS_REQUIRED if k not in raw]
    if missing:
        raise ValueError(f"stats lacks {', '.join(missing)}")
    values = {k: _number(f"stats.{k}", raw[k], integer=k == "n") for k in STATS_REQUIRED}
    if values["n"] <= 0:
        raise ValueError("stats.n must be positive")
    ci = raw.get("ci95_rel")
    return LatencyStats(**values, ci95_rel=None if ci is None else _number("stats.ci95_rel", ci))  # type: ignore[arg-type]


def _error(raw: dict[str, Any]) -> dict[str, float]:
    decoded = decode_json(raw)
    for key, value in decoded.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"error.{key} must be a number, got {value!r}")
    return decoded


def parse_line(line: str) -> MeasurementRecord:
    """One measurement line as a checked record; ValueError (or StoreDataError) says what is wrong."""
    data = loads(line)
    if not isinstance(data, dict):
        raise ValueError("a measurement line must be a JSON object")
    unknown = set(data) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ValueError(f"missing fields: {', '.join(missing)}")
    for name, value in data.items():
        types = REQUIRED.get(name) or OPTIONAL[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"{name} has the wrong type ({type(value).__name__}: {value!r})")
    for name in ("kind", "backend", "tactic", "workload_key", "environment_hash", "host", "hwtune_version"):
        if not data[name].strip():
            raise ValueError(f"{name} must not be empty")
    if data["status"] not in STATUSES:
        raise ValueError(f"unknown status {data['status']!r}; known: {', '.join(STATUSES)}")
    if data["kind"] not in ("attention", "all2all"):
        raise ValueError(f"unknown kind {data['kind']!r}; known: attention, all2all")
    try:
        created = _dt.datetime.fromisoformat(data["created_at"])
    except ValueError:
        raise ValueError(f"created_at {data['created_at']!r} is not an ISO 8601 time") from None
    if created.tzinfo is None:
        raise ValueError(f"created_at {data['created_at']!r} has no time zone")
    fields = dict(data)
    fields["created_at"] = created
    if data["kind"] == "attention":  # files exported before hwtune's kernels had names of their own
        fields["backend"] = RENAMED_MEASUREMENTS.get(data["backend"], data["backend"])
    fields["stats"] = _stats(data["stats"]) if data.get("stats") is not None else None
    fields["error"] = _error(data["error"]) if data.get("error") is not None else None
    fields["extra"] = decode_json(data.get("extra", {}))
    if fields.get("compile_time_s") is not None:
        fields["compile_time_s"] = _number("compile_time_s", fields["compile_time_s"])
    try:
        record = MeasurementRecord(**fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None
    try:
        info = workload_info(record.kind, record.workload, record.workload_key)
        environment_hash(record.environment, record.environment_hash)
    except HwtuneError as exc:
        raise ValueError(str(exc)) from None
    record.workload = info.normalized
    return record

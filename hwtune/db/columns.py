"""Column types that make a stored value read back exactly as it was written, on SQLite and PostgreSQL.

* :class:`UTCDateTime`: SQLite has no time-zone type and would hand back naive datetimes; every timestamp
  is stored as UTC and read back aware, so ``created_at`` survives export, import, push and pull.
* :class:`JSONDoc`: JSON on SQLite, JSONB on PostgreSQL (JSONB has equality, which the idempotent upsert's
  "changed?" test needs). Non-finite floats (a wrong answer's error can be NaN or inf) are not JSON and
  PostgreSQL rejects them, so they are tagged ``{"$float": "nan"|"inf"|"-inf"}`` on the way in and restored
  on the way out; the export file uses the same tag, so it stays strict JSON.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from typing import Any

from sqlalchemy import JSON, DateTime
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

FLOAT_TAG = "$float"
_ENCODE = {math.inf: "inf", -math.inf: "-inf"}
_DECODE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def encode_json(value: Any) -> Any:
    """Replace non-finite floats by ``{"$float": ...}`` so that the value is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return {FLOAT_TAG: "nan" if math.isnan(value) else _ENCODE[value]}
    if isinstance(value, dict):
        return {str(k): encode_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_json(v) for v in value]
    return value


def decode_json(value: Any) -> Any:
    """Inverse of :func:`encode_json`."""
    if isinstance(value, dict):
        if len(value) == 1 and FLOAT_TAG in value and value[FLOAT_TAG] in _DECODE:
            return _DECODE[value[FLOAT_TAG]]
        return {k: decode_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_json(v) for v in value]
    return value


def dumps(value: Any) -> str:
    """The one JSON spelling used in the database and in exports: sorted keys, strict (no NaN tokens)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


class JSONDoc(TypeDecorator[Any]):
    """A JSON document (JSONB on PostgreSQL) that carries non-finite floats losslessly."""

    impl = JSON(none_as_null=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        # none_as_null: Python None is SQL NULL (not the JSON text 'null'), so "no error" is NULL.
        if dialect.name == "postgresql":
            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(JSON(none_as_null=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else encode_json(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else decode_json(value)


class _SQLiteDateTime(sqlite.DATETIME):
    """SQLite's DATETIME column, read with ``datetime.fromisoformat`` (C) instead of SQLAlchemy's regex: the
    stored text ("2026-11-21 12:00:00.123456") is ISO 8601, and this parse dominates reading many rows."""

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        parse = _dt.datetime.fromisoformat
        return lambda value: None if value is None else parse(value)


class UTCDateTime(TypeDecorator[_dt.datetime]):
    """A timestamp stored in UTC and always read back time-zone aware (UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(_SQLiteDateTime())
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: _dt.datetime | None, dialect: Dialect) -> _dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"refusing a naive datetime {value.isoformat()}: give it a time zone")
        value = value.astimezone(_dt.timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: _dt.datetime | None, dialect: Dialect) -> _dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=_dt.timezone.utc)
        return value.astimezone(_dt.timezone.utc)

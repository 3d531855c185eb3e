"""The result store: every SQL statement hwtune runs lives in this package.

``Store.open(url)`` gives the tuner and the CLI a store (SQLite file by default, PostgreSQL for a cluster);
``hwtune.db.readonly.open_for_selection`` gives an engine a read-only one within a time budget, or None.
Names are loaded on first use so that ``import hwtune.db`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Store": "hwtune.db.store",
    "open_for_selection": "hwtune.db.readonly",
    "export_jsonl": "hwtune.db.transfer",
    "import_jsonl": "hwtune.db.transfer",
    "copy_measurements": "hwtune.db.transfer",
    "resolve": "hwtune.db.urls",
    "mask": "hwtune.db.urls",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'hwtune.db' has no attribute {name!r}")

"""Static priorities per architecture family: the fallback order when nothing applicable was measured.

Derived from the backend records (``Backend.priority`` and ``Backend.tactic_order``), where each place is
stated with its source; this module only sorts.
"""

from __future__ import annotations

from typing import Sequence

from hwtune.core.catalogue import backends
from hwtune.core.catalogue.base import Backend, Feature


def backend_order(kind: str, mla: bool, family: str) -> Sequence[str]:
    """Backend names of ``kind`` in the family's static order (MLA backends only for MLA specs)."""
    pool = [b for b in backends(kind) if kind != "attention" or b.has(Feature.MLA) == mla]
    if not any(family in b.priority for b in pool) and family != "cpu":
        family = "other"
    placed = [b for b in pool if family in b.priority]
    return tuple(b.name for b in sorted(placed, key=lambda b: b.priority[family]))


def tactic_order(backend: Backend, family: str, phase: str) -> Sequence[str]:
    """Preferred tactic names for a backend; empty means the catalogue's declaration order."""
    per_family = backend.tactic_order
    table = per_family.get(family) or per_family.get("ampere_hopper") or {}
    return table.get(phase, ())


def describe_family(family: str) -> str:
    """An architecture family in words, for messages that say which static order was used."""
    return {
        "blackwell": "SM 10.x (Blackwell)",
        "blackwell_consumer": "SM 12.x (consumer Blackwell)",
        "ampere_hopper": "SM 8.x/9.x (Ampere/Hopper)",
        "cpu": "CPU",
    }.get(family, "other CUDA GPUs")

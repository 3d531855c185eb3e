"""The probe registry, one for every kind: which candidate class runs a backend, read from its catalogue
record (``Backend.probe``), and how to import it.

For all2all, the parent process checks a probe's modules with ``importlib.util.find_spec`` (never an
import) before it spawns ranks (attention candidates check in ``unavailable()`` inside the worker);
only workers and spawned ranks import the candidate class. Light: no torch here.
"""

from __future__ import annotations

import importlib
import importlib.util

from hwtune.core import catalogue


def probe_ref(kind: str, backend: str, error: type[Exception] = LookupError) -> str:
    """``module:Class`` of ``backend``'s candidate; ``error`` with the reason when it has none."""
    probe = catalogue.get(kind, backend).probe
    if probe is None:
        raise error(
            f"hwtune has no runnable candidate for {backend} (it is selectable from static "
            "priorities and imported measurements only)"
        )
    return probe.ref


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The modules that cannot be found, without importing them."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


def load_class(ref: str) -> type:
    """Import ``module:Class`` (inside a worker or a spawned rank only)."""
    module_name, _, attr = ref.partition(":")
    if not attr:
        raise ValueError(f"candidate reference {ref!r} must look like 'package.module:ClassName'")
    return getattr(importlib.import_module(module_name), attr)

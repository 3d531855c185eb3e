"""Which module implements each all2all backend, and which Python modules it needs. Light: no torch here.

The parent process reads this table to check packages (``importlib.util.find_spec``, never an import)
before spawning anything; only the spawned ranks import the implementation.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

_PKG = "hwtune.probes.all2all.candidates"


@dataclass(frozen=True)
class CandidateEntry:
    """Where a backend's implementation lives (``module:Class``) and the modules it imports."""

    ref: str
    modules: tuple[str, ...] = ()


REGISTRY: dict[str, CandidateEntry] = {
    "naive": CandidateEntry(f"{_PKG}.naive:NaiveCandidate"),
    "allgather_reducescatter": CandidateEntry(
        f"{_PKG}.allgather_reducescatter:AllGatherReduceScatterCandidate"
    ),
    "nccl_alltoallv": CandidateEntry(f"{_PKG}.nccl_alltoallv:AllToAllVCandidate"),
    "flashinfer_nvlink_one_sided": CandidateEntry(
        f"{_PKG}.flashinfer_one_sided:OneSidedCandidate", ("flashinfer",)
    ),
    "flashinfer_nvlink_two_sided": CandidateEntry(
        f"{_PKG}.flashinfer_two_sided:TwoSidedCandidate", ("flashinfer",)
    ),
    "deepep_high_throughput": CandidateEntry(f"{_PKG}.deepep:DeepEPHighThroughputCandidate", ("deep_ep",)),
    "deepep_low_latency": CandidateEntry(f"{_PKG}.deepep:DeepEPLowLatencyCandidate", ("deep_ep",)),
    "pplx": CandidateEntry(f"{_PKG}.pplx:PPLXCandidate", ("pplx_kernels",)),
}


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


def load(ref: str) -> type:
    """Import ``module:Class`` (in a spawned rank only)."""
    module_name, _, attr = ref.partition(":")
    if not attr:
        raise ValueError(f"candidate reference {ref!r} must look like 'package.module:ClassName'")
    return getattr(importlib.import_module(module_name), attr)

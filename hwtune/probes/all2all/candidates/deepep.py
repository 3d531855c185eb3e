"""deepep_high_throughput / deepep_low_latency: DeepEP's normal and low-latency kernels.

The parent checks for the ``deep_ep`` module before spawning (``unsupported: deep_ep is not installed``).
hwtune does not drive DeepEP yet: it is not on the GPU images this project measures on, so a driver could
not be checked against its results. Where ``deep_ep`` is installed these candidates say so plainly
(``unsupported``) instead of pretending to measure.
"""

from __future__ import annotations

import importlib.metadata as md

from hwtune.probes.all2all.candidates.base import Candidate
from hwtune.probes.contract import Unsupported


def _version() -> str:
    for dist in ("deep-ep", "deep_ep"):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "unknown version"


class _DeepEP(Candidate):
    mode = ""

    def setup(self) -> None:
        raise Unsupported(
            f"deep_ep ({_version()}) is installed, but hwtune has no DeepEP {self.mode} driver yet, so "
            f"{self.name} cannot be measured here; measure it with DeepEP's own tests/benchmarks."
        )


class DeepEPHighThroughputCandidate(_DeepEP):
    """DeepEP's normal (high-throughput) kernels: not driven yet, so set-up reports ``unsupported`` where deep_ep is
    installed."""

    name = "deepep_high_throughput"
    mode = "high-throughput (normal)"


class DeepEPLowLatencyCandidate(_DeepEP):
    """DeepEP's low-latency kernels: not driven yet, so set-up reports ``unsupported`` where deep_ep is installed."""

    name = "deepep_low_latency"
    mode = "low-latency"

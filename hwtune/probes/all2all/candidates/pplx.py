"""pplx: Perplexity's pplx-kernels all-to-all (removed from recent vLLM).

The parent checks for the ``pplx_kernels`` module before spawning
(``unsupported: pplx_kernels is not installed``). hwtune has no pplx driver: where the package is
installed the candidate says so (``unsupported``) rather than pretending to measure.
"""

from __future__ import annotations

from hwtune.probes.all2all.candidates.base import Candidate
from hwtune.probes.contract import Unsupported


class PPLXCandidate(Candidate):
    """pplx-kernels' all-to-all: no driver yet, so set-up reports ``unsupported`` where pplx_kernels is installed."""

    name = "pplx"

    def setup(self) -> None:
        raise Unsupported(
            "pplx_kernels is installed, but hwtune has no pplx driver yet, so pplx cannot be measured here."
        )

"""What a runnable attention candidate is: a backend bound to a tactic, planned for one batch at a time.

``prepare(problem)`` is the engine's per-step metadata work (FlashInfer's ``plan``, building a block mask,
computing gather indices): it is not timed. ``run()`` is the attention call that is timed: it reads the
problem's q and cache and writes ``out`` (and ``lse`` in natural log, where the backend returns it).
``prepare`` may be called again with a problem of the same shapes (the second batch of the stale-metadata
check); a runner that supports CUDA graphs must then keep every buffer the captured graph reads at the same
address, copying new metadata in place.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from hwtune.probes.contract import Unsupported

if TYPE_CHECKING:
    import torch

    from hwtune.core.types import AttentionWorkload
    from hwtune.probes.attention.problem import AttentionProblem

LN2 = math.log(2.0)


class Runner(ABC):
    """One (backend, tactic) bound to a batch's shapes: ``prepare`` is the untimed per-step metadata work, ``run``
    the timed call (see the module docstring for the re-prepare and CUDA-graph contract)."""

    supports_graphs: bool = False
    returns_lse: bool = False
    #: Honours ``problem.causal = False`` (a DCP share that every query sees whole) with several query tokens.
    supports_non_causal: bool = False

    def __init__(self) -> None:
        self.out: torch.Tensor | None = None
        self.lse: torch.Tensor | None = None

    @abstractmethod
    def prepare(self, problem: AttentionProblem) -> None:
        """Bind to ``problem`` (plan, allocate ``out``/``lse`` on first use); not timed."""

    @abstractmethod
    def run(self) -> None:
        """Compute attention into ``self.out`` (and ``self.lse``); this is what is timed."""

    def reference_problem(self, problem: AttentionProblem) -> AttentionProblem:
        """The problem whose float32 attention this runner must match: the same one, except for runners
        that quantise the cache into their own format (compared on their dequantised cache, as fp8 is)."""
        return problem

    def lse_natural(self) -> torch.Tensor | None:
        """The returned LSE in natural log (override where the backend uses another base); not timed."""
        return self.lse

    def _alloc(self, problem: AttentionProblem, lse: bool) -> None:
        """Allocate out/lse once; later problems must have the same token count (graph safety)."""
        import torch

        spec = problem.spec
        shape = (problem.num_tokens, spec.num_heads, spec.head_size)
        if self.out is None or tuple(self.out.shape) != shape:
            self.out = torch.empty(shape, dtype=problem.q.dtype, device=problem.q.device)
            self.lse = torch.empty(shape[:2], dtype=torch.float32, device=problem.q.device) if lse else None


class Candidate(ABC):
    """A backend's runnable form. ``unavailable`` says why it cannot run at all here (None: it can)."""

    backend: str

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        """Why this candidate cannot run ``tactic`` for ``workload`` on ``device`` at all (a missing package, the
        wrong device), checked before any runner is built; None when it can."""
        return None

    @abstractmethod
    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        """A fresh runner for ``tactic``; raise Unsupported with the reason if the tactic cannot run."""

    def dcp_prefill_runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        """A fresh runner of the DCP prefill path (``hwtune.probes.attention.dcp``) for ``tactic``; by default
        there is none, and a DCP prefill workload is then unsupported rather than timed unchecked."""
        raise Unsupported(
            f"hwtune's {self.backend} candidate has no DCP prefill path (context on each rank's share plus ragged "
            "new tokens, merged by LSE), so it cannot be checked for --dcp > 1 prefill"
        )


def import_failure(what: str, exc: BaseException) -> str:
    """The unavailable reason for a package or kernel module that raised on import (an ImportError, or the package's
    own check at import): ``what``, the exception's type and its first line."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{what} cannot be imported: {type(exc).__name__}: {first}"


def refuse_unmeasured_phase(backend: str, workload: AttentionWorkload) -> None:
    """Raise Unsupported with the catalogue's reason where ``backend``'s candidate does not measure ``workload``'s
    phase (``Probe.phases``; ``plan_candidates`` records such a workload unsupported before any runner is built)."""
    from hwtune.core import catalogue

    probe = catalogue.get("attention", backend).probe
    if probe is not None and not probe.measures(workload.phase):
        raise Unsupported(probe.phases_why)


def triton_gpu_unavailable(device: str) -> str | None:
    """Why hwtune's own Triton kernels cannot run here, or None: they need a CUDA device that torch sees."""
    import torch

    if device != "cuda" or not torch.cuda.is_available():
        return "hwtune's Triton kernels run on CUDA GPUs only (no CUDA device visible to torch)"
    return None


def load_candidate(backend: str, override: str | None = None) -> Candidate:
    """Import the candidate class that ``backend``'s catalogue record names (``override`` = "module:Class",
    used by fault tests). Modules are imported only inside the worker."""
    from hwtune.probes.registry import load_class, probe_ref

    return load_class(override or probe_ref("attention", backend, Unsupported))()

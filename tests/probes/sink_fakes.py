"""Fake candidates that get attention sinks wrong on purpose (and two that get them right), for test_sinks.py.

Imported only inside the worker process, by module path (``candidate_override``), like tests/probes/fake_candidates.py.
"""

from __future__ import annotations

import dataclasses

import torch

from hwtune.probes.attention.candidates.sdpa import SdpaRunner
from tests.probes.fake_candidates import MathDcpPrefill, ReferenceLse, _Base, _MathDcpPrefillRunner, _ReferenceLseRunner


class _DropSinksRunner(SdpaRunner):
    """Real SDPA attention that ignores the sinks: what a kernel without a sink argument computes."""

    def prepare(self, problem) -> None:  # noqa: ANN001
        super().prepare(dataclasses.replace(problem, sinks=None))


class DropSinks(_Base):
    runner_cls = _DropSinksRunner


class _LseWithoutSinkRunner(_ReferenceLseRunner):
    """Right output, but an LSE that leaves the sink out (the other convention): merging DCP shares by it counts the
    sink wrong, and batch A's LSE check already differs."""

    def run(self) -> None:
        from hwtune.probes.attention.reference import reference_attention

        out, _ = reference_attention(self.problem)
        _, lse = reference_attention(dataclasses.replace(self.problem, sinks=None))
        self.out.copy_(out)
        self.lse.copy_(lse)


class LseWithoutSink(ReferenceLse):
    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return _LseWithoutSinkRunner()


#: The layer's sinks as the first share handed them over (both shares run in one worker process, first share first).
_LAYER_SINKS: dict[str, torch.Tensor] = {}


class _SinkOnEveryShareRunner(_ReferenceLseRunner):
    """Applies the layer's sinks on every DCP share, as an engine that passes the sinks to every rank's kernel would:
    the merge then counts each sink once per share."""

    def prepare(self, problem) -> None:  # noqa: ANN001
        if problem.sinks is not None:
            _LAYER_SINKS["sinks"] = problem.sinks
        elif problem.spec.sinks:
            problem = dataclasses.replace(problem, sinks=_LAYER_SINKS["sinks"])
        super().prepare(problem)


class SinkOnEveryShare(ReferenceLse):
    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return _SinkOnEveryShareRunner()


class _SinkMathDcpPrefillRunner(_MathDcpPrefillRunner):
    """The math DCP prefill path with the sinks applied once, in the new tokens' kernel, by post-correcting its output
    with its LSE: ``lse' = logaddexp(lse, sink)``, ``out' = out * exp(lse - lse')``."""

    def new_tokens(self):  # noqa: ANN201
        out, lse = super().new_tokens()
        sinks = self.inputs.sinks
        if sinks is None:
            return out, lse
        lse2 = torch.logaddexp(lse, sinks.float()[None, :])
        return out * torch.exp(lse - lse2)[..., None], lse2


class SinkMathDcpPrefill(MathDcpPrefill):
    def dcp_prefill_runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return _SinkMathDcpPrefillRunner(workload.spec.dcp_size, "NHD")

"""Fake candidates that misbehave on purpose (FlashInfer-style fake runners), for the fault tests.

Each wraps the real SDPA math runner (so the good path is real attention) and injects one fault.
Imported only inside the worker process, by module path.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import time

import torch

from hwtune.probes.attention.candidates.base import Candidate, Runner
from hwtune.probes.attention.candidates.sdpa import SdpaRunner
from hwtune.probes.attention.dcp import DcpPrefillRunner


class _Base(Candidate):
    backend = "TORCH_SDPA"
    runner_cls: type[Runner]

    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return self.runner_cls("math")


class Good(_Base):
    runner_cls = SdpaRunner


class _ExitRunner(SdpaRunner):
    def run(self) -> None:
        os._exit(3)


class _SegfaultRunner(SdpaRunner):
    def run(self) -> None:
        ctypes.string_at(0)  # a real segmentation fault
        os.kill(os.getpid(), signal.SIGSEGV)


class _HangRunner(SdpaRunner):
    def run(self) -> None:
        print("about to hang", flush=True)
        time.sleep(3600)


class _NanRunner(SdpaRunner):
    def run(self) -> None:
        super().run()
        assert self.out is not None
        self.out[: max(1, self.out.shape[0] // 2)] = float("nan")  # half the tokens never written


class _WrongRunner(SdpaRunner):
    def run(self) -> None:
        super().run()
        assert self.out is not None
        self.out[-1] += 1.0  # one request's answer is off


class _RaiseRunner(SdpaRunner):
    def run(self) -> None:
        raise RuntimeError("kernel exploded: simulated launch failure")


class _StaleRunner(SdpaRunner):
    """Keeps the lengths of the first batch it was planned for, as a buggy plan cache would."""

    def prepare(self, problem) -> None:  # noqa: ANN001
        if self.problem is not None:
            problem = dataclasses.replace(problem, seq_lens_list=self.problem.seq_lens_list)
        super().prepare(problem)


class _ReferenceLseRunner(Runner):
    """Attention by the float32 reference itself, returning the LSE: exercises the DCP merge check."""

    returns_lse = True
    supports_non_causal = True  # the reference honours problem.causal
    lse_offset = 0.0

    def prepare(self, problem) -> None:  # noqa: ANN001
        self._alloc(problem, lse=True)
        self.problem = problem

    def run(self) -> None:
        from hwtune.probes.attention.reference import reference_attention

        out, lse = reference_attention(self.problem)
        self.out.copy_(out)
        self.lse.copy_(lse + self.lse_offset)


class _BadLseRunner(_ReferenceLseRunner):
    lse_offset = 0.5  # right output, LSE off by 0.5: merging partials by it goes wrong


class _OutOfBoundsRunner(SdpaRunner):
    """A real illegal memory access on the GPU (a Triton kernel storing far past its buffer)."""

    def run(self) -> None:
        import triton
        import triton.language as tl

        @triton.jit
        def oob(ptr):  # noqa: ANN001, ANN202
            tl.store(ptr + (1 << 40) + tl.arange(0, 16), tl.zeros((16,), dtype=tl.float32))

        buf = torch.zeros(16, device="cuda")
        oob[(1,)](buf)
        torch.cuda.synchronize()


class Exit(_Base):
    runner_cls = _ExitRunner


class Segfault(_Base):
    runner_cls = _SegfaultRunner


class Hang(_Base):
    runner_cls = _HangRunner


class Nan(_Base):
    runner_cls = _NanRunner


class Wrong(_Base):
    runner_cls = _WrongRunner


class Raise(_Base):
    runner_cls = _RaiseRunner


class Stale(_Base):
    runner_cls = _StaleRunner


class OutOfBounds(_Base):
    runner_cls = _OutOfBoundsRunner


class ReferenceLse(_Base):
    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return _ReferenceLseRunner()


class BadLse(_Base):
    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return _BadLseRunner()


class _StaleQueryRunner(SdpaRunner):
    """Keeps the query lengths of the first batch it was planned for (prefill chunk and spec-decode steps), as a
    plan cache keyed on the batch size alone would in a mixed batch."""

    def prepare(self, problem) -> None:  # noqa: ANN001
        if self.problem is not None:
            problem = dataclasses.replace(problem, query_lens=self.problem.query_lens)
        super().prepare(problem)


class StaleQuery(_Base):
    runner_cls = _StaleQueryRunner


class _MathDcpPrefillRunner(DcpPrefillRunner):
    """The DCP prefill path in plain PyTorch: shares through the float32 reference (no causal mask), new tokens
    through a ragged causal attention that reads K/V in ``new_token_layout``. Built with the cache's layout
    (``"cache"``), it reads an NHD tensor as HND: the engine bug the gate must catch."""

    def __init__(self, dcp_size: int, new_token_layout: str) -> None:
        super().__init__(dcp_size)
        self.new_token_layout = new_token_layout

    def plan(self, inputs) -> None:  # noqa: ANN001
        self.layout = self.new_token_layout
        if self.layout == "cache":
            self.layout = inputs.problem.layout

    def context(self, k: int):  # noqa: ANN201
        from hwtune.probes.attention.reference import reference_attention

        return reference_attention(self.inputs.shares[k])

    def new_tokens(self):  # noqa: ANN201
        inp = self.inputs
        k_all, v_all = inp.k_new.float(), inp.v_new.float()
        if self.layout == "HND":  # the tensor is [tokens, heads, dim]; a kernel built for HND reads it otherwise
            t, h, d = k_all.shape
            k_all = k_all.reshape(h, t, d).transpose(0, 1)
            v_all = v_all.reshape(h, t, d).transpose(0, 1)
        outs, lses = [], []
        bounds = inp.qo_indptr.tolist()
        for s, e in zip(bounds[:-1], bounds[1:]):
            q = inp.q[s:e].float().transpose(0, 1)  # [h, m, d]
            g = q.shape[0] // k_all.shape[1]
            k = k_all[s:e].repeat_interleave(g, dim=1).transpose(0, 1)
            v = v_all[s:e].repeat_interleave(g, dim=1).transpose(0, 1)
            scores = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5
            mask = torch.ones(e - s, e - s, dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
            lse = torch.logsumexp(scores, dim=-1)
            outs.append((torch.exp(scores - lse[..., None]) @ v).transpose(0, 1))
            lses.append(lse.transpose(0, 1))
        return torch.cat(outs), torch.cat(lses)


class MathDcpPrefill(ReferenceLse):
    new_token_layout = "NHD"

    def dcp_prefill_runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return _MathDcpPrefillRunner(workload.spec.dcp_size, self.new_token_layout)


class CacheLayoutDcpPrefill(MathDcpPrefill):
    new_token_layout = "cache"


class FlashInferCacheLayoutDcpPrefill(Candidate):
    """FlashInfer's DCP prefill path with the new-token wrapper built in the cache's layout (the engine bug)."""

    backend = "FLASHINFER"

    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        from hwtune.probes.attention.candidates.flashinfer import FlashInferRunner

        return FlashInferRunner(workload, tactic)

    def dcp_prefill_runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        from hwtune.probes.attention.candidates.flashinfer import FlashInferDcpPrefillRunner

        return FlashInferDcpPrefillRunner(workload, tactic, new_token_layout=None)


class _CausalOnlyLseRunner(_ReferenceLseRunner):
    """Claims to honour ``causal=False`` but masks causally anyway: the first DCP share of a spec-decode batch
    then misses keys, and the merged answer is wrong."""

    def prepare(self, problem) -> None:  # noqa: ANN001
        super().prepare(dataclasses.replace(problem, causal=True))


class CausalOnlyLse(_Base):
    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return _CausalOnlyLseRunner()


class CompileCache(_Base):
    """Says where this worker's Triton kernels are cached, after doing what torch's inductor does there (it points an
    unset ``TRITON_CACHE_DIR`` at its own directory for the rest of the process)."""

    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        from hwtune.probes.attention.candidates.base import Unsupported

        os.environ.setdefault("TRITON_CACHE_DIR", "/tmp/torchinductor_someone/triton/0")
        raise Unsupported(f"TRITON_CACHE_DIR={os.environ['TRITON_CACHE_DIR']}")

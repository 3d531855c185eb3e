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

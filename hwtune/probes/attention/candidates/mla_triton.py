"""HWTUNE_TRITON_MLA: hwtune's MLA decode kernel (``hwtune.kernels.triton_mla``), tactic ``auto``.

The launch config is fixed at the first prepare (``default_mla_config`` from the first batch's host integers) and
kept, with a preallocated split-KV workspace, so a captured CUDA graph keeps its launch and its memory; later
batches only change the metadata the kernel reads. The config's name is kept in the record.
"""

from __future__ import annotations

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import Candidate, Runner, Unsupported, triton_gpu_unavailable
from hwtune.probes.attention.candidates.mla_base import MlaRunner, as_mla
from hwtune.probes.attention.mla import MlaProblem
from hwtune.probes.attention.problem import AttentionProblem


def _kernels():  # noqa: ANN202 - module
    from hwtune.kernels import _common, triton_mla

    return _common, triton_mla


class TritonMlaRunner(MlaRunner):
    """Wraps ``kernels.triton_mla.mla_decode``; returns the LSE, honours non-causal shares, graph-capturable."""

    returns_lse = True
    supports_graphs = True
    supports_non_causal = True

    def __init__(self) -> None:
        super().__init__()
        self.common, self.kernels = _kernels()
        self.config = None
        self.workspace: torch.Tensor | None = None
        self.problem: MlaProblem | None = None
        self.extra: dict[str, object] = {}

    def prepare(self, problem: AttentionProblem) -> None:
        p = as_mla(problem)
        self._alloc(p, lse=True)
        self.problem = p
        if self.config is not None:  # fixed at the first batch: a captured graph keeps its launch
            return
        self.config = self.kernels.default_mla_config(
            num_heads=p.spec.num_heads,
            max_query_len=p.max_query_len,
            batch=p.batch,
            max_seq_len=p.max_seq_len,
            sms=self.common.num_sms(p.q.device),
            kv_bytes=p.kv_cache.element_size(),
        )
        assert p.dims is not None
        size = self.kernels.workspace_size(
            num_tokens=p.num_tokens,
            num_heads=p.spec.num_heads,
            kv_lora_rank=p.dims.lora,
            num_splits=self.config.num_splits,
        )
        self.workspace = torch.empty(size, dtype=torch.float32, device=p.q.device) if size else None
        self.extra["config"] = self.config.name()

    def run(self) -> None:
        p = self.problem
        assert p is not None and p.dims is not None and self.out is not None
        self.kernels.mla_decode(
            p.q,
            p.kv_cache,
            p.block_table,
            p.seq_lens,
            p.query_start_loc,
            max_query_len=p.max_query_len,
            max_seq_len=p.max_seq_len,
            out=self.out,
            lse=self.lse,
            softmax_scale=p.softmax_scale,
            kv_lora_rank=p.dims.lora,
            kv_scale=p.kv_scale,
            causal=p.causal,
            config=self.config,
            workspace=self.workspace,
        )


class TritonMlaCandidate(Candidate):
    """HWTUNE_TRITON_MLA's tactic ``auto``; needs a CUDA device visible to torch and triton."""

    backend = "HWTUNE_TRITON_MLA"

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        if reason := triton_gpu_unavailable(device):
            return reason
        try:
            _kernels()
        except ImportError as exc:
            return f"triton cannot be imported: {exc}"
        return None

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        if tactic != "auto":
            raise Unsupported(f"HWTUNE_TRITON_MLA has no tactic {tactic!r}")
        return TritonMlaRunner()

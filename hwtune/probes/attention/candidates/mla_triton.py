"""HWTUNE_TRITON_MLA: hwtune's MLA decode kernel (``hwtune.kernels.triton_mla``), tactics ``auto`` and ``tuned``.

The launch config is fixed at the first prepare and kept, with a preallocated split-KV workspace, so a captured CUDA
graph keeps its launch and its memory; later batches only change the metadata the kernel reads. ``auto`` takes
``default_mla_config`` from the first batch's host integers; ``tuned`` searches ``mla_config_space`` on that batch
(``config_search.fastest_config``: each config must match auto's output, then is timed as the probe times; the search
counts as compile time) and keeps the fastest. The record keeps the config's name, for ``tuned`` every config's median.
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

    def __init__(self, tactic: str = "auto") -> None:
        super().__init__()
        self.tactic = tactic
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
        shape = dict(
            num_heads=p.spec.num_heads,
            max_query_len=p.max_query_len,
            batch=p.batch,
            max_seq_len=p.max_seq_len,
            sms=self.common.num_sms(p.q.device),
            kv_bytes=p.kv_cache.element_size(),
        )
        if self.tactic == "tuned":
            space = self.kernels.mla_config_space(**shape, tma_page=self.kernels.tma_page(p.q, p.kv_cache))
            self.config = self._search(p, space)
        else:
            self.config = self.kernels.default_mla_config(**shape)
        self.workspace = self._workspace(p, self.config)
        self.extra["config"] = self.config.name()

    def _workspace(self, p: MlaProblem, *configs: object) -> torch.Tensor | None:
        """One zeroed split-KV scratch large enough for every one of ``configs`` (None when none splits)."""
        assert p.dims is not None
        size = max(
            self.kernels.workspace_size(
                num_tokens=p.num_tokens,
                num_heads=p.spec.num_heads,
                kv_lora_rank=p.dims.lora,
                num_splits=cfg.num_splits,
                half_partials=cfg.half_partials,
            )  # fmt: skip
            for cfg in configs
        )
        return torch.zeros(size, dtype=torch.float32, device=p.q.device) if size else None

    def _call(self, p: MlaProblem, config: object, out: torch.Tensor, lse: torch.Tensor | None, ws: object) -> None:
        assert p.dims is not None
        self.kernels.mla_decode(
            p.q,
            p.kv_cache,
            p.block_table,
            p.seq_lens,
            p.query_start_loc,
            max_query_len=p.max_query_len,
            max_seq_len=p.max_seq_len,
            out=out,
            lse=lse,
            softmax_scale=p.softmax_scale,
            kv_lora_rank=p.dims.lora,
            kv_scale=p.kv_scale,
            causal=p.causal,
            config=config,
            workspace=ws,
        )

    def _search(self, p: MlaProblem, space: list) -> object:
        """The fastest config of ``space`` under the probe's own timing (``config_search.fastest_config``)."""
        from hwtune.probes.attention.candidates.config_search import fastest_config

        assert self.out is not None
        ws = self._workspace(p, *space)  # one scratch for every config
        # the search launches what run() launches, the LSE written too (``TritonAttnRunner._search``)
        best, seen = fastest_config(space, lambda cfg, out: self._call(p, cfg, out, self.lse, ws), self.out)
        self.extra.update(seen)
        return best

    def run(self) -> None:
        p = self.problem
        assert p is not None and self.out is not None
        self._call(p, self.config, self.out, self.lse, self.workspace)


class TritonMlaCandidate(Candidate):
    """HWTUNE_TRITON_MLA's tactics ``auto`` and ``tuned``; needs a CUDA device visible to torch and triton."""

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
        if tactic not in ("auto", "tuned"):
            raise Unsupported(f"HWTUNE_TRITON_MLA has no tactic {tactic!r}")
        return TritonMlaRunner(tactic)

"""HWTUNE_TURBOQUANT: hwtune's compressed KV cache (``hwtune.kernels.turboquant``).

The problem's cache holds the source K/V; ``prepare`` quantises every slot into TurboQuant pages (the
engine would have written them at append time, so it is not timed) and the gate compares the output with
the float32 reference on the *dequantised* cache, as for fp8. The error against attention on the original
bf16 values is what docs/kernels.md reports separately (it is the format's loss, not a bug).
"""

from __future__ import annotations

import dataclasses

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import Candidate, Runner, Unsupported, triton_gpu_unavailable
from hwtune.probes.attention.problem import AttentionProblem


def _tq():  # noqa: ANN202 - module
    from hwtune.kernels import turboquant

    return turboquant


class TurboQuantRunner(Runner):
    """Wraps ``kernels.turboquant.paged_attention``; ``prepare`` quantises the source cache into TurboQuant pages
    (untimed), and the gate compares against the reference on the dequantised cache."""

    returns_lse = True
    supports_graphs = True

    def __init__(self, bits: int) -> None:
        super().__init__()
        self.tq = _tq()
        self.bits = bits
        self.cache = None
        self.problem: AttentionProblem | None = None

    def _source(self, p: AttentionProblem) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = p.k_cache(), p.v_cache()
        if p.layout == "HND":
            k, v = k.transpose(1, 2), v.transpose(1, 2)
        slots = k.shape[0] * k.shape[1]
        return k.reshape(slots, *k.shape[2:]), v.reshape(slots, *v.shape[2:])

    def prepare(self, p: AttentionProblem) -> None:
        self._alloc(p, lse=True)
        self.problem = p
        spec = p.spec
        if self.cache is None:
            self.cache = self.tq.allocate_cache(
                p.kv_cache.shape[0],
                p.page_size,
                spec.num_kv_heads,
                spec.head_size,
                self.bits,
                p.q.device,
                layout=p.layout,
            )
            self.slots = torch.arange(p.kv_cache.shape[0] * p.page_size, device=p.q.device)
        k, v = self._source(p)
        self.tq.write(self.cache, k.contiguous(), v.contiguous(), self.slots)

    def reference_problem(self, p: AttentionProblem) -> AttentionProblem:
        k, v = self.tq.dequantize(self.cache)  # float, NHD [blocks, page, kv_heads, dim]
        kv = torch.stack([k, v], dim=1).float()
        if p.layout == "HND":
            kv = kv.transpose(2, 3)
        return dataclasses.replace(p, kv_cache=kv)

    def run(self) -> None:
        p = self.problem
        assert p is not None and self.out is not None
        self.tq.paged_attention(
            p.q,
            self.cache,
            p.block_table,
            p.seq_lens,
            p.query_start_loc,
            max_query_len=p.max_query_len,
            max_seq_len=p.max_seq_len,
            out=self.out,
            lse=self.lse,
            softmax_scale=p.softmax_scale,
        )


class TurboQuantCandidate(Candidate):
    """TURBOQUANT's one tactic, ``auto``; the bit width comes from the spec's turboquant_* kv-cache dtype."""

    backend = "HWTUNE_TURBOQUANT"

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        return triton_gpu_unavailable(device)

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        bits = {"turboquant_4bit": 4, "turboquant_8bit": 8}.get(workload.spec.kv_cache_dtype)
        if bits is None:
            raise Unsupported(f"TURBOQUANT needs a turboquant_* kv-cache dtype, not {workload.spec.kv_cache_dtype}")
        if tactic != "auto":
            raise Unsupported(f"TURBOQUANT has no tactic {tactic!r}")
        return TurboQuantRunner(bits)

"""Decode context parallelism's prefill path, on one GPU: DCP simulated with virtual ranks.

With DCP the cached KV of each request is spread over the DCP ranks (here page by page, round robin), and a
prefill chunk's new tokens attend
1. to the cached prefix: on each rank's share, through the paged kernel with no mask (every cached token
   precedes every new token), returning the LSE; the shares merge by LSE (the engines' cross-rank reduction);
2. to each other: through a ragged (non-paged) causal kernel over the new tokens' own K and V, which are
   ``[tokens, kv_heads, dim]`` (NHD) whatever layout the cache has;
and the two partial results merge by LSE. A wrapper built with the cache's layout for the new tokens (HND on an
NHD tensor) is the engine bug this path exists to catch: it crashes or reads the wrong elements, and the gate
records that instead of a time.

Attention sinks (gpt-oss) belong to the new tokens' kernel only (``DcpPrefillInputs.sinks``); the prefix shares carry
none (``AttentionProblem.sinks`` is None on each), so the merge by LSE counts each head's sink once whatever the
number of ranks, and a batch without cached prefix (no shares) still has it. A runner that cannot apply sinks in
its new-token kernel must refuse a spec with sinks (FlashInfer's does: its ragged wrapper takes none, and vLLM
refuses sinks in FlashInfer's DCP prefill too).

``DcpPrefillRunner`` is the contract: a candidate supplies the two kernels (``context``, ``new_tokens``); the
runner prepares the inputs, merges, and exposes the merged output to the same gate as any runner. For timing,
``ranks = (0,)`` makes ``run`` do one rank's work: its share of the prefix, the new tokens and the merges.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass, replace

import torch

from hwtune.probes.attention.candidates.base import Runner
from hwtune.probes.attention.problem import AttentionProblem, _cumsum
from hwtune.probes.attention.reference import merge_by_lse
from hwtune.probes.contract import Unsupported


@dataclass
class DcpPrefillInputs:
    """What the two kernels read: each virtual rank's share of the cached prefix (as paged problems over the
    same cache, ``causal=False``) and the new tokens' q, K and V as ragged NHD tensors."""

    shares: list[AttentionProblem]
    q: torch.Tensor  # [tokens, num_heads, dim]
    k_new: torch.Tensor  # [tokens, kv_heads, dim], NHD, model dtype
    v_new: torch.Tensor
    qo_indptr: torch.Tensor  # int32 [batch + 1]: rows of each request in q, k_new and v_new
    problem: AttentionProblem  # the whole batch (spec, layout, cache)
    #: float32 [num_heads] sink logits for the new tokens' kernel (counted once); None without sinks.
    sinks: torch.Tensor | None = None


def _share_rows(problem: AttentionProblem, dcp_size: int) -> list[tuple[list[int], list[torch.Tensor]]]:
    """Per virtual rank: each request's token count and pages of its cached prefix (pages dealt round robin)."""
    page = problem.page_size
    shares: list[tuple[list[int], list[torch.Tensor]]] = [([], []) for _ in range(dcp_size)]
    for r, (m, n) in enumerate(zip(problem.query_lens, problem.seq_lens_list)):
        prefix = n - m
        pages = math.ceil(prefix / page)
        if pages < dcp_size:
            raise Unsupported(
                f"the DCP prefill check deals cached pages to {dcp_size} virtual ranks; request {r} has "
                f"{prefix} cached tokens ({pages} page(s)), so a rank would get none"
            )
        for k in range(dcp_size):
            idx = list(range(k, pages, dcp_size))
            shares[k][0].append(sum(min(page, prefix - i * page) for i in idx))
            shares[k][1].append(problem.block_table[r, idx])
    return shares


def _share(problem: AttentionProblem, lens: list[int], rows: list[torch.Tensor]) -> AttentionProblem:
    """A paged problem over ``rows``' pages of the same cache: the same queries, no causal mask."""
    dev = problem.q.device
    page = problem.page_size
    table = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.int32, device=dev)
    for i, r in enumerate(rows):
        table[i, : len(r)] = r
    last = [n - (len(r) - 1) * page for n, r in zip(lens, rows)]
    return replace(
        problem,
        seq_lens_list=list(lens),
        block_table=table,
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=dev),
        kv_indptr=torch.tensor([0] + _cumsum([len(r) for r in rows]), dtype=torch.int32, device=dev),
        kv_indices=torch.cat(rows).to(torch.int32),
        kv_last_page_len=torch.tensor(last, dtype=torch.int32, device=dev),
        extras={},
        causal=False,
        sinks=None,  # the sink goes with the new tokens' kernel, once
    )


def _new_tokens_kv(problem: AttentionProblem) -> tuple[torch.Tensor, torch.Tensor]:
    """The new tokens' K and V, ragged ``[tokens, kv_heads, dim]`` in the model dtype (fp8 caches dequantised),
    as the engine holds them before writing them into the cache."""
    ks, vs = [], []
    for r, m in enumerate(problem.query_lens):
        k, v = problem.gather_kv(r)  # float32 [n, kv_heads, dim]
        ks.append(k[k.shape[0] - m :])
        vs.append(v[v.shape[0] - m :])
    dtype = problem.q.dtype
    return torch.cat(ks).to(dtype).contiguous(), torch.cat(vs).to(dtype).contiguous()


def dcp_prefill_inputs(problem: AttentionProblem, dcp_size: int) -> DcpPrefillInputs:
    """Split ``problem`` (a prefill batch) into the DCP prefill path's inputs for ``dcp_size`` virtual ranks; a
    batch with no cached prefix at all has no shares (the new tokens are the whole computation)."""
    if problem.spec.sliding_window is not None:
        raise Unsupported("hwtune's DCP prefill check does not model sliding windows (positions across ranks)")
    no_prefix = all(m == n for m, n in zip(problem.query_lens, problem.seq_lens_list))
    shares = [] if no_prefix else [_share(problem, *rows) for rows in _share_rows(problem, dcp_size)]
    k_new, v_new = _new_tokens_kv(problem)
    return DcpPrefillInputs(shares, problem.q, k_new, v_new, problem.query_start_loc, problem, problem.sinks)


class DcpPrefillRunner(Runner):
    """A candidate's DCP prefill path: ``plan`` the kernels for the inputs, ``context(k)`` is virtual rank k's
    paged attention over its share, ``new_tokens()`` the ragged causal attention; each returns (out, natural
    LSE). ``run`` merges them into ``out``/``lse`` (every rank, or ``ranks`` for one rank's timed work)."""

    returns_lse = True

    def __init__(self, dcp_size: int) -> None:
        super().__init__()
        self.dcp_size = dcp_size
        self.ranks: tuple[int, ...] | None = None
        self.inputs: DcpPrefillInputs | None = None

    def prepare(self, problem: AttentionProblem) -> None:
        """Split ``problem`` into the path's inputs (``dcp_prefill_inputs``) and plan the kernels; not timed."""
        self._alloc(problem, lse=True)
        self.inputs = dcp_prefill_inputs(problem, self.dcp_size)
        self.plan(self.inputs)

    @abstractmethod
    def plan(self, inputs: DcpPrefillInputs) -> None:
        """Build and plan the kernels for ``inputs`` (not timed)."""

    @abstractmethod
    def context(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Virtual rank ``k``'s attention over its share of the cached prefix: (out, natural-log LSE)."""

    @abstractmethod
    def new_tokens(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The new tokens' causal attention over their own K and V: (out, natural-log LSE)."""

    def run(self) -> None:
        """New tokens first, then each selected rank's share merged in by LSE, into ``out``/``lse``."""
        assert self.inputs is not None and self.out is not None and self.lse is not None
        ranks = range(len(self.inputs.shares)) if self.ranks is None else self.ranks
        out, lse = self.new_tokens()
        for k in ranks:
            if k < len(self.inputs.shares):
                out, lse = merge_by_lse(out, lse, *self.context(k))
        self.out.copy_(out)
        self.lse.copy_(lse)

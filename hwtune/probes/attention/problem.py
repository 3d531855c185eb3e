"""Concrete attention inputs built from a workload: a paged KV cache as engines keep it.

The cache is FlashInfer's single tensor ``[num_pages, 2, page, kv_heads, dim]`` (NHD) or
``[num_pages, 2, kv_heads, page, dim]`` (HND); K and V are the ``[:, 0]`` / ``[:, 1]`` views, so candidates
that take separate K/V get strided views, as in vLLM. Pages are assigned in a random order (a kernel that
assumes contiguous pages fails), and every cache slot that no request owns holds a large finite value, so a
kernel that reads past a request's length produces a wrong answer instead of silently passing.

Each request ``r`` has ``query_lens[r]`` new tokens at the end of its ``seq_lens[r]`` tokens (the new tokens'
K/V are already in the cache, as engines write them before attention). The metadata is kept in both forms
candidates want: vLLM's (block_table, seq_lens, query_start_loc) and FlashInfer's CSR
(kv_indptr, kv_indices, kv_last_page_len).

Attention sinks (gpt-oss): with ``spec.sinks`` the problem carries ``sinks``, one float32 logit per query head (the
model's learned ``sinks`` parameter): an extra entry in every row's softmax denominator that contributes no value.
They are random but seeded (``sink_logits``), N(0, 1) plus the log of the row's expected softmax denominator, so a
sink takes about half of each row's probability mass and a kernel that drops it is off by order one. Like the
fp8 scales they are a layer's parameters: the second batch keeps the first batch's tensor (same values, same
address). A DCP share carries them on one share only (``split_halves``), so that merging by LSE counts the sink once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.probes.contract import Unsupported

FP8_MAX = 448.0  # float8_e4m3fn's largest finite value
POISON = 3.0e4  # what unowned cache slots hold: finite, but ruinous if attended to

_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a normalised dtype name (``AttentionSpec.dtype``)."""
    return _TORCH_DTYPES[name]


@dataclass
class AttentionProblem:
    """Tensors and metadata for one batch of one workload (all on ``device``)."""

    workload: AttentionWorkload
    layout: str  # "NHD" | "HND"
    q: torch.Tensor  # [num_tokens, num_heads, head_size], model dtype
    kv_cache: torch.Tensor  # paged, model dtype or float8_e4m3fn
    k_scale: float
    v_scale: float
    query_lens: list[int]
    seq_lens_list: list[int]
    block_table: torch.Tensor  # int32 [batch, max_pages]
    seq_lens: torch.Tensor  # int32 [batch]
    query_start_loc: torch.Tensor  # int32 [batch + 1]
    kv_indptr: torch.Tensor  # int32 [batch + 1]
    kv_indices: torch.Tensor  # int32 [total pages]
    kv_last_page_len: torch.Tensor  # int32 [batch]
    softmax_scale: float
    seed: int
    extras: dict = field(default_factory=dict)
    #: False for a DCP context share: the queries follow every key in it, so none is masked.
    causal: bool = True
    #: Attention sinks (gpt-oss): float32 [num_heads] logits, one extra softmax-denominator entry per row with no value;
    #: None without sinks, and on every DCP share but one (the sink is counted once across shares).
    sinks: torch.Tensor | None = None

    @property
    def spec(self):  # noqa: ANN201 - AttentionSpec
        """The workload's AttentionSpec."""
        return self.workload.spec

    @property
    def batch(self) -> int:
        """Requests in the batch."""
        return len(self.seq_lens_list)

    @property
    def num_tokens(self) -> int:
        """Query tokens of the whole batch (rows of ``q`` and ``out``)."""
        return int(sum(self.query_lens))

    @property
    def max_query_len(self) -> int:
        """The longest request's new tokens (kernels size their query tiles from it)."""
        return max(self.query_lens)

    @property
    def max_seq_len(self) -> int:
        """The longest request's context, new tokens included."""
        return max(self.seq_lens_list)

    @property
    def page_size(self) -> int:
        """Tokens per cache page (the spec's block size)."""
        return self.spec.block_size

    @property
    def is_fp8(self) -> bool:
        """Whether the cache is float8_e4m3fn, so readers must apply ``k_scale``/``v_scale``."""
        return self.kv_cache.dtype == torch.float8_e4m3fn

    def k_cache(self) -> torch.Tensor:
        """K as a strided view of the joint cache (``[:, 0]``), as vLLM hands separate K/V to kernels."""
        return self.kv_cache[:, 0]

    def v_cache(self) -> torch.Tensor:
        """V as a strided view of the joint cache (``[:, 1]``)."""
        return self.kv_cache[:, 1]

    def gather_kv(self, r: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of request ``r`` as float32 [seq_len, kv_heads, dim], fp8 caches dequantized."""
        n = self.seq_lens_list[r]
        pages = self.block_table[r, : math.ceil(n / self.page_size)].long()
        sel = self.kv_cache[pages].float()  # [pages, 2, ...]
        if self.layout == "HND":
            sel = sel.transpose(2, 3)  # -> [pages, 2, page, heads, dim]
        k = sel[:, 0].reshape(-1, sel.shape[-2], sel.shape[-1])[:n]
        v = sel[:, 1].reshape(-1, sel.shape[-2], sel.shape[-1])[:n]
        if self.is_fp8:
            k, v = k * self.k_scale, v * self.v_scale
        return k, v

    def query_slice(self, r: int) -> slice:
        """Rows of request ``r``'s new tokens in ``q``/``out`` (requests are packed in order)."""
        start = int(sum(self.query_lens[:r]))
        return slice(start, start + self.query_lens[r])


def batch_lengths(w: AttentionWorkload) -> tuple[list[int], list[int]]:
    """Per-request (query_lens, seq_lens) of the workload's batch."""
    seq = list(w.context_lens) if w.context_lens is not None else [w.context_len] * w.batch
    if w.phase == "mixed":
        # the first num_prefill requests are prefill chunks, the rest decode steps of 1 + spec_tokens tokens
        qd = w.spec.query_len_decode
        query = [min(w.query_len, s) for s in seq[: w.num_prefill]] + [min(qd, s) for s in seq[w.num_prefill :]]
    else:
        query = [min(w.query_len, s) for s in seq]
    return query, seq


def varied_lengths(w: AttentionWorkload, seed: int, uniform: bool = False) -> AttentionWorkload:
    """The same workload with each request's context changed a little: a second, different batch.

    Used to catch stale metadata: a plan or graph built for one batch must give right answers for the next.
    ``uniform`` changes every request by the same amount, for kernels that only take uniform batches.
    """
    g = torch.Generator().manual_seed(seed)
    _, seq = batch_lengths(w)
    span = max(1, w.spec.block_size + 3)
    lens = []
    common = 1 + int(torch.randint(0, span, (1,), generator=g))
    for s in seq:
        delta = common if uniform else int(torch.randint(0, span, (1,), generator=g))
        lens.append(max(w.query_len if w.phase != "decode" else w.spec.query_len_decode, s - delta))
    return replace(w, context_lens=tuple(lens))


def second_batch_lengths(w: AttentionWorkload, seed: int, uniform: bool = False) -> tuple[list[int], list[int]]:
    """(query_lens, seq_lens) of the stale-metadata check's second batch: contexts varied as in ``varied_lengths``
    and, where requests have different query lengths (a mixed batch: prefill chunks and decode steps of
    1 + spec_tokens tokens), the requests rotated by one, so every position's query length and start change
    while the batch and token counts stay (a captured graph's buffers fit). A plan that kept the first batch's
    prefill lengths or query offsets then reads the wrong rows."""
    query, seq = batch_lengths(varied_lengths(w, seed, uniform))
    if len(set(query)) > 1:
        query, seq = query[1:] + query[:1], seq[1:] + seq[:1]
    return query, seq


def _page_tables(
    pages_per: list[int], total_pages: int, max_pages: int, g: torch.Generator
) -> tuple[torch.Tensor, list[torch.Tensor], list[int]]:
    """A block table over randomly ordered pages (as an engine's allocator leaves them), and the same pages
    as FlashInfer's indices/indptr."""
    perm = torch.randperm(total_pages, generator=g).to(torch.int32)
    block_table = torch.zeros(len(pages_per), max_pages, dtype=torch.int32)
    indices, indptr, pos = [], [0], 0
    for r, n in enumerate(pages_per):
        block_table[r, :n] = perm[pos : pos + n]
        indices.append(perm[pos : pos + n])
        pos += n
        indptr.append(pos)
    return block_table, indices, indptr


def _cache_dtype(
    kv: torch.Tensor, kv_cache_dtype: str, unowned: torch.Tensor, layout: str, like: AttentionProblem | None
) -> tuple[torch.Tensor, float, float]:
    """The cache in the spec's kv-cache dtype, with its per-tensor scales (1.0 where none)."""
    if kv_cache_dtype == "fp8_e4m3":
        if like is not None:  # scales are per layer and fixed, as in engines (and baked into captured graphs)
            k_scale, v_scale = like.k_scale, like.v_scale
        else:
            owned = ~unowned
            k_scale = _owned_absmax(kv[:, 0], owned, layout) / FP8_MAX
            v_scale = _owned_absmax(kv[:, 1], owned, layout) / FP8_MAX
        fp8 = torch.empty(kv.shape, dtype=torch.float8_e4m3fn, device=kv.device)
        fp8[:, 0] = (kv[:, 0].float() / k_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        fp8[:, 1] = (kv[:, 1].float() / v_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return fp8, k_scale, v_scale
    if kv_cache_dtype in ("bfloat16", "float16"):
        return kv.to(torch_dtype(kv_cache_dtype)), 1.0, 1.0
    if kv_cache_dtype.startswith("turboquant") or kv_cache_dtype == "auto":
        return kv, 1.0, 1.0  # turboquant: model-dtype source values; the candidate quantises them itself
    raise ValueError(f"hwtune's problem builder has no {kv_cache_dtype} cache")


def _write_into(like: AttentionProblem, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Copy the new batch (kv, q, block table, seq lens, last-page lens, query starts) into ``like``'s
    buffers and return those buffers, so every address a captured graph reads stays the same."""
    targets = (like.kv_cache, like.q, like.block_table, like.seq_lens, like.kv_last_page_len, like.query_start_loc)
    for dst, src in zip(targets, tensors):
        dst.copy_(src)
    return targets


def build_problem(
    workload: AttentionWorkload,
    device: str | torch.device,
    *,
    seed: int = 0,
    layout: str | None = None,
    like: AttentionProblem | None = None,
    lengths: tuple[list[int], list[int]] | None = None,
) -> AttentionProblem:
    """Random inputs for ``workload``: normal q/K/V, random page order, poisoned unowned slots; ``lengths``
    (query_lens, seq_lens) replaces the workload's per-request lengths where given.

    With ``like``, the new batch is written into ``like``'s tensors in place (same cache, same q buffer,
    same metadata shapes), as an engine reuses its buffers from step to step; a captured CUDA graph then
    sees the new batch. ``like`` must have at least as many pages and the same batch and token counts.
    An MLA spec gets an ``MlaProblem`` (latent cache, absorbed queries; ``hwtune.probes.attention.mla``).
    """
    spec = workload.spec
    if spec.use_mla and spec.sinks:
        raise Unsupported("hwtune's MLA probe carries no attention sinks (no MLA model uses them)")
    if spec.use_mla:  # one latent KV head, absorbed queries: hwtune.probes.attention.mla
        from hwtune.probes.attention.mla import build_mla_problem

        return build_mla_problem(workload, device, seed=seed, like=like, lengths=lengths)
    if like is not None:
        layout = like.layout
    layout = layout or ("NHD" if spec.kv_layout == "auto" else spec.kv_layout)
    dtype = torch_dtype(spec.dtype)
    device = torch.device(device)
    g = torch.Generator().manual_seed(seed)
    query_lens, seq_lens = lengths or batch_lengths(workload)
    page = spec.block_size
    pages_per = [math.ceil(s / page) for s in seq_lens]
    total_pages = sum(pages_per) + 1  # one spare page never referenced
    max_pages = max(pages_per)
    if like is not None:
        if like.batch != len(seq_lens) or like.num_tokens != sum(query_lens) or like.kv_cache.shape[0] < total_pages:
            raise ValueError("build_problem(like=...) needs the same batch and tokens and no more pages")
        total_pages, max_pages = like.kv_cache.shape[0], like.block_table.shape[1]
    block_table, indices, indptr = _page_tables(pages_per, total_pages, max_pages, g)
    last_page = [s - (n - 1) * page for s, n in zip(seq_lens, pages_per)]

    h, d = spec.num_kv_heads, spec.head_size
    shape = (total_pages, 2, page, h, d) if layout == "NHD" else (total_pages, 2, h, page, d)
    gdev = torch.Generator(device=device).manual_seed(seed)
    kv = torch.randn(shape, generator=gdev, dtype=dtype, device=device)
    unowned = _unowned_mask(block_table, seq_lens, total_pages, page).to(device)
    _poison(kv, unowned, layout)
    kv, k_scale, v_scale = _cache_dtype(kv, spec.kv_cache_dtype, unowned, layout, like)

    q = torch.randn(sum(query_lens), spec.num_heads, d, generator=gdev, dtype=dtype, device=device)
    qsl = torch.tensor([0] + list(_cumsum(query_lens)), dtype=torch.int32)
    block_table = block_table.to(device)
    seq_t = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    last_t = torch.tensor(last_page, dtype=torch.int32, device=device)
    qsl = qsl.to(device)
    if like is not None:  # same addresses as the previous batch
        kv, q, block_table, seq_t, last_t, qsl = _write_into(like, kv, q, block_table, seq_t, last_t, qsl)
    return AttentionProblem(
        workload=workload,
        layout=layout,
        q=q,
        kv_cache=kv,
        k_scale=k_scale,
        v_scale=v_scale,
        query_lens=query_lens,
        seq_lens_list=seq_lens,
        block_table=block_table,
        seq_lens=seq_t,
        query_start_loc=qsl,
        kv_indptr=torch.tensor(indptr, dtype=torch.int32, device=device),
        kv_indices=torch.cat(indices).to(device),
        kv_last_page_len=last_t,
        softmax_scale=1.0 / math.sqrt(d),
        seed=seed,
        sinks=_layer_sinks(workload, seed, device, like),
    )


def _layer_sinks(
    workload: AttentionWorkload, seed: int, device: torch.device, like: AttentionProblem | None
) -> torch.Tensor | None:
    """The problem's sinks: None without ``spec.sinks``; a layer's parameter, so ``like``'s very tensor when given
    (kept through later batches, as the fp8 scales are), else ``sink_logits``."""
    if not workload.spec.sinks:
        return None
    return like.sinks if like is not None and like.sinks is not None else sink_logits(workload, seed, device)


def sink_logits(workload: AttentionWorkload, seed: int, device: str | torch.device) -> torch.Tensor:
    """The seeded sink logits of ``workload``'s layer: float32 [num_heads] (bf16 values), N(0, 1) plus
    log(mean context) + 0.5.

    With unit-variance q and K and the 1/sqrt(d) scale the logits are about N(0, 1), so a row's softmax denominator
    is about ``n * exp(0.5)`` for ``n`` keys; the offset makes ``exp(sink)`` of that size, so the sink takes roughly
    half the mass (between about a quarter and three quarters, by head). Drawn from their own generator, so the
    other tensors of a problem are the same with and without sinks."""
    _, seq = batch_lengths(workload)
    g = torch.Generator().manual_seed(seed * 7919 + 17)
    offset = math.log(max(1.0, sum(seq) / len(seq))) + 0.5
    sinks = torch.randn(workload.spec.num_heads, generator=g) + offset
    # values a bf16 checkpoint holds (gpt-oss's are bf16): kernels that take bf16 sinks (FA3's s_aux) get them exactly
    return sinks.to(torch.bfloat16).float().to(torch.device(device))


def _cumsum(xs: list[int]) -> list[int]:
    out, acc = [], 0
    for x in xs:
        acc += x
        out.append(acc)
    return out


def _unowned_mask(block_table: torch.Tensor, seq_lens: list[int], total_pages: int, page: int) -> torch.Tensor:
    """[pages, page] bool: True where no request owns the slot."""
    owned = torch.zeros(total_pages, page, dtype=torch.bool)
    for r, n in enumerate(seq_lens):
        pages = block_table[r, : math.ceil(n / page)].long()
        flat = torch.zeros(len(pages) * page, dtype=torch.bool)
        flat[:n] = True
        owned[pages] = flat.view(len(pages), page)
    return ~owned


def _slot_mask(mask: torch.Tensor, layout: str, ndim: int) -> torch.Tensor:
    """Broadcast a [pages, page] mask over a K or V tensor (ndim 4) or the whole cache (ndim 5)."""
    if ndim == 5:
        return mask[:, None, :, None, None] if layout == "NHD" else mask[:, None, None, :, None]
    return mask[:, :, None, None] if layout == "NHD" else mask[:, None, :, None]


def _poison(kv: torch.Tensor, unowned: torch.Tensor, layout: str) -> None:
    kv.masked_fill_(_slot_mask(unowned, layout, 5), POISON)


def _owned_absmax(x: torch.Tensor, owned: torch.Tensor, layout: str) -> float:
    return float(x.abs().masked_fill(~_slot_mask(owned, layout, 4), 0).max().float())


def split_halves(problem: AttentionProblem) -> tuple[AttentionProblem, AttentionProblem]:
    """Decode Context Parallelism check: each request's KV split page-aligned into two halves.

    Returns two problems over the same cache and queries whose attention, merged by LSE, must equal
    attention over the whole KV. The cut lies within the cached prefix, so with several query tokens per
    request (speculative decoding) every query sees all of the first half (``causal=False``) and the
    second half ends with the new tokens, where the causal offset applies as in the whole problem.
    Attention sinks go with the first half only (as vLLM's Triton kernel loads them in KV segment 0 only): a
    share's LSE includes its sink, so the merge counts the sink exactly once; the second half has none.
    """
    page = problem.page_size
    halves: list[tuple[list[int], list[torch.Tensor]]] = [([], []), ([], [])]
    for r, (m, n) in enumerate(zip(problem.query_lens, problem.seq_lens_list)):
        pages = math.ceil(n / page)
        cut_pages = min(pages // 2, (n - m) // page)
        if cut_pages < 1:
            raise ValueError("the DCP split check needs at least one full cached page before the new tokens")
        cut = cut_pages * page
        row = problem.block_table[r]
        halves[0][0].append(cut)
        halves[0][1].append(row[:cut_pages])
        halves[1][0].append(n - cut)
        halves[1][1].append(row[cut_pages:pages])
    first = _with_pages(problem, *halves[0])
    if problem.max_query_len > 1:
        first = replace(first, causal=False)
    return first, replace(_with_pages(problem, *halves[1]), sinks=None)


def _with_pages(p: AttentionProblem, lens: list[int], rows: list[torch.Tensor]) -> AttentionProblem:
    dev = p.q.device
    width = max(len(r) for r in rows)
    table = torch.zeros(len(rows), width, dtype=torch.int32, device=dev)
    for i, r in enumerate(rows):
        table[i, : len(r)] = r
    page = p.page_size
    indptr = torch.tensor([0] + _cumsum([len(r) for r in rows]), dtype=torch.int32, device=dev)
    last = [n - (len(r) - 1) * page for n, r in zip(lens, rows)]
    workload = replace(p.workload, context_lens=tuple(lens), context_len=max(lens))
    return replace(
        p,
        workload=workload,
        seq_lens_list=list(lens),
        block_table=table,
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=dev),
        kv_indptr=indptr,
        kv_indices=torch.cat(rows).to(torch.int32),
        kv_last_page_len=torch.tensor(last, dtype=torch.int32, device=dev),
        extras={},
    )

"""FLEX_ATTENTION: torch's flex_attention over the paged cache, with the block mask built from the page table.

As vLLM's FlexAttention backend does, the cache is kept in flex's own layout (K and V as contiguous
``[1, kv_heads, num_slots, dim]`` tensors: what an engine using flex would allocate) and the queries of
the whole batch are packed into one sequence. The mask maps each physical cache slot back to its owning
request and logical position through the page table, so a query sees exactly its own request's tokens up
to its position (and within the sliding window). Building the mask is per-step metadata (``prepare``, not timed;
eager up to ``EAGER_MASK_ELEMENTS``, see ``compile_mask``); the compiled ``flex_attention`` call is timed. On CUDA
it is compiled with dynamic shapes, as an engine runs it (``_flex``): on an H100 (2026-11-27,
benchmarks/experiments/flex_dynamic.py) the first decode and prefill shapes compiled in 4-8 s and every later shape
reused them (the worker resets the compiler per spec, not per job), where a compile per shape took 2.4-6.7 s each;
decode ran within 6 % of the per-shape kernels, a 512-token prefill 1.45x slower (71.7 against 49.5 us).

Attention sinks (gpt-oss; flex has no sink argument, and its compiled CPU path returns no LSE to correct the
output by): flex's cache copy gets one more page of zeros, whose first slot is the sink's key. The mask lets every
query see it and ``score_mod`` replaces its score by the head's sink logit; its value is zero. So the softmax
denominator gains ``exp(sink)`` and the output nothing, exactly, and the returned LSE (CUDA) includes the sink.
"""

from __future__ import annotations

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.kernels.configs import cdiv
from hwtune.probes.attention.candidates.base import Candidate, Runner, Unsupported
from hwtune.probes.attention.problem import AttentionProblem

_COMPILED: dict[bool, object] = {}

#: Query x KV-slot pairs (each padded to flex's 128-wide blocks) up to which the block mask is built eagerly: the mask
#: function then runs over the whole grid, with intermediates of about 12 bytes per pair (up to some 12 GB at the
#: limit); beyond it torch.compile fuses them away.
EAGER_MASK_ELEMENTS = 1 << 30
_FLEX_BLOCK = 128


def compile_mask(device_type: str, num_queries: int, kv_slots: int) -> bool:
    """Whether ``create_block_mask`` should compile the mask function. Compiled, it recompiled at nearly every new
    workload of a tune (guards on the query and KV lengths and on 0/1 sizes): on an H100 (2026-11-27,
    benchmarks/experiments/flex_mask.py) 5-8 s of a workload's 5-14 s of FLEX compilation. Eager it took 0.02-0.1 s
    at every Llama-3.1-8B plan shape after the first (7 s with the process's CUDA start-up), up to batch 256 x 8192
    tokens (0.54 G padded pairs), with no higher peak memory than compiled at decode shapes and 747 against 163 MiB
    at an 8192-token prefill. On the CPU it is always built eagerly."""
    pairs = cdiv(num_queries, _FLEX_BLOCK) * cdiv(kv_slots, _FLEX_BLOCK) * _FLEX_BLOCK**2
    return device_type == "cuda" and pairs > EAGER_MASK_ELEMENTS


def _flex(dynamic: bool):  # noqa: ANN202 - the compiled callable
    """``torch.compile(flex_attention)``: with dynamic shapes on CUDA, as an engine runs it (vLLM 0.33.0
    v1/attention/backends/flex_attention.py compiles it once, ``torch.compile(flex_attention, fullgraph=True)``, and
    dynamo's automatic dynamic recompiles with dynamic sizes at the second shape); static on the CPU, where torch
    2.13's inductor fails to build flex with dynamic shapes (C++ compile error, 'cur_qSplitSize2' was not declared)."""
    from torch.nn.attention.flex_attention import flex_attention

    if dynamic not in _COMPILED:
        _COMPILED[dynamic] = torch.compile(flex_attention, dynamic=dynamic)
    return _COMPILED[dynamic]


def _flex_cache(problem: AttentionProblem) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V in flex's own layout ``[1, kv_heads, slots, dim]``, copied from the engine cache (not timed: it is the
    engine's cache); with sinks, one more page of zeros, whose first slot is the sink's key (module docstring)."""
    k, v = problem.k_cache(), problem.v_cache()
    if problem.layout == "HND":
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # -> [pages, page, H, D]
    if problem.sinks is not None:
        k = torch.cat([k, k.new_zeros(1, *k.shape[1:])])
        v = torch.cat([v, v.new_zeros(1, *v.shape[1:])])
    slots = k.shape[0] * k.shape[1]
    return (
        k.reshape(slots, *k.shape[2:]).transpose(0, 1)[None].contiguous(),
        v.reshape(slots, *v.shape[2:]).transpose(0, 1)[None].contiguous(),
    )


def _sink_score_mod(sinks: torch.Tensor, sink_slot: int):  # noqa: ANN202 - flex's score_mod
    """A flex ``score_mod`` that sets the sink slot's score to each head's sink logit and leaves every other score."""

    def score_mod(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 - flex's calling convention
        return torch.where(kv_idx == sink_slot, sinks[h].to(score.dtype), score)

    return score_mod


class FlexRunner(Runner):
    """Wraps ``torch.compile(flex_attention)`` over the cache copied into flex's contiguous layout, with a block mask
    built from the page table in ``prepare``; returns LSE on CUDA only (inductor's CPU lowering lacks it)."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.problem: AttentionProblem | None = None
        # compiled flex on CPU supports inference only, without return_lse (torch inductor's CPU lowering)
        self.returns_lse = device == "cuda"
        self.dynamic = device == "cuda"  # see _flex

    def prepare(self, problem: AttentionProblem) -> None:
        from torch.nn.attention.flex_attention import create_block_mask

        self._alloc(problem, lse=self.returns_lse)
        self.problem = problem
        dev = problem.q.device
        page = problem.page_size
        spec = problem.spec
        sinks = problem.sinks
        self.k, self.v = _flex_cache(problem)
        kv_len = self.k.shape[2]
        sink_slot = problem.kv_cache.shape[0] * page  # the first slot of the extra page, when there are sinks
        owner = torch.full((kv_len // page,), -1, dtype=torch.int32)
        lpage = torch.zeros(kv_len // page, dtype=torch.int32)
        table = problem.block_table.cpu()
        for r, n in enumerate(problem.seq_lens_list):
            used = -(-n // page)
            owner[table[r, :used].long()] = r
            lpage[table[r, :used].long()] = torch.arange(used, dtype=torch.int32)
        req, qpos = [], []
        for r, (m, n) in enumerate(zip(problem.query_lens, problem.seq_lens_list)):
            req += [r] * m
            qpos += list(range(n - m, n))
        owner_d, lpage_d = owner.to(dev), lpage.to(dev)
        req_d = torch.tensor(req, dtype=torch.int32, device=dev)
        qpos_d = torch.tensor(qpos, dtype=torch.int32, device=dev)
        window = spec.sliding_window

        def mask_mod(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 - flex's calling convention
            pg = kv_idx // page
            lpos = lpage_d[pg] * page + kv_idx % page
            visible = (owner_d[pg] == req_d[q_idx]) & (lpos <= qpos_d[q_idx])
            if window is not None:
                visible = visible & (lpos > qpos_d[q_idx] - window)
            if sinks is not None:
                visible = visible | (kv_idx == sink_slot)
            return visible

        self.score_mod = None if sinks is None else _sink_score_mod(sinks.float().to(dev), sink_slot)
        self.block_mask = create_block_mask(
            mask_mod,
            B=None,
            H=None,
            Q_LEN=problem.num_tokens,
            KV_LEN=kv_len,
            device=str(dev),
            _compile=compile_mask(dev.type, problem.num_tokens, kv_len),
        )

    def run(self) -> None:
        p = self.problem
        assert p is not None and self.out is not None
        q = p.q.transpose(0, 1)[None]  # [1, H, T, D]
        result = _flex(self.dynamic)(
            q,
            self.k,
            self.v,
            score_mod=self.score_mod,
            block_mask=self.block_mask,
            scale=p.softmax_scale,
            enable_gqa=p.spec.gqa_group > 1,
            return_lse=self.returns_lse,
        )
        o = result[0] if self.returns_lse else result
        self.out.copy_(o[0].transpose(0, 1))
        if self.lse is not None:
            self.lse.copy_(result[1][0].transpose(0, 1))


class FlexCandidate(Candidate):
    """FLEX_ATTENTION's one tactic, ``compiled``; available wherever torch has flex_attention (CPU included)."""

    backend = "FLEX_ATTENTION"

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        try:
            import torch.nn.attention.flex_attention  # noqa: F401
        except ImportError:
            return f"this torch ({torch.__version__}) has no torch.nn.attention.flex_attention"
        return None

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        if tactic != "compiled":
            raise Unsupported(f"FLEX_ATTENTION has no tactic {tactic!r}")
        return FlexRunner(device)

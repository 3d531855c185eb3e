"""FLASH_ATTN: FlashAttention's paged varlen entry point, when a FlashAttention package is installed.

vLLM's bundled ``vllm.vllm_flash_attn`` is preferred (it takes ``seqused_k`` and any page size that is a
multiple of 16); otherwise Dao-AILab's ``flash_attn`` (whose paged KV needs pages of a multiple of 256
tokens). Tactics pick the FlashAttention version (``fa_version`` 2 or 3 in vllm_flash_attn).

Attention sinks (gpt-oss) go in as ``s_aux`` (bf16 per query head, as FA3 requires), which vllm_flash_attn's FA3
and FA4 take (``flash_attn_varlen_func(s_aux=...)``; FA4 as ``learnable_sink``, whose LSE includes the sink) and FA2
refuses ("FA2 does not support s_aux"); Dao-AILab's flash_attn has no such argument. Those two are unsupported with
sinks.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import Candidate, Runner, Unsupported, import_failure
from hwtune.probes.attention.problem import AttentionProblem

_VERSIONS = {"fa2": 2, "fa3": 3, "fa4": 4}


def flash_attn_module() -> tuple[str, Any] | None:
    """The FlashAttention package here, as (flavour, module): vllm's ``vllm_flash_attn`` first, else Dao-AILab's
    ``flash_attn``; None when neither is installed. Importing may raise (vllm's import, or vllm_flash_attn's when
    neither of its extensions loads): callers turn that into an unavailable reason."""
    if importlib.util.find_spec("vllm") is not None and importlib.util.find_spec("vllm.vllm_flash_attn") is not None:
        import vllm.vllm_flash_attn as m

        return "vllm_flash_attn", m
    if importlib.util.find_spec("flash_attn") is not None:
        import flash_attn as m

        return "flash_attn", m
    return None


def extension_missing(flavour: str, mod: Any, version: int) -> str | None:
    """Why vllm_flash_attn cannot run FlashAttention ``version`` here: its compiled extension for that version did
    not load (``flash_attn_interface.FA{2,3}_AVAILABLE``, read without vllm's platform check, which imports vLLM's
    own ops); None when it loaded or the package does not say."""
    if flavour != "vllm_flash_attn":
        return None
    iface = getattr(mod, "flash_attn_interface", None)
    if getattr(iface, f"FA{version}_AVAILABLE", True):
        return None
    why = getattr(iface, f"FA{version}_UNAVAILABLE_REASON", None) or "no reason given"
    return f"vllm_flash_attn's FA{version} extension (_vllm_fa{version}_C) cannot be loaded: {why}"


def fa3_schedule(
    mod: Any,
    p: AttentionProblem,
    *,
    num_heads_kv: int,
    headdim: int,
    headdim_v: int | None = None,
    window: tuple[int, int] = (-1, -1),
    num_splits: int = 0,
) -> Any:
    """FA3's tile schedule for the batch of ``p``, made ahead of the call as vLLM's FlashAttention metadata builders
    make it once per step (``aot_schedule``, vllm v1/attention/backends/flash_attn.py and mla/flashattn_mla.py);
    without it each call would first run FA3's scheduling kernel. ``num_splits``: 0 for FA3's own split heuristic (vLLM
    outside CUDA graphs), else the most splits (``VLLM_GRAPH_MAX_SPLITS`` in full graphs); the call must pass the same.
    vLLM makes none for a model of more than one sliding-window size (gpt-oss, Gemma-2/3), whose calls schedule
    themselves: a runner that passes this one leaves that cost out there."""
    return mod.get_scheduler_metadata(
        batch_size=p.batch,
        max_seqlen_q=p.max_query_len,
        max_seqlen_k=p.max_seq_len,
        num_heads_q=p.spec.num_heads,
        num_heads_kv=num_heads_kv,
        headdim=headdim,
        headdim_v=headdim_v,
        cache_seqlens=p.seq_lens,
        qkv_dtype=p.kv_cache.dtype,
        cu_seqlens_q=p.query_start_loc,
        page_size=p.page_size,
        causal=True,
        window_size=window,
        num_splits=num_splits,
    )


#: How vLLM 0.25.1 runs FA3 by default (``CUDAGraphMode.FULL_AND_PIECEWISE``): a uniform decode batch (every request
#: the same query length, speculative tokens included) of at most ``VLLM_GRAPH_MAX_TOKENS`` tokens in a full CUDA graph
#: (vllm/v1/cudagraph_dispatcher.py; ``max_cudagraph_capture_size``, min(2 x max_num_seqs x (1 + speculative tokens),
#: 512): vllm/config/vllm.py), any other batch with attention outside the graphs (piecewise). Every batch of at most
#: that many tokens has FA3's splits capped at ``flash_attn_max_num_splits_for_cuda_graph`` (32,
#: vllm/config/attention.py) in the schedule and the call; a larger one gets FA3's own split heuristic
#: (``num_splits=0``, "not CG compatible": vllm/v1/attention/backends/flash_attn.py). Not mirrored: vLLM pads a graphed
#: batch up to its capture size.
VLLM_GRAPH_MAX_TOKENS = 512
VLLM_GRAPH_MAX_SPLITS = 32


def vllm_fa3_mode(p: AttentionProblem) -> tuple[bool, int]:
    """How vLLM runs FA3 on the batch of ``p`` (above): (replayed from a CUDA graph, FA3's split cap)."""
    small = p.num_tokens <= VLLM_GRAPH_MAX_TOKENS
    return small and set(p.query_lens) == {p.spec.query_len_decode}, VLLM_GRAPH_MAX_SPLITS if small else 0


def in_place(*pairs: tuple[torch.Tensor | None, torch.Tensor | None]) -> list[torch.Tensor | None]:
    """For each (kept, new): ``new``'s values in ``kept``'s memory (a captured graph reads ``kept``), or ``new`` itself
    where nothing is kept. Raises, before copying any, where a pair differs in shape or dtype: a graph captured on
    ``kept`` would read stale values."""
    for kept, new in pairs:
        if kept is not None and new is not None and (kept.shape != new.shape or kept.dtype != new.dtype):
            raise ValueError(
                f"this FlashAttention runner was prepared for a batch whose metadata is {tuple(kept.shape)} "
                f"{kept.dtype}, not {tuple(new.shape)} {new.dtype}: a runner serves batches of one shape; make another"
            )
    return [new if kept is None or new is None else kept.copy_(new) for kept, new in pairs]


class FlashAttnRunner(Runner):
    """Wraps ``flash_attn_varlen_func`` with a block table, from vllm's ``vllm_flash_attn`` (``seqused_k``,
    ``fa_version``) or else Dao-AILab's ``flash_attn`` (FA2 only, ``cu_seqlens_k``, pages of 256).

    The timed call is FlashAttention's alone: the LSE it returns (heads first) is kept as it comes (``lse``; in a
    captured graph, the graph's buffer) and transposed in ``lse_natural``, outside the timed call, as FlashInfer's
    base-2 LSE is converted there (vLLM asks for no LSE outside DCP; FA3 writes it anyway). vllm_flash_attn's FA3 runs
    as vLLM runs it (``VLLM_GRAPH_MAX_TOKENS``): a uniform decode batch of up to 512 tokens replayed from a CUDA graph
    (a later ``prepare`` rewrites the tile schedule and sinks in place), any batch of up to 512 tokens with FA3's splits
    capped at 32, a larger one with FA3's own split heuristic."""

    returns_lse = True

    def __init__(self, tactic: str, sinks: bool = False) -> None:
        super().__init__()
        found = flash_attn_module()
        assert found is not None
        self.flavour, self.mod = found
        self.version = _VERSIONS[tactic]
        if self.flavour == "flash_attn" and self.version != 2:
            raise Unsupported(f"the flash_attn package provides FlashAttention-2 only, not tactic {tactic}")
        if sinks and (self.flavour != "vllm_flash_attn" or self.version == 2):
            raise Unsupported(
                "attention sinks need s_aux, which only vllm_flash_attn's FA3 and FA4 take (FA2 raises 'FA2 does not "
                "support s_aux'; Dao-AILab's flash_attn has no sink argument)"
            )
        self.problem: AttentionProblem | None = None
        self.schedule: Any = None  # FA3's tile schedule, made in prepare (vllm_flash_attn FA3 only)
        self.num_splits = 0  # FA3's split cap, set in prepare: 0 (its heuristic) or VLLM_GRAPH_MAX_SPLITS
        self.supports_graphs = False  # set in prepare: a uniform decode batch of FA3's, as vLLM graphs it
        self.s_aux: torch.Tensor | None = None

    def prepare(self, p: AttentionProblem) -> None:
        if p.layout != "NHD":
            raise Unsupported("FlashAttention's paged cache is [blocks, page, heads, dim] (NHD)")
        if self.flavour == "flash_attn" and p.page_size % 256:
            raise Unsupported(
                "flash_attn's paged KV needs a page size that is a multiple of 256 "
                f"(this cache has {p.page_size}); install vllm for vllm_flash_attn"
            )
        # FA3 takes bf16 sinks only (hopper/flash_api.cpp: 'We only support bf16 dtype for S aux'), FA4 bf16 too;
        # the problem's sinks are bf16 values, so nothing is rounded
        s_aux = None if p.sinks is None else p.sinks.to(torch.bfloat16).contiguous()
        fa3 = self.flavour == "vllm_flash_attn" and self.version == 3
        graphed, splits = vllm_fa3_mode(p) if fa3 else (False, 0)
        spec = p.spec
        schedule = (
            fa3_schedule(
                self.mod, p, num_heads_kv=spec.num_kv_heads, headdim=spec.head_size, window=self._window(p),
                num_splits=splits,
            )
            if fa3
            else None
        )  # fmt: skip
        self.s_aux, self.schedule = in_place((self.s_aux, s_aux), (self.schedule, schedule))
        self._alloc(p, lse=False)
        self.problem, self.supports_graphs, self.num_splits = p, graphed, splits
        self.cu_k = torch.cat([torch.zeros(1, dtype=torch.int32, device=p.q.device), p.seq_lens.cumsum(0)]).int()

    @staticmethod
    def _window(p: AttentionProblem) -> tuple[int, int]:
        return (-1, -1) if p.spec.sliding_window is None else (p.spec.sliding_window - 1, 0)

    def run(self) -> None:
        p = self.problem
        assert p is not None and self.out is not None
        spec = p.spec
        window = self._window(p)
        common: dict[str, Any] = dict(
            max_seqlen_q=p.max_query_len,
            max_seqlen_k=p.max_seq_len,
            softmax_scale=p.softmax_scale,
            causal=True,
            window_size=window,
            softcap=spec.logits_soft_cap or 0.0,
            block_table=p.block_table,
        )
        if self.flavour == "vllm_flash_attn":
            _, self.lse = self.mod.flash_attn_varlen_func(
                p.q,
                p.k_cache(),
                p.v_cache(),
                cu_seqlens_q=p.query_start_loc,
                seqused_k=p.seq_lens,
                return_softmax_lse=True,
                fa_version=self.version,
                out=self.out,
                **(
                    {"scheduler_metadata": self.schedule, "num_splits": self.num_splits}
                    if self.schedule is not None
                    else {}
                ),
                **({"s_aux": self.s_aux} if self.s_aux is not None else {}),
                **common,
            )
        else:
            o, self.lse, _ = self.mod.flash_attn_varlen_func(
                p.q,
                p.k_cache(),
                p.v_cache(),
                cu_seqlens_q=p.query_start_loc,
                cu_seqlens_k=self.cu_k,
                return_attn_probs=True,
                **common,
            )
            self.out.copy_(o)

    def lse_natural(self) -> torch.Tensor | None:
        """The last call's LSE as [tokens, heads] (``self.lse`` is as FlashAttention returns it, heads first); not
        timed."""
        lse, p = self.lse, self.problem
        if lse is None or p is None:
            return None
        return lse.transpose(0, 1) if lse.shape[0] == p.spec.num_heads else lse


class FlashAttnCandidate(Candidate):
    """FLASH_ATTN's tactics fa2/fa3/fa4 as FlashAttention versions; CUDA only, fp8 caches not yet (no descale factors
    passed)."""

    backend = "FLASH_ATTN"

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        if device != "cuda":
            return "FlashAttention runs on CUDA GPUs only"
        try:
            found = flash_attn_module()
        except Exception as exc:  # vllm's import, or vllm_flash_attn's when neither extension loads
            return import_failure("FlashAttention", exc)
        if found is None:
            return "flash_attn is not installed (neither vllm's vllm_flash_attn nor Dao-AILab's flash_attn)"
        if reason := extension_missing(*found, _VERSIONS.get(tactic, 0)):
            return reason
        if workload.spec.kv_cache_dtype.startswith("fp8"):
            return "hwtune's FLASH_ATTN candidate does not pass fp8 descale factors yet"
        return None

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        if tactic not in _VERSIONS:
            raise Unsupported(f"FLASH_ATTN has no tactic {tactic!r}")
        return FlashAttnRunner(tactic, sinks=workload.spec.sinks)

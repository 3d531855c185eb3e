"""FLASHINFER: FlashInfer's paged wrappers, one tactic per kernel family (API of flashinfer 0.6.x).

- ``fa2``: BatchDecodeWithPagedKVCacheWrapper on CUDA cores (decode only, single-token queries);
- ``fa2-tc`` / ``fa3``: the tensor-core templates: BatchDecode with ``use_tensor_cores=True`` for decode,
  BatchPrefillWithPagedKVCacheWrapper (causal) for prefill, mixed batches and multi-token decode queries;
- ``xqa``: ``trtllm_batch_decode_with_kv_cache(backend="xqa")`` (decode; no LSE); ``xqa-2x``: the same kernel called
  as ``flashinfer.xqa.xqa`` with ``sm_count`` twice the device's, which doubles the sub-sequences each request's
  context is split over (that call's other arguments as ``trtllm_batch_decode_with_kv_cache`` derives them);
- ``cudnn``: ``flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache`` called as the prefill wrapper's cuDNN backend
  calls it, but with the LSE shape it requires (``[batch, max_query_len, heads]``): the wrapper allocates a
  ``[tokens, heads]`` LSE and so fails on every shape (flashinfer 0.6.18 prefill.py ``run``; seen on an H100);
  ``trtllm-gen`` / ``cute-dsl``: the wrappers' backends of those names (Blackwell only; the catalogue rejects them
  elsewhere before they get here).
Attention sinks (gpt-oss; ``problem.sinks``, float32 per query head), as FlashInfer 0.6.18 can take them:
``fa2-tc`` / ``fa3`` run ``flashinfer.BatchAttentionWithAttentionSinkWrapper`` (the prefill wrapper with the
``AttentionSink`` JIT variant, as vLLM runs FlashInfer prefill with sinks on SM 9.0 / 12.x; sinks and
``sm_scale`` (times ``k_scale``) are its positional ``run`` arguments) for decode and prefill alike; ``xqa`` passes
``sinks=`` to ``trtllm_batch_decode_with_kv_cache``; ``trtllm-gen`` passes ``sinks=`` to the wrappers' ``run``. The
BatchDecode/BatchPrefill wrappers' own ``sinks=`` reaches only the trtllm-gen kernels (their fa2/fa3 ``paged_run``
drops it), so CUDA-core ``fa2`` is refused, as are ``cudnn`` (no sink argument) and ``cute-dsl`` (its paged route
raises for run-time sinks) and FlashInfer's DCP prefill path (its ragged wrapper takes no sinks; vLLM refuses sinks
there too). A DCP share without the sink (``split_halves``) runs the plain prefill wrapper.
FlashInfer returns base-2 LSE; ``lse_natural`` converts outside the timed call. Decode and xqa are
CUDA-graph capturable (the decode wrapper in ``use_cuda_graph`` mode re-plans into fixed buffers). With
DCP, a prefill runs the DCP prefill path (``FlashInferDcpPrefillRunner``: paged context shares plus ragged new
tokens, as vLLM's DCP prefill wrapper does).
"""

from __future__ import annotations

from typing import Any

import torch

from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.candidates.base import LN2, Candidate, Runner, Unsupported, import_failure
from hwtune.probes.attention.dcp import DcpPrefillInputs, DcpPrefillRunner
from hwtune.probes.attention.problem import AttentionProblem

# vLLM's FlashInfer workspace (vllm/envs.py VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, 394 MiB): 256 MiB overflowed
# fa2-tc prefill's split-KV scratch (a 128-token chunk on a 32768-token prefix, 32 query heads; H100, 2026-11-25)
WORKSPACE_BYTES = 394 << 20
_PREFILL_BACKEND = {"fa2-tc": "fa2", "fa3": "fa3", "cudnn": "cudnn", "trtllm-gen": "trtllm-gen", "cute-dsl": "cute-dsl"}
#: xqa tactics -> the multiple of the device's SM count handed to xqa (``sm_count``), which sets its sub-sequences
XQA_SM_FACTOR = {"xqa": 1, "xqa-2x": 2}
_DECODE_BACKEND = {"fa2": "auto", "fa2-tc": "fa2", "fa3": "fa3", "trtllm-gen": "trtllm-gen", "cute-dsl": "cute-dsl"}


def _import() -> Any:
    import flashinfer
    import flashinfer.decode

    return flashinfer


class FlashInferRunner(Runner):
    """Wraps FlashInfer's ``BatchDecodeWithPagedKVCacheWrapper`` (single-token decode, graph-safe on fixed buffers),
    ``BatchPrefillWithPagedKVCacheWrapper`` (prefill, mixed, multi-token decode) or
    ``trtllm_batch_decode_with_kv_cache(backend="xqa")`` (no LSE), by tactic; its base-2 LSE is converted."""

    def __init__(self, workload: AttentionWorkload, tactic: str) -> None:
        super().__init__()
        self.fi = _import()
        self.tactic = tactic
        spec = workload.spec
        single = workload.phase == "decode" and spec.query_len_decode == 1
        if spec.sinks:
            _check_sinks(spec, tactic, single)
        if spec.sinks and tactic in ("fa2-tc", "fa3"):
            self.mode = "sink"
        elif tactic in XQA_SM_FACTOR:
            if not single:
                raise Unsupported("xqa runs single-token decode only in hwtune's FLASHINFER candidate")
            self.mode = "xqa"
        elif single and tactic in _DECODE_BACKEND:
            self.mode = "decode"
        elif tactic == "cudnn":
            self.mode = "cudnn"
        elif tactic in _PREFILL_BACKEND:
            self.mode = "prefill"
        else:
            raise Unsupported(
                f"FlashInfer tactic {tactic} has no path for {workload.phase} with "
                f"{spec.query_len_decode} query tokens per request"
            )
        self.supports_graphs = self.mode in ("decode", "xqa")
        # the prefill wrappers (the sink wrapper is one) plan with causal=problem.causal
        self.supports_non_causal = self.mode in ("prefill", "sink", "cudnn")
        self.returns_lse = self.mode in ("decode", "prefill", "sink", "cudnn")
        self.wrapper: Any = None
        self.problem: AttentionProblem | None = None

    def lse_natural(self) -> torch.Tensor | None:
        if self.mode == "cudnn":  # natural-log already, padded per request: gathered per token
            return self.lse_padded[self.lse_rows[0], self.lse_rows[1]]
        if self.lse is None:
            return None
        return self.lse * LN2

    def _window(self, p: AttentionProblem) -> int:
        return -1 if p.spec.sliding_window is None else p.spec.sliding_window - 1

    def prepare(self, p: AttentionProblem) -> None:
        self._alloc(p, lse=self.returns_lse)
        self.problem = p
        spec = p.spec
        dev = p.q.device
        if not hasattr(self, "workspace"):  # zeroed once: xqa keeps its semaphores in the first 8 MiB
            self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        kv_dtype = p.kv_cache.dtype
        if self.mode == "xqa":
            self.max_seq_len = p.max_seq_len
            if XQA_SM_FACTOR[self.tactic] != 1:
                self._bind_xqa(p)
            return
        common = dict(
            window_left=self._window(p),
            logits_soft_cap=spec.logits_soft_cap,
            q_data_type=p.q.dtype,
            kv_data_type=kv_dtype,
            sm_scale=p.softmax_scale,
        )
        if self.mode == "sink" and p.sinks is None:  # a DCP share without the sink (a runner serves one share)
            if self.wrapper is not None:
                raise ValueError("a FlashInfer sink runner was planned with sinks and then without")
            self.mode = "prefill"  # the plain prefill wrapper, same backend
        if self.mode == "decode":
            self._plan_decode(p, common)
        elif self.mode == "cudnn":
            self._plan_cudnn(p)
        else:
            self._plan_prefill(p, common)

    def _plan_decode(self, p: AttentionProblem, common: dict[str, Any]) -> None:
        """BatchDecode wrapper (built once, on fixed buffers so a captured graph stays valid), then plan."""
        spec, dev = p.spec, p.q.device
        if self.wrapper is None:
            self.indptr_buf = torch.empty(p.batch + 1, dtype=torch.int32, device=dev)
            self.indices_buf = torch.empty(p.kv_cache.shape[0], dtype=torch.int32, device=dev)
            self.last_buf = torch.empty(p.batch, dtype=torch.int32, device=dev)
            self.wrapper = self.fi.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace,
                p.layout,
                use_cuda_graph=True,
                use_tensor_cores=self.tactic != "fa2",
                paged_kv_indptr_buffer=self.indptr_buf,
                paged_kv_indices_buffer=self.indices_buf,
                paged_kv_last_page_len_buffer=self.last_buf,
                backend=_DECODE_BACKEND[self.tactic],
            )
        self.wrapper.plan(
            p.kv_indptr,
            p.kv_indices,
            p.kv_last_page_len,
            spec.num_heads,
            spec.num_kv_heads,
            spec.head_size,
            p.page_size,
            **common,
        )

    def _bind_xqa(self, p: AttentionProblem) -> None:
        """``flashinfer.xqa.xqa``'s arguments for this batch, derived as ``trtllm_batch_decode_with_kv_cache``
        derives them (flashinfer 0.6.18 decode.py: semaphores in the workspace's first 8 MiB, scales from
        bmm1 = softmax scale x k_scale and bmm2 = v_scale), but with ``sm_count`` a multiple of the device's."""
        from flashinfer.utils import device_support_pdl
        from flashinfer.xqa import xqa

        ws, head = self.workspace, p.spec.head_size
        window = self._window(p)
        sms = XQA_SM_FACTOR[self.tactic] * torch.cuda.get_device_properties(p.q.device).multi_processor_count
        pdl = device_support_pdl(p.q.device)
        self.xqa_call = lambda: xqa(
            p.q.unsqueeze(1),
            p.k_cache(),
            p.v_cache(),
            p.block_table,
            p.seq_lens.unsqueeze(1),
            self.out.unsqueeze(1),
            ws[8 << 20 :],
            ws[: 8 << 20],
            p.spec.num_kv_heads,
            p.page_size,
            sinks=p.sinks.reshape(p.spec.num_kv_heads, -1) if p.sinks is not None else None,
            q_scale=p.softmax_scale * p.k_scale / p.v_scale * head**0.5,
            kv_scale=p.v_scale,
            sliding_win_size=window + 1 if window >= 0 else 0,
            kv_layout=p.layout,
            sm_count=sms,
            enable_pdl=pdl,
        )

    def _plan_prefill(self, p: AttentionProblem, common: dict[str, Any]) -> None:
        """The prefill wrapper for the tactic's backend, built once (with sinks
        ``BatchAttentionWithAttentionSinkWrapper``, the prefill wrapper with FlashInfer's AttentionSink variant), then
        planned with ``causal=problem.causal``."""
        spec = p.spec
        if self.wrapper is None and self.mode == "sink":
            self.wrapper = self.fi.BatchAttentionWithAttentionSinkWrapper(
                self.workspace,
                p.layout,
                backend=_PREFILL_BACKEND[self.tactic],
                q_data_type=p.q.dtype,
                kv_data_type=p.kv_cache.dtype,
                head_dim_qk=spec.head_size,
                head_dim_vo=spec.head_size,
                window_left=self._window(p),
            )
        elif self.wrapper is None:
            self.wrapper = self.fi.BatchPrefillWithPagedKVCacheWrapper(
                self.workspace, p.layout, backend=_PREFILL_BACKEND[self.tactic]
            )
        self.wrapper.plan(
            p.query_start_loc,
            p.kv_indptr,
            p.kv_indices,
            p.kv_last_page_len,
            spec.num_heads,
            spec.num_kv_heads,
            spec.head_size,
            p.page_size,
            causal=p.causal,
            **common,
        )

    def _plan_cudnn(self, p: AttentionProblem) -> None:
        """Bind cuDNN's paged prefill to this batch, as the wrapper's plan + run would (element offsets, lengths as
        ``[batch, 1, 1, 1]``: on the GPU for the cuDNN graph, on the host for FlashInfer's cubin fallback), with a
        ``[batch, max_query_len, heads]`` LSE and the (request, position) row of each token to gather it, and K/V as
        the ``[pages, kv_heads, page, dim]`` views cuDNN reads."""
        from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache
        from flashinfer.cudnn.prefill import CUDNN_AVAILABLE

        self.cudnn_fn = cudnn_batch_prefill_with_kv_cache
        spec, dev, b = p.spec, p.q.device, p.batch
        lens_dev = dev if CUDNN_AVAILABLE else torch.device("cpu")
        offsets = (p.query_start_loc * (spec.num_heads * spec.head_size)).int()  # q and out are packed alike
        self.cudnn_args = dict(
            max_token_per_sequence=p.max_query_len,
            # cuDNN requires the block table's width to be ceil(max_sequence_kv / page) ("Paged cache load: block
            # table size must equal ...", H100 2026-11-25): a batch planned into another's table (the gate's batch B,
            # an engine's fixed-width table) passes the table's capacity; actual_seq_lens_kv masks the rest
            max_sequence_kv=p.block_table.shape[1] * p.page_size,
            actual_seq_lens_q=torch.tensor(p.query_lens, dtype=torch.int32, device=lens_dev).view(b, 1, 1, 1),
            actual_seq_lens_kv=p.seq_lens.to(lens_dev).view(b, 1, 1, 1),
            block_tables=p.block_table,
            causal=p.causal,
            return_lse=True,
            batch_offsets_q=offsets,
            batch_offsets_o=offsets,
        )
        self.lse_padded, self.lse_rows = padded_lse(p.query_lens, spec.num_heads, dev)
        # cuDNN reads paged K/V as [pages, kv_heads, page, dim] by shape and stride (flashinfer/cudnn/prefill.py
        # _build_prefill_graph): an NHD cache goes as a transposed view, nothing copied
        k, v = p.k_cache(), p.v_cache()
        self.cudnn_kv = (k.transpose(1, 2), v.transpose(1, 2)) if p.layout == "NHD" else (k, v)

    def run(self) -> None:
        p = self.problem
        assert p is not None and self.out is not None
        scales = {}
        if p.is_fp8:
            scales = dict(k_scale=p.k_scale, v_scale=p.v_scale)
        if self.mode == "sink":  # sinks and sm_scale are the variant's positional arguments; k_scale folded in
            sm_scale = p.softmax_scale * p.k_scale
            v_scale = dict(v_scale=p.v_scale) if p.is_fp8 else {}
            self.wrapper.run(p.q, p.kv_cache, p.sinks, sm_scale, out=self.out, lse=self.lse, return_lse=True, **v_scale)
            return
        sinks = dict(sinks=p.sinks) if p.sinks is not None else {}  # xqa and trtllm-gen only (_check_sinks)
        if self.mode == "cudnn":
            self.cudnn_fn(
                p.q,
                *self.cudnn_kv,
                p.softmax_scale,
                self.workspace,
                out=self.out,
                lse=self.lse_padded,
                **self.cudnn_args,
            )
        elif self.mode == "xqa" and XQA_SM_FACTOR[self.tactic] != 1:
            self.xqa_call()
        elif self.mode == "xqa":
            self.fi.decode.trtllm_batch_decode_with_kv_cache(
                p.q,
                p.kv_cache,
                self.workspace,
                p.block_table,
                p.seq_lens,
                self.max_seq_len,
                bmm1_scale=p.softmax_scale * p.k_scale,
                bmm2_scale=p.v_scale,
                window_left=self._window(p),
                out=self.out,
                kv_layout=p.layout,
                backend="xqa",
                **sinks,
            )
        else:
            self.wrapper.run(p.q, p.kv_cache, out=self.out, lse=self.lse, return_lse=True, **scales, **sinks)


def _check_sinks(spec: Any, tactic: str, single: bool) -> None:
    """Refuse (Unsupported) a tactic whose FlashInfer 0.6.18 kernel cannot apply attention sinks (module docstring)."""
    if tactic == "fa2" and single:
        raise Unsupported(
            "FlashInfer 0.6.18's BatchDecode wrapper hands sinks only to trtllm-gen kernels; its CUDA-core fa2 decode "
            "would drop them (use fa2-tc, fa3 or xqa for attention sinks)"
        )
    if tactic == "cudnn":
        raise Unsupported("FlashInfer 0.6.18's cuDNN prefill takes no attention sinks")
    if tactic == "cute-dsl":
        raise Unsupported(
            "FlashInfer 0.6.18's cute-dsl paged route raises for run-time attention sinks (plan-time variant only)"
        )
    if tactic in ("fa2-tc", "fa3") and spec.logits_soft_cap is not None:
        raise Unsupported("FlashInfer 0.6.18's AttentionSink variant applies no logits soft-cap")


class FlashInferDcpPrefillRunner(DcpPrefillRunner):
    """The DCP prefill path with FlashInfer (dcp.py): one ``BatchPrefillWithPagedKVCacheWrapper`` per virtual rank
    (no causal mask, the cache's layout) and a ``BatchPrefillWithRaggedKVCacheWrapper`` (causal) for the new
    tokens, built NHD because their tensors are NHD. ``new_token_layout=None`` builds it with the cache's layout
    instead: the engine bug, kept so that a test can show the gate catches it."""

    def __init__(self, workload: AttentionWorkload, tactic: str, new_token_layout: str | None = "NHD") -> None:
        super().__init__(workload.spec.dcp_size)
        if tactic not in _PREFILL_BACKEND or tactic == "cudnn":
            raise Unsupported(f"FlashInfer tactic {tactic} has no ragged prefill path for DCP in hwtune")
        if workload.spec.sinks:
            raise Unsupported(
                "FlashInfer 0.6.18's ragged prefill wrapper (the DCP prefill path's new-token kernel) takes no "
                "attention sinks; vLLM refuses sinks in FlashInfer's DCP prefill too (BatchDCPPrefillWrapper)"
            )
        if workload.spec.kv_cache_dtype.startswith("fp8"):
            raise Unsupported(
                "hwtune's DCP prefill check keeps new tokens in the model dtype; an fp8 cache is not modelled"
            )
        self.fi = _import()
        self.tactic = tactic
        self.new_token_layout = new_token_layout
        self.wrappers: list[Any] = []

    def _workspace(self, i: int, dev: torch.device) -> torch.Tensor:
        if not hasattr(self, "workspaces"):
            self.workspaces: list[torch.Tensor] = []
        while len(self.workspaces) <= i:  # one per wrapper: each keeps its plan in its workspace
            self.workspaces.append(torch.zeros(WORKSPACE_BYTES // 2, dtype=torch.uint8, device=dev))
        return self.workspaces[i]

    def plan(self, inputs: DcpPrefillInputs) -> None:
        """One paged wrapper per virtual rank's share (no causal mask) and the ragged wrapper for the new tokens,
        each with its own workspace, planned for ``inputs``."""
        spec = inputs.problem.spec
        dev, backend = inputs.q.device, _PREFILL_BACKEND[self.tactic]
        common = dict(
            logits_soft_cap=spec.logits_soft_cap, q_data_type=inputs.q.dtype, sm_scale=inputs.problem.softmax_scale
        )
        heads = (spec.num_heads, spec.num_kv_heads, spec.head_size)
        self.wrappers = []
        for k, share in enumerate(inputs.shares):
            w = self.fi.BatchPrefillWithPagedKVCacheWrapper(self._workspace(k, dev), share.layout, backend=backend)
            w.plan(
                inputs.qo_indptr,
                share.kv_indptr,
                share.kv_indices,
                share.kv_last_page_len,
                *heads,
                share.page_size,
                causal=False,
                kv_data_type=share.kv_cache.dtype,
                **common,
            )
            self.wrappers.append(w)
        layout = self.new_token_layout or inputs.problem.layout
        self.ragged = self.fi.BatchPrefillWithRaggedKVCacheWrapper(
            self._workspace(len(inputs.shares), dev), layout, backend=backend
        )
        self.ragged.plan(inputs.qo_indptr, inputs.qo_indptr, *heads, causal=True, kv_data_type=inputs.q.dtype, **common)

    def context(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rank ``k``'s paged attention over its share; FlashInfer's base-2 LSE converted to natural log."""
        assert self.inputs is not None
        share = self.inputs.shares[k]
        out, lse = self.wrappers[k].run(self.inputs.q, share.kv_cache, return_lse=True)
        return out, lse * LN2

    def new_tokens(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The ragged causal attention of the new tokens over their own NHD K/V; LSE in natural log."""
        assert self.inputs is not None
        out, lse = self.ragged.run(self.inputs.q, self.inputs.k_new, self.inputs.v_new, return_lse=True)
        return out, lse * LN2


def padded_lse(query_lens: list[int], heads: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cuDNN's LSE buffer, ``[batch, max_query_len, heads]`` (rows past a request's length are padding), and the
    (request, position) of each packed token, to gather it per token outside the timed call."""
    lse = torch.empty(len(query_lens), max(query_lens), heads, dtype=torch.float32, device=device)
    rows = [(r, i) for r, m in enumerate(query_lens) for i in range(m)]
    return lse, torch.tensor(rows, dtype=torch.long, device=device).T


def cudnn_unavailable(cubin_fallback: bool) -> str | None:
    """Why FlashInfer's cuDNN prefill cannot run here, or None. Without the cuDNN frontend (python module cudnn,
    nvidia-cudnn-frontend) FlashInfer 0.6.18 falls back to cuDNN SDPA cubins built for SM 10.0 only
    (csrc/cudnn_sdpa_kernel_launcher.cu: cudnn_sm100_fprop_sdpa_prefill_d128_bf16.cubin), fetched at first use into
    FLASHINFER_CUBIN_DIR; without a network that fetch retries for minutes (seen on an H100, 2026-11-25)."""
    try:
        from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache  # noqa: F401
        from flashinfer.cudnn.prefill import CUDNN_AVAILABLE
    except Exception as exc:  # ImportError, or FlashInfer's own assertion at import
        return import_failure("flashinfer.cudnn", exc)
    if CUDNN_AVAILABLE:
        return None
    missing = "the cuDNN frontend (python module cudnn, nvidia-cudnn-frontend) is not installed"
    if not cubin_fallback or torch.cuda.get_device_capability()[0] != 10:
        return f"{missing}; FlashInfer's cubin fallback is for SM 10.x paged prefill only"
    from flashinfer.artifacts import ArtifactPath
    from flashinfer.jit.env import FLASHINFER_CUBIN_DIR

    cubin = FLASHINFER_CUBIN_DIR / ArtifactPath.CUDNN_SDPA / "cudnn_sm100_fprop_sdpa_prefill_d128_bf16.cubin"
    if not cubin.exists():
        return f"{missing}, and FlashInfer's cuDNN SDPA cubin is not at {cubin} (install flashinfer-cubin)"
    return None


class FlashInferCandidate(Candidate):
    """FLASHINFER: needs a CUDA device, a CUDA build of torch, and a flashinfer that imports (its import asserts on
    some setups, reported as the reason)."""

    backend = "FLASHINFER"

    def unavailable(self, workload: AttentionWorkload, tactic: str, device: str) -> str | None:
        if device != "cuda":
            return "FlashInfer runs on CUDA GPUs only"
        if torch.version.cuda is None:
            return f"FlashInfer needs a CUDA build of torch (installed: torch {torch.__version__})"
        try:
            _import()
        except Exception as exc:  # ImportError, or FlashInfer's own assertion at import
            return import_failure("flashinfer", exc)
        return cudnn_unavailable(cubin_fallback=True) if tactic == "cudnn" else None

    def runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        return FlashInferRunner(workload, tactic)

    def dcp_prefill_runner(self, workload: AttentionWorkload, tactic: str, device: str) -> Runner:
        """FlashInfer's DCP prefill path, its new-token wrapper built NHD (``FlashInferDcpPrefillRunner``)."""
        return FlashInferDcpPrefillRunner(workload, tactic)

"""MLA attention backends (DeepSeek-style latent attention): vLLM's, named as vLLM names them, and the ones hwtune
runs itself.

All of them read a latent cache of width kv_lora_rank + qk_rope_head_dim = 576 with one KV head
(vllm model_executor/layers/attention/mla_attention.py MLACommonBackend.get_supported_head_sizes -> [576]).
The places below are hwtune's own order, used when no engine is targeted (``--engine none``); for an engine
target the order, the backends and their rules are the engine version's (its snapshot in
hwtune/core/catalogue/engines: vLLM 0.33.0 also tries TOKENSPEED_MLA, and on SM 12.x
TRITON_MLA first). The KV block sizes a kernel accepts are part of every record (vLLM 0.33.0's
``get_supported_kernel_block_sizes`` where the record mirrors a vLLM backend): block size is part of the choice.

FLASHINFER_MLA, TRITON_MLA and CUTLASS_MLA ship inside vLLM (and FlashInfer): hwtune does not run them;
measurements imported into the store rank them. hwtune measures five MLA records itself (docs/probes.md, "MLA"):
where vLLM is installed, FLASH_ATTN_MLA's decode (vllm_flash_attn's FA3 with the latent as its value-sized query and
key part) and FLASHMLA's (``vllm._flashmla_C``, 64-token pages), both on Hopper and both decode only (vLLM runs MLA
prefill through its own non-absorbed path), FLASHINFER_FA_MLA (FlashInfer's BatchMLAPagedAttentionWrapper,
fa2/fa3: SGLang's flashinfer MLA backend; vLLM has no dense backend on it), HWTUNE_TRITON_MLA (hwtune's own Triton
kernel, docs/kernels.md; no engine can load it)
and HWTUNE_TORCH_MLA (absorbed MLA in PyTorch ops, the CPU path).

Prefill is measured in both forms. The absorbed tactics (fa2, fa3, auto, eager) run prefill as a longer decode;
the ``mha-*`` tactics run the non-absorbed ("dense MHA") prefill the engines run (docs/probes.md "MLA prefill"):
FLASHINFER_FA_MLA's mha-fa2 / mha-fa3 / mha-cutlass (FlashInfer's ragged wrapper: SGLang's flashinfer MLA extend,
vLLM 0.33.0's FLASHINFER MLA prefill backend on SM 10.x) and mha-cudnn, HWTUNE_TORCH_MLA's mha-eager (vLLM's CPU
MLA prefill) and mha-sdpa-*. vLLM's MLA prefill backend is chosen apart from its decode backend
(``--attention-config.mla_prefill_backend``; on SM 9.0 only FLASH_ATTN, vllm_flash_attn's FA3 varlen: vllm 0.33.0
platforms/interface.py get_mla_prefill_backend_cls), which no engine snapshot here models yet.
"""

from __future__ import annotations

from hwtune.core.catalogue.attention import FLASHINFER_PKG, PROBES, hwtune_kernel, sglang, vllm
from hwtune.core.catalogue.base import (
    AttentionRules,
    Backend,
    CCRange,
    EngineFlags,
    Feature,
    Probe,
    Tactic,
    fs,
    ints,
    multiple_of,
    priority,
)
from hwtune.core.packages import PackageRequirement

F = Feature
MLA = "vllm 0.33.0 v1/attention/backends/mla"
FI_MLA = "flashinfer 0.6.18 flashinfer/mla/_core.py BatchMLAPagedAttentionWrapper"
BOTH = fs("decode", "prefill")
DECODE = fs("decode")
PREFILL = fs("prefill")
FI_RAGGED = "flashinfer 0.6.18 flashinfer/prefill.py BatchPrefillWithRaggedKVCacheWrapper"
VLLM_MLA_PREFILL = "vllm 0.33.0 v1/attention/backends/mla/prefill"
_MHA_PREFILL = "hwtune/probes/attention/candidates/mla_prefill_base.py"
_MHA_PHASES = (
    "prefill only: the non-absorbed (dense MHA) prefill of vllm 0.33.0 model_executor/layers/attention/"
    "mla_attention.py MLACommonBaseImpl.forward_mha / _compute_prefill_context (kv_b_proj up-projection, then "
    "attention with head_dim_qk = nope + rope, head_dim_vo = v); decode and mixed batches stay absorbed"
)
CUDA = fs("cuda")
FP16_BF16 = fs("float16", "bfloat16")
VLLM_PKG = PackageRequirement("vllm", "", "kernel ships in vLLM's compiled ops")
LATENT = ints(576)
_PCP = (
    "; PCP: vllm 0.33.0 v1/attention/backend.py MLAAttentionImpl.supports_pcp = True (every MLA impl), but not "
    "with DCP at once (model_executor/layers/attention/mla_attention.py supports_pcp_dcp = False)"
)
_COMMON_SOURCES = {
    "device_types": f"{MLA} (CUDA platform)",
    "dtypes": f"{MLA} supported_dtypes [fp16, bf16]",
    "head_sizes": "vllm mla_attention.py MLACommonBackend.get_supported_head_sizes -> [576]",
    "kv_layouts": "vllm mla_attention.py: cache (num_blocks, block_size, 576); layout-free, declared NHD",
    "gqa_groups": "MLA uses one latent KV head: any number of query heads",
}


def _mla(
    name: str,
    summary: str,
    rules: AttentionRules,
    packages: tuple[PackageRequirement, ...],
    sources: dict[str, str],
    *,
    order: dict[str, int],
    sglang_flags: EngineFlags,
    probe: Probe | None = None,
) -> Backend:
    return Backend(
        name=name,
        kind="attention",
        probe=probe,
        summary=summary,
        rules=rules,
        packages=packages,
        engines={"vllm": vllm(name), "sglang": sglang_flags},
        priority=priority(**order),
        tactics=(Tactic("default", BOTH, AttentionRules(), summary="the backend's own kernel"),),
        sources={**_COMMON_SOURCES, "tactics": "one kernel per backend", **sources},
    )


FLASHINFER_MLA = _mla(
    "FLASHINFER_MLA",
    "FlashInfer trtllm-gen MLA decode (Blackwell)",
    AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((10, 0), (10, 3)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
        head_sizes=LATENT,
        block_sizes=ints(32, 64),
        kv_layouts=fs("NHD"),
        gqa_groups=multiple_of(1),
        features=fs(F.MLA, F.SPEC_DECODE, F.CUDA_GRAPHS, F.PCP),
    ),
    (FLASHINFER_PKG, VLLM_PKG),
    {
        "compute_capabilities": f"{MLA}/flashinfer_mla.py supports_compute_capability: major == 10",
        "kv_cache_dtypes": f"{MLA}/flashinfer_mla.py supported_kv_cache_dtypes",
        "block_sizes": f"{MLA}/flashinfer_mla.py get_supported_kernel_block_sizes -> [32, 64]",
        "features": f"{MLA}/flashinfer_mla.py: UNIFORM query lengths, UNIFORM_BATCH graphs. LSE for DCP "
        "differs between vLLM versions (older cuda.py: 'FlashInferMLA doesn't return LSE for DCP'): not declared"
        + _PCP,
        "packages": "flashinfer-python + vllm",
    },
    order=dict(blackwell=0, others=2),
    # SGLang's trtllm-gen MLA backend (sglang/srt/layers/attention/trtllm_mla_backend.py); its "flashinfer" MLA
    # backend is BatchMLAPagedAttentionWrapper, FLASHINFER_FA_MLA below
    sglang_flags=sglang("trtllm_mla"),
)

CUTLASS_MLA = _mla(
    "CUTLASS_MLA",
    "vLLM's CUTLASS SM100 MLA decode",
    AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((10, 0), (10, 3)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
        head_sizes=LATENT,
        block_sizes=ints(128),
        kv_layouts=fs("NHD"),
        gqa_groups=multiple_of(1, 1, 128),
        features=fs(F.MLA, F.DECODE_LSE, F.CUDA_GRAPHS, F.PCP),
    ),
    (VLLM_PKG,),
    {
        "compute_capabilities": f"{MLA}/cutlass_mla.py supports_compute_capability: major == 10",
        "kv_cache_dtypes": f"{MLA}/cutlass_mla.py supported_kv_cache_dtypes",
        "block_sizes": f"{MLA}/cutlass_mla.py get_supported_kernel_block_sizes -> [128]",
        "gqa_groups": f"{MLA}/cutlass_mla.py: heads padded to MAX_HEADS = 128, asserts H <= 128",
        "features": f"{MLA}/cutlass_mla.py can_return_lse_for_decode=True; UNIFORM_SINGLE_TOKEN_DECODE graphs" + _PCP,
        "packages": "vllm _C ops.sm100_cutlass_mla_decode",
    },
    order=dict(blackwell=1, others=4),
    sglang_flags=EngineFlags(
        missing="SGLang 0.5.23 has no cutlass_mla backend (sglang/srt/arg_groups/choices.py ATTENTION_BACKEND_CHOICES: "
        "its SM 10.x MLA backends are trtllm_mla, cutedsl_mla and flashmla)"
    ),
)

FLASH_ATTN_MLA = _mla(
    "FLASH_ATTN_MLA",
    "vLLM's FlashAttention-3 MLA decode (Hopper): the latent as FA3's extra value-sized query and key part",
    AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((9, 0), (9, 9)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16"),
        head_sizes=LATENT,
        block_sizes=multiple_of(16, 16),
        kv_layouts=fs("NHD"),
        gqa_groups=multiple_of(1),
        features=fs(F.MLA, F.DECODE_LSE, F.SPEC_DECODE, F.CUDA_GRAPHS, F.PCP),
    ),
    (PackageRequirement("vllm", "", "FA3 ships in vllm_flash_attn"),),
    {
        "compute_capabilities": f"{MLA}/flashattn_mla.py supports_compute_capability: major == 9 (FA3)",
        "kv_cache_dtypes": f"{MLA}/flashattn_mla.py supported_kv_cache_dtypes (FlashAttnMLAImpl: 'FP8 FlashAttention "
        "MLA not yet supported')",
        "block_sizes": f"{MLA}/flashattn_mla.py get_supported_kernel_block_sizes -> [MultipleOf(16)]",
        "features": f"{MLA}/flashattn_mla.py FlashAttnMLAImpl.forward_mqa: flash_attn_varlen_func(q=q_pe, "
        "k=k_pe_cache, v=kv_c_cache, q_v=q_nope, causal=True, return_softmax_lse, fa_version=3) with DCP's "
        "cp_world_size; query_len_support VARLEN; UNIFORM_BATCH graphs" + _PCP,
        "packages": "vllm.vllm_flash_attn (FA3)",
    },
    order=dict(blackwell=2, others=0),
    # SGLang's fa3 backend runs MLA models too (sglang/srt/layers/attention/flashattention_backend.py use_mla)
    sglang_flags=sglang("fa3"),
    probe=Probe(
        f"{PROBES}.mla_flash_attn:FlashAttnMlaCandidate",
        ("vllm",),
        phases=DECODE,
        phases_why="vLLM's FLASH_ATTN_MLA runs FA3 for decode; its prefill goes through vLLM's non-absorbed MLA "
        "prefill path (measured as FLASHINFER_FA_MLA's mha-* tactics)",
    ),
)

FLASHMLA = _mla(
    "FLASHMLA",
    "DeepSeek FlashMLA dense decode (Hopper)",
    AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((9, 0), (9, 9)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
        head_sizes=LATENT,
        block_sizes=ints(64),
        kv_layouts=fs("NHD"),
        gqa_groups=multiple_of(1),
        features=fs(F.MLA, F.DECODE_LSE, F.SPEC_DECODE, F.CUDA_GRAPHS, F.PCP),
    ),
    (PackageRequirement("vllm", "", "FlashMLA ships in vLLM", alternatives=("flash-mla", "flash_mla")),),
    {
        "compute_capabilities": f"{MLA}/flashmla.py supports_compute_capability: major in [9, 10], narrowed by "
        "vllm 0.33.0 v1/attention/ops/flashmla.py is_flashmla_dense_supported: dense FlashMLA on Hopper only",
        "kv_cache_dtypes": "vllm docs/design/attention_backends.md MLA table (FLASHMLA)",
        "block_sizes": f"{MLA}/flashmla.py get_supported_kernel_block_sizes -> [64]",
        "features": f"{MLA}/flashmla.py can_return_lse_for_decode=True, query_len_support UNIFORM, "
        "UNIFORM_BATCH graphs" + _PCP,
        "packages": "vllm.v1.attention.ops.flashmla",
    },
    order=dict(blackwell=3, others=1),
    sglang_flags=sglang("flashmla"),
    probe=Probe(
        f"{PROBES}.mla_flashmla:FlashMlaCandidate",
        ("vllm",),
        phases=DECODE,
        phases_why="FlashMLA is a decode kernel: vLLM runs MLA prefill through its non-absorbed prefill path (measured "
        "as FLASHINFER_FA_MLA's mha-* tactics), never through FlashMLA",
    ),
)

TRITON_MLA = _mla(
    "TRITON_MLA",
    "vLLM's Triton MLA decode (any CUDA GPU)",
    AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((8, 0)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
        head_sizes=LATENT,
        block_sizes=multiple_of(16, 16),
        kv_layouts=fs("NHD"),
        gqa_groups=multiple_of(1),
        features=fs(F.MLA, F.DECODE_LSE, F.PCP),
    ),
    (VLLM_PKG, PackageRequirement("triton", ">=3.0", "Triton kernels")),
    {
        "compute_capabilities": f"{MLA}/triton_mla.py supports_compute_capability -> True (bf16 needs SM 8.0)",
        "kv_cache_dtypes": "vllm docs/design/attention_backends.md MLA table (TRITON_MLA)",
        "block_sizes": f"{MLA}/triton_mla.py get_supported_kernel_block_sizes -> [MultipleOf(16)]; "
        "supports_block_size: block_size % 16 == 0",
        "features": f"{MLA}/triton_mla.py can_return_lse_for_decode=True; SINGLE_ONLY query length; "
        "no cudagraph support declared" + _PCP,
        "packages": "vllm + triton",
    },
    order=dict(blackwell=4, others=3),
    sglang_flags=EngineFlags(missing="SGLang's triton MLA backend is SGLang's own kernel, not vLLM's TRITON_MLA"),
)

# --- measured by hwtune ------------------------------------------------------------------------------------------
_MLA_MEASURED_FEATURES = fs(F.MLA, F.DECODE_LSE, F.SPEC_DECODE, F.CUDA_GRAPHS, F.PCP)
#: PCP is the MLA layer's, not the decode kernel's: an engine runs it with any MLA decode kernel that returns the LSE.
_PCP_LAYER = (
    "; PCP: as every vLLM MLA impl (vllm 0.33.0 v1/attention/backend.py MLAAttentionImpl.supports_pcp = True): the "
    "MLA layer's prefill and LSE merge, nothing of the decode kernel's own"
)
KV_16BIT = fs("auto", "float16", "bfloat16")

FLASHINFER_FA_MLA = Backend(
    name="FLASHINFER_FA_MLA",
    kind="attention",
    probe=Probe(f"{PROBES}.mla_flashinfer:FlashInferMlaCandidate", ("flashinfer",)),
    engines={
        "vllm": EngineFlags(
            missing="vLLM 0.33.0 has no dense MLA backend on FlashInfer's BatchMLAPagedAttentionWrapper (its "
            "FLASHINFER_MLA is trtllm-gen on SM 10.x; only the sparse FLASHINFER_MLA_SPARSE_SM90 wraps it)"
        ),
        "sglang": sglang("flashinfer"),
    },
    priority=priority(blackwell=5, others=5),
    # FlashInfer's own backend="auto": fa3 on SM 9.0a, else fa2 (flashinfer/utils.py determine_mla_backend)
    tactic_order={
        "ampere_hopper": {"decode": ("fa3", "fa2"), "prefill": ("fa3", "fa2", "mha-fa3", "mha-fa2", "mha-cudnn")},
        "blackwell": {"decode": ("fa2",), "prefill": ("fa2", "mha-cutlass", "mha-fa2", "mha-cudnn")},
    },
    quick=True,
    summary="FlashInfer's paged MLA wrapper (BatchMLAPagedAttentionWrapper; SGLang's flashinfer MLA backend), not "
    "vLLM's FLASHINFER_MLA (trtllm-gen)",
    rules=AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((8, 0)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
        head_sizes=LATENT,
        block_sizes=multiple_of(1, 1, 256),
        kv_layouts=fs("NHD"),
        gqa_groups=multiple_of(1),
        features=_MLA_MEASURED_FEATURES,
    ),
    packages=(FLASHINFER_PKG,),
    tactics=(
        Tactic(
            "fa2",
            BOTH,
            AttentionRules(kv_cache_dtypes=KV_16BIT),
            summary="backend='fa2': FlashInfer's MLA kernel for SM 8.0 and newer",
            compile_s=30,
            sources={
                "kv_cache_dtypes": f"{FI_MLA}.plan: fp8 only on SM 9.x; declared on fa3 only (a tactic rule cannot "
                "say 'fp8 on SM 9.x only')",
            },
        ),
        Tactic(
            "fa3",
            BOTH,
            AttentionRules(compute_capabilities=(CCRange((9, 0), (9, 0)),)),
            summary="backend='fa3': the Hopper (SM 9.0a) MLA kernel",
            compile_s=60,
            sources={
                "compute_capabilities": "flashinfer 0.6.18 jit/attention/modules.py gen_batch_mla_module: fa3 built "
                "with sm90a flags only",
            },
        ),
        # The non-absorbed prefill (hwtune/probes/attention/candidates/mla_prefill_flashinfer.py)
        Tactic(
            "mha-fa2",
            PREFILL,
            AttentionRules(),
            summary="non-absorbed prefill: BatchPrefillWithRaggedKVCacheWrapper(backend='fa2'), q/K 192, V 128",
            compile_s=30,
            sources={
                "phases": _MHA_PHASES,
                "kv_cache_dtypes": f"{_MHA_PREFILL}: the latent is gathered and dequantised to the model dtype before "
                "the up-projection (vllm ops.gather_and_maybe_dequant_cache), so any latent cache dtype",
                "features": f"{FI_RAGGED}.plan(head_dim_qk=192, head_dim_vo=128, causal=True: aligned to the end of "
                "each request's KV), run(return_lse=True) (base-2 LSE)",
            },
        ),
        Tactic(
            "mha-fa3",
            PREFILL,
            AttentionRules(compute_capabilities=(CCRange((9, 0), (9, 0)),)),
            summary="non-absorbed prefill: the ragged wrapper's Hopper kernel (backend='fa3'); SGLang's flashinfer "
            "MLA extend without a cached prefix (backend='auto' -> fa3 on SM 9.0)",
            compile_s=60,
            sources={
                "phases": _MHA_PHASES,
                "compute_capabilities": "flashinfer 0.6.18 prefill.py determine_attention_backend / "
                "jit/attention/modules.py gen_batch_prefill_module: fa3 built with sm90a flags only",
                "features": f"{FI_RAGGED}(backend='fa3'); sglang/srt/layers/attention/flashinfer_mla_backend.py "
                "forward_extend: prefill_wrapper_ragged for an extend without a prefix (use_ragged)",
            },
        ),
        Tactic(
            "mha-cutlass",
            PREFILL,
            AttentionRules(compute_capabilities=(CCRange((10, 0), (10, 3)),)),
            summary="non-absorbed prefill: the ragged wrapper's CUTLASS kernel (backend='cutlass'), vLLM's "
            "FLASHINFER MLA prefill backend",
            compile_s=60,
            quick=False,
            sources={
                "phases": _MHA_PHASES,
                "compute_capabilities": f"{VLLM_MLA_PREFILL}/flashinfer.py FlashInferPrefillBackend."
                "supports_compute_capability: major == 10; BatchPrefillWithRaggedKVCacheWrapper(..., "
                "backend='cutlass')",
                "features": f"{FI_RAGGED}.run backend 'cutlass': fmha_varlen(..., lse=) (vLLM converts the LSE with "
                "log2_lse_to_ln)",
            },
        ),
        Tactic(
            "mha-cudnn",
            PREFILL,
            AttentionRules(compute_capabilities=(CCRange((9, 0)),)),
            summary="non-absorbed prefill: flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache on ragged q/K/V",
            packages=(PackageRequirement("nvidia-cudnn-frontend", "", "cuDNN graph API (python module cudnn)"),),
            compile_s=30,
            quick=False,
            sources={
                "phases": _MHA_PHASES,
                "compute_capabilities": "flashinfer 0.6.18 cudnn/prefill.py: cuDNN SDPA graphs; declared from SM 9.0 "
                "(not yet run on a GPU here: the gate decides)",
                "head_sizes": "flashinfer 0.6.18 cudnn/prefill.py cudnn_batch_prefill_with_kv_cache: 'head_dim_qk "
                "must be 128 or 192, and head_dim_vo must be 128'",
                "features": "called directly, not through the ragged wrapper, whose cudnn route allocates a [tokens, "
                "heads] LSE where cuDNN wants [batch, max_query_len, heads] (flashinfer 0.6.18 prefill.py run); "
                "natural-log LSE; bottom-right causal mask",
                "packages": "nvidia-cudnn-frontend (flashinfer/cudnn/prefill.py CUDNN_AVAILABLE)",
            },
        ),
    ),
    sources={
        "device_types": f"{FI_MLA} (CUDA)",
        "compute_capabilities": "flashinfer 0.6.18 jit/attention/modules.py gen_batch_mla_module: fa2 built for the "
        "device's arch (bf16 tensor-core MMA: SM 8.0+); fa3 sm90a only",
        "dtypes": f"{FI_MLA}.plan q_data_type (fp16, bf16)",
        "kv_cache_dtypes": f"{FI_MLA}.plan _SUPPORTED_MLA_KV_DTYPES (fp16, bf16, e4m3); e4m3 only with fa2/fa3 on "
        "SM 9.x and bf16 queries (fp16 queries with an fp8 cache: unsupported at run time)",
        "head_sizes": f"{FI_MLA}: head_dim_ckv 512 + head_dim_kpe 64 (DeepSeek); fp8 requires exactly these",
        "block_sizes": "flashinfer 0.6.18 include/flashinfer/attention/mla.cuh, mla_hopper.cuh: the page size is a "
        "run-time uint_fastdiv (any size; tests/attention/test_deepseek_mla.py runs 1, 16 and 32); SGLang runs it at "
        "page size 1; declared 1-256",
        "kv_layouts": f"{FI_MLA}.run: ckv_cache [num_pages, page_size, 512], kpe_cache [num_pages, page_size, 64]",
        "gqa_groups": f"{FI_MLA}: num_heads any (tests: 4 to 128)",
        "features": f"{FI_MLA}.run(return_lse=True), qo_indptr with several tokens per request and causal=, "
        "use_cuda_graph=True with fixed buffers" + _PCP_LAYER,
        "packages": "flashinfer-python (flashinfer.mla)",
        "tactics": f"{FI_MLA}(backend='fa2' | 'fa3'); prefill also non-absorbed (mha-*): {FI_RAGGED}"
        "(backend='fa2' | 'fa3' | 'cutlass') and flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache",
    },
)

HWTUNE_TRITON_MLA = Backend(
    name="HWTUNE_TRITON_MLA",
    kind="attention",
    probe=Probe(f"{PROBES}.mla_triton:TritonMlaCandidate", ("triton",)),
    engines={
        "vllm": hwtune_kernel("vLLM", "HWTUNE_TRITON_MLA", "vLLM's TRITON_MLA is a different kernel"),
        "sglang": hwtune_kernel("SGLang", "HWTUNE_TRITON_MLA", "SGLang's triton MLA decode is a different kernel"),
    },
    priority=priority(blackwell=6, others=6),
    quick=True,
    summary="hwtune's own MLA decode in Triton (not vLLM's TRITON_MLA): paged latent cache, split-KV with LSE merge",
    rules=AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((8, 0)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
        kv_cache_dtype_min_cc={"fp8_e4m3": (8, 9)},
        head_sizes=LATENT,
        block_sizes=multiple_of(1, 1, 256),
        kv_layouts=fs("NHD"),
        gqa_groups=multiple_of(1),
        features=_MLA_MEASURED_FEATURES,
    ),
    packages=(PackageRequirement("triton", ">=3.0", "JIT-compiled kernels"),),
    tactics=(
        Tactic("auto", BOTH, AttentionRules(), summary="heuristic rows, KV tiles and splits", compile_s=10),
        Tactic(
            "tuned",
            DECODE,
            AttentionRules(),
            summary="KV tiles, splits, warps and stages searched per workload (mla_configs.mla_config_space)",
            compile_s=40,
            recompile_s=1.5,  # the search per workload: 0.3-3.3 s (DeepSeek-V3 TP8 tunes, H100, 2026-11-27)
            quick=False,
            # its search starts from auto's config (config_search.py); measured: docs/tuning.md "Covered tactics"
            covers=("auto",),
        ),
    ),
    sources={
        "device_types": "hwtune/kernels/triton_mla.py (Triton on CUDA)",
        "compute_capabilities": "hwtune/kernels/triton_mla.py: bf16 tl.dot, Ampere (SM 8.0) and newer",
        "dtypes": "hwtune/kernels/triton_mla.py _check_args",
        "kv_cache_dtypes": "hwtune/kernels/triton_mla.py: fp16/bf16 as the query, or fp8 e4m3 with one scale",
        "kv_cache_dtype_min_cc": "triton: 'fp8e4nv data type is not supported on CUDA arch < 89'",
        "head_sizes": "hwtune/kernels/triton_mla.py: power-of-two kv_lora_rank and rope (512 + 64); declared 576",
        "block_sizes": "hwtune/kernels/triton_mla.py: the page size is a compile-time constant and each position "
        "looks its page up, so any size (interpreter tests: 1, 16, 48, 64); declared 1-256",
        "kv_layouts": "hwtune/kernels/triton_mla.py: latent cache [pages, page, 576]",
        "gqa_groups": "hwtune/kernels/triton_mla.py: any number of query heads (64 per program)",
        "features": "hwtune/kernels/triton_mla.py returns the LSE, causal multi-token queries, non-causal shares; "
        "host integers only on the launch path (graph-capturable)" + _PCP_LAYER,
        "packages": "triton",
        "tactics": "hwtune/kernels/mla_configs.py default_mla_config",
    },
)

_TORCH_MLA = "hwtune/probes/attention/candidates/mla_torch.py"
HWTUNE_TORCH_MLA = Backend(
    name="HWTUNE_TORCH_MLA",
    kind="attention",
    probe=Probe(f"{PROBES}.mla_torch:TorchMlaCandidate"),
    engines={
        "vllm": EngineFlags(
            missing="HWTUNE_TORCH_MLA is hwtune's own PyTorch MLA; vLLM cannot load it (its CPU_MLA is a C++ kernel "
            "for the CPU platform)"
        ),
        "sglang": EngineFlags(missing="HWTUNE_TORCH_MLA is hwtune's own PyTorch MLA; SGLang cannot load it"),
    },
    # Last on GPUs (a portable baseline); the one MLA backend hwtune runs on the CPU.
    priority=priority(blackwell=7, others=7, cpu=0),
    summary="absorbed MLA in PyTorch ops over the gathered latent rows (the gather is timed); runs on the CPU",
    rules=AttentionRules(
        device_types=fs("cuda", "cpu"),
        compute_capabilities=(CCRange((8, 0)),),
        dtypes=fs("float16", "bfloat16", "float32"),
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
        head_sizes=multiple_of(8, 8),
        block_sizes=multiple_of(1),
        kv_layouts=fs("NHD"),
        gqa_groups=multiple_of(1),
        features=fs(F.MLA, F.DECODE_LSE, F.SPEC_DECODE, F.PCP),
    ),
    packages=(PackageRequirement("torch", ">=2.5", "einsum, logsumexp"),),
    needs_cuda_torch=False,
    tactics=(
        Tactic("eager", BOTH, AttentionRules(), summary="torch.einsum scores, float32 softmax with LSE"),
        # The non-absorbed prefill (hwtune/probes/attention/candidates/mla_prefill_torch.py)
        Tactic(
            "mha-eager",
            PREFILL,
            AttentionRules(),
            summary="non-absorbed prefill: per-request matmul, float32 softmax with LSE (vLLM's CPU MLA prefill)",
            sources={
                "phases": _MHA_PHASES,
                "features": f"{VLLM_MLA_PREFILL}/cpu_sdpa.py CPUSDPAMLAPrefillBackend._ragged_sdpa: dense "
                "per-request attention with its logsumexp",
            },
        ),
        Tactic(
            "mha-sdpa-math",
            PREFILL,
            AttentionRules(),
            summary="non-absorbed prefill: scaled_dot_product_attention, SDPBackend.MATH (no LSE)",
            quick=False,
            sources={"phases": _MHA_PHASES, "features": "torch scaled_dot_product_attention returns no LSE"},
        ),
        Tactic(
            "mha-sdpa-flash",
            PREFILL,
            AttentionRules(device_types=CUDA, dtypes=FP16_BF16),
            summary="non-absorbed prefill: SDPBackend.FLASH_ATTENTION (no mask: prefill without a cached prefix)",
            quick=False,
            sources={
                "phases": _MHA_PHASES,
                "features": "no attention mask, so no cached prefix (SDPA's is_causal is top-left aligned); torch "
                "checks the 192 / 128 head sizes at run time (refused: unsupported with its reason)",
            },
        ),
        Tactic(
            "mha-sdpa-efficient",
            PREFILL,
            AttentionRules(device_types=CUDA),
            summary="non-absorbed prefill: SDPBackend.EFFICIENT_ATTENTION",
            quick=False,
            sources={"phases": _MHA_PHASES, "device_types": "torch: the memory-efficient kernel is CUDA's"},
        ),
        Tactic(
            "mha-sdpa-cudnn",
            PREFILL,
            AttentionRules(device_types=CUDA, compute_capabilities=(CCRange((9, 0)),), dtypes=FP16_BF16),
            summary="non-absorbed prefill: SDPBackend.CUDNN_ATTENTION",
            quick=False,
            sources={
                "phases": _MHA_PHASES,
                "compute_capabilities": "torch sdp_utils.cpp check_cudnn_hardware_support (sm90+ default)",
            },
        ),
    ),
    sources={
        "device_types": f"{_TORCH_MLA}: torch ops on CPU and CUDA",
        "compute_capabilities": f"{_TORCH_MLA}: bf16 matmuls on CUDA, declared from SM 8.0",
        "dtypes": f"{_TORCH_MLA}: float32 on the CPU, the model dtype on CUDA",
        "kv_cache_dtypes": f"{_TORCH_MLA}: an fp8 latent is dequantised with its scale after the gather",
        "head_sizes": f"{_TORCH_MLA}: any kv_lora_rank + rope",
        "block_sizes": f"{_TORCH_MLA}: pages are gathered first: any page size",
        "kv_layouts": f"{_TORCH_MLA}: latent cache [pages, page, 576]",
        "gqa_groups": f"{_TORCH_MLA}: any number of query heads",
        "features": f"{_TORCH_MLA}: returns the LSE (natural log), causal multi-token queries, non-causal shares; "
        "no CUDA-graph capture" + _PCP_LAYER,
        "packages": "torch",
        "tactics": f"{_TORCH_MLA} (eager, absorbed); hwtune/probes/attention/candidates/mla_prefill_torch.py "
        "(mha-*, the non-absorbed prefill)",
    },
)

MLA_BACKENDS: tuple[Backend, ...] = (
    FLASHINFER_MLA,
    TRITON_MLA,
    CUTLASS_MLA,
    FLASH_ATTN_MLA,
    FLASHMLA,
    FLASHINFER_FA_MLA,
    HWTUNE_TRITON_MLA,
    HWTUNE_TORCH_MLA,
)

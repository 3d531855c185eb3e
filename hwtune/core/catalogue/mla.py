"""MLA attention backends (DeepSeek-style latent attention), named as vLLM names them.

All of them read a latent cache of width kv_lora_rank + qk_rope_head_dim = 576 with one KV head
(vllm model_executor/layers/attention/mla_attention.py MLACommonBackend.get_supported_head_sizes -> [576]).
The places below are hwtune's own order, used when no engine is targeted (``--engine none``); for an engine
target the order, the backends and their rules are the engine version's (its snapshot in
hwtune/core/catalogue/engines: vLLM 0.33.0 also tries FLASH_ATTN_MLA and TOKENSPEED_MLA, and on SM 12.x
TRITON_MLA first). hwtune does not run these kernels itself (they ship inside vLLM and FlashInfer); measurements
imported into the store rank them.
"""

from __future__ import annotations

from hwtune.core.catalogue.attention import FLASHINFER_PKG, sglang, vllm
from hwtune.core.catalogue.base import (
    AttentionRules,
    Backend,
    CCRange,
    EngineFlags,
    Feature,
    Tactic,
    fs,
    ints,
    multiple_of,
    priority,
)
from hwtune.core.packages import PackageRequirement

F = Feature
MLA = "vllm v1/attention/backends/mla"
BOTH = fs("decode", "prefill")
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
) -> Backend:
    return Backend(
        name=name,
        kind="attention",
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
    order=dict(blackwell=0, others=1),
    sglang_flags=sglang("flashinfer"),
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
    order=dict(blackwell=1, others=3),
    sglang_flags=EngineFlags(
        missing="SGLang 0.5.23 has no cutlass_mla backend (sglang/srt/arg_groups/choices.py ATTENTION_BACKEND_CHOICES: "
        "its SM 10.x MLA backends are trtllm_mla, cutedsl_mla and flashmla)"
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
    order=dict(blackwell=2, others=0),
    sglang_flags=sglang("flashmla"),
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
        "block_sizes": "vllm docs/design/attention_backends.md MLA table: %16",
        "features": f"{MLA}/triton_mla.py can_return_lse_for_decode=True; SINGLE_ONLY query length; "
        "no cudagraph support declared" + _PCP,
        "packages": "vllm + triton",
    },
    order=dict(blackwell=3, others=2),
    sglang_flags=EngineFlags(missing="SGLang's triton MLA backend is SGLang's own kernel, not vLLM's TRITON_MLA"),
)

MLA_BACKENDS: tuple[Backend, ...] = (FLASHINFER_MLA, TRITON_MLA, CUTLASS_MLA, FLASHMLA)

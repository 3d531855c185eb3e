"""Attention kernels hwtune measures and runs (non-MLA): the libraries engines use, named as vLLM's
``--attention-backend`` names the engine backend built on them, and hwtune's own kernels.

Each record is the one place that says everything about its kernel as hwtune runs it: rules (allowlists with
sources), tactics and their compile estimates (FlashInfer's JIT figures measured on an H100, docs/tuning.md),
the probe that runs it, its engine flags, its place in hwtune's own static order per architecture family (used
when no engine is targeted, ``--engine none``, and on the CPU), and its tactic order when nothing was measured.

What an engine version accepts and in which order it tries its backends is not stated here: it is the engine's
snapshot (``hwtune/core/catalogue/engines``, docs/engines.md), which selection for an engine target follows.

Facts come from the libraries' own checks (FlashInfer 0.6.18, flash-attn, torch) and, where a record restates
how vLLM drives the library, from vLLM's backend modules; each is cited in ``sources``. HWTUNE_TRITON_ATTN and
HWTUNE_TURBOQUANT are hwtune's own Triton kernels (``hwtune.kernels``): their entries declare what those kernels
implement, nothing more. They are not vLLM's TRITON_ATTN and TURBOQUANT (other kernels, with other kv-cache
formats), and no engine can be told to load them.
"""

from __future__ import annotations

import dataclasses

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
VLLM = "vllm v1/attention/backends"
FI = "flashinfer 0.6.18"
DECODE = fs("decode")
PREFILL = fs("prefill")
BOTH = fs("decode", "prefill")
CUDA = fs("cuda")
FP16_BF16 = fs("float16", "bfloat16")
KV_16BIT = fs("auto", "float16", "bfloat16")

PROBES = "hwtune.probes.attention.candidates"


def vllm(name: str) -> EngineFlags:
    """vLLM's ``--attention-backend`` value (vllm/v1/attention/backends/registry.py AttentionBackendEnum)."""
    return EngineFlags(("--attention-backend", name))


def sglang(value: str, **by_tactic: str) -> EngineFlags:
    """SGLang's ``--attention-backend`` value (python/sglang/srt/server_args.py ATTENTION_BACKEND_CHOICES)."""
    return EngineFlags(
        ("--attention-backend", value), {t.replace("_", "-"): ("--attention-backend", v) for t, v in by_tactic.items()}
    )


FLASHINFER_PKG = PackageRequirement(
    "flashinfer-python", ">=0.2.0", "FlashInfer attention wrappers", alternatives=("flashinfer>=0.2.0",)
)

# --- FLASHINFER ---------------------------------------------------------------------------------------------
_FI_SINK = (
    f"sinks through {FI} attention/_core.py BatchAttentionWithAttentionSinkWrapper (AttentionSink JIT variant, "
    "jit/attention/variants.py: the sink joins the softmax denominator and the returned LSE), as vllm "
    "flashinfer.py runs FlashInfer prefill with sinks on SM 9.0 / 12.x; hwtune runs it for decode too; no soft-cap"
)
_FI_BASE_FEATURES = fs(F.DECODE_LSE, F.SLIDING_WINDOW, F.SOFT_CAP, F.SPEC_DECODE, F.CUDA_GRAPHS)

_XQA_RULES = AttentionRules(
    compute_capabilities=(CCRange((9, 0), (9, 0)), CCRange((10, 0), (10, 3)), CCRange((12, 0), (12, 1))),
    kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
    head_sizes=multiple_of(16, 16, 256),
    features=fs(F.SLIDING_WINDOW, F.CUDA_GRAPHS, F.SINKS),
)
_XQA_SOURCES = {
    "compute_capabilities": f"{FI} jit/xqa.py: 'XQA is only supported on SM90, SM100, SM120/SM121'",
    "kv_cache_dtypes": f"{FI} xqa.py: KV same as q, fp8 e4m3, int8, nvfp4 (SM12x)",
    "head_sizes": f"{FI} xqa.py: head_dim % 16 == 0 and 16 <= head_dim <= 512",
    "features": f"{FI} decode.py trtllm_batch_decode_with_kv_cache: LSE only on trtllm-gen; sinks= "
    "(float32 per query head) handed to xqa_batch_decode_with_kv_cache (xqa.py: sinks "
    "[num_kv_heads, head_group_ratio]); vllm FlashInferImpl serves sinks on SM 9.0 through XQA",
}

FLASHINFER = Backend(
    name="FLASHINFER",
    kind="attention",
    probe=Probe(f"{PROBES}.flashinfer:FlashInferCandidate", ("flashinfer",)),
    engines={"vllm": vllm("FLASHINFER"), "sglang": sglang("flashinfer", trtllm_gen="trtllm_mha")},
    priority=priority(blackwell=0, others=1),
    # vLLM uses trtllm-gen on SM100 (vllm/utils/flashinfer.py use_trtllm_attention), fa2/fa3 elsewhere;
    # FlashInfer's own auto prefill picks fa3 on SM90 (flashinfer/utils.py determine_attention_backend).
    tactic_order={
        "blackwell": {
            "decode": ("trtllm-gen", "xqa", "fa2-tc", "fa2", "cute-dsl"),
            "prefill": ("trtllm-gen", "fa2-tc", "cute-dsl", "cudnn"),
        },
        "ampere_hopper": {"decode": ("fa2-tc", "fa2", "xqa", "xqa-2x", "fa3"), "prefill": ("fa3", "fa2-tc", "cudnn")},
    },
    quick=True,
    summary="FlashInfer paged decode/prefill wrappers; tactics are its kernel families",
    rules=AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((7, 5), (12, 1)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"),
        head_sizes=ints(64, 128, 256),
        block_sizes=ints(16, 32, 64),
        kv_layouts=fs("NHD", "HND"),
        gqa_groups=multiple_of(1),
        features=_FI_BASE_FEATURES | fs(F.SINKS),
    ),
    packages=(FLASHINFER_PKG,),
    tactics=(
        Tactic(
            "fa2",
            DECODE,
            AttentionRules(features=_FI_BASE_FEATURES - {F.SPEC_DECODE}, gqa_groups=ints(1, 2, 3, 4, 6, 8)),
            compile_s=12,
            summary="decode: BatchDecode on CUDA cores (use_tensor_cores=False)",
            sources={
                "gqa_groups": f"{FI} include/flashinfer/utils.cuh DISPATCH_GQA_GROUP_SIZE (decode kernel)",
                "features": f"{FI} decode.py BatchDecodeWithPagedKVCacheWrapper.run (return_lse; q_len 1)",
            },
        ),
        Tactic(
            "fa2-tc",
            BOTH,
            AttentionRules(features=_FI_BASE_FEATURES | fs(F.SINKS)),
            compile_s=28,
            summary="fa2 on tensor cores: BatchPrefill backend='fa2'; decode via use_tensor_cores=True",
            sources={"features": f"{FI} decode.py: use_tensor_cores runs the prefill kernel; return_lse; {_FI_SINK}"},
        ),
        Tactic(
            "fa3",
            BOTH,
            AttentionRules(
                compute_capabilities=(CCRange((9, 0), (9, 0)),),
                kv_cache_dtypes=KV_16BIT,
                features=_FI_BASE_FEATURES | fs(F.SINKS),
            ),
            compile_s=90,
            summary="Hopper FA3 template (decode through use_tensor_cores=True, backend='fa3')",
            sources={
                "compute_capabilities": f"{FI} jit/attention/modules.py fa3 built with sm90a flags only",
                "kv_cache_dtypes": f"{FI} aot.py gen_fa3: dtype_q == dtype_kv (no fp8 KV with 16-bit q)",
                "features": f"{FI} prefill.py run(return_lse=True); {_FI_SINK}",
            },
        ),
        Tactic(
            "xqa",
            DECODE,
            _XQA_RULES,
            compile_s=8,
            summary="TensorRT-LLM XQA decode kernel via trtllm_batch_decode_with_kv_cache(backend='xqa')",
            sources=_XQA_SOURCES,
        ),
        Tactic(
            "xqa-2x",
            DECODE,
            dataclasses.replace(
                _XQA_RULES, compute_capabilities=(CCRange((9, 0), (9, 0)),), kv_cache_dtypes=fs("fp8_e4m3")
            ),
            compile_s=8,
            hwtune_only=True,
            summary="XQA's SM 9.0 fp8 kernel called as flashinfer.xqa.xqa with sm_count twice the device's: twice the "
            "sub-sequences per request (hwtune's call: no engine makes it, so it ranks no engine's backend)",
            sources={
                **_XQA_SOURCES,
                "compute_capabilities": f"{FI} xqa.py: the SM90 GMMA kernel (mha_sm90.cu) runs only for an fp8 e4m3 "
                "cache on SM 9.x (run_sm90_fp8_mha); hwtune measured the doubling on SM 9.0 only",
                "kv_cache_dtypes": f"{FI} xqa.py run_sm90_fp8_mha: fp8 e4m3 only. csrc/xqa/mha_sm90.cu splits a "
                "request over round(sm_count * 3 / (batch * kv_heads) * 0.25) sub-sequences, the generic kernel "
                "(mha.cu, every other cache) over sm_count / (batch * kv_heads), 4/3 of that already; doubling it "
                "measured slower there (bf16, Mixtral TP 2) and 7-19 % faster on the SM90 kernel at one to eight "
                "requests (H100, 2026-11-27, benchmarks/experiments/xqa_sub_seq.py)",
            },
        ),
        Tactic(
            "cudnn",
            PREFILL,
            AttentionRules(
                compute_capabilities=(CCRange((8, 0)),),
                kv_cache_dtypes=KV_16BIT,
                head_sizes=ints(128),
                kv_layouts=fs("NHD"),
                features=fs(F.DECODE_LSE),
            ),
            summary="cuDNN paged prefill (flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache)",
            sources={
                "phases": f"{FI}: cudnn is not a BatchDecode wrapper backend; decode returns no LSE",
                "head_sizes": f"{FI} cudnn/prefill.py: without the frontend, paged needs d_qk == 128",
                "kv_layouts": f"{FI} prefill.py: 'CUDNN backend only supports NHD layout' (seen on H100, 2026-11-21)",
                "compute_capabilities": "cuDNN frontend SDPA: Ampere and newer",
                "kv_cache_dtypes": f"{FI} cudnn/prefill.py: fp8 needs q/k/v scales of an fp8 q",
                "features": f"{FI} cudnn/prefill.py return_lse (natural-log LSE, [batch, max_query_len, heads]; called "
                "directly: the prefill wrapper's run allocates a [tokens, heads] LSE and fails)",
                "packages": f"{FI} cudnn/prefill.py CUDNN_AVAILABLE: without nvidia-cudnn-frontend, cubins for SM 10.0 "
                "only (csrc/cudnn_sdpa_kernel_launcher.cu); checked at run time, not a catalogue rule",
            },
        ),
        Tactic(
            "trtllm-gen",
            BOTH,
            AttentionRules(
                compute_capabilities=(CCRange((10, 0), (10, 3)),),
                kv_layouts=fs("HND"),
                features=fs(F.SINKS, F.SLIDING_WINDOW, F.SPEC_DECODE, F.CUDA_GRAPHS),
            ),
            packages=(
                PackageRequirement(
                    "flashinfer-cubin", "", "precompiled trtllm-gen kernels (else downloaded from NVIDIA at first use)"
                ),
            ),
            summary="TensorRT-LLM generated kernels (Blackwell)",
            sources={
                "compute_capabilities": f"{FI} tests: 'only guaranteed to work on SM100 and SM103'; "
                "vllm utils/flashinfer.py supports_trtllm_attention (SM100 family)",
                "kv_layouts": f"{FI} decode.py trtllm_batch_decode_with_kv_cache kv_layout='HND'; vllm requires HND",
                "features": "vllm utils/flashinfer.py use_trtllm_attention: 'Trtllm does not support returning "
                "LSE'; sinks and spec decode force TRTLLM",
                "packages": f"{FI} jit/cubin_loader.py: cubins from flashinfer-cubin or FLASHINFER_CUBIN_DIR",
            },
        ),
        Tactic(
            "cute-dsl",
            BOTH,
            AttentionRules(
                compute_capabilities=(CCRange((10, 0)),),
                kv_cache_dtypes=KV_16BIT,
                head_sizes=ints(64, 128, 256),
                features=fs(F.SLIDING_WINDOW, F.CUDA_GRAPHS),
            ),
            packages=(PackageRequirement("nvidia-cutlass-dsl", ">=4.0", "CuTe DSL kernels"),),
            summary="CuTe-DSL GQA decode/prefill kernels (SM100+)",
            sources={
                "compute_capabilities": f"{FI} cute_dsl/attention/wrappers: SM100+",
                "kv_cache_dtypes": f"{FI} cute_dsl wrappers: kv_dtype == q_dtype",
                "head_sizes": f"{FI} cute_dsl batch_decode: head_dim a positive multiple of 64",
                "features": f"{FI} cute_dsl: no soft-cap; no LSE declared",
            },
        ),
    ),
    sources={
        "device_types": f"{VLLM}/flashinfer.py (CUDA platform only)",
        "compute_capabilities": f"{VLLM}/flashinfer.py FlashInferBackend.supports_compute_capability: "
        "7.5 <= cc <= 12.1",
        "dtypes": f"{VLLM}/flashinfer.py FlashInferBackend.supported_dtypes",
        "kv_cache_dtypes": f"{VLLM}/flashinfer.py supported_kv_cache_dtypes (fp8 is fp8_e4m3)",
        "head_sizes": f"{VLLM}/flashinfer.py get_supported_head_sizes -> [64, 128, 256]",
        "block_sizes": f"{VLLM}/flashinfer.py get_supported_kernel_block_sizes -> [16, 32, 64]",
        "kv_layouts": f"{VLLM}/flashinfer.py get_kv_cache_stride_order (NHD, HND); "
        f"{FI} utils.py _unpack_paged_kv_cache",
        "gqa_groups": f"{VLLM}/flashinfer.py: num_qo_heads % num_kv_heads == 0 (any group via tensor cores)",
        "features": f"{VLLM}/flashinfer.py FlashInferImpl.can_return_lse_for_decode=True, window_left, "
        "logits_soft_cap; sinks per tactic (fa2-tc, fa3, xqa, trtllm-gen), as each tactic's source says; "
        f"not CUDA-core fa2 decode ({FI} decode.py: BatchDecode run(sinks=) reaches only trtllm-gen's paged_run), "
        f"cudnn (no sink argument) or cute-dsl ({FI} prefill.py: 'the public cute-dsl paged route does not accept "
        "run-time attention sinks')",
        "packages": "vllm requirements/cuda.txt flashinfer-python",
        "tactics": f"{FI} decode.py / prefill.py backend= values; xqa.py; cudnn/; cute_dsl/",
    },
)

# --- FLASH_ATTN ---------------------------------------------------------------------------------------------
_FA_FEATURES = fs(F.DECODE_LSE, F.SLIDING_WINDOW, F.SOFT_CAP, F.SPEC_DECODE, F.CUDA_GRAPHS)

FLASH_ATTN = Backend(
    name="FLASH_ATTN",
    kind="attention",
    probe=Probe(f"{PROBES}.flash_attn:FlashAttnCandidate"),
    engines={
        "vllm": vllm("FLASH_ATTN"),
        "sglang": EngineFlags(
            by_tactic={"fa3": ("--attention-backend", "fa3"), "fa4": ("--attention-backend", "fa4")},
            missing="SGLang's FlashAttention backend is fa3/fa4; the selected tactic {tactic} has no SGLang flag",
        ),
    },
    priority=priority(blackwell=1, others=0),
    # FLASH_ATTN's default version is FA3 on SM90, FA4 on SM10x, FA2 otherwise (vllm fa_utils.py).
    tactic_order={
        "blackwell": {"decode": ("fa4", "fa2"), "prefill": ("fa4", "fa2")},
        "ampere_hopper": {"decode": ("fa3", "fa2"), "prefill": ("fa3", "fa2")},
    },
    quick=True,
    summary="FlashAttention varlen with a paged KV cache (flash_attn / vllm_flash_attn)",
    rules=AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((8, 0)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
        head_sizes=multiple_of(8, 8, 256),
        block_sizes=multiple_of(16, 16),
        kv_layouts=fs("NHD", "HND"),
        gqa_groups=multiple_of(1),
        features=_FA_FEATURES | fs(F.SINKS),
    ),
    packages=(
        PackageRequirement("flash-attn", ">=2.5", "flash_attn_varlen_func with block_table", alternatives=("vllm",)),
    ),
    tactics=(
        Tactic(
            "fa2",
            BOTH,
            AttentionRules(kv_cache_dtypes=KV_16BIT, features=_FA_FEATURES),
            summary="FlashAttention-2",
            sources={
                "kv_cache_dtypes": f"{VLLM}/fa_utils.py flash_attn_supports_fp8: FA3 on SM90 only",
                "features": "vllm_flash_attn/flash_attn_interface.py: 'FA2 does not support s_aux' (no sinks)",
            },
        ),
        Tactic(
            "fa3",
            BOTH,
            AttentionRules(compute_capabilities=(CCRange((9, 0), (9, 0)),), features=_FA_FEATURES | fs(F.SINKS)),
            packages=(
                PackageRequirement(
                    "flash-attn-3", "", "FlashAttention-3 (Hopper)", alternatives=("vllm", "flash_attn_3")
                ),
            ),
            summary="FlashAttention-3 (Hopper)",
            sources={
                "compute_capabilities": f"{VLLM}/fa_utils.py get_flash_attn_version: FA3 when major == 9",
                "features": f"{VLLM}/flash_attn.py supports_sink; sinks as s_aux, bf16 only (vllm-project/"
                "flash-attention hopper/flash_api.cpp: 'We only support bf16 dtype for S aux')",
                "kv_cache_dtypes": f"{VLLM}/fa_utils.py get_fp8_dtype_for_flashattn: e4m3 only",
            },
        ),
        Tactic(
            "fa4",
            BOTH,
            AttentionRules(
                compute_capabilities=(CCRange((10, 0)),),
                kv_cache_dtypes=KV_16BIT,
                head_sizes=multiple_of(8, 8, 128),
                features=_FA_FEATURES | fs(F.SINKS),
            ),
            packages=(
                PackageRequirement("vllm", "", "FA4 ships with vllm_flash_attn", alternatives=("flash-attn-4",)),
            ),
            summary="FlashAttention-4 (CuTe DSL, Blackwell)",
            sources={
                "compute_capabilities": f"{VLLM}/fa_utils.py: FA4 when major >= 10",
                "head_sizes": f"{VLLM}/fa_utils.py: FA4 with head_size > 128 on SM10x falls back to FA2",
                "features": f"{VLLM}/flash_attn.py supports_sink (flash_attn_supports_sinks: FA3 and FA4); "
                "vllm_flash_attn/flash_attn_interface.py passes s_aux to FA4 as learnable_sink (cute/softmax.py "
                "finalize adds the sink to the row sum and the LSE)",
            },
        ),
    ),
    sources={
        "device_types": f"{VLLM}/flash_attn.py (CUDA)",
        "compute_capabilities": f"{VLLM}/flash_attn.py supports_compute_capability: cc >= 8.0",
        "dtypes": f"{VLLM}/flash_attn.py supported_dtypes",
        "kv_cache_dtypes": f"{VLLM}/flash_attn.py supports_kv_cache_dtype (fp8 only with FA3 on SM90)",
        "head_sizes": f"{VLLM}/flash_attn.py supports_head_size: head_size % 8 == 0 and <= 256",
        "block_sizes": f"{VLLM}/flash_attn.py get_supported_kernel_block_sizes -> [MultipleOf(16)]",
        "kv_layouts": f"{VLLM}/flash_attn.py get_kv_cache_stride_order NHD/HND",
        "gqa_groups": "flash_attn_varlen_func: any num_heads divisible by num_heads_k",
        "features": f"{VLLM}/flash_attn.py can_return_lse_for_decode=True, sliding window, softcap, varlen "
        "queries, cudagraph ALWAYS (FA3) / UNIFORM_BATCH (FA2); no PCP (vllm 0.33.0 v1/attention/backend.py: "
        "AttentionImpl.supports_pcp = False, FlashAttentionImpl does not set it)",
        "packages": "flash-attn (Dao-AILab) or vllm's bundled vllm_flash_attn",
        "tactics": f"{VLLM}/fa_utils.py get_flash_attn_version (2, 3, 4)",
    },
)

# --- HWTUNE_TRITON_ATTN (hwtune's kernel) -------------------------------------------------------------------


def hwtune_kernel(engine: str, kernel: str, theirs: str) -> EngineFlags:
    """No flag: an engine cannot load hwtune's own kernel (its same-named backend, if any, is another kernel)."""
    return EngineFlags(missing=f"{kernel} is hwtune's own Triton kernel; {engine} cannot load it ({theirs})")


HWTUNE_TRITON_ATTN = Backend(
    name="HWTUNE_TRITON_ATTN",
    kind="attention",
    probe=Probe(f"{PROBES}.triton_attn:TritonAttnCandidate", ("triton",)),
    engines={
        "vllm": hwtune_kernel("vLLM", "HWTUNE_TRITON_ATTN", "vLLM's TRITON_ATTN is a different kernel"),
        "sglang": hwtune_kernel("SGLang", "HWTUNE_TRITON_ATTN", "SGLang's triton backend is a different kernel"),
    },
    priority=priority(blackwell=2, others=2),
    quick=True,
    summary="hwtune's own paged attention in Triton (not vLLM's TRITON_ATTN): split-KV decode with LSE merge, "
    "chunked causal prefill",
    rules=AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((8, 0)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("auto", "float16", "bfloat16", "fp8_e4m3"),
        kv_cache_dtype_min_cc={"fp8_e4m3": (8, 9)},
        head_sizes=ints(64, 96, 128, 256),
        block_sizes=multiple_of(16, 16, 128),
        kv_layouts=fs("NHD", "HND"),
        gqa_groups=multiple_of(1),
        features=fs(F.DECODE_LSE, F.SPEC_DECODE, F.CUDA_GRAPHS),
    ),
    packages=(PackageRequirement("triton", ">=3.0", "JIT-compiled kernels"),),
    tactics=(
        Tactic("auto", BOTH, AttentionRules(), summary="heuristic tile sizes and KV splits per shape", compile_s=10),
        Tactic(
            "tuned",
            BOTH,
            AttentionRules(),
            summary="tile sizes, KV splits, warps, stages searched per workload",
            compile_s=60,
            # the search per later workload (H100, 2026-11-27, benchmarks/experiments/triton_specialization.py):
            # 0.4-2.4 s where its kernels' constexpr class was compiled before, 36-40 s for a new one (a plan meets
            # about 6: split or not, prefill KV in L2 or not); mean 9.9 s over an experiment's 17 workloads. The
            # warm-up compiles those classes up front: in the every-backend tune of that day (98 workloads) the
            # search took 0.28 s median, 0.78 mean, 7.5 at most (a 8192-token chunk on a 32768-token prefix)
            recompile_s=1,
            quick=False,
            # its search starts from auto's config (config_search.py); measured: docs/tuning.md "Covered tactics"
            covers=("auto",),
        ),
    ),
    sources={
        "device_types": "hwtune/kernels/triton_attention.py (Triton on CUDA)",
        "compute_capabilities": "hwtune kernels use bf16 tl.dot: Ampere (SM 8.0) and newer",
        "dtypes": "hwtune/kernels/triton_attention.py",
        "kv_cache_dtypes": "hwtune/kernels/triton_attention.py (fp8 e4m3 with per-tensor scales)",
        "kv_cache_dtype_min_cc": "triton: 'fp8e4nv data type is not supported on CUDA arch < 89'",
        "head_sizes": "hwtune/kernels/triton_attention.py HEAD_SIZES (96 padded to a power of two)",
        "block_sizes": "hwtune/kernels/triton_attention.py: page sizes 16 to 128, multiples of 16",
        "kv_layouts": "hwtune/kernels/triton_attention.py (strides for NHD and HND)",
        "gqa_groups": "hwtune/kernels/triton_attention.py (query heads grouped per KV head)",
        "features": "hwtune/kernels/triton_attention.py returns LSE; multi-token decode queries; "
        "no host sync in the launch path (graph-capturable)",
        "packages": "triton",
        "tactics": "hwtune/kernels/triton_attention.py configs",
    },
)

# --- FLEX_ATTENTION -----------------------------------------------------------------------------------------
FLEX_ATTENTION = Backend(
    name="FLEX_ATTENTION",
    kind="attention",
    probe=Probe(f"{PROBES}.flex:FlexCandidate"),
    engines={"vllm": vllm("FLEX_ATTENTION"), "sglang": sglang("flex_attention")},
    priority=priority(blackwell=3, others=3, cpu=1),
    compile_per_shape=True,
    summary="torch.nn.attention.flex_attention over the paged cache (block mask from the page table), compiled",
    rules=AttentionRules(
        device_types=fs("cuda", "cpu"),
        compute_capabilities=(CCRange((8, 0)),),
        dtypes=fs("float16", "bfloat16", "float32"),
        kv_cache_dtypes=KV_16BIT,
        head_sizes=ints(16, 32, 64, 128, 256),
        block_sizes=multiple_of(16, 16),
        kv_layouts=fs("NHD", "HND"),
        gqa_groups=multiple_of(1),
        features=fs(F.SLIDING_WINDOW, F.SPEC_DECODE, F.SINKS),
    ),
    packages=(PackageRequirement("torch", ">=2.5", "flex_attention with enable_gqa"),),
    needs_cuda_torch=False,
    tactics=(
        Tactic(
            "compiled",
            BOTH,
            AttentionRules(),
            summary="torch.compile(flex_attention): dynamic shapes on CUDA (as vLLM runs it), per shape on CPU",
            compile_s=25,
            # later shapes of a spec: 0-0.02 s, a new specialisation (batch 1 / more, query blocks) 3-8 s; the block
            # mask compiles nothing (H100, 2026-11-27, benchmarks/experiments/flex_dynamic.py, flex_mask.py)
            recompile_s=1,
        ),
    ),
    sources={
        "device_types": "torch.nn.attention.flex_attention: CUDA and CPU (compiled)",
        "compute_capabilities": "torch flex_attention Triton templates need SM 8.0 for bf16",
        "dtypes": f"{VLLM}/flex_attention.py supported_dtypes",
        "kv_cache_dtypes": f"{VLLM}/flex_attention.py: 'FlexAttention does not support quantized kv-cache'",
        "head_sizes": "torch flex_attention: head dim a power of two >= 16 (non-powers are padded or rejected "
        "by version; declared powers only)",
        "block_sizes": f"{VLLM}/flex_attention.py get_supported_kernel_block_sizes -> [MultipleOf(16)]",
        "kv_layouts": "hwtune/probes/attention/candidates/flex.py gathers pages in either layout",
        "gqa_groups": "torch flex_attention(enable_gqa=True)",
        "features": f"{VLLM}/flex_attention.py: sliding window by mask_mod; no soft cap, no DCP; sinks as hwtune's "
        "candidate runs flex (hwtune/probes/attention/candidates/flex.py: a zero-value key slot whose score "
        "score_mod sets to the sink; vLLM's FLEX_ATTENTION backend does not apply sinks, its engine snapshot says so)",
        "packages": "torch.nn.attention.flex_attention (torch 2.5)",
        "tactics": "hwtune/probes/attention/candidates/flex.py",
    },
)

# --- TORCH_SDPA ---------------------------------------------------------------------------------------------
_SDPA = "torch.nn.functional.scaled_dot_product_attention"
TORCH_SDPA = Backend(
    name="TORCH_SDPA",
    kind="attention",
    probe=Probe(f"{PROBES}.sdpa:SdpaCandidate"),
    engines={
        "vllm": EngineFlags(
            missing="vLLM has no TORCH_SDPA attention backend for decoder models on CUDA; "
            "pick another ranked backend (see `ranked`) or choose one with --backend"
        ),
        "sglang": sglang("torch_native"),
    },
    # Not in vLLM's CUDA list: hwtune's portable last resort; first on CPU (vLLM's CPU path is SDPA-like).
    priority=priority(blackwell=4, others=4, cpu=0),
    tactic_order={
        "cpu": {"decode": ("math",), "prefill": ("math",)},
        "ampere_hopper": {
            "decode": ("flash", "efficient", "cudnn", "math"),
            "prefill": ("flash", "cudnn", "efficient", "math"),
        },
    },
    summary="KV gathered from the pages, then scaled_dot_product_attention (the gather is timed)",
    rules=AttentionRules(
        device_types=fs("cuda", "cpu"),
        compute_capabilities=(CCRange((7, 0)),),
        dtypes=fs("float16", "bfloat16", "float32"),
        kv_cache_dtypes=KV_16BIT,
        head_sizes=multiple_of(8, 8, 512),
        block_sizes=multiple_of(1),
        kv_layouts=fs("NHD", "HND"),
        gqa_groups=multiple_of(1),
        features=fs(F.SPEC_DECODE, F.SINKS),
    ),
    packages=(PackageRequirement("torch", ">=2.5", "scaled_dot_product_attention(enable_gqa=)"),),
    needs_cuda_torch=False,
    tactics=(
        Tactic(
            "flash",
            BOTH,
            AttentionRules(
                device_types=CUDA,
                compute_capabilities=(CCRange((8, 0)),),
                dtypes=FP16_BF16,
                head_sizes=multiple_of(8, 8, 256),
                features=fs(F.SPEC_DECODE),
            ),
            summary="SDPBackend.FLASH_ATTENTION",
            sources={
                "head_sizes": "torch sdp_utils.cpp check_head_dim_size_flash: <= 256, multiple of 8",
                "features": "no sinks: hwtune's sink key column needs an attention mask, which the flash kernel "
                "does not take (hwtune/probes/attention/candidates/sdpa.py)",
            },
        ),
        Tactic(
            "efficient",
            BOTH,
            AttentionRules(device_types=CUDA),
            summary="SDPBackend.EFFICIENT_ATTENTION (memory-efficient, xformers-derived)",
        ),
        Tactic(
            "cudnn",
            BOTH,
            AttentionRules(
                device_types=CUDA,
                compute_capabilities=(CCRange((9, 0)),),
                dtypes=FP16_BF16,
                head_sizes=multiple_of(8, 8, 128),
                features=fs(F.SPEC_DECODE),
            ),
            summary="SDPBackend.CUDNN_ATTENTION",
            sources={
                "compute_capabilities": "torch sdp_utils.cpp check_cudnn_hardware_support (sm90+ default)",
                "head_sizes": "torch sdp_utils.cpp check_cudnn_tensor_shapes: head dim <= 128",
                "features": "no sinks: hwtune's sink key column needs a boolean mask, and the cuDNN kernel gave wrong "
                "answers with one (H100 2026-11-21, docs/catalogue.md); with sinks it was wrong_answer again (gpt-oss "
                "decode 16 x 4096, H100 2026-11-25, relative L2 2.3e5)",
            },
        ),
        Tactic("math", BOTH, AttentionRules(), summary="SDPBackend.MATH (reference-grade, runs on CPU)"),
    ),
    sources={
        "device_types": f"{_SDPA}: CUDA and CPU",
        "compute_capabilities": f"{_SDPA} efficient kernel: SM 5.0+, declared from Volta",
        "dtypes": f"{_SDPA}",
        "kv_cache_dtypes": "SDPA has no quantized-KV path; hwtune does not dequantize for it",
        "head_sizes": "torch sdp_utils.cpp: efficient kernel head dim multiple of 8; math any",
        "block_sizes": "pages are gathered before SDPA: any page size",
        "kv_layouts": "hwtune/probes/attention/candidates/sdpa.py gathers pages in either layout",
        "gqa_groups": f"{_SDPA}(enable_gqa=True)",
        "features": f"{_SDPA} returns no LSE (no DCP); causal offset mask serves multi-token decode; sinks as "
        "hwtune's candidate runs SDPA (hwtune/probes/attention/candidates/sdpa.py: one extra key column whose logit is "
        "the sink, value zero; SDPA has no sink argument)",
        "packages": "torch 2.5 added enable_gqa",
        "tactics": "torch.nn.attention.SDPBackend",
    },
)

# --- HWTUNE_TURBOQUANT (hwtune's kernel) --------------------------------------------------------------------
HWTUNE_TURBOQUANT = Backend(
    name="HWTUNE_TURBOQUANT",
    kind="attention",
    probe=Probe(f"{PROBES}.turboquant:TurboQuantCandidate", ("triton",)),
    engines={
        "vllm": hwtune_kernel(
            "vLLM",
            "HWTUNE_TURBOQUANT",
            "vLLM's TURBOQUANT is a different kernel, for the kv-cache dtypes turboquant_k8v4, turboquant_4bit_nc, "
            "turboquant_k3v4_nc and turboquant_3bit_nc",
        ),
        "sglang": hwtune_kernel("SGLang", "HWTUNE_TURBOQUANT", "SGLang has no TurboQuant KV-cache backend"),
    },
    # Last: it only wins where it is the only valid backend (hwtune's turboquant_* kv caches).
    priority=priority(blackwell=5, others=5),
    quick=True,
    summary="hwtune's own compressed KV cache (not vLLM's TURBOQUANT): randomised Hadamard rotation + scalar "
    "codes, attention on codes",
    rules=AttentionRules(
        device_types=CUDA,
        compute_capabilities=(CCRange((8, 0)),),
        dtypes=FP16_BF16,
        kv_cache_dtypes=fs("turboquant_4bit", "turboquant_8bit"),
        head_sizes=ints(64, 128, 256),
        block_sizes=multiple_of(16, 16, 128),
        kv_layouts=fs("NHD", "HND"),
        gqa_groups=multiple_of(1),
        features=fs(F.DECODE_LSE, F.SPEC_DECODE),
    ),
    packages=(PackageRequirement("triton", ">=3.0", "JIT-compiled kernels"),),
    tactics=(
        Tactic("auto", BOTH, AttentionRules(), summary="split-KV decode and chunked prefill on codes", compile_s=10),
    ),
    sources={
        "device_types": "hwtune/kernels/turboquant.py (Triton on CUDA)",
        "compute_capabilities": "hwtune/kernels/turboquant.py (bf16 tl.dot: SM 8.0+)",
        "dtypes": "hwtune/kernels/turboquant.py",
        "kv_cache_dtypes": "hwtune/kernels/turboquant.py: hwtune's own formats turboquant_4bit and turboquant_8bit "
        "(not vLLM's turboquant_k8v4, turboquant_4bit_nc, ...)",
        "head_sizes": "Hadamard rotation needs a power-of-two head size",
        "block_sizes": "hwtune/kernels/turboquant.py: page sizes 16 to 128",
        "kv_layouts": "hwtune/kernels/turboquant.py: allocate_cache(layout='NHD' | 'HND'); both "
        "pass tests/kernels/test_gpu.py on an H100 (HND decodes faster: docs/kernels.md)",
        "gqa_groups": "hwtune/kernels/turboquant.py",
        "features": "hwtune/kernels/turboquant.py returns LSE; multi-token decode queries",
        "packages": "triton",
        "tactics": "hwtune/kernels/turboquant.py",
    },
)

ATTENTION_BACKENDS: tuple[Backend, ...] = (
    FLASHINFER,
    FLASH_ATTN,
    HWTUNE_TRITON_ATTN,
    FLEX_ATTENTION,
    HWTUNE_TURBOQUANT,
    TORCH_SDPA,
)

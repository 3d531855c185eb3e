"""Static priorities per architecture family: the fallback order when nothing applicable was measured.

Attention orders follow vLLM's ``CudaPlatformBase._get_backend_priorities`` (vllm/platforms/cuda.py):
its Blackwell branch is ``device_capability.major == 10``, so SM 12.x (consumer Blackwell) takes the
FLASH_ATTN-first order of the other CUDA GPUs. TURBOQUANT is last, as vLLM appends it; it only ever wins
when it is the only valid backend (turboquant_* kv caches). TORCH_SDPA is not in vLLM's CUDA list; it is
hwtune's portable last resort. On CPU, TORCH_SDPA (vLLM's CPU path is SDPA-like) comes before FLEX_ATTENTION.

All2all orders: vLLM's default is allgather_reducescatter (vllm/config/parallel.py), the choice that runs
everywhere. Where specialised kernels are installed and valid they are preferred as vLLM's expert-parallel
deployment guide recommends: DeepEP low-latency (decode) then high-throughput (prefill) on Hopper; the
FlashInfer NVLink kernels on Blackwell (NVL72 MNNVL systems), which vLLM makes the default on GB200/GB300.
"""

from __future__ import annotations

from typing import Mapping, Sequence

_ATTN_SM10 = ("FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION", "TORCH_SDPA", "TURBOQUANT")
_ATTN_OTHER = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TORCH_SDPA", "TURBOQUANT")
_ATTN_CPU = ("TORCH_SDPA", "FLEX_ATTENTION")
# vllm/platforms/cuda.py _get_backend_priorities(use_mla=True): SM10: FLASHINFER_MLA, CUTLASS_MLA,
# (FLASH_ATTN_MLA), FLASHMLA, TRITON_MLA; others: (FLASH_ATTN_MLA), FLASHMLA, FLASHINFER_MLA, TRITON_MLA.
_MLA_SM10 = ("FLASHINFER_MLA", "CUTLASS_MLA", "FLASHMLA", "TRITON_MLA")
_MLA_OTHER = ("FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA")

_A2A_BLACKWELL = (
    "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided", "deepep_low_latency", "deepep_high_throughput",
    "allgather_reducescatter", "nccl_alltoallv", "naive", "pplx",
)
_A2A_HOPPER = (
    "deepep_low_latency", "deepep_high_throughput", "allgather_reducescatter", "pplx", "nccl_alltoallv", "naive",
    "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided",
)
_A2A_CPU = ("allgather_reducescatter", "nccl_alltoallv", "naive")

PRIORITIES: Mapping[tuple[str, str], Mapping[str, Sequence[str]]] = {
    ("attention", "standard"): {
        "blackwell": _ATTN_SM10, "blackwell_consumer": _ATTN_OTHER, "ampere_hopper": _ATTN_OTHER,
        "other": _ATTN_OTHER, "cpu": _ATTN_CPU,
    },
    ("attention", "mla"): {
        "blackwell": _MLA_SM10, "blackwell_consumer": _MLA_OTHER, "ampere_hopper": _MLA_OTHER,
        "other": _MLA_OTHER, "cpu": (),
    },
    ("all2all", "standard"): {
        "blackwell": _A2A_BLACKWELL, "blackwell_consumer": _A2A_HOPPER, "ampere_hopper": _A2A_HOPPER,
        "other": _A2A_HOPPER, "cpu": _A2A_CPU,
    },
}

#: Tactic preference within a backend when nothing was measured, per family and phase. Sources: vLLM uses
#: trtllm-gen on SM100 (vllm/utils/flashinfer.py use_trtllm_attention) and FlashInfer's fa2/fa3 elsewhere;
#: FlashInfer's own ``auto`` prefill picks fa3 on SM90 (flashinfer/utils.py determine_attention_backend);
#: FLASH_ATTN's default version is FA3 on SM90, FA4 on SM10x, FA2 otherwise (vllm fa_utils.py).
TACTIC_PRIORITIES: Mapping[str, Mapping[str, Mapping[str, Sequence[str]]]] = {
    "FLASHINFER": {
        "blackwell": {"decode": ("trtllm-gen", "xqa", "fa2-tc", "fa2", "cute-dsl"),
                      "prefill": ("trtllm-gen", "fa2-tc", "cute-dsl", "cudnn")},
        "ampere_hopper": {"decode": ("fa2-tc", "fa2", "xqa", "fa3"), "prefill": ("fa3", "fa2-tc", "cudnn")},
    },
    "FLASH_ATTN": {
        "blackwell": {"decode": ("fa4", "fa2"), "prefill": ("fa4", "fa2")},
        "ampere_hopper": {"decode": ("fa3", "fa2"), "prefill": ("fa3", "fa2")},
    },
    "TORCH_SDPA": {
        "cpu": {"decode": ("math",), "prefill": ("math",)},
        "ampere_hopper": {"decode": ("flash", "efficient", "cudnn", "math"),
                          "prefill": ("flash", "cudnn", "efficient", "math")},
    },
}


def backend_order(kind: str, mla: bool, family: str) -> Sequence[str]:
    table = PRIORITIES[(kind, "mla" if mla else "standard")]
    return table.get(family, table["other"])


def tactic_order(backend: str, family: str, phase: str) -> Sequence[str]:
    """Preferred tactic names for a backend; empty means the catalogue's declaration order."""
    per_family = TACTIC_PRIORITIES.get(backend, {})
    table = per_family.get(family) or per_family.get("ampere_hopper") or {}
    return table.get(phase, ())


def describe_family(family: str) -> str:
    return {
        "blackwell": "SM 10.x (Blackwell)",
        "blackwell_consumer": "SM 12.x (consumer Blackwell)",
        "ampere_hopper": "SM 8.x/9.x (Ampere/Hopper)",
        "cpu": "CPU",
    }.get(family, "other CUDA GPUs")

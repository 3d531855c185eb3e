"""Engine adapters: turn a Selection into the flags an engine is started with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwtune.core.errors import InvalidSpecError

if TYPE_CHECKING:
    from hwtune.selector.selection import Selection


class NoEngineEquivalentError(InvalidSpecError):
    """The chosen backend has no flag in the asked engine; the message says what to use instead."""


def vllm_args(selection: "Selection") -> list[str]:
    """vLLM flags: ``--attention-backend NAME`` (vLLM's names) or ``--all2all-backend name``."""
    if selection.kind == "attention":
        if selection.backend in ("TORCH_SDPA",):
            raise NoEngineEquivalentError(
                "vLLM has no TORCH_SDPA attention backend for decoder models on CUDA; pick another ranked backend "
                "(see `ranked`) or choose one with --backend"
            )
        return ["--attention-backend", selection.backend]
    if selection.backend == "nccl_alltoallv":
        raise NoEngineEquivalentError(
            "nccl_alltoallv is hwtune's reference all-to-all and has no vLLM --all2all-backend value; "
            "pick another ranked backend or choose one with --backend"
        )
    return ["--all2all-backend", selection.backend]


# SGLang's --attention-backend values (python/sglang/srt/server_args.py ATTENTION_BACKEND_CHOICES) and
# --moe-a2a-backend values (none, deepep, flashinfer, ...).
_SGLANG_ATTENTION = {
    "FLASHINFER": "flashinfer",
    "TRITON_ATTN": "triton",
    "FLEX_ATTENTION": "flex_attention",
    "TORCH_SDPA": "torch_native",
    "FLASHINFER_MLA": "flashinfer",
    "CUTLASS_MLA": "cutlass_mla",
    "FLASHMLA": "flashmla",
    "TRITON_MLA": "triton",
}


def sglang_args(selection: "Selection") -> list[str]:
    """SGLang flags for the chosen backend (and tactic where SGLang names kernels separately)."""
    backend, tactic = selection.backend, selection.tactic
    if selection.kind == "attention":
        if backend == "FLASH_ATTN":
            if tactic in ("fa3", "fa4"):
                return ["--attention-backend", tactic]
            raise NoEngineEquivalentError(
                f"SGLang's FlashAttention backend is fa3/fa4; the selected tactic {tactic} has no SGLang flag"
            )
        if backend == "FLASHINFER" and tactic == "trtllm-gen":
            return ["--attention-backend", "trtllm_mha"]
        if backend in _SGLANG_ATTENTION:
            return ["--attention-backend", _SGLANG_ATTENTION[backend]]
        raise NoEngineEquivalentError(f"SGLang has no attention backend equivalent to {backend}")
    if backend == "deepep_low_latency":
        return ["--moe-a2a-backend", "deepep", "--deepep-mode", "low_latency"]
    if backend == "deepep_high_throughput":
        return ["--moe-a2a-backend", "deepep", "--deepep-mode", "normal"]
    if backend in ("flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"):
        return ["--moe-a2a-backend", "flashinfer"]
    if backend in ("allgather_reducescatter", "naive"):
        return ["--moe-a2a-backend", "none"]
    raise NoEngineEquivalentError(f"SGLang has no --moe-a2a-backend equivalent to {backend}")

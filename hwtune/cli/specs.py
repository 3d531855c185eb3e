"""Options that describe an attention spec, shared by `select attention`, `bench attention` and `tune`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from hwtune.core.errors import InvalidSpecError
from hwtune.core.model_config import attention_spec, load_model_config
from hwtune.core.types import AttentionSpec

ModelOpt = typer.Option(None, "--model", "-m", help="Hugging Face config.json (or its folder).")
TpOpt = typer.Option(1, "--tp", min=1, help="Tensor-parallel size: heads are divided as engines divide them.")
NumHeadsOpt = typer.Option(None, "--num-heads", min=1, help="Query heads per rank.")
NumKvHeadsOpt = typer.Option(None, "--num-kv-heads", min=1, help="KV heads per rank.")
HeadSizeOpt = typer.Option(None, "--head-size", min=1)
DtypeOpt = typer.Option(None, "--dtype", help="bfloat16 (default) or float16, float32.")
KvDtypeOpt = typer.Option(
    "auto",
    "--kv-cache-dtype",
    help="auto, bfloat16, float16, fp8 (e4m3), fp8_e5m2, an engine's own names (vLLM: turboquant_k8v4, nvfp4, ...), "
    "or hwtune's turboquant_4bit, turboquant_8bit.",
)
BlockSizeOpt = typer.Option(16, "--block-size", min=1, help="Tokens per KV-cache page.")
#: `select`: no default, as engines: without --block-size each backend runs at its preferred size (docs/engines.md).
SelectBlockSizeOpt = typer.Option(
    None,
    "--block-size",
    min=1,
    help="Tokens per KV-cache page (default: none given; the engine uses each backend's own).",
)
KvLayoutOpt = typer.Option("auto", "--kv-layout", help="auto, NHD or HND.")
DcpOpt = typer.Option(1, "--dcp", min=1, help="Decode context parallel size.")
PcpOpt = typer.Option(1, "--pcp", min=1, help="Prefill context parallel size.")
CpInterleaveOpt = typer.Option(
    1,
    "--cp-interleave",
    min=1,
    help="Tokens per chunk of KV dealt to context-parallel ranks (vLLM cp_kv_cache_interleave_size).",
)
SpecTokensOpt = typer.Option(0, "--spec-tokens", min=0, help="Speculative tokens per decode step.")
SinksOpt = typer.Option(False, "--sinks", help="The model uses attention sinks.")
SlidingOpt = typer.Option(None, "--sliding-window", min=1)
SoftCapOpt = typer.Option(None, "--soft-cap", help="Logits soft-cap.")
MlaOpt = typer.Option(False, "--mla", help="Multi-head latent attention (DeepSeek); head size 576.")


def build_attention_spec(
    model: Optional[Path],
    tp: int,
    num_heads: Optional[int],
    num_kv_heads: Optional[int],
    head_size: Optional[int],
    dtype: Optional[str],
    kv_cache_dtype: str,
    block_size: int,
    kv_layout: str,
    dcp: int,
    pcp: int,
    spec_tokens: int,
    sinks: bool,
    sliding_window: Optional[int],
    soft_cap: Optional[float],
    mla: bool,
    cp_interleave: int = 1,
) -> AttentionSpec:
    """The per-rank spec from --model (and --tp) or from explicit head counts; overrides win."""
    overrides: dict[str, Any] = dict(
        dtype=dtype,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        kv_layout=kv_layout,
        dcp_size=dcp,
        pcp_size=pcp,
        cp_interleave=cp_interleave,
        spec_tokens=spec_tokens,
        sinks=sinks or None,
        sliding_window=sliding_window,
        logits_soft_cap=soft_cap,
    )
    if model is not None:
        info = load_model_config(model)
        return attention_spec(
            info, tp, num_heads=num_heads, num_kv_heads=num_kv_heads, head_size=head_size, **overrides
        )
    if mla:
        num_kv_heads = num_kv_heads or 1
        head_size = head_size or 576
    if num_heads is None or num_kv_heads is None or head_size is None:
        raise InvalidSpecError("give --model config.json, or all of --num-heads, --num-kv-heads and --head-size")
    if tp != 1:
        raise InvalidSpecError("--tp applies to --model; with explicit head counts give per-rank counts")
    fields = {k: v for k, v in overrides.items() if v is not None}
    if mla:
        fields.update(use_mla=True, kv_lora_rank=head_size - 64, qk_rope_head_dim=64)
    return AttentionSpec(num_heads=num_heads, num_kv_heads=num_kv_heads, head_size=head_size, **fields)

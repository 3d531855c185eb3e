"""Options that describe an attention spec, shared by `select attention`, `bench attention` and `tune`, and the
value sets they take (each from the library: the CLI accepts what the library accepts, and --help lists it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, get_args

import typer

from hwtune.cli.common import Choices
from hwtune.core.catalogue.engines.snapshot import known_kv_cache_dtypes
from hwtune.core.errors import InvalidSpecError
from hwtune.core.model_config import attention_spec, load_model_config
from hwtune.core.types import (
    DTYPE_ALIASES,
    KV_CACHE_DTYPE_ALIASES,
    QUANT_DTYPE_ALIASES,
    AttentionSpec,
    KVLayout,
    normalize_dtype,
    normalize_kv_cache_dtype,
    normalize_quant_dtype,
)

#: The names the library knows (hwtune's and every supported engine version's: vLLM's turboquant_k8v4, ...);
#: knowing a name is not supporting it, which each backend's allowlist decides.
KV_CACHE_DTYPE_NAMES = sorted(set(KV_CACHE_DTYPE_ALIASES.values()) | known_kv_cache_dtypes())
KV_CACHE_DTYPES = Choices(
    KV_CACHE_DTYPE_NAMES,
    "kv-cache dtype",
    check=normalize_kv_cache_dtype,
    complete=KV_CACHE_DTYPE_ALIASES,
    metavar="<DTYPE>",
)
KV_LAYOUTS = Choices(get_args(KVLayout), "kv layout")
DTYPES = Choices(sorted(set(DTYPE_ALIASES.values())), "dtype", check=normalize_dtype, complete=DTYPE_ALIASES)
#: MoE dispatch payloads (all2all): one, or several comma-separated where a command sweeps them.
QUANT_DTYPE_NAMES = sorted(set(QUANT_DTYPE_ALIASES.values()))
QUANT_DTYPE = Choices(
    QUANT_DTYPE_NAMES, "activation quant dtype", check=normalize_quant_dtype, complete=QUANT_DTYPE_ALIASES
)
QUANT_DTYPE_LIST = Choices(
    QUANT_DTYPE_NAMES,
    "activation quant dtype",
    check=normalize_quant_dtype,
    complete=QUANT_DTYPE_ALIASES,
    lists=True,
)
KV_CACHE_DTYPE_HELP = (
    f"KV-cache dtype, one of: {', '.join(KV_CACHE_DTYPE_NAMES)} (auto: the model dtype; fp8 = fp8_e4m3; "
    "hwtune's and its engines' names, each backend's allowlist decides where it runs)."
)
KV_LAYOUT_HELP = "KV-cache page layout: NHD, HND, or auto (each backend's own)."

ModelOpt = typer.Option(None, "--model", "-m", help="Hugging Face config.json (or its folder).")
TpOpt = typer.Option(1, "--tp", min=1, help="Tensor-parallel size: heads are divided as engines divide them.")
NumHeadsOpt = typer.Option(None, "--num-heads", min=1, help="Query heads per rank.")
NumKvHeadsOpt = typer.Option(None, "--num-kv-heads", min=1, help="KV heads per rank.")
HeadSizeOpt = typer.Option(None, "--head-size", min=1)
DtypeOpt = DTYPES.option(None, "--dtype", help="Model dtype: bfloat16 (default), float16 or float32.")
KvDtypeOpt = KV_CACHE_DTYPES.option("auto", "--kv-cache-dtype", help=KV_CACHE_DTYPE_HELP)
BlockSizeOpt = typer.Option(16, "--block-size", min=1, help="Tokens per KV-cache page.")
#: `select`: no default, as engines: without --block-size each backend runs at its preferred size (docs/engines.md).
SelectBlockSizeOpt = typer.Option(
    None,
    "--block-size",
    min=1,
    help="Tokens per KV-cache page (default: none given; the engine uses each backend's own).",
)
KvLayoutOpt = KV_LAYOUTS.option("auto", "--kv-layout", help=KV_LAYOUT_HELP)
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

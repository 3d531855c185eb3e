"""``hwtune select attention|all2all``: the library's selection, printed for people or as JSON/flags."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from hwtune.cli.common import AssumeInstalledOpt, DeviceOpt, JsonOpt, console, emit_json, guarded
from hwtune.selector.errors import InvalidSpecError
from hwtune.selector.model_config import all2all_spec, attention_spec, load_model_config
from hwtune.selector.select import select_all2all, select_attention
from hwtune.selector.selection import Selection
from hwtune.selector.types import All2AllSpec, AttentionSpec

app = typer.Typer(help="Which backend should the engine use? Ranked valid backends, rejected ones with reasons.",
                  no_args_is_help=True)


class Format(str, Enum):
    text = "text"
    json = "json"
    vllm = "vllm"
    sglang = "sglang"


BackendOpt = typer.Option(None, "--backend", "-b", help="Ask for this backend; an error if it is not valid here.")
ExplainOpt = typer.Option(False, "--explain", help="Show every rank's source and every rejection's reasons.")
FormatOpt = typer.Option(Format.text, "--format", help="text, json, or the engine's flags (vllm, sglang).")
ModelOpt = typer.Option(None, "--model", "-m", help="Hugging Face config.json (or its folder).")


def _print(selection: Selection, json_out: bool, explain: bool, fmt: Format) -> None:
    if json_out or fmt is Format.json:
        emit_json(selection.to_dict())
        return
    if fmt is Format.vllm:
        print(" ".join(selection.to_vllm_args()))
        return
    if fmt is Format.sglang:
        print(" ".join(selection.to_sglang_args()))
        return
    if explain:
        console.print(selection.explain(), markup=False)
        return
    ranked = ", ".join(r.backend for r in selection.ranked)
    console.print(f"{selection.kind}: [bold]{selection.backend}[/] (tactic {selection.tactic}) "
                  f"on {selection.device.describe()}")
    console.print(f"  valid, in order: {ranked}", markup=False)
    if selection.rejected:
        console.print(f"  rejected: {', '.join(selection.rejected)} (--explain for reasons)", markup=False)
    print(selection.backend)


@app.command("attention")
@guarded
def attention(
    model: Optional[Path] = ModelOpt,
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size: heads are divided as engines divide them."),
    num_heads: Optional[int] = typer.Option(None, "--num-heads", help="Query heads per rank."),
    num_kv_heads: Optional[int] = typer.Option(None, "--num-kv-heads", help="KV heads per rank."),
    head_size: Optional[int] = typer.Option(None, "--head-size"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="bfloat16 (default) or float16, float32."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype",
                                       help="auto, bfloat16, float16, fp8 (e4m3), fp8_e5m2, turboquant_4bit, ..."),
    block_size: int = typer.Option(16, "--block-size", help="Tokens per KV-cache page."),
    kv_layout: str = typer.Option("auto", "--kv-layout", help="auto, NHD or HND."),
    dcp: int = typer.Option(1, "--dcp", help="Decode context parallel size."),
    pcp: int = typer.Option(1, "--pcp", help="Prefill context parallel size."),
    spec_tokens: int = typer.Option(0, "--spec-tokens", help="Speculative tokens per decode step."),
    sinks: bool = typer.Option(False, "--sinks", help="The model uses attention sinks."),
    sliding_window: Optional[int] = typer.Option(None, "--sliding-window"),
    soft_cap: Optional[float] = typer.Option(None, "--soft-cap", help="Logits soft-cap."),
    mla: bool = typer.Option(False, "--mla", help="Multi-head latent attention (DeepSeek); head size 576."),
    device: str = DeviceOpt,
    assume_installed: bool = AssumeInstalledOpt,
    backend: Optional[str] = BackendOpt,
    explain: bool = ExplainOpt,
    fmt: Format = FormatOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Select the attention backend for a model (--model) or explicit head counts."""
    overrides = dict(
        dtype=dtype, kv_cache_dtype=kv_cache_dtype, block_size=block_size, kv_layout=kv_layout,
        dcp_size=dcp, pcp_size=pcp, spec_tokens=spec_tokens, sinks=sinks or None,
        sliding_window=sliding_window, logits_soft_cap=soft_cap,
    )
    if model is not None:
        info = load_model_config(model)
        spec = attention_spec(info, tp, num_heads=num_heads, num_kv_heads=num_kv_heads, head_size=head_size,
                              **overrides)
    else:
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
        spec = AttentionSpec(num_heads=num_heads, num_kv_heads=num_kv_heads, head_size=head_size, **fields)
    _print(select_attention(spec, device=device, backend=backend, assume_installed=assume_installed),
           json_out, explain, fmt)


@app.command("all2all")
@guarded
def all2all(
    model: Optional[Path] = ModelOpt,
    ep_size: int = typer.Option(8, "--ep-size", help="Expert-parallel size."),
    num_experts: Optional[int] = typer.Option(None, "--num-experts"),
    topk: Optional[int] = typer.Option(None, "--topk"),
    hidden_size: Optional[int] = typer.Option(None, "--hidden-size"),
    quant_dtype: str = typer.Option("bf16", "--quant-dtype", help="bf16, fp8, nvfp4 or mxfp8 activations."),
    num_nodes: int = typer.Option(1, "--num-nodes", help="Nodes the EP group spans."),
    device: str = DeviceOpt,
    assume_installed: bool = AssumeInstalledOpt,
    backend: Optional[str] = BackendOpt,
    explain: bool = ExplainOpt,
    fmt: Format = FormatOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Select the MoE all2all backend for a MoE model (--model) or explicit sizes."""
    if model is not None:
        spec = all2all_spec(load_model_config(model), ep_size, num_experts=num_experts, topk=topk,
                            hidden_size=hidden_size, quant_dtype=quant_dtype, num_nodes=num_nodes)
    else:
        spec = All2AllSpec(ep_size=ep_size, num_experts=num_experts if num_experts is not None else 256,
                           topk=topk if topk is not None else 8,
                           hidden_size=hidden_size if hidden_size is not None else 7168,
                           quant_dtype=quant_dtype, num_nodes=num_nodes)
    _print(select_all2all(spec, device=device, backend=backend, assume_installed=assume_installed),
           json_out, explain, fmt)

"""``hwtune select attention|all2all``: the library's selection, printed for people or as JSON/flags."""

from __future__ import annotations

import dataclasses
import shlex
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from hwtune.cli import specs as S
from hwtune.cli.common import AssumeInstalledOpt, Choices, DeviceOpt, JsonOpt, console, emit_json, guarded
from hwtune.core.catalogue.engines import DEFAULT_ENGINE, ENGINES, NO_ENGINE
from hwtune.core.errors import InvalidSpecError
from hwtune.core.model_config import all2all_spec, load_model_config
from hwtune.core.types import All2AllSpec, AttentionSpec
from hwtune.selector.api import select_all2all, select_attention
from hwtune.selector.selection import Selection

app = typer.Typer(
    help="Which backend should the engine use? Ranked valid backends, rejected ones with reasons.", no_args_is_help=True
)


class Format(str, Enum):
    """How ``hwtune select`` prints its selection: text for people, JSON, the target engine's flags (``args``) or
    environment (``env``), or one named engine's flags (``vllm``, ``sglang``)."""

    text = "text"
    json = "json"
    args = "args"
    env = "env"
    vllm = "vllm"
    sglang = "sglang"


BackendOpt = typer.Option(
    None,
    "--backend",
    "-b",
    help="Ask for this backend; an error if it is not valid here. Without it, HWTUNE_ATTENTION_BACKEND or "
    "HWTUNE_ALL2ALL_BACKEND is read (by the library: engines that import hwtune honour them too).",
)
ExplainOpt = typer.Option(False, "--explain", help="Show every rank's source and every rejection's reasons.")
FormatOpt = typer.Option(
    Format.text,
    "--format",
    help="text; json; args: the --engine's flags (backend per phase where it can, block size, kv-cache dtype, "
    "all2all); env: export lines (the engine's own variables, e.g. VLLM_KV_CACHE_LAYOUT, and the flags in "
    "HWTUNE_<ENGINE>_ARGS); vllm, sglang: that engine's flags.",
)
DbOpt = typer.Option(
    None,
    "--db",
    envvar="HWTUNE_DATABASE_URL",
    help="Store to rank from (default: the local store; 'none' for static priorities only).",
)
MaxSeqsOpt = typer.Option(256, "--max-num-seqs", min=1, help="The engine's largest decode batch (workload mix).")
ProfileOpt = typer.Option(
    "balanced", "--profile", help="decode-heavy, balanced, prefill-heavy, or a JSON/TOML file of mix weights."
)
PerPhaseOpt = typer.Option(False, "--per-phase", help="Also recommend a decode and a prefill backend separately.")
ENGINE_NAMES = Choices([*ENGINES, *NO_ENGINE], "engine")
EngineOpt = ENGINE_NAMES.option(
    DEFAULT_ENGINE,
    "--engine",
    help="The engine to configure: vllm, sglang, or none (hwtune's own catalogue and kernels; also 'hwtune').",
)
EngineVersionOpt = typer.Option(
    None, "--engine-version", help="Its version (default: the newest hwtune has a snapshot of; docs/engines.md)."
)


def _db(db: Optional[str]) -> str | bool | None:
    return False if db is not None and db.strip().lower() == "none" else db


def _print(
    selection: Selection,
    json_out: bool,
    explain: bool,
    fmt: Format,
    per_phase: bool = False,
    all2all: Selection | None = None,
) -> None:
    engine = fmt.value if fmt in (Format.vllm, Format.sglang) else None
    if fmt in (Format.args, Format.vllm, Format.sglang, Format.env):
        out = selection.launch(engine, all2all)
        if fmt is Format.env:
            print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in out.to_env().items()))
        else:
            print(shlex.join(out.args))
        for note in out.notes:
            console.print(f"note: {note}", markup=False)
        return
    if json_out or fmt is Format.json:
        payload = selection.to_dict()
        if all2all is not None:
            payload["all2all"] = all2all.to_dict()
        if selection.engine is not None:
            payload["launch"] = selection.launch(None, all2all).to_dict()
        emit_json(payload)
        return
    if explain:
        console.print(selection.explain(), markup=False)
        return
    _print_text(selection, per_phase, all2all)


def _print_text(selection: Selection, per_phase: bool, all2all: Selection | None) -> None:
    ranked = ", ".join(r.backend for r in selection.ranked)
    console.print(
        f"{selection.kind}: [bold]{selection.backend}[/] (tactic {selection.tactic}) on {selection.device.describe()}"
    )
    console.print(f"  valid, in order: {ranked}", markup=False)
    if per_phase:
        phases = selection.per_phase or {p: selection.backend for p in selection.tactics}
        for phase, backend in phases.items():
            rank = next((r for r in selection.ranked if r.backend == backend), None)
            tactic = rank.tactics.get(phase, "") if rank else ""
            console.print(f"  {phase}: [bold]{backend}[/] (tactic {tactic})")
        if not selection.per_phase:
            console.print("  (per-phase ranking needs measurements; these are the static choice)", markup=False)
    if all2all is not None:
        console.print(f"  all2all: [bold]{all2all.backend}[/]")
    for note in selection.notes:
        console.print(f"  note: {note}", markup=False)
    if selection.rejected:
        console.print(f"  rejected: {', '.join(selection.rejected)} (--explain for reasons)", markup=False)
    if selection.engine is not None:
        out = selection.launch(None, all2all)
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in out.env.items())
        console.print(f"  {selection.engine_name}: {(env + ' ') if env else ''}{shlex.join(out.args)}", markup=False)
        for note in out.notes:
            console.print(f"  note: {note}", markup=False)
    print(selection.backend)


def _layer_kinds(model: Optional[Path], spec: AttentionSpec) -> dict[str, int]:
    """A --model whose config mixes windowed and full-attention layers (``layer_types``): their counts, so that one
    backend is ranked over every layer (selector/layer_kinds.py); nothing for any other model or spec."""
    if model is None or not spec.sliding_window:
        return {}
    info = load_model_config(model)
    if not info.full_attention_layers or not info.num_layers or spec.sliding_window != info.sliding_window:
        return {}
    return {"full_attention_layers": info.full_attention_layers, "num_layers": info.num_layers}


@app.command("attention")
@guarded
def attention(
    model: Optional[Path] = S.ModelOpt,
    tp: int = S.TpOpt,
    num_heads: Optional[int] = S.NumHeadsOpt,
    num_kv_heads: Optional[int] = S.NumKvHeadsOpt,
    head_size: Optional[int] = S.HeadSizeOpt,
    dtype: Optional[str] = S.DtypeOpt,
    kv_cache_dtype: str = S.KvDtypeOpt,
    block_size: Optional[int] = S.SelectBlockSizeOpt,
    kv_layout: str = S.KvLayoutOpt,
    dcp: int = S.DcpOpt,
    pcp: int = S.PcpOpt,
    cp_interleave: int = S.CpInterleaveOpt,
    spec_tokens: int = S.SpecTokensOpt,
    sinks: bool = S.SinksOpt,
    sliding_window: Optional[int] = S.SlidingOpt,
    soft_cap: Optional[float] = S.SoftCapOpt,
    mla: bool = S.MlaOpt,
    device: str = DeviceOpt,
    assume_installed: bool = AssumeInstalledOpt,
    backend: Optional[str] = BackendOpt,
    db: Optional[str] = DbOpt,
    max_num_seqs: int = MaxSeqsOpt,
    max_model_len: int = typer.Option(32768, "--max-model-len", min=1, help="The engine's longest context (mix)."),
    profile: str = ProfileOpt,
    per_phase: bool = PerPhaseOpt,
    engine: str = EngineOpt,
    engine_version: Optional[str] = EngineVersionOpt,
    ep_size: Optional[int] = typer.Option(
        None,
        "--ep-size",
        min=1,
        help="Expert-parallel size of a MoE --model: also select its MoE all2all backend, in the flags too.",
    ),
    explain: bool = ExplainOpt,
    fmt: Format = FormatOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Select the attention backend for a model (--model) or explicit head counts, for an engine and version."""
    spec = S.build_attention_spec(
        model,
        tp,
        num_heads,
        num_kv_heads,
        head_size,
        dtype,
        kv_cache_dtype,
        block_size or 16,
        kv_layout,
        dcp,
        pcp,
        spec_tokens,
        sinks,
        sliding_window,
        soft_cap,
        mla,
        cp_interleave,
    )
    if block_size is None:  # none given: the engine runs each backend at its own size (docs/engines.md)
        spec = dataclasses.replace(spec, block_size=None)
    a2a = None
    if ep_size is not None and ep_size > 1:
        if model is None:
            raise InvalidSpecError("--ep-size selects a MoE model's all2all backend: give the model with --model")
        a2a = select_all2all(
            all2all_spec(load_model_config(model), ep_size),
            device=device,
            assume_installed=assume_installed,
            db=_db(db),
            max_num_seqs=max_num_seqs,
            profile=profile if "/" not in profile and not profile.endswith((".json", ".toml")) else "balanced",
        )
    _print(
        select_attention(
            spec,
            device=device,
            backend=backend,
            assume_installed=assume_installed,
            db=_db(db),
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            profile=profile,
            engine=engine,
            engine_version=engine_version,
            **_layer_kinds(model, spec),
        ),
        json_out,
        explain,
        fmt,
        per_phase,
        a2a,
    )


@app.command("all2all")
@guarded
def all2all(
    model: Optional[Path] = S.ModelOpt,
    ep_size: int = typer.Option(8, "--ep-size", min=1, help="Expert-parallel size."),
    num_experts: Optional[int] = typer.Option(None, "--num-experts", min=1),
    topk: Optional[int] = typer.Option(None, "--topk", min=1),
    hidden_size: Optional[int] = typer.Option(None, "--hidden-size", min=1),
    quant_dtype: Optional[str] = S.QUANT_DTYPE.option(
        None,
        "--quant-dtype",
        help="Activations dispatched to the experts: bf16, fp8, nvfp4, mxfp8, ... (default: what --model's "
        "quantization config dispatches, else bf16).",
    ),
    num_nodes: int = typer.Option(1, "--num-nodes", min=1, help="Nodes the EP group spans."),
    device: str = DeviceOpt,
    assume_installed: bool = AssumeInstalledOpt,
    backend: Optional[str] = BackendOpt,
    db: Optional[str] = DbOpt,
    max_num_seqs: int = MaxSeqsOpt,
    profile: str = ProfileOpt,
    explain: bool = ExplainOpt,
    fmt: Format = FormatOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Select the MoE all2all backend for a MoE model (--model) or explicit sizes."""
    if model is not None:
        spec = all2all_spec(
            load_model_config(model),
            ep_size,
            num_experts=num_experts,
            topk=topk,
            hidden_size=hidden_size,
            quant_dtype=quant_dtype,
            num_nodes=num_nodes,
        )
    else:
        spec = All2AllSpec(
            ep_size=ep_size,
            num_experts=num_experts if num_experts is not None else 256,
            topk=topk if topk is not None else 8,
            hidden_size=hidden_size if hidden_size is not None else 7168,
            quant_dtype=quant_dtype or "bf16",
            num_nodes=num_nodes,
        )
    _print(
        select_all2all(
            spec,
            device=device,
            backend=backend,
            assume_installed=assume_installed,
            db=_db(db),
            max_num_seqs=max_num_seqs,
            profile=profile,
        ),
        json_out,
        explain,
        fmt,
    )

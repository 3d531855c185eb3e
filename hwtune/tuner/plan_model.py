"""Plans from a model's config.json (as an engine would start it: heads per rank at the TP size, the engine's batch
and length limits, its KV layouts, its kinds of layers, its MoE all2all), the default plan when none is given, and
``build_plan``, which picks among a plan file, a model and the defaults. The grids below are the default plan's.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from hwtune.core import catalogue
from hwtune.core.devices import DeviceProfile
from hwtune.core.errors import InvalidSpecError
from hwtune.core.model_config import ModelInfo, all2all_spec, attention_spec, dispatch_dtype, load_model_config
from hwtune.core.types import (
    All2AllSpec,
    All2AllWorkload,
    AttentionSpec,
    AttentionWorkload,
    normalize_quant_dtype,
)
from hwtune.core.validation import check
from hwtune.selector.block_sizes import PAGE_SIZES
from hwtune.tuner.plan import MEMORY_FRACTION, Plan, PlanItem, kv_fits

# Grids. Coarse points come first; refinement points sit between them (log-spaced).
DECODE_BATCH = {"coarse": (1, 16, 256), "refine": (4, 64, 512)}
DECODE_CONTEXT = {"coarse": (512, 8192, 131072), "refine": (2048, 32768)}
PREFILL_CHUNK = {"coarse": (128, 512, 8192), "refine": (2048,)}  # 128: short prompts and chunk tails
PREFILL_PREFIX = {"coarse": (0, 32768), "refine": (8192,)}
A2A_TOKENS = {"coarse": (1, 64, 1024, 8192), "refine": (8, 256, 4096)}
QUICK_DECODE_BATCH, QUICK_DECODE_CONTEXT = (1, 64), (2048, 32768)
# CPU-only machines run the CPU candidates (SDPA math, compiled flex): small shapes keep a plan to minutes.
CPU_DECODE_BATCH = {"coarse": (1, 8), "refine": (4,)}
CPU_DECODE_CONTEXT = {"coarse": (128, 1024), "refine": (512,)}
CPU_PREFILL_CHUNK, CPU_PREFILL_PREFIX = {"coarse": (64,), "refine": ()}, {"coarse": (0, 256), "refine": ()}


QUICK_BACKENDS = catalogue.quick_backends("attention")


def _quick_backends(device: DeviceProfile | None, notes: list[str]) -> tuple[str, ...]:
    """The quick plan's backends for ``device`` (the GPU list without one), saying so when it differs."""
    if device is None or device.is_cuda:
        return QUICK_BACKENDS
    chosen = catalogue.quick_backends("attention", "cpu")
    notes.append(
        f"quick on the CPU: none of {', '.join(QUICK_BACKENDS)} runs here, so quick measures the CPU "
        f"backends {', '.join(chosen)}"
    )
    return chosen


def planned_layouts(spec: AttentionSpec, quick: bool = False) -> tuple[str, ...]:
    """The KV layouts a plan measures for ``spec``: the requested one (never replaced); with ``auto``, every
    layout that an attention backend of the catalogue declares for this kind of model (MLA or not), since the
    engine may run any of them and selection compares them (selector/layouts.py); a quick plan measures NHD."""
    if spec.kv_layout != "auto":
        return (spec.kv_layout,)
    if quick:
        return ("NHD",)
    declared = {
        layout
        for b in catalogue.backends("attention")
        if b.has(catalogue.Feature.MLA) == spec.use_mla
        for layout in (b.rules.kv_layouts or ())
    }
    return tuple(layout for layout in ("NHD", "HND") if layout in declared)


def attention_items(
    spec: AttentionSpec, *, quick: bool = False, notes: list[str] | None = None, **grid: Any
) -> list[PlanItem]:
    """``layout_items`` for each layout ``planned_layouts`` gives (an ``auto`` spec becomes one item per layout)."""
    layouts = planned_layouts(spec, quick)
    if notes is not None and spec.kv_layout == "auto":
        quick_note = " (quick: NHD only)" if quick else ""
        notes.append(f"kv_layout auto: measuring the {' and '.join(layouts)} layouts{quick_note}")
    return [
        item
        for layout in layouts
        for item in layout_items(replace(spec, kv_layout=layout), quick=quick, notes=notes, **grid)
    ]


def layout_items(
    spec: AttentionSpec,
    *,
    max_num_seqs: int = 256,
    max_model_len: int = 131072,
    quick: bool = False,
    device: DeviceProfile | None = None,
    notes: list[str] | None = None,
    decode: Mapping[str, Iterable[int]] | None = None,
    context: Mapping[str, Iterable[int]] | None = None,
) -> list[PlanItem]:
    """Decode grid (batch x context), prefill chunks on cached prefixes, and a mixed batch."""
    notes = notes if notes is not None else []
    items: list[PlanItem] = []
    qd = spec.query_len_decode

    def add(w: AttentionWorkload, level: int) -> None:
        if kv_fits(w, device):
            items.append(PlanItem(w, level))
        else:
            notes.append(
                f"skipped {w.phase} batch {w.batch} x {w.context_len} tokens: its KV cache does not fit "
                f"in {MEMORY_FRACTION:.0%} of {device.describe() if device else 'the device'}"
            )

    cpu = device is not None and not device.is_cuda
    batches = decode or (
        CPU_DECODE_BATCH if cpu else {"coarse": QUICK_DECODE_BATCH, "refine": ()} if quick else DECODE_BATCH
    )
    contexts = context or (
        CPU_DECODE_CONTEXT if cpu else {"coarse": QUICK_DECODE_CONTEXT, "refine": ()} if quick else DECODE_CONTEXT
    )
    batches, contexts = _reach(batches, max_num_seqs), _reach(contexts, max_model_len)
    for level, bkey in ((0, "coarse"), (1, "refine")):
        for b in batches[bkey]:
            for ckey in ("coarse", "refine"):
                for c in contexts[ckey]:
                    lvl = max(level, 0 if ckey == "coarse" else 1)
                    if qd <= c:
                        add(AttentionWorkload(spec, "decode", batch=b, context_len=c, query_len=qd), lvl)
    chunks = CPU_PREFILL_CHUNK if cpu else ({"coarse": (2048,), "refine": ()} if quick else PREFILL_CHUNK)
    prefixes = CPU_PREFILL_PREFIX if cpu else ({"coarse": (0,), "refine": ()} if quick else PREFILL_PREFIX)
    for ckey in ("coarse", "refine"):
        for chunk in [c for c in chunks.get(ckey, ()) if c <= max_model_len]:
            reach = _reach(prefixes, max_model_len - chunk)
            for pkey in ("coarse", "refine"):
                for prefix in reach[pkey]:
                    lvl = 0 if (ckey, pkey) == ("coarse", "coarse") else 1
                    add(AttentionWorkload(spec, "prefill", batch=1, context_len=chunk + prefix, query_len=chunk), lvl)
    if not quick and max_num_seqs >= 2:  # the layout engines run: decodes with one prefill chunk in the batch
        b, ctx, chunk = (4, 256, 64) if cpu else (min(32, max_num_seqs), 4096, 1024)
        add(
            AttentionWorkload(
                spec,
                "mixed",
                batch=b,
                context_len=min(ctx, max_model_len),
                query_len=min(chunk, max_model_len),
                num_prefill=1,
            ),
            0,
        )
    return items


def _reach(values: Mapping[str, Iterable[int]], limit: int) -> dict[str, tuple[int, ...]]:
    """A grid within the engine's range: a coarse value beyond the limit becomes the limit itself (the engine
    runs there, so the edge of its range is measured, not extrapolated); refinement values beyond it are left
    out."""
    coarse = sorted({min(v, limit) for v in values.get("coarse", ())})
    refine = sorted({v for v in values.get("refine", ()) if v < limit and v not in coarse})
    return {"coarse": tuple(coarse), "refine": tuple(refine)}


def all2all_items(
    spec: All2AllSpec, *, quick: bool = False, max_tokens: int = 8192, tokens: Mapping[str, Iterable[int]] | None = None
) -> list[PlanItem]:
    """The all2all token sweep for ``spec`` (coarse, then refinement points), capped at ``max_tokens`` tokens per
    rank."""
    grid = tokens or ({"coarse": (16, 1024), "refine": ()} if quick else A2A_TOKENS)
    return [
        PlanItem(All2AllWorkload(spec, tokens_per_rank=t), 0 if key == "coarse" else 1)
        for key in ("coarse", "refine")
        for t in grid.get(key, ())
        if t <= max_tokens
    ]


def plan_from_model(
    model: ModelInfo | str | Path,
    *,
    tp: int = 1,
    ep: int | None = None,
    max_num_seqs: int = 256,
    max_model_len: int | None = None,
    kinds: Iterable[str] = ("attention", "all2all"),
    quick: bool = False,
    device: DeviceProfile | None = None,
    attention_overrides: Mapping[str, Any] | None = None,
    quant_dtypes: Iterable[str] | None = None,
) -> Plan:
    """The plan for a model as an engine would start it (tp/ep, limits): attention grid, and all2all sweeps when the
    model is MoE and ``ep >= 2``, one per activation dtype the engine dispatches (``all2all_dtypes``); what is left
    out is said in the notes."""
    info = model if isinstance(model, ModelInfo) else load_model_config(model)
    kinds = set(kinds)
    notes: list[str] = []
    items: list[PlanItem] = []
    layer_windows: tuple[int | None, ...] = ()
    if "attention" in kinds:
        spec = attention_spec(info, tp, **dict(attention_overrides or {}))
        mml = max_model_len or info.max_position_embeddings or 131072
        items += attention_items(
            spec, max_num_seqs=max_num_seqs, max_model_len=mml, quick=quick, device=device, notes=notes
        )
        if (attention_overrides or {}).get("block_size") is None:
            items += own_block_size_items(items, spec, device, notes)
        layer_windows = mixed_layer_windows(info, spec)
        if layer_windows:
            more: list[str] = []
            items += attention_items(
                replace(spec, sliding_window=None), max_num_seqs=max_num_seqs, max_model_len=mml, quick=quick,
                device=device, notes=more,
            )  # fmt: skip
            notes += [n for n in more if n not in notes]
            notes.append(layer_kinds_note(info, spec))
    if "all2all" in kinds:
        if not info.is_moe:
            notes.append(f"{info.model_type} is not a MoE model: no all2all workloads")
        elif not ep or ep < 2:
            notes.append("all2all needs --ep 2 or more: no all2all workloads")
        else:
            dtypes, why = all2all_dtypes(info, quant_dtypes)
            notes.append(f"all2all planned for {', '.join(dtypes)} activations: {why}")
            for q in dtypes:
                items += all2all_items(all2all_spec(info, ep, quant_dtype=q), quick=quick)
    name = f"{info.model_type} tp{tp}" + (f" ep{ep}" if ep else "") + (" quick" if quick else "")
    return Plan(
        name=name,
        items=items,
        notes=notes,
        time_cap_s=1.0 if quick else 2.0,
        backends=_quick_backends(device, notes) if quick else None,
        layer_windows=layer_windows,
    )


def own_block_size_items(
    items: list[PlanItem], spec: AttentionSpec, device: DeviceProfile | None, notes: list[str]
) -> list[PlanItem]:
    """With no block size given, ``items`` (``spec``'s attention workloads, of the phases each candidate measures)
    again at the page size of each runnable backend that cannot page the cache by ``spec``'s size (FLASHMLA pages by
    64 only, and measures decode only), for that backend alone:
    selection reads each backend at the size the engine runs it at (issue 19), so it needs those measurements. Only
    backends valid on ``device`` there (packages aside: a missing one is stored with its reason); the run's
    ``--backends`` still bound them, as a bisection point's contenders (``PlanItem.contenders``). None without a
    device."""
    if device is None or spec.block_size is None:
        return []
    by_size: dict[int, list[str]] = {}
    for b in catalogue.backends("attention"):
        rule = b.rules.block_sizes
        if b.probe is None or rule is None or rule.allows(spec.block_size):
            continue
        size = next((s for s in PAGE_SIZES if rule.allows(s)), None)
        if size is not None and not check(b, replace(spec, block_size=size), device, assume_installed=True):
            by_size.setdefault(size, []).append(b.name)
    out: list[PlanItem] = []
    for size, names in sorted(by_size.items()):
        probes = [catalogue.get("attention", name).probe for name in names]
        for it in items:
            w = it.workload
            if isinstance(w, AttentionWorkload) and any(p and p.measures(w.phase) for p in probes):
                at = replace(w, spec=replace(w.spec, block_size=size))
                out.append(PlanItem(at, it.level, tuple(names), contenders=True))
        notes.append(
            f"{', '.join(names)} pages the KV cache by {size} tokens, not {spec.block_size}: its workloads are "
            f"measured at block size {size} too (--block-size N measures every backend at N only)"
        )
    return out


def mixed_layer_windows(info: ModelInfo | None, spec: AttentionSpec) -> tuple[int | None, ...]:
    """``Plan.layer_windows`` for ``spec`` of the model ``info``: (its window, None) where the model mixes windowed and
    full-attention layers and ``spec`` is its windowed kind; empty otherwise."""
    if info is None or not spec.sliding_window or not info.full_attention_layers:
        return ()
    return (spec.sliding_window, None) if info.sliding_window == spec.sliding_window else ()


def layer_kinds_note(info: ModelInfo, spec: AttentionSpec) -> str:
    """The note of a plan that measures both kinds of a model's layers (``mixed_layer_windows``)."""
    return (
        f"{info.full_attention_layers} of {info.num_layers} layers attend the whole context (the config's "
        f"layer_types, or its model's layer pattern) and the others a {spec.sliding_window}-token window: "
        "this plan measures both kinds, each backend only where it can serve both, and selection ranks "
        "one backend over every layer (selector/layer_kinds.py)"
    )


def all2all_dtypes(info: ModelInfo | None, requested: Iterable[str] | None) -> tuple[tuple[str, ...], str]:
    """The activation dtypes an all2all plan covers, and why: those requested (``--quant-dtype``), else the one the
    model's quantization config dispatches (``model_config.dispatch_dtype``: nvfp4 for an NVFP4 checkpoint), else
    bf16. docs/tuning.md, "Activation dtypes of all2all plans"."""
    asked = tuple(dict.fromkeys(normalize_quant_dtype(q) for q in requested or ()))
    if asked:
        return asked, "asked for with --quant-dtype"
    if info is None:
        return ("bf16",), "no model names its quantization (--quant-dtype plans others)"
    dtype, why = dispatch_dtype(info)
    return (dtype,), why + " (--quant-dtype plans others)"


# Llama-3.1-8B's attention (32 query / 8 KV heads, head size 128, bf16), the default when no model is given.
DEFAULT_SPEC = AttentionSpec(num_heads=32, num_kv_heads=8, head_size=128)


def default_plan(
    *,
    quick: bool = False,
    device: DeviceProfile | None = None,
    kinds: Iterable[str] = ("attention",),
    quant_dtypes: Iterable[str] | None = None,
    spec: AttentionSpec = DEFAULT_SPEC,
) -> Plan:
    """The plan when no model or plan file is given: a Llama-3.1-8B-shaped attention grid (``spec``: the command
    line's spec options applied to DEFAULT_SPEC) and an all2all sweep of a generic MoE layer per requested
    activation dtype, bf16 by default, when asked."""
    notes: list[str] = ["no --model or --plan: default plan for a Llama-3.1-8B-shaped model (32/8 heads, head 128)"]
    items = attention_items(spec, quick=quick, device=device, notes=notes) if "attention" in kinds else []
    if "all2all" in kinds:
        dtypes, why = all2all_dtypes(None, quant_dtypes)
        notes.append(f"all2all planned for {', '.join(dtypes)} activations: {why}")
        for q in dtypes:
            spec = All2AllSpec(ep_size=2, num_experts=64, topk=8, hidden_size=4096, quant_dtype=q)
            items += all2all_items(spec, quick=quick)
    return Plan(
        name="default" + (" quick" if quick else ""),
        items=items,
        notes=notes,
        time_cap_s=1.0 if quick else 2.0,
        backends=_quick_backends(device, notes) if quick else None,
    )


def build_plan(
    model: str | Path | None,
    plan_file: str | Path | None,
    *,
    tp: int = 1,
    ep: int | None = None,
    max_num_seqs: int = 256,
    max_model_len: int | None = None,
    kinds: Iterable[str] = ("attention",),
    quick: bool = False,
    device: DeviceProfile | None = None,
    attention_overrides: Mapping[str, Any] | None = None,
    quant_dtypes: Iterable[str] | None = None,
) -> Plan:
    """The plan a tune run measures: from a plan file, from a model's config.json, or the default plan."""
    if plan_file is not None and model is not None:
        raise InvalidSpecError("give --model or --plan, not both (a plan file can name its model)")
    overrides = {k: v for k, v in (attention_overrides or {}).items() if v is not None}
    if plan_file is not None:
        _no_spec_options(overrides)
        if quant_dtypes:
            raise InvalidSpecError(
                "--quant-dtype applies to --model and the default plan; a plan file names its all2all activation "
                "dtypes itself ([all2all] quant_dtype = [...])"
            )
        from hwtune.tuner.plan_file import plan_from_toml

        return plan_from_toml(plan_file, device=device)
    if model is not None:
        return plan_from_model(
            model,
            tp=tp,
            ep=ep,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            kinds=list(kinds),
            quick=quick,
            device=device,
            attention_overrides=overrides,
            quant_dtypes=quant_dtypes,
        )
    spec = replace(DEFAULT_SPEC, **overrides)
    return default_plan(quick=quick, device=device, kinds=list(kinds), quant_dtypes=quant_dtypes, spec=spec)


def _no_spec_options(overrides: Mapping[str, Any]) -> None:
    """A plan file states its attention spec itself: a spec option given on the command line is refused, not
    silently ignored."""
    defaults = {f.name: f.default for f in fields(AttentionSpec)}
    given = sorted(k for k, v in overrides.items() if v != defaults.get(k))
    if given:
        names = ", ".join("--" + k.removesuffix("_size").replace("_", "-") for k in given)
        raise InvalidSpecError(f"{names}: a plan file states its spec itself ([attention] in the file), not here")

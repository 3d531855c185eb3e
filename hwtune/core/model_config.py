"""Read a Hugging Face ``config.json`` into the specs an engine would run it with.

Handles what real configs do: a nested ``text_config`` (multimodal models), the different spellings of the
KV-head count, ``head_dim`` missing or null, MLA fields (DeepSeek), MoE fields (Mixtral, Qwen, DeepSeek),
sliding windows that are switched off, logits soft-capping and attention sinks. ``--tp N`` divides heads
the way vLLM does (``ModelConfig.get_num_kv_heads``: KV heads are replicated when there are fewer than N).

A checkpoint's ``quantization_config`` (or, as vLLM reads ModelOpt exports, an ``hf_quant_config.json`` beside
``config.json``) says which activation dtype the engine dispatches to the experts: ``dispatch_dtype`` is what
all2all specs and plans use (docs/tuning.md, "Activation dtypes of all2all plans").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hwtune.core.errors import InvalidSpecError
from hwtune.core.types import All2AllSpec, AttentionSpec, normalize_quant_dtype

_HEADS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads", "multi_query_group_num")
_HIDDEN = ("hidden_size", "n_embd", "d_model", "dim")
_EXPERTS = ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts")
_TOPK = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k")
#: Model types whose attention has learned sinks (no config field says so).
_SINK_MODEL_TYPES = frozenset({"gpt_oss"})


@dataclass(frozen=True)
class ModelInfo:
    """What hwtune needs of a model, before tensor parallelism."""

    model_type: str
    num_heads: int
    num_kv_heads: int
    head_size: int
    hidden_size: int
    dtype: str
    num_layers: int | None
    max_position_embeddings: int | None
    use_mla: bool = False
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    sliding_window: int | None = None
    #: Layers that attend the whole context while the others use ``sliding_window`` (the config's ``layer_types``:
    #: gpt-oss every other layer); None when every layer is alike or the config does not list its layers.
    full_attention_layers: int | None = None
    logits_soft_cap: float | None = None
    sinks: bool = False
    num_experts: int | None = None
    topk: int | None = None
    #: The checkpoint's quantization as its config names it ("fp8", "modelopt NVFP4", ...); None: not quantized.
    quant_method: str | None = None
    #: The activation dtype that quantization dispatches to the experts (the model's own dtype for weight-only
    #: methods); None when not quantized, or when hwtune does not know the method.
    activation_dtype: str | None = None
    #: The model class its config names first (``architectures[0]``), for engines' per-architecture rules.
    architecture: str | None = None

    @property
    def is_moe(self) -> bool:
        """Whether the model has routed experts, i.e. whether an all2all spec can be derived from it."""
        return bool(self.num_experts)


def _first(cfg: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def _whole(cfg: Mapping[str, Any], keys: tuple[str, ...], *, minimum: int = 1) -> int | None:
    """The first of ``keys`` present, as a whole number of at least ``minimum``; None when none is present.
    Anything else (a string, a fraction, a list, a negative count) is an error naming the field and its value."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        whole = isinstance(value, int) and not isinstance(value, bool)
        whole = whole or (isinstance(value, float) and value.is_integer())
        if not whole or value < minimum:
            raise InvalidSpecError(
                f"config.json field {key} is {json.dumps(value)}, not a whole number of at least {minimum}: "
                "fix the model's config.json (a shape field is a JSON number, e.g. 32)"
            )
        return int(value)
    return None


def _number(cfg: Mapping[str, Any], key: str) -> float | None:
    """``cfg[key]`` as a float (None when absent or null); a non-number is an error naming the field."""
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSpecError(
            f"config.json field {key} is {json.dumps(value)}, not a number: fix the model's config.json"
        )
    return float(value)


#: transformers' class defaults for configs that omit fields because they equal the defaults
#: (transformers/models/gemma3/configuration_gemma3.py Gemma3TextConfig.__init__).
_MODEL_TYPE_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "gemma3_text": {
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "hidden_size": 2304,
        "sliding_window": 4096,
        "num_hidden_layers": 26,
    },
}


def _with_defaults(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {**_MODEL_TYPE_DEFAULTS.get(str(cfg.get("model_type")), {}), **cfg}


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(key)
        if isinstance(sub, Mapping) and _first(_with_defaults(sub), _HEADS) is not None:
            merged = _with_defaults(sub)
            for k in ("torch_dtype", "dtype"):  # multimodal configs often keep dtype at the top
                if merged.get(k) is None and cfg.get(k) is not None:
                    merged[k] = cfg[k]
            return merged
    return _with_defaults(cfg)


def _dtype(cfg: Mapping[str, Any]) -> str:
    raw = str(_first(cfg, ("torch_dtype", "dtype")) or "bfloat16").replace("torch.", "")
    # vLLM serves float32 checkpoints in bf16 on GPUs that have it (ModelConfig._resolve_auto_dtype)
    return "bfloat16" if raw in ("float32", "float") else raw


#: What a weight-only quantization dispatches: the activations stay in the model's own dtype.
WEIGHT_ONLY = "weight-only"
#: ModelOpt ``quant_algo`` -> the activation dtype the experts receive (vLLM model_executor/layers/quantization/
#: modelopt.py: NVFP4 is W4A4 with nvfp4 activations; FP8 variants quantize activations to fp8; FP8_PB_WO and
#: W4A16_* quantize weights only; W4A8_* take fp8 activations; MXFP8 takes mxfp8 activations).
_MODELOPT_ALGOS: Mapping[str, str] = {
    "NVFP4": "nvfp4",
    "FP8": "fp8",
    "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
    "MXFP8": "mxfp8",
    "W4A8_AWQ": "fp8",
    "W4A8_NVFP4_FP8": "fp8",
    "FP8_PB_WO": WEIGHT_ONLY,
    "W4A16_NVFP4": WEIGHT_ONLY,
    "W4A16_AWQ": WEIGHT_ONLY,
}
#: ``quant_method`` values and what they dispatch: fp8 checkpoints (DeepSeek-V3's block fp8, FBGEMM's and PTPC's
#: dynamic fp8) quantize activations to fp8; the integer weight formats and gpt-oss's mxfp4 (vLLM Mxfp4MoEMethod's
#: default) quantize weights only.
_METHODS: Mapping[str, str] = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "ptpc_fp8": "fp8",
    "modelopt_fp4": "nvfp4",
    **{m: WEIGHT_ONLY for m in ("awq", "awq_marlin", "gptq", "gptq_marlin", "marlin", "bitsandbytes", "hqq", "gguf")},
    "mxfp4": WEIGHT_ONLY,
}


def _modelopt(qc: Mapping[str, Any]) -> tuple[str, str | None]:
    """(label, activation dtype) of a ModelOpt config: ``quant_algo`` at the top (config.json) or under
    ``quantization`` (hf_quant_config.json); MIXED_PRECISION takes its expert layers' algorithm when they agree."""
    nested = qc.get("quantization") if isinstance(qc.get("quantization"), Mapping) else {}
    algo = str(nested.get("quant_algo") or qc.get("quant_algo") or "").upper()
    if algo == "MIXED_PRECISION":
        layers = nested.get("quantized_layers") or qc.get("quantized_layers") or {}
        experts = {
            str(v.get("quant_algo", "")).upper()
            for k, v in layers.items()
            if "experts" in str(k) and isinstance(v, Mapping)
        }
        algo = experts.pop() if len(experts) == 1 else algo
    if not algo and str(qc.get("quant_method")).lower() == "modelopt_fp4":
        algo = "NVFP4"
    return f"modelopt {algo or '(no quant_algo)'}", _MODELOPT_ALGOS.get(algo)


def _compressed_tensors(qc: Mapping[str, Any]) -> tuple[str, str | None]:
    """(label, activation dtype) of a compressed-tensors config: the ``input_activations`` of the config groups that
    target the experts (all groups when none names them; none: weight-only; 8-bit float: fp8; 4-bit float in groups
    of 16: nvfp4), when those groups agree."""
    groups = [g for g in (qc.get("config_groups") or {}).values() if isinstance(g, Mapping)]
    moe = [
        g for g in groups if any("expert" in str(t).lower() or "moe" in str(t).lower() for t in g.get("targets", ()))
    ]
    found: set[str | None] = set()
    for group in moe or groups:
        acts = group.get("input_activations")
        if not acts:
            found.add(WEIGHT_ONLY)
        elif acts.get("type") == "float" and acts.get("num_bits") == 8:
            found.add("fp8")
        elif acts.get("type") == "float" and acts.get("num_bits") == 4 and acts.get("group_size") == 16:
            found.add("nvfp4")
        else:
            found.add(None)
    label = "compressed-tensors" + (f" {qc['format']}" if qc.get("format") else "")
    return label, found.pop() if len(found) == 1 else None


def _activation_quant(qc: Mapping[str, Any]) -> tuple[str, str | None]:
    """(how the config names its quantization, the activation dtype it dispatches: a quant dtype, WEIGHT_ONLY, or
    None when hwtune does not know the method)."""
    method = str(qc.get("quant_method") or "").lower()
    if method.startswith("modelopt"):
        return _modelopt(qc)
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    return method or "(no quant_method)", _METHODS.get(method)


def _quantization(cfg: Mapping[str, Any], text: Mapping[str, Any], dtype: str) -> tuple[str | None, str | None]:
    """(quant_method label, activation dtype) for ModelInfo; weight-only methods dispatch the model's dtype."""
    qc = cfg.get("quantization_config") or text.get("quantization_config")
    if not isinstance(qc, Mapping):
        return None, None
    label, acts = _activation_quant(qc)
    if acts == WEIGHT_ONLY:
        return f"{label}, weights only", normalize_quant_dtype(dtype) if dtype in ("bfloat16", "float16") else "bf16"
    return label, acts


def dispatch_dtype(model: ModelInfo) -> tuple[str, str]:
    """The activation dtype an engine dispatches to ``model``'s experts, and a sentence saying where it comes from:
    the quantization config's activations, else (not quantized, or a method hwtune does not know) the model's dtype."""
    own = normalize_quant_dtype(model.dtype) if model.dtype in ("bfloat16", "float16") else "bf16"
    if model.activation_dtype is not None:
        return model.activation_dtype, (
            f"the model's quantization ({model.quant_method}) dispatches {model.activation_dtype} activations"
        )
    if model.quant_method is None:
        return own, f"the model is not quantized: activations are dispatched in its dtype ({own})"
    return own, (
        f"hwtune does not know which activation dtype the model's quantization ({model.quant_method}) dispatches: "
        f"assumed the model's dtype ({own}); name the engine's with --quant-dtype"
    )


def _shape(text: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(heads, KV heads, head size, hidden size), each checked to be a positive whole number."""
    heads, hidden = _whole(text, _HEADS), _whole(text, _HIDDEN)
    if heads is None or hidden is None:
        raise InvalidSpecError(
            "config.json has no attention head count or hidden size (looked for "
            f"{', '.join(_HEADS)} and {', '.join(_HIDDEN)})"
        )
    kv = _whole(text, _KV_HEADS)
    if kv is None:
        kv = 1 if text.get("multi_query") else heads  # Falcon's multi_query; otherwise MHA
    head_dim = _whole(text, ("head_dim", "kv_channels"))
    if head_dim is None:
        if hidden % heads:
            raise InvalidSpecError(f"hidden_size {hidden} is not divisible by {heads} heads and head_dim is unset")
        head_dim = hidden // heads
    return heads, kv, head_dim, hidden


def _full_attention_layers(text: Mapping[str, Any], model_type: str, num_layers: int | None) -> int | None:
    """How many layers attend the whole context when the others use the sliding window: as the config's
    ``layer_types`` marks them (gpt-oss), or for configs that list none, as the model's code places them
    (transformers: Gemma-2 windows its even layers, ``Gemma2DecoderLayer.is_sliding = not bool(layer_idx % 2)``;
    Gemma-3 all but every ``sliding_window_pattern``-th, default 6, ``is_sliding = bool((layer_idx + 1) %
    sliding_window_pattern)``). None when every layer is alike or the config does not tell."""
    kinds = text.get("layer_types")
    if isinstance(kinds, list) and kinds:
        full, total = sum(1 for kind in kinds if kind == "full_attention"), len(kinds)
    elif model_type == "gemma2" and num_layers:
        full, total = num_layers // 2, num_layers
    elif model_type in ("gemma3", "gemma3_text") and num_layers:
        pattern = _whole(text, ("sliding_window_pattern",), minimum=1) or 6
        full, total = num_layers // pattern, num_layers
    else:
        return None
    return full if 0 < full < total else None


def parse_model_config(cfg: Mapping[str, Any]) -> ModelInfo:
    """Parse an already-loaded config dict; raises InvalidSpecError naming the missing or malformed field."""
    text = _text_config(cfg)
    heads, kv, head_dim, hidden = _shape(text)
    model_type = str(text.get("model_type") or cfg.get("model_type") or "unknown")
    sliding = _whole(text, ("sliding_window",), minimum=0)
    if text.get("use_sliding_window") is False:  # Qwen2 configs carry a window they do not use
        sliding = None
    max_positions = _whole(text, ("max_position_embeddings", "n_positions", "seq_length"))
    if sliding and max_positions and sliding >= max_positions:  # Phi-3.5: a window over every position masks nothing
        sliding = None
    soft_cap = _number(text, "attn_logit_softcapping")
    layers = _whole(text, ("num_hidden_layers", "n_layer", "num_layers"))
    experts = _whole(text, _EXPERTS, minimum=0)
    topk = _whole(text, _TOPK, minimum=0)
    quant_method, activation_dtype = _quantization(cfg, text, _dtype(text))
    return ModelInfo(
        model_type=model_type,
        num_heads=heads,
        num_kv_heads=kv,
        head_size=head_dim,
        hidden_size=hidden,
        dtype=_dtype(text),
        num_layers=layers,
        max_position_embeddings=max_positions,
        use_mla=text.get("kv_lora_rank") is not None,
        kv_lora_rank=_whole(text, ("kv_lora_rank",)),
        qk_rope_head_dim=_whole(text, ("qk_rope_head_dim",)),
        qk_nope_head_dim=_whole(text, ("qk_nope_head_dim",)),
        v_head_dim=_whole(text, ("v_head_dim",)),
        sliding_window=sliding or None,
        full_attention_layers=_full_attention_layers(text, model_type, layers) if sliding else None,
        logits_soft_cap=soft_cap or None,
        sinks=model_type in _SINK_MODEL_TYPES,
        num_experts=experts or None,
        topk=topk if topk and experts else None,
        quant_method=quant_method,
        activation_dtype=activation_dtype,
        architecture=_architecture(cfg),
    )


def _architecture(cfg: Mapping[str, Any]) -> str | None:
    """``architectures[0]`` of a config, where it names one."""
    names = cfg.get("architectures")
    return names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None


def load_model_config(path: str | Path) -> ModelInfo:
    """Read config.json (or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        cfg = json.loads(p.read_text())
    except FileNotFoundError:
        raise InvalidSpecError(f"no model config at {p}") from None
    except json.JSONDecodeError as exc:
        raise InvalidSpecError(f"{p} is not valid JSON: {exc}") from None
    if not isinstance(cfg, Mapping):
        raise InvalidSpecError(f"{p} does not hold a JSON object")
    beside = p.parent / "hf_quant_config.json"  # ModelOpt exports: vLLM reads it when config.json names no quantization
    if "quantization_config" not in cfg and beside.is_file():
        try:
            extra = json.loads(beside.read_text())
        except json.JSONDecodeError as exc:
            raise InvalidSpecError(f"{beside} is not valid JSON: {exc}") from None
        if isinstance(extra, Mapping):
            cfg = {**cfg, "quantization_config": {"quant_method": "modelopt", **extra}}
    try:
        return parse_model_config(cfg)
    except InvalidSpecError as exc:
        raise InvalidSpecError(f"{p}: {exc}") from None


def attention_spec(model: ModelInfo, tp: int = 1, **overrides: Any) -> AttentionSpec:
    """The per-rank AttentionSpec for ``model`` at tensor parallelism ``tp`` (overrides win)."""
    if tp <= 0:
        raise InvalidSpecError(f"--tp must be positive, got {tp}")
    if model.num_heads % tp:
        raise InvalidSpecError(f"{model.num_heads} attention heads cannot be split over --tp {tp}")
    fields: dict[str, Any] = {"dtype": model.dtype}
    if model.use_mla:
        rope = model.qk_rope_head_dim or 64
        fields.update(
            num_heads=model.num_heads // tp,
            num_kv_heads=1,
            head_size=int(model.kv_lora_rank or 0) + rope,
            use_mla=True,
            kv_lora_rank=model.kv_lora_rank,
            qk_rope_head_dim=rope,
            qk_nope_head_dim=model.qk_nope_head_dim,
            v_head_dim=model.v_head_dim,
        )
    else:
        if model.num_kv_heads >= tp and model.num_kv_heads % tp:
            raise InvalidSpecError(f"{model.num_kv_heads} KV heads cannot be split over --tp {tp}")
        fields.update(
            num_heads=model.num_heads // tp,
            num_kv_heads=max(1, model.num_kv_heads // tp),
            head_size=model.head_size,
        )
    fields.update(sliding_window=model.sliding_window, logits_soft_cap=model.logits_soft_cap, sinks=model.sinks)
    fields.update(architecture=model.architecture)
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return AttentionSpec(**fields)


def all2all_spec(model: ModelInfo, ep_size: int, **overrides: Any) -> All2AllSpec:
    """The All2AllSpec for a MoE model at expert parallelism ``ep_size``, dispatching the activation dtype of its
    quantization (``dispatch_dtype``) unless ``quant_dtype`` is given."""
    if not model.is_moe:
        raise InvalidSpecError(
            f"model type {model.model_type} has no MoE fields (num_local_experts, "
            "n_routed_experts, num_experts): it has no all2all to select"
        )
    fields: dict[str, Any] = {
        "ep_size": ep_size,
        "num_experts": model.num_experts,
        "topk": model.topk or 1,
        "hidden_size": model.hidden_size,
        "quant_dtype": dispatch_dtype(model)[0],
    }
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return All2AllSpec(**fields)

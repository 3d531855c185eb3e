"""Core value types: what an engine fixes for its life (specs) and what one measurement runs (workloads).

Specs are frozen and normalised on construction, so that two ways of spelling the same model ("bf16" and
"bfloat16") give the same canonical key in the store and the same cache entry in the selector. Bad input is
rejected here, once, with one clear sentence (``InvalidSpecError``), so nothing downstream has to guess.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from hwtune.core.errors import InvalidSpecError

# --- vocabularies -------------------------------------------------------------------------------------------

#: Model (activation) dtypes and their accepted spellings.
DTYPE_ALIASES: Mapping[str, str] = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "torch.float16": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "torch.float32": "float32",
}

#: KV-cache dtype spellings hwtune normalises, and hwtune's own names (turboquant_4bit and turboquant_8bit are
#: hwtune's TurboQuant kernel's formats). Every name an engine version accepts (its snapshot's vocabulary,
#: hwtune/core/catalogue/engines: vLLM's turboquant_k8v4, nvfp4, ...) is accepted as spelled. Knowing a name is
#: not supporting it: each backend declares its own allowlist, and a name missing there is rejected (fail
#: closed). "fp8" means fp8_e4m3 on CUDA, as in vLLM (vllm/config/cache.py CacheDType; vllm/utils/torch_utils.py
#: STR_DTYPE_TO_TORCH_DTYPE maps fp8 -> e4m3).
KV_CACHE_DTYPE_ALIASES: Mapping[str, str] = {
    "auto": "auto",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "fp8_ds_mla": "fp8_ds_mla",
    "turboquant_4bit": "turboquant_4bit",
    "turboquant_8bit": "turboquant_8bit",
}

#: Activation payload dtypes for MoE dispatch (vLLM's quant_dtype of the fused-MoE quant config).
QUANT_DTYPE_ALIASES: Mapping[str, str] = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "none": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "nvfp4": "nvfp4",
    "mxfp8": "mxfp8",
    "mxfp4": "mxfp4",
}

KVLayout = Literal["auto", "NHD", "HND"]
Phase = Literal["decode", "prefill", "mixed"]
PHASES: tuple[Phase, ...] = ("decode", "prefill", "mixed")


def _norm(value: str, aliases: Mapping[str, str], what: str) -> str:
    key = str(value).strip().lower()
    if key not in aliases:
        known = ", ".join(sorted(set(aliases.values())))
        raise InvalidSpecError(f"unknown {what} {value!r}; known: {known}")
    return aliases[key]


def normalize_dtype(value: str) -> str:
    """The canonical name of a model dtype alias ("bf16" -> "bfloat16"); unknown names are an InvalidSpecError."""
    return _norm(value, DTYPE_ALIASES, "dtype")


def normalize_kv_cache_dtype(value: str) -> str:
    """The canonical name of a kv-cache dtype alias, so that allowlists and workload keys see one spelling; a name
    some supported engine version accepts (vLLM's turboquant_k8v4, ...) is kept as spelled."""
    from hwtune.core.catalogue.engines.snapshot import known_kv_cache_dtypes  # data files, read once

    key = str(value).strip().lower()
    if key in KV_CACHE_DTYPE_ALIASES:
        return KV_CACHE_DTYPE_ALIASES[key]
    if key in known_kv_cache_dtypes():
        return key
    known = ", ".join(sorted(set(KV_CACHE_DTYPE_ALIASES.values()) | known_kv_cache_dtypes()))
    raise InvalidSpecError(f"unknown kv-cache dtype {value!r}; known: {known}")


def normalize_quant_dtype(value: str) -> str:
    """The canonical name of an all2all activation quant dtype alias, so that allowlists and keys see one spelling."""
    return _norm(value, QUANT_DTYPE_ALIASES, "activation quant dtype")


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidSpecError(f"{name} must be a positive integer, got {value!r}")


def _stable_hash(payload: Mapping[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# --- attention ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionSpec:
    """The attention layer as an engine fixes it at start (per tensor-parallel rank).

    ``block_size`` None means the user gave none: an engine then runs each backend at its preferred block size
    (docs/engines.md); hwtune measures a given size. ``spec_tokens`` is the number of speculative tokens per
    decode step (vLLM's ``num_speculative_tokens``), so a decode query holds ``1 + spec_tokens`` tokens. For
    MLA (``use_mla``), ``head_size`` is the latent cache width ``kv_lora_rank + qk_rope_head_dim`` and
    ``num_kv_heads`` is 1, as vLLM lays out its MLA cache.
    """

    num_heads: int
    num_kv_heads: int
    head_size: int
    dtype: str = "bfloat16"
    kv_cache_dtype: str = "auto"
    block_size: int | None = 16
    kv_layout: KVLayout = "auto"
    use_mla: bool = False
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    sliding_window: int | None = None
    logits_soft_cap: float | None = None
    sinks: bool = False
    dcp_size: int = 1
    pcp_size: int = 1
    spec_tokens: int = 0
    #: Tokens per chunk when the KV is dealt across context-parallel ranks (vLLM's cp_kv_cache_interleave_size).
    cp_interleave: int = 1
    #: The model's architecture as its config.json names it ("DeepseekV3ForCausalLM"), for engine rules that are
    #: per architecture (SGLang's model overrides); not part of the spec's identity in the store (``key``).
    architecture: str | None = None

    def __post_init__(self) -> None:
        if self.architecture is not None and not (isinstance(self.architecture, str) and self.architecture.strip()):
            raise InvalidSpecError(f"architecture must be a model class name, got {self.architecture!r}")
        for name in ("num_heads", "num_kv_heads", "head_size", "block_size", "dcp_size", "pcp_size", "cp_interleave"):
            if name != "block_size" or self.block_size is not None:
                _positive(name, getattr(self, name))
        if self.num_heads % self.num_kv_heads:
            raise InvalidSpecError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        object.__setattr__(self, "kv_cache_dtype", normalize_kv_cache_dtype(self.kv_cache_dtype))
        layout = str(self.kv_layout).upper() if str(self.kv_layout).lower() != "auto" else "auto"
        if layout not in ("auto", "NHD", "HND"):
            raise InvalidSpecError(f"unknown kv layout {self.kv_layout!r}; known: auto, NHD, HND")
        object.__setattr__(self, "kv_layout", layout)
        if isinstance(self.spec_tokens, bool) or not isinstance(self.spec_tokens, int) or self.spec_tokens < 0:
            raise InvalidSpecError(f"spec_tokens must be a non-negative integer, got {self.spec_tokens!r}")
        if self.sliding_window is not None:
            _positive("sliding_window", self.sliding_window)
        if self.logits_soft_cap is not None:
            cap = float(self.logits_soft_cap)
            if not cap > 0 or cap != cap or cap == float("inf"):
                raise InvalidSpecError(f"logits_soft_cap must be a positive finite number, got {cap!r}")
            object.__setattr__(self, "logits_soft_cap", cap)
        if self.use_mla:
            for name in ("kv_lora_rank", "qk_rope_head_dim"):
                if getattr(self, name) is not None:
                    _positive(name, getattr(self, name))
            if self.kv_lora_rank is not None and self.qk_rope_head_dim is not None:
                latent = self.kv_lora_rank + self.qk_rope_head_dim
                if latent != self.head_size:
                    raise InvalidSpecError(
                        f"for MLA, head_size must be kv_lora_rank + qk_rope_head_dim = {latent}, got {self.head_size}"
                    )
        elif self.kv_lora_rank is not None:
            raise InvalidSpecError("kv_lora_rank is an MLA field; set use_mla=True (--mla) to use it")

    @property
    def query_len_decode(self) -> int:
        """Query tokens per request in a decode step."""
        return 1 + self.spec_tokens

    @property
    def gqa_group(self) -> int:
        """Query heads per KV head (the GQA group size that kernels' allowlists restrict)."""
        return self.num_heads // self.num_kv_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AttentionSpec":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise InvalidSpecError(f"unknown AttentionSpec fields: {', '.join(sorted(unknown))}")
        return cls(**dict(data))

    def key(self) -> str:
        """The spec's identity in the store; fields added later count only when not at their default, so that
        earlier measurements keep their keys."""
        return _stable_hash({"kind": "attention", **_keyed(self.to_dict())})

    def any_layout(self) -> "AttentionSpec":
        """The spec with its KV layout left open: what the same workload in either layout shares (the tuner's
        neighbours across layouts, the warm-up's compile families)."""
        return dataclasses.replace(self, kv_layout="auto")


#: AttentionSpec fields added after measurements were first stored, with the default that leaves a key unchanged.
_LATER_FIELDS = {"cp_interleave": 1}


#: AttentionSpec fields that never enter a key: they change which engine backend is chosen, not what is measured.
_NOT_KEYED = frozenset({"architecture"})


def _keyed(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec's dict as keys hash it: later fields at their defaults left out, fields that are not measured too."""
    return {k: v for k, v in spec.items() if k not in _NOT_KEYED and not (k in _LATER_FIELDS and v == _LATER_FIELDS[k])}


@dataclass(frozen=True)
class AttentionWorkload:
    """One attention shape to measure: the spec plus phase, batch and lengths.

    ``context_len`` counts all KV tokens each request attends to (cached plus new); ``query_len`` the new
    query tokens per request (1 + spec_tokens in decode; the chunk size in prefill). ``mixed`` batches hold
    ``num_prefill`` prefill requests of ``query_len`` tokens and ``batch - num_prefill`` decode requests.
    ``context_lens`` optionally gives each request its own context (mixed lengths); otherwise uniform.
    """

    spec: AttentionSpec
    phase: Phase
    batch: int
    context_len: int
    query_len: int = 1
    num_prefill: int = 0
    context_lens: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise InvalidSpecError(f"unknown phase {self.phase!r}; known: {', '.join(PHASES)}")
        for name in ("batch", "context_len", "query_len"):
            _positive(name, getattr(self, name))
        if self.query_len > self.context_len:
            raise InvalidSpecError(
                f"query_len ({self.query_len}) cannot exceed context_len ({self.context_len}): the context "
                "includes the new tokens"
            )
        if self.phase == "mixed" and not (0 < self.num_prefill < self.batch):
            raise InvalidSpecError("a mixed batch needs 0 < num_prefill < batch")
        if self.context_lens is not None:
            lens = tuple(int(x) for x in self.context_lens)
            if len(lens) != self.batch or min(lens) < self.query_len:
                raise InvalidSpecError("context_lens needs one length per request, each >= query_len")
            object.__setattr__(self, "context_lens", lens)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["spec"] = self.spec.to_dict()
        if self.context_lens is not None:
            d["context_lens"] = list(self.context_lens)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AttentionWorkload":
        d = dict(data)
        d["spec"] = AttentionSpec.from_dict(d["spec"])
        if d.get("context_lens") is not None:
            d["context_lens"] = tuple(d["context_lens"])
        return cls(**d)

    def key(self) -> str:
        d = self.to_dict()
        return _stable_hash({"kind": "attention", **d, "spec": _keyed(d["spec"])})

    @property
    def kind(self) -> str:
        """Always "attention": lets code handle either workload type without isinstance checks."""
        return "attention"


# --- all2all ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class All2AllSpec:
    """An expert-parallel MoE layer's dispatch/combine as fixed at engine start."""

    ep_size: int
    num_experts: int
    topk: int
    hidden_size: int
    quant_dtype: str = "bf16"
    num_nodes: int = 1

    def __post_init__(self) -> None:
        for name in ("ep_size", "num_experts", "topk", "hidden_size", "num_nodes"):
            _positive(name, getattr(self, name))
        if self.topk > self.num_experts:
            raise InvalidSpecError(f"topk ({self.topk}) cannot exceed num_experts ({self.num_experts})")
        if self.num_experts % self.ep_size:
            raise InvalidSpecError(f"num_experts ({self.num_experts}) must be divisible by ep_size ({self.ep_size})")
        if self.ep_size % self.num_nodes:
            raise InvalidSpecError(f"ep_size ({self.ep_size}) must be divisible by num_nodes ({self.num_nodes})")
        object.__setattr__(self, "quant_dtype", normalize_quant_dtype(self.quant_dtype))

    @property
    def internode(self) -> bool:
        """Whether the EP group spans nodes (backends then need the internode feature)."""
        return self.num_nodes > 1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "All2AllSpec":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise InvalidSpecError(f"unknown All2AllSpec fields: {', '.join(sorted(unknown))}")
        return cls(**dict(data))

    def key(self) -> str:
        return _stable_hash({"kind": "all2all", **self.to_dict()})


@dataclass(frozen=True)
class All2AllWorkload:
    """One dispatch+combine shape: the spec plus tokens per rank and the routing pattern."""

    spec: All2AllSpec
    tokens_per_rank: int
    routing: Literal["uniform", "skewed"] = "uniform"

    def __post_init__(self) -> None:
        _positive("tokens_per_rank", self.tokens_per_rank)
        if self.routing not in ("uniform", "skewed"):
            raise InvalidSpecError(f"unknown routing {self.routing!r}; known: uniform, skewed")

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec.to_dict(), "tokens_per_rank": self.tokens_per_rank, "routing": self.routing}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "All2AllWorkload":
        d = dict(data)
        d["spec"] = All2AllSpec.from_dict(d["spec"])
        return cls(**d)

    def key(self) -> str:
        return _stable_hash({"kind": "all2all", **self.to_dict()})

    @property
    def kind(self) -> str:
        """Always "all2all": lets code handle either workload type without isinstance checks."""
        return "all2all"


Spec = AttentionSpec | All2AllSpec
Workload = AttentionWorkload | All2AllWorkload


def workload_from_dict(kind: str, data: Mapping[str, Any]) -> Workload:
    """Rebuild a workload of ``kind`` from its ``to_dict`` form (as stored or sent to a worker)."""
    if kind == "attention":
        return AttentionWorkload.from_dict(data)
    if kind == "all2all":
        return All2AllWorkload.from_dict(data)
    raise InvalidSpecError(f"unknown workload kind {kind!r}; known: attention, all2all")


__all__ = [
    "AttentionSpec",
    "AttentionWorkload",
    "All2AllSpec",
    "All2AllWorkload",
    "Spec",
    "Workload",
    "PHASES",
    "normalize_dtype",
    "normalize_kv_cache_dtype",
    "normalize_quant_dtype",
    "workload_from_dict",
]

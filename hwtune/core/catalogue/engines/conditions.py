"""The configuration an engine's selector sees, and the condition language of the engine snapshots.

A snapshot states every fact as clauses ``{"when": condition, "value": ..., "source": ...}``; a condition is a
mapping whose keys must all hold (docs/engines.md lists them). ``holds`` evaluates one against an
``EngineConfig``, the engine-neutral view of an AttentionSpec on a device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

#: KV-cache dtypes that store the model's own precision (vLLM kv_cache_interface.get_kv_quant_mode -> NONE).
UNQUANTIZED_KV = frozenset({"auto", "float16", "bfloat16", "bf16"})
#: Condition keys that compare one boolean field of the configuration.
_BOOL_KEYS = (
    "mla",
    "sinks",
    "sliding_window",
    "soft_cap",
    "dcp",
    "pcp",
    "cp",
    "spec_decode",
    "mm_prefix",
    "block_size_given",
    "kv_quantized",
    "cp_interleave_gt1",
    "asymmetric_kv",
    "gqa",
)
_DIMS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True)
class EngineConfig:
    """What an engine's attention selector decides on: the device's compute capability and the layer's shape and
    features. ``block_size`` None means the user gave none (the engine then uses each backend's preferred size);
    MLA dimensions None mean unknown (checks on them pass)."""

    cc: tuple[int, int]
    head_size: int
    dtype: str
    kv_cache_dtype: str
    block_size: int | None
    num_heads: int
    num_kv_heads: int
    mla: bool = False
    sinks: bool = False
    sliding_window: bool = False
    soft_cap: bool = False
    dcp: bool = False
    pcp: bool = False
    spec_decode: bool = False
    cp_interleave_gt1: bool = False
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    #: Optional packages present (names as pip spells them); None: assume every one is (planning for another machine).
    installed: frozenset[str] | None = field(default_factory=frozenset)
    mm_prefix: bool = False
    asymmetric_kv: bool = False
    #: The model class (config.json ``architectures[0]``); None: unknown, so no per-architecture rule applies.
    architecture: str | None = None

    @property
    def kv_quantized(self) -> bool:
        """Whether the KV cache is stored below the model's precision (fp8, nvfp4, turboquant_*, ...)."""
        return self.kv_cache_dtype not in UNQUANTIZED_KV

    @property
    def block_size_given(self) -> bool:
        """Whether the user gave a block (page) size; engines pick each backend's preferred size otherwise."""
        return self.block_size is not None

    @property
    def gqa(self) -> bool:
        """Whether several query heads share a KV head (grouped-query attention)."""
        return self.num_heads > self.num_kv_heads

    @property
    def cp(self) -> bool:
        """Whether any context parallelism (decode or prefill) is on."""
        return self.dcp or self.pcp


def int_rule_allows(rule: Any, value: int) -> bool:
    """Whether ``value`` satisfies a snapshot integer rule: "any", {"values": [...]}, or {"min", "max",
    "multiple_of"} (each optional)."""
    if rule == "any":
        return True
    if not isinstance(rule, Mapping):
        raise ValueError(f"not an integer rule: {rule!r}")
    if "values" in rule:
        return value in rule["values"]
    if value % int(rule.get("multiple_of", 1)):
        return False
    if "min" in rule and value < rule["min"]:
        return False
    return "max" not in rule or value <= rule["max"]


def describe_int_rule(rule: Any) -> str:
    """An integer rule in words ("64, 128, 256", "multiples of 8 up to 256", "any")."""
    if rule == "any":
        return "any"
    if "values" in rule:
        return ", ".join(str(v) for v in rule["values"])
    parts = [f"multiples of {rule['multiple_of']}"] if rule.get("multiple_of", 1) > 1 else ["any"]
    if "min" in rule:
        parts.append(f"from {rule['min']}")
    if "max" in rule:
        parts.append(f"up to {rule['max']}")
    return " ".join(parts)


def parse_cc(text: str) -> tuple[int, int]:
    """ "9.0" -> (9, 0)."""
    major, minor = str(text).split(".")
    return int(major), int(minor)


def holds(cond: Mapping[str, Any] | None, cfg: EngineConfig, extra: Mapping[str, Any] | None = None) -> bool:
    """Whether every key of ``cond`` holds for ``cfg`` (None or {} always holds). ``extra`` supplies keys that are
    not configuration fields: ``backend`` (the engine's current choice) and ``facts`` (the backend's facts, for
    ``backend_fact``), and ``page_size`` (the page size the engine runs the backend at, for ``page_size`` rules).
    An unknown key raises ValueError, so a typo in a snapshot cannot pass silently."""
    return all(_one(key, want, cfg, extra or {}) for key, want in (cond or {}).items())


def _one(key: str, want: Any, cfg: EngineConfig, extra: Mapping[str, Any]) -> bool:
    if key == "any":
        return any(holds(c, cfg, extra) for c in want)
    if key == "not":
        return not holds(want, cfg, extra)
    if key in _BOOL_KEYS:
        return bool(getattr(cfg, key)) == bool(want)
    if key == "architecture":
        return cfg.architecture in want
    if key == "cc_major":
        return cfg.cc[0] in want
    if key == "cc":
        return f"{cfg.cc[0]}.{cfg.cc[1]}" in want
    if key == "cc_min":
        return cfg.cc >= parse_cc(want)
    if key == "cc_max":
        return cfg.cc <= parse_cc(want)
    if key == "kv_cache_dtype":
        return cfg.kv_cache_dtype in want
    if key == "dtype":
        return cfg.dtype in want
    if key == "head_size":
        return int_rule_allows(want, cfg.head_size)
    if key == "block_size":
        return cfg.block_size is not None and int_rule_allows(want, cfg.block_size)
    if key == "num_heads_max":
        return cfg.num_heads <= int(want)
    if key == "gqa_group_min":
        return cfg.num_heads // max(cfg.num_kv_heads, 1) >= int(want)
    if key == "page_size":
        size = extra.get("page_size")
        return size is not None and int_rule_allows(want, int(size))
    if key in _DIMS:
        value = getattr(cfg, key)
        return value is None or value in want
    if key == "installed":
        return cfg.installed is None or all(p in cfg.installed for p in want)
    if key == "backend":
        return extra.get("backend") in want
    if key == "backend_fact":
        return bool(extra.get("facts", {}).get(want))
    raise ValueError(f"unknown condition key {key!r} in an engine snapshot (docs/engines.md lists the keys)")

"""What an engine version's selector does with a configuration, from its snapshot: which backends it would
accept (``selection_reasons``), in which order it tries them (``order``), which accepted ones then fail when the
engine starts (``start_reasons``), and, for an engine that decides rather than validates (SGLang),
its decision (``decide``).

Reasons carry a ``code``; feature codes (``feature:sinks``, ...) match ``Feature`` values so that validation words
them as it words every other backend's; the others carry their sentence here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from hwtune.core.catalogue.engines.conditions import (
    EngineConfig,
    describe_int_rule,
    holds,
    int_rule_allows,
    parse_cc,
)
from hwtune.core.catalogue.engines.snapshot import Snapshot

#: Boolean backend facts checked against a demanded feature: fact -> (config field, Feature value).
_FEATURE_FACTS = (("sinks", "sinks", "sinks"), ("sliding_window", "sliding_window", "sliding_window"))


@dataclass(frozen=True)
class EngineReason:
    """Why the engine refuses a backend for a configuration: a code (``feature:<name>`` for demanded features), a
    sentence (empty for feature codes, which validation words), the engine source, and the check's id when it
    came from a named check."""

    code: str
    message: str
    source: str
    check_id: str = ""


def short_source(source: str) -> str:
    """The file and function of a source ("vllm/.../flashinfer.py FlashInferBackend.supports_sink")."""
    words = source.replace(":", " ").replace(";", " ").split()[:2]
    if len(words) == 2:
        words[1] = words[1].split("(")[0].rstrip(",.")
    return " ".join(words)


def _ccs(value: Any) -> str:
    words = []
    for lo, hi in value:
        if hi == "99.9":
            words.append(f"SM >= {lo}")
        elif lo.split(".")[0] == hi.split(".")[0] and lo.endswith(".0") and hi.endswith(".9"):
            words.append(f"SM {lo.split('.')[0]}.x")
        else:
            words.append(f"SM {lo} to {hi}" if lo != hi else f"SM {lo}")
    return " or ".join(words)


def _shape_reasons(snap: Snapshot, version: str, name: str, cfg: EngineConfig, who: str) -> list[EngineReason]:
    """Compute capability, dtype, kv-cache dtype and head size against the backend's stated lists."""
    out = []
    cc = snap.fact(name, "compute_capability", version, cfg)
    if cc and cc.value != "any" and not any(parse_cc(lo) <= cfg.cc <= parse_cc(hi) for lo, hi in cc.value):
        sm = f"SM {cfg.cc[0]}.{cfg.cc[1]}"
        out.append(EngineReason("compute_capability", f"{who} needs {_ccs(cc.value)}; this device is {sm}.", cc.source))
    for key, what, value in (
        ("dtypes", "dtype", cfg.dtype),
        ("kv_cache_dtypes", "kv-cache dtype", cfg.kv_cache_dtype),
    ):
        clause = snap.fact(name, key, version, cfg)
        allowed = list(clause.value) if clause else []
        if value not in allowed and not (value == "fp8_e4m3" and "fp8" in allowed):
            listed = ", ".join(allowed) or "none"
            out.append(
                EngineReason(key[:-1], f"{who} does not support {what} {value} (supports {listed}).", _src(clause))
            )
    heads = snap.fact(name, "head_sizes", version, cfg)
    if heads and not int_rule_allows(heads.value, cfg.head_size):
        rule = describe_int_rule(heads.value)
        out.append(
            EngineReason(
                "head_size", f"{who} does not support head size {cfg.head_size} (supports {rule}).", heads.source
            )
        )
    return out


def _src(clause: Any) -> str:
    return clause.source if clause else ""


def kernel_block_bases(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> list[int]:
    """The backend's kernel block sizes, a multiple-of rule counted by its base (empty: any size)."""
    clause = snap.fact(name, "kernel_block_sizes", version, cfg)
    sizes = clause.value if clause else []
    return [int(s["multiple_of"]) if isinstance(s, Mapping) else int(s) for s in sizes]


def _block_reasons(snap: Snapshot, version: str, name: str, cfg: EngineConfig, who: str) -> list[EngineReason]:
    """The block size against the kernel block sizes: accepted when it is a multiple of one (hybrid blocks)."""
    if cfg.block_size is None:
        return []  # none given: the engine takes the backend's preferred size
    bases = kernel_block_bases(snap, version, name, cfg)
    if not bases or any(cfg.block_size % b == 0 for b in bases):
        return []
    rule = snap.engine_fact("block_size_rule", version)
    listed = ", ".join(str(b) for b in bases)
    return [
        EngineReason(
            "block_size",
            f"{who} does not support block size {cfg.block_size}: {snap.display} accepts a multiple of one of its "
            f"kernel block sizes ({listed}); omit --block-size to let {snap.display} use "
            f"{preferred_block_size(snap, version, name, cfg)}.",
            f"{_src(snap.fact(name, 'kernel_block_sizes', version, cfg))}; {_src(rule)}",
        )
    ]


def _feature_reasons(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> list[EngineReason]:
    """Demanded features (sinks, sliding window, DCP, PCP) the backend does not support in this version."""
    out = []
    wanted = [(fact, getattr(cfg, field_), feature) for fact, field_, feature in _FEATURE_FACTS]
    wanted += [("dcp", cfg.dcp, "decode_lse"), ("pcp", cfg.pcp, "pcp")]
    for fact, needed, feature in wanted:
        clause = snap.fact(name, fact, version, cfg)
        if needed and not (clause and clause.value):
            out.append(EngineReason(f"feature:{feature}", "", _src(clause)))
    return out


def _check_reasons(checks: list, cfg: EngineConfig, who: str, facts: Mapping[str, Any]) -> list[EngineReason]:
    """Named checks: where ``when`` holds and ``require`` does not, the check's reason."""
    out = []
    for check in checks:
        if holds(check.get("when"), cfg, {"facts": facts}) and not holds(check["require"], cfg, {"facts": facts}):
            out.append(EngineReason("engine_check", f"{who}: {check['reason']}.", check["source"], check["id"]))
    return out


def selection_reasons(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> list[EngineReason]:
    """Every reason the engine version's selector refuses backend ``name`` for ``cfg`` (empty: it accepts it)."""
    who = f"{snap.describe(version)}'s {name}"
    facts = snap.backend(name)
    stated = [k for k in ("sparse", "mm_prefix_only", "mla") if snap.fact(name, k, version, cfg) is not None]
    if facts is None or not stated:
        return [EngineReason("engine", f"{snap.describe(version)} has no attention backend {name}.", "")]
    for flag, words in (
        ("sparse", "is a sparse (top-k) MLA backend; this model's attention is dense"),
        ("mm_prefix_only", "serves multimodal prefix attention only"),
    ):
        clause = snap.fact(name, flag, version, cfg)
        if clause and clause.value:
            return [EngineReason("engine", f"{who} {words}.", clause.source)]
    is_mla = bool(snap.fact(name, "mla", version, cfg).value)  # type: ignore[union-attr]
    if is_mla != cfg.mla:
        text = "is not an MLA backend; this model uses MLA" if cfg.mla else "implements MLA only; this model does not"
        return [EngineReason("mla", f"{who} {text}.", _src(snap.fact(name, "mla", version, cfg)))]
    out = _shape_reasons(snap, version, name, cfg, who) + _block_reasons(snap, version, name, cfg, who)
    out += _feature_reasons(snap, version, name, cfg)
    return out + _check_reasons(_applicable(facts.get("checks", []), version), cfg, who, {})


def _applicable(checks: list, version: str) -> list:
    return [c for c in checks if "versions" not in c or version in c["versions"]]


def _fact_values(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> dict[str, Any]:
    """The backend's facts resolved for ``cfg`` (named checks and start checks left out)."""
    facts = snap.backend(name) or {}
    values = {}
    for key, fact in facts.items():
        if key not in ("checks", "start_checks"):
            clause = snap.resolve(fact, version, cfg)
            values[key] = clause.value if clause else None
    return values


def start_reasons(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> list[EngineReason]:
    """Reasons a backend the selector accepts then fails when the engine starts or runs its first batch (the
    snapshot's ``start_checks``, the backend's and the engine-wide ones)."""
    own = (snap.backend(name) or {}).get("start_checks", [])
    checks = _applicable(own, version) + _applicable(snap.data.get("start_checks", []), version)
    who = f"{snap.describe(version)}'s {name}"
    return _check_reasons(checks, cfg, who, _fact_values(snap, version, name, cfg))


def order(snap: Snapshot, version: str, cfg: EngineConfig) -> list[str]:
    """The backends in the order the engine version tries them for ``cfg`` (entries whose own condition fails
    left out)."""
    clause = snap.engine_fact("priorities", version, cfg)
    names = []
    for entry in clause.value if clause else []:
        if isinstance(entry, Mapping):
            if holds(entry.get("when"), cfg):
                names.append(entry["name"])
        else:
            names.append(entry)
    return names


def priorities_source(snap: Snapshot, version: str, cfg: EngineConfig) -> str:
    """The source of the priority list that applies to ``cfg``."""
    return _src(snap.engine_fact("priorities", version, cfg))


def preferred_block_size(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> int:
    """The block size the engine uses for backend ``name`` when the user gives none: the engine default when the
    backend accepts it, else its smallest kernel block size."""
    default = int(snap.engine_fact("default_block_size", version).value)  # type: ignore[union-attr]
    bases = kernel_block_bases(snap, version, name, cfg)
    if not bases or any(default % b == 0 for b in bases):
        return default
    return min(bases)


def decide(snap: Snapshot, version: str, cfg: EngineConfig) -> tuple[str | None, list[str]]:
    """For a deciding engine (SGLang): its default backend for ``cfg`` after its rewrites, and the sources of each
    step; None when its kv-cache dtype vocabulary refuses the configuration."""
    if cfg.kv_cache_dtype not in snap.kv_cache_dtypes(version):
        return None, [_src(snap.engine_fact("kv_cache_dtypes", version))]
    clause = snap.resolve(snap.data["defaults"], version, cfg)
    if clause is None:
        return None, []
    name, sources = clause.value, [clause.source]
    for rewrite in snap.data.get("rewrites", []):
        if ("versions" not in rewrite or version in rewrite["versions"]) and holds(
            rewrite["when"], cfg, {"backend": name}
        ):
            name, sources = rewrite["value"], sources + [rewrite["source"]]
    return name, sources


# --- a deciding engine (SGLang): which backends it accepts when one is given explicitly -------------------------


def explicit_order(snap: Snapshot, version: str) -> list[str]:
    """The backends whose explicit acceptance the snapshot models, in its stated order (``explicit.order``)."""
    clause = snap.resolve(snap.data.get("explicit", {}).get("order", []), version, None)
    return list(clause.value) if clause else []


def serves(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> bool:
    """Whether backend ``name`` serves this kind of attention (dense or MLA) at all."""
    clause = snap.fact(name, "serves", version, cfg)
    return clause is not None and ("mla" if cfg.mla else "mha") in clause.value


def engine_page_size(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> int:
    """The page (block) size a deciding engine runs backend ``name`` at: the one given, else the engine's default,
    unless its page-size rule for the backend replaces it."""
    given = cfg.block_size
    if given is None:
        given = int(snap.engine_fact("default_block_size", version).value)  # type: ignore[union-attr]
    clause = snap.fact(name, "page_size", version, cfg)
    return given if clause is None or clause.value == "given" else int(clause.value)


def hwtune_tactics(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> dict[str, str] | None:
    """The tactic per phase of the hwtune record that is the kernel the engine runs for ``name``, where the snapshot
    names it (SGLang's flashinfer: fa2 or fa2-tc); None where it does not."""
    clause = snap.fact(name, "hwtune_tactics", version, cfg)
    return dict(clause.value) if clause else None


def _words(cfg: EngineConfig, page_size: int | None) -> dict[str, object]:
    return {
        "cc": f"{cfg.cc[0]}.{cfg.cc[1]}",
        "head_size": cfg.head_size,
        "dtype": cfg.dtype,
        "kv_cache_dtype": cfg.kv_cache_dtype,
        "page_size": page_size,
    }


def explicit_reasons(snap: Snapshot, version: str, name: str, cfg: EngineConfig) -> list[EngineReason]:
    """Every reason the deciding engine version does not accept backend ``name`` as itself for ``cfg`` when it is
    given explicitly (empty: accepted): outside the snapshot's scope, rewritten to another backend, or refused by
    one of its checks."""
    who = f"{snap.describe(version)}'s {name}"
    if name not in explicit_order(snap, version):
        return [EngineReason("engine", f"hwtune's snapshot does not model {who} (docs/engines.md).", "")]
    if not serves(snap, version, name, cfg):
        kind = "MLA" if cfg.mla else "dense attention"
        return [EngineReason("mla", f"{who} does not serve {kind}.", _src(snap.fact(name, "serves", version, cfg)))]
    if cfg.kv_cache_dtype not in snap.kv_cache_dtypes(version):
        vocab = snap.engine_fact("kv_cache_dtypes", version)
        text = f"{snap.describe(version)} has no kv-cache dtype {cfg.kv_cache_dtype}."
        return [EngineReason("kv_cache_dtype", text, _src(vocab))]
    size = engine_page_size(snap, version, name, cfg)
    words, extra = _words(cfg, size), {"page_size": size}
    out = []
    for check in _applicable(snap.data.get("explicit", {}).get("scope", []), version) + _applicable(
        (snap.backend(name) or {}).get("accepts", []), version
    ):
        if holds(check.get("when"), cfg, extra) and not holds(check["require"], cfg, extra):
            text = f"{who} {check['reason'].format(**words)}."
            out.append(EngineReason("engine_check", text, check["source"], check["id"]))
    for rewrite in _applicable(snap.data.get("rewrites", []), version):
        if holds(rewrite["when"], cfg, {"backend": name}):
            text = (
                f"{who} does not run as itself here: {snap.describe(version)} replaces it with {rewrite['value']} "
                f"({short_source(rewrite['source'])})."
            )
            out.append(EngineReason("engine_rewrite", text, rewrite["source"]))
    return out

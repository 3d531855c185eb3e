"""Validation: can this backend serve this spec on this device? Returns reasons, never raises.

Fail closed: every value must be on the backend's allowlist. A reason is a full sentence a person can act
on; ``Rejection.code`` says which requirement failed so that errors can add the ways out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from hwtune.core.catalogue import FEATURE_WORDS, All2AllRules, AttentionRules, Backend, Feature, Tactic
from hwtune.core.catalogue.base import describe_ccs
from hwtune.core.devices import DeviceProfile
from hwtune.core.packages import check_requirement, installed_version, torch_cuda_version
from hwtune.core.types import All2AllSpec, AttentionSpec, Spec

ATTENTION_PHASES = ("decode", "prefill")


@dataclass(frozen=True)
class Rejection:
    """One failed requirement: ``code`` names it (e.g. "kv_cache_dtype", "feature:decode_lse")."""

    code: str
    message: str

    def __str__(self) -> str:
        return self.message


def _listing(values: object) -> str:
    return ", ".join(sorted(str(v) for v in values))  # type: ignore[union-attr]


# --- demanded features, in words ----------------------------------------------------------------------------


def demanded_features(spec: AttentionSpec) -> dict[str, set[Feature]]:
    """Features the spec needs, per phase (decode / prefill)."""
    both: set[Feature] = set()
    if spec.sinks:
        both.add(Feature.SINKS)
    if spec.sliding_window is not None:
        both.add(Feature.SLIDING_WINDOW)
    if spec.logits_soft_cap is not None:
        both.add(Feature.SOFT_CAP)
    decode = set(both)
    prefill = set(both)
    if spec.dcp_size > 1:
        decode.add(Feature.DECODE_LSE)
    if spec.spec_tokens > 0:
        decode.add(Feature.SPEC_DECODE)
    if spec.pcp_size > 1:
        prefill.add(Feature.PCP)
    if spec.pcp_size > 1 and spec.dcp_size > 1:
        prefill.add(Feature.PCP_WITH_DCP)
    if spec.spec_tokens > 0 and spec.cp_interleave > 1 and spec.dcp_size * spec.pcp_size > 1:
        decode.add(Feature.CP_INTERLEAVED_SPEC)
    return {"decode": decode, "prefill": prefill}


def feature_sentence(feature: Feature, spec: AttentionSpec, who: str) -> str:
    """Why the spec needs ``feature`` and that ``who`` lacks it, in full words."""
    if feature is Feature.DECODE_LSE:
        return (
            f"Decode Context Parallelism (DCP, --dcp {spec.dcp_size}) needs an attention backend that returns "
            f"the softmax log-sum-exp (LSE) during decode; {who} does not."
        )
    if feature is Feature.PCP:
        return (
            f"Prefill Context Parallelism (PCP, --pcp {spec.pcp_size}) needs an attention backend that supports "
            f"it; {who} does not (vLLM's MLA backends do; for other models drop --pcp or use --dcp)."
        )
    if feature is Feature.PCP_WITH_DCP:
        return (
            f"Prefill and decode context parallelism together (--pcp {spec.pcp_size} --dcp {spec.dcp_size}) need a "
            f"backend that supports both at once; {who} does not (use one of the two)."
        )
    if feature is Feature.CP_INTERLEAVED_SPEC:
        return (
            f"Speculative decoding ({spec.spec_tokens} tokens) with the KV interleaved over context-parallel ranks in "
            f"chunks of {spec.cp_interleave} tokens (--cp-interleave) needs a backend that supports it; {who} does "
            "not (use --cp-interleave 1)."
        )
    if feature is Feature.SPEC_DECODE:
        return (
            f"Speculative decoding with {spec.spec_tokens} speculative tokens sends {spec.query_len_decode} query "
            f"tokens per request in each decode step; {who} does not accept multi-token decode queries."
        )
    if feature is Feature.SINKS:
        return f"This model uses attention sinks; {who} does not support them."
    if feature is Feature.SLIDING_WINDOW:
        return f"This model uses sliding-window attention (window {spec.sliding_window}); {who} does not support it."
    if feature is Feature.SOFT_CAP:
        return f"This model caps attention logits (soft-cap {spec.logits_soft_cap:g}); {who} does not support it."
    return f"This spec needs a backend that {FEATURE_WORDS[feature]}; {who} does not."


# --- shared checks ------------------------------------------------------------------------------------------


def package_rejections(
    backend: Backend, extra: tuple = (), *, assume_installed: bool, device: DeviceProfile, who: str
) -> list[Rejection]:
    """Why the backend's packages (plus ``extra``) rule it out here: missing or out-of-range distributions, or a
    CPU-only torch on a GPU; nothing when planning for another machine (``assume_installed``)."""
    if assume_installed:
        return []
    out = []
    for req in (*backend.packages, *extra):
        problem = check_requirement(req)
        if problem:
            out.append(Rejection("package", f"{who} needs {req.describe()}: {problem}."))
    if backend.needs_cuda_torch and device.is_cuda and installed_version("torch") and torch_cuda_version() is None:
        lib = "FlashInfer" if any(r.distribution.startswith("flashinfer") for r in backend.packages) else who
        out.append(
            Rejection(
                "package",
                f"{lib} needs a CUDA build of torch; the installed torch {installed_version('torch')} is CPU-only "
                "(install a CUDA build, or plan for another machine with --assume-installed).",
            )
        )
    return out


def device_rejections(rules: AttentionRules | All2AllRules, device: DeviceProfile, who: str) -> list[Rejection]:
    """Why the device rules the backend (or tactic) out: wrong device type or compute capability; at most one reason,
    since the other rules are moot on the wrong hardware."""
    dtype = "cuda" if device.is_cuda else "cpu"
    assert rules.device_types is not None
    if dtype not in rules.device_types:
        if dtype == "cpu":
            return [Rejection("device", f"{who} runs on NVIDIA GPUs only; this device is a CPU.")]
        return [Rejection("device", f"{who} runs on the CPU only; this device is {device.describe()}.")]
    if device.is_cuda:
        assert rules.compute_capabilities is not None and device.compute_capability is not None
        if not any(r.allows(device.compute_capability) for r in rules.compute_capabilities):
            major, minor = device.compute_capability
            return [
                Rejection(
                    "compute_capability",
                    f"{who} needs compute capability {describe_ccs(rules.compute_capabilities)}; "
                    f"{device.describe()} is SM {major}.{minor}.",
                )
            ]
    return []


def _allowlist_rejections(rules: AttentionRules, spec: AttentionSpec, who: str) -> list[Rejection]:
    """The spec's values that the rules' allowlists do not list, each with what is supported."""
    assert rules.dtypes is not None and rules.kv_cache_dtypes is not None and rules.head_sizes is not None
    assert rules.block_sizes is not None and rules.kv_layouts is not None and rules.gqa_groups is not None
    checks = [
        ("dtype", spec.dtype in rules.dtypes, f"dtype {spec.dtype}", _listing(rules.dtypes)),
        (
            "kv_cache_dtype",
            spec.kv_cache_dtype in rules.kv_cache_dtypes,
            f"kv-cache dtype {spec.kv_cache_dtype}",
            _listing(rules.kv_cache_dtypes),
        ),
        (
            "head_size",
            rules.head_sizes.allows(spec.head_size),
            f"head size {spec.head_size}",
            rules.head_sizes.describe(),
        ),
        (
            "block_size",
            spec.block_size is None or rules.block_sizes.allows(spec.block_size),  # none given: the kernel's own
            f"block size {spec.block_size}",
            rules.block_sizes.describe(),
        ),
        (
            "kv_layout",
            spec.kv_layout == "auto" or spec.kv_layout in rules.kv_layouts,
            f"the {spec.kv_layout} KV layout",
            _listing(rules.kv_layouts),
        ),
        (
            "gqa_group",
            rules.gqa_groups.allows(spec.gqa_group),
            f"{spec.gqa_group} query heads per KV head",
            rules.gqa_groups.describe(),
        ),
    ]
    return [
        Rejection(code, f"{who} does not support {what} (supports {supported}).")
        for code, ok, what, supported in checks
        if not ok
    ]


def _attention_rule_rejections(
    rules: AttentionRules, spec: AttentionSpec, device: DeviceProfile, who: str, phases: tuple[str, ...]
) -> list[Rejection]:
    out = device_rejections(rules, device, who)
    out += _allowlist_rejections(rules, spec, who)
    need = (rules.kv_cache_dtype_min_cc or {}).get(spec.kv_cache_dtype)
    cc = device.compute_capability
    if need is not None and device.is_cuda and cc is not None and cc < need:
        out.append(
            Rejection(
                "kv_cache_dtype",
                f"{who} supports kv-cache dtype {spec.kv_cache_dtype} only from SM "
                f"{need[0]}.{need[1]}; {device.describe()} is older.",
            )
        )
    features = rules.features or frozenset()
    demanded = demanded_features(spec)
    seen: set[Feature] = set()
    for phase in phases:
        for feature in sorted(demanded[phase] - features - seen, key=lambda f: f.value):
            seen.add(feature)
            out.append(Rejection(f"feature:{feature.value}", feature_sentence(feature, spec, who)))
    return out


def _all2all_rule_rejections(
    rules: All2AllRules, spec: All2AllSpec, device: DeviceProfile, who: str
) -> list[Rejection]:
    assert rules.quant_dtypes is not None and rules.ep_sizes is not None and rules.hidden_sizes is not None
    out = device_rejections(rules, device, who)
    if spec.quant_dtype not in rules.quant_dtypes:
        out.append(
            Rejection(
                "quant_dtype",
                f"{who} accepts only {_listing(rules.quant_dtypes)} activations; {spec.quant_dtype} was asked "
                "(--quant-dtype).",
            )
        )
    if not rules.ep_sizes.allows(spec.ep_size):
        out.append(
            Rejection(
                "ep_size", f"{who} does not support EP size {spec.ep_size} (supports {rules.ep_sizes.describe()})."
            )
        )
    if not rules.hidden_sizes.allows(spec.hidden_size):
        out.append(
            Rejection(
                "hidden_size",
                f"{who} does not support hidden size {spec.hidden_size} (supports {rules.hidden_sizes.describe()}).",
            )
        )
    if rules.max_topk is not None and spec.topk > rules.max_topk:
        out.append(Rejection("topk", f"{who} supports top-k up to {rules.max_topk}; top-k is {spec.topk}."))
    features = rules.features or frozenset()
    if spec.internode and Feature.INTERNODE not in features:
        out.append(
            Rejection("feature:internode", f"{who} runs within one node only; this spec spans {spec.num_nodes} nodes.")
        )
    if not spec.internode and Feature.INTRANODE not in features:
        out.append(Rejection("feature:intranode", f"{who} runs across nodes only; this spec is one node."))
    if rules.interconnect == "nvlink" and device.is_cuda and device.interconnect != "nvlink":
        out.append(
            Rejection(
                "interconnect",
                f"{who} needs NVLink between the GPUs; {device.describe()} reports {device.interconnect} "
                f"({device.gpu_count} GPU(s)).",
            )
        )
    return out


# --- public API ---------------------------------------------------------------------------------------------


def check_tactic(
    backend: Backend, tactic: Tactic, spec: Spec, device: DeviceProfile, *, assume_installed: bool = False
) -> list[Rejection]:
    """Reasons this tactic cannot serve ``spec`` (for its own phases); backend-level checks not repeated."""
    who = f"{backend.name} tactic {tactic.name}"
    rules = backend.effective(tactic)
    out = (
        []
        if assume_installed
        else [
            Rejection("package", f"{who} needs {r.describe()}: {p}.")
            for r in tactic.packages
            if (p := check_requirement(r))
        ]
    )
    if isinstance(spec, AttentionSpec):
        assert isinstance(rules, AttentionRules)
        phases = tuple(p for p in ATTENTION_PHASES if p in tactic.phases)
        return out + _attention_rule_rejections(rules, spec, device, who, phases)
    assert isinstance(rules, All2AllRules)
    return out + _all2all_rule_rejections(rules, spec, device, who)


def phases_of(spec: Spec) -> tuple[str, ...]:
    """The phases a spec's backend must serve, each with at least one valid tactic: decode and prefill for attention,
    one dispatch_combine phase for all2all."""
    return ATTENTION_PHASES if isinstance(spec, AttentionSpec) else ("dispatch_combine",)


def valid_tactics(
    backend: Backend, spec: Spec, device: DeviceProfile, phase: str, *, assume_installed: bool = False
) -> list[Tactic]:
    """The backend's tactics that serve ``phase`` and pass every check for ``spec`` on ``device``, in declaration
    order."""
    return [
        t
        for t in backend.tactics
        if phase in t.phases and not check_tactic(backend, t, spec, device, assume_installed=assume_installed)
    ]


def check(backend: Backend, spec: Spec, device: DeviceProfile, *, assume_installed: bool = False) -> list[Rejection]:
    """Every reason ``backend`` cannot serve ``spec`` on ``device`` (empty: valid)."""
    who = backend.name
    if isinstance(spec, AttentionSpec) != (backend.kind == "attention"):
        return [Rejection("kind", f"{who} is an {backend.kind} backend, not for this spec.")]
    out = package_rejections(backend, assume_installed=assume_installed, device=device, who=who)
    if isinstance(spec, AttentionSpec):
        assert isinstance(backend.rules, AttentionRules)
        is_mla = backend.has(Feature.MLA)
        # An MLA mismatch makes every other fact moot (head size 576 and so on): report it alone.
        if spec.use_mla and not is_mla:
            return [
                Rejection("mla", f"This model uses multi-head latent attention (MLA); {who} is not an MLA backend.")
            ]
        if is_mla and not spec.use_mla:
            return [
                Rejection(
                    "mla", f"{who} implements multi-head latent attention (MLA) only; this model does not use MLA."
                )
            ]
        out += _attention_rule_rejections(backend.rules, spec, device, who, ATTENTION_PHASES)
    else:
        assert isinstance(backend.rules, All2AllRules)
        out += _all2all_rule_rejections(backend.rules, spec, device, who)
    if out:
        return out
    for phase in phases_of(spec):
        candidates = [t for t in backend.tactics if phase in t.phases]
        if valid_tactics(backend, spec, device, phase, assume_installed=assume_installed):
            continue
        why = (
            "; ".join(
                f"{t.name}: {check_tactic(backend, t, spec, device, assume_installed=assume_installed)[0].message}"
                for t in candidates
            )
            or "none declared"
        )
        out.append(Rejection(f"tactics:{phase}", f"No {who} tactic can run {phase} for this spec ({why})"))
    return out


#: Rejection codes that a stored, passing correctness measurement of the exact spec, taken in the same environment,
#: may lift (docs/selection.md, "A rule lifted by measurement"): an all2all activation-dtype rule, such as the one-sided
#: NVLink kernel's "nvfp4 only". Every other rule stays closed whatever was measured.
LIFTABLE_BY_MEASUREMENT: frozenset[str] = frozenset({"quant_dtype"})


def only_liftable(rejections: Sequence[Rejection]) -> bool:
    """Whether there are rejections and every one is a rule a passing measurement may lift (its activation dtype)."""
    return bool(rejections) and all(r.code in LIFTABLE_BY_MEASUREMENT for r in rejections)


def with_dtype_lifted(backend: Backend, spec: All2AllSpec) -> Backend:
    """``backend``'s record as it stands once a passing measurement lifted its activation-dtype rule for ``spec``: the
    spec's dtype joins the allowlist (its source says so); every other rule, the tactics' included, still applies."""
    rules = backend.rules
    assert isinstance(rules, All2AllRules) and rules.quant_dtypes is not None
    sources = dict(backend.sources)
    sources["quant_dtypes"] = (
        f"{sources.get('quant_dtypes', '')}; {spec.quant_dtype} lifted by a passing correctness measurement of this "
        "exact spec in this environment"
    )
    return dataclasses.replace(
        backend,
        rules=dataclasses.replace(rules, quant_dtypes=rules.quant_dtypes | {spec.quant_dtype}),
        sources=sources,
    )


def validate(backend: Backend, spec: Spec, device: DeviceProfile, *, assume_installed: bool = False) -> list[str]:
    """Human-readable reasons ``backend`` is not valid for ``spec`` on ``device``; empty when valid."""
    return [r.message for r in check(backend, spec, device, assume_installed=assume_installed)]

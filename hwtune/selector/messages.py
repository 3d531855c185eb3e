"""Actionable error messages: what was asked, what failed in full words, who would do, the ways out."""

from __future__ import annotations

from typing import Mapping, Sequence

from hwtune.core.catalogue import Backend
from hwtune.core.devices import DeviceProfile
from hwtune.core.types import All2AllSpec, AttentionSpec, Spec
from hwtune.core.validation import Rejection, only_liftable

ENV_VARS = {"attention": "HWTUNE_ATTENTION_BACKEND", "all2all": "HWTUNE_ALL2ALL_BACKEND"}


def _way_out(rejection: Rejection, backend: Backend, spec: Spec) -> str | None:
    code = rejection.code
    if code == "feature:decode_lse":
        return "run without DCP (--dcp 1)"
    if code == "feature:pcp":
        return "run without PCP (--pcp 1)"
    if code == "feature:spec_decode":
        return "run without speculative decoding (--spec-tokens 0)"
    if code == "kv_cache_dtype":
        allowed = sorted(backend.rules.kv_cache_dtypes or ())
        return f"use a kv-cache dtype {backend.name} supports (--kv-cache-dtype {' | '.join(allowed)})"
    if code == "quant_dtype":
        allowed = sorted(backend.rules.quant_dtypes or ())
        return f"quantize activations to {' or '.join(allowed)} (--quant-dtype {allowed[0]})" if allowed else None
    if code == "block_size":
        return f"use a block size {backend.name} supports (--block-size)"
    if code == "kv_layout":
        return "let the backend choose the layout (--kv-layout auto)"
    if code == "package":
        return "install what is missing"
    return None


def _ways_out(kind: str, ways: Sequence[str]) -> str:
    choose = f"Choose one with --backend or {ENV_VARS[kind]}"
    unique = list(dict.fromkeys(ways))
    if not unique:
        return choose + "."
    return choose + ", or " + ", or ".join(unique) + "."


def not_valid_message(
    kind: str,
    backend: Backend,
    rejections: Sequence[Rejection],
    valid: Sequence[str],
    spec: Spec,
    device: DeviceProfile,
    how: str,
) -> str:
    """Why the explicitly requested backend (``how`` says where the request came from) cannot serve the spec: every
    reason, the valid alternatives, and the ways out."""
    lines = [f"The requested {kind} backend {backend.name} ({how}) cannot serve this spec on {device.describe()}:"]
    lines += [f"  - {r.message}" for r in rejections]
    if valid:
        lines.append(f"Valid {kind} backends here that do: {', '.join(valid)}.")
        ways = [w for r in rejections if (w := _way_out(r, backend, spec))]
        if isinstance(spec, All2AllSpec) and only_liftable(rejections):  # selector/lifted.py
            ways.append(
                f"measure it in {spec.quant_dtype} on this machine (hwtune tune --model config.json --ep "
                f"{spec.ep_size} --kinds all2all --backends {backend.name} --quant-dtype {spec.quant_dtype}): a "
                "stored pass of its correctness gate lifts the dtype rule for this exact spec here"
            )
        lines.append(_ways_out(kind, ways))
    else:
        lines.append(f"No {kind} backend is valid for this spec here; see `hwtune select {kind} --explain`.")
    return "\n".join(lines)


def no_valid_message(
    kind: str, rejected: Mapping[str, Sequence[Rejection]], spec: Spec, device: DeviceProfile, engine: str = ""
) -> str:
    """The error when no backend is valid: every backend's reasons, so the requirement that rules them all out can be
    spotted. ``engine`` (" with vLLM 0.33.0") names the engine target."""
    what = "model" if isinstance(spec, AttentionSpec) else "MoE layer"
    lines = [f"No {kind} backend can serve this {what} on {device.describe()}{engine}. Every backend's reasons:"]
    for name, reasons in rejected.items():
        lines.append(f"  {name}:")
        lines += [f"    - {r.message}" for r in reasons]
    lines.append("Relax the requirement named most often above, or plan for another device (--device).")
    return "\n".join(lines)


def _engine_way_out(rejection: Rejection) -> str | None:
    code = rejection.code
    if code == "feature:decode_lse":
        return "run without DCP (--dcp 1)"
    if code == "feature:pcp":
        return "run without PCP (--pcp 1)"
    if code == "block_size":
        return "give no --block-size (the engine then uses the backend's own) or a multiple of its kernel block sizes"
    if code == "kv_cache_dtype":
        return "use a kv-cache dtype it lists (--kv-cache-dtype)"
    if code == "engine" and "hwtune's own" in rejection.message:
        return "select for no engine (--engine none) to rank hwtune's own kernels"
    if code == "package":
        return "install what is missing"
    return None


def engine_not_valid_message(
    engine: str,
    backend: str,
    rejections: Sequence[Rejection],
    valid: Sequence[str],
    device: DeviceProfile,
    how: str,
) -> str:
    """Why a requested backend cannot serve the spec with ``engine`` ("vLLM 0.33.0"): every reason, the engine's valid
    alternatives, and the ways out."""
    lines = [f"The requested attention backend {backend} ({how}) cannot serve this spec with {engine} on "]
    lines[0] += f"{device.describe()}:"
    lines += [f"  - {r.message}" for r in rejections]
    if valid:
        lines.append(f"Valid {engine} attention backends here: {', '.join(valid)}.")
    ways = [w for r in rejections if (w := _engine_way_out(r))]
    lines.append(_ways_out("attention", ways))
    return "\n".join(lines)

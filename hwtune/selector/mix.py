"""The engine's expected workload mix: which (phase, batch, context) shapes it will run, and how much each
matters. Ranking backends by one shape would pick the winner of that shape; an engine runs many.

A mix comes from the engine's limits (``max_num_seqs``, ``max_model_len``) and a profile: ``decode-heavy``
(chat serving: most GPU time in decode), ``prefill-heavy`` (long prompts, short answers), ``balanced``; or
from a JSON/TOML file of explicit weights. Weights are shares of GPU time, so each phase's weight is spread
evenly over its shapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from hwtune.core.errors import InvalidSpecError

PROFILES = {"decode-heavy": (0.85, 0.15), "balanced": (0.6, 0.4), "prefill-heavy": (0.25, 0.75)}
DECODE_BATCHES = (1, 4, 16, 64, 256, 1024)
DECODE_CONTEXTS = (1024, 4096, 16384, 65536, 262144)
PREFILL_CHUNKS = (512, 2048, 8192)


@dataclass(frozen=True)
class MixPoint:
    """One point of the workload mix the selector costs backends over: a shape and its weight, a share of GPU time
    (the built-in profiles' weights sum to 1; a file's are relative)."""

    phase: str  # decode | prefill
    batch: int
    context: int
    weight: float
    query_len: int = 1


def _limited(values: Sequence[int], limit: int) -> list[int]:
    """The grid values below the engine's limit, and the limit itself (the engine will reach it)."""
    return [v for v in values if v < limit] + [limit]


def workload_mix(
    max_num_seqs: int = 256, max_model_len: int = 32768, profile: str = "balanced", query_len_decode: int = 1
) -> list[MixPoint]:
    """Decode over batch x context up to the engine's limits, and prefill chunks up to max_model_len."""
    if profile not in PROFILES:
        raise InvalidSpecError(f"unknown workload profile {profile!r}; known: {', '.join(PROFILES)}, or a file")
    if max_num_seqs <= 0 or max_model_len <= 0:
        raise InvalidSpecError("max_num_seqs and max_model_len must be positive")
    w_decode, w_prefill = PROFILES[profile]
    batches = _limited(DECODE_BATCHES, max_num_seqs)
    contexts = _limited(DECODE_CONTEXTS, max_model_len)
    decode = [(b, c) for b in batches for c in contexts]
    chunks = [c for c in PREFILL_CHUNKS if c <= max_model_len] or [max_model_len]
    prefill = [(ch, ctx) for ch in chunks for ctx in sorted({min(c, max_model_len) for c in (ch, 4 * ch, 16 * ch)})]
    points = [MixPoint("decode", b, c, w_decode / len(decode), query_len_decode) for b, c in decode]
    points += [MixPoint("prefill", 1, ctx, w_prefill / len(prefill), ch) for ch, ctx in prefill]
    return points


def load_mix(path: str | Path, kind: str = "attention") -> list[MixPoint]:
    """A file of weights: JSON list or TOML ``[[point]]`` tables. Attention points have phase (decode, prefill),
    batch, context, weight (and query_len for prefill chunks); all2all points have tokens (per rank) and weight
    (phase, if given, must be dispatch_combine)."""
    p = Path(path)
    points = [_point(item, kind, p, i) for i, item in enumerate(_raw_points(p), 1)]
    if not points or sum(pt.weight for pt in points) <= 0:
        raise InvalidSpecError(f"{p}: no points with positive weight")
    return points


def _raw_points(p: Path) -> list:
    """The file's point tables, parsed (JSON list, or TOML ``[[point]]``)."""
    import tomllib

    try:
        text = p.read_text()
    except FileNotFoundError:
        raise InvalidSpecError(f"no workload-mix file at {p}") from None
    try:
        return json.loads(text) if p.suffix == ".json" else tomllib.loads(text).get("point", [])
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidSpecError(f"{p} cannot be parsed: {exc}") from None


def _point(item: dict, kind: str, p: Path, i: int) -> MixPoint:
    """One point of a weights file, checked for ``kind``: an attention file's phases, an all2all file's tokens."""
    try:
        if kind == "all2all":
            phase = str(item.get("phase", "dispatch_combine"))
            mp = MixPoint(phase, int(item["tokens"]), 1, float(item["weight"]))
        else:
            mp = MixPoint(
                phase=str(item["phase"]),
                batch=int(item["batch"]),
                context=int(item["context"]),
                weight=float(item["weight"]),
                query_len=int(item.get("query_len", 1)),
            )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        needs = "tokens and weight" if kind == "all2all" else "phase, batch, context and weight"
        raise InvalidSpecError(f"{p}: point {i} needs {needs} ({exc})") from None
    phases = ("dispatch_combine",) if kind == "all2all" else ("decode", "prefill")
    if mp.phase not in phases:
        raise InvalidSpecError(f"{p}: point {i} has phase {mp.phase!r}; a {kind} weights file has {', '.join(phases)}")
    if mp.batch <= 0 or mp.context <= 0 or mp.query_len <= 0 or not mp.weight >= 0:
        raise InvalidSpecError(f"{p}: point {i} has a non-positive size or weight")
    return mp


A2A_DECODE_TOKENS = (1, 4, 16, 64, 256)
A2A_PREFILL_TOKENS = (2048, 8192)


def all2all_mix(max_num_seqs: int = 256, profile: str = "balanced") -> list[MixPoint]:
    """Tokens per rank a MoE layer dispatches: decode steps (up to max_num_seqs per rank) and prefill chunks.

    all2all has one phase ("dispatch_combine"); tokens per rank takes the place of the batch axis.
    """
    if profile not in PROFILES:
        raise InvalidSpecError(f"unknown workload profile {profile!r}; known: {', '.join(PROFILES)}, or a file")
    w_decode, w_prefill = PROFILES[profile]
    decode = _limited(A2A_DECODE_TOKENS, max_num_seqs)
    points = [MixPoint("dispatch_combine", t, 1, w_decode / len(decode)) for t in decode]
    points += [MixPoint("dispatch_combine", t, 1, w_prefill / len(A2A_PREFILL_TOKENS)) for t in A2A_PREFILL_TOKENS]
    return points

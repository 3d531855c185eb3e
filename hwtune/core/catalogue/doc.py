"""The catalogue as Markdown (docs/catalogue.md is this output; a test keeps the two equal)."""

from __future__ import annotations

from typing import Iterable

from hwtune.core.catalogue import backends
from hwtune.core.catalogue.base import All2AllRules, AttentionRules, Backend, describe_ccs


def _v(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, frozenset):
        return ", ".join(sorted(str(getattr(v, "value", v)) for v in value)) or "none"
    if isinstance(value, tuple):
        return describe_ccs(value)  # type: ignore[arg-type]
    if hasattr(value, "describe"):
        return value.describe()  # type: ignore[no-any-return]
    if isinstance(value, dict):
        return ", ".join(f"{k} from SM {v[0]}.{v[1]}" for k, v in value.items())
    return str(value)


def _backend(b: Backend) -> list[str]:
    lines = [f"### {b.name}", "", b.summary + ".", ""]
    lines += ["| fact | value | source |", "| --- | --- | --- |"]
    for name in b.rules.__dataclass_fields__:
        value = getattr(b.rules, name)
        if value is not None:
            lines.append(f"| {name} | {_v(value)} | {b.sources.get(name, '')} |")
    pkgs = (
        ", ".join(r.describe() + (f" (or {', '.join(r.alternatives)})" if r.alternatives else "") for r in b.packages)
        or "-"
    )
    lines.append(f"| packages | {pkgs} | {b.sources.get('packages', '')} |")
    lines += ["", "| tactic | phases | narrows | summary |", "| --- | --- | --- | --- |"]
    for t in b.tactics:
        narrows = "; ".join(
            f"{n}: {_v(getattr(t.rules, n))}" for n in t.rules.__dataclass_fields__ if getattr(t.rules, n) is not None
        )
        lines.append(f"| {t.name} | {', '.join(sorted(t.phases))} | {narrows or '-'} | {t.summary} |")
    for note in b.notes:
        lines.append(f"\nNote: {note}")
    for h in b.hazards:
        where = f" (EP {h.ep_sizes.describe()})" if h.ep_sizes is not None else ""
        lines.append(f"\nHazard{where}: {h.message}. Source: {h.source}.")
    return lines + [""]


def markdown(kinds: Iterable[str] = ("attention", "all2all")) -> str:
    """The catalogue of ``kinds`` as Markdown, then (with attention) the engine snapshots; docs/catalogue.md is this
    output, kept equal by a test."""
    from hwtune.core.catalogue.engines.doc import engines_markdown

    out: list[str] = []
    kinds = list(kinds)
    for kind in kinds:
        out += [f"## {kind} backends", ""]
        for b in backends(kind):
            assert isinstance(b.rules, (AttentionRules, All2AllRules))
            out += _backend(b)
    return "\n".join(out) + ("\n" + engines_markdown() if "attention" in kinds else "")

"""The engine snapshots as Markdown, appended to docs/catalogue.md (``hwtune backends --markdown``)."""

from __future__ import annotations

from typing import Any

from hwtune.core.catalogue.engines.conditions import describe_int_rule
from hwtune.core.catalogue.engines.snapshot import ENGINES, Snapshot, snapshot

_FACTS = (
    "mla",
    "compute_capability",
    "dtypes",
    "kv_cache_dtypes",
    "head_sizes",
    "kernel_block_sizes",
    "sinks",
    "sliding_window",
    "dcp",
    "pcp",
    "mtp_with_cp_interleave",
)


def _when(cond: Any) -> str:
    if not cond:
        return "-"
    parts = []
    for key, want in cond.items():
        if key == "any":
            parts.append("(" + " or ".join(_when(c) for c in want) + ")")
        elif key == "not":
            parts.append(f"not ({_when(want)})")
        elif key == "head_size" or key == "block_size":
            parts.append(f"{key} {describe_int_rule(want)}")
        else:
            parts.append(f"{key} {want if not isinstance(want, list) else ', '.join(map(str, want))}")
    return "; ".join(parts)


def _value(key: str, value: Any) -> str:
    if key == "head_sizes":
        return describe_int_rule(value)
    if key == "compute_capability" and value != "any":
        return " or ".join(f"SM {lo} to {hi}" for lo, hi in value)
    if key == "kernel_block_sizes":
        return ", ".join(f"multiples of {s['multiple_of']}" if isinstance(s, dict) else str(s) for s in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(str(v) if not isinstance(v, dict) else f"{v['name']} (when {_when(v['when'])})" for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _row(key: str, clause: dict) -> str:
    versions = ", ".join(clause.get("versions", [])) or "all"
    return f"| {key} | {versions} | {_when(clause.get('when'))} | {_value(key, clause['value'])} | {clause['source']} |"


def _backend(snap: Snapshot, name: str, facts: dict) -> list[str]:
    lines = [
        f"#### {snap.display} {name}",
        "",
        "| fact | versions | when | value | source |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key in (*_FACTS, "sparse", "mm_prefix_only"):
        for clause in facts.get(key, []) if isinstance(facts.get(key), list) else [facts[key]] if key in facts else []:
            lines.append(_row(key, clause))
    for kind in ("checks", "start_checks"):
        for check in facts.get(kind, []):
            label = "check" if kind == "checks" else "fails at start (hwtune rejects up front)"
            when = _when(check.get("when"))
            lines.append(
                f"| {label} `{check['id']}` | {', '.join(check.get('versions', [])) or 'all'} | {when} | "
                f"requires {_when(check['require'])}: {check['reason']} | {check['source']} |"
            )
    return lines + [""]


def _engine(snap: Snapshot) -> list[str]:
    data = snap.data
    lines = [f"### {snap.display}", ""]
    for version in snap.versions:
        meta = data["versions"][version]
        lines.append(f"- {version}: released {meta['released']}, snapshot of {meta['snapshot_taken']}, {meta['wheel']}")
    lines += ["", f"Selector: {data['selector_source']}.", "", f"Scope: {data['scope']}.", ""]
    lines += [f"Assumes: {a}." for a in data["assumptions"]] + [""]
    table = "priorities" if snap.selector == "priority" else "defaults"
    lines += [f"| {table} | versions | when | value | source |", "| --- | --- | --- | --- | --- |"]
    lines += [_row(table, c) for c in data[table]]
    lines += [_row("rewrite", r) for r in data.get("rewrites", [])]
    lines += [_row("engine-wide check", c | {"value": c["reason"]}) for c in data.get("start_checks", [])]
    lines.append("")
    for name, facts in data.get("backends", {}).items():
        if snap.selector == "priority":
            lines += _backend(snap, name, facts)
    if "explicit" in data:
        lines += _explicit(snap)
    return lines


def _explicit(snap: Snapshot) -> list[str]:
    """A deciding engine's (SGLang's) backends as it accepts them when given explicitly: order, scope, and each
    backend's kinds, page-size rule, the hwtune tactics it runs, and checks."""
    data = snap.data
    order = data["explicit"]["order"]
    lines = [
        f"Accepted when given by --attention-backend (in this order after the default): {', '.join(order['value'])} "
        f"({order['source']}).",
        "",
        "| scope | versions | when | requires | source |",
        "| --- | --- | --- | --- | --- |",
    ]
    for check in data["explicit"]["scope"]:
        lines.append(_check_row(f"`{check['id']}`", check))
    lines.append("")
    for name in order["value"]:
        facts = data["backends"][name]
        lines += [
            f"#### {snap.display} {name}",
            "",
            "| fact | versions | when | value | source |",
            "| --- | --- | --- | --- | --- |",
        ]
        for key in ("summary", "serves", "decode_only", "page_size", "hwtune_tactics"):
            for clause in (
                facts.get(key, []) if isinstance(facts.get(key), list) else [facts[key]] if key in facts else []
            ):
                lines.append(_row(key, clause))
        for check in facts.get("accepts", []):
            lines.append(_check_row(f"accepts `{check['id']}`", check))
        lines.append("")
    return lines


def _check_row(label: str, check: dict) -> str:
    versions = ", ".join(check.get("versions", [])) or "all"
    return (
        f"| {label} | {versions} | {_when(check.get('when'))} | requires {_when(check['require'])}: {check['reason']} "
        f"| {check['source']} |"
    )


def engines_markdown() -> str:
    """Every engine snapshot as Markdown: versions, scope, priority or decision lists, and each backend's facts with
    their conditions and sources."""
    out = ["## engine snapshots", "", "What each supported engine version's selector does (docs/engines.md).", ""]
    for engine in ENGINES:
        out += _engine(snapshot(engine))
    return "\n".join(out)

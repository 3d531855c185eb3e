"""A small interpreter of the engine snapshots, written apart from hwtune's selection code on purpose.

It reads the JSON files and does what the engine's selector does, literally: vLLM walks its priority list for the
device and takes the first backend whose ``validate_configuration`` finds nothing (vllm/platforms/cuda.py
get_attn_backend_cls); SGLang takes the first default whose condition holds, then applies its post-process
rewrites, and accepts a backend given by ``--attention-backend`` when it serves the attention kind, no check of its
own (nor of the explicit scope) refuses it at the page size SGLang runs it at, and no rewrite replaces it. It knows
nothing of hwtune's records, its wording, its deliberate differences or its measurements; the differential test
compares hwtune's static choice and valid set with what this returns.

A configuration is a plain dict: cc (major, minor), mla, head_size, dtype, kv_cache_dtype, block_size (None: not
given), num_heads, sinks, sliding_window, soft_cap, dcp, pcp, spec_decode, cp_interleave, qk_nope_head_dim,
qk_rope_head_dim, v_head_dim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ENGINES_DIR = Path(__file__).resolve().parents[2] / "hwtune" / "core" / "catalogue" / "engines"


def load(engine: str) -> dict:
    """The raw snapshot of ``engine``."""
    return json.loads((ENGINES_DIR / f"{engine}.json").read_text())


def _ints(rule: Any, value: int) -> bool:
    if rule == "any":
        return True
    if "values" in rule:
        return value in rule["values"]
    return (
        value % rule.get("multiple_of", 1) == 0 and value >= rule.get("min", value) and value <= rule.get("max", value)
    )


def _cc(text: str) -> tuple[int, int]:
    a, b = text.split(".")
    return int(a), int(b)


def _derived(c: dict) -> dict:
    """The configuration plus the fields conditions ask about that are computed from it."""
    return {
        **c,
        "kv_quantized": c["kv_cache_dtype"] not in ("auto", "float16", "bfloat16"),
        "block_size_given": c["block_size"] is not None,
        "cp": c["dcp"] or c["pcp"],
        "cp_interleave_gt1": c["cp_interleave"] > 1,
        "mm_prefix": False,
        "asymmetric_kv": False,
        "gqa": c["num_heads"] > c["num_kv_heads"],
    }


def cond(
    when: dict | None, c: dict, backend: str | None = None, facts: dict | None = None, page: int | None = None
) -> bool:
    """Whether every key of ``when`` holds for configuration ``c`` (docs/engines.md lists the keys)."""
    d = _derived(c)
    for key, want in (when or {}).items():
        if key == "any":
            ok = any(cond(w, c, backend, facts, page) for w in want)
        elif key == "not":
            ok = not cond(want, c, backend, facts, page)
        elif key == "architecture":
            ok = c.get("architecture") in want
        elif key == "cc_major":
            ok = c["cc"][0] in want
        elif key == "cc":
            ok = "%d.%d" % c["cc"] in want
        elif key == "cc_min":
            ok = c["cc"] >= _cc(want)
        elif key == "cc_max":
            ok = c["cc"] <= _cc(want)
        elif key == "kv_cache_dtype":
            ok = c["kv_cache_dtype"] in want
        elif key == "dtype":
            ok = c["dtype"] in want
        elif key == "gqa_group_min":
            ok = c["num_heads"] // c["num_kv_heads"] >= want
        elif key == "page_size":
            ok = page is not None and _ints(want, page)
        elif key == "head_size":
            ok = _ints(want, c["head_size"])
        elif key == "block_size":
            ok = c["block_size"] is not None and _ints(want, c["block_size"])
        elif key == "num_heads_max":
            ok = c["num_heads"] <= want
        elif key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            ok = c.get(key) is None or c[key] in want
        elif key == "installed":
            ok = True  # every optional package installed (hwtune's --assume-installed)
        elif key == "backend":
            ok = backend in want
        elif key == "backend_fact":
            ok = bool((facts or {}).get(want))
        else:
            ok = bool(d[key]) == bool(want)
        if not ok:
            return False
    return True


def fact(spec: Any, version: str, c: dict) -> Any:
    """The value of a fact: its first clause for ``version`` whose condition holds."""
    for clause in spec if isinstance(spec, list) else [spec]:
        if version in clause.get("versions", [version]) and cond(clause.get("when"), c):
            return clause["value"]
    return None


def vllm_valid(snap: dict, version: str, name: str, c: dict) -> bool:
    """Whether vLLM's ``validate_configuration`` of backend ``name`` finds nothing wrong."""
    facts = snap["backends"].get(name)
    if facts is None or "sparse" in facts or "mm_prefix_only" in facts:
        return False
    get = {k: fact(v, version, c) for k, v in facts.items() if k not in ("checks", "start_checks")}
    kv = c["kv_cache_dtype"]
    ccs = get["compute_capability"]
    block = c["block_size"]
    bases = [s["multiple_of"] if isinstance(s, dict) else s for s in get["kernel_block_sizes"]]
    return (
        get["mla"] == c["mla"]
        and (ccs == "any" or any(_cc(lo) <= c["cc"] <= _cc(hi) for lo, hi in ccs))
        and c["dtype"] in get["dtypes"]
        and (kv in get["kv_cache_dtypes"] or (kv == "fp8_e4m3" and "fp8" in get["kv_cache_dtypes"]))
        and _ints(get["head_sizes"], c["head_size"])
        and (block is None or any(block % b == 0 for b in bases))
        and (get["sinks"] or not c["sinks"])
        and (get["sliding_window"] or not c["sliding_window"])
        and (get["dcp"] or not c["dcp"])
        and (get["pcp"] or not c["pcp"])
        and all(
            not cond(k.get("when"), c) or cond(k["require"], c)
            for k in facts.get("checks", [])
            if version in k.get("versions", [version])
        )
    )


def vllm_choice(snap: dict, version: str, c: dict) -> tuple[str | None, list[str]]:
    """vLLM's choice for ``c`` and every backend its selector finds valid, in its priority order."""
    names = []
    for entry in fact(snap["priorities"], version, c):
        if isinstance(entry, dict):
            if cond(entry.get("when"), c):
                names.append(entry["name"])
        else:
            names.append(entry)
    valid = [n for n in names if vllm_valid(snap, version, n, c)]
    return (valid[0] if valid else None), valid


def sglang_choice(snap: dict, version: str, c: dict) -> str | None:
    """SGLang's default backend for ``c`` after its post-process rewrites; None when it refuses the kv-cache dtype."""
    vocab = fact(snap["kv_cache_dtypes"], version, c)
    if c["kv_cache_dtype"] not in vocab:
        return None
    name = fact(snap["defaults"], version, c)
    for rewrite in snap.get("rewrites", []):
        if version in rewrite.get("versions", [version]) and cond(rewrite["when"], c, backend=name):
            name = rewrite["value"]
    return name


def start_failures(snap: dict, version: str, name: str, c: dict) -> set[str]:
    """The ids of the snapshot's ``start_checks`` that backend ``name`` fails for ``c``: the engine's selector accepts
    it, then it fails at start (hwtune's deliberate differences)."""
    facts = snap["backends"].get(name, {})
    values = {k: fact(v, version, c) for k, v in facts.items() if k not in ("checks", "start_checks")}
    checks = facts.get("start_checks", []) + snap.get("start_checks", [])
    return {
        k["id"]
        for k in checks
        if version in k.get("versions", [version])
        and cond(k.get("when"), c, facts=values)
        and not cond(k["require"], c, facts=values)
    }


def sglang_page_size(snap: dict, version: str, name: str, c: dict) -> int:
    """The page size SGLang runs backend ``name`` at: the one given (else its default), unless its rule replaces it."""
    given = c["block_size"] if c["block_size"] is not None else fact(snap["default_block_size"], version, c)
    rule = fact(snap["backends"][name]["page_size"], version, c)
    return given if rule == "given" else rule


def sglang_accepts(snap: dict, version: str, name: str, c: dict) -> bool:
    """Whether SGLang accepts backend ``name`` as itself when it is given by ``--attention-backend``."""
    facts = snap["backends"][name]
    if ("mla" if c["mla"] else "mha") not in fact(facts["serves"], version, c):
        return False
    if c["kv_cache_dtype"] not in fact(snap["kv_cache_dtypes"], version, c):
        return False
    page = sglang_page_size(snap, version, name, c)
    checks = snap["explicit"]["scope"] + facts["accepts"]
    for k in checks:
        if version in k.get("versions", [version]) and cond(k.get("when"), c, page=page):
            if not cond(k["require"], c, page=page):
                return False
    return not any(
        version in r.get("versions", [version]) and cond(r["when"], c, backend=name) for r in snap.get("rewrites", [])
    )


def sglang_valid(snap: dict, version: str, c: dict) -> tuple[str | None, list[str]]:
    """SGLang's default for ``c`` and, after it, every backend it accepts when given explicitly, in the snapshot's
    stated order (the default is SGLang's choice, and first, whether or not it would accept it by name)."""
    default = sglang_choice(snap, version, c)
    if default is None:
        return None, []
    others = fact(snap["explicit"]["order"], version, c)
    return default, [default] + [n for n in others if n != default and sglang_accepts(snap, version, n, c)]

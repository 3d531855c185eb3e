"""The engine snapshots are complete, sourced and well-formed; where the engines' wheels are unpacked beside the
tests (HWTUNE_ENGINE_SOURCES), every cited file and function exists there and the literal lists match.

HWTUNE_ENGINE_SOURCES names unpacked wheels, one per version: ``vllm-0.33.0=/tmp/vllmw,vllm-0.32.0=/tmp/vllm032,
sglang-0.5.23=/tmp/sglang0523`` (each folder holds the package, e.g. /tmp/vllmw/vllm/platforms/cuda.py);
docs/engines.md says how to unpack them. Without it those checks are skipped, the others run.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from pathlib import Path

import pytest

from hwtune.core.catalogue.engines import (
    ENGINES,
    EngineConfig,
    known_kv_cache_dtypes,
    order,
    resolve_target,
    selection_reasons,
    snapshot,
    start_reasons,
)
from hwtune.core.errors import InvalidSpecError
from hwtune.core.types import AttentionSpec
from tests.engines import oracle

SOURCE = re.compile(r"^(vllm|sglang)/[\w/]+\.py\b")
VLLM_FACTS = ("mla", "compute_capability", "dtypes", "kv_cache_dtypes", "head_sizes", "kernel_block_sizes")
VLLM_FEATURES = ("sinks", "sliding_window", "dcp", "pcp")


def _clauses(node):
    """Every clause dict (anything with a "source") under ``node``."""
    if isinstance(node, dict):
        if "source" in node:
            yield node
        for value in node.values():
            yield from _clauses(value)
    elif isinstance(node, list):
        for item in node:
            yield from _clauses(item)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_fact_names_the_engine_file_it_comes_from(engine: str) -> None:
    data = oracle.load(engine)
    clauses = list(_clauses(data))
    assert len(clauses) > 10
    for clause in clauses:
        assert SOURCE.match(clause["source"]), f"source must start with the engine's file: {clause['source']!r}"
        for version in clause.get("versions", []):
            assert version in data["versions"], f"clause for unknown version {version}"
    assert data["newest"] in data["versions"]
    for version, meta in data["versions"].items():
        assert {"released", "snapshot_taken", "wheel"} <= set(meta), version


def test_vllm_backends_state_every_fact_the_selector_reads() -> None:
    data = oracle.load("vllm")
    listed = {e if isinstance(e, str) else e["name"] for c in data["priorities"] for e in c["value"]}
    assert listed <= set(data["backends"]), (
        f"priority lists name backends without facts: {listed - set(data['backends'])}"
    )
    for name, facts in data["backends"].items():
        if "sparse" in facts or "mm_prefix_only" in facts:
            continue
        missing = [k for k in (*VLLM_FACTS, *VLLM_FEATURES) if k not in facts]
        assert not missing, f"{name} lacks {missing}"
        for check in facts.get("checks", []) + facts.get("start_checks", []):
            assert {"id", "require", "reason", "source"} <= set(check), (name, check)


def test_conditions_use_known_keys_only() -> None:
    """Evaluating every fact, check and priority on a spread of configurations raises nothing (an unknown condition
    key, a typo in a snapshot, raises ValueError)."""
    for cc in ((8, 0), (9, 0), (10, 0), (12, 0)):
        for mla in (False, True):
            cfg = EngineConfig(
                cc, 576 if mla else 128, "bfloat16", "fp8_e4m3", 64, 16, 1, mla=mla, dcp=True, sinks=True
            )
            for engine in ENGINES:
                target = resolve_target(engine)
                snap = snapshot(engine)
                if snap.selector == "priority":
                    for name in snap.backend_names():
                        selection_reasons(snap, target.version, name, cfg)
                        start_reasons(snap, target.version, name, cfg)
                    assert order(snap, target.version, cfg)


def test_versions_differ_where_the_engine_changed() -> None:
    """vLLM 0.33.0 added FLASH_ATTN_MLA_SPARSE_FA4 to its SM 10.x MLA list (bf16 cache, at most 16 heads) and the
    octave_* kv-cache dtypes; 0.32.0 has neither."""
    snap = snapshot("vllm")
    cfg = EngineConfig((10, 0), 576, "bfloat16", "auto", None, 16, 1, mla=True)
    assert "FLASH_ATTN_MLA_SPARSE_FA4" in order(snap, "0.33.0", cfg)
    assert "FLASH_ATTN_MLA_SPARSE_FA4" not in order(snap, "0.32.0", cfg)
    assert "octave_k3v4" in snap.kv_cache_dtypes("0.33.0") and "octave_k3v4" not in snap.kv_cache_dtypes("0.32.0")
    assert {
        "turboquant_k8v4",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_3bit_nc",
    } <= known_kv_cache_dtypes()


@pytest.mark.parametrize("version", ["0.33.0", "0.32.0"])
def test_flash_attn_with_sinks_under_dcp_fails_closed(version: str) -> None:
    """vLLM takes FLASH_ATTN for gpt-oss (sinks) with DCP on an H100, and its DCP path then drops the sinks silently:
    hwtune rejects it up front, as a start check; without DCP, or without sinks, FLASH_ATTN stays."""
    snap = snapshot("vllm")
    gpt_oss = dict(num_heads=8, num_kv_heads=1, sinks=True, sliding_window=True)
    with_dcp = EngineConfig((9, 0), 64, "bfloat16", "auto", None, **gpt_oss, dcp=True)
    assert not selection_reasons(snap, version, "FLASH_ATTN", with_dcp)  # the engine's own selector accepts it
    [reason] = start_reasons(snap, version, "FLASH_ATTN", with_dcp)
    assert reason.check_id == "flash-attn-dcp-drops-sinks" and "drops the sinks" in reason.message
    assert not start_reasons(snap, version, "FLASH_ATTN", dataclasses.replace(with_dcp, dcp=False))
    assert not start_reasons(snap, version, "FLASH_ATTN", dataclasses.replace(with_dcp, sinks=False))


def test_targets_resolve_and_unknown_ones_are_bad_input() -> None:
    assert resolve_target("vllm").version == "0.33.0" and resolve_target("VLLM", "0.32.0").version == "0.32.0"
    assert resolve_target("sglang").version == "0.5.23" and resolve_target("none") is None
    with pytest.raises(InvalidSpecError, match="no snapshot of vLLM 0.31.0; known: 0.33.0, 0.32.0"):
        resolve_target("vllm", "0.31.0")
    with pytest.raises(InvalidSpecError, match="unknown engine 'trt'; known: vllm, sglang, none"):
        resolve_target("trt")
    assert AttentionSpec(8, 8, 128, kv_cache_dtype="turboquant_k3v4_nc").kv_cache_dtype == "turboquant_k3v4_nc"


# --- against the engines' own sources, where they are unpacked --------------------------------------------------


def _sources() -> dict[str, Path]:
    spec = os.environ.get("HWTUNE_ENGINE_SOURCES", "")
    return {k: Path(v) for k, _, v in (item.partition("=") for item in spec.split(",") if item)}


def _roots(engine: str) -> list[tuple[str, Path]]:
    roots = [(key.split("-", 1)[1], path) for key, path in _sources().items() if key.startswith(engine + "-")]
    if not roots:
        pytest.skip(f"HWTUNE_ENGINE_SOURCES names no unpacked {engine} wheel")
    return roots


def _identifiers(source: str) -> list[str]:
    """The identifiers a source cites after its file ("FlashInferBackend.supports_sink" -> both names)."""
    words = source.replace(";", " ").split()
    if len(words) < 2 or not re.match(r"^[A-Za-z_][\w.]*", words[1]):
        return []
    return [w for w in re.match(r"^[A-Za-z_][\w.]*", words[1]).group(0).split(".") if w]


@pytest.mark.parametrize("engine", ENGINES)
def test_cited_files_and_functions_exist_in_the_wheel(engine: str) -> None:
    data = oracle.load(engine)
    for version, root in _roots(engine):
        for clause in _clauses(data):
            if version not in clause.get("versions", [version]):
                continue
            for cited in re.findall(r"\b(?:vllm|sglang)/[\w/]+\.py(?: [A-Za-z_][\w.]*)?", clause["source"]):
                path = root / cited.split()[0]
                assert path.is_file(), f"{engine} {version}: {cited} is not in the wheel"
                text = path.read_text()
                for ident in _identifiers(cited):
                    assert ident in text, f"{engine} {version}: {ident} is not in {cited.split()[0]}"


def _class_list(tree: ast.Module, cls: str, attr: str) -> list | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                target = getattr(item, "target", None) or (getattr(item, "targets", None) or [None])[0]
                if isinstance(target, ast.Name) and target.id == attr and isinstance(item.value, ast.List):
                    return [
                        ast.literal_eval(e) if isinstance(e, ast.Constant) else ast.unparse(e) for e in item.value.elts
                    ]
    return None


def test_literal_lists_match_the_wheel() -> None:
    """supported_dtypes and supported_kv_cache_dtypes, where a vLLM backend states them as one unconditional clause,
    equal the class attribute of the class its source names."""
    data = oracle.load("vllm")
    checked = 0
    for version, root in _roots("vllm"):
        for name, facts in data["backends"].items():
            for key in ("dtypes", "kv_cache_dtypes"):
                clause = facts.get(key)
                if not isinstance(clause, dict) or "versions" in clause:
                    continue
                path, cls = clause["source"].split()[0], clause["source"].split()[1].split(".")[0]
                attr = "supported_dtypes" if key == "dtypes" else "supported_kv_cache_dtypes"
                found = _class_list(ast.parse((root / path).read_text()), cls, attr)
                if found is None:
                    continue  # stated by a method (supports_kv_cache_dtype), not a literal list
                found = [f.replace("torch.", "") for f in found]
                assert set(found) == set(clause["value"]), f"{version} {name}.{key}: wheel {found}"
                checked += 1
    assert checked >= 10


def _not_in_lists(tree: ast.Module, function: str) -> list[list]:
    """The literal lists of ``x not in [...]`` tests in ``function``, in source order."""
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    found = []
    for cmp in sorted((n for n in ast.walk(node) if isinstance(n, ast.Compare)), key=lambda n: n.lineno):
        for op, right in zip(cmp.ops, cmp.comparators):
            if isinstance(op, ast.NotIn) and isinstance(right, ast.List):
                found.append([ast.literal_eval(e) for e in right.elts])
    return found


def test_sglang_explicit_lists_match_the_wheel() -> None:
    """The literal lists SGLang's resolution passes test an explicitly given backend against are the snapshot's:
    kv-cache dtypes of trtllm_mla and cutedsl_mla, the page sizes each keeps (else 64), fa4's page 128 and flashmla's
    64, and the explicit order's names are --attention-backend choices, in their order after the decision list's."""
    data = oracle.load("sglang")
    backends = data["backends"]

    def require(name: str, check_id: str):
        return next(c for c in backends[name]["accepts"] if c["id"] == check_id)["require"]

    def kept(name: str) -> list:
        return next(c for c in backends[name]["page_size"] if c.get("value") == "given")["when"]["block_size"]["values"]

    for version, root in _roots("sglang"):
        overrides = (root / "sglang/srt/arg_groups/overrides.py").read_text()
        tree = ast.parse(overrides)
        assert _not_in_lists(tree, "_mla_kv_cache_dtype_checks") == [
            require("trtllm_mla", "trtllm-mla-kv-cache")["kv_cache_dtype"]
        ], version
        assert _not_in_lists(tree, "_cutedsl_prefill_backend_fill") == [
            require("cutedsl_mla", "cutedsl-mla-kv-cache")["kv_cache_dtype"]
        ], version
        assert _not_in_lists(tree, "_mla_backend_page_constraints") == [
            kept("trtllm_mla"),
            kept("cutedsl_mla"),
            kept("trtllm_mha"),
        ], version
        for name in ("trtllm_mla", "cutedsl_mla", "trtllm_mha"):
            assert backends[name]["page_size"][-1]["value"] == 64  # 'changing page_size ... to 64'
        page_constraints = ast.get_source_segment(
            overrides,
            next(
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef) and n.name == "_mla_backend_page_constraints"
            ),
        )
        assert (
            "FlashMLA only supports a page_size of 64" in page_constraints
            and backends["flashmla"]["page_size"]["value"] == 64
        )
        fa4 = ast.get_source_segment(
            overrides,
            next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_fa4_page_constraint"),
        )
        assert '{"page_size": 128}' in fa4 and backends["fa4"]["page_size"][0]["value"] == 128
        choices = ast.parse((root / "sglang/srt/arg_groups/choices.py").read_text())
        listed = next(
            [ast.literal_eval(e) for e in n.value.elts]
            for n in ast.walk(choices)
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "ATTENTION_BACKEND_CHOICES" for t in n.targets)
        )
        assert listed == data["attention_backends"]["value"], version

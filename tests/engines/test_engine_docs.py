"""The engine facts quoted in the docs are what the snapshots say."""

from __future__ import annotations

from pathlib import Path

from hwtune.core.catalogue.engines import EngineConfig, order, snapshot

ROOT = Path(__file__).resolve().parents[2]
ROWS = {"SM 10.x": [(10, 0), (10, 3)], "SM 12.x": [(12, 0), (12, 1)], "SM 8.x, 9.x, 11.x": [(8, 0), (9, 0), (11, 0)]}


def _dense(version: str, cc: tuple[int, int], mla: bool) -> str:
    snap = snapshot("vllm")
    cfg = EngineConfig(cc, 576 if mla else 128, "bfloat16", "auto", None, 128, 1 if mla else 8, mla=mla)
    keep = [n for n in order(snap, version, cfg) if not {"sparse", "mm_prefix_only"} & set(snap.backend(n) or {})]
    return ", ".join(keep)


def test_selection_doc_table_is_vllms_order() -> None:
    text = (ROOT / "docs" / "selection.md").read_text()
    rows = {
        line.split("|")[1].strip()[len("vLLM 0.33.0 ") :]: [c.strip() for c in line.split("|")[2:4]]
        for line in text.splitlines()
        if line.startswith("| vLLM 0.33.0 SM")
    }
    assert set(rows) == set(ROWS)
    for label, ccs in ROWS.items():
        for cc in ccs:
            assert rows[label] == [_dense("0.33.0", cc, False), _dense("0.33.0", cc, True)], (label, cc)


def test_engines_doc_lists_every_deliberate_difference() -> None:
    text = (ROOT / "docs" / "engines.md").read_text()
    data = snapshot("vllm").data
    ids = {c["id"] for c in data.get("start_checks", [])}
    ids |= {c["id"] for b in data["backends"].values() for c in b.get("start_checks", [])}
    missing = [i for i in sorted(ids) if f"`{i}`" not in text]
    assert not missing, f"docs/engines.md does not list {missing}"

"""The docs that are generated from code stay equal to what the code says."""

from pathlib import Path

from hwtune.core.catalogue.doc import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_catalogue_doc_matches_the_catalogue() -> None:
    text = (ROOT / "docs" / "catalogue.md").read_text()
    generated = text.split("\n---\n\n", 1)[1]
    assert generated == markdown(), "regenerate: hwtune backends --markdown (see docs/catalogue.md)"


def test_readme_commands_are_the_ci_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for cmd in ('python -m pip install torch==2.13.0 -e ".[dev]"', "python -m pytest"):
        assert cmd in readme and cmd in ci


def test_static_priority_table_matches_the_records() -> None:
    """docs/selection.md's static-priority table is what the backend records' places give."""
    from hwtune.core.catalogue.priorities import backend_order

    text = (ROOT / "docs" / "selection.md").read_text()
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:5]]
        for line in text.splitlines()
        if line.startswith("| SM") or line.startswith("| CPU")
    }
    families = {"SM 10.x": "blackwell", "SM 8.x / 9.x, SM 12.x": "ampere_hopper", "CPU": "cpu"}
    assert set(rows) == set(families)
    for label, family in families.items():
        for cell, (kind, mla) in zip(rows[label], [("attention", False), ("attention", True), ("all2all", False)]):
            want = ", ".join(backend_order(kind, mla, family)) or "-"
            assert cell == want, f"docs/selection.md {label} {kind} mla={mla}: {cell!r} != {want!r}"
    for other in ("blackwell_consumer", "other"):  # the doc's second row covers these families too
        assert backend_order("attention", False, other) == backend_order("attention", False, "ampere_hopper")

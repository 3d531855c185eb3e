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

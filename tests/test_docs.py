"""The docs that are generated from code stay equal to what the code says."""

from pathlib import Path

from hwtune.core.catalogue.doc import markdown

ROOT = Path(__file__).resolve().parents[1]


def test_catalogue_doc_matches_the_catalogue() -> None:
    text = (ROOT / "docs" / "catalogue.md").read_text()
    generated = text.split("\n---\n\n", 1)[1]
    assert generated == markdown(), "regenerate: hwtune backends --markdown (see docs/catalogue.md)"


def _setup_commands() -> list[str]:
    """The command lines of the README's set-up section's first code block."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up and test (fresh machine)", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_setup_is_two_commands_that_ci_runs_verbatim() -> None:
    """Exactly two commands, each a line of .ci/run; neither needs a `python` alias or a writable system
    Python (PEP 668): they make and use .venv, which git ignores."""
    commands = _setup_commands()
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert len(commands) == 2, commands
    for cmd in commands:
        assert cmd in ci_lines, f"{cmd!r} is not a line of .ci/run"
        assert not cmd.startswith("python ") and " python -m" not in cmd, f"{cmd!r} needs a `python` alias"
    assert commands[0].startswith("python3 -m venv .venv && .venv/bin/python -m pip install")
    assert commands[1] == ".venv/bin/python -m pytest"
    assert "/.venv/" in (ROOT / ".gitignore").read_text().splitlines()


def test_cpu_install_leaves_gpu_packages_to_the_gpu_extra() -> None:
    """The default dependencies download nothing GPU-only; the `gpu` extra carries those packages, and the
    Python floor is what the code needs (tomllib: 3.11)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split("[")[0].strip().lower() for dep in project["dependencies"]}
    unwanted = {"triton", "flashinfer-python", "nvidia-cutlass-dsl", "numpy"}  # GPU-only, or never imported
    assert not names & unwanted, names & unwanted
    gpu = " ".join(project["optional-dependencies"]["gpu"])
    assert "flashinfer-python" in gpu and "triton" in gpu
    assert project["requires-python"] == ">=3.11"
    assert "[gpu]" in (ROOT / "README.md").read_text()
    importing_numpy = [p.name for p in (ROOT / "hwtune").rglob("*.py") if "import numpy" in p.read_text()]
    assert not importing_numpy, f"numpy is not a dependency, but {importing_numpy} import it"


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

"""The package's structure, as the docs describe it (docs/architecture.md): layers import only downward,
core stays light, and functions fit on a screen (or say why not)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "hwtune"
MAX_BODY_LINES = 60

#: Functions allowed past MAX_BODY_LINES, each with its reason.
LONG_ON_PURPOSE = {
    "db/migrations/versions/0001_initial.py:upgrade": "a schema revision is written once, as one unit, and "
    "never edited afterwards",
    "kernels/triton_attention.py:paged_attention": "one launch path: argument checks, config, grid and the "
    "kernel call read top to bottom against the kernel's signature",
    "kernels/turboquant.py:paged_attention": "one launch path, as TRITON_ATTN's: argument checks, config, grid "
    "and the kernel call read top to bottom against the kernel's signature",
    "kernels/triton_attention.py:_paged_attn_kernel": "a Triton kernel is one program: its reusable steps are "
    "already @triton.jit helpers; the rest shares tiles, masks and constexpr branches in registers",
    "kernels/turboquant_kernels.py:tq_attn_kernel": "a Triton kernel is one program: its reusable steps are "
    "already @triton.jit helpers; the rest shares tiles, masks and constexpr branches in registers",
    "probes/all2all/timing.py:time_candidate": "one collective protocol: every rank must run these steps in "
    "this order (barriers, graph capture fallback, agreed iteration count), and the order is the contract",
    "probes/all2all/launcher.py:_watch": "the watchdog's single polling loop; its cases are listed in the "
    "module docstring in the order the loop checks them",
    "probes/all2all/correctness.py:verify_dispatch": "the dispatch check's steps share the received rows and "
    "the routing: split, each would take and return the same six tensors",
}

#: package -> the hwtune packages it may import (core imports nothing else of hwtune).
ALLOWED = {
    "core": {"core", "_version"},
    "selector": {"core", "selector", "db", "_version"},
    "db": {"core", "db", "_version"},
    "kernels": {"kernels"},
    "probes": {"core", "probes", "kernels", "_version"},
    "tuner": {"core", "probes", "db", "selector", "tuner", "_version"},
    "serve": {"core", "selector", "db", "serve", "_version"},
    "cli": {"core", "probes", "db", "selector", "tuner", "serve", "cli", "_version", ""},
}


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = fn.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return (fn.end_lineno or fn.lineno) - body[0].lineno + 1


def test_functions_fit_on_a_screen() -> None:
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _body_lines(node) > MAX_BODY_LINES:
                long[f"{path.relative_to(PKG)}:{node.name}"] = _body_lines(node)
    unexplained = {k: v for k, v in long.items() if k not in LONG_ON_PURPOSE}
    assert not unexplained, f"split these (or add a reason to LONG_ON_PURPOSE): {unexplained}"
    assert not set(LONG_ON_PURPOSE) - set(long), "LONG_ON_PURPOSE lists functions that are short now"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_downward(package: str) -> None:
    bad = []
    for path in sorted((PKG / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hwtune"):
                parts = node.module.split(".")
                target = parts[1] if len(parts) > 1 else ""
                if target not in ALLOWED[package]:
                    bad.append(f"{path.relative_to(PKG)}: from {node.module}")
    assert not bad, f"{package} may import only {sorted(ALLOWED[package])}: {bad}"

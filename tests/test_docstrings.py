"""Every public function, class and method in hwtune says why it exists (a docstring), with the few listed
exceptions: dunders, serialisation hooks, SQLAlchemy TypeDecorator hooks, and overrides whose contract is
documented once on the base class."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "hwtune"

#: Generated schema revisions: written once, described by their revision message.
EXCLUDED_DIRS = ("db/migrations/",)

#: Method names exempt everywhere: serialisation hooks whose names say it all, and SQLAlchemy TypeDecorator
#: hooks whose contract is SQLAlchemy's.
EXEMPT_METHODS = frozenset(
    {
        "to_dict",
        "from_dict",
        "to_json",
        "from_json",
        "key",
        "load_dialect_impl",
        "process_bind_param",
        "process_result_value",
        "result_processor",
    }
)

#: (path prefix relative to hwtune/, method name): overrides whose contract is documented on the base class.
#: The base classes themselves (``base.py`` in these folders) must still document the methods.
EXEMPT_OVERRIDES = frozenset(
    {
        ("probes/attention/candidates/", "prepare"),
        ("probes/attention/candidates/", "run"),
        ("probes/attention/candidates/", "lse_natural"),
        ("probes/attention/candidates/", "reference_problem"),
        ("probes/attention/candidates/", "runner"),
        ("probes/attention/candidates/", "unavailable"),
        ("probes/all2all/candidates/", "setup"),
        ("probes/all2all/candidates/", "dispatch"),
        ("probes/all2all/candidates/", "combine"),
        # TorchGroupComm mimics mpi4py's communicator for FlashInfer; its class docstring covers them all.
        ("probes/all2all/candidates/flashinfer_common.py", "Get_rank"),
        ("probes/all2all/candidates/flashinfer_common.py", "Get_size"),
        ("probes/all2all/candidates/flashinfer_common.py", "allgather"),
        ("probes/all2all/candidates/flashinfer_common.py", "bcast"),
        ("probes/all2all/candidates/flashinfer_common.py", "barrier"),
        ("probes/all2all/candidates/flashinfer_common.py", "Split"),
    }
)

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _exempt_method(rel: str, name: str) -> bool:
    if name in EXEMPT_METHODS:
        return True
    if rel.endswith("/base.py"):
        return False  # where the contract is documented
    return any(rel.startswith(prefix) and name == method for prefix, method in EXEMPT_OVERRIDES)


def _undocumented(rel: str, body: list[ast.stmt], prefix: str = "", in_class: bool = False) -> list[str]:
    missing = []
    for node in body:
        if not isinstance(node, _DEFS) or node.name.startswith("_"):
            continue  # private names and dunders
        qualname = prefix + node.name
        exempt = in_class and not isinstance(node, ast.ClassDef) and _exempt_method(rel, node.name)
        if not exempt and ast.get_docstring(node) is None:
            missing.append(f"{rel}:{node.lineno} {qualname}")
        if isinstance(node, ast.ClassDef):
            missing += _undocumented(rel, node.body, qualname + ".", in_class=True)
    return missing


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if "__pycache__" not in path.parts and not rel.startswith(EXCLUDED_DIRS):
            found.append((rel, path))
    return found


def test_public_definitions_have_docstrings() -> None:
    missing = []
    for rel, path in _modules():
        missing += _undocumented(rel, ast.parse(path.read_text()).body)
    assert not missing, "add a docstring saying why (purpose, contract) to:\n  " + "\n  ".join(missing)

"""A package requirement's alternatives are requirements of their own: the primary's version range says nothing
about another project's versions (vllm 0.25.1 bundles a flash-attn; it is not flash-attn 0.25)."""

from __future__ import annotations

import pytest

from hwtune.core import packages
from hwtune.core.packages import PackageRequirement, check_requirement

FA = PackageRequirement("flash-attn", ">=2.5", "varlen with block_table", alternatives=("vllm",))
FI = PackageRequirement("flashinfer-python", ">=0.2.0", alternatives=("flashinfer>=0.2.0",))


@pytest.mark.parametrize(
    ("installed", "req", "expected"),
    [
        ({"vllm": "0.25.1"}, FA, None),
        ({"flash-attn": "2.1.0"}, FA, "flash-attn 2.1.0 is installed but flash-attn>=2.5 is needed (varlen"),
        ({"flash-attn": "2.1.0", "vllm": "0.25.1"}, FA, None),
        ({}, FA, "flash-attn is not installed (pip install 'flash-attn>=2.5')"),
        ({"flashinfer": "0.1.6"}, FI, "flashinfer 0.1.6 is installed but flashinfer>=0.2.0 is needed"),
        ({"flashinfer": "0.6.18"}, FI, None),
    ],
)
def test_alternatives_carry_their_own_versions(monkeypatch, installed: dict, req, expected) -> None:
    monkeypatch.setattr(packages, "installed_version", lambda dist: installed.get(dist))
    got = check_requirement(req)
    assert got == expected if expected is None else got is not None and got.startswith(expected)

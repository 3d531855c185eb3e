"""Which Python packages are installed, read from their metadata without importing them.

Engines call the selector at start; importing torch or flashinfer there would cost seconds and may
initialise CUDA. ``importlib.metadata`` reads only the installed distribution's metadata files.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import re
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class PackageRequirement:
    """A distribution a backend needs, with the version range it was declared against."""

    distribution: str
    specifier: str = ""
    why: str = ""
    #: Alternative distributions that provide the same module (e.g. vllm's bundled flash-attn).
    alternatives: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.distribution}{self.specifier}"


@functools.lru_cache(maxsize=256)
def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None. Cached: package sets do not change in-process."""
    try:
        return md.version(distribution)
    except md.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def torch_cuda_version() -> str | None:
    """CUDA version torch was built for, read from ``torch/version.py`` without importing torch.

    Returns None for a CPU-only build (or when torch is not installed).
    """
    try:
        dist = md.distribution("torch")
    except md.PackageNotFoundError:
        return None
    try:
        text = dist.locate_file("torch/version.py").read_text()  # type: ignore[union-attr]
    except OSError:
        version = dist.version
        return None if "+cpu" in version else "unknown"
    match = re.search(r"^cuda\s*(?::[^=]*)?=\s*'([^']+)'", text, re.MULTILINE)
    return match.group(1) if match else None


def check_requirement(req: PackageRequirement) -> str | None:
    """None when satisfied, else a sentence saying what is missing and how to get it."""
    for dist in (req.distribution, *req.alternatives):
        version = installed_version(dist)
        if version is None:
            continue
        if not req.specifier:
            return None
        try:
            if Version(version) in SpecifierSet(req.specifier):
                return None
        except (InvalidVersion, InvalidSpecifier):
            return f"{dist} {version} has a version hwtune cannot parse (needs {req.specifier})"
        return (
            f"{dist} {version} is installed but {req.describe()} is needed"
            + (f" ({req.why})" if req.why else "")
        )
    return f"{req.distribution} is not installed (pip install '{req.describe()}')"

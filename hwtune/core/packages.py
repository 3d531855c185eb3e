"""Which Python packages are installed, read from their metadata without importing them.

Engines call the selector at start; importing torch or flashinfer there would cost seconds and may
initialise CUDA. ``importlib.metadata`` reads only the installed distribution's metadata files.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class PackageRequirement:
    """A distribution a backend needs, with the version range it was declared against."""

    distribution: str
    specifier: str = ""
    why: str = ""
    #: Alternative distributions that provide the same module, each a requirement of its own ("vllm" for vllm's
    #: bundled flash-attn, any version; "flashinfer>=0.2.0" for the same project under its older name): the
    #: ``specifier`` above is the primary distribution's version range and says nothing about another project's.
    alternatives: tuple[str, ...] = ()

    def describe(self) -> str:
        """The requirement as pip writes it (``flashinfer-python>=0.6``), for rejection messages."""
        return f"{self.distribution}{self.specifier}"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@functools.lru_cache(maxsize=1)
def _dist_info_versions() -> dict[str, str]:
    """{normalised name: version} from the names of *.dist-info folders on sys.path, in path order.

    One directory listing per path entry instead of a metadata search per question: an engine's first
    selection asks about a dozen distributions, and each ``importlib.metadata.version`` call walks sys.path.
    """
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            if n.endswith(".dist-info"):
                stem = n[: -len(".dist-info")]
                name, sep, version = stem.partition("-")
                if sep:
                    found.setdefault(_normalise(name), version)
    return found


@functools.lru_cache(maxsize=256)
def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None. Cached: package sets do not change in-process."""
    version = _dist_info_versions().get(_normalise(distribution))
    if version is not None:
        return version
    import importlib.metadata as md  # egg-info and other layouts the folder scan does not read

    try:
        return md.version(distribution)
    except md.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def torch_cuda_version() -> str | None:
    """CUDA version torch was built for, read from ``torch/version.py`` without importing torch.

    Returns None for a CPU-only build (or when torch is not installed).
    """
    if installed_version("torch") is None:
        return None
    for entry in sys.path:
        path = os.path.join(entry or ".", "torch", "version.py")
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError:
            continue
        match = re.search(r"^cuda\s*(?::[^=]*)?=\s*'([^']+)'", text, re.MULTILINE)
        return match.group(1) if match else None
    version = installed_version("torch") or ""
    return None if "+cpu" in version else "unknown"


def check_requirement(req: PackageRequirement) -> str | None:
    """None when satisfied, else a sentence saying what is missing and how to get it."""
    from packaging.requirements import Requirement

    options = [(req.distribution, req.specifier)]
    options += [(r.name, str(r.specifier)) for r in map(Requirement, req.alternatives)]
    first_mismatch = None
    for dist, specifier in options:
        version = installed_version(dist)
        if version is None:
            continue
        mismatch = _version_mismatch(dist, version, specifier)
        if mismatch is None:
            return None
        first_mismatch = first_mismatch or mismatch
    if first_mismatch:
        return first_mismatch + (f" ({req.why})" if req.why else "")
    return f"{req.distribution} is not installed (pip install '{req.describe()}')"


def _version_mismatch(dist: str, version: str, specifier: str) -> str | None:
    """None when ``version`` of ``dist`` is in ``specifier`` (or none is given), else why not."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    if not specifier:
        return None
    try:
        if Version(version) in SpecifierSet(specifier):
            return None
    except (InvalidVersion, InvalidSpecifier):
        return f"{dist} {version} has a version hwtune cannot parse (needs {specifier})"
    return f"{dist} {version} is installed but {dist}{specifier} is needed"

"""DeviceProfile: what the selector needs to know of a GPU (or CPU), and simulated profiles.

The type lives here (light, no torch) so that selection can run for a device the user does not have:
``sm90``, ``h100``, ``b200``, ... Real profiles are read through NVML in ``hwtune.core.detect``.
Host-specific identifiers (UUID, hostname) are kept out of ``fingerprint()`` so identical nodes share
results.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from hwtune.core.errors import InvalidSpecError

Interconnect = Literal["nvlink", "pcie", "none"]
GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class DeviceProfile:
    """What selection needs to know of a GPU (or CPU), read from NVML or simulated; torch-free so selection can run
    for a device the user does not have."""

    name: str
    vendor: Literal["nvidia", "cpu"] = "nvidia"
    compute_capability: tuple[int, int] | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    gpu_count: int = 1
    interconnect: Interconnect = "none"
    driver: str | None = None
    simulated: bool = False
    uuid: str | None = None

    @property
    def is_cuda(self) -> bool:
        """An NVIDIA GPU with a known compute capability; everything else is treated as CPU."""
        return self.vendor == "nvidia" and self.compute_capability is not None

    @property
    def family(self) -> str:
        """Architecture family used for static priorities: the static order differs by family."""
        if not self.is_cuda:
            return "cpu"
        assert self.compute_capability is not None
        major = self.compute_capability[0]
        if major == 10 or major == 11:
            return "blackwell"  # SM 10.x datacenter Blackwell (B200, GB200, B300); 11.x Thor
        if major == 12:
            return "blackwell_consumer"  # SM 12.x (RTX 50xx, RTX PRO 6000)
        if major in (8, 9):
            return "ampere_hopper"
        return "other"

    def describe(self) -> str:
        """Name and SM version in words ("NVIDIA H100 (SM 9.0, simulated)"), for messages."""
        if not self.is_cuda:
            return f"{self.name} (CPU)"
        assert self.compute_capability is not None
        major, minor = self.compute_capability
        sim = ", simulated" if self.simulated else ""
        return f"{self.name} (SM {major}.{minor}{sim})"

    def fingerprint(self) -> dict[str, Any]:
        """Identity that decides whether a measurement applies; excludes per-host identifiers.

        Both the selector and the tuner build profiles with ``hwtune.core.detect.detect()`` (NVML plus the
        known-device table for SM count), so the same node yields the same fingerprint in both. The GPU
        count is left out: attention measured on one GPU of an 8-GPU node holds on a 4-GPU node.
        """
        cc = list(self.compute_capability) if self.compute_capability else None
        return {
            "name": self.name,
            "vendor": self.vendor,
            "compute_capability": cc,
            "sm_count": self.sm_count,
            "memory_bytes": self.memory_bytes,
            "interconnect": self.interconnect,
            "driver": self.driver,
        }

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if self.compute_capability is not None:
            d["compute_capability"] = list(self.compute_capability)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DeviceProfile":
        d = dict(data)
        if d.get("compute_capability") is not None:
            d["compute_capability"] = tuple(d["compute_capability"])
        return cls(**d)


def _gpu(name: str, cc: tuple[int, int], sms: int, mem_gib: float, l2_mib: float) -> DeviceProfile:
    return DeviceProfile(
        name=name,
        compute_capability=cc,
        sm_count=sms,
        memory_bytes=int(mem_gib * GIB),
        l2_bytes=int(l2_mib * MIB),
        interconnect="nvlink",
        simulated=True,
    )


# Figures from NVIDIA's product pages and CUDA Programming Guide (compute capabilities table).
_NAMED: dict[str, DeviceProfile] = {
    "a100": _gpu("NVIDIA A100-SXM4-80GB", (8, 0), 108, 80, 40),
    "a10": dataclasses.replace(_gpu("NVIDIA A10", (8, 6), 72, 24, 6), interconnect="pcie"),
    "l40s": dataclasses.replace(_gpu("NVIDIA L40S", (8, 9), 142, 48, 96), interconnect="pcie"),
    "h100": _gpu("NVIDIA H100 80GB HBM3", (9, 0), 132, 80, 50),
    "h200": _gpu("NVIDIA H200", (9, 0), 132, 141, 60),
    "b200": _gpu("NVIDIA B200", (10, 0), 148, 180, 126),
    "gb200": _gpu("NVIDIA GB200", (10, 0), 152, 186, 126),
    "b300": _gpu("NVIDIA B300", (10, 3), 148, 270, 126),
    "rtx5090": dataclasses.replace(_gpu("NVIDIA GeForce RTX 5090", (12, 0), 170, 32, 96), interconnect="pcie"),
}
_BY_SM: dict[str, str] = {
    "sm80": "a100",
    "sm86": "a10",
    "sm89": "l40s",
    "sm90": "h100",
    "sm100": "b200",
    "sm103": "b300",
    "sm120": "rtx5090",
}

CPU_PROFILE = DeviceProfile(name="cpu", vendor="cpu", interconnect="none")


def simulated_names() -> list[str]:
    """Every name ``simulated`` accepts, for the ``--device`` help and the unknown-device error."""
    return sorted(_BY_SM) + sorted(_NAMED) + ["cpu"]


def simulated(name: str) -> DeviceProfile:
    """A profile for hardware the user does not have, e.g. ``sm90``, ``h100``, ``b200``, ``cpu``."""
    key = name.strip().lower().replace("-", "").replace("_", "")
    if key == "cpu":
        return dataclasses.replace(CPU_PROFILE, simulated=True)
    key = _BY_SM.get(key, key)
    if key in _NAMED:
        return _NAMED[key]
    raise InvalidSpecError(f"unknown device {name!r}; use 'auto' or one of: {', '.join(simulated_names())}")

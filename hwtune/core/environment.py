"""The environment fingerprint: device identity plus software stack.

A measurement only steers selection in an environment with the same fingerprint: a new driver, torch,
triton, flashinfer, cuDNN or NCCL can change which kernel is fastest, or whether it is correct. Every
field is read the same way in the selector and in the tuner (NVML and package metadata, never a runtime
query), so the same node always yields the same hash.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from hwtune._version import __version__
from hwtune.core.devices import DeviceProfile
from hwtune.core.packages import installed_version, torch_cuda_version


def _first_installed(*names: str) -> str | None:
    for name in names:
        version = installed_version(name)
        if version:
            return version
    return None


@dataclass(frozen=True)
class SoftwareStack:
    """Versions of the packages that can change which kernel is fastest or correct, read from package metadata (never
    imported) so that the selector and the tuner see the same stack."""

    torch: str | None
    cuda_runtime: str | None
    triton: str | None
    flashinfer: str | None
    cudnn: str | None
    nccl: str | None
    hwtune: str

    @classmethod
    @functools.lru_cache(maxsize=1)
    def current(cls) -> "SoftwareStack":
        """This process's stack; cached for the process's lifetime (packages are not expected to change under it)."""
        return cls(
            torch=installed_version("torch"),
            cuda_runtime=torch_cuda_version(),
            triton=_first_installed("triton", "pytorch-triton"),
            flashinfer=_first_installed("flashinfer-python", "flashinfer"),
            cudnn=_first_installed("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn"),
            nccl=_first_installed("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl"),
            hwtune=__version__,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SoftwareStack":
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


#: Human names of fingerprint fields, for "measured with flashinfer 0.6.11; installed is 0.6.18".
FIELD_WORDS = {
    "torch": "torch",
    "cuda_runtime": "CUDA runtime",
    "triton": "triton",
    "flashinfer": "flashinfer",
    "cudnn": "cuDNN",
    "nccl": "NCCL",
    "hwtune": "hwtune",
    "name": "GPU",
    "vendor": "vendor",
    "compute_capability": "compute capability",
    "memory_bytes": "GPU memory",
    "gpu_count": "GPU count",
    "interconnect": "interconnect",
    "driver": "driver",
}


@dataclass(frozen=True)
class Environment:
    """Device plus software stack: the identity a measurement is stored under and matched against."""

    device: DeviceProfile
    stack: SoftwareStack

    def fingerprint(self) -> dict[str, Any]:
        """The JSON-able identity (device fingerprint and stack) that ``hash`` digests."""
        return {"device": self.device.fingerprint(), "stack": self.stack.to_dict()}

    def hash(self) -> str:
        """The fingerprint's stable hash: measurements apply only where this matches."""
        return fingerprint_hash(self.fingerprint())


def fingerprint_hash(fingerprint: Mapping[str, Any]) -> str:
    """A stable 32-hex-digit hash of a fingerprint (canonical JSON, sorted keys), equal across processes and hosts
    for the same identity."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def differences(measured: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Why a stored fingerprint does not match this one, in words ("measured with X; installed is Y")."""
    out = []
    for section in ("device", "stack"):
        a, b = measured.get(section, {}), current.get(section, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                word = FIELD_WORDS.get(key, key)
                verb = "installed is" if section == "stack" else "this device has"
                out.append(f"measured with {word} {a.get(key)}; {verb} {b.get(key)}")
    return out


def current_environment(device: DeviceProfile) -> Environment:
    """The environment of this process's software stack on ``device`` (real or simulated)."""
    return Environment(device=device, stack=SoftwareStack.current())

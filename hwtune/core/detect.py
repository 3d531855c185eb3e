"""Detect this machine's GPU through NVML, without initialising CUDA.

Engines call the selector before they create their CUDA context; ``torch.cuda.get_device_properties``
would create one (and fork-unsafe state). NVML reads the driver's view instead. NVML does not report SM
count or L2 size, so those come from the known-device table when the name matches, else stay unknown.
A machine without the NVIDIA driver (or without GPUs) gets the CPU profile.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
from pathlib import Path

from hwtune._version import __version__
from hwtune.core.devices import _NAMED, CPU_PROFILE, DeviceProfile

log = logging.getLogger(__name__)


def _known(name: str) -> DeviceProfile | None:
    for profile in _NAMED.values():
        if profile.name.lower() == name.lower():
            return profile
    return None


def _visible_index(pynvml: object, count: int) -> int:
    """Index of the first GPU in CUDA_VISIBLE_DEVICES (an index or a UUID), as NVML numbers them."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if not visible:
        return 0
    if visible.isdigit():
        return min(int(visible), count - 1)
    for i in range(count):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)  # type: ignore[attr-defined]
        uuid = pynvml.nvmlDeviceGetUUID(handle)  # type: ignore[attr-defined]
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        if uuid.startswith(visible) or uuid.endswith(visible.removeprefix("GPU-")):
            return i
    return 0


def _nvlink_active(pynvml: object, handle: object) -> bool:
    links = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)
    for link in range(links):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link):  # type: ignore[attr-defined]
                return True
        except Exception:  # NVML raises NotSupported / InvalidArgument past the last link
            continue
    return False


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def detect_nvml() -> DeviceProfile:
    """Read GPU identity through NVML; raises if NVML is unavailable."""
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return CPU_PROFILE
        index = _visible_index(pynvml, count)
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(pynvml.nvmlDeviceGetName(handle))
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        interconnect = "nvlink" if _nvlink_active(pynvml, handle) else ("pcie" if count > 1 else "none")
    finally:
        pynvml.nvmlShutdown()
    known = _known(name)
    return DeviceProfile(
        name=name,
        vendor="nvidia",
        compute_capability=(int(major), int(minor)),
        sm_count=known.sm_count if known else None,
        memory_bytes=memory,
        l2_bytes=known.l2_bytes if known else None,
        gpu_count=int(count),
        interconnect=interconnect,  # type: ignore[arg-type]
        driver=driver,
        simulated=False,
        uuid=uuid,
    )


def _cache_path() -> Path | None:
    """Where this boot's detected profile is kept, keyed by what would change it without a reboot.

    NVML initialisation costs 50-100 ms, most of an engine's selection budget. The GPUs a process sees
    cannot change without a reboot (boot id), a driver reload (its version string) or another
    CUDA_VISIBLE_DEVICES, so a profile cached under those keys is exact. HWTUNE_NO_DEVICE_CACHE=1 disables it.
    """
    if os.environ.get("HWTUNE_NO_DEVICE_CACHE"):
        return None
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    try:
        driver = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        driver = "no-nvidia-driver"
    key = json.dumps([boot, driver, os.environ.get("CUDA_VISIBLE_DEVICES"), __version__])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    import platformdirs

    return Path(platformdirs.user_cache_dir("hwtune", appauthor=False)) / f"device-{digest}.json"


@functools.lru_cache(maxsize=1)
def detect() -> DeviceProfile:
    """This machine's device profile: the first visible GPU via NVML, else the CPU profile."""
    cache = _cache_path()
    if cache is not None:
        try:
            return DeviceProfile.from_dict(json.loads(cache.read_text()))
        except (OSError, ValueError, TypeError):
            pass
    try:
        profile = detect_nvml()
    except Exception as exc:  # no driver, no library, no GPU: a CPU machine
        log.debug("NVML unavailable (%s); using the CPU profile", exc)
        profile = dataclasses.replace(CPU_PROFILE)
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(profile.to_dict()))
            tmp.replace(cache)  # atomic: concurrent ranks never read half a file
        except OSError:
            pass
    return profile

"""Device detection through NVML (faked here), simulated profiles, and the CPU fallback."""

import sys
import types

import pytest

from hwtune.core import detect as devmod
from hwtune.core.devices import simulated
from hwtune.core.errors import InvalidSpecError


def fake_nvml(count: int = 2, nvlink: bool = True, name: str = "NVIDIA H100 80GB HBM3") -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVML_NVLINK_MAX_LINKS = 4
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: name.encode()
    m.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=81559 * 1024**2)
    m.nvmlSystemGetDriverVersion = lambda: "580.159.04"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-aaaa-{h}"

    def link_state(h, link):
        if link >= 2:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return 1 if nvlink else 0

    m.nvmlDeviceGetNvLinkState = link_state
    return m


def test_detect_reads_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    d = devmod.detect_nvml()
    assert d.compute_capability == (9, 0) and d.family == "ampere_hopper"
    assert d.gpu_count == 2 and d.interconnect == "nvlink" and d.driver == "580.159.04"
    assert d.uuid == "GPU-aaaa-1" and d.sm_count == 132 and not d.simulated
    assert "torch" not in d.fingerprint() and "uuid" not in d.fingerprint()


def test_pcie_and_single_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(count=2, nvlink=False, name="Some New GPU"))
    d = devmod.detect_nvml()
    assert d.interconnect == "pcie" and d.sm_count is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(count=1, nvlink=False))
    assert devmod.detect_nvml().interconnect == "none"


def test_no_driver_gives_cpu_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = types.ModuleType("pynvml")

    def fail() -> None:
        raise OSError("NVML Shared Library Not Found")

    broken.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    devmod.detect.cache_clear()
    try:
        d = devmod.detect()
        assert d.vendor == "cpu" and not d.is_cuda and d.family == "cpu"
    finally:
        devmod.detect.cache_clear()


@pytest.mark.parametrize(
    "name, cc, family",
    [
        ("sm80", (8, 0), "ampere_hopper"),
        ("sm86", (8, 6), "ampere_hopper"),
        ("sm89", (8, 9), "ampere_hopper"),
        ("sm90", (9, 0), "ampere_hopper"),
        ("sm100", (10, 0), "blackwell"),
        ("sm103", (10, 3), "blackwell"),
        ("sm120", (12, 0), "blackwell_consumer"),
        ("a100", (8, 0), "ampere_hopper"),
        ("h200", (9, 0), "ampere_hopper"),
        ("gb200", (10, 0), "blackwell"),
        ("rtx5090", (12, 0), "blackwell_consumer"),
        ("B200", (10, 0), "blackwell"),
    ],
)
def test_simulated_profiles(name: str, cc: tuple[int, int], family: str) -> None:
    d = simulated(name)
    assert d.compute_capability == cc and d.family == family and d.simulated


def test_unknown_simulated_device() -> None:
    with pytest.raises(InvalidSpecError, match="unknown device 'sm42'"):
        simulated("sm42")


def test_detected_profile_is_cached_per_boot_and_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = fake_nvml()
    init = real.nvmlInit
    real.nvmlInit = lambda: calls.append(1) or init()
    monkeypatch.setitem(sys.modules, "pynvml", real)
    devmod.detect.cache_clear()
    first = devmod.detect()
    devmod.detect.cache_clear()
    second = devmod.detect()  # a new process would read the cache file instead of initialising NVML
    devmod.detect.cache_clear()
    assert first == second and first.compute_capability == (9, 0) and len(calls) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # another device set: another cache entry
    assert devmod.detect().uuid == "GPU-aaaa-1" and len(calls) == 2
    devmod.detect.cache_clear()
    monkeypatch.setenv("HWTUNE_NO_DEVICE_CACHE", "1")
    devmod.detect()
    devmod.detect.cache_clear()
    assert len(calls) == 3

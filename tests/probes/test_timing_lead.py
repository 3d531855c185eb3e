"""The GPU spin before a plain (non-graph) timed call covers its host time (``probes.timing.host_lead``), so the
interval holds GPU time only, whatever the process's host speed: a fixed 80 us spin put TORCH_SDPA's and
FLEX_ATTENTION's launch sequences into their timings, and a fresh `bench` measured them slower than a long-lived
tune worker (issue 17). A call that waits for the GPU cannot be timed free of host time: it is detected and
reported; hwtune's own eager candidates must not."""

from __future__ import annotations

import time

import pytest

from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.probes import timing


class FakeGpu:
    """torch.cuda's spin and synchronize on a host clock: ``_sleep`` queues busy time, ``synchronize`` waits it."""

    def __init__(self) -> None:
        self.busy_until = time.perf_counter()
        self.spins: list[float] = []  # microseconds

    def sleep(self, cycles: int) -> None:
        self.spins.append(cycles / timing._clock_mhz())
        self.busy_until = max(self.busy_until, time.perf_counter()) + cycles / timing._clock_mhz() / 1e6

    def synchronize(self) -> None:
        time.sleep(max(0.0, self.busy_until - time.perf_counter()))


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    import torch

    fake = FakeGpu()
    monkeypatch.setattr(torch.cuda, "_sleep", fake.sleep)
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    return fake


def test_host_time_is_measured_and_a_waiting_call_is_detected(gpu: FakeGpu) -> None:
    host_us, synced = timing.host_lead(lambda: time.sleep(0.0005))
    assert 400 < host_us < 0.8 * timing.PROBE_SPIN_US and not synced
    host_us, synced = timing.host_lead(gpu.synchronize)  # a call that waits for the GPU, as .item() does
    assert synced and host_us >= 0.8 * timing.PROBE_SPIN_US
    slow_once = iter([0.0045, 0.0003, 0.0003])  # one try slowed down (a garbage collection, say) is no sync
    host_us, synced = timing.host_lead(lambda: time.sleep(next(slow_once)))
    assert not synced and host_us < 3000  # the median try, not the slowed one


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: "FakeEvent") -> float:
        return (end.t - self.t) * 1e3


def test_the_spin_before_each_timed_plain_call_covers_its_host_time(
    gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    opts = timing.TimingOptions(time_cap_s=0.05, min_reps=6, max_reps=6, batch=6, flush_l2=False, warmup_ms=1)
    report: dict = {}
    timing.time_cuda(lambda: time.sleep(0.0004), l2_bytes=0, opts=opts, report=report)
    assert not report["host_sync"] and 300 < report["host_us"] < 0.8 * timing.PROBE_SPIN_US
    assert abs(report["lead_us"] - max(opts.lead_us, 1.5 * report["host_us"] + 20.0)) < 0.2
    timed_spins = gpu.spins[-6:]  # one before each timed call, after the probe's
    assert all(abs(us - report["lead_us"]) < 1 for us in timed_spins)
    report.clear()
    timing.time_cuda(gpu.synchronize, l2_bytes=0, opts=opts, report=report)
    assert report["host_sync"] and report["lead_us"] == opts.lead_us


SPEC = AttentionSpec(32, 8, 128)
EAGER = {
    "decode": AttentionWorkload(SPEC, "decode", 16, 2048),
    "prefill": AttentionWorkload(SPEC, "prefill", 1, 2048, query_len=512),
}


@pytest.mark.gpu
@pytest.mark.parametrize("phase", sorted(EAGER))
def test_no_eager_gpu_candidate_waits_for_the_gpu_inside_its_timed_call(phase: str) -> None:
    """Every candidate timed without a CUDA graph reports its host time, a spin that covers it, and no host sync."""
    from hwtune.core.detect import detect
    from hwtune.probes.attention.measure import measure_attention, plan_candidates
    from hwtune.probes.timing import TimingOptions

    w = EAGER[phase]
    profile = detect()
    planned = [p for p in plan_candidates(w, profile) if p.runnable]
    records = measure_attention(w, planned, device="cuda", profile=profile, timing=TimingOptions(time_cap_s=0.2))
    eager = [r for r in records if r.ok and not (r.extra or {}).get("graph")]
    assert eager, [(r.backend, r.tactic, r.status) for r in records]
    for r in eager:
        extra = r.extra or {}
        assert extra.get("host_sync") is False, (r.backend, r.tactic, extra)
        assert extra["lead_us"] >= extra["host_us"], (r.backend, r.tactic, extra)

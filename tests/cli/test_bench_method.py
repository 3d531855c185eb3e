"""`hwtune bench` says how each candidate was timed, with a plain call's host time beside its GPU time."""

from hwtune.cli.bench import _method
from hwtune.core.records import LatencyStats, MeasurementRecord


def _rec(**extra: object) -> MeasurementRecord:
    stats = LatencyStats.from_samples([35.8])
    return MeasurementRecord(
        "attention", {}, "k", "TORCH_SDPA", "flash", "ok", stats=stats, timing_method="cuda_events", extra=extra
    )


def test_a_plain_calls_host_time_is_shown_and_a_host_sync_is_named() -> None:
    assert _method(_rec(host_us=572.2, lead_us=878.3, host_sync=False)) == "cuda_events (host 572 us)"
    assert "host sync" in _method(_rec(host_us=5100.0, lead_us=80.0, host_sync=True))
    assert _method(_rec()) == "cuda_events"

"""Selection from measurements: environment filtering, host medians, rejections, interpolation, dispatch."""

import dataclasses
import time

import pytest

import hwtune
from hwtune.core.devices import simulated
from hwtune.core.environment import SoftwareStack, current_environment
from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.db.sqlite_direct import SCHEMA_REVISION, read_for_selection
from hwtune.db.store import Store
from hwtune.selector.api import _cached
from hwtune.selector.interpolate import estimate
from hwtune.selector.measured import Point
from hwtune.selector.mix import MixPoint

SPEC = AttentionSpec(32, 8, 128)
H100 = simulated("h100")


def rec(w, backend, tactic, us, *, status="ok", host="node-a", env=None, message=""):
    env = env or current_environment(H100)
    return MeasurementRecord(
        kind="attention",
        workload=w.to_dict(),
        workload_key=w.key(),
        backend=backend,
        tactic=tactic,
        status=status,
        message=message,
        stats=LatencyStats.from_samples([us, us, us]) if status == "ok" else None,
        environment=env.fingerprint(),
        environment_hash=env.hash(),
        host=host,
        run_id=f"run-{host}",
    )


def grid(latency):
    """Decode and prefill points of SPEC with latencies from ``latency(backend, tactic, w)``."""
    out = []
    for b in (1, 4, 16, 64, 256):
        for c in (512, 2048, 8192, 32768):
            w = AttentionWorkload(SPEC, "decode", b, c)
            for bt in (("FLASHINFER", "xqa"), ("FLASHINFER", "fa2-tc"), ("FLASH_ATTN", "fa3")):
                out.append(rec(w, *bt, latency(*bt, w)))
    for chunk in (512, 2048, 8192):
        for prefix in (0, 8192):
            w = AttentionWorkload(SPEC, "prefill", 1, chunk + prefix, query_len=chunk)
            for bt in (("FLASHINFER", "fa3"), ("FLASHINFER", "fa2-tc"), ("FLASH_ATTN", "fa3")):
                out.append(rec(w, *bt, latency(*bt, w)))
    return out


def base(backend, tactic, w):
    size = w.batch * w.context_len if w.phase == "decode" else w.query_len * w.context_len / 50
    factor = {
        ("FLASHINFER", "xqa"): 0.9 if w.batch < 16 else 1.2,
        ("FLASHINFER", "fa2-tc"): 1.0,
        ("FLASHINFER", "fa3"): 0.7,
        ("FLASH_ATTN", "fa3"): 1.1,
    }[(backend, tactic)]
    return 10 + 0.001 * size * factor


@pytest.fixture()
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with Store.open(url) as s:
        yield url, s
    _cached.cache_clear()


def select(url, **kw):
    _cached.cache_clear()
    return hwtune.select_attention(SPEC, device="h100", assume_installed=True, db=url, **kw)


def test_measured_ranking_and_dispatch(store) -> None:
    url, s = store
    s.write(grid(base))
    sel = select(url)
    assert sel.backend == "FLASHINFER" and sel.ranked[0].source in ("measured", "interpolated")
    assert sel.ranked[1].backend == "FLASH_ATTN" and sel.ranked[0].latency_us < sel.ranked[1].latency_us
    assert sel.ranked[2].source == "static"  # TRITON_ATTN: valid but never measured here
    assert sel.per_phase == {"decode": "FLASHINFER", "prefill": "FLASHINFER"}
    assert sel.tactic_for("decode", 2, 3000) == "xqa"  # the measured crossover: xqa below batch 16
    assert sel.tactic_for("decode", 100, 3000) == "fa2-tc"
    assert sel.tactic_for("prefill", 1, 5000) == "fa3"
    assert sel.tactic_for("decode", 10**6, 10**9) in ("xqa", "fa2-tc")  # beyond the grid: its edge
    assert any("using configured store" in n for n in sel.notes)


def test_other_environments_are_ignored_and_explained(store) -> None:
    url, s = store
    other_stack = dataclasses.replace(SoftwareStack.current(), flashinfer="0.6.11")
    other = current_environment(H100).__class__(H100, other_stack)
    # another environment says FLASH_ATTN is 100x faster: it must not count
    s.write(
        [
            dataclasses.replace(
                r,
                environment=other.fingerprint(),
                environment_hash=other.hash(),
                stats=LatencyStats.from_samples([0.01] * 3),
            )
            for r in grid(base)
            if r.backend == "FLASH_ATTN"
        ]
    )
    s.write([r for r in grid(base) if r.backend == "FLASHINFER"])
    sel = select(url)
    assert sel.backend == "FLASHINFER"
    installed = SoftwareStack.current().flashinfer
    assert any(f"measured with flashinfer 0.6.11; installed is {installed}" in n for n in sel.notes)


def test_median_of_host_medians_resists_one_hostile_host(store) -> None:
    url, s = store
    recs = []
    for host in ("node-a", "node-b"):
        recs += [dataclasses.replace(r, host=host, run_id=host) for r in grid(base)]
    liar = [
        dataclasses.replace(
            r,
            host="evil",
            run_id="evil",
            stats=LatencyStats.from_samples([1e-3] * 3) if r.backend == "FLASH_ATTN" else r.stats,
        )
        for r in grid(base)
    ]
    s.write(recs + liar)
    assert select(url).backend == "FLASHINFER"  # two honest hosts outvote one


def test_crash_or_wrong_answer_here_rejects_the_backend(store) -> None:
    url, s = store
    s.write(grid(base))
    w = AttentionWorkload(SPEC, "decode", 64, 8192)
    s.write(
        [
            rec(
                w,
                "FLASHINFER",
                "xqa",
                0,
                status="wrong_answer",
                host="node-c",
                message="batch B through the same plan: relative L2 error 0.3 exceeds 0.02",
            )
        ]
    )
    sel = select(url)
    assert sel.backend == "FLASH_ATTN"
    reason = sel.rejected["FLASHINFER"][0]
    assert (
        "FLASHINFER tactic xqa gave a wrong answer on decode batch 64 x 8192 in this environment (host node-c" in reason
    )
    with pytest.raises(hwtune.BackendNotValidError, match="gave a wrong answer"):
        select(url, backend="FLASHINFER")


def test_interpolation_between_neighbours() -> None:
    pts = [Point(b, c, 1, 0.01 * b * c, 1) for b in (1, 16) for c in (1024, 16384)]
    exact = estimate(pts, MixPoint("decode", 16, 1024, 1.0))
    assert exact == (pytest.approx(0.01 * 16 * 1024), True, 1.0)
    lat, is_exact, conf = estimate(pts, MixPoint("decode", 4, 4096, 1.0))
    assert not is_exact and lat == pytest.approx(0.01 * 4 * 4096, rel=1e-6) and 0 < conf < 1


def test_no_store_and_missing_store_fall_back_to_static(tmp_path) -> None:
    _cached.cache_clear()
    sel = hwtune.select_attention(SPEC, device="h100", assume_installed=True, db=f"sqlite:///{tmp_path}/none.db")
    assert all(r.source == "static" for r in sel.ranked) and any("no store at" in n for n in sel.notes)
    _cached.cache_clear()


def test_fast_reader_knows_the_schema_it_reads(store) -> None:
    from hwtune.db.migrate import head

    assert SCHEMA_REVISION == head()
    url, s = store
    s.write(grid(base)[:3])
    rows, fps, notes = read_for_selection(url, SPEC.key(), "attention")
    assert rows is not None and len(rows) == 3 and len(fps) == 1 and "using configured store" in notes[0]


def test_shared_store_down_falls_back_within_two_seconds(tmp_path) -> None:
    _cached.cache_clear()
    t0 = time.perf_counter()
    sel = hwtune.select_attention(
        SPEC, device="h100", assume_installed=True, db="postgresql+psycopg://user:secret@127.0.0.1:9/nowhere"
    )
    assert time.perf_counter() - t0 < 2.5
    assert sel.backend == "FLASH_ATTN" and "secret" not in " ".join(sel.notes)
    _cached.cache_clear()


def test_a_phase_routed_to_another_backend_dispatches_that_backends_tactics(store) -> None:
    """Per-phase routing (FLASH_ATTN chosen, decode routed to FLASHINFER): ``tactic_for(backend=per_phase[phase])``
    follows FLASHINFER's own measured crossover (xqa below batch 16, fa2-tc above), not one tactic for the phase
    and never the chosen backend's."""

    def latency(backend, tactic, w):
        if backend == "FLASH_ATTN":  # decode a little behind FLASHINFER's best, prefill far ahead
            return base(backend, tactic, w) * (0.2 if w.phase == "prefill" else 1.01)
        return base(backend, tactic, w)

    url, s = store
    s.write(grid(latency))
    sel = select(url)
    assert sel.backend == "FLASH_ATTN" and sel.per_phase == {"decode": "FLASHINFER", "prefill": "FLASH_ATTN"}
    assert sel.tactic_for("decode", 2, 3000, backend="FLASHINFER") == "xqa"
    assert sel.tactic_for("decode", 100, 3000, backend="FLASHINFER") == "fa2-tc"
    assert sel.tactic_for("decode", 100, 3000) == "fa3"  # the chosen backend's own
    assert {e.phase for e in sel.phase_dispatch} == {"decode"}
    with pytest.raises(ValueError, match="not among the valid backends"):
        sel.tactic_for("decode", 2, 3000, backend="NO_SUCH_BACKEND")


def test_a_covered_tactic_leaves_the_evidence_where_its_covering_tactic_was_measured() -> None:
    """HWTUNE_TRITON_ATTN's tuned search starts from auto's config (``Tactic.covers``): where both were measured in a
    shape only tuned's point stays, so noise between two near-equal estimates cannot pick auto; auto alone stays."""
    from hwtune.selector.measured import gather
    from tests.selector.test_engine_evidence import row

    def triton(tactic: str, phase: str = "decode") -> tuple:
        r = list(row(tactic, "ok"))
        r[1], r[7] = phase, "HWTUNE_TRITON_ATTN"
        return tuple(r)

    fp = {"gpu": "H100"}
    ev = gather([triton("auto"), triton("tuned"), triton("auto", "prefill")], {"env": fp}, "env", fp)
    assert set(ev.points) == {("HWTUNE_TRITON_ATTN", "tuned", "decode"), ("HWTUNE_TRITON_ATTN", "auto", "prefill")}
    other = list(triton("auto"))
    other[3] = 4096  # a shape tuned was not measured at: auto's point there stays
    ev = gather([triton("auto"), triton("tuned"), tuple(other)], {"env": fp}, "env", fp)
    assert [p.context for p in ev.points[("HWTUNE_TRITON_ATTN", "auto", "decode")]] == [4096]

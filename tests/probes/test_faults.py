"""Fault injection: every way a candidate can fail becomes the right record, and the next one still works."""

import os
from pathlib import Path

import pytest

from hwtune.core.devices import CPU_PROFILE
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.probes.attention.measure import Planned, measure_attention
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.timing import TimingOptions

ROOT = str(Path(__file__).resolve().parents[2])
# the repository first, then whatever the caller had (a device machine puts carried wheels there)
PYTHONPATH = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
WORKLOAD = AttentionWorkload(AttentionSpec(4, 2, 32, dtype="float32"), "decode", batch=3, context_len=40)
FAST = TimingOptions(time_cap_s=0.05, min_reps=6, batch=6, warmup=1)


def measure(pool: WorkerPool, fake: str, timeout_s: float = 60.0, workload: AttentionWorkload = WORKLOAD):
    [rec] = measure_attention(
        workload,
        [Planned("TORCH_SDPA", "math")],
        device="cpu",
        profile=CPU_PROFILE,
        timing=FAST,
        timeout_s=timeout_s,
        pool=pool,
        candidate_override={"TORCH_SDPA": f"tests.probes.fake_candidates:{fake}"},
    )
    return rec


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(env={"PYTHONPATH": PYTHONPATH}) as p:
        yield p


def test_good_candidate_is_measured(pool: WorkerPool) -> None:
    rec = measure(pool, "Good")
    assert rec.status == "ok", rec.message
    assert rec.stats is not None and rec.stats.n >= 6 and rec.timing_method == "wall_clock"
    assert rec.error["rel_l2"] < 1e-5


@pytest.mark.parametrize(
    "fake, status, words",
    [
        ("Exit", "crashed", "exited with code 3 without a result"),
        ("Segfault", "crashed", "killed by signal SIGSEGV"),
        ("Raise", "error", "RuntimeError: kernel exploded"),
        ("Nan", "wrong_answer", "never written (still NaN)"),
        ("Wrong", "wrong_answer", "worst (token, head) row has relative error"),
        ("Stale", "wrong_answer", "batch B through the same plan"),
    ],
)
def test_fault_then_recovery(pool: WorkerPool, fake: str, status: str, words: str) -> None:
    rec = measure(pool, fake)
    assert rec.status == status, rec.message
    assert words in rec.message
    assert rec.stats is None  # never timed
    after = measure(pool, "Good")
    assert after.status == "ok", f"after {fake}: {after.message}"


def test_hang_is_a_timeout_and_the_group_is_killed(pool: WorkerPool) -> None:
    started = pool.started
    rec = measure(pool, "Hang", timeout_s=8)
    assert rec.status == "timeout" and "no result within 8 s" in rec.message
    assert "about to hang" in rec.message  # the last output is kept as evidence
    assert measure(pool, "Good").status == "ok" and pool.started == started + 1


def test_crash_replaces_the_worker_but_healthy_outcomes_keep_it(pool: WorkerPool) -> None:
    measure(pool, "Good")
    n = pool.started
    measure(pool, "Wrong")
    measure(pool, "Good")
    assert pool.started == n  # wrong answers leave the process trustworthy
    measure(pool, "Exit")
    measure(pool, "Good")
    assert pool.started == n + 1


def test_an_error_the_device_survives_keeps_the_worker(pool: WorkerPool) -> None:
    measure(pool, "Good")
    n = pool.started
    rec = measure(pool, "Raise")  # a Python exception in the candidate: its device still works afterwards
    assert rec.status == "error" and "kernel exploded" in rec.message
    assert "device_works" not in rec.extra  # the pool's business, not the record's
    assert measure(pool, "Good").status == "ok" and pool.started == n


@pytest.mark.gpu
def test_real_out_of_bounds_kernel_then_next_candidate_is_correct() -> None:
    spec = AttentionSpec(8, 2, 64)
    w = AttentionWorkload(spec, "decode", batch=4, context_len=300)
    with WorkerPool(env={"PYTHONPATH": PYTHONPATH}) as gpu_pool:
        [bad] = measure_attention(
            w,
            [Planned("TORCH_SDPA", "math")],
            device="cuda",
            timing=FAST,
            timeout_s=120,
            pool=gpu_pool,
            candidate_override={"TORCH_SDPA": "tests.probes.fake_candidates:OutOfBounds"},
        )
        assert bad.status in ("crashed", "error"), bad.message
        assert "illegal memory access" in bad.message.lower() or "crashed" == bad.status
        [good] = measure_attention(
            w, [Planned("TORCH_SDPA", "math")], device="cuda", timing=FAST, timeout_s=120, pool=gpu_pool
        )
        assert good.status == "ok", good.message


DCP = AttentionWorkload(AttentionSpec(4, 2, 32, dtype="float32", dcp_size=2), "decode", batch=3, context_len=70)


def test_dcp_split_and_merge_passes_for_exact_lse(pool: WorkerPool) -> None:
    rec = measure(pool, "ReferenceLse", workload=DCP)
    assert rec.status == "ok", rec.message
    assert rec.error["dcp.lse_max_abs"] < 1e-4 and rec.error["dcp.rel_l2"] < 1e-5


def test_wrong_lse_is_caught_by_the_lse_check(pool: WorkerPool) -> None:
    rec = measure(pool, "BadLse", workload=DCP)
    assert rec.status == "wrong_answer" and "LSE differs from the reference" in rec.message


# A mixed batch as engines run it with speculative decoding: one prefill chunk and decode steps of 3 tokens.
MIXED_SPEC = AttentionWorkload(
    AttentionSpec(4, 2, 32, dtype="float32", spec_tokens=2),
    "mixed",
    batch=4,
    context_len=40,
    query_len=24,
    num_prefill=1,
)


def test_mixed_spec_decode_batch_passes_for_a_correct_candidate(pool: WorkerPool) -> None:
    rec = measure(pool, "Good", workload=MIXED_SPEC)
    assert rec.status == "ok", rec.message


def test_stale_query_lengths_in_a_mixed_spec_decode_batch_are_caught(pool: WorkerPool) -> None:
    """The second batch moves the prefill chunk to another position: a plan that kept the first batch's
    query lengths reads the wrong rows and is recorded as a wrong answer, never timed."""
    rec = measure(pool, "StaleQuery", workload=MIXED_SPEC)
    assert rec.status == "wrong_answer", rec.message
    assert "batch B through the same plan" in rec.message and rec.stats is None


def _dcp_prefill(layout: str, prefix: int = 70) -> AttentionWorkload:
    spec = AttentionSpec(4, 2, 32, dtype="float32", dcp_size=2, kv_layout=layout)
    return AttentionWorkload(spec, "prefill", batch=2, context_len=prefix + 24, query_len=24)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("prefix", [70, 0])
def test_dcp_prefill_path_passes_when_new_tokens_are_read_as_nhd(pool: WorkerPool, layout: str, prefix: int) -> None:
    rec = measure(pool, "MathDcpPrefill", workload=_dcp_prefill(layout, prefix))
    assert rec.status == "ok", rec.message
    assert rec.error["rel_l2"] < 1e-5 and rec.error["lse_max_abs"] < 1e-4
    assert "rank 0 of 2" in rec.extra["dcp_prefill"]


def test_dcp_prefill_built_with_the_cache_layout_is_caught(pool: WorkerPool) -> None:
    """The engine bug: the new-token wrapper built with the HND cache layout reads NHD tensors wrongly."""
    ok = measure(pool, "CacheLayoutDcpPrefill", workload=_dcp_prefill("NHD"))
    assert ok.status == "ok", ok.message  # with an NHD cache the two layouts agree, so nothing is wrong
    bad = measure(pool, "CacheLayoutDcpPrefill", workload=_dcp_prefill("HND"))
    assert bad.status == "wrong_answer" and bad.stats is None, bad.message
    assert "batch A" in bad.message


def test_a_candidate_without_a_dcp_prefill_path_is_unsupported_not_timed(pool: WorkerPool) -> None:
    rec = measure(pool, "ReferenceLse", workload=_dcp_prefill("NHD"))
    assert rec.status == "unsupported" and "no DCP prefill path" in rec.message


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_flashinfer_dcp_prefill_right_and_wrongly_built(layout: str) -> None:
    """On a GPU with FlashInfer: the DCP prefill path passes in both cache layouts when the new tokens' wrapper
    is built NHD, and the wrapper built with an HND cache's layout is recorded as wrong or crashed, never ok."""
    pytest.importorskip("flashinfer")
    spec = AttentionSpec(32, 8, 128, dcp_size=2, kv_layout=layout)
    w = AttentionWorkload(spec, "prefill", batch=2, context_len=1024 + 256, query_len=256)
    with WorkerPool(env={"PYTHONPATH": PYTHONPATH}) as gpu_pool:

        def run(override: dict | None):
            [rec] = measure_attention(
                w,
                [Planned("FLASHINFER", "fa2-tc")],
                device="cuda",
                timing=FAST,
                timeout_s=300,
                pool=gpu_pool,
                candidate_override=override,
            )
            return rec

        good = run(None)
        assert good.status == "ok", good.message
        assert "rank 0 of 2" in good.extra["dcp_prefill"]
        bad = run({"FLASHINFER": "tests.probes.fake_candidates:FlashInferCacheLayoutDcpPrefill"})
        if layout == "NHD":
            assert bad.status == "ok", bad.message  # the cache's layout is NHD too: nothing to get wrong
        else:
            assert bad.status in ("wrong_answer", "crashed", "error") and bad.stats is None, bad.message


DCP_SPEC = AttentionWorkload(
    AttentionSpec(4, 2, 32, dtype="float32", dcp_size=2, spec_tokens=2), "decode", batch=3, context_len=70, query_len=3
)


def test_dcp_check_runs_for_speculative_decode_queries(pool: WorkerPool) -> None:
    rec = measure(pool, "ReferenceLse", workload=DCP_SPEC)
    assert rec.status == "ok", rec.message
    assert rec.error["dcp.rel_l2"] < 1e-5  # the split-and-merge check ran on 3-token queries


def test_dcp_share_masked_causally_is_caught_with_speculative_decode(pool: WorkerPool) -> None:
    rec = measure(pool, "CausalOnlyLse", workload=DCP_SPEC)
    assert rec.status == "wrong_answer" and "DCP split-and-merge" in rec.message, rec.message


def test_a_runner_without_non_causal_shares_is_unsupported_for_dcp_with_spec_decode(pool: WorkerPool) -> None:
    rec = measure(pool, "Good", workload=DCP_SPEC)  # SDPA's runner: no LSE, no non-causal shares
    assert rec.status == "unsupported" and "without a causal mask" in rec.message, rec.message


def test_dcp_mixed_batches_and_too_short_contexts_are_unsupported_not_unchecked(pool: WorkerPool) -> None:
    spec = AttentionSpec(4, 2, 32, dtype="float32", dcp_size=2, spec_tokens=2)
    mixed = measure(pool, "ReferenceLse", workload=AttentionWorkload(spec, "mixed", 3, 70, query_len=24, num_prefill=1))
    assert mixed.status == "unsupported" and "no DCP check for mixed" in mixed.message
    short = measure(pool, "ReferenceLse", workload=AttentionWorkload(spec, "decode", 3, 18, query_len=3))
    assert short.status == "unsupported" and short.message.startswith("DCP check:"), short.message


def test_every_worker_shares_one_triton_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers get TRITON_CACHE_DIR set (Triton's default, or the caller's), so torch's inductor cannot move one
    worker's Triton cache away from what the others, the parallel warm-up among them, compiled."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_HOME", "/somewhere")
    with WorkerPool(env={"PYTHONPATH": PYTHONPATH}) as p:
        assert measure(p, "CompileCache").message == "TRITON_CACHE_DIR=/somewhere/.triton/cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", "/shared/triton")
    with WorkerPool(env={"PYTHONPATH": PYTHONPATH}) as p:
        assert measure(p, "CompileCache").message == "TRITON_CACHE_DIR=/shared/triton"


def test_a_prestarted_worker_takes_the_first_job() -> None:
    """The tuner starts its measuring worker before the warm-up; the first job then runs in it, not in a new one."""
    with WorkerPool(env={"PYTHONPATH": PYTHONPATH}) as p:
        p.prestart()
        p.prestart()
        assert p.started == 1
        assert measure(p, "Good").status == "ok" and p.started == 1

"""The real CPU candidates (TORCH_SDPA math, FLEX_ATTENTION compiled) through the whole pipeline."""

import pytest

from hwtune.core.devices import CPU_PROFILE
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.probes.attention.measure import Planned, measure_attention, plan_candidates
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.timing import TimingOptions

FAST = TimingOptions(time_cap_s=0.05, min_reps=6, batch=6, warmup=1)
SPEC = AttentionSpec(8, 2, 64, dtype="float32", block_size=16)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool() as p:
        yield p


@pytest.mark.parametrize(
    "workload",
    [
        AttentionWorkload(SPEC, "decode", batch=4, context_len=100),
        AttentionWorkload(
            AttentionSpec(8, 2, 64, dtype="bfloat16", kv_layout="HND"), "decode", 3, 50, context_lens=(50, 17, 33)
        ),
        AttentionWorkload(SPEC, "prefill", batch=2, context_len=80, query_len=40),
        AttentionWorkload(SPEC, "prefill", batch=2, context_len=48, query_len=48),
        AttentionWorkload(SPEC, "mixed", batch=3, context_len=64, query_len=32, num_prefill=1),
        AttentionWorkload(AttentionSpec(8, 8, 64, dtype="float32", spec_tokens=3), "decode", 2, 70, query_len=4),
    ],
    ids=["decode", "decode-hnd-mixedlens-bf16", "prefill-prefix", "prefill-empty", "mixed", "spec-decode-mha"],
)
def test_sdpa_math_on_cpu(pool: WorkerPool, workload: AttentionWorkload) -> None:
    [rec] = measure_attention(
        workload, [Planned("TORCH_SDPA", "math")], device="cpu", profile=CPU_PROFILE, timing=FAST, pool=pool
    )
    assert rec.status == "ok", rec.message
    assert rec.error["rel_l2"] < 2e-2
    assert rec.workload_key == workload.key() and rec.environment_hash


def test_plan_on_cpu_runs_only_cpu_candidates() -> None:
    w = AttentionWorkload(SPEC, "decode", batch=2, context_len=32)
    runnable = sorted((p.backend, p.tactic) for p in plan_candidates(w, CPU_PROFILE) if p.runnable)
    assert runnable == [("FLEX_ATTENTION", "compiled"), ("TORCH_SDPA", "math")]
    unsup = {p.backend: p.reasons for p in plan_candidates(w, CPU_PROFILE) if not p.runnable}
    assert any("runs on NVIDIA GPUs only" in r for r in unsup["FLASHINFER"])


def test_flex_compiled_on_cpu(pool: WorkerPool) -> None:
    w = AttentionWorkload(SPEC, "mixed", batch=3, context_len=64, query_len=32, num_prefill=1)
    [rec] = measure_attention(
        w, [Planned("FLEX_ATTENTION", "compiled")], device="cpu", profile=CPU_PROFILE, timing=FAST, pool=pool
    )
    assert rec.status == "ok", rec.message
    assert rec.compile_time_s is not None and rec.compile_time_s > 0


def test_flex_mask_is_compiled_only_where_the_eager_mask_would_be_too_large() -> None:
    from hwtune.probes.attention.candidates.flex import EAGER_MASK_ELEMENTS, compile_mask

    assert not compile_mask("cuda", 256, 256 * 8192 + 16)  # batch 256 x 8192 tokens: eager, 0.1 s on an H100
    assert compile_mask("cuda", 8192, 8192 + 131072)  # an 8192-token chunk on a 131072-token prefix
    assert not compile_mask("cpu", 8192, 8192 + 131072)
    slots = EAGER_MASK_ELEMENTS // 128  # one query pads to flex's 128-row block
    assert not compile_mask("cuda", 1, slots) and compile_mask("cuda", 1, slots + 1)


def test_invalid_candidates_are_recorded_unsupported_and_never_run() -> None:
    w = AttentionWorkload(AttentionSpec(8, 2, 64, dcp_size=2), "decode", batch=2, context_len=64)
    recs = measure_attention(
        w,
        device="cpu",
        profile=CPU_PROFILE,
        timing=FAST,
        candidate_override={"TORCH_SDPA": "tests.probes.fake_candidates:Exit"},
    )
    sdpa = [r for r in recs if r.backend == "TORCH_SDPA"]
    assert sdpa and all(r.status == "unsupported" for r in sdpa)  # the crashing fake was never started
    assert any("Decode Context Parallelism" in r.message for r in sdpa)


def test_uniform_only_kernels_get_a_uniform_second_batch() -> None:
    from hwtune.probes.attention.problem import varied_lengths

    w = AttentionWorkload(SPEC, "decode", batch=4, context_len=100)
    ragged = varied_lengths(w, 1).context_lens
    uniform = varied_lengths(w, 1, uniform=True).context_lens
    assert len(set(uniform)) == 1 and uniform[0] < 100
    assert ragged != uniform

"""Attention sinks (gpt-oss): the problem carries them, the reference applies them, and the gate checks every candidate
with them: the CPU candidates pass through the worker, a candidate that drops them (or counts them on every DCP share,
or returns an LSE without them) is ``wrong_answer``. On a GPU (marked ``gpu``): every valid GPU candidate with sinks.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import pytest
import torch

from hwtune.core import catalogue
from hwtune.core.devices import CPU_PROFILE, simulated
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.core.validation import check_tactic
from hwtune.probes.attention.dcp import dcp_prefill_inputs
from hwtune.probes.attention.measure import Planned, measure_attention, plan_candidates
from hwtune.probes.attention.problem import build_problem, second_batch_lengths, sink_logits, split_halves
from hwtune.probes.attention.reference import merge_by_lse, reference_attention
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.contract import Unsupported
from hwtune.probes.timing import TimingOptions

ROOT = str(Path(__file__).resolve().parents[2])
PYTHONPATH = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
FAST = TimingOptions(time_cap_s=0.05, min_reps=6, batch=6, warmup=1)
SINK = AttentionSpec(8, 2, 64, dtype="float32", block_size=16, sinks=True)


def _independent(problem) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """Attention with sinks computed another way: per (request, head), the visible logits with the sink appended as
    one more column, a plain softmax over them, and a value of zero for that column."""
    spec = problem.spec
    outs = torch.zeros(problem.num_tokens, spec.num_heads, spec.head_size)
    lses = torch.zeros(problem.num_tokens, spec.num_heads)
    group = spec.num_heads // spec.num_kv_heads
    for r in range(problem.batch):
        k, v = problem.gather_kv(r)
        n, m = k.shape[0], problem.query_lens[r]
        rows = problem.query_slice(r)
        for h in range(spec.num_heads):
            q = problem.q[rows, h].float()  # [m, d]
            s = q @ k[:, h // group].T * problem.softmax_scale  # [m, n]
            if spec.logits_soft_cap is not None:
                s = spec.logits_soft_cap * torch.tanh(s / spec.logits_soft_cap)
            for i in range(m):
                pos = n - m + i
                keep = [j for j in range(n) if (j <= pos or not problem.causal)]
                if spec.sliding_window is not None:
                    keep = [j for j in keep if j > pos - spec.sliding_window]
                logits = torch.cat([s[i, keep], problem.sinks[h : h + 1].float()])  # the sink column, last
                values = torch.cat([v[keep, h // group], torch.zeros(1, spec.head_size)])  # its value: zero
                p = torch.softmax(logits, dim=0)
                outs[rows.start + i, h] = p @ values
                lses[rows.start + i, h] = torch.logsumexp(logits, dim=0)
    return outs, lses


@pytest.mark.parametrize(
    "workload",
    [
        AttentionWorkload(SINK, "decode", batch=3, context_len=40, context_lens=(40, 17, 33)),
        AttentionWorkload(SINK, "prefill", batch=2, context_len=48, query_len=20),
        AttentionWorkload(dataclasses.replace(SINK, sliding_window=9), "prefill", 2, 40, query_len=12),
        AttentionWorkload(dataclasses.replace(SINK, logits_soft_cap=5.0, kv_layout="HND"), "mixed", 3, 32, 8, 1),
        AttentionWorkload(dataclasses.replace(SINK, spec_tokens=2), "decode", 2, 30),
    ],
    ids=["decode-ragged", "prefill-prefix", "window", "softcap-hnd-mixed", "spec-decode"],
)
def test_reference_with_sinks_equals_an_appended_sink_column(workload: AttentionWorkload) -> None:
    p = build_problem(workload, "cpu", seed=3)
    assert p.sinks is not None and p.sinks.dtype == torch.float32 and p.sinks.shape == (SINK.num_heads,)
    out, lse = reference_attention(p)
    ind_out, ind_lse = _independent(p)
    assert torch.allclose(out, ind_out, atol=1e-5, rtol=1e-4)
    assert torch.allclose(lse, ind_lse, atol=1e-5)  # the LSE includes the sink


def test_sinks_are_seeded_large_enough_to_matter_and_kept_through_the_second_batch() -> None:
    w = AttentionWorkload(SINK, "decode", batch=4, context_len=200)
    p = build_problem(w, "cpu", seed=5)
    assert torch.equal(p.sinks, build_problem(w, "cpu", seed=5).sinks)  # seeded
    assert not torch.equal(p.sinks, build_problem(w, "cpu", seed=6).sinks)
    assert torch.equal(p.sinks, sink_logits(w, 5, "cpu"))
    assert torch.equal(p.sinks, p.sinks.to(torch.bfloat16).float())  # bf16 values: exact for bf16-only kernels
    # the same q and cache as without sinks: the sinks come from their own generator
    plain = build_problem(AttentionWorkload(dataclasses.replace(SINK, sinks=False), "decode", 4, 200), "cpu", seed=5)
    assert plain.sinks is None and torch.equal(plain.q, p.q) and torch.equal(plain.kv_cache, p.kv_cache)
    out, _ = reference_attention(p)
    out_plain, _ = reference_attention(plain)
    rel = float((out - out_plain).norm() / out.norm())
    assert rel > 0.3, rel  # a kernel that drops the sinks is off by order one, far beyond any tolerance
    second = build_problem(w, "cpu", seed=6, like=p, lengths=second_batch_lengths(w, 6))
    assert second.sinks is p.sinks  # a layer's parameter: the same tensor, as the cache buffers are


def test_dcp_shares_count_the_sink_once() -> None:
    w = AttentionWorkload(dataclasses.replace(SINK, dcp_size=2, spec_tokens=1), "decode", 3, 70)
    p = build_problem(w, "cpu", seed=1)
    a, b = split_halves(p)
    assert a.sinks is p.sinks and b.sinks is None
    out, lse = reference_attention(p)
    merged, merged_lse = merge_by_lse(*reference_attention(a), *reference_attention(b))
    assert torch.allclose(merged, out, atol=1e-5) and torch.allclose(merged_lse, lse, atol=1e-5)
    both, _ = merge_by_lse(*reference_attention(a), *reference_attention(dataclasses.replace(b, sinks=p.sinks)))
    assert float((both - out).norm() / out.norm()) > 0.05  # the sink on both shares: wrong

    pw = AttentionWorkload(dataclasses.replace(SINK, dcp_size=2), "prefill", 2, 96, query_len=32)
    inputs = dcp_prefill_inputs(build_problem(pw, "cpu", seed=1), 2)
    assert inputs.sinks is not None and all(share.sinks is None for share in inputs.shares)


def test_mla_with_sinks_is_unsupported() -> None:
    spec = AttentionSpec(16, 1, 576, use_mla=True, kv_lora_rank=512, qk_rope_head_dim=64, sinks=True)
    with pytest.raises(Unsupported, match="sinks"):
        build_problem(AttentionWorkload(spec, "decode", 2, 64), "cpu")


# --- through the worker ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(env={"PYTHONPATH": PYTHONPATH}) as p:
        yield p


CPU_WORKLOADS = {
    "decode-ragged": AttentionWorkload(SINK, "decode", batch=4, context_len=100, context_lens=(100, 23, 64, 90)),
    "decode-uniform-bf16-hnd": AttentionWorkload(
        dataclasses.replace(SINK, dtype="bfloat16", kv_layout="HND"), "decode", 3, 80
    ),
    "prefill-prefix": AttentionWorkload(SINK, "prefill", batch=2, context_len=80, query_len=40),
    "prefill-empty": AttentionWorkload(SINK, "prefill", batch=2, context_len=48, query_len=48),
    "mixed": AttentionWorkload(SINK, "mixed", batch=3, context_len=64, query_len=32, num_prefill=1),
    "spec-decode-mha": AttentionWorkload(
        AttentionSpec(8, 8, 64, dtype="float32", spec_tokens=3, sinks=True), "decode", 2, 70
    ),
}


@pytest.mark.parametrize("name", sorted(CPU_WORKLOADS))
@pytest.mark.parametrize("backend,tactic", [("TORCH_SDPA", "math"), ("FLEX_ATTENTION", "compiled")])
def test_cpu_candidates_with_sinks_pass_the_gate(pool: WorkerPool, backend: str, tactic: str, name: str) -> None:
    w = CPU_WORKLOADS[name]
    [rec] = measure_attention(w, [Planned(backend, tactic)], device="cpu", profile=CPU_PROFILE, timing=FAST, pool=pool)
    assert rec.status == "ok", rec.message
    assert rec.error["rel_l2"] < (2e-2 if w.spec.dtype == "bfloat16" else 1e-4)


def test_cpu_plan_with_sinks_keeps_sdpa_and_flex() -> None:
    w = AttentionWorkload(SINK, "decode", batch=2, context_len=32)
    runnable = sorted((p.backend, p.tactic) for p in plan_candidates(w, CPU_PROFILE) if p.runnable)
    assert runnable == [("FLEX_ATTENTION", "compiled"), ("TORCH_SDPA", "math")]


def _fake(pool: WorkerPool, workload: AttentionWorkload, fake: str):  # noqa: ANN202
    [rec] = measure_attention(
        workload,
        [Planned("TORCH_SDPA", "math")],
        device="cpu",
        profile=CPU_PROFILE,
        timing=FAST,
        pool=pool,
        candidate_override={"TORCH_SDPA": f"tests.probes.sink_fakes:{fake}"},
    )
    return rec


def test_a_candidate_that_drops_the_sinks_is_wrong_answer(pool: WorkerPool) -> None:
    rec = _fake(pool, CPU_WORKLOADS["decode-ragged"], "DropSinks")
    assert rec.status == "wrong_answer", rec.message
    assert "batch A" in rec.message and rec.error["batch A.rel_l2"] > 0.3
    # and the same workload without sinks is fine for it: the reference's sinks are what fail it
    plain = dataclasses.replace(CPU_WORKLOADS["decode-ragged"], spec=dataclasses.replace(SINK, sinks=False))
    assert _fake(pool, plain, "DropSinks").status == "ok"


DCP_DECODE = AttentionWorkload(dataclasses.replace(SINK, dcp_size=2, spec_tokens=1), "decode", 3, 70)


def test_dcp_with_sinks_merges_when_one_share_carries_them(pool: WorkerPool) -> None:
    rec = _fake(pool, DCP_DECODE, "ReferenceLse")
    assert rec.status == "ok", rec.message
    assert rec.error["dcp.rel_l2"] < 1e-4


def test_dcp_with_the_sink_on_every_share_is_wrong_answer(pool: WorkerPool) -> None:
    rec = _fake(pool, DCP_DECODE, "SinkOnEveryShare")
    assert rec.status == "wrong_answer", rec.message
    assert "DCP split-and-merge" in rec.message


def test_an_lse_without_the_sink_is_wrong_answer(pool: WorkerPool) -> None:
    rec = _fake(pool, DCP_DECODE, "LseWithoutSink")
    assert rec.status == "wrong_answer", rec.message
    assert "LSE" in rec.message


def test_dcp_prefill_applies_the_sink_once_in_the_new_tokens_kernel(pool: WorkerPool) -> None:
    w = AttentionWorkload(dataclasses.replace(SINK, dcp_size=2), "prefill", 2, 96, query_len=32)
    ok = _fake(pool, w, "SinkMathDcpPrefill")
    assert ok.status == "ok", ok.message
    dropped = _fake(pool, w, "MathDcpPrefill")  # fake_candidates' path, which knows nothing of sinks
    assert dropped.status == "wrong_answer", dropped.message


# --- what refuses sinks, and what the catalogue declares --------------------------------------------------------


def test_gpu_candidates_refuse_sinks_where_their_kernels_cannot_apply_them() -> None:
    from hwtune.probes.attention.candidates.flashinfer import _check_sinks
    from hwtune.probes.attention.candidates.triton_attn import TritonAttnCandidate

    for tactic, single in (("fa2", True), ("cudnn", False), ("cute-dsl", True)):
        with pytest.raises(Unsupported):
            _check_sinks(SINK, tactic, single)
    with pytest.raises(Unsupported, match="soft-cap"):
        _check_sinks(dataclasses.replace(SINK, logits_soft_cap=30.0), "fa3", False)
    for tactic in ("fa2-tc", "fa3", "xqa", "trtllm-gen"):
        _check_sinks(SINK, tactic, True)  # no refusal
    with pytest.raises(Unsupported, match="sinks"):
        TritonAttnCandidate().runner(AttentionWorkload(SINK, "decode", 2, 32), "auto", "cuda")


def _sink_tactics(backend: str, device: str) -> set[str]:
    spec = AttentionSpec(64, 8, 64, sinks=True, kv_layout="HND")
    b = catalogue.get("attention", backend)
    return {t.name for t in b.tactics if not check_tactic(b, t, spec, simulated(device), assume_installed=True)}


def test_catalogue_declares_which_tactics_take_sinks() -> None:
    assert _sink_tactics("FLASHINFER", "h100") == {"fa2-tc", "fa3", "xqa"}  # xqa-2x: fp8 caches only
    assert _sink_tactics("FLASHINFER", "b200") >= {"fa2-tc", "trtllm-gen", "xqa"}
    assert "fa2" not in _sink_tactics("FLASHINFER", "b200") and "cudnn" not in _sink_tactics("FLASHINFER", "b200")
    assert _sink_tactics("FLASH_ATTN", "h100") == {"fa3"}
    assert _sink_tactics("FLASH_ATTN", "b200") == {"fa4"}
    assert _sink_tactics("TORCH_SDPA", "h100") == {"efficient", "math"}  # flash takes no mask; cudnn's is wrong
    assert _sink_tactics("FLEX_ATTENTION", "h100") == {"compiled"}
    assert not _sink_tactics("HWTUNE_TRITON_ATTN", "h100")


# --- on a GPU -----------------------------------------------------------------------------------------------------

GPT_OSS = AttentionSpec(64, 8, 64, dtype="bfloat16", sinks=True)  # gpt-oss-120b/20b attention at TP 1
GPU_WORKLOADS = {
    "decode-16x4k": AttentionWorkload(GPT_OSS, "decode", 16, 4096),
    "decode-ragged-hnd": AttentionWorkload(
        dataclasses.replace(GPT_OSS, kv_layout="HND"), "decode", 4, 2048, context_lens=(2048, 700, 1500, 33)
    ),
    "decode-window-128": AttentionWorkload(dataclasses.replace(GPT_OSS, sliding_window=128), "decode", 8, 2048),
    "prefill-512-on-2k": AttentionWorkload(GPT_OSS, "prefill", 2, 2048, query_len=512),
    "mixed": AttentionWorkload(GPT_OSS, "mixed", 8, 2048, query_len=512, num_prefill=1),
    "decode-dcp2": AttentionWorkload(dataclasses.replace(GPT_OSS, dcp_size=2), "decode", 8, 4096),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_WORKLOADS))
def test_every_gpu_candidate_with_sinks(name: str) -> None:
    """Every catalogue-valid candidate with sinks passes the gate or says why it cannot run; none is wrong."""
    from hwtune.core.detect import detect

    w = GPU_WORKLOADS[name]
    profile = detect()
    planned = [p for p in plan_candidates(w, profile) if p.runnable]
    records = measure_attention(w, planned, device="cuda", profile=profile, timing=TimingOptions(time_cap_s=0.3))
    bad = {(r.backend, r.tactic): (r.status, r.message[:300]) for r in records if r.status not in ("ok", "unsupported")}
    assert not bad, bad
    assert any(r.status == "ok" for r in records), [(r.backend, r.tactic, r.message[:200]) for r in records]


@pytest.mark.gpu
def test_gpu_candidate_that_drops_sinks_is_wrong_answer() -> None:
    w = GPU_WORKLOADS["decode-16x4k"]
    from hwtune.core.detect import detect

    [rec] = measure_attention(
        w,
        [Planned("TORCH_SDPA", "efficient")],
        device="cuda",
        profile=detect(),
        timing=TimingOptions(time_cap_s=0.1),
        candidate_override={"TORCH_SDPA": "tests.probes.sink_fakes:DropSinks"},
    )
    assert rec.status == "wrong_answer", rec.message
    assert math.isfinite(rec.error["batch A.rel_l2"])

"""MLA's non-absorbed prefill (candidates/mla_prefill_*.py) through the whole measurement path.

On the CPU: the engine-side inputs (gather, kv_b_proj up-projection, k concat) attended densely equal the shared
float32 reference; HWTUNE_TORCH_MLA's mha-eager (LSE checked) and mha-sdpa-math pass the gate through the worker at
DeepSeek-V3 widths (16 heads, chunk on a cached prefix, ragged batch, fp8 latent, page size 1, no prefix); faulty
runners (wrong scale, V from the wrong columns, causal mask off by one, rope key not broadcast) are wrong_answer; the
catalogue plans the mha-* tactics for prefill only. On a GPU (marked ``gpu``): FlashInfer's ragged tactics and the
rest at DeepSeek-V3 shapes.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from hwtune.core.devices import CPU_PROFILE
from hwtune.core.model_config import attention_spec, load_model_config
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.probes.attention.candidates.base import Candidate
from hwtune.probes.attention.candidates.mla_prefill_base import prefill_inputs
from hwtune.probes.attention.candidates.mla_prefill_torch import TorchMlaPrefillRunner
from hwtune.probes.attention.measure import Planned, measure_attention, plan_candidates
from hwtune.probes.attention.problem import build_problem
from hwtune.probes.attention.reference import reference_attention
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.timing import TimingOptions

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
FAST = TimingOptions(time_cap_s=0.05, min_reps=3, batch=3, warmup=1)
DSV3 = load_model_config(MODELS / "deepseek-v3.json")
TP8 = attention_spec(DSV3, 8)  # 16 heads, latent 512 + 64, nope 128, v 128, bf16, block 16
THIS = "tests.probes.test_mla_prefill"
# a chunk of 24 new tokens on prefixes of 176, 0 and 37: ragged, one request without a prefix
CHUNK_ON_PREFIX = AttentionWorkload(TP8, "prefill", 3, 200, query_len=24, context_lens=(200, 24, 61))


@pytest.fixture(scope="module")
def pool():
    with WorkerPool() as p:
        yield p


def _measure(w: AttentionWorkload, planned: list[Planned], pool: WorkerPool, **kw):  # noqa: ANN003, ANN202
    return measure_attention(w, planned, device="cpu", profile=CPU_PROFILE, timing=FAST, pool=pool, **kw)


def test_the_engines_inputs_attended_densely_are_the_shared_reference() -> None:
    """K = [ckv @ W_UK, kpe], V = ckv @ W_UV built the engine's way (one kv_b_proj GEMM split by columns, the rope
    key broadcast), attended causally (end-aligned) in float64 at 1/sqrt(192): the MLA reference, decode's too."""
    spec = dataclasses.replace(TP8, dtype="float32")
    p = build_problem(dataclasses.replace(CHUNK_ON_PREFIX, spec=spec), "cpu", seed=3)
    x = prefill_inputs(p)
    assert x.q.shape == (72, 16, 192) and x.k.shape == (285, 16, 192) and x.v.shape == (285, 16, 128)
    assert p.softmax_scale == pytest.approx(1 / math.sqrt(192))
    out = torch.empty(72, 16, 128, dtype=torch.float64)
    lse = torch.empty(72, 16, dtype=torch.float64)
    q0 = k0 = 0
    for m, n in zip(x.query_lens, x.kv_lens):
        q, k, v = (t.double().transpose(0, 1) for t in (x.q[q0 : q0 + m], x.k[k0 : k0 + n], x.v[k0 : k0 + n]))
        s = q @ k.transpose(1, 2) * p.softmax_scale
        s = s.masked_fill(torch.arange(n)[None, :] > torch.arange(n - m, n)[:, None], -math.inf)
        lse[q0 : q0 + m] = torch.logsumexp(s, -1).T
        out[q0 : q0 + m] = (torch.softmax(s, -1) @ v).transpose(0, 1)
        q0, k0 = q0 + m, k0 + n
    ref_out, ref_lse = reference_attention(p)
    torch.testing.assert_close(ref_out.double(), out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ref_lse.double(), lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "workload",
    [
        CHUNK_ON_PREFIX,
        AttentionWorkload(TP8, "prefill", 2, 48, query_len=48),
        AttentionWorkload(dataclasses.replace(TP8, kv_cache_dtype="fp8"), "prefill", 2, 90, query_len=16),
        AttentionWorkload(dataclasses.replace(TP8, block_size=1), "prefill", 2, 70, query_len=20),
    ],
    ids=["chunk-on-prefix-ragged", "no-prefix", "fp8-latent", "page1"],
)
@pytest.mark.parametrize("tactic", ["mha-eager", "mha-sdpa-math"])
def test_torch_mla_prefill_through_the_worker(pool: WorkerPool, workload: AttentionWorkload, tactic: str) -> None:
    [rec] = _measure(workload, [Planned("HWTUNE_TORCH_MLA", tactic)], pool)
    assert rec.status == "ok", rec.message
    assert rec.error["rel_l2"] < (5e-2 if workload.spec.kv_cache_dtype.startswith("fp8") else 2e-2)
    assert ("lse_max_abs" in rec.error) == (tactic == "mha-eager")  # SDPA returns no LSE
    if tactic == "mha-eager":
        assert rec.error["lse_max_abs"] < 6e-2
    assert rec.extra["num_tokens"] == workload.batch * workload.query_len
    assert "non-absorbed" in rec.extra["mla_prefill"]


def test_sdpa_kernels_that_refuse_the_shape_say_why(pool: WorkerPool) -> None:
    """flash takes no mask (a cached prefix needs one); on the CPU efficient and cudnn do not exist."""
    records = _measure(
        CHUNK_ON_PREFIX,
        [Planned("HWTUNE_TORCH_MLA", t) for t in ("mha-sdpa-flash", "mha-sdpa-efficient", "mha-sdpa-cudnn")],
        pool,
    )
    assert [r.status for r in records] == ["unsupported"] * 3
    assert "takes no attention mask" in records[0].message and "refused q/k 192, v 128" in records[1].message


# --- faulty prefill runners: the gate must say wrong_answer ---------------------------------------------------


class _WrongScale(TorchMlaPrefillRunner):
    """Scales by 1/sqrt(v_head_dim) (128) instead of 1/sqrt(qk_nope + rope) (192)."""

    def plan(self, inputs) -> None:  # noqa: ANN001
        self.scale = 1 / math.sqrt(inputs.v.shape[-1])
        super().plan(inputs)


class _VFromWrongColumns(TorchMlaPrefillRunner):
    """Splits kv_b_proj's output as [v, nope] instead of [nope, v]: V is what should have been the nope key."""

    def build_inputs(self, p):  # noqa: ANN001, ANN201
        x = prefill_inputs(p)
        x.v = x.k[..., : p.dims.v].contiguous()
        return x


class _MaskOffByOne(TorchMlaPrefillRunner):
    """Each new token also sees the token after it."""

    def __init__(self, tactic: str) -> None:
        super().__init__(tactic)
        self.mask_offset = 1


class _KpeNotBroadcast(TorchMlaPrefillRunner):
    """The rope key written into the first head only (the others' rope part left zero)."""

    def build_inputs(self, p):  # noqa: ANN001, ANN201
        x = prefill_inputs(p)
        x.k[:, 1:, p.dims.nope :] = 0
        return x


class _Fake(Candidate):
    backend = "HWTUNE_TORCH_MLA"
    runner_cls: type = TorchMlaPrefillRunner

    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return self.runner_cls(tactic)


class WrongScale(_Fake):
    runner_cls = _WrongScale


class VFromWrongColumns(_Fake):
    runner_cls = _VFromWrongColumns


class MaskOffByOne(_Fake):
    runner_cls = _MaskOffByOne


class KpeNotBroadcast(_Fake):
    runner_cls = _KpeNotBroadcast


@pytest.mark.parametrize("fake", ["WrongScale", "VFromWrongColumns", "MaskOffByOne", "KpeNotBroadcast"])
@pytest.mark.parametrize("tactic", ["mha-eager", "mha-sdpa-math"])
def test_faulty_mla_prefill_runners_are_wrong_answers(pool: WorkerPool, fake: str, tactic: str) -> None:
    overrides = {"HWTUNE_TORCH_MLA": f"{THIS}:{fake}"}
    [rec] = _measure(CHUNK_ON_PREFIX, [Planned("HWTUNE_TORCH_MLA", tactic)], pool, candidate_override=overrides)
    assert rec.status == "wrong_answer" and rec.message.startswith("batch A"), rec.message
    assert rec.stats is None


# --- what is planned where ------------------------------------------------------------------------------------


def test_mha_tactics_are_planned_for_prefill_only() -> None:
    prefill = plan_candidates(CHUNK_ON_PREFIX, CPU_PROFILE)
    runnable = sorted((p.backend, p.tactic) for p in prefill if p.runnable)
    assert runnable == [("HWTUNE_TORCH_MLA", t) for t in ("eager", "mha-eager", "mha-sdpa-math")]
    why = {(p.backend, p.tactic): " ".join(p.reasons) for p in prefill if not p.runnable}
    assert "GPUs only" in why[("FLASHINFER_FA_MLA", "mha-fa3")] and ("HWTUNE_TORCH_MLA", "mha-sdpa-flash") in why
    for phase, kw in (("decode", {}), ("mixed", dict(query_len=8, num_prefill=1))):
        planned = plan_candidates(AttentionWorkload(TP8, phase, 2, 64, **kw), CPU_PROFILE)
        assert not [p for p in planned if p.tactic.startswith("mha-")], phase


def test_a_non_mla_problem_is_refused() -> None:
    p = build_problem(AttentionWorkload(AttentionSpec(8, 2, 64), "prefill", 2, 32, query_len=8), "cpu")
    with pytest.raises(TypeError, match="MLA problem"):
        TorchMlaPrefillRunner("mha-eager").prepare(p)


# --- GPU: every MLA prefill candidate at DeepSeek-V3 shapes ------------------------------------------------------

TP1 = attention_spec(DSV3, 1)  # 128 heads
GPU_WORKLOADS = {
    "tp8-chunk512-on-2k": AttentionWorkload(TP8, "prefill", 2, 2048, query_len=512),
    "tp8-chunk2k-no-prefix": AttentionWorkload(TP8, "prefill", 2, 2048, query_len=2048),
    "tp8-ragged-page64": AttentionWorkload(
        dataclasses.replace(TP8, block_size=64), "prefill", 3, 4096, query_len=1024, context_lens=(4096, 1024, 2500)
    ),
    "tp8-fp8-latent": AttentionWorkload(dataclasses.replace(TP8, kv_cache_dtype="fp8"), "prefill", 2, 4096, 512),
    "tp1-chunk256-on-1k": AttentionWorkload(TP1, "prefill", 2, 1024, query_len=256),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_WORKLOADS))
def test_every_mla_prefill_tactic_on_gpu(name: str) -> None:
    """Every catalogue-valid mha-* tactic passes the gate and is timed; FlashInfer's ragged fa2 (and fa3 on SM 9.0)
    must; a tactic may only be unsupported with a reason (SDPA kernels refusing 192 / 128 or a mask)."""
    from hwtune.core import catalogue
    from hwtune.core.detect import detect

    w = GPU_WORKLOADS[name]
    profile = detect()
    planned = [
        p
        for p in plan_candidates(w, profile)
        if p.runnable and p.tactic.startswith("mha-") and catalogue.get("attention", p.backend).probe
    ]
    expected = {"mha-fa2", "mha-eager"} | ({"mha-fa3"} if profile.compute_capability == (9, 0) else set())
    assert expected <= {p.tactic for p in planned}
    records = measure_attention(w, planned, device="cuda", profile=profile, timing=TimingOptions(time_cap_s=0.3))
    status = {r.tactic: (r.status, r.message[:300]) for r in records}
    bad = {t: s for t, s in status.items() if s[0] not in ("ok", "unsupported")}
    assert not bad, status
    assert all(status[t][0] == "ok" for t in expected), status

"""MLA candidates through the whole measurement path (catalogue validation, worker, gate, timing).

On the CPU: HWTUNE_TORCH_MLA (decode, speculative decode, DCP, DCP with speculative decode, fp8 latent, page size 1,
prefill, mixed batches), faulty MLA runners that the gate must record ``wrong_answer``, hwtune's Triton MLA kernel
through the same worker in Triton's interpreter, and FlashInfer's MLA candidate reported unavailable with its
reason. On a GPU (marked ``gpu``): every MLA candidate at DeepSeek-V3 shapes.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from hwtune.core import catalogue
from hwtune.core.devices import CPU_PROFILE, simulated
from hwtune.core.model_config import attention_spec, load_model_config
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.probes.attention.candidates.base import Candidate, Unsupported
from hwtune.probes.attention.candidates.mla_flashinfer import FlashInferMlaCandidate
from hwtune.probes.attention.candidates.mla_flashmla import FlashMlaCandidate
from hwtune.probes.attention.candidates.mla_torch import TorchMlaRunner
from hwtune.probes.attention.candidates.mla_triton import TritonMlaCandidate
from hwtune.probes.attention.measure import Planned, measure_attention, plan_candidates
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.timing import TimingOptions

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
FAST = TimingOptions(time_cap_s=0.05, min_reps=4, batch=4, warmup=1)
DSV3 = load_model_config(MODELS / "deepseek-v3.json")
TP8 = attention_spec(DSV3, 8)  # 16 heads, 512 + 64, bf16, block 16
TORCH = [Planned("HWTUNE_TORCH_MLA", "eager")]
THIS = "tests.probes.test_mla_pipeline"


@pytest.fixture(scope="module")
def pool():
    with WorkerPool() as p:
        yield p


def _measure(w: AttentionWorkload, planned: list[Planned], pool: WorkerPool, **kw):  # noqa: ANN003, ANN202
    return measure_attention(w, planned, device="cpu", profile=CPU_PROFILE, timing=FAST, pool=pool, **kw)


@pytest.mark.parametrize(
    "workload",
    [
        AttentionWorkload(TP8, "decode", 3, 200, context_lens=(200, 33, 120)),
        AttentionWorkload(dataclasses.replace(TP8, spec_tokens=2), "decode", 2, 150, query_len=3),
        AttentionWorkload(dataclasses.replace(TP8, dcp_size=2), "decode", 2, 100),
        AttentionWorkload(dataclasses.replace(TP8, dcp_size=2, spec_tokens=2), "decode", 2, 100, query_len=3),
        AttentionWorkload(dataclasses.replace(TP8, kv_cache_dtype="fp8"), "decode", 2, 90),
        AttentionWorkload(dataclasses.replace(TP8, block_size=1), "decode", 2, 40),
        AttentionWorkload(TP8, "prefill", 2, 64, query_len=24),
        AttentionWorkload(TP8, "mixed", 3, 64, query_len=24, num_prefill=1),
    ],
    ids=["decode-ragged", "spec-decode", "dcp2", "dcp2-spec", "fp8-latent", "page1", "prefill", "mixed"],
)
def test_torch_mla_through_the_worker(pool: WorkerPool, workload: AttentionWorkload) -> None:
    [rec] = _measure(workload, TORCH, pool)
    assert rec.status == "ok", rec.message
    assert rec.error["rel_l2"] < (5e-2 if workload.spec.kv_cache_dtype.startswith("fp8") else 2e-2)
    assert rec.error["lse_max_abs"] < 6e-2
    if workload.spec.dcp_size > 1:
        assert rec.error["dcp.rel_l2"] < 2e-2


# --- faulty MLA runners: the gate must say wrong_answer -------------------------------------------------------


class _LatentWidthScale(TorchMlaRunner):
    """Scales scores by 1/sqrt(576) (the latent width) instead of the model's 1/sqrt(qk_nope + rope)."""

    def prepare(self, problem) -> None:  # noqa: ANN001
        super().prepare(dataclasses.replace(problem, softmax_scale=1 / math.sqrt(problem.dims.latent)))


class _SwappedParts(TorchMlaRunner):
    """Reads each latent row as kpe first, then ckv."""

    def prepare(self, problem) -> None:  # noqa: ANN001
        lora = problem.dims.lora
        cache = torch.cat([problem.kv_cache[..., lora:], problem.kv_cache[..., :lora]], -1)
        super().prepare(dataclasses.replace(problem, kv_cache=cache))


class _StaleLengths(TorchMlaRunner):
    """Keeps the first batch's lengths, as a stale plan would."""

    def prepare(self, problem) -> None:  # noqa: ANN001
        if self.problem is not None:
            problem = dataclasses.replace(problem, seq_lens_list=self.problem.seq_lens_list)
        super().prepare(problem)


class _Fake(Candidate):
    backend = "HWTUNE_TORCH_MLA"
    runner_cls: type = TorchMlaRunner

    def runner(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return self.runner_cls()


class LatentWidthScale(_Fake):
    runner_cls = _LatentWidthScale


class SwappedParts(_Fake):
    runner_cls = _SwappedParts


class StaleLengths(_Fake):
    runner_cls = _StaleLengths


@pytest.mark.parametrize(
    "fake, where",
    [("LatentWidthScale", "batch A"), ("SwappedParts", "batch A"), ("StaleLengths", "batch B")],
)
def test_faulty_mla_runners_are_wrong_answers(pool: WorkerPool, fake: str, where: str) -> None:
    w = AttentionWorkload(TP8, "decode", 3, 100, context_lens=(100, 40, 70))
    [rec] = _measure(w, TORCH, pool, candidate_override={"HWTUNE_TORCH_MLA": f"{THIS}:{fake}"})
    assert rec.status == "wrong_answer" and rec.message.startswith(where), rec.message
    assert rec.stats is None


# --- hwtune's Triton MLA kernel through the same worker, in Triton's interpreter -----------------------------


class InterpretedTritonMla(TritonMlaCandidate):
    """HWTUNE_TRITON_MLA allowed on the CPU, for a worker started with TRITON_INTERPRET=1."""

    def unavailable(self, workload, tactic, device):  # noqa: ANN001, ANN201
        return None


@pytest.mark.parametrize(
    "spec, query_len",
    [
        (dataclasses.replace(TP8, dtype="float16", dcp_size=2, spec_tokens=2), 3),
        (dataclasses.replace(TP8, dtype="float16", kv_cache_dtype="fp8", block_size=48), 1),
    ],
    ids=["dcp2-spec-fp16", "fp8-page48"],
)
def test_triton_mla_through_the_worker_in_the_interpreter(spec: AttentionSpec, query_len: int) -> None:
    """The whole gate (batch A, DCP split-and-merge, batch B through the same runner) and CPU timing, with the
    kernel interpreted (fp16 queries: the interpreter's bf16 dots need tests/kernels' fix, not loaded here)."""
    pytest.importorskip("triton", reason="triton is not installed")
    w = AttentionWorkload(spec, "decode", 2, 100, query_len=query_len, context_lens=(100, 61))
    with WorkerPool(env={"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}) as interp:
        [rec] = measure_attention(
            w, [Planned("HWTUNE_TRITON_MLA", "auto")], device="cpu", profile=CPU_PROFILE, pool=interp,
            timing=TimingOptions(time_cap_s=0.01, min_reps=2, batch=2, warmup=1),
            candidate_override={"HWTUNE_TRITON_MLA": f"{THIS}:InterpretedTritonMla"},
        )  # fmt: skip
    assert rec.status == "ok", rec.message
    assert rec.error["rel_l2"] < 5e-2 and rec.extra["config"].startswith("h16-")


# --- what cannot run here says why ---------------------------------------------------------------------------


def test_on_the_cpu_only_the_torch_mla_candidate_is_runnable() -> None:
    w = AttentionWorkload(TP8, "decode", 2, 64)
    planned = plan_candidates(w, CPU_PROFILE)
    assert sorted((p.backend, p.tactic) for p in planned if p.runnable) == [("HWTUNE_TORCH_MLA", "eager")]
    why = {p.backend: " ".join(p.reasons) for p in planned if not p.runnable}
    assert "runs on NVIDIA GPUs only" in why["FLASHINFER_FA_MLA"] and "GPUs only" in why["HWTUNE_TRITON_MLA"]
    assert "TORCH_SDPA" not in why  # not an MLA backend: not a candidate at all


def test_a_plan_list_of_both_kinds_keeps_the_workloads_kind() -> None:
    """The quick list names MLA and non-MLA backends: each workload plans those of its kind only."""
    names = catalogue.quick_backends("attention", "cpu")
    assert "HWTUNE_TORCH_MLA" in names and "TORCH_SDPA" in names
    mla = plan_candidates(AttentionWorkload(TP8, "decode", 2, 64), CPU_PROFILE, names)
    assert {p.backend for p in mla} == {"HWTUNE_TORCH_MLA"}
    gqa = plan_candidates(AttentionWorkload(AttentionSpec(8, 2, 64), "decode", 2, 64), CPU_PROFILE, names)
    assert "HWTUNE_TORCH_MLA" not in {p.backend for p in gqa} and "TORCH_SDPA" in {p.backend for p in gqa}
    alone = plan_candidates(AttentionWorkload(TP8, "decode", 2, 64), CPU_PROFILE, ["TORCH_SDPA"])
    assert alone and all(not p.runnable and "not an MLA backend" in p.reasons[0] for p in alone)  # recorded, with why


def test_flashinfer_mla_is_unavailable_here_with_the_reason(pool: WorkerPool) -> None:
    w = AttentionWorkload(TP8, "decode", 2, 64)
    cand = FlashInferMlaCandidate()
    assert cand.unavailable(w, "fa3", "cpu") == "FlashInfer's MLA kernels run on CUDA GPUs only"
    if not torch.cuda.is_available():
        assert "CUDA build of torch" in cand.unavailable(w, "fa2", "cuda") or "cannot be imported" in (
            cand.unavailable(w, "fa2", "cuda") or ""
        )
    [rec] = _measure(w, [Planned("FLASHINFER_FA_MLA", "fa2")], pool)  # forced past the catalogue
    assert rec.status == "unsupported" and "CUDA GPUs only" in rec.message


def test_flashmla_is_planned_at_its_page_size_and_for_decode_only() -> None:
    """FLASHMLA: refused at another page size (the catalogue's reason), unavailable off CUDA with the reason, and
    its runner refuses prefill (vLLM's MLA prefill never runs FlashMLA)."""
    from hwtune.core.detect import detect

    gpu = detect() if torch.cuda.is_available() else simulated("h100")
    page16 = plan_candidates(AttentionWorkload(TP8, "decode", 2, 64), gpu, ["FLASHMLA"], assume_installed=True)
    assert [p.runnable for p in page16] == [False] and "64" in " ".join(page16[0].reasons)
    page64 = dataclasses.replace(TP8, block_size=64)
    [ok] = plan_candidates(AttentionWorkload(page64, "decode", 2, 64), gpu, ["FLASHMLA"], assume_installed=True)
    assert ok.runnable and ok.tactic == "default"
    cand = FlashMlaCandidate()
    assert cand.unavailable(AttentionWorkload(page64, "decode", 2, 64), "default", "cpu") == (
        "FlashMLA runs on CUDA GPUs only"
    )
    with pytest.raises(Unsupported, match="decode kernel"):
        cand.runner(AttentionWorkload(page64, "prefill", 1, 512, query_len=512), "default", "cuda")
    prefill = AttentionWorkload(page64, "prefill", 1, 512, query_len=512)
    [refused] = plan_candidates(prefill, gpu, ["FLASHMLA"], assume_installed=True)  # recorded with why, no worker
    assert not refused.runnable and "in decode only" in refused.reasons[0]


def test_flash_attn_mla_is_vllms_first_on_hopper_and_measures_decode_only() -> None:
    """FLASH_ATTN_MLA (vLLM's FA3 MLA decode): planned for decode at 16-token pages on Hopper, not for fp8 caches, not
    on Blackwell (FA3 is SM 9.x), prefill recorded unsupported with the reason; first in hwtune's own Hopper order,
    as in vLLM 0.33.0's; unavailable off CUDA with the reason."""
    from hwtune.core.catalogue.priorities import backend_order
    from hwtune.probes.attention.candidates.mla_flash_attn import FlashAttnMlaCandidate

    h100, b200 = simulated("h100"), simulated("b200")
    decode = AttentionWorkload(TP8, "decode", 8, 4096)
    [ok] = plan_candidates(decode, h100, ["FLASH_ATTN_MLA"], assume_installed=True)
    assert ok.runnable and ok.tactic == "default"
    fp8 = AttentionWorkload(dataclasses.replace(TP8, kv_cache_dtype="fp8"), "decode", 8, 4096)
    for w, dev, why in ((fp8, h100, "fp8"), (decode, b200, "compute capability")):
        [no] = plan_candidates(w, dev, ["FLASH_ATTN_MLA"], assume_installed=True)
        assert not no.runnable and why in " ".join(no.reasons)
    [pre] = plan_candidates(
        AttentionWorkload(TP8, "prefill", 1, 512, query_len=512), h100, ["FLASH_ATTN_MLA"], assume_installed=True
    )
    assert not pre.runnable and "in decode only" in pre.reasons[0]
    assert backend_order("attention", True, "ampere_hopper")[:2] == ("FLASH_ATTN_MLA", "FLASHMLA")
    assert FlashAttnMlaCandidate().unavailable(decode, "default", "cpu") == "FlashAttention-3 runs on CUDA GPUs only"


# --- GPU: every MLA candidate at DeepSeek-V3 shapes ------------------------------------------------------------

TP1 = attention_spec(DSV3, 1)  # 128 heads
GPU_WORKLOADS = {
    "tp8-b16-8k-page64": AttentionWorkload(dataclasses.replace(TP8, block_size=64), "decode", 16, 8192),
    "tp1-b4-4k-page1": AttentionWorkload(dataclasses.replace(TP1, block_size=1), "decode", 4, 4096),
    "tp1-b8-2k-page16-spec2": AttentionWorkload(dataclasses.replace(TP1, spec_tokens=2), "decode", 8, 2048, 3),
    "tp8-b8-4k-dcp2": AttentionWorkload(dataclasses.replace(TP8, dcp_size=2, block_size=32), "decode", 8, 4096),
    "tp8-b8-4k-fp8": AttentionWorkload(
        dataclasses.replace(TP8, kv_cache_dtype="fp8", block_size=64), "decode", 8, 4096
    ),
    "tp8-prefill-512-on-2k": AttentionWorkload(TP8, "prefill", 2, 2048, query_len=512),
    # FlashMLA's page size, 128 heads, and causal speculative-decode tokens (FLASHMLA where vllm is installed)
    "tp1-b4-3k-page64": AttentionWorkload(dataclasses.replace(TP1, block_size=64), "decode", 4, 3000),
    "tp8-b8-2k-page64-spec2": AttentionWorkload(
        dataclasses.replace(TP8, spec_tokens=2, block_size=64), "decode", 8, 2048, 3
    ),
}
#: What a valid candidate may still refuse, with its reason: hwtune's FLASHMLA runs 16-bit caches only.
NOT_WIRED = {("FLASHMLA", "default"): "fp8 path is not wired"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_WORKLOADS))
def test_every_mla_candidate_on_gpu(name: str) -> None:
    """Every catalogue-valid MLA candidate passes the gate and is timed (FlashInfer's fp8 cache with bf16 queries;
    nothing valid may come back wrong, crashed or errored)."""
    from hwtune.core.detect import detect

    w = GPU_WORKLOADS[name]
    profile = detect()
    planned = [p for p in plan_candidates(w, profile) if p.runnable and catalogue.get("attention", p.backend).probe]
    assert {p.backend for p in planned} >= {"HWTUNE_TRITON_MLA", "HWTUNE_TORCH_MLA", "FLASHINFER_FA_MLA"}
    records = measure_attention(w, planned, device="cuda", profile=profile, timing=TimingOptions(time_cap_s=0.3))
    bad = {
        (r.backend, r.tactic): (r.status, r.message[:300])
        for r in records
        if r.status != "ok"
        and not (r.status == "unsupported" and NOT_WIRED.get((r.backend, r.tactic), "\0") in r.message)
    }
    assert not bad, bad

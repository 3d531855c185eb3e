"""The shapes of the models people serve, through the correctness gate on the CPU (issue 17).

Each model's attention spec per rank comes from its config.json (tests/data/models) at the tensor-parallel size it is
served at: head sizes 64 (gpt-oss, with sinks and a window), 96 (Phi-3.5, MHA), 128 (GQA 4:1 Llama-3.1-8B, 7:1
Qwen2.5-7B, 16:1 ChatGLM2, one KV head per rank for Llama-3.3-70B at TP 8, fp8 KV), 256 (Gemma-2: soft-cap and
window). Windows are shortened to fit the small contexts here, so that they mask. Every candidate the catalogue plans
as runnable must pass the gate or refuse with a reason, and at least one must pass: on the CPU for the models a CPU
backend serves (Gemma-2's soft-cap and an fp8 cache have none: the planner must say so), on a GPU (marked ``gpu``)
for all of them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from hwtune.core.devices import CPU_PROFILE
from hwtune.core.model_config import attention_spec, load_model_config
from hwtune.core.types import AttentionWorkload
from hwtune.probes.attention.measure import measure_attention, plan_candidates
from hwtune.probes.attention.worker import WorkerPool
from hwtune.probes.timing import TimingOptions

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "data" / "models"
PYTHONPATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
FAST = TimingOptions(time_cap_s=0.02, min_reps=3, batch=3, warmup=1)
SERVED = {  # model: (tensor-parallel size, extra spec fields)
    "phi-3.5-vision-instruct": (1, {}),
    "gpt-oss-120b": (8, {}),
    "llama-3.1-8b": (1, {}),
    "llama-3.1-8b-fp8kv": (1, {"kv_cache_dtype": "fp8_e4m3"}),
    "qwen2.5-7b-instruct": (1, {}),
    "chatglm2-6b": (1, {}),
    "llama-3.3-70b-instruct": (8, {}),
    "gemma-2-9b-it": (1, {}),
}


def _spec(name: str):  # noqa: ANN202
    tp, extra = SERVED[name]
    spec = attention_spec(load_model_config(MODELS / f"{name.removesuffix('-fp8kv')}.json"), tp)
    window = None if spec.sliding_window is None else min(spec.sliding_window, 24)
    return dataclasses.replace(spec, sliding_window=window, block_size=16, **extra)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(env={"PYTHONPATH": PYTHONPATH}) as p:
        yield p


def test_the_models_cover_the_issue_shapes() -> None:
    specs = {name: _spec(name) for name in SERVED}
    assert {s.head_size for s in specs.values()} >= {64, 96, 128, 256}
    assert {s.num_heads // s.num_kv_heads for s in specs.values()} >= {1, 4, 8}  # MHA, GQA 4:1 and 8:1
    assert specs["llama-3.3-70b-instruct"].num_kv_heads == 1  # one KV head per rank at TP 8
    assert specs["gemma-2-9b-it"].logits_soft_cap and specs["gemma-2-9b-it"].sliding_window
    assert specs["gpt-oss-120b"].sinks and specs["llama-3.1-8b-fp8kv"].kv_cache_dtype == "fp8_e4m3"


GPU_ONLY = {"gemma-2-9b-it": "soft-cap 50", "llama-3.1-8b-fp8kv": "kv-cache dtype fp8_e4m3"}


def _workload(name: str, phase: str) -> AttentionWorkload:
    if phase == "decode":
        return AttentionWorkload(_spec(name), "decode", batch=2, context_len=48, context_lens=(48, 29))
    return AttentionWorkload(_spec(name), "prefill", batch=2, context_len=40, query_len=16)


#: Wrong answers already found and documented, which the gate must keep catching (stored as ``wrong_answer``, so never
#: selected): torch's cuDNN SDPA kernel with a boolean mask on the H100 (torch 2.11 / cuDNN 9.19; docs/probes.md
#: "Wrong answers and crashes found"); the workloads here are ragged, so SDPA needs a mask. Any other one fails.
KNOWN_WRONG_ON_GPU = {"TORCH_SDPA/cudnn"}


def _gate(
    w: AttentionWorkload,
    planned: list,
    device: str,
    profile,  # noqa: ANN001
    pool: WorkerPool | None,
    known_wrong: frozenset[str] | set[str] = frozenset(),
) -> None:
    records = measure_attention(w, planned, device=device, profile=profile, timing=FAST, pool=pool)
    status = {f"{r.backend}/{r.tactic}": (r.status, r.message[:300]) for r in records}
    failed = {
        k: v
        for k, v in status.items()
        if v[0] not in ("ok", "unsupported") and not (v[0] == "wrong_answer" and k in known_wrong)
    }
    assert not failed, f"{w.spec.architecture} {w.phase}: {failed}"
    assert any(s == "ok" for s, _ in status.values()), status


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("name", sorted(set(SERVED) - set(GPU_ONLY)))
def test_served_model_shapes_pass_the_gate_on_cpu(pool: WorkerPool, name: str, phase: str) -> None:
    w = _workload(name, phase)
    planned = [p for p in plan_candidates(w, CPU_PROFILE) if p.runnable]
    assert planned, f"no CPU candidate for {name}"
    _gate(w, planned, "cpu", CPU_PROFILE, pool)


@pytest.mark.parametrize("name", sorted(GPU_ONLY))
def test_cpu_planner_says_why_gpu_only_shapes_have_no_cpu_candidate(name: str) -> None:
    planned = plan_candidates(_workload(name, "decode"), CPU_PROFILE)
    assert not any(p.runnable for p in planned)
    for backend in ("TORCH_SDPA", "FLEX_ATTENTION"):
        reasons = [r for p in planned if p.backend == backend for r in p.reasons]
        assert any(GPU_ONLY[name] in r for r in reasons), reasons


@pytest.mark.gpu
@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("name", sorted(SERVED))
def test_served_model_shapes_pass_the_gate_on_gpu(name: str, phase: str) -> None:
    from hwtune.core.detect import detect

    profile = detect()
    w = _workload(name, phase)
    planned = [p for p in plan_candidates(w, profile) if p.runnable]
    assert planned, f"no GPU candidate for {name}"
    _gate(w, planned, "cuda", profile, None, KNOWN_WRONG_ON_GPU)

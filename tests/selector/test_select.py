"""Static selection: orders per family, narrowing by demanded capabilities, explicit requests, errors."""

import time

import pytest

import hwtune
from hwtune import All2AllSpec, AttentionSpec, BackendNotValidError, NoValidBackendError
from hwtune.core import packages
from hwtune.core.errors import UnknownBackendError
from hwtune.selector.api import _cached
from hwtune.selector.engine_flags import NoEngineEquivalentError

LLAMA = AttentionSpec(32, 8, 128)


def select(spec=LLAMA, device="h100", **kw):
    return hwtune.select_attention(spec, device=device, assume_installed=True, **kw)


def test_sm100_ranks_flashinfer_first() -> None:
    sel = select(device="sm100")
    assert [r.backend for r in sel.ranked][:3] == ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN"]
    assert sel.tactic == "trtllm-gen" and all(r.source == "static" for r in sel.ranked)


def test_sm90_ranks_flash_attn_first() -> None:
    sel = select(device="sm90")
    assert [r.backend for r in sel.ranked][:3] == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]
    assert sel.tactic == "fa3"


@pytest.mark.parametrize(
    "device, first, tactic",
    [
        ("sm80", "FLASH_ATTN", "fa2"),
        ("sm120", "FLASH_ATTN", "fa2"),
        ("b200", "FLASHINFER", "trtllm-gen"),
        ("sm103", "FLASHINFER", "trtllm-gen"),
    ],
)
def test_each_family(device: str, first: str, tactic: str) -> None:
    sel = select(device=device)
    assert sel.backend == first and sel.tactic == tactic


def test_cpu_device_offers_only_cpu_backends() -> None:
    sel = hwtune.select_attention(LLAMA, device="cpu")
    assert [r.backend for r in sel.ranked] == ["TORCH_SDPA", "FLEX_ATTENTION"]
    assert sel.tactic == "math"
    assert any("runs on NVIDIA GPUs only" in r for r in sel.rejected["FLASHINFER"])


def test_dcp_without_lse_is_an_actionable_error() -> None:
    spec = AttentionSpec(32, 8, 128, dcp_size=2)
    with pytest.raises(BackendNotValidError) as err:
        select(spec, device="sm90", backend="TRITON_ATTN")
    msg = str(err.value)
    assert (
        "Decode Context Parallelism (DCP, --dcp 2) needs an attention backend that returns the softmax "
        "log-sum-exp (LSE) during decode; vLLM 0.33.0's TRITON_ATTN does not."
    ) in msg
    assert "Valid vLLM 0.33.0 attention backends here: FLASH_ATTN, FLASHINFER." in msg
    assert "Choose one with --backend or HWTUNE_ATTENTION_BACKEND, or run without DCP (--dcp 1)." in msg
    assert err.value.valid == ["FLASH_ATTN", "FLASHINFER"]
    # vLLM 0.33.0 narrows DCP to the impls that set supports_dcp: FlashAttentionImpl and FlashInferImpl (earlier
    # hwtune facts counted vLLM's TRITON_ATTN, which was hwtune's own kernel under vLLM's name)
    assert [r.backend for r in select(spec, device="sm90").ranked] == ["FLASH_ATTN", "FLASHINFER"]
    # hwtune's own catalogue (no engine): its own Triton kernel returns the LSE; TORCH_SDPA does not
    own = select(spec, device="sm90", engine=None)
    assert [r.backend for r in own.ranked] == ["FLASH_ATTN", "FLASHINFER", "HWTUNE_TRITON_ATTN"]
    with pytest.raises(BackendNotValidError, match="LSE.* during decode; TORCH_SDPA does not"):
        select(spec, device="sm90", backend="TORCH_SDPA", engine=None)


def test_dcp_steers_flashinfer_tactics_to_lse_returning_ones() -> None:
    spec = AttentionSpec(32, 8, 128, dcp_size=2)
    sel = select(spec, device="sm100", backend="FLASHINFER")
    assert sel.tactics["decode"] in ("fa2-tc", "fa2")  # trtllm-gen and xqa return no LSE


@pytest.mark.parametrize("kv", ["turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc"])
def test_vllm_turboquant_caches_select_vllms_turboquant(kv: str) -> None:
    sel = select(AttentionSpec(32, 8, 128, kv_cache_dtype=kv), device="sm90")
    assert sel.backend == "TURBOQUANT" and [r.backend for r in sel.ranked] == ["TURBOQUANT"]
    assert sel.to_vllm_args() == ["--attention-backend", "TURBOQUANT", "--block-size", "16", "--kv-cache-dtype", kv]
    for name in ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"):
        assert any(f"does not support kv-cache dtype {kv}" in r for r in sel.rejected[name]), name


@pytest.mark.parametrize("kv", ["turboquant_4bit", "turboquant_8bit"])
def test_hwtunes_turboquant_formats_are_hwtunes_kernel_only(kv: str) -> None:
    spec = AttentionSpec(32, 8, 128, kv_cache_dtype=kv)
    with pytest.raises(NoValidBackendError) as err:
        select(spec, device="sm90")  # vLLM knows no such kv-cache dtype: its TURBOQUANT is another format
    assert "HWTUNE_TURBOQUANT is not one of vLLM 0.33.0's backends" in str(err.value)
    sel = select(spec, device="sm90", engine=None)
    assert sel.backend == "HWTUNE_TURBOQUANT" and [r.backend for r in sel.ranked] == ["HWTUNE_TURBOQUANT"]
    for name, reasons in sel.rejected.items():
        if name.endswith("MLA") or name == "FLASHMLA":
            continue
        assert any(f"does not support kv-cache dtype {kv}" in r for r in reasons), name


def test_fp8_e5m2_goes_only_where_declared() -> None:
    sel = select(AttentionSpec(32, 8, 128, kv_cache_dtype="fp8_e5m2"), device="sm90")
    assert [r.backend for r in sel.ranked] == ["FLASHINFER", "TRITON_ATTN"]  # vLLM 0.33.0: FA takes e4m3 only
    own = select(AttentionSpec(32, 8, 128, kv_cache_dtype="fp8_e5m2"), device="sm90", engine=None)
    assert [r.backend for r in own.ranked] == ["FLASHINFER"]


def test_sinks_on_hopper() -> None:
    spec = AttentionSpec(64, 8, 64, sinks=True)
    sel = select(spec, device="sm90")  # vLLM 0.33.0: FA3, FlashInfer through XQA on SM 9.0, its Triton kernel
    assert [r.backend for r in sel.ranked] == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"] and sel.tactic == "fa3"
    own = select(spec, device="sm90", engine=None)  # the kernels hwtune runs with sinks: FlashInfer's sink wrapper
    assert [r.backend for r in own.ranked] == ["FLASH_ATTN", "FLASHINFER", "FLEX_ATTENTION", "TORCH_SDPA"]
    assert "fa2" not in [t for t in own.ranked[1].tactics.values()]  # CUDA-core decode drops sinks: refused
    sel = select(spec, device="sm100")
    assert sel.backend == "FLASHINFER" and sel.tactic == "trtllm-gen"
    assert "FLASHINFER" in select(spec, device="sm80").rejected  # no sinks on SM 8.x (FlashInferBackend.supports_sink)


def test_mla_selects_mla_backends_per_family() -> None:
    mla = AttentionSpec(16, 1, 576, use_mla=True, kv_lora_rank=512, qk_rope_head_dim=64, block_size=64)
    assert [r.backend for r in select(mla, device="sm100").ranked] == ["FLASHINFER_MLA", "TRITON_MLA"]
    assert [r.backend for r in select(mla, device="sm90").ranked] == ["FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"]
    assert [r.backend for r in select(mla, device="sm120").ranked] == ["TRITON_MLA"]  # vLLM 0.33.0: SM 12.x list
    sel = select(mla, device="sm90", engine=None)
    assert sel.rejected["FLASHINFER"] == (
        "This model uses multi-head latent attention (MLA); FLASHINFER is not an MLA backend.",
    )


def test_nothing_valid_lists_every_backend() -> None:
    spec = AttentionSpec(32, 8, 72, kv_cache_dtype="fp8_e5m2", dcp_size=2)
    with pytest.raises(NoValidBackendError) as err:
        select(spec, device="sm90")
    assert set(err.value.rejected) >= {"FLASHINFER", "FLASH_ATTN", "TORCH_SDPA"}
    assert "head size 72" in str(err.value)


def test_env_var_request_is_honoured_and_unknown_names_list_known_ones(monkeypatch) -> None:
    monkeypatch.setenv("HWTUNE_ATTENTION_BACKEND", "triton_attn")
    assert select(device="sm90").backend == "TRITON_ATTN"  # vLLM's
    monkeypatch.setenv("HWTUNE_ATTENTION_BACKEND", "NOPE")
    with pytest.raises(UnknownBackendError, match="known attention backends: FLASHINFER, FLASH_ATTN, TRITON_ATTN"):
        select(device="sm90")


def test_backend_argument_beats_env(monkeypatch) -> None:
    monkeypatch.setenv("HWTUNE_ATTENTION_BACKEND", "TRITON_ATTN")
    assert select(device="sm90", backend="FLASHINFER").backend == "FLASHINFER"


def test_one_sided_all2all_with_bf16_names_nvfp4() -> None:
    spec = All2AllSpec(ep_size=8, num_experts=256, topk=8, hidden_size=7168, quant_dtype="bf16")
    with pytest.raises(BackendNotValidError) as err:
        hwtune.select_all2all(spec, device="b200", backend="flashinfer_nvlink_one_sided", assume_installed=True)
    msg = str(err.value)
    assert "flashinfer_nvlink_one_sided accepts only nvfp4 activations; bf16 was asked" in msg
    assert "flashinfer_nvlink_two_sided" in msg and "allgather_reducescatter" in msg
    assert "quantize activations to nvfp4 (--quant-dtype nvfp4)" in msg
    ok = hwtune.select_all2all(spec.__class__(8, 256, 8, 7168, "nvfp4"), device="b200", assume_installed=True)
    assert ok.backend == "flashinfer_nvlink_one_sided"


def test_all2all_static_orders() -> None:
    spec = All2AllSpec(ep_size=8, num_experts=256, topk=8, hidden_size=7168, quant_dtype="fp8")
    hopper = hwtune.select_all2all(spec, device="h100", assume_installed=True)
    assert hopper.backend == "deepep_low_latency"
    cpu = hwtune.select_all2all(spec, device="cpu")
    assert [r.backend for r in cpu.ranked] == ["allgather_reducescatter", "nccl_alltoallv", "naive"]


def test_missing_packages_are_reasons_read_from_metadata(monkeypatch) -> None:
    real = packages.installed_version.__wrapped__
    fake = {"flashinfer-python": None, "flashinfer": None, "flash-attn": "2.1.0", "vllm": None}

    def version(dist: str):
        return fake[dist] if dist in fake else real(dist)

    monkeypatch.setattr("hwtune.core.packages.installed_version", version)
    monkeypatch.setattr("hwtune.core.validation.installed_version", version)
    monkeypatch.setattr("hwtune.core.packages.torch_cuda_version", lambda: "13.0")
    monkeypatch.setattr("hwtune.core.validation.torch_cuda_version", lambda: "13.0")
    _cached.cache_clear()
    sel = hwtune.select_attention(LLAMA, device="sm90")
    fi = " ".join(sel.rejected["FLASHINFER"])
    assert "flashinfer-python is not installed (pip install 'flashinfer-python>=0.2.0')" in fi
    fa = " ".join(sel.rejected["FLASH_ATTN"])
    assert "flash-attn 2.1.0 is installed but flash-attn>=2.5 is needed" in fa
    _cached.cache_clear()


def test_cpu_torch_is_a_reason_not_a_crash(monkeypatch) -> None:
    monkeypatch.setattr("hwtune.core.validation.torch_cuda_version", lambda: None)
    monkeypatch.setattr("hwtune.core.validation.installed_version", lambda d: "2.13.0+cpu" if d == "torch" else "9.9")
    monkeypatch.setattr("hwtune.core.packages.installed_version", lambda d: "9.9")
    _cached.cache_clear()
    sel = hwtune.select_attention(LLAMA, device="sm90")
    assert any(
        "FlashInfer needs a CUDA build of torch; the installed torch 2.13.0+cpu is CPU-only" in r
        for r in sel.rejected["FLASHINFER"]
    )
    _cached.cache_clear()


def test_selection_json_shape_and_adapters() -> None:
    sel = select(device="sm100")
    d = sel.to_dict()
    assert d["backend"] == "FLASHINFER" and d["tactic"] == "trtllm-gen"
    assert d["ranked"][0] == {**d["ranked"][0], "backend": "FLASHINFER", "source": "static"}
    assert isinstance(d["rejected"], dict) and all(isinstance(v, list) for v in d["rejected"].values())
    assert d["engine"] == {"engine": "vllm", "version": "0.33.0"} and d["differences"] == []
    assert sel.to_vllm_args() == ["--attention-backend", "FLASHINFER", "--block-size", "16"]
    with pytest.raises(NoEngineEquivalentError, match="made for vLLM 0.33.0.*--engine sglang"):
        sel.to_sglang_args()
    assert select(device="sm100", engine="sglang").to_sglang_args() == [
        "--attention-backend",
        "trtllm_mha",
        "--page-size",
        "16",
    ]
    assert "with vLLM 0.33.0: FLASHINFER" in sel.explain() and "rejected:" in sel.explain()


def test_warm_selection_is_fast() -> None:
    select(device="sm90")
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        hwtune.select_attention(LLAMA, device="h100", assume_installed=True)
    per_call_us = (time.perf_counter() - t0) / n * 1e6
    assert per_call_us < 20, f"warm selection took {per_call_us:.1f} us"


def test_a_measured_hazard_is_told_where_it_applies_and_only_there() -> None:
    """FlashInfer one-sided failed at EP 2 for odd token counts (H200 x2): the spec cannot rule that out, so
    selection keeps it valid and tells the engine to pad; at EP 4 nothing is said."""
    ep2 = hwtune.select_all2all(All2AllSpec(2, 256, 8, 7168, "nvfp4"), device="b200", assume_installed=True)
    assert ep2.backend == "flashinfer_nvlink_one_sided"
    said = [n for n in ep2.notes if n.startswith("flashinfer_nvlink_one_sided:")]
    assert len(said) == 1 and "pad each rank's batch to an even number of tokens" in said[0]
    assert "pad each rank's batch" in ep2.explain()
    ep4 = hwtune.select_all2all(All2AllSpec(4, 256, 8, 7168, "nvfp4"), device="b200", assume_installed=True)
    assert not [n for n in ep4.notes if "pad each rank's batch" in n]
    bf16 = hwtune.select_all2all(All2AllSpec(2, 256, 8, 7168, "bf16"), device="b200", assume_installed=True)
    assert not [n for n in bf16.notes if "pad each rank's batch" in n]  # not valid there: nothing to warn

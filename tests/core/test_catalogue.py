"""Pin the key facts of each backend: a wrong declaration is the worst bug hwtune can have."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.core import catalogue
from hwtune.core.catalogue import AttentionRules, Feature
from hwtune.core.devices import simulated
from hwtune.core.types import (
    DTYPE_ALIASES,
    KV_CACHE_DTYPE_ALIASES,
    QUANT_DTYPE_ALIASES,
    All2AllSpec,
    AttentionSpec,
)
from hwtune.core.validation import check

ALL = catalogue.backends("attention") + catalogue.backends("all2all")


def test_names_match_the_engines() -> None:
    # hwtune's own Triton kernels are named apart from vLLM's TRITON_ATTN and TURBOQUANT (other kernels), which live
    # in the vLLM snapshot (hwtune/core/catalogue/engines/vllm.json), not among hwtune's records.
    assert catalogue.names("attention") == [
        "FLASHINFER",
        "FLASH_ATTN",
        "HWTUNE_TRITON_ATTN",
        "FLEX_ATTENTION",
        "HWTUNE_TURBOQUANT",
        "TORCH_SDPA",
        "FLASHINFER_MLA",
        "TRITON_MLA",
        "CUTLASS_MLA",
        "FLASH_ATTN_MLA",
        "FLASHMLA",
        "FLASHINFER_FA_MLA",
        "HWTUNE_TRITON_MLA",
        "HWTUNE_TORCH_MLA",
    ]
    assert sorted(catalogue.names("all2all")) == sorted(
        [
            "naive",
            "allgather_reducescatter",
            "deepep_high_throughput",
            "deepep_low_latency",
            "flashinfer_nvlink_one_sided",
            "flashinfer_nvlink_two_sided",
            "pplx",
            "nccl_alltoallv",
        ]
    )


@pytest.mark.parametrize("backend", ALL, ids=lambda b: b.name)
def test_every_declared_fact_names_its_source(backend: catalogue.Backend) -> None:
    for f in dataclasses.fields(backend.rules):
        value = getattr(backend.rules, f.name)
        if value is None:
            continue
        assert backend.sources.get(f.name), f"{backend.name}.{f.name} has no source"
    for extra in ("packages", "tactics"):
        assert backend.sources.get(extra), f"{backend.name}.{extra} has no source"
    if backend.rules.features:
        assert backend.sources.get("features")


@pytest.mark.parametrize("backend", ALL, ids=lambda b: b.name)
def test_backend_rules_are_complete_allowlists(backend: catalogue.Backend) -> None:
    """Fail closed: every rule field is set at backend level (tactics may leave fields None = inherit)."""
    for f in dataclasses.fields(backend.rules):
        if f.name in ("features", "max_topk", "interconnect", "kv_cache_dtype_min_cc"):
            continue
        assert getattr(backend.rules, f.name) is not None, f"{backend.name}.{f.name} unset"
    assert backend.tactics, f"{backend.name} declares no tactic"


def rules(name: str) -> AttentionRules:
    r = catalogue.get("attention", name).rules
    assert isinstance(r, AttentionRules)
    return r


def test_flashinfer_key_facts() -> None:
    r = rules("FLASHINFER")
    assert r.head_sizes.values == {64, 128, 256}
    assert r.block_sizes.values == {16, 32, 64}
    assert {"fp8_e4m3", "fp8_e5m2", "auto"} <= r.kv_cache_dtypes
    assert Feature.DECODE_LSE in r.features
    fi = catalogue.get("attention", "FLASHINFER")
    assert [t.name for t in fi.tactics] == ["fa2", "fa2-tc", "fa3", "xqa", "xqa-2x", "cudnn", "trtllm-gen", "cute-dsl"]
    trt = fi.effective(fi.tactic("trtllm-gen"))
    assert trt.kv_layouts == {"HND"} and Feature.DECODE_LSE not in trt.features
    assert fi.effective(fi.tactic("xqa")).features is not None
    assert Feature.DECODE_LSE not in fi.effective(fi.tactic("xqa")).features
    fa3 = fi.effective(fi.tactic("fa3"))
    assert [c.describe() for c in fa3.compute_capabilities] == ["SM 9.0"]


def test_xqa_2x_serves_only_the_sm90_fp8_kernel_it_was_measured_on() -> None:
    """xqa-2x doubles the sub-sequences of xqa's SM 9.0 fp8 kernel; bf16 caches and other GPUs run another kernel."""
    from hwtune.core.validation import check_tactic

    fi = catalogue.get("attention", "FLASHINFER")
    xqa2x = fi.tactic("xqa-2x")
    fp8 = AttentionSpec(32, 8, 128, kv_cache_dtype="fp8_e4m3")
    assert not check_tactic(fi, xqa2x, fp8, simulated("h100"), assume_installed=True)
    [bf16] = check_tactic(fi, xqa2x, AttentionSpec(32, 8, 128), simulated("h100"), assume_installed=True)
    assert "kv" in bf16.message.lower() and "xqa-2x" in bf16.message
    assert check_tactic(fi, xqa2x, fp8, simulated("b200"), assume_installed=True)
    assert not check_tactic(fi, fi.tactic("xqa"), AttentionSpec(32, 8, 128), simulated("h100"), assume_installed=True)


def test_flash_attn_key_facts() -> None:
    r = rules("FLASH_ATTN")
    assert r.head_sizes.allows(96) and r.head_sizes.allows(256) and not r.head_sizes.allows(100)
    assert not r.head_sizes.allows(264)
    assert r.block_sizes.allows(16) and r.block_sizes.allows(528) and not r.block_sizes.allows(8)
    assert "fp8_e5m2" not in r.kv_cache_dtypes
    assert Feature.DECODE_LSE in r.features


def test_sdpa_flex_and_triton_lse() -> None:
    assert Feature.DECODE_LSE not in rules("TORCH_SDPA").features
    assert Feature.DECODE_LSE not in rules("FLEX_ATTENTION").features
    assert Feature.DECODE_LSE in rules("HWTUNE_TRITON_ATTN").features


def test_turboquant_is_the_only_backend_with_turboquant_dtypes() -> None:
    owners = [
        b.name
        for b in catalogue.backends("attention")
        if {"turboquant_4bit", "turboquant_8bit"} & set(b.rules.kv_cache_dtypes)
    ]
    assert owners == ["HWTUNE_TURBOQUANT"]


def test_mla_backends() -> None:
    for name in ("FLASHINFER_MLA", "TRITON_MLA", "CUTLASS_MLA", "FLASHMLA"):
        r = rules(name)
        assert Feature.MLA in r.features and r.head_sizes.values == {576}
    assert rules("CUTLASS_MLA").block_sizes.values == {128}
    assert rules("FLASHMLA").block_sizes.values == {64}


def test_all2all_one_sided_is_nvfp4_only() -> None:
    r = catalogue.get("all2all", "flashinfer_nvlink_one_sided").rules
    assert r.quant_dtypes == {"nvfp4"}
    assert catalogue.get("all2all", "FlashInfer_All2Allv").name == "flashinfer_nvlink_two_sided"


# --- property: no backend accepts a value outside its allowlist ------------------------------------------

DEVICES = [simulated(n) for n in ("sm80", "sm90", "sm100", "sm120")]


def test_no_attention_backend_accepts_a_dtype_outside_its_allowlist() -> None:
    """Exhaustive over every known dtype x kv-cache dtype x device family (about a thousand cases)."""
    for backend in catalogue.backends("attention"):
        mla = Feature.MLA in backend.rules.features
        min_cc = backend.rules.kv_cache_dtype_min_cc or {}
        for kv in sorted(set(KV_CACHE_DTYPE_ALIASES.values())):
            for dtype in sorted(set(DTYPE_ALIASES.values())):
                for device in DEVICES:
                    spec = AttentionSpec(
                        16,
                        1 if mla else 8,
                        576 if mla else 128,
                        dtype=dtype,
                        kv_cache_dtype=kv,
                        block_size=128 if backend.name == "CUTLASS_MLA" else 64,
                        use_mla=mla,
                    )
                    codes = {r.code for r in check(backend, spec, device, assume_installed=True)}
                    too_old = kv in min_cc and device.compute_capability < min_cc[kv]
                    case = (backend.name, kv, dtype, device.name)
                    assert ("kv_cache_dtype" in codes) == (kv not in backend.rules.kv_cache_dtypes or too_old), case
                    assert ("dtype" in codes) == (dtype not in backend.rules.dtypes), case


@settings(max_examples=100, deadline=None, derandomize=True)
@given(backend=st.sampled_from(catalogue.backends("attention")), junk=st.text(min_size=1, max_size=12))
def test_unknown_kv_dtype_strings_are_rejected_by_every_backend(backend, junk) -> None:
    """Even a value that bypassed spec normalisation never passes: allowlists fail closed."""
    spec = AttentionSpec(32, 8, 128)
    object.__setattr__(spec, "kv_cache_dtype", "x-" + junk)
    reasons = check(backend, spec, simulated("sm100"), assume_installed=True)
    assert reasons and any(r.code in ("kv_cache_dtype", "mla") for r in reasons)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    backend=st.sampled_from(catalogue.backends("all2all")),
    quant=st.sampled_from(sorted(set(QUANT_DTYPE_ALIASES.values()))),
)
def test_no_all2all_backend_accepts_a_quant_dtype_outside_its_allowlist(backend, quant) -> None:
    spec = All2AllSpec(ep_size=8, num_experts=64, topk=4, hidden_size=4096, quant_dtype=quant)
    codes = {r.code for r in check(backend, spec, simulated("sm100"), assume_installed=True)}
    assert ("quant_dtype" in codes) == (quant not in backend.rules.quant_dtypes)


def test_triton_fp8_needs_sm89() -> None:
    from hwtune.core.validation import validate

    spec = AttentionSpec(32, 8, 128, kv_cache_dtype="fp8")
    triton_attn = catalogue.get("attention", "HWTUNE_TRITON_ATTN")
    assert any("only from SM 8.9" in r for r in validate(triton_attn, spec, simulated("a100"), assume_installed=True))
    assert validate(triton_attn, spec, simulated("h100"), assume_installed=True) == []

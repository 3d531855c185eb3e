"""FLASH_ATTN's candidate says which FlashAttention version cannot run here and why (CPU)."""

from __future__ import annotations

import types

from hwtune.probes.attention.candidates import flash_attn


def _vllm_fa(**flags: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(flash_attn_interface=types.SimpleNamespace(**flags))


def test_a_version_whose_extension_did_not_load_is_unavailable_with_its_reason() -> None:
    mod = _vllm_fa(FA2_AVAILABLE=False, FA2_UNAVAILABLE_REASON="No module named '_vllm_fa2_C'", FA3_AVAILABLE=True)
    why = flash_attn.extension_missing("vllm_flash_attn", mod, 2)
    assert why is not None and "FA2" in why and "_vllm_fa2_C" in why
    assert flash_attn.extension_missing("vllm_flash_attn", mod, 3) is None
    assert flash_attn.extension_missing("flash_attn", mod, 2) is None  # Dao-AILab's package: no such flags


def test_off_cuda_the_candidate_is_unavailable() -> None:
    from hwtune.core.types import AttentionSpec, AttentionWorkload

    w = AttentionWorkload(AttentionSpec(32, 8, 128), "decode", 2, 64)
    assert flash_attn.FlashAttnCandidate().unavailable(w, "fa3", "cpu") == "FlashAttention runs on CUDA GPUs only"


def test_a_package_that_fails_to_import_is_a_reason_not_a_crash(monkeypatch) -> None:
    from hwtune.core.types import AttentionSpec, AttentionWorkload

    def broken() -> None:
        raise ImportError("vllm.vllm_flash_attn requires the CUDA flash attention extensions")

    monkeypatch.setattr(flash_attn, "flash_attn_module", broken)
    w = AttentionWorkload(AttentionSpec(32, 8, 128), "decode", 2, 64)
    why = flash_attn.FlashAttnCandidate().unavailable(w, "fa3", "cuda")
    assert why is not None and "cannot be imported" in why and "extensions" in why

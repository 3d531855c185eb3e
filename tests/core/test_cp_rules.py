"""Context parallelism as vLLM 0.33.0 allows it: PCP (MLA backends only, not together with DCP) and speculative
decoding with the KV interleaved over CP ranks (no hwtune-catalogued backend); each with an actionable reason."""

import dataclasses
from pathlib import Path

import pytest

from hwtune.core import catalogue
from hwtune.core.devices import simulated
from hwtune.core.model_config import attention_spec, load_model_config
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.core.validation import check

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
H100 = simulated("h100")
GQA = AttentionSpec(32, 8, 128)
MLA = attention_spec(load_model_config(MODELS / "deepseek-v3.json"), 8)


def valid(spec: AttentionSpec) -> set[str]:
    return {b.name for b in catalogue.backends("attention") if not check(b, spec, H100, assume_installed=True)}


def codes(name: str, spec: AttentionSpec) -> list[str]:
    return [r.code for r in check(catalogue.get("attention", name), spec, H100, assume_installed=True)]


def test_pcp_is_for_mla_backends_only() -> None:
    pcp = dataclasses.replace(GQA, pcp_size=2)
    assert valid(pcp) == set()
    [why] = check(catalogue.get("attention", "FLASHINFER"), pcp, H100, assume_installed=True)
    assert why.code == "feature:pcp" and "--pcp 2" in why.message and "drop --pcp" in why.message
    assert valid(MLA) and valid(dataclasses.replace(MLA, pcp_size=2)) == valid(MLA)


def test_pcp_with_dcp_at_once_is_rejected_with_both_flags_named() -> None:
    both = dataclasses.replace(MLA, pcp_size=2, dcp_size=2)
    assert valid(both) == set()
    for name in valid(dataclasses.replace(MLA, dcp_size=2)):
        assert "feature:pcp_with_dcp" in codes(name, both)
    [msg] = [r.message for r in check(catalogue.get("attention", "TRITON_MLA"), both, H100, assume_installed=True)]
    assert "--pcp 2 --dcp 2" in msg


def test_spec_decode_with_dcp_needs_interleave_one() -> None:
    plain = dataclasses.replace(GQA, dcp_size=2, spec_tokens=2)
    assert "FLASHINFER" in valid(plain)
    chunked = dataclasses.replace(plain, cp_interleave=16)
    assert valid(chunked) == set()
    [why] = check(catalogue.get("attention", "FLASHINFER"), chunked, H100, assume_installed=True)
    assert why.code == "feature:cp_interleaved_spec" and "use --cp-interleave 1" in why.message
    assert "FLASHINFER" in valid(dataclasses.replace(GQA, dcp_size=2, cp_interleave=16))  # no spec decode: fine


def test_cp_interleave_leaves_earlier_keys_unchanged_and_counts_when_set() -> None:
    # the key of Llama-3.1-8B's spec as stored before the field existed (any change orphans stored measurements)
    assert GQA.key() == "70316d6801213e01e90481984609fa0b"
    assert AttentionWorkload(GQA, "decode", 4, 512).key() == "07273435fa623d44ae9108dbc01f88bd"
    assert dataclasses.replace(GQA, cp_interleave=16).key() != GQA.key()
    with pytest.raises(Exception, match="cp_interleave"):
        dataclasses.replace(GQA, cp_interleave=0)

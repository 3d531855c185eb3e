"""Measurements of hwtune's records under an engine's backend names: a backend built on one tactic of a record
(SGLang's trtllm_mha is FlashInfer's trtllm-gen) answers for that tactic's failures only."""

from hwtune.core.catalogue.engines import resolve_target
from hwtune.core.devices import simulated
from hwtune.core.types import AttentionSpec
from hwtune.selector.engine_select import engine_field, renamed_evidence
from hwtune.selector.measured import gather

FP = {"gpu": "B200"}


def row(tactic: str, status: str) -> tuple:
    """A store row in ``hwtune.db.sqlite_direct``'s column order."""
    median = 10.0 if status == "ok" else None
    message = "" if status == "ok" else "boom"
    return (
        "attention",
        "decode",
        4,
        1024,
        1,
        None,
        "{}",
        "FLASHINFER",
        tactic,
        status,
        median,
        message,
        "host-a",
        "2026-11-25T00:00:00",
        "env",
    )


def test_a_tactic_backend_is_disqualified_by_its_own_tactic_only(monkeypatch) -> None:
    rows = [row("fa2-tc", "crashed"), row("trtllm-gen", "ok")]
    ev = gather(rows, {"env": FP}, "env", FP)
    assert "FLASHINFER" in ev.disqualified and set(ev.disqualified_by_tactic["FLASHINFER"]) == {"fa2-tc"}
    fld = engine_field(resolve_target("sglang"), AttentionSpec(32, 8, 128), simulated("b200"), True)
    fld.names = ["trtllm_mha", "flashinfer"]
    out = renamed_evidence(ev, fld)
    assert "trtllm_mha" not in out.disqualified and "flashinfer" in out.disqualified
    assert "fa2-tc crashed" in out.disqualified["flashinfer"][0]


def test_a_tactic_no_engine_calls_never_ranks_an_engines_backend() -> None:
    """FLASHINFER's xqa-2x (flashinfer.xqa.xqa with a doubled sm_count) is hwtune's call only: vLLM's FLASHINFER keeps
    the points of the tactics it can run, never those."""
    fp = {"gpu": "H100"}
    rows = [row("xqa-2x", "ok"), row("fa2-tc", "ok")]
    ev = gather(rows, {"env": fp}, "env", fp)
    assert {t for (_b, t, _p) in ev.points} == {"xqa-2x", "fa2-tc"}
    spec = AttentionSpec(32, 8, 128, kv_cache_dtype="fp8_e4m3")
    fld = engine_field(resolve_target("vllm"), spec, simulated("h100"), True)
    out = renamed_evidence(ev, fld)
    assert {t for (b, t, _p) in out.points if b == "FLASHINFER"} == {"fa2-tc"}

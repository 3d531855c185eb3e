"""A backend whose probe measures fewer phases than it serves (the catalogue's ``Probe.phases``: FLASHMLA and
FLASH_ATTN_MLA measure decode only, as vLLM runs their prefill on its MLA prefill path) is ranked from its
measurements on those phases: it competes for them per phase, and is compared with other backends on them alone,
never as if its unmeasured phases cost nothing (selector/decision.py)."""

import dataclasses

import pytest

import hwtune
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.db.store import Store
from hwtune.selector.api import _cached
from hwtune.selector.decision import cost_with, decide_one, per_phase_winners
from hwtune.selector.layouts import measured_cost
from hwtune.selector.mix import MixPoint
from tests.selector.test_measured import rec

#: DeepSeek-V3 at TP 8 (16 heads a rank) on FlashMLA's 64-token pages.
MLA = AttentionSpec(16, 1, 576, use_mla=True, kv_lora_rank=512, qk_rope_head_dim=64, block_size=64)
DECODE = [(b, c) for b in (1, 16, 256) for c in (1024, 8192, 65536)]
PREFILL = [(q, c) for q in (512, 2048, 8192) for c in (q, 65536)]


def records(flashmla_factor: float | None, spec: AttentionSpec = MLA) -> list:
    """FLASHINFER_FA_MLA measured in both phases; FLASHMLA in decode only, ``flashmla_factor`` x its decode time (not
    measured: None)."""
    out = []
    for b, c in DECODE:
        w = AttentionWorkload(spec, "decode", b, c)
        base = 10 + 0.0001 * b * c
        out.append(rec(w, "FLASHINFER_FA_MLA", "fa3", base))
        out += [rec(w, "FLASHMLA", "default", flashmla_factor * base)] if flashmla_factor is not None else []
    for q, c in PREFILL:
        w = AttentionWorkload(spec, "prefill", 1, c, query_len=q)
        out.append(rec(w, "FLASHINFER_FA_MLA", "mha-fa3", 20 + 0.001 * q * c / 64))
    return out


def select(tmp_path, factor: float, **kw):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    with Store.open(url) as s:
        s.write(records(factor))
    _cached.cache_clear()
    try:
        return hwtune.select_attention(
            MLA, device="h100", assume_installed=True, db=url, max_model_len=65536, engine=None, **kw
        )
    finally:
        _cached.cache_clear()


def entry(sel, backend):
    return next(r for r in sel.ranked if r.backend == backend)


def test_a_decode_only_backend_competes_for_decode_and_is_ranked_after_the_complete_ones(tmp_path) -> None:
    """FLASHMLA decodes 20 % faster: it wins the decode phase, but as one backend the one measured in both phases
    ranks first, since FLASHMLA's prefill was not measured (it once ranked as static, its measurements unused)."""
    sel = select(tmp_path, 0.8)
    flashmla = entry(sel, "FLASHMLA")
    assert flashmla.source in ("measured", "interpolated") and flashmla.measured_phases == ("decode",)
    assert (
        flashmla.to_dict()["measured_phases"] == ["decode"]
        and "measured_phases" not in entry(sel, "FLASHINFER_FA_MLA").to_dict()
    )
    assert sel.backend == "FLASHINFER_FA_MLA"
    assert sel.per_phase == {"decode": "FLASHMLA", "prefill": "FLASHINFER_FA_MLA"}
    assert [r.backend for r in sel.ranked[:2]] == ["FLASHINFER_FA_MLA", "FLASHMLA"]
    assert any("competing per phase only: FLASHMLA (decode)" in n for n in sel.notes)
    assert "(decode only)" in sel.explain() and "decode shapes of the mix only" in flashmla.detail
    assert flashmla.latency_us < entry(sel, "FLASHINFER_FA_MLA").latency_us  # decode alone, scaled
    assert measured_cost(sel) == entry(sel, "FLASHINFER_FA_MLA").typical_us  # what the decision compares


def test_a_layout_or_block_size_is_chosen_on_costs_of_the_same_phases(tmp_path) -> None:
    """kv_layout auto: the layout whose selection was measured wins even where its backend measures decode only (a
    tune of FLASH_ATTN_MLA and FLASHMLA alone stores NHD only; the layout search once found nothing). No block size
    in hwtune's own catalogue: the 16-token pages' complete cost wins over FLASHMLA's decode-only one at 64 pages,
    which is not compared with it."""
    url = f"sqlite:///{tmp_path / 'b.db'}"
    nhd = dataclasses.replace(MLA, kv_layout="NHD")  # as a tune of an auto-layout model stores it
    at16 = dataclasses.replace(nhd, block_size=16)
    with Store.open(url) as s:
        s.write(records(None, at16) + [r for r in records(0.5, nhd) if r.backend == "FLASHMLA"])
    auto = dataclasses.replace(MLA, kv_layout="auto")
    kw = {"device": "h100", "assume_installed": True, "db": url, "max_model_len": 65536, "engine": None}
    _cached.cache_clear()
    try:
        laid = hwtune.select_attention(auto, backend="FLASHMLA", **kw)
        assert laid.spec["kv_layout"] == "NHD" and entry(laid, "FLASHMLA").measured_phases == ("decode",)
        assert "(NHD: FLASHMLA ~" in laid.notes[0] and "(decode only))" in laid.notes[0]
        sized = hwtune.select_attention(dataclasses.replace(at16, block_size=None), **kw)
        assert sized.backend == "FLASHINFER_FA_MLA" and sized.spec["block_size"] == 16
        assert "(16: FLASHINFER_FA_MLA ~" in sized.notes[0] and "64:" not in sized.notes[0]  # not compared
    finally:
        _cached.cache_clear()


def test_a_slower_decode_only_backend_does_not_take_the_decode_phase(tmp_path) -> None:
    sel = select(tmp_path, 1.3)
    assert sel.per_phase == {"decode": "FLASHINFER_FA_MLA", "prefill": "FLASHINFER_FA_MLA"}
    assert entry(sel, "FLASHMLA").measured_phases == ("decode",)


def test_backends_that_all_measure_decode_only_are_decided_on_decode() -> None:
    """vLLM's MLA backends on Hopper share its MLA prefill path: FLASH_ATTN_MLA and FLASHMLA are compared on the
    decode points, and the note says so."""
    mix = [MixPoint("decode", b, c, 1.0) for b, c in DECODE] + [MixPoint("prefill", 1, c, 5.0, q) for q, c in PREFILL]
    decode_only = frozenset({"decode"})

    def at(factor: float):
        return lambda _t, mp: (factor * (10 + 0.0001 * mp.batch * mp.context), True, 1.0, True)

    a = cost_with("A", ["t"], at(1.0), mix, decode_only)
    b = cost_with("B", ["t"], at(0.9), mix, decode_only)
    assert a is not None and b is not None and a.phases == decode_only and a.phase_cost.keys() == {"decode"}
    order, note = decide_one([a, b], mix)
    assert order == ["B", "A"] and note.startswith("compared on the decode mix points alone")
    assert per_phase_winners([a, b], mix) == {"decode": "B"}
    whole = cost_with("W", ["t"], at(1.5), mix)  # measured in both phases, slower at decode
    assert whole is not None and whole.phases is None
    assert decide_one([a, b, whole], mix)[0] == ["W", "B", "A"]
    assert per_phase_winners([a, b, whole], mix) == {"decode": "B", "prefill": "W"}
    # an engine that runs the decode-only backends' prefill on a path it shares with the others (MLA prefill in vLLM
    # and SGLang): all three are decided on decode
    order, note = decide_one([a, b, whole], mix, shared=True)
    assert order == ["B", "A", "W"] and note.startswith("compared on the decode mix points alone")
    # a partial cost is scaled to the mix's whole weight (decode 9 of 39): the size of a whole cost
    assert a.cost_us == pytest.approx(sum(10 + 0.0001 * bb * c for bb, c in DECODE) * 39 / 9)


def decode_at(backend: str, size: int, factor: float) -> list:
    """``backend``'s decode over DECODE at ``size``-token pages, ``factor`` x the base time."""
    spec = dataclasses.replace(MLA, block_size=size)
    return [
        rec(AttentionWorkload(spec, "decode", b, c), backend, "default", factor * (10 + 0.0001 * b * c))
        for b, c in DECODE
    ]


def select_vllm(tmp_path, out: list):
    """vLLM's selection from ``out`` with no block size given."""
    url = f"sqlite:///{tmp_path / 'v.db'}"
    with Store.open(url) as s:
        s.write(out)
    _cached.cache_clear()
    try:
        return hwtune.select_attention(
            dataclasses.replace(MLA, block_size=None), device="h100", assume_installed=True, db=url, engine="vllm"
        )
    finally:
        _cached.cache_clear()


def test_vllm_on_hopper_chooses_between_its_decode_only_mla_backends_and_their_block_sizes(tmp_path) -> None:
    """vLLM's FLASH_ATTN_MLA (16-token pages) and FLASHMLA (64) each measured at the size vLLM runs it: with no block
    size given, the faster decode wins and the selection says the block size to start vLLM with (issue 19)."""
    sel = select_vllm(tmp_path, decode_at("FLASH_ATTN_MLA", 16, 1.0) + decode_at("FLASHMLA", 64, 0.85))
    assert sel.backend == "FLASHMLA" and [r.backend for r in sel.ranked[:2]] == ["FLASHMLA", "FLASH_ATTN_MLA"]
    assert all(entry(sel, b).measured_phases == ("decode",) for b in ("FLASHMLA", "FLASH_ATTN_MLA"))
    assert any(n.startswith("compared on the decode mix points alone") for n in sel.notes)
    assert any("runs FLASHMLA at block size 64" in n for n in sel.notes)


def test_vllm_routes_no_phase_to_a_backend_by_measurements_its_others_lack(tmp_path) -> None:
    """Beside the two decode-only backends, vLLM's TRITON_MLA measured in both phases (slower decode): decided on
    decode, FLASHMLA wins; prefill, which vLLM runs on its MLA prefill path whichever backend decodes, is routed to no
    one, so the launch keeps FLASHMLA's block size (it once routed prefill to TRITON_MLA at 16 and lost it)."""
    triton16 = dataclasses.replace(MLA, block_size=16)
    prefill = [
        rec(AttentionWorkload(triton16, "prefill", 1, c, query_len=q), "TRITON_MLA", "default", 20 + 0.001 * q * c)
        for q, c in PREFILL
    ]
    decode = decode_at("FLASH_ATTN_MLA", 16, 1.0) + decode_at("FLASHMLA", 64, 0.85) + decode_at("TRITON_MLA", 16, 1.2)
    sel = select_vllm(tmp_path, decode + prefill)
    assert sel.backend == "FLASHMLA" and sel.per_phase == {"decode": "FLASHMLA"} and not sel.phase_dispatch
    args = sel.launch().args
    assert "--attention-backend" in args and args[args.index("--block-size") + 1] == "64"

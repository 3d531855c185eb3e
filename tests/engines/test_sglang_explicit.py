"""What SGLang 0.5.23 accepts when a backend is given by --attention-backend, as hwtune selects for it: its default
first, then every backend it accepts as itself, each refusal in hwtune's words, and measured ranking over them.

The cases are written out from SGLang's source (the clause each depends on is named), not from hwtune's output, so
that removing or loosening a clause in sglang.json fails here even though the differential test, which reads the
same snapshot twice, would not notice.
"""

from __future__ import annotations

import dataclasses
import string

import pytest

import hwtune
from hwtune import AttentionSpec, BackendNotValidError
from hwtune.core import catalogue
from hwtune.core.catalogue.engines import EngineConfig, explicit_order, explicit_reasons, snapshot
from hwtune.db.store import Store
from hwtune.selector.api import _cached
from tests.engines import oracle
from tests.engines.test_examples import DEEPSEEK, _grid, select

GQA = AttentionSpec(32, 8, 128)
MLA_448 = dataclasses.replace(DEEPSEEK, head_size=512, kv_lora_rank=448)  # a 448-wide latent: no fixed-shape kernel

CASES = [  # (label, spec, device, SGLang's default then what it accepts, in the snapshot's explicit order)
    ("h100", GQA, "h100", ["fa3", "fa4", "trtllm_mha", "flashinfer", "triton", "torch_native", "flex_attention"]),
    # fa3 on SM 8.x for dense attention (create_flashattention_v3_backend); fa4 not modelled on SM 8.x
    ("a100", GQA, "a100", ["flashinfer", "fa3", "triton", "torch_native", "flex_attention"]),
    ("b200", GQA, "b200", ["trtllm_mha", "fa4", "flashinfer", "triton", "torch_native", "flex_attention"]),
    # SM 12.x: trtllm_mha (XQA/FMHAv2); fa4's SM 12.x kernels are not modelled
    ("sm120", GQA, "sm120", ["flashinfer", "trtllm_mha", "triton", "torch_native", "flex_attention"]),
    # fp8_e5m2: fa3 becomes triton (_attention_backend_fa3_fp8_fallback); trtllm_mha and fa4 not with e5m2
    ("h100 e5m2", dataclasses.replace(GQA, kv_cache_dtype="fp8_e5m2"), "h100", ["triton", "flashinfer"]),
    (
        "h100 e4m3",
        dataclasses.replace(GQA, kv_cache_dtype="fp8_e4m3"),
        "h100",
        ["fa3", "trtllm_mha", "flashinfer", "triton"],
    ),
    (
        "a100 e4m3",
        dataclasses.replace(GQA, kv_cache_dtype="fp8_e4m3"),
        "a100",
        ["flashinfer", "triton"],
    ),  # fa3 fp8: SM 9.x
    ("sm120 e4m3", dataclasses.replace(GQA, kv_cache_dtype="fp8_e4m3"), "sm120", ["flashinfer", "triton"]),  # FMHAv2
    # soft-cap: trtllm_mha, torch_native and flex_attention never read layer.logit_cap
    ("h100 soft-cap", dataclasses.replace(GQA, logits_soft_cap=30.0), "h100", ["fa3", "fa4", "flashinfer", "triton"]),
    # flex_attention ignores the window
    (
        "h100 window",
        dataclasses.replace(GQA, sliding_window=4096),
        "h100",
        ["fa3", "fa4", "trtllm_mha", "flashinfer", "triton", "torch_native"],
    ),
    # speculative decoding at page 16: SGLang's default is flashinfer; flex_attention asserts no spec decode
    (
        "h100 spec",
        dataclasses.replace(GQA, spec_tokens=2),
        "h100",
        ["flashinfer", "fa3", "fa4", "trtllm_mha", "triton", "torch_native"],
    ),
    # sinks: no sinks argument in flashinfer, torch_native, flex_attention; fa3 sinks on SM 9.x only
    ("h100 sinks", dataclasses.replace(GQA, sinks=True), "h100", ["fa3", "fa4", "trtllm_mha", "triton"]),
    ("a100 sinks", dataclasses.replace(GQA, sinks=True), "a100", ["triton"]),
    # head 192 on SM 10.x: FA4 runs 8..128 or 256 there
    ("b200 head 192", AttentionSpec(32, 8, 192), "b200", ["trtllm_mha", "triton", "torch_native"]),
    (
        "b200 head 256",
        AttentionSpec(32, 8, 256),
        "b200",
        ["trtllm_mha", "fa4", "flashinfer", "triton", "torch_native", "flex_attention"],
    ),
    ("h100 float32", dataclasses.replace(GQA, dtype="float32"), "h100", ["fa3", "torch_native", "flex_attention"]),
    (
        "a100 float32",
        dataclasses.replace(GQA, dtype="float32"),
        "a100",
        ["flashinfer", "torch_native", "flex_attention"],
    ),
    # XQA (trtllm_mha on SM 9.x and 12.x) takes bfloat16 queries only
    (
        "h100 float16",
        dataclasses.replace(GQA, dtype="float16"),
        "h100",
        ["fa3", "fa4", "flashinfer", "triton", "torch_native", "flex_attention"],
    ),
    (
        "b200 float32 spec",
        dataclasses.replace(GQA, dtype="float32", spec_tokens=2),
        "b200",
        ["flashinfer", "torch_native"],
    ),
    ("a100 head 320", AttentionSpec(32, 8, 320), "a100", ["flashinfer", "triton", "torch_native"]),  # fa3: up to 256
    ("h100 head 96", AttentionSpec(32, 8, 96), "h100", ["fa3", "fa4", "triton", "torch_native"]),
    ("mla-448 h100", MLA_448, "h100", ["fa3", "triton", "torch_native"]),
    ("mla-448 b200", MLA_448, "b200", ["flashinfer", "triton", "torch_native"]),
    # scope: context parallelism and SGLang's own kv4 routing are not modelled: the default only
    ("h100 dcp", dataclasses.replace(GQA, dcp_size=2), "h100", ["fa3"]),
    ("b200 nvfp4", dataclasses.replace(GQA, kv_cache_dtype="nvfp4"), "b200", ["trtllm_mha"]),
    ("mla h100", DEEPSEEK, "h100", ["fa3", "flashinfer", "triton", "torch_native", "flashmla"]),
    ("mla b200", DEEPSEEK, "b200", ["flashinfer", "fa4", "triton", "torch_native", "trtllm_mla", "cutedsl_mla"]),
    # _mla_kv_cache_dtype_checks lists bf16, not bfloat16; _cutedsl_prefill_backend_fill lists both
    (
        "mla b200 bfloat16",
        dataclasses.replace(DEEPSEEK, kv_cache_dtype="bfloat16"),
        "b200",
        ["flashinfer", "fa4", "triton", "torch_native", "cutedsl_mla"],
    ),
    (
        "mla b200 e4m3",
        dataclasses.replace(DEEPSEEK, kv_cache_dtype="fp8_e4m3"),
        "b200",
        ["flashinfer", "triton", "trtllm_mla", "cutedsl_mla"],
    ),
    ("mla h100 e4m3", dataclasses.replace(DEEPSEEK, kv_cache_dtype="fp8_e4m3"), "h100", ["fa3", "triton", "flashmla"]),
    ("mla h100 e5m2", dataclasses.replace(DEEPSEEK, kv_cache_dtype="fp8_e5m2"), "h100", ["triton"]),
    ("mla a100", DEEPSEEK, "a100", ["triton", "flashinfer", "torch_native"]),
    ("mla sm120", DEEPSEEK, "sm120", ["triton", "flashinfer", "torch_native", "trtllm_mla"]),
    ("mla h100 soft-cap", dataclasses.replace(DEEPSEEK, logits_soft_cap=30.0), "h100", ["fa3"]),
]


@pytest.mark.parametrize("label, spec, device, expected", CASES, ids=[c[0] for c in CASES])
def test_valid_set_is_the_default_then_what_sglang_accepts(label: str, spec, device: str, expected: list) -> None:
    sel = select(spec, device, engine="sglang")
    assert [r.backend for r in sel.ranked] == expected
    assert sel.backend == expected[0]  # nothing measured: SGLang's default


@pytest.mark.parametrize(
    "spec, device, name, words",
    [
        (GQA, "b200", "fa3", "fa3 needs SM 8.x or 9.x for dense attention and SM 9.x for MLA; this device is SM 10.0"),
        (dataclasses.replace(GQA, sinks=True), "h100", "flashinfer", "flashinfer takes no attention sinks"),
        (dataclasses.replace(GQA, kv_cache_dtype="fp8_e5m2"), "h100", "fa3", "replaces it with triton"),
        (dataclasses.replace(GQA, spec_tokens=2), "h100", "flex_attention", "does not run speculative decoding"),
        (dataclasses.replace(GQA, logits_soft_cap=30.0), "h100", "trtllm_mha", "never passes the logit soft-cap"),
        (
            AttentionSpec(32, 32, 128, block_size=128, spec_tokens=2),
            "b200",
            "trtllm_mha",
            "page size 128 on SM 10.x needs",
        ),
        (dataclasses.replace(DEEPSEEK, kv_cache_dtype="bfloat16"), "b200", "trtllm_mla", "not bfloat16"),
        (DEEPSEEK, "sm120", "cutedsl_mla", "cutedsl_mla needs SM 10.x; this device is SM 12.0"),
        (DEEPSEEK, "b200", "flashmla", "runs dense MLA decode on SM 9.x only"),
        (AttentionSpec(32, 8, 192), "h100", "flashinfer", "head sizes 64, 128 and 256 only, not 192"),
        (AttentionSpec(32, 8, 320), "h100", "fa4", "multiples of 8 from 8 to 256, or 512, on SM 9.x, not 320"),
        (dataclasses.replace(GQA, dcp_size=2), "h100", "flashinfer", "not modelled with decode or prefill context"),
        (
            dataclasses.replace(GQA, kv_cache_dtype="nvfp4"),
            "b200",
            "flashinfer",
            "not modelled with kv-cache dtype nvfp4",
        ),
        (DEEPSEEK, "b200", "trtllm_mha", "trtllm_mha does not serve MLA"),
        (DEEPSEEK, "h100", "flex_attention", "flex_attention does not serve MLA"),
        (GQA, "h100", "flashmla", "flashmla does not serve dense attention"),
        (GQA, "b200", "trtllm_mla", "trtllm_mla does not serve dense attention"),
        (GQA, "b200", "cutedsl_mla", "cutedsl_mla does not serve dense attention"),
    ],
)
def test_a_refused_backend_says_why_in_hwtunes_words(spec, device: str, name: str, words: str) -> None:
    with pytest.raises(BackendNotValidError) as err:
        select(spec, device, engine="sglang", backend=name)
    assert words in str(err.value)


def test_sglangs_own_default_is_kept_and_doubted_where_its_rules_refuse_it() -> None:
    """SGLang picks trtllm_mha on SM 10.x whatever the head count; at page size 128 its own init then raises for
    MHA without GQA. hwtune keeps SGLang's choice (it agrees with SGLang) and says so."""
    sel = select(AttentionSpec(32, 32, 128, block_size=128), "b200", engine="sglang")
    assert sel.backend == "trtllm_mha"
    assert any("trtllm_mha is SGLang 0.5.23's default here, which hwtune gives as is" in n for n in sel.notes)
    assert not any("default here" in n for n in select(GQA, "b200", engine="sglang").notes)
    notes = select(MLA_448, "h100", engine="sglang").notes
    assert any("fa3 runs MLA as a 64-wide RoPE query with a 512-wide latent" in n for n in notes)


def _flashinfer_mla(spec, backend: str, us: float, absorbed_prefill_us: float | None = None) -> list:  # noqa: ANN001
    """What SGLang's flashinfer MLA runs on SM 9.x: absorbed fa3 decode and the non-absorbed mha-fa3 prefill (and,
    if given, absorbed fa3 prefill records that it does not run)."""
    out = [r for r in _grid(spec, backend, us, "fa3") if r.workload["phase"] == "decode"]
    out += [r for r in _grid(spec, backend, us, "mha-fa3") if r.workload["phase"] == "prefill"]
    if absorbed_prefill_us is not None:
        out += [r for r in _grid(spec, backend, absorbed_prefill_us, "fa3") if r.workload["phase"] == "prefill"]
    return out


def test_sglang_flashinfer_mla_is_ranked_by_the_tactics_sglang_runs(tmp_path) -> None:
    """SGLang prefills DeepSeek on flashinfer through the ragged (non-absorbed) wrapper (fa3 on SM 9.x) and decodes on
    the absorbed one: a faster absorbed prefill measured beside it does not rank it."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    paged, at16 = (
        catalogue.engine_record("sglang", "flashinfer", True)[0].name,
        dataclasses.replace(DEEPSEEK, block_size=16),
    )
    with Store.open(url) as s:
        s.write(_flashinfer_mla(at16, paged, 9.0, absorbed_prefill_us=1.0))
    _cached.cache_clear()
    sel = hwtune.select_attention(at16, device="h100", assume_installed=True, db=url, engine="sglang")
    _cached.cache_clear()
    fi = next(r for r in sel.ranked if r.backend == "flashinfer")
    assert fi.tactics == {"decode": "fa3", "prefill": "mha-fa3"} and fi.latency_us == pytest.approx(9.0)


def test_page_size_sglang_runs_a_backend_at_is_said_and_read(tmp_path) -> None:
    """SGLang runs flashmla at page size 64 whatever is given (_mla_backend_page_constraints): its measurements at 64
    rank it, those at the given 16 do not; fa3 keeps the given 16."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    at16, at64 = dataclasses.replace(DEEPSEEK, block_size=16), dataclasses.replace(DEEPSEEK, block_size=64)
    flashmla, paged = (catalogue.engine_record("sglang", n, True)[0].name for n in ("flashmla", "flashinfer"))
    with Store.open(url) as s:
        s.write(_grid(at64, flashmla, 3.0) + _grid(at16, flashmla, 50.0) + _flashinfer_mla(at16, paged, 9.0))
    _cached.cache_clear()
    sel = hwtune.select_attention(at16, device="h100", assume_installed=True, db=url, engine="sglang")
    _cached.cache_clear()
    costs = {r.backend: r.latency_us for r in sel.ranked if r.source != "static"}
    assert costs == {"flashmla": pytest.approx(3.0), "flashinfer": pytest.approx(9.0)}
    assert sel.backend == "flashmla" and "SGLang 0.5.23 runs flashmla at page size 64 (--page-size 16)" in sel.notes
    assert [r.backend for r in sel.ranked][2:] == ["fa3", "triton", "torch_native"]  # unmeasured: static order


def test_a_backend_hwtune_does_not_run_in_every_phase_keeps_its_static_place(tmp_path) -> None:
    """On SM 9.x SGLang's trtllm_mha prefills with FMHAv2, which hwtune does not run: its XQA decode points alone do
    not rank it (they would beat fa3 here)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as s:
        s.write(_grid(GQA, "FLASHINFER", 1.0, "xqa") + _grid(GQA, "FLASH_ATTN", 4.0, "fa3"))
    _cached.cache_clear()
    sel = hwtune.select_attention(GQA, device="h100", assume_installed=True, db=url, engine="sglang")
    _cached.cache_clear()
    assert sel.backend == "fa3" and sel.ranked[0].latency_us == pytest.approx(4.0)
    trt = next(r for r in sel.ranked if r.backend == "trtllm_mha")
    assert trt.source == "static" and trt.tactics == {"decode": "xqa", "prefill": "default"}


# --- the snapshot's explicit section ----------------------------------------------------------------------------


def test_every_modelled_backend_states_its_facts_and_every_check_is_well_formed() -> None:
    data = oracle.load("sglang")
    order = data["explicit"]["order"]["value"]
    assert set(order) <= set(data["attention_backends"]["value"]) and len(set(order)) == len(order)
    assert set(order) == {n for n, f in data["backends"].items() if "accepts" in f}
    fields = {"cc", "head_size", "dtype", "kv_cache_dtype", "page_size"}
    ids = []
    for check in data["explicit"]["scope"] + [c for n in order for c in data["backends"][n]["accepts"]]:
        assert {"id", "require", "reason", "source"} <= set(check), check
        named = {f for _, f, _, _ in string.Formatter().parse(check["reason"]) if f}
        assert named <= fields, (check["id"], named)
        ids.append(check["id"])
    assert len(ids) == len(set(ids)), "check ids must be unique"
    for name in order:
        assert {"serves", "page_size", "summary"} <= set(data["backends"][name]), name


def test_explicit_order_is_the_decision_list_then_the_choices_order() -> None:
    """The stated order: the backends get_default_attn_backend names, in its order, then the other modelled ones in
    ATTENTION_BACKEND_CHOICES order."""
    data = oracle.load("sglang")
    generic = [d for d in data["defaults"] if "architecture" not in d["when"]]  # model overrides come first
    decided = list(dict.fromkeys(d["value"] for d in generic))
    order = data["explicit"]["order"]["value"]
    rest = [n for n in data["attention_backends"]["value"] if n in order and n not in decided]
    assert order == [n for n in decided if n in order] + rest


def test_explicit_rules_evaluate_on_every_backend_and_configuration() -> None:
    """No unknown condition key, no bad placeholder, on a spread of configurations (a typo raises)."""
    snap = snapshot("sglang")
    for cc in ((8, 0), (9, 0), (10, 0), (11, 0), (12, 0)):
        for mla in (False, True):
            for block in (None, 16, 128):
                cfg = EngineConfig(
                    cc, 576 if mla else 128, "bfloat16", "fp8_e4m3", block, 16, 1, mla=mla, sinks=True, soft_cap=True
                )
                for name in explicit_order(snap, "0.5.23"):
                    explicit_reasons(snap, "0.5.23", name, cfg)

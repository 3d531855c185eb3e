"""Every flag hwtune emits exists in the engine version it is for, and says what was selected: one backend or one per
phase where the version can route phases, the block size, the kv-cache dtype, the KV layout (vLLM: an environment
variable) and the MoE all2all backend. hwtune's own kernels never reach an engine flag.

The vocabulary is the snapshot's ``flags`` (with the engine source of each); where the engines' wheels are unpacked
(HWTUNE_ENGINE_SOURCES, see test_snapshots.py) the flags are checked against the engine source itself.
"""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from hwtune.core import catalogue
from hwtune.core.catalogue.engines import ENGINES, snapshot
from hwtune.core.devices import simulated
from hwtune.core.errors import NoValidBackendError
from hwtune.core.types import AttentionSpec
from hwtune.selector.api import select_all2all, select_attention
from hwtune.selector.engine_flags import NoEngineEquivalentError, launch
from hwtune.selector.selection import RankedBackend, Selection
from tests.engines.test_agreement import TARGETS, configurations, spec_and_device
from tests.engines.test_snapshots import _roots

LLAMA = AttentionSpec(32, 8, 128)


def _vocabulary(engine: str, version: str) -> dict[str, set[str]]:
    """What each emitted flag may carry in ``engine`` ``version``, from its snapshot."""
    snap = snapshot(engine)

    def value(key: str):
        clause = snap.flag(key, version)
        return clause.value if clause else None

    names = set(snap.backend_names() if engine == "vllm" else snap.engine_fact("attention_backends", version).value)
    vocab = {
        value("attention_backend"): names,
        value("prefill_attention_backend"): names,
        value("decode_attention_backend"): names,
        value("block_size"): {str(n) for n in range(1, 1025)},
        value("kv_cache_dtype"): set(snap.kv_cache_dtypes(version)),
        value("all2all_backend"): set(value("all2all_backends")),
        value("all2all_mode"): set(value("all2all_modes") or ()),
    }
    return {k: v for k, v in vocab.items() if k}


def _check(args: list[str], engine: str, version: str) -> None:
    vocab = _vocabulary(engine, version)
    assert len(args) % 2 == 0, args
    for flag, val in zip(args[::2], args[1::2]):
        assert flag in vocab, f"{engine} {version} has no flag {flag} ({args})"
        assert val in vocab[flag], f"{engine} {version}: {flag} {val} is not one of its values"


def _sample(n: int) -> list[dict]:
    return random.Random(20).sample(configurations(), n)


@pytest.mark.parametrize("engine, version", TARGETS)
def test_emitted_flags_exist_in_the_engine_version(engine: str, version: str) -> None:
    """Over a broad sample of the differential test's configurations, every launch names only flags and values of
    that engine version, and carries the block size and kv-cache dtype the selection was made for."""
    checked = 0
    for c in _sample(1200):
        spec, device = spec_and_device(c)
        try:
            sel = select_attention(
                spec, device=device, db=False, assume_installed=True, engine=engine, engine_version=version
            )
        except NoValidBackendError:
            continue
        out = launch(sel)
        assert (out.engine, out.version) == (engine, version)
        _check(list(out.args), engine, version)
        if spec.kv_cache_dtype != "auto":
            assert spec.kv_cache_dtype in out.args
        if spec.block_size is not None:  # the size given, or the one the engine runs the backend at, said
            replaced = any("at page size" in n and f"not {spec.block_size}" in n for n in out.notes)
            assert str(spec.block_size) in out.args or replaced, (out.args, out.notes)
        checked += 1
    assert checked > 300


@pytest.mark.parametrize("engine", ENGINES)
def test_every_catalogue_flag_exists_in_the_newest_engine(engine: str) -> None:
    """The engine names in hwtune's records (attention per tactic, all2all) are the engine's own."""
    snap = snapshot(engine)
    for kind in ("attention", "all2all"):
        for record in catalogue.backends(kind):
            flags = record.engines.get(engine)
            if flags is None:
                continue
            for args in {flags.args, *flags.by_tactic.values()} - {()}:
                _check(list(args), engine, snap.newest)


def _sel(backend: str, per_phase: dict, engine: dict | None, ranked: list[str] | None = None, **spec) -> Selection:
    ranked = ranked or [backend, *[b for b in per_phase.values() if b != backend]]
    rows = tuple(
        RankedBackend(b, "measured", {"decode": "default", "prefill": "default"}) for b in dict.fromkeys(ranked)
    )
    return Selection(
        kind="attention",
        spec=AttentionSpec(32, 8, 128, **spec).to_dict(),
        device=simulated("h100"),
        backend=backend,
        tactics={"decode": "default", "prefill": "default"},
        ranked=rows,
        rejected={},
        per_phase=per_phase,
        engine=engine,
    )


def test_sglang_gets_a_backend_per_phase() -> None:
    sel = _sel("fa3", {"decode": "flashinfer", "prefill": "fa3"}, {"engine": "sglang", "version": "0.5.23"})
    args = sel.to_sglang_args()
    assert args[:4] == ["--prefill-attention-backend", "fa3", "--decode-attention-backend", "flashinfer"]
    _check(args, "sglang", "0.5.23")


def test_vllm_without_a_decode_flag_gets_the_best_single_backend_and_a_note() -> None:
    sel = _sel("FLASHINFER", {"decode": "FLASHINFER", "prefill": "FLASH_ATTN"}, {"engine": "vllm", "version": "0.33.0"})
    out = launch(sel)
    assert list(out.args[:2]) == ["--attention-backend", "FLASHINFER"]
    assert any("cannot route prefill and decode" in n and "prefill FLASH_ATTN" in n for n in out.notes)


def test_a_vllm_version_with_a_decode_flag_routes_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the snapshot says the version has a decode backend flag (vLLM PR #48162), both backends are emitted."""
    snap = snapshot("vllm")
    flags = dict(snap.data["flags"])
    flags["decode_attention_backend"] = {"value": "--attention-decode-backend", "source": "vllm/engine/arg_utils.py"}
    monkeypatch.setitem(snap.data, "flags", flags)
    sel = _sel("FLASHINFER", {"decode": "FLASHINFER", "prefill": "FLASH_ATTN"}, {"engine": "vllm", "version": "0.33.0"})
    assert sel.to_vllm_args()[:4] == ["--attention-backend", "FLASH_ATTN", "--attention-decode-backend", "FLASHINFER"]


def test_a_requested_backend_is_used_for_every_phase() -> None:
    sel = _sel(
        "FLASH_ATTN", {"decode": "FLASHINFER", "prefill": "FLASH_ATTN"}, {"engine": "sglang", "version": "0.5.23"}
    )
    sel = dataclasses.replace(sel, requested="fa3")
    sel = dataclasses.replace(sel, backend="fa3")
    assert sel.to_sglang_args()[:2] == ["--attention-backend", "fa3"]


def test_hwtunes_own_kernel_is_never_an_engine_flag() -> None:
    """With hwtune's own catalogue, a winning own kernel gives way to the best ranked engine-native backend, said."""
    sel = _sel("HWTUNE_TRITON_ATTN", {}, None, ["HWTUNE_TRITON_ATTN", "FLASHINFER", "FLASH_ATTN"])
    out = launch(sel, "vllm")
    assert list(out.args[:2]) == ["--attention-backend", "FLASHINFER"]
    assert "TRITON_ATTN" not in " ".join(out.args)
    note = " ".join(out.notes)
    assert "HWTUNE_TRITON_ATTN has no vLLM 0.33.0 flag" in note and "was not measured" in note
    lone = _sel("HWTUNE_TRITON_ATTN", {}, None, ["HWTUNE_TRITON_ATTN"])
    with pytest.raises(NoEngineEquivalentError, match="hwtune's own Triton kernel.*--engine vllm"):
        launch(lone, "vllm")
    with pytest.raises(Exception, match="say which engine"):
        launch(lone)


def test_layout_is_vllms_environment_variable_and_a_note_for_sglang() -> None:
    vllm = launch(_sel("FLASHINFER", {}, {"engine": "vllm", "version": "0.33.0"}, kv_layout="HND"))
    assert vllm.env == {"VLLM_KV_CACHE_LAYOUT": "HND"}
    assert vllm.to_env()["HWTUNE_VLLM_ARGS"].startswith("--attention-backend FLASHINFER")
    sglang = launch(_sel("flashinfer", {}, {"engine": "sglang", "version": "0.5.23"}, kv_layout="HND"))
    assert sglang.env == {} and any("no KV layout setting and runs NHD" in n for n in sglang.notes)
    assert launch(_sel("FLASHINFER", {}, {"engine": "vllm", "version": "0.33.0"})).env == {}  # auto: nothing decided


def test_all2all_joins_the_attention_flags() -> None:
    from hwtune.core.types import All2AllSpec

    a2a = select_all2all(All2AllSpec(8, 256, 8, 7168), device="h100", db=False, assume_installed=True)
    sel = select_attention(LLAMA, device="h100", db=False, assume_installed=True)
    args = sel.to_vllm_args(all2all=a2a)
    assert args[-2:] == ["--all2all-backend", a2a.backend]
    _check(args, "vllm", "0.33.0")
    _check(list(a2a.launch("sglang").args), "sglang", "0.5.23")


def test_flags_exist_in_the_engine_source() -> None:
    """Each flag, and the all2all vocabulary, is in the engine file its clause cites (unpacked wheels only)."""
    for engine in ENGINES:
        snap = snapshot(engine)
        for version, root in _roots(engine):
            for key in snap.data["flags"]:
                resolved = snap.flag(key, version)
                path = root / resolved.source.split()[0]
                text = path.read_text()
                values = resolved.value if isinstance(resolved.value, list) else [resolved.value]
                for v in [v for v in values if isinstance(v, str)]:
                    name = v.lstrip("-").replace("-", "_") if engine == "sglang" else v
                    assert f'"{v}"' in text or re.search(rf"\b{name}\b", text), f"{engine} {version}: {v} not in {path}"


def test_sglang_gets_the_page_size_it_runs_a_backend_at() -> None:
    """SGLang runs flashmla at page 64 whatever --page-size says: the flag says 64, and a note when 16 was asked."""
    from tests.engines.test_examples import DEEPSEEK

    free = select_attention(DEEPSEEK, "h100", db=False, assume_installed=True, engine="sglang", backend="flashmla")
    assert free.to_sglang_args()[-2:] == ["--page-size", "64"]
    fixed = dataclasses.replace(DEEPSEEK, block_size=16)
    sel = select_attention(fixed, "h100", db=False, assume_installed=True, engine="sglang", backend="flashmla")
    out = launch(sel)
    assert list(out.args[-2:]) == ["--page-size", "64"]
    assert "SGLang 0.5.23 runs flashmla at page size 64, not 16" in out.notes
    plain = select_attention(
        dataclasses.replace(LLAMA, block_size=None), "h100", db=False, assume_installed=True, engine="sglang"
    )
    assert "--page-size" not in plain.to_sglang_args()  # SGLang's own default page size applies

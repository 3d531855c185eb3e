"""The KV layout in selection: a requested layout is never replaced; with ``auto`` the measured layouts compete."""

import dataclasses

import pytest

import hwtune
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.db.store import Store
from hwtune.selector.api import _cached
from tests.selector.test_measured import rec

AUTO = AttentionSpec(32, 8, 128)
# FLASHINFER is the faster backend in the NHD layout; FLASH_ATTN in HND is faster than anything in NHD.
FACTOR = {
    ("NHD", "FLASHINFER"): 1.0,
    ("NHD", "FLASH_ATTN"): 1.3,
    ("HND", "FLASHINFER"): 1.2,
    ("HND", "FLASH_ATTN"): 0.6,
}
TACTIC = {"FLASHINFER": "fa2-tc", "FLASH_ATTN": "fa3"}


def spec_records(specs: dict, factor: dict, tactics: dict = TACTIC) -> list:
    """Decode and prefill records of each ``label -> spec``, every backend of ``tactics`` at a latency that grows
    with the work, scaled by ``factor[(label, backend)]``."""
    out = []
    for label, spec in specs.items():
        shapes = [AttentionWorkload(spec, "decode", b, c) for b in (1, 16, 256) for c in (512, 8192, 32768)]
        shapes += [AttentionWorkload(spec, "prefill", 1, p + 2048, query_len=2048) for p in (0, 8192)]
        for w in shapes:
            size = w.batch * w.context_len if w.phase == "decode" else w.query_len * w.context_len / 50
            for backend, tactic in tactics.items():
                out.append(rec(w, backend, tactic, 10 + 0.001 * size * factor[(label, backend)]))
    return out


def records(layouts=("NHD", "HND")):
    return spec_records({lay: dataclasses.replace(AUTO, kv_layout=lay) for lay in layouts}, FACTOR)


@pytest.fixture()
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with Store.open(url) as s:
        s.write(records())
    _cached.cache_clear()
    yield url
    _cached.cache_clear()


def select(url, layout):
    _cached.cache_clear()
    spec = dataclasses.replace(AUTO, kv_layout=layout)
    return hwtune.select_attention(spec, device="h100", assume_installed=True, db=url)


def test_auto_takes_the_measured_cheapest_layout_and_says_so(url) -> None:
    sel = select(url, "auto")
    assert (sel.backend, sel.kv_layout) == ("FLASH_ATTN", "HND")
    assert sel.to_dict()["kv_layout"] == "HND" and "KV layout HND" in sel.explain()
    note = next(n for n in sel.notes if n.startswith("KV layout HND chosen"))
    assert "NHD: FLASHINFER" in note and "HND: FLASH_ATTN" in note


@pytest.mark.parametrize("layout, backend", [("NHD", "FLASHINFER"), ("HND", "FLASH_ATTN")])
def test_a_requested_layout_is_never_replaced(url, layout: str, backend: str) -> None:
    sel = select(url, layout)
    assert (sel.backend, sel.kv_layout) == (backend, layout)
    assert not any("chosen for kv_layout=auto" in n for n in sel.notes)


def test_auto_without_explicit_layout_measurements_is_selected_as_before(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    with Store.open(url):
        pass
    sel = select(url, "auto")
    assert sel.kv_layout == "auto" and all(r.source == "static" for r in sel.ranked)


def test_a_tactic_that_cannot_serve_the_requested_layout_is_rejected_with_the_layout_named() -> None:
    from hwtune.core import catalogue
    from hwtune.core.devices import simulated
    from hwtune.core.validation import check_tactic

    fi = catalogue.get("attention", "FLASHINFER")
    hnd = dataclasses.replace(AUTO, kv_layout="HND")
    [why] = [r for r in check_tactic(fi, fi.tactic("cudnn"), hnd, simulated("h100"), assume_installed=True)]
    assert why.code == "kv_layout" and "HND KV layout (supports NHD)" in why.message
    nhd = dataclasses.replace(AUTO, kv_layout="NHD")
    assert not check_tactic(fi, fi.tactic("cudnn"), nhd, simulated("h100"), assume_installed=True)


def test_auto_compares_layouts_as_the_decision_compares_backends(tmp_path) -> None:
    """In NHD, FLASHINFER decodes 1.4x faster and prefills 1.15x slower than FLASH_ATTN; in HND, FLASH_ATTN is the
    same and FLASHINFER 2x slower. Decode holds 60 % of the GPU time, so NHD's decision picks FLASHINFER by typical
    latency though FLASH_ATTN's weighted latency is lower (the long prefills weigh most there); ``auto`` must not
    bring that FLASH_ATTN back through the HND layout, as it did when layouts were compared by weighted latency."""
    factor = {"NHD": {"FLASHINFER": (1.0, 1.15), "FLASH_ATTN": (1.4, 1.0)}, "HND": {"FLASHINFER": (2.0, 2.3)}}
    factor["HND"]["FLASH_ATTN"] = factor["NHD"]["FLASH_ATTN"]
    out = []
    for lay, per_backend in factor.items():
        spec = dataclasses.replace(AUTO, kv_layout=lay)
        shapes = [AttentionWorkload(spec, "decode", b, c) for b in (1, 16, 256) for c in (512, 8192, 32768)]
        shapes += [AttentionWorkload(spec, "prefill", 1, p + 2048, query_len=2048) for p in (0, 8192)]
        for w in shapes:
            for backend, (dec, pre) in per_backend.items():
                out.append(rec(w, backend, TACTIC[backend], 10.0 * dec if w.phase == "decode" else 1000.0 * pre))
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Store.open(url) as s:
        s.write(out)
    nhd = select(url, "NHD")
    fi, fa = (next(r for r in nhd.ranked if r.backend == b) for b in ("FLASHINFER", "FLASH_ATTN"))
    assert nhd.backend == "FLASHINFER" and fa.latency_us < fi.latency_us and fi.typical_us < fa.typical_us
    auto = select(url, "auto")
    assert (auto.backend, auto.kv_layout) == ("FLASHINFER", "NHD")
    assert any("chosen for kv_layout=auto by measured typical latency" in n for n in auto.notes)
    _cached.cache_clear()

"""The KV block size in selection from hwtune's own catalogue: a given size is never replaced; with none given, the
sizes measured for the spec compete and the selection names the winner (selector/block_sizes.py).

The case that made it: `hwtune tune --model M` stores its measurements at block size 16, and the `hwtune select
attention --model M` it prints (no --block-size: the engine's own choice) found "no measurements of this spec" and
fell back to static priorities."""

import dataclasses

import pytest

import hwtune
from hwtune.core.types import AttentionSpec
from hwtune.db.store import Store
from hwtune.selector.api import _cached
from tests.selector.test_layouts import spec_records

SPEC = AttentionSpec(32, 8, 128, kv_layout="NHD")
TACTIC = {"FLASHINFER": "fa2-tc", "FLASH_ATTN": "fa3"}
#: (block size, backend) -> latency factor: FLASHINFER wins at 16, FLASH_ATTN at 64 is the cheapest of all.
FACTOR = {(16, "FLASHINFER"): 1.0, (16, "FLASH_ATTN"): 1.3, (64, "FLASHINFER"): 1.2, (64, "FLASH_ATTN"): 0.6}


def records(sizes=(16, 64)):
    return spec_records({size: dataclasses.replace(SPEC, block_size=size) for size in sizes}, FACTOR, TACTIC)


def select(url, block_size, engine=None):
    _cached.cache_clear()
    spec = dataclasses.replace(SPEC, block_size=block_size)
    return hwtune.select_attention(spec, device="h100", assume_installed=True, db=url, engine=engine)


@pytest.fixture()
def store(tmp_path):
    def make(sizes):
        url = f"sqlite:///{tmp_path / f'b{len(sizes)}.db'}"
        with Store.open(url) as s:
            if sizes:
                s.write(records(sizes))
        return url

    yield make
    _cached.cache_clear()


def test_without_a_block_size_the_measured_size_is_used_and_named(store) -> None:
    sel = select(store((16,)), None)
    assert sel.backend == "FLASHINFER" and sel.ranked[0].source != "static"
    assert sel.block_size == 16 and sel.to_dict()["block_size"] == 16 and "block size 16)" in sel.explain()
    assert any(n.startswith("no block size given: block size 16 chosen") for n in sel.notes)


def test_the_cheapest_measured_size_wins_and_the_note_compares_them(store) -> None:
    sel = select(store((16, 64)), None)
    assert (sel.backend, sel.spec["block_size"]) == ("FLASH_ATTN", 64)
    note = next(n for n in sel.notes if n.startswith("no block size given"))
    assert "16: FLASHINFER" in note and "64: FLASH_ATTN" in note


def test_a_given_block_size_is_never_replaced(store) -> None:
    sel = select(store((16, 64)), 16)
    assert (sel.backend, sel.spec["block_size"]) == ("FLASHINFER", 16)
    assert not any(n.startswith("no block size given") for n in sel.notes)


def test_without_measurements_at_any_size_the_selection_is_static_and_names_no_size(store) -> None:
    sel = select(store(()), None)
    assert sel.spec["block_size"] is None and all(r.source == "static" for r in sel.ranked)


def test_an_engine_target_keeps_reading_each_backend_at_the_engines_own_size(store) -> None:
    """vLLM on a CUDA device: the engine path reads each backend at the size vLLM runs it at (block_lookups), and
    the size the engine will use is said there; this module does not choose one."""
    sel = select(store((16, 64)), None, engine="vllm")
    assert not any(n.startswith("no block size given: block size") for n in sel.notes)

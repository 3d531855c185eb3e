"""benchmarks/regret.py scores a model of windowed and full-attention layers over both kinds: a candidate's latency at
an oracle shape is its layer-weighted sum over the kinds (synthetic stores, a simulated H100; no GPU)."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from hwtune.core.model_config import attention_spec, load_model_config
from hwtune.db.store import Store
from hwtune.selector.api import _cached
from tests.selector.test_layouts import spec_records

ROOT = Path(__file__).resolve().parents[2]
GPT_OSS = ROOT / "tests" / "data" / "models" / "gpt-oss-120b.json"
TACTIC = {"FLASHINFER": "fa2-tc", "FLASH_ATTN": "fa3"}
#: FLASH_ATTN is faster on the windowed layers, FLASHINFER (by more) on the full-attention ones.
FACTOR = {("w", "FLASHINFER"): 1.0, ("w", "FLASH_ATTN"): 0.8, ("f", "FLASHINFER"): 1.0, ("f", "FLASH_ATTN"): 1.5}


def _regret():
    spec = importlib.util.spec_from_file_location("regret", ROOT / "benchmarks" / "regret.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def stores(tmp_path):
    info = load_model_config(GPT_OSS)
    windowed = attention_spec(info, 8, kv_layout="NHD", block_size=16)
    full = dataclasses.replace(windowed, sliding_window=None)
    for name in ("train", "oracle"):
        with Store.open(f"sqlite:///{tmp_path / f'{name}.db'}") as s:
            s.write(spec_records({"w": windowed, "f": full}, FACTOR, TACTIC))
    _cached.cache_clear()
    yield tmp_path, info, windowed
    _cached.cache_clear()


def test_a_mixed_model_is_scored_over_both_kinds(stores) -> None:
    out, info, windowed = stores
    regret = _regret()
    kinds = regret.layer_kinds(info, windowed)
    assert [(s.sliding_window, n) for s, n in kinds] == [(128, 18), (None, 18)]
    lat, shape = regret.oracle_latencies(out, windowed, kinds)
    alone, _ = regret.oracle_latencies(out, windowed, None)  # the windowed kind's workloads only
    assert len(lat) == len(alone) == len(set(shape.values()))  # one workload per shape, from both kinds' records
    some = next(iter(lat))
    assert set(lat[some]) == set(TACTIC.items())
    result = regret.score(out, windowed, "h100", 131072, kinds)
    assert result["selection"]["backend"] == "FLASHINFER"  # cheaper over every layer
    assert result["policies"]["hwtune"]["worst"] == pytest.approx(1.0)
    windowed_only = regret.score(out, windowed, "h100", 131072, None)
    assert windowed_only["selection"]["backend"] == "FLASH_ATTN"


def test_the_static_list_is_scored_from_its_first_backend_the_oracle_measured(tmp_path) -> None:
    """Off the measuring machine every package counts as installed, and the static list's head on an H100 is
    FLASH_ATTN; an oracle of FLASHINFER and the Triton kernel scores the list's first backend it measured instead of
    inf (what the machine's probe, finding FLASH_ATTN missing, would have picked)."""
    spec = attention_spec(load_model_config(ROOT / "tests" / "data" / "models" / "llama-3.1-8b.json"), 1)
    spec = dataclasses.replace(spec, kv_layout="NHD", block_size=16)
    tactics = {"FLASHINFER": "fa2-tc", "HWTUNE_TRITON_ATTN": "auto"}
    factor = {("x", "FLASHINFER"): 1.0, ("x", "HWTUNE_TRITON_ATTN"): 1.3}
    for name in ("train", "oracle"):
        with Store.open(f"sqlite:///{tmp_path / f'{name}.db'}") as s:
            s.write(
                spec_records({"x": spec}, factor, tactics) + spec_records({"x": spec}, factor, {"FLASHINFER": "fa3"})
            )
    _cached.cache_clear()
    regret = _regret()
    result = regret.score(tmp_path, spec, "h100", 131072, None)
    _cached.cache_clear()
    static = result["policies"]["static"]
    assert static["worst"] < float("inf")
    assert {w["static"][0] for w in result["workloads"]} == {"FLASHINFER"}

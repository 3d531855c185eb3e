"""Guards on measured selection: each test fails when the behaviour it names is broken (issue 16).

The measurements are written to a real SQLite store and read back through ``select_attention`` /
``select_all2all``. Each set is designed so that the decision flips when the behaviour is broken: one backend
wins decode and another prefill, so the phase weights, the profile, a weights file, the per-phase split, the
all2all records and their tokens per rank each decide which backend comes first.
"""

import json

import pytest

import hwtune
from hwtune.core.devices import simulated
from hwtune.core.environment import current_environment
from hwtune.core.errors import InvalidSpecError
from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import All2AllSpec, All2AllWorkload, AttentionSpec, AttentionWorkload
from hwtune.db.store import Store
from hwtune.selector.api import _cached
from hwtune.selector.mix import PROFILES, all2all_mix, load_mix, workload_mix

SPEC = AttentionSpec(32, 8, 128)
A2A = All2AllSpec(ep_size=8, num_experts=256, topk=8, hidden_size=7168, quant_dtype="fp8")
H100 = simulated("h100")

DECODE_GRID = [(b, c) for b in (1, 4, 16, 64, 256) for c in (1024, 4096, 16384, 32768)]
PREFILL_GRID = [(512, 512), (512, 2048), (512, 8192), (2048, 2048), (2048, 8192), (2048, 32768), (8192, 8192)]
PREFILL_GRID += [(8192, 32768)]  # (chunk, context): the chunks of the built-in mix over their contexts

# FLASHINFER is the faster decode backend, FLASH_ATTN the faster prefill one. Latencies are flat within a
# phase, so a backend's cost over a built-in profile is exactly w_decode * decode + w_prefill * prefill:
#   decode-heavy  (0.85, 0.15): FLASHINFER 13.0,  FLASH_ATTN 18.5  -> FLASHINFER
#   balanced      (0.60, 0.40): FLASHINFER 18.0,  FLASH_ATTN 16.0  -> FLASH_ATTN
#   prefill-heavy (0.25, 0.75): FLASHINFER 25.0,  FLASH_ATTN 12.5  -> FLASH_ATTN
# and unweighted (every shape counted once) FLASHINFER would win every profile.
DECODE_US = {("FLASHINFER", "xqa"): 10.0, ("FLASH_ATTN", "fa3"): 20.0}
PREFILL_US = {("FLASHINFER", "fa3"): 30.0, ("FLASH_ATTN", "fa3"): 10.0}
PHASE_WINNER = {"decode-heavy": "FLASHINFER", "balanced": "FLASH_ATTN", "prefill-heavy": "FLASH_ATTN"}


def attention_rec(w: AttentionWorkload, backend: str, tactic: str, us: float, *, status: str = "ok"):
    env = current_environment(H100)
    return MeasurementRecord(
        kind="attention",
        workload=w.to_dict(),
        workload_key=w.key(),
        backend=backend,
        tactic=tactic,
        status=status,
        stats=LatencyStats.from_samples([us, us, us]) if status == "ok" else None,
        environment=env.fingerprint(),
        environment_hash=env.hash(),
        host="node-a",
        run_id="run-guards",
    )


def all2all_rec(tokens: int, backend: str, us: float):
    env = current_environment(H100)
    w = All2AllWorkload(A2A, tokens)
    return MeasurementRecord(
        kind="all2all",
        workload=w.to_dict(),
        workload_key=w.key(),
        backend=backend,
        tactic="default",
        status="ok",
        stats=LatencyStats.from_samples([us, us, us]),
        environment=env.fingerprint(),
        environment_hash=env.hash(),
        host="node-a",
        run_id="run-guards",
    )


def phase_split_records():
    out = []
    for b, c in DECODE_GRID:
        out += [attention_rec(AttentionWorkload(SPEC, "decode", b, c), *bt, us) for bt, us in DECODE_US.items()]
    for chunk, ctx in PREFILL_GRID:
        w = AttentionWorkload(SPEC, "prefill", 1, ctx, query_len=chunk)
        out += [attention_rec(w, *bt, us) for bt, us in PREFILL_US.items()]
    return out


@pytest.fixture()
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'guards.db'}"
    with Store.open(url) as s:
        yield url, s
    _cached.cache_clear()


def select(url, **kw):
    _cached.cache_clear()
    return hwtune.select_attention(SPEC, device="h100", assume_installed=True, db=url, **kw)


def select_a2a(url, **kw):
    _cached.cache_clear()
    return hwtune.select_all2all(A2A, device="h100", assume_installed=True, db=url, **kw)


# --- the mixes themselves ------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", list(PROFILES))
def test_each_profile_gives_its_phases_their_share(profile: str) -> None:
    w_decode, w_prefill = {"decode-heavy": (0.85, 0.15), "balanced": (0.6, 0.4), "prefill-heavy": (0.25, 0.75)}[profile]
    mix = workload_mix(256, 32768, profile)
    assert sum(p.weight for p in mix if p.phase == "decode") == pytest.approx(w_decode)
    assert sum(p.weight for p in mix if p.phase == "prefill") == pytest.approx(w_prefill)
    a2a = all2all_mix(256, profile)
    assert sum(p.weight for p in a2a if p.batch <= 256) == pytest.approx(w_decode)  # decode steps
    assert sum(p.weight for p in a2a if p.batch > 256) == pytest.approx(w_prefill)  # prefill chunks


def test_mix_points_carry_chunk_lengths_and_decode_query_length() -> None:
    mix = workload_mix(256, 32768, "balanced", query_len_decode=3)
    assert sorted((p.query_len, p.context) for p in mix if p.phase == "prefill") == PREFILL_GRID
    assert {p.query_len for p in mix if p.phase == "decode"} == {3}  # spec tokens + 1 per decode step
    assert sorted({(p.batch, p.context) for p in mix if p.phase == "decode"}) == DECODE_GRID
    assert [p.batch for p in all2all_mix(64, "balanced")] == [1, 4, 16, 64, 2048, 8192]  # tokens per rank


# --- profiles and phase weights ------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", list(PROFILES))
def test_profile_weights_decide_the_backend(store, profile: str) -> None:
    url, s = store
    s.write(phase_split_records())
    sel = select(url, profile=profile)
    w_decode, w_prefill = PROFILES[profile]
    expected = {
        b: w_decode * DECODE_US[next(k for k in DECODE_US if k[0] == b)]
        + w_prefill * PREFILL_US[next(k for k in PREFILL_US if k[0] == b)]
        for b in ("FLASHINFER", "FLASH_ATTN")
    }
    assert sel.backend == PHASE_WINNER[profile]
    assert [r.backend for r in sel.ranked[:2]] == sorted(expected, key=expected.get)
    assert [r.source for r in sel.ranked[:2]] == ["measured", "measured"]  # every mix shape was measured
    for r in sel.ranked[:2]:
        assert r.latency_us == pytest.approx(expected[r.backend])  # weighted mean over the mix
    assert sel.ranked[2].backend == "TRITON_ATTN" and sel.ranked[2].source == "static"  # unmeasured: after them


def test_decode_heavy_uses_the_measured_tactics(store) -> None:
    url, s = store
    s.write(phase_split_records())
    sel = select(url, profile="decode-heavy")
    # the static decode tactic of FLASHINFER on SM 9.0 is fa2-tc; only xqa was measured, and it is what runs
    assert sel.backend == "FLASHINFER" and dict(sel.tactics) == {"decode": "xqa", "prefill": "fa3"}


# --- per-phase selection -------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", list(PROFILES))
def test_per_phase_is_each_phases_own_winner(store, profile: str) -> None:
    url, s = store
    s.write(phase_split_records())
    sel = select(url, profile=profile)
    # whichever backend wins the whole mix, decode is FLASHINFER's and prefill FLASH_ATTN's
    assert sel.per_phase == {"decode": "FLASHINFER", "prefill": "FLASH_ATTN"}
    assert "per phase: decode -> FLASHINFER, prefill -> FLASH_ATTN" in sel.explain()


def test_per_phase_in_the_cli(store) -> None:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    url, s = store
    s.write(phase_split_records())
    heads = ["--num-heads", "32", "--num-kv-heads", "8", "--head-size", "128"]
    base = ["select", "attention", *heads, "--device", "h100", "--assume-installed", "--db", url]
    _cached.cache_clear()
    res = CliRunner().invoke(app, [*base, "--profile", "decode-heavy", "--json"])
    data = json.loads(res.stdout)
    assert res.exit_code == 0 and data["backend"] == "FLASHINFER"
    assert data["per_phase"] == {"decode": "FLASHINFER", "prefill": "FLASH_ATTN"}
    _cached.cache_clear()
    res = CliRunner().invoke(app, [*base, "--profile", "prefill-heavy", "--per-phase"])
    assert res.exit_code == 0 and res.stdout.strip().splitlines()[-1] == "FLASH_ATTN"
    assert "decode: FLASHINFER (tactic xqa)" in res.stderr and "prefill: FLASH_ATTN (tactic fa3)" in res.stderr


# --- a weights file ------------------------------------------------------------------------------------------


def test_json_weights_file_weighted_to_prefill_chooses_the_prefill_winner(store, tmp_path) -> None:
    url, s = store
    s.write(phase_split_records())
    path = tmp_path / "prefill.json"
    # three decode shapes, one prefill shape: counted once each, FLASHINFER would win (60 vs 70 us);
    # by the file's weights prefill is 85% of the time: FLASHINFER 27, FLASH_ATTN 11.5
    points = [{"phase": "decode", "batch": b, "context": c, "weight": 0.05} for b, c in ((1, 1024), (16, 4096))]
    points += [{"phase": "decode", "batch": 64, "context": 16384, "weight": 0.05}]
    points += [{"phase": "prefill", "batch": 1, "context": 8192, "query_len": 2048, "weight": 0.85}]
    path.write_text(json.dumps(points))
    assert [(p.phase, p.weight) for p in load_mix(path)][-1] == ("prefill", 0.85)
    sel = select(url, profile=str(path))
    assert sel.backend == "FLASH_ATTN" and sel.ranked[1].backend == "FLASHINFER"
    assert sel.ranked[0].latency_us == pytest.approx(11.5) and sel.ranked[1].latency_us == pytest.approx(27.0)
    assert sel.per_phase == {"decode": "FLASHINFER", "prefill": "FLASH_ATTN"}


def test_toml_weights_file_weighted_to_decode_chooses_the_decode_winner(store, tmp_path) -> None:
    url, s = store
    s.write(phase_split_records())
    path = tmp_path / "decode.toml"
    # the balanced profile would choose FLASH_ATTN; this file says decode is 90% of the time
    path.write_text(
        "[[point]]\nphase = 'decode'\nbatch = 64\ncontext = 4096\nweight = 9\n\n"
        "[[point]]\nphase = 'prefill'\nbatch = 1\ncontext = 32768\nquery_len = 8192\nweight = 1\n"
    )
    assert select(url).backend == "FLASH_ATTN"  # balanced, for contrast
    sel = select(url, profile=str(path))
    assert sel.backend == "FLASHINFER" and sel.ranked[1].backend == "FLASH_ATTN"
    assert sel.ranked[1].latency_us / sel.ranked[0].latency_us == pytest.approx((9 * 20 + 10) / (9 * 10 + 30))


@pytest.mark.parametrize("chunk, winner", [(512, "FLASHINFER"), (8192, "FLASH_ATTN")])
def test_prefill_chunk_length_of_a_weights_file_is_costed(store, tmp_path, chunk: int, winner: str) -> None:
    """At one context, FLASHINFER is faster for short chunks (over a long cached prefix) and FLASH_ATTN for a
    whole-context chunk: the chunk length in the file decides."""
    url, s = store
    short = AttentionWorkload(SPEC, "prefill", 1, 8192, query_len=512)
    whole = AttentionWorkload(SPEC, "prefill", 1, 8192, query_len=8192)
    s.write([attention_rec(short, "FLASHINFER", "fa3", 5.0), attention_rec(short, "FLASH_ATTN", "fa3", 8.0)])
    s.write([attention_rec(whole, "FLASHINFER", "fa3", 50.0), attention_rec(whole, "FLASH_ATTN", "fa3", 20.0)])
    path = tmp_path / "chunk.json"
    path.write_text(json.dumps([{"phase": "prefill", "batch": 1, "context": 8192, "query_len": chunk, "weight": 1}]))
    sel = select(url, profile=str(path))
    assert sel.backend == winner and sel.ranked[0].source == "measured"
    assert sel.ranked[0].latency_us == pytest.approx({512: 5.0, 8192: 20.0}[chunk])


# --- dispatch table ------------------------------------------------------------------------------------------


def context_crossover_records() -> list[MeasurementRecord]:
    """FLASHINFER's xqa faster below about 2000 tokens of context, fa2-tc above, at every batch; fa3 prefill."""
    recs = []
    for b in (1, 16, 256):
        for c in (512, 2048, 8192, 32768):
            w = AttentionWorkload(SPEC, "decode", b, c)
            recs += [
                attention_rec(w, "FLASHINFER", "xqa", 5 + c / 100),
                attention_rec(w, "FLASHINFER", "fa2-tc", 20 + c / 400),
            ]
    for chunk, ctx in PREFILL_GRID:
        recs.append(attention_rec(AttentionWorkload(SPEC, "prefill", 1, ctx, query_len=chunk), "FLASHINFER", "fa3", 30))
    return recs


def test_dispatch_table_follows_a_context_crossover(store) -> None:
    """FLASHINFER's xqa is faster below about 2000 tokens of context, fa2-tc above, at every batch size."""
    url, s = store
    s.write(context_crossover_records())
    sel = select(url)
    assert sel.backend == "FLASHINFER" and sel.ranked[0].source in ("measured", "interpolated")
    for batch in (1, 8, 200):
        assert sel.tactic_for("decode", batch, 600) == "xqa"
        assert sel.tactic_for("decode", batch, 1000) == "xqa"
        assert sel.tactic_for("decode", batch, 8000) == "fa2-tc"
        assert sel.tactic_for("decode", batch, 30000) == "fa2-tc"
    short = [e for e in sel.dispatch if e.phase == "decode" and e.context_max <= 1024]
    long = [e for e in sel.dispatch if e.phase == "decode" and e.context_max >= 4096]
    assert short and {e.tactic for e in short} == {"xqa"} and long and {e.tactic for e in long} == {"fa2-tc"}


def test_dispatch_cells_split_each_doubling_and_centre_on_integers_they_hold(monkeypatch) -> None:
    from hwtune.selector import dispatch

    assert dispatch.cell_bounds(1, 200) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert dispatch.cell_bounds(16, 16) == [16]
    assert dispatch._centres([1, 2, 4, 8]) == {1: 1, 2: 2, 4: 3, 8: 6}  # the cell (1, 2] holds batch 2 only
    monkeypatch.setattr(dispatch, "CELLS_PER_OCTAVE", 2)
    assert dispatch.cell_bounds(1, 16) == [1, 2, 3, 4, 6, 8, 11, 16]
    assert dispatch.cell_bounds(16, 100) == [16, 23, 32, 45, 64, 91, 128]


def test_dispatch_lookup_finds_half_octave_cells(store, monkeypatch) -> None:
    """With two cells per doubling the crossover of the test above is located within half an octave: the cell
    (1448, 2048] is decided at its centre (1722 tokens, xqa) and (2048, 2896] at 2435 (fa2-tc)."""
    from hwtune.selector import dispatch

    monkeypatch.setattr(dispatch, "CELLS_PER_OCTAVE", 2)
    url, s = store
    s.write(context_crossover_records())
    sel = select(url)
    assert {e.context_max for e in sel.dispatch if e.phase == "decode"} >= {1448, 2048, 2896}
    assert sel.tactic_for("decode", 8, 1700) == "xqa" and sel.tactic_for("decode", 8, 2500) == "fa2-tc"
    assert sel.tactic_for("decode", 8, 10**6) == "fa2-tc" and sel.tactic_for("decode", 10**4, 3) == "xqa"


# --- measured all2all ----------------------------------------------------------------------------------------

# allgather_reducescatter is faster for decode steps (few tokens per rank), deepep_high_throughput for prefill
# chunks. Weighted latencies, the cost shown (decode tokens share w_decode over 5 points, prefill tokens w_prefill
# over 2):
#   decode-heavy:  allgather_reducescatter 0.85*10 + 0.15*90 = 22.0;  deepep_high_throughput 32.25
#   prefill-heavy: allgather_reducescatter 0.25*10 + 0.75*90 = 70.0;  deepep_high_throughput 41.25
# The decision compares typical latencies (the weighted geometric means: decision.deciding_cost).
# Statically (no measurements) deepep_low_latency comes first on SM 9.0, then deepep_high_throughput, then
# allgather_reducescatter; counting every tokens-per-rank alike, allgather_reducescatter would always win.
A2A_US = {
    "allgather_reducescatter": {1: 10, 4: 10, 16: 10, 64: 10, 256: 10, 2048: 60, 8192: 120},
    "deepep_high_throughput": {1: 30, 4: 30, 16: 30, 64: 30, 256: 30, 2048: 30, 8192: 60},
}
#: Weighted latency (the cost shown) per profile; the decision compares typical latencies (decision.deciding_cost):
#: allgather is 1x the faster at decode and 2x at prefill, deepep 3x and 1x.
A2A_COST = {
    "decode-heavy": {"allgather_reducescatter": 22.0, "deepep_high_throughput": 32.25},
    "prefill-heavy": {"allgather_reducescatter": 70.0, "deepep_high_throughput": 41.25},
}


def a2a_records():
    return [all2all_rec(t, b, us) for b, per_tokens in A2A_US.items() for t, us in per_tokens.items()]


def test_all2all_without_measurements_is_static(store) -> None:
    url, _ = store
    sel = select_a2a(url)
    assert sel.backend == "deepep_low_latency" and all(r.source == "static" for r in sel.ranked)
    assert sel.per_phase == {}


@pytest.mark.parametrize("profile", ["decode-heavy", "prefill-heavy"])
def test_all2all_ranks_by_measured_cost_over_tokens_per_rank(store, profile: str) -> None:
    url, s = store
    s.write(a2a_records())
    sel = select_a2a(url, profile=profile)
    cost = A2A_COST[profile]
    order = sorted(cost, key=cost.get)
    assert [r.backend for r in sel.ranked[:3]] == [*order, "deepep_low_latency"]  # measured first, then static
    assert [r.source for r in sel.ranked[:3]] == ["measured", "measured", "static"]
    assert [r.latency_us for r in sel.ranked[:2]] == [pytest.approx(cost[b]) for b in order]
    assert sel.backend == order[0] and sel.per_phase == {"dispatch_combine": order[0]}
    assert sel.to_vllm_args() == ["--all2all-backend", order[0]]


def test_all2all_measured_choice_beats_static_order_by_default(store) -> None:
    url, s = store
    s.write(a2a_records())
    sel = select_a2a(url)  # balanced: allgather_reducescatter 0.6*10 + 0.4*90 = 42, deepep_high_throughput 36 ...
    assert sel.backend == "allgather_reducescatter" and sel.ranked[0].latency_us == pytest.approx(42.0)
    assert sel.ranked[1].backend == "deepep_high_throughput"  # ... but its typical latency is 34.5 us, not 23.5
    assert any("whose weighted latency is lower (36.0 us against 42.0)" in n for n in sel.notes)
    assert any(e.phase == "dispatch_combine" for e in sel.dispatch)


def test_all2all_cli_reads_the_store_and_the_profile(store) -> None:
    from typer.testing import CliRunner

    from hwtune.cli.main import app

    url, s = store
    s.write(a2a_records())
    base = ["select", "all2all", "--ep-size", "8", "--num-experts", "256", "--topk", "8", "--hidden-size", "7168"]
    base += ["--quant-dtype", "fp8", "--device", "h100", "--assume-installed", "--db", url, "--json"]
    for profile, winner in (("decode-heavy", "allgather_reducescatter"), ("prefill-heavy", "deepep_high_throughput")):
        _cached.cache_clear()
        res = CliRunner().invoke(app, [*base, "--profile", profile])
        assert res.exit_code == 0, res.output
        data = json.loads(res.stdout)
        assert data["backend"] == winner and data["ranked"][0]["source"] == "measured"
    _cached.cache_clear()


@pytest.mark.parametrize(
    "weights, winner, cost",
    [({2048: 1, 8192: 1}, "deepep_high_throughput", 90.0), ({1: 1, 16: 3}, "allgather_reducescatter", 40.0)],
)
def test_all2all_weights_file_decides_by_tokens_per_rank(store, tmp_path, weights, winner, cost) -> None:
    """An all2all weights file names tokens per rank; before, it was read as attention points and ignored."""
    url, s = store
    s.write(a2a_records())
    path = tmp_path / "a2a.json"
    path.write_text(json.dumps([{"tokens": t, "weight": w} for t, w in weights.items()]))
    sel = select_a2a(url, profile=str(path))
    assert sel.backend == winner and sel.ranked[0].source != "static"
    assert sel.ranked[0].latency_us == pytest.approx(cost)


def test_a_weights_file_of_the_other_kind_is_refused(tmp_path) -> None:
    path = tmp_path / "attn.json"
    path.write_text(json.dumps([{"phase": "decode", "batch": 4, "context": 512, "weight": 1}]))
    with pytest.raises(InvalidSpecError, match="needs tokens and weight"):
        load_mix(path, "all2all")
    path.write_text(json.dumps([{"phase": "decode", "tokens": 4, "weight": 1}]))
    with pytest.raises(InvalidSpecError, match="all2all weights file has dispatch_combine"):
        load_mix(path, "all2all")

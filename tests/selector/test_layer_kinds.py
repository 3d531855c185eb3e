"""A model whose layers mix sliding-window and full attention (gpt-oss) is served by one backend: it is ranked by its
cost over every layer, each kind measured under its own spec (selector/layer_kinds.py)."""

import dataclasses

import pytest

import hwtune
from hwtune.core.errors import InvalidSpecError
from hwtune.core.types import AttentionSpec
from hwtune.db.store import Store
from hwtune.selector.api import _cached
from tests.selector.test_layouts import spec_records

WINDOWED = AttentionSpec(64, 8, 64, kv_layout="NHD", block_size=16, sliding_window=128)
FULL = dataclasses.replace(WINDOWED, sliding_window=None)
TACTIC = {"FLASHINFER": "fa2-tc", "FLASH_ATTN": "fa3"}
#: FLASH_ATTN is the faster on the windowed layers, FLASHINFER (by more) on the full-attention ones.
FACTOR = {("w", "FLASHINFER"): 1.0, ("w", "FLASH_ATTN"): 0.8, ("f", "FLASHINFER"): 1.0, ("f", "FLASH_ATTN"): 1.5}


@pytest.fixture()
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'k.db'}"
    with Store.open(url) as s:
        s.write(spec_records({"w": WINDOWED, "f": FULL}, FACTOR, TACTIC))
    _cached.cache_clear()
    yield url
    _cached.cache_clear()


def select(url, **layers):
    return hwtune.select_attention(WINDOWED, device="h100", assume_installed=True, db=url, **layers)


def cost(sel, backend):
    return next(r.latency_us for r in sel.ranked if r.backend == backend)


def test_one_backend_is_ranked_over_every_layer_weighted_by_count(url) -> None:
    alone = select(url)
    assert alone.backend == "FLASH_ATTN"  # the windowed layers alone
    half = select(url, full_attention_layers=18, num_layers=36)
    assert half.backend == "FLASHINFER"
    full = hwtune.select_attention(FULL, device="h100", assume_installed=True, db=url)
    for backend in TACTIC:  # one tactic each: the weighted mean of each kind's own cost
        assert cost(half, backend) == pytest.approx((cost(alone, backend) + cost(full, backend)) / 2)
    assert any("18 windowed, 18 full-attention" in n for n in half.notes)
    assert "one tactic per shape over every layer; each kind's own best: windowed 18 x" in half.explain()
    few = select(url, full_attention_layers=1, num_layers=36)  # nearly all windowed: the windowed winner
    assert few.backend == "FLASH_ATTN"


@pytest.mark.parametrize(
    ("layers", "words"),
    [
        ({"full_attention_layers": 18}, "together"),
        ({"full_attention_layers": 36, "num_layers": 36}, "between 1 and num_layers - 1"),
        ({"full_attention_layers": 0, "num_layers": 36}, "between 1 and num_layers - 1"),
    ],
)
def test_layer_counts_that_describe_no_mix_are_refused(url, layers, words) -> None:
    with pytest.raises(InvalidSpecError, match=words):
        select(url, **layers)


def test_a_spec_without_a_window_cannot_have_full_attention_layers(url) -> None:
    with pytest.raises(InvalidSpecError, match="sliding_window"):
        hwtune.select_attention(FULL, device="h100", db=url, full_attention_layers=18, num_layers=36)


def _sel(ranked, rejected=None, per_phase=None):
    from hwtune.core.devices import simulated
    from hwtune.selector.selection import RankedBackend, Selection

    entries = tuple(  # (backend, latency[, typical latency])
        RankedBackend(
            b, "static" if c is None else "measured", {"decode": "t"}, latency_us=c, typical_us=t[0] if t else None
        )
        for b, c, *t in ranked
    )
    return Selection(
        kind="attention",
        spec=WINDOWED.to_dict(),
        device=simulated("h100"),
        backend=entries[0].backend,
        tactics={"decode": "t"},
        ranked=entries,
        rejected=rejected or {},
        per_phase=per_phase or {},
    )


def test_a_backend_must_serve_every_kind_and_unmeasured_kinds_leave_it_unranked_by_cost() -> None:
    from hwtune.selector.layer_kinds import combine

    windowed = _sel([("A", 30.0), ("B", 10.0), ("C", 5.0)], per_phase={"decode": "C", "prefill": "B"})
    full = _sel([("A", 40.0), ("C", None)], {"B": ("needs what the full layers lack",)}, {"decode": "C"})
    sel = combine([(windowed, 2, "windowed"), (full, 1, "full-attention")])
    assert [r.backend for r in sel.ranked] == ["A", "C"] and sel.backend == "A"
    assert sel.ranked[0].latency_us == pytest.approx((2 * 30.0 + 40.0) / 3)
    assert sel.ranked[1].source == "static" and sel.ranked[1].latency_us is None  # unmeasured for one kind
    assert sel.rejected["B"] == ("full-attention layers: needs what the full layers lack",)
    assert sel.per_phase == {"decode": "C"}  # prefill's winners differ: no routing for it


def test_a_kind_nothing_was_measured_for_is_left_out_of_the_costs_and_said(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"  # a store tuned before both kinds were: windowed layers only
    with Store.open(url) as s:
        s.write(spec_records({"w": WINDOWED}, FACTOR, TACTIC))
    _cached.cache_clear()
    sel = select(url, full_attention_layers=18, num_layers=36)
    assert sel.backend == "FLASH_ATTN" and sel.ranked[0].source != "static"  # the windowed ranking, not static
    assert any("nothing measured for the full-attention layers" in n for n in sel.notes), sel.notes
    assert sel.dispatch and any("tactic_for answers from the windowed layers" in n for n in sel.notes)
    _cached.cache_clear()


def test_a_single_measured_kinds_own_order_stands_and_near_ties_follow_the_heaviest_kind() -> None:
    from hwtune.selector.layer_kinds import combine

    # the windowed kind ranked A first although B is 4 % cheaper (its near-tie rule: A's worst point is better)
    windowed = _sel([("A", 10.4), ("B", 10.0)], per_phase={"decode": "A"})
    unmeasured = _sel([("B", None), ("A", None)])
    sel = combine([(windowed, 18, "windowed"), (unmeasured, 18, "full-attention")])
    assert sel.backend == "A" and sel.unmeasured_layers == ("full-attention",)
    assert sel.per_phase == {"decode": "A"}  # the unmeasured kind takes no routing away
    assert not any("per-phase winners differ" in n for n in sel.notes)
    full = _sel([("A", 20.9), ("B", 21.0)])  # combined: A 15.65, B 15.5 (within 5 %); the heavier kind ranks A first
    both = combine([(windowed, 10, "windowed"), (full, 26, "full-attention")])
    assert [r.backend for r in both.ranked] == ["A", "B"] and both.unmeasured_layers == ()
    far = _sel([("B", 10.0), ("A", 30.0)])  # not a near-tie: cost decides
    assert combine([(windowed, 10, "windowed"), (far, 26, "full-attention")]).backend == "B"


def test_kinds_combined_without_a_joint_cost_rank_by_typical_latency() -> None:
    """B's weighted latency is the lower on both kinds (and each kind's own order puts B first), A's typical latency
    (what the decision compares) the lower, by more than the near-tie: A ranks first, with the kinds' typical latencies
    combined by layer count; an entry static over every layer carries none."""
    from hwtune.selector.layer_kinds import combine

    windowed = _sel([("B", 8.0, 9.0), ("A", 10.0, 5.0)])  # each kind's own order puts B first
    full = _sel([("B", 16.0, 18.0), ("A", 20.0, 10.0)])
    sel = combine([(windowed, 18, "windowed"), (full, 18, "full-attention")])
    a, b = sel.ranked[:2]
    assert (a.backend, b.backend) == ("A", "B") and b.latency_us < a.latency_us
    assert a.typical_us == pytest.approx((5.0 * 10.0) ** 0.5) and b.typical_us == pytest.approx((9.0 * 18.0) ** 0.5)
    # C measured on the windowed layers only: static over every layer, with no typical latency left from one kind
    windowed_c = _sel([("A", 10.0, 5.0), ("B", 8.0, 9.0), ("C", 4.0, 3.0)])
    full_c = _sel([("A", 20.0, 10.0), ("B", 16.0, 18.0), ("C", None)])
    c = next(
        r for r in combine([(windowed_c, 18, "windowed"), (full_c, 10, "full-attention")]).ranked if r.backend == "C"
    )
    assert c.source == "static" and c.typical_us is None and "typical_us" not in c.to_dict()


def test_layouts_compare_costs_over_every_layer_kind_before_partial_ones() -> None:
    from hwtune.selector.layouts import measured_cheapest

    complete = dataclasses.replace(_sel([("A", 50.0)]), unmeasured_layers=())
    partial = dataclasses.replace(_sel([("B", 20.0)]), unmeasured_layers=("full-attention",))  # cheaper: half the cost
    label, sel, _ = measured_cheapest(
        lambda spec: {"NHD": complete, "HND": partial}[spec], {"NHD": "NHD", "HND": "HND"}
    )
    assert (label, sel.backend) == ("NHD", "A")
    label, _, _ = measured_cheapest(lambda spec: partial, {"HND": "HND"})  # only partial ones: compared as they are
    assert label == "HND"


def test_tactic_for_answers_from_a_kind_whose_winner_is_the_chosen_backend() -> None:
    from hwtune.selector.layer_kinds import combine
    from hwtune.selector.selection import DispatchEntry

    entry = DispatchEntry("decode", 256, 131072, "t-full", 10.0, "measured")
    windowed = dataclasses.replace(
        _sel([("B", 10.0), ("A", 11.0)]), dispatch=(dataclasses.replace(entry, tactic="t-windowed"),)
    )
    full = dataclasses.replace(_sel([("A", 20.0), ("B", 40.0)]), dispatch=(entry,))
    sel = combine([(windowed, 18, "windowed"), (full, 18, "full-attention")])  # A: 15.5, B: 25
    assert sel.backend == "A" and sel.dispatch == (entry,)
    assert any("from the full-attention layers" in n for n in sel.notes)


def _tactic_records() -> list:
    """FLASHINFER with two tactics: fa3 10 % faster on the windowed layers everywhere; on the full-attention layers
    6x slower than fa2-tc from 8192 tokens of context (the case that gave gpt-oss 1.65 regret on an H100)."""
    from hwtune.core.types import AttentionWorkload
    from tests.selector.test_measured import rec

    out = []
    for label, spec in (("w", WINDOWED), ("f", FULL)):
        shapes = [AttentionWorkload(spec, "decode", b, c) for b in (1, 16, 256) for c in (512, 8192, 32768)]
        shapes += [AttentionWorkload(spec, "prefill", 1, p + 2048, query_len=2048) for p in (0, 8192)]
        for w in shapes:
            base = 10 + 0.001 * (w.batch * w.context_len if w.phase == "decode" else w.query_len * w.context_len / 50)
            slow = 6.0 if label == "f" and w.context_len >= 8192 else 1.0
            out.append(rec(w, "FLASHINFER", "fa2-tc", base))
            out.append(rec(w, "FLASHINFER", "fa3", base * (0.9 if label == "w" else slow)))
    return out


def test_tactics_and_dispatch_take_one_tactic_per_shape_weighted_over_every_layer(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    with Store.open(url) as s:
        s.write(_tactic_records())
    _cached.cache_clear()
    alone = select(url)  # the windowed layers alone: fa3 everywhere
    assert alone.tactic_for("decode", 1, 32768) == "fa3" and alone.tactics["decode"] == "fa3"
    both = select(url, full_attention_layers=18, num_layers=36)
    assert both.tactic_for("decode", 1, 32768) == "fa2-tc"  # fa3: (0.9 + 6) / 2 = 3.45x fa2-tc's cost
    assert both.tactic_for("decode", 16, 20000) == "fa2-tc"
    assert both.tactic_for("decode", 1, 600) == "fa3"  # short contexts: fa3 ties on the full layers, wins windowed
    assert both.tactic_for("prefill", 1, 10240, 2048) == "fa2-tc"
    assert both.tactics["decode"] == "fa2-tc"  # the mix's heaviest tactic, on the merged costs too
    assert both.ranked[0].tactics == both.tactics
    assert any("one tactic per shape, weighted by layers" in n for n in both.notes)
    _cached.cache_clear()


def test_layered_estimates_weigh_each_kinds_own_estimate_and_are_inside_only_where_every_kind_is() -> None:
    from hwtune.selector.layer_kinds import Layered
    from hwtune.selector.measured import Evidence, Point
    from hwtune.selector.mix import MixPoint
    from hwtune.selector.selection import Basis

    key = ("B", "t", "decode")
    windowed = Evidence(
        points={key: [Point(1, 1024, 1, 10.0, 1), Point(1, 4096, 1, 10.0, 1)], ("B", "u", "decode"): []}
    )
    full = Evidence(points={key: [Point(1, 1024, 1, 40.0, 1), Point(1, 2048, 1, 60.0, 1), Point(1, 4096, 1, 100.0, 1)]})
    joint = Layered(((windowed, 3), (full, 1)), Basis(windowed, (), 1, 4096))
    assert joint.tactics("B") == ["t"]  # a tactic measured for one kind only is not costed over every layer
    at = joint.at("B")
    lat, exact, _, inside = at("t", MixPoint("decode", 1, 1024, 1.0))
    assert lat == pytest.approx((3 * 10 + 40) / 4) and exact and inside
    lat, exact, _, inside = at("t", MixPoint("decode", 1, 2048, 1.0))  # windowed estimated between its two points
    assert lat == pytest.approx((3 * 10 + 60) / 4) and not exact and inside
    assert not at("t", MixPoint("decode", 1, 16384, 1.0))[3]  # beyond both kinds' points: an extrapolation


def _records(factor: dict, contexts: dict) -> list:
    """Decode and prefill records of FLASHINFER's fa3 and fa2-tc for each kind ("w", "f") at the kind's decode
    ``contexts``, at a latency growing with the work times ``factor[(kind, tactic)]`` (a callable of the context)."""
    from hwtune.core.types import AttentionWorkload
    from tests.selector.test_measured import rec

    out = []
    for label, spec in (("w", WINDOWED), ("f", FULL)):
        shapes = [AttentionWorkload(spec, "decode", b, c) for b in (1, 16, 256) for c in contexts[label]]
        shapes += [AttentionWorkload(spec, "prefill", 1, p + 2048, query_len=2048) for p in (0, 8192)]
        for w in shapes:
            base = 10 + 0.001 * (w.batch * w.context_len if w.phase == "decode" else w.query_len * w.context_len / 50)
            out += [rec(w, "FLASHINFER", t, base * factor[(label, t)](w.context_len)) for t in ("fa3", "fa2-tc")]
    return out


def _store(tmp_path, records) -> str:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Store.open(url) as s:
        s.write(records)
    _cached.cache_clear()
    return url


def test_the_cost_over_every_layer_is_never_below_the_kinds_own_best_costs(tmp_path) -> None:
    url = _store(tmp_path, _tactic_records())
    both = select(url, full_attention_layers=18, num_layers=36)
    windowed = select(url)
    full = hwtune.select_attention(FULL, device="h100", assume_installed=True, db=url)
    floor = (cost(windowed, "FLASHINFER") + cost(full, "FLASHINFER")) / 2  # each kind with its own best tactics
    assert cost(both, "FLASHINFER") >= floor * (1 - 1e-9)
    assert cost(both, "FLASHINFER") > 1.03 * floor  # fa3 on the windowed layers cannot come with fa2-tc on the full
    _cached.cache_clear()


def test_a_kind_measured_over_a_shorter_range_does_not_decide_by_extrapolation(tmp_path) -> None:
    """The full-attention layers were measured up to 2048 tokens only, fa3 there 1.5x behind fa2-tc (3x at 512); the
    windowed layers to 32768, fa3 10 % ahead. Beyond 2048 the full kind's edge decides (fa2-tc), not a fit that
    carries fa3's narrowing gap on."""
    factor = {
        ("w", "fa3"): lambda c: 0.9,
        ("w", "fa2-tc"): lambda c: 1.0,
        ("f", "fa3"): lambda c: 3.0 if c <= 512 else 1.5,
        ("f", "fa2-tc"): lambda c: 1.0,
    }
    url = _store(tmp_path, _records(factor, {"w": (512, 8192, 32768), "f": (512, 2048)}))
    both = select(url, full_attention_layers=18, num_layers=36)
    for batch in (1, 16, 256):
        for context in (12000, 20000, 32000):
            assert both.tactic_for("decode", batch, context) == "fa2-tc", (batch, context)
    _cached.cache_clear()


def test_a_backend_whose_tactics_split_between_the_kinds_is_costed_with_one_tactic_per_shape(tmp_path) -> None:
    """FLASHINFER's fa3 is 4x faster than FLASH_ATTN on the windowed layers and 3x slower on the full ones, its fa2-tc
    the reverse: each kind alone costs FLASHINFER at half FLASH_ATTN's, but one tactic serves both kinds at each step,
    which costs it 1.75x FLASH_ATTN's."""
    from hwtune.core.types import AttentionWorkload
    from tests.selector.test_measured import rec

    factor = {("w", "fa3"): 0.5, ("w", "fa2-tc"): 3.0, ("f", "fa3"): 3.0, ("f", "fa2-tc"): 0.5}
    out = []
    for label, spec in (("w", WINDOWED), ("f", FULL)):
        for w in [AttentionWorkload(spec, "decode", b, c) for b in (1, 16, 256) for c in (512, 8192, 32768)] + [
            AttentionWorkload(spec, "prefill", 1, p + 2048, query_len=2048) for p in (0, 8192)
        ]:
            base = 10 + 0.001 * (w.batch * w.context_len if w.phase == "decode" else w.query_len * w.context_len / 50)
            out += [rec(w, "FLASHINFER", t, base * factor[(label, t)]) for t in ("fa3", "fa2-tc")]
            out.append(rec(w, "FLASH_ATTN", "fa3", base))
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as s:
        s.write(out)
    _cached.cache_clear()
    assert select(url).backend == "FLASHINFER"  # the windowed layers alone
    both = select(url, full_attention_layers=18, num_layers=36)
    assert both.backend == "FLASH_ATTN", both.explain()
    assert cost(both, "FLASHINFER") > 1.5 * cost(both, "FLASH_ATTN")
    assert both.per_phase == {"decode": "FLASH_ATTN", "prefill": "FLASH_ATTN"}  # each kind alone: FLASHINFER
    _cached.cache_clear()


def test_a_backend_with_no_tactic_measured_on_every_kind_is_not_costed_over_every_layer(tmp_path) -> None:
    """FLASHINFER measured with xqa on the windowed layers only and fa2-tc on the full ones only (an interrupted tune):
    no one tactic of it is known to serve both, so it is not ranked by a cost that assumes each kind's own tactic."""
    from hwtune.core.types import AttentionWorkload
    from tests.selector.test_measured import rec

    out = []
    for label, spec in (("w", WINDOWED), ("f", FULL)):
        for w in [AttentionWorkload(spec, "decode", b, c) for b in (1, 16, 256) for c in (512, 8192, 32768)] + [
            AttentionWorkload(spec, "prefill", 1, p + 2048, query_len=2048) for p in (0, 8192)
        ]:
            base = 10 + 0.001 * (w.batch * w.context_len if w.phase == "decode" else w.query_len * w.context_len / 50)
            out.append(rec(w, "FLASHINFER", "xqa" if label == "w" else "fa2-tc", base * 0.5))
            out.append(rec(w, "FLASH_ATTN", "fa3", base))
    url = _store(tmp_path, out)
    both = select(url, full_attention_layers=18, num_layers=36)
    assert both.backend == "FLASH_ATTN" and both.ranked[0].source != "static"
    fi = next(r for r in both.ranked if r.backend == "FLASHINFER")
    assert fi.source == "static" and fi.latency_us is None and "no tactic measured on every kind" in fi.detail
    _cached.cache_clear()


def test_selections_callers_get_carry_no_evidence(url) -> None:
    import pickle

    both = select(url, full_attention_layers=18, num_layers=36)
    assert both.basis is None and select(url).basis is None  # kept only on the per-kind selections combine joins
    assert "basis" not in both.to_dict()
    assert pickle.loads(pickle.dumps(both)) == both


def test_the_ranking_over_every_layer_follows_the_decision_rules(tmp_path) -> None:
    """Both kinds measured prefill at two shapes only, where FLASH_ATTN is 5x faster; decode, measured over the mix
    and 85 % of its time, FLASHINFER wins. The prefill points beyond the measurements are extrapolations, which do not
    decide: each kind alone picks FLASHINFER, and so does the ranking over every layer (it once ranked by every point's
    cost and picked FLASH_ATTN), whose note says so with both typical latencies, once and not per kind."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Store.open(url) as s:
        s.write(crossover_records([(q, q + p) for q in (2048,) for p in (0, 8192)]))
    _cached.cache_clear()
    heavy = {"device": "h100", "assume_installed": True, "db": url, "profile": "decode-heavy"}
    both = hwtune.select_attention(WINDOWED, full_attention_layers=18, num_layers=36, **heavy)
    alone = [hwtune.select_attention(s, **heavy) for s in (WINDOWED, FULL)]
    assert both.backend == "FLASHINFER" and [a.backend for a in alone] == ["FLASHINFER", "FLASHINFER"]
    decided = [n for n in both.notes if "decided over" in n]
    assert len(decided) == 1 and decided[0].startswith("decided over the 22 of 28 mix points")
    # every point's typical latency would pick FLASH_ATTN: the note gives both, on the deciding points and on every one
    assert "there FLASHINFER's typical latency is" in decided[0] and "with the extrapolations" in decided[0]
    _cached.cache_clear()


def crossover_records(prefills: list[tuple[int, int]]) -> list:
    """Both kinds: FLASH_ATTN prefills 5x faster at ``prefills`` (chunk, context); decode over batch x context,
    FLASHINFER's fa3 the faster at small batches, its fa2-tc at large ones, FLASH_ATTN 5 % behind."""
    from hwtune.core.types import AttentionWorkload
    from tests.selector.test_measured import rec

    out = []
    for spec in (WINDOWED, FULL):
        for w in [AttentionWorkload(spec, "decode", b, c) for b in (1, 16, 256) for c in (512, 8192, 32768)] + [
            AttentionWorkload(spec, "prefill", 1, c, query_len=q) for q, c in prefills
        ]:
            base = 10 + 0.001 * (w.batch * w.context_len if w.phase == "decode" else w.query_len * w.context_len / 50)
            if w.phase == "prefill":
                out += [rec(w, "FLASHINFER", t, 5 * base) for t in ("fa3", "fa2-tc")] + [
                    rec(w, "FLASH_ATTN", "fa3", base)
                ]
                continue
            small = w.batch < 16
            out += [rec(w, "FLASHINFER", "fa3", base * (0.8 if small else 1.0))]
            out += [rec(w, "FLASHINFER", "fa2-tc", base * (1.0 if small else 0.8))]
            out.append(rec(w, "FLASH_ATTN", "fa3", base * 1.05))
    return out


def test_a_phase_routed_to_another_backend_dispatches_its_tactics_over_every_layer(tmp_path) -> None:
    """FLASH_ATTN prefills far faster on both kinds and is chosen; decode is routed to FLASHINFER, whose fa3 wins
    small batches and fa2-tc large ones on both kinds: the routed phase's cells follow that crossover. (Prefill is
    measured over the mix's chunks and contexts: extrapolated points do not decide.)"""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Store.open(url) as s:
        s.write(crossover_records([(q, c) for q in (512, 2048, 8192) for c in (q, 32768)]))
    _cached.cache_clear()
    both = select(url, full_attention_layers=18, num_layers=36)
    assert both.backend == "FLASH_ATTN" and both.per_phase == {"decode": "FLASHINFER", "prefill": "FLASH_ATTN"}
    assert {e.phase for e in both.phase_dispatch} == {"decode"}
    assert both.tactic_for("decode", 1, 8192, backend="FLASHINFER") == "fa3"
    assert both.tactic_for("decode", 256, 8192, backend="FLASHINFER") == "fa2-tc"
    _cached.cache_clear()


def test_layered_dispatch_compares_tied_tactics_on_shared_shapes_too() -> None:
    """The single-spec tie case (tests/selector/test_interpolation.py: fa3 measured alone at a slow-wave bisection
    point, fa2 interpolated past it and tied) in both layer kinds: the layered table takes fa3 at 48 x 12000 too."""
    from hwtune.selector.layer_kinds import Layered
    from hwtune.selector.selection import Basis
    from tests.selector.test_interpolation import _tie_case

    ev, _centre = _tie_case()
    joint = Layered(((ev, 3), (ev, 1)), Basis(ev, (), 64, 16384))
    cells = {(e.batch_max, e.context_max): e.tactic for e in joint.table("X") if e.phase == "decode"}
    assert cells[(64, 16384)] == "fa3"

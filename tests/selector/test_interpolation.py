"""Estimates between and beyond measured shapes (issue 17): prefill keyed by chunk and context, estimates
bounded by the measured shapes they lie between, and the robust tactic beyond the measured range."""

import pytest

from hwtune.selector.dispatch import dispatch_table
from hwtune.selector.interpolate import estimate
from hwtune.selector.measured import Evidence, Point
from hwtune.selector.mix import MixPoint
from hwtune.selector.selection import Selection


def pts(table):
    return [Point(b, c, q, us, 1) for (b, c, q), us in table.items()]


def table_selection(ev: Evidence, backend: str = "FLASHINFER") -> Selection:
    from hwtune.core.devices import simulated

    dispatch = dispatch_table(ev, backend, 1024, 65536)
    return Selection(
        "attention", {}, simulated("h100"), backend, {"decode": "fa2-tc", "prefill": "fa3"}, (), {}, dispatch=dispatch
    )


def test_prefill_tactic_follows_the_chunk_not_only_the_context() -> None:
    """fa2-tc wins short chunks on a long cached prefix, fa3 long chunks: at the same context the two chunks
    must get different tactics (a table keyed by context alone gives one of them the loser)."""
    shapes = [(chunk, ctx) for chunk in (256, 1024, 8192) for ctx in (8192, 32768) if chunk <= ctx]
    fa2 = {(1, ctx, chunk): 20 + chunk * ctx / 2e5 for chunk, ctx in shapes}
    fa3 = {(1, ctx, chunk): (60 if chunk < 2048 else 10) + chunk * ctx / 4e5 for chunk, ctx in shapes}
    ev = Evidence(points={("FLASHINFER", "fa2-tc", "prefill"): pts(fa2), ("FLASHINFER", "fa3", "prefill"): pts(fa3)})
    sel = table_selection(ev)
    assert sel.tactic_for("prefill", 1, 16384, query_len=512) == "fa2-tc"
    assert sel.tactic_for("prefill", 1, 16384, query_len=8192) == "fa3"
    fa2_short = estimate(pts(fa2), MixPoint("prefill", 1, 16384, 1.0, 512))[0]
    fa3_short = estimate(pts(fa3), MixPoint("prefill", 1, 16384, 1.0, 512))[0]
    assert fa2_short < fa3_short


def test_estimates_lie_between_the_measured_shapes_around_them() -> None:
    grid = {(16, 2048, 1): 40.0, (16, 8192, 1): 90.0, (64, 2048, 1): 100.0, (64, 8192, 1): 300.0}
    below, exact, conf = estimate(pts(grid), MixPoint("decode", 1, 256, 1.0))
    assert below == 40.0 and not exact and conf < 0.5  # never under the fastest shape that dominates it
    inside = estimate(pts(grid), MixPoint("decode", 32, 4096, 1.0))[0]
    assert 40.0 <= inside <= 300.0
    beyond = estimate(pts(grid), MixPoint("decode", 256, 32768, 1.0))[0]
    assert beyond >= 300.0  # never under a shape it dominates


def test_where_measurements_fall_as_the_shape_grows_the_estimate_follows_its_nearest_measurements() -> None:
    """gpt-oss-120b at TP 8 on an H100 (2026-11-25): FlashInfer's xqa decode took 23 us for one request at 32768
    tokens but 12 us for 16 requests. Bounding by the larger batch put one request at 20000 tokens at 11.5 us and
    picked xqa there, where fa3 (12.6 us) is 1.47x faster; the estimate must stay within the nearest measurements."""
    xqa = {(1, 8192, 1): 13.3, (1, 32768, 1): 22.9, (4, 8192, 1): 13.8, (4, 32768, 1): 14.0}
    xqa |= {(16, 8192, 1): 11.5, (16, 32768, 1): 11.6}
    fa3 = {(b, c, 1): 12.7 for b in (1, 4, 16) for c in (8192, 32768)}
    lat, exact, conf = estimate(pts(xqa), MixPoint("decode", 1, 20000, 1.0))
    assert 13.3 <= lat <= 22.9 and not exact and conf < 0.5
    ev = Evidence(points={("FLASHINFER", "xqa", "decode"): pts(xqa), ("FLASHINFER", "fa3", "decode"): pts(fa3)})
    assert table_selection(ev).tactic_for("decode", 1, 20000) == "fa3"


def test_nearest_measurements_all_at_one_context_do_not_flatten_the_context_slope() -> None:
    """A bisection point that measured only the contenders leaves one tactic with its four nearest measurements to
    32 x 20000 all at 32768 tokens (Gemma-3-4B, H100, 2026-11-27): a fit over them alone cannot see how latency grows
    with context and gave the 32768-token latency at 20000, 38 % too high; with the nearest point off that line the
    estimate follows the context again, and a tactic measured at the same shapes but one more gets the same answer."""
    shapes = [(16, 8192), (16, 32768), (32, 32768), (64, 32768), (64, 8192)]
    lat = {(b, c, 1): b * c / 1000 for b, c in shapes}
    lat_more = {**lat, (45, 32768, 1): 45 * 32768 / 1000}  # a bisection point measured for the contenders only
    truth = 32 * 20000 / 1000
    for table in (lat, lat_more):
        value = estimate(pts(table), MixPoint("decode", 32, 20000, 1.0))[0]
        assert abs(value - truth) / truth < 0.1, (sorted(table), value, truth)


def test_prefill_estimates_of_an_unmeasured_chunk_grow_with_context_and_stay_under_longer_chunks() -> None:
    """Only 2048- and 8192-token chunks were measured; estimates for 512- and 4096-token chunks must not fall as
    the context grows, and lie between the measured chunks around them."""
    grid = {(1, 2048, 2048): 100.0, (1, 8192, 2048): 300.0, (1, 32768, 2048): 900.0}
    grid |= {(1, 8192, 8192): 1200.0, (1, 32768, 8192): 3000.0}
    sweep = [estimate(pts(grid), MixPoint("prefill", 1, c, 1.0, 512))[0] for c in (512, 2048, 8192, 32768)]
    assert sweep == sorted(sweep)
    assert sweep[1] <= 100.0 and sweep[2] <= 300.0 and sweep[3] <= 900.0
    between = [estimate(pts(grid), MixPoint("prefill", 1, c, 1.0, 4096))[0] for c in (8192, 16384, 32768)]
    assert between == sorted(between)  # a table keyed by context alone fell from 993 to 900 us here
    assert 300.0 <= between[0] <= 1200.0 and 900.0 <= between[2] <= 3000.0


def test_beyond_the_largest_batch_the_robust_tactic_is_extended_not_a_one_percent_winner() -> None:
    """At the largest measured batch xqa beats fa2-tc by 1 % at 2048 tokens but loses 1.5x one doubling of context
    away: beyond the measured batches the table takes fa2-tc, which is never more than 2 % off there."""
    xqa = {(64, 2048, 1): 50.0, (128, 2048, 1): 100.0, (64, 4096, 1): 150.0, (128, 4096, 1): 300.0}
    fa2 = {(64, 2048, 1): 51.0, (128, 2048, 1): 101.0, (64, 4096, 1): 100.0, (128, 4096, 1): 200.0}
    ev = Evidence(points={("FLASHINFER", "xqa", "decode"): pts(xqa), ("FLASHINFER", "fa2-tc", "decode"): pts(fa2)})
    sel = table_selection(ev)
    assert sel.tactic_for("decode", 1024, 2048) == "fa2-tc"
    inside = MixPoint("decode", 91, 2896, 1.0)  # a cell inside the measured range: the lower estimate decides
    best = min(("xqa", xqa), ("fa2-tc", fa2), key=lambda t: estimate(pts(t[1]), inside)[0])[0]
    assert sel.tactic_for("decode", 128, 4096) == best


@pytest.mark.parametrize("query_len", [None, 2048])
def test_prefill_lookup_without_a_chunk_assumes_min_context_2048(query_len) -> None:
    fa3 = {(1, ctx, chunk): 10.0 * chunk / 512 for chunk in (512, 2048) for ctx in (2048, 8192)}
    ev = Evidence(points={("FLASHINFER", "fa3", "prefill"): pts(fa3)})
    assert table_selection(ev).tactic_for("prefill", 1, 8192, query_len=query_len) == "fa3"


def test_tied_tactics_are_compared_on_the_shapes_both_were_measured_at() -> None:
    """FlashInfer's MLA decode on an H200 (DeepSeek-V3 TP 8, 64-token pages, 2026-11-28; us, a subset of the store):
    fa3 beats fa2 by 1.5-1.9x at every shape both were measured at, but bisection points measured fa3 alone, one of
    them in a slow wave of its (45 x 4096: 104.8 us, against 55.7 at 32 x 4096). Interpolated past that point, fa2 came
    out under fa3 at the cell of 48 x 12000, where it then ran at 2.69x the best: tied estimates (within 5 %) are
    compared again on the shapes both were measured at."""
    both = [(32, 4096), (64, 2048), (64, 8192), (64, 16384)]
    fa2 = {(b, c, 1): us for (b, c), us in zip(both, [85.1, 85.1, 291.2, 561.4])}
    fa3 = {(b, c, 1): us for (b, c), us in zip(both, [55.7, 56.1, 160.3, 298.5])}
    fa3 |= {(45, 4096, 1): 104.8, (64, 23170, 1): 465.2}  # bisection points: fa3 only
    ev = Evidence(points={("X", "fa2", "decode"): pts(fa2), ("X", "fa3", "decode"): pts(fa3)})
    centre = MixPoint("decode", 45, 11585, 1.0)  # the centre of the cell that holds 48 x 12000
    fa2_est, fa3_est = estimate(pts(fa2), centre)[0], estimate(pts(fa3), centre)[0]
    assert fa2_est < fa3_est < 1.05 * fa2_est  # tied, fa2 ahead: the case the tie-break exists for
    assert table_selection(ev, "X").tactic_for("decode", 48, 12000) == "fa3"
    from hwtune.selector import dispatch

    with pytest.MonkeyPatch.context() as m:  # the centre alone: the shared shapes decide there too
        m.setattr(dispatch, "CELL_TIE_BREAK", False)
        assert table_selection(ev, "X").tactic_for("decode", 48, 12000) == "fa3"


def _tie_case(extra_fa2: dict | None = None, fa3_scale: float = 1.0) -> tuple[Evidence, MixPoint]:
    """The store subset above, fa3 scaled by ``fa3_scale`` and fa2 given ``extra_fa2`` points."""
    both = [(32, 4096), (64, 2048), (64, 8192), (64, 16384)]
    fa2 = {(b, c, 1): us for (b, c), us in zip(both, [85.1, 85.1, 291.2, 561.4])} | (extra_fa2 or {})
    fa3 = {(b, c, 1): us * fa3_scale for (b, c), us in zip(both, [55.7, 56.1, 160.3, 298.5])}
    fa3 |= {(45, 4096, 1): 104.8 * fa3_scale, (64, 23170, 1): 465.2 * fa3_scale}
    ev = Evidence(points={("X", "fa2", "decode"): pts(fa2), ("X", "fa3", "decode"): pts(fa3)})
    return ev, MixPoint("decode", 45, 11585, 1.0)


def test_the_shared_shape_comparison_only_breaks_ties() -> None:
    """fa3 more than 5 % above fa2's estimate at the cell keeps fa2, whatever the shared shapes say."""
    from hwtune.selector.dispatch import _best_tactic

    ev, centre = _tie_case(fa3_scale=1.2)
    by_tactic = {t: p for (_b, t, _ph), p in ev.points.items()}
    fa2_est, fa3_est = (estimate(by_tactic[t], centre)[0] for t in ("fa2", "fa3"))
    assert fa3_est > 1.05 * fa2_est
    assert _best_tactic(by_tactic, centre)[0] == "fa2"


def test_a_measurement_at_the_cell_centre_is_not_overruled_by_shared_shapes() -> None:
    """fa2 measured at the cell's centre itself, within 5 % under fa3's estimate: the measurement stands (comparing
    on shared shapes would drop it)."""
    from hwtune.selector.dispatch import _best_tactic

    ev, centre = _tie_case(extra_fa2={(45, 11585, 1): 290.0})
    by_tactic = {t: p for (_b, t, _ph), p in ev.points.items()}
    assert _best_tactic(by_tactic, centre) == ("fa2", 290.0, True)


def test_without_two_shared_shapes_the_cheapest_estimate_stands() -> None:
    """Tied tactics measured at one common shape only: no comparison on shared shapes, the cheapest estimate wins."""
    from hwtune.selector.dispatch import _best_tactic, shared_estimates, tied_estimates

    a = [Point(32, 4096, 1, 100.0, 1), Point(64, 16384, 1, 400.0, 1)]
    b = [Point(32, 4096, 1, 101.0, 1), Point(64, 8192, 1, 220.0, 1), Point(64, 32768, 1, 800.0, 1)]
    mp = MixPoint("decode", 45, 11585, 1.0)
    assert shared_estimates({"a": a, "b": b}, ["a", "b"], mp) is None
    ests = {t: estimate(p, mp)[0] for t, p in (("a", a), ("b", b))}
    assert tied_estimates({"a": a, "b": b}, ["a", "b"], mp) == ests  # each from its own shapes
    assert _best_tactic({"a": a, "b": b}, mp)[0] == min(ests, key=ests.get)


def _mla_prefill_tie() -> dict[str, list[Point]]:
    """FlashInfer's MLA prefill on an H200 (DeepSeek-V3 TP 8, 64-token pages, 2026-11-29; us, a subset of the default
    tune's store, keyed (batch, context, chunk)): mha-fa2 splits the KV of short chunks on long prefixes, mha-fa3 does
    not, so fa2 wins 128-256-token chunks on 8192 cached tokens and fa3 362 tokens and more."""
    fa2 = {(1, 128, 128): 12.6, (1, 512, 512): 40.2, (1, 991, 128): 20.5, (1, 8320, 128): 51.2,
           (1, 8448, 256): 83.2, (1, 8554, 362): 122.0, (1, 8704, 512): 150.7, (1, 11947, 362): 159.1,
           (1, 10240, 2048): 539.7, (1, 2048, 2048): 117.8}  # fmt: skip
    fa3 = {(1, 128, 128): 10.0, (1, 512, 512): 17.2, (1, 991, 128): 21.2, (1, 8320, 128): 107.5,
           (1, 8448, 256): 111.3, (1, 8554, 362): 114.9, (1, 8704, 512): 118.4, (1, 11947, 362): 156.7,
           (1, 10240, 2048): 289.4, (1, 2048, 2048): 60.0}  # fmt: skip
    return {"mha-fa2": pts(fa2), "mha-fa3": pts(fa3)}


def test_tactics_tied_at_a_cells_centre_are_compared_over_its_corners() -> None:
    """At the centre of the cell of 257-512-token chunks in 4097-8192 tokens of context (362 in 5793) the two come
    within 1 %; over the cell's corners fa2 loses up to 1.46x and fa3 1.33x. The cell takes fa3, which ran 384 tokens on
    6000 cached at 87.3 us against fa2's 98.2 (the oracle of that run)."""
    from hwtune.selector.dispatch import _best_tactic, _grid

    tactics = _mla_prefill_tie()
    centre, corners = next((mp, c) for rm, cm, mp, c in _grid("prefill", 1, 16384) if (rm, cm) == (512, 8192))
    e2, e3 = (estimate(tactics[t], centre)[0] for t in ("mha-fa2", "mha-fa3"))
    assert e2 < e3 < 1.05 * e2  # tied at the centre, fa2 the cheaper
    assert {(c.query_len, c.context) for c in corners} == {(257, 4097), (512, 4097), (257, 8192), (512, 8192)}
    assert _best_tactic(tactics, centre)[0] == "mha-fa2"  # the centre alone
    assert _best_tactic(tactics, centre, corners)[0] == "mha-fa3"


def test_the_dispatch_table_breaks_a_tie_over_the_cell_unless_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwtune.selector import dispatch

    ev = Evidence(points={("X", t, "prefill"): p for t, p in _mla_prefill_tie().items()})
    assert table_selection(ev, "X").tactic_for("prefill", 1, 6384, query_len=384) == "mha-fa3"
    monkeypatch.setattr(dispatch, "CELL_TIE_BREAK", False)  # the centre alone, as before 2026-11-29
    assert table_selection(ev, "X").tactic_for("prefill", 1, 6384, query_len=384) == "mha-fa2"


def test_a_cells_corners_span_it_within_the_engines_range() -> None:
    """The first cell of an axis holds every shape below its bound (``lookup``), so its low corner is 1; the last
    cell's high corner is the engine's limit, not the bound rounded up to a power of two; no corner twice."""
    from hwtune.selector.dispatch import _grid

    cells = {(rm, cm): corners for rm, cm, _mp, corners in _grid("decode", 200, 10000)}
    assert {(c.batch, c.context) for c in cells[(1, 16)]} == {(1, 1), (1, 16)}
    assert {(c.batch, c.context) for c in cells[(256, 16384)]} == {(129, 8193), (129, 10000), (200, 8193), (200, 10000)}
    prefill = {(rm, cm): corners for rm, cm, _mp, corners in _grid("prefill", 1, 10000)}
    assert {(c.query_len, c.context) for c in prefill[(16, 16)]} == {(1, 1), (1, 16), (16, 16)}  # chunk <= context
    assert all(len(set(c)) == len(c) for c in list(cells.values()) + list(prefill.values()))


def test_a_zero_latency_estimate_does_not_break_the_tie_break() -> None:
    from hwtune.selector.dispatch import cell_minimax

    shapes = [MixPoint("decode", 8, 8192, 1.0), MixPoint("decode", 16, 8192, 1.0)]
    ests = {shapes[0]: {"a": 10.0, "b": 10.2}, shapes[1]: {"a": 0.0, "b": 0.0}}
    assert cell_minimax(["a", "b"], shapes, ests.__getitem__) == "a"

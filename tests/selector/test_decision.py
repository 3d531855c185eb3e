"""The backend decision over the mix (issue 17 item 4): backends are compared on the same points, extrapolations do
not decide between them, and a near-tie is broken by the worst point, for the whole mix and for each phase."""

from hwtune.selector.decision import cost_backend, decide, deciding_cost, rank
from hwtune.selector.measured import Evidence, Point
from hwtune.selector.mix import MixPoint
from hwtune.selector.selection import RankedBackend

GRID = [(b, c) for b in (1, 4, 16) for c in (512, 2048, 8192)]


def decode(f) -> list[Point]:
    return [Point(b, c, 1, f(b, c), 1) for b, c in GRID]


def static(*names: str) -> list[RankedBackend]:
    return [RankedBackend(n, "static", {"decode": "t", "prefill": "t"}) for n in names]


def test_points_beyond_the_measured_range_do_not_decide() -> None:
    """B is 10 % faster everywhere measured; A's trend, extrapolated to a batch far beyond, makes A cheaper in
    total. Inside the measured range B wins, so B is chosen, and the note says the far point did not decide."""
    a = decode(lambda b, c: 110.0 + b * c / 400)
    b = decode(lambda b, c: 100.0 + b * c / 500)
    a += [Point(16, 16384, 1, 200.0, 1)]  # A alone measured one larger shape (B's range ends at 8192)
    ev = Evidence(points={("A", "t", "decode"): a, ("B", "t", "decode"): b})
    inside = [MixPoint("decode", bb, c, 1.0) for bb, c in GRID]
    far = MixPoint("decode", 16, 16384, 6.0)  # beyond B's measurements: its estimate there is an extrapolation
    mix = [*inside, far]
    costs = {n: cost_backend(ev, n, mix) for n in "AB"}
    assert costs["A"].per_point[-1] == (200.0, True) and costs["B"].per_point[-1][1] is False
    assert costs["A"].cost_us < costs["B"].cost_us  # the extrapolated point alone puts A ahead in total
    ranked, per_phase, notes = rank(static("A", "B"), ev, mix)
    assert ranked[0].backend == "B" and per_phase == {"decode": "B"}
    assert "9 of 10 mix points inside every measured backend's range" in notes[0]
    # counted on every point A is cheaper: the note gives both typical latencies, on the deciding points and every one
    inside_t, every_t = (deciding_cost(list(costs.values()), mix, pts) for pts in (list(range(9)), list(range(10))))
    assert inside_t["B"] < inside_t["A"] and every_t["A"] < every_t["B"]
    assert f"there B's typical latency is {inside_t['B']:.1f} us and A's {inside_t['A']:.1f}" in notes[0]
    assert f"with the extrapolations {every_t['B']:.1f} and {every_t['A']:.1f}" in notes[0]
    order, agreed = decide([costs["B"]], mix)  # one backend: nothing to explain
    assert order == ["B"] and agreed == ""


def test_when_shared_points_are_too_few_every_point_decides() -> None:
    a = decode(lambda b, c: 110.0 + b * c / 400) + [Point(16, 16384, 1, 200.0, 1)]
    b = decode(lambda b, c: 100.0 + b * c / 500)
    ev = Evidence(points={("A", "t", "decode"): a, ("B", "t", "decode"): b})
    mix = [MixPoint("decode", 1, 512, 0.1), MixPoint("decode", 16, 16384, 1.0)]
    order, note = decide([cost_backend(ev, n, mix) for n in "AB"], mix)
    assert order[0] == "A" and "every point decides" in note


def near_tie(b: int, c: int, slow: float, fast: float) -> float:
    """A near-tie in typical latency: A 2x slower at the smallest shape, 10 % faster at the other eight."""
    return slow if (b, c) == (1, 512) else fast * (20.0 + b * c / 100)


def test_a_near_tie_goes_to_the_backend_without_a_large_loss() -> None:
    """A's typical latency over the mix is 2 % less than B's, but A is 2x slower at one shape; B never loses more than
    11 %: B wins, and no note says the shares decided it."""
    a = decode(lambda b, c: near_tie(b, c, 40.0, 0.9))
    b = decode(lambda b, c: near_tie(b, c, 20.0, 1.0))
    ev = Evidence(points={("A", "t", "decode"): a, ("B", "t", "decode"): b})
    mix = [MixPoint("decode", bb, c, 1.0) for bb, c in GRID]
    costs = [cost_backend(ev, n, mix) for n in "AB"]
    t = deciding_cost(costs, mix, list(range(9)))
    assert t["A"] < t["B"] <= t["A"] * 1.05
    order, note = decide(costs, mix)
    assert order == ["B", "A"] and "B is at worst 1.11x" in note and "A 2.00x" in note and "ranks ahead" not in note


def test_each_point_counts_by_its_share_not_by_its_latency() -> None:
    """The mix's weights are shares of GPU time: A is 1.4x slower at the short shapes (20 us), B 1.2x slower at the
    long ones (1000 us), each half the time. A's weighted latency is lower (the long shapes outweigh the rest), but
    B's typical latency (the weighted geometric mean: sqrt(20 x 1200) = 154.9 us against A's sqrt(28 x 1000) = 167.3)
    is 8 % less: B wins, and the note says why."""
    short = {(bb, c) for bb, c in GRID if bb * c <= 2048}
    a = decode(lambda b, c: 28.0 if (b, c) in short else 1000.0)
    b = decode(lambda b, c: 20.0 if (b, c) in short else 1200.0)
    ev = Evidence(points={("A", "t", "decode"): a, ("B", "t", "decode"): b})
    mix = [MixPoint("decode", bb, c, (0.5 / 3) if (bb, c) in short else (0.5 / 6)) for bb, c in GRID]
    costs = [cost_backend(ev, n, mix) for n in "AB"]
    assert costs[0].cost_us < costs[1].cost_us
    order, note = decide(costs, mix)
    assert order == ["B", "A"]
    assert note.startswith("B ranks ahead of A, whose weighted latency is lower")
    assert "B's typical latency over them (the geometric mean, weighted by share) is 154.9 us, A's 167.3" in note
    assert rank(static("A", "B"), ev, mix)[1] == {"decode": "B"}


def test_a_clear_winner_is_not_overturned_by_its_worst_point() -> None:
    a = decode(lambda b, c: 30.0 if b * c <= 2048 else 0.5 * (20.0 + b * c / 100))
    b = decode(lambda b, c: 20.0 if b * c <= 2048 else 20.0 + b * c / 100)
    ev = Evidence(points={("A", "t", "decode"): a, ("B", "t", "decode"): b})
    mix = [MixPoint("decode", bb, c, 1.0) for bb, c in GRID]
    assert decide([cost_backend(ev, n, mix) for n in "AB"], mix) == (["A", "B"], "")


def test_costs_are_set_side_by_side_only_where_the_extrapolations_change_the_cheapest() -> None:
    """A is 2 % cheaper on the deciding points and with the extrapolated one too, but 2x slower at one shape; B
    wins the near-tie by its worst point: the note says so, and gives no costs 'with the extrapolations', which
    changed nothing."""
    a = decode(lambda b, c: near_tie(b, c, 40.0, 0.9))
    b = decode(lambda b, c: near_tie(b, c, 20.0, 1.0))
    a += [Point(16, 16384, 1, 2000.0, 1)]  # A alone measured one larger shape, where it is cheaper still
    ev = Evidence(points={("A", "t", "decode"): a, ("B", "t", "decode"): b})
    mix = [*(MixPoint("decode", bb, c, 1.0) for bb, c in GRID), MixPoint("decode", 16, 16384, 0.1)]
    costs = [cost_backend(ev, n, mix) for n in "AB"]
    every = deciding_cost(costs, mix, list(range(10)))
    assert every["A"] < every["B"]
    order, note = decide(costs, mix)
    assert order == ["B", "A"] and "9 of 10 mix points" in note and "B is at worst" in note
    assert "with the extrapolations" not in note and "ranks ahead" not in note


def test_a_phase_a_weights_file_leaves_out_is_still_decided() -> None:
    """A weights file may give a phase weight 0: its per-phase winner comes from the plain geometric mean of its
    points' latencies (once the typical latency was NaN there and the decision failed)."""
    pre = [Point(1, c, q, lat, 1) for q, c, lat in ((512, 512, 50.0), (512, 8192, 200.0))]
    ev = Evidence(
        points={
            ("A", "t", "decode"): decode(lambda b, c: 10.0),
            ("B", "t", "decode"): decode(lambda b, c: 12.0),
            ("A", "t", "prefill"): pre,
            ("B", "t", "prefill"): [Point(p.batch, p.context, p.query_len, p.latency_us / 2, 1) for p in pre],
        }
    )
    mix = [MixPoint("decode", bb, c, 1.0) for bb, c in GRID]
    mix += [MixPoint("prefill", 1, c, 0.0, q) for q, c in ((512, 512), (512, 8192))]
    ranked, per_phase, _ = rank(static("A", "B"), ev, mix)
    assert per_phase == {"decode": "A", "prefill": "B"} and ranked[0].backend == "A"

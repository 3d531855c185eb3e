"""The plan adapts (issue 17): points between measured neighbours whose winners differ are added, until every
crossover that matters is located within BISECT_FACTOR; near-ties and agreeing neighbours add nothing; a candidate far
behind at every measured neighbour of a point is not measured there (``pruned``), in the tuner too."""

import dataclasses

from hwtune.core.records import LatencyStats, MeasurementRecord
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.tuner.plan import PlanItem
from hwtune.tuner.schedule import BISECT_FACTOR, CONTENDER, PRUNE_FACTOR, WIDE_FACTOR, bisections, narrowed, pruned

SPEC = AttentionSpec(32, 8, 128)


def decode(batch: int, context: int) -> PlanItem:
    return PlanItem(AttentionWorkload(SPEC, "decode", batch, context))


def prefill(chunk: int, prefix: int) -> PlanItem:
    return PlanItem(AttentionWorkload(SPEC, "prefill", 1, chunk + prefix, query_len=chunk))


def timed(item: PlanItem, backend: str = "FLASHINFER", **latency: float) -> list[MeasurementRecord]:
    w = item.workload
    return [
        MeasurementRecord("attention", w.to_dict(), w.key(), backend, t, "ok", stats=LatencyStats.from_samples([us]))
        for t, us in latency.items()
    ]


def locate(latency, points: list[PlanItem], rounds: int = 8) -> list[PlanItem]:
    """Run bisection rounds as the tuner does, 'measuring' each new point with ``latency``."""
    items, records = list(points), [r for p in points for r in timed(p, **latency(p))]
    for _ in range(rounds):
        new = bisections(items, records)
        if not new:
            return items
        items += new
        records += [r for p in new for r in timed(p, **latency(p))]
    raise AssertionError("bisection did not stop")


def test_a_context_crossover_is_located_within_the_factor() -> None:
    """xqa wins up to 3000 tokens, fa2 above: between 512 and 32768 the crossover is found within 4x."""

    def latency(p: PlanItem) -> dict[str, float]:
        c = p.workload.context_len
        return {"xqa": 10 + c / 100, "fa2": 25 + c / 200}

    items = locate(latency, [decode(1, 512), decode(1, 32768)])
    contexts = sorted(i.workload.context_len for i in items)
    winners = {c: min(latency(decode(1, c)), key=latency(decode(1, c)).get) for c in contexts}
    crossing = [(a, b) for a, b in zip(contexts, contexts[1:]) if winners[a] != winners[b]]
    assert len(crossing) == 1 and crossing[0][1] < BISECT_FACTOR * crossing[0][0]
    assert crossing[0][0] <= 3000 <= crossing[0][1]
    assert {i.level for i in items} - {0} and max(i.level for i in items) >= 2


def test_near_ties_and_agreeing_neighbours_add_nothing() -> None:
    tie = [
        r
        for p, us in ((decode(1, 512), (10.0, 10.2)), (decode(1, 32768), (50.2, 50.0)))
        for r in timed(p, xqa=us[0], fa2=us[1])
    ]
    assert bisections([decode(1, 512), decode(1, 32768)], tie) == []
    same = timed(decode(1, 512), xqa=10.0, fa2=20.0) + timed(decode(1, 32768), xqa=50.0, fa2=90.0)
    assert bisections([decode(1, 512), decode(1, 32768)], same) == []


def test_prefill_is_bisected_along_the_cached_prefix_for_one_chunk() -> None:
    """A 128-token chunk: fa3 wins on a short prefix, fa2-tc on a long one; the new point keeps the chunk."""
    rec = timed(prefill(128, 0), fa3=10.0, **{"fa2-tc": 14.0}) + timed(
        prefill(128, 32768), fa3=90.0, **{"fa2-tc": 40.0}
    )
    new = bisections([prefill(128, 0), prefill(128, 32768)], rec)
    assert [(i.workload.query_len, i.workload.context_len - i.workload.query_len) for i in new] == [(128, 181)]
    assert new[0].level == 1


def test_a_candidate_far_behind_at_every_measured_neighbour_is_pruned_there() -> None:
    lo, hi, mid = decode(1, 512), decode(1, 8192), PlanItem(AttentionWorkload(SPEC, "decode", 1, 2048), level=1)
    far = PRUNE_FACTOR * 1.01
    rec = timed(lo, fa2=10.0) + timed(hi, fa2=20.0)
    rec += timed(lo, "FLEX_ATTENTION", compiled=10.0 * far) + timed(hi, "FLEX_ATTENTION", compiled=20.0 * far)
    assert pruned(mid, [lo, hi], rec) == {("FLEX_ATTENTION", "compiled")}
    # close at one neighbour: it may win in between, so it is measured
    close = timed(lo, fa2=10.0) + timed(hi, fa2=20.0)
    close += timed(lo, "FLEX_ATTENTION", compiled=10.0 * far) + timed(hi, "FLEX_ATTENTION", compiled=20.0 * 2)
    assert pruned(mid, [lo, hi], close) == frozenset()
    # one measured neighbour is not evidence enough; another phase's points are not neighbours
    assert pruned(mid, [lo], rec) == frozenset()
    other = prefill(128, 0)
    rec_other = rec + timed(other, fa2=1.0)
    assert pruned(mid, [lo, other], rec_other) == frozenset()


def test_a_bisection_point_measures_the_backends_its_neighbours_measure() -> None:
    """A plan section that names its backends keeps them at the points bisected between its items (every backend only
    where a neighbour measured every backend), and a queued item's payload gives them back."""
    lo, hi = (PlanItem(p.workload, 0, ("HWTUNE_TRITON_ATTN",)) for p in (prefill(128, 0), prefill(128, 32768)))
    rec = timed(lo, fa3=10.0, **{"fa2-tc": 14.0}) + timed(hi, fa3=90.0, **{"fa2-tc": 40.0})
    [new] = bisections([lo, hi], rec)
    assert new.backends == ("HWTUNE_TRITON_ATTN",)
    assert PlanItem.from_dict(new.to_dict()) == new
    wide = PlanItem(hi.workload, 0, None)
    [new] = bisections([lo, wide], rec)
    assert new.backends is None


def test_the_last_round_measures_only_the_contenders_between_close_neighbours() -> None:
    """Neighbours closer than WIDE_FACTOR: the point between them measures the candidates within CONTENDER of the
    best at either end (fa2 wins one end, xqa the other; fa2-tc is close at one end), not one far behind at both."""
    lo, hi = decode(1, 2048), decode(1, 2048 * WIDE_FACTOR // 2)
    behind = CONTENDER * 1.05
    rec = timed(lo, xqa=10.0, fa2=12.0, **{"fa2-tc": 10.0 * behind}) + timed(
        hi, xqa=30.0, fa2=25.0, **{"fa2-tc": 25.0 * (CONTENDER - 0.01)}
    )
    rec += timed(lo, "HWTUNE_TRITON_ATTN", auto=10.0 * behind) + timed(hi, "HWTUNE_TRITON_ATTN", auto=25.0 * behind)
    [new] = bisections([lo, hi], rec)
    assert new.workload.context_len == round((2048 * hi.workload.context_len) ** 0.5)
    assert new.backends is not None and set(new.backends) == {"FLASHINFER:xqa", "FLASHINFER:fa2", "FLASHINFER:fa2-tc"}
    assert new.contenders and PlanItem.from_dict(new.to_dict()) == new
    # the same crossover between neighbours WIDE_FACTOR apart measures every candidate
    far = decode(1, 2048 * WIDE_FACTOR)
    at_hi = rec[3:6] + rec[7:]  # hi's FlashInfer and Triton records
    rec_far = [dataclasses.replace(r, workload=far.workload.to_dict(), workload_key=far.key) for r in at_hi]
    far_rec = [r for r in rec if r.workload_key == lo.key] + rec_far
    assert min(rec_far, key=lambda r: r.stats.median_us).tactic == "fa2"  # the same crossover, wider
    [wide] = bisections([lo, far], far_rec)
    assert wide.backends is None and not wide.contenders


def test_a_contender_stays_within_the_runs_and_the_sections_backends() -> None:
    """Contenders come from the store's timings, which may hold another run's candidates: the run's --backends (else
    the plan's) still bound what a point measures, and so do the backends its neighbours' plan section names; a plan
    section's own entries, tactics included, are measured as given, as before."""
    entries = ("FLASHINFER:xqa", "TORCH_SDPA:flash", "HWTUNE_TRITON_ATTN:tuned")
    point = PlanItem(decode(1, 3000).workload, 2, entries, contenders=True)
    assert narrowed(point, None) == point.backends
    assert narrowed(point, ("FLASHINFER", "HWTUNE_TRITON_ATTN:auto")) == ("FLASHINFER:xqa",)
    assert narrowed(point, ("HWTUNE_TRITON_ATTN:tuned",)) == ("HWTUNE_TRITON_ATTN:tuned",)
    assert narrowed(point, ("FLEX_ATTENTION",)) == ()  # nothing of the run's contends here: nothing to measure
    section = PlanItem(decode(1, 3000).workload, 0, ("FLASHINFER", "HWTUNE_TRITON_ATTN:tuned"))
    assert narrowed(section, ("TORCH_SDPA",)) == section.backends
    assert narrowed(PlanItem(decode(1, 3000).workload), ("TORCH_SDPA",)) == ("TORCH_SDPA",)
    assert narrowed(PlanItem(decode(1, 3000).workload), None) is None
    # neighbours of a section that names FLASHINFER: another run's TORCH_SDPA timings there contend, but stay out
    lo, hi = (PlanItem(decode(1, c).workload, 0, ("FLASHINFER",)) for c in (2048, 4096))
    rec = timed(lo, xqa=10.0, fa2=12.0) + timed(hi, xqa=30.0, fa2=25.0)
    rec += timed(lo, "TORCH_SDPA", flash=10.5) + timed(hi, "TORCH_SDPA", flash=26.0)
    [new] = bisections([lo, hi], rec)
    assert new.contenders and set(new.backends or ()) == {"FLASHINFER:xqa", "FLASHINFER:fa2"}


def test_two_pairs_calling_for_one_point_measure_what_either_would() -> None:
    """A point between neighbours along batch and along context at once: one item, the union of both pairs'
    contenders; every candidate if either pair was wide apart."""
    from hwtune.tuner.schedule import _merge

    w = decode(8, 3000).workload
    a = PlanItem(w, 2, ("FLASHINFER:xqa",), contenders=True)
    b = PlanItem(w, 2, ("FLASHINFER:fa2", "FLASHINFER:xqa"), contenders=True)
    assert _merge(None, a) == a
    assert _merge(a, b) == PlanItem(w, 2, ("FLASHINFER:xqa", "FLASHINFER:fa2"), contenders=True)
    assert _merge(a, PlanItem(w, 1)) == PlanItem(w, 1)


def test_no_point_is_placed_on_a_neighbour() -> None:
    """Neighbours 2 apart at batch 1 and 2, or 2 and 4 with rounding: the point between must differ from both."""
    from hwtune.tuner.schedule import _middle

    assert _middle(1, 2) is None and _middle(2, 3) is None
    assert _middle(2, 4) == 3 and _middle(0, 2) == 1 and _middle(512, 4096) == 1448


def test_a_coarse_point_of_the_second_layout_leaves_out_what_its_twin_found_far_behind() -> None:
    """The same workload measured in the other KV layout is a neighbour: a coarse HND point skips a candidate 3x
    behind at its NHD twin and its nearest neighbours; without its twin measured a coarse point measures everything."""
    hnd = dataclasses.replace(SPEC, kv_layout="HND")

    def at(spec: AttentionSpec, batch: int, context: int) -> PlanItem:
        return PlanItem(AttentionWorkload(spec, "decode", batch, context))

    nhd_points = [at(SPEC, 1, 512), at(SPEC, 1, 8192), at(SPEC, 16, 512)]
    far = PRUNE_FACTOR * 1.01
    rec = []
    for p in nhd_points:
        rec += timed(p, fa2=10.0, xqa=11.0) + timed(p, "TORCH_SDPA", math=10.0 * far, flash=10.0 * 1.5)
    point = at(hnd, 1, 512)
    assert pruned(point, nhd_points, rec) == {("TORCH_SDPA", "math")}
    # its twin not measured (only other NHD points): a coarse point measures every candidate
    assert pruned(point, nhd_points[1:], rec) == frozenset()
    # a refinement point keeps the neighbour rule with or without a twin
    assert pruned(PlanItem(point.workload, level=1), nhd_points[1:], rec) == {("TORCH_SDPA", "math")}


def test_points_that_left_a_candidate_out_do_not_bring_it_back() -> None:
    """Between coarse points where FLEX was far behind, refinement points that left it out are no evidence for it:
    a later point still leaves it out (its nearest neighbours where it ran decide)."""
    far = PRUNE_FACTOR * 1.01
    coarse = [decode(16, 512), decode(256, 512)]
    rec = []
    for p in coarse:
        rec += timed(p, fa2=10.0) + timed(p, "FLEX_ATTENTION", compiled=10.0 * far)
    refined = [PlanItem(AttentionWorkload(SPEC, "decode", b, 512), level=1) for b in (24, 48, 96)]
    for p in refined:
        rec += timed(p, fa2=10.0)  # FLEX left out there
    point = PlanItem(AttentionWorkload(SPEC, "decode", 32, 512), level=2)
    assert pruned(point, coarse + refined, rec) == {("FLEX_ATTENTION", "compiled")}


def test_a_candidate_that_failed_at_every_measured_neighbour_is_pruned_there() -> None:
    """A wrong answer (or crash, error, timeout) counts as infinitely slow: TORCH_SDPA cudnn wrong at both neighbours
    is not gated again between them; wrong at one and close at the other, it is measured; a neighbour where nothing
    timed ok is no evidence."""
    lo, hi, mid = decode(1, 512), decode(1, 8192), PlanItem(AttentionWorkload(SPEC, "decode", 1, 2048), level=1)

    def wrong(item: PlanItem, status: str = "wrong_answer") -> list[MeasurementRecord]:
        w = item.workload
        return [MeasurementRecord("attention", w.to_dict(), w.key(), "TORCH_SDPA", "cudnn", status)]

    rec = timed(lo, fa2=10.0) + timed(hi, fa2=20.0) + wrong(lo) + wrong(hi, "crashed")
    assert pruned(mid, [lo, hi], rec) == {("TORCH_SDPA", "cudnn")}
    close = timed(lo, fa2=10.0) + timed(hi, fa2=20.0) + wrong(lo) + timed(hi, "TORCH_SDPA", cudnn=25.0)
    assert pruned(mid, [lo, hi], close) == frozenset()
    # a point where it failed once and then timed ok (a later run) counts by its timing
    assert pruned(mid, [lo, hi], close + wrong(hi)) == frozenset()
    # unsupported is a refusal, not a measurement; a neighbour with no ok record has no best to compare against
    refused = timed(lo, fa2=10.0) + timed(hi, fa2=20.0) + wrong(lo, "unsupported") + wrong(hi, "unsupported")
    assert pruned(mid, [lo, hi], refused) == frozenset()
    assert pruned(mid, [lo, hi], wrong(lo) + wrong(hi)) == frozenset()


def test_a_failure_in_the_other_kv_layout_prunes_nothing() -> None:
    """Failures can be a layout's own (a DCP prefill wrapper built for HND crashed on NHD tensors): they count at
    neighbours in the item's layout only, while timings count across layouts."""
    hnd = dataclasses.replace(SPEC, kv_layout="HND")
    nhd = dataclasses.replace(SPEC, kv_layout="NHD")

    def at(spec: AttentionSpec, context: int, level: int = 0) -> PlanItem:
        return PlanItem(AttentionWorkload(spec, "decode", 1, context), level)

    def wrong(item: PlanItem) -> list[MeasurementRecord]:
        w = item.workload
        return [MeasurementRecord("attention", w.to_dict(), w.key(), "TORCH_SDPA", "cudnn", "wrong_answer")]

    hnd_points = [at(hnd, 512), at(hnd, 2048), at(hnd, 8192)]
    rec = [r for p in hnd_points for r in timed(p, fa2=10.0) + wrong(p)]
    assert pruned(at(nhd, 2048), hnd_points, rec) == frozenset()  # its twin failed in HND: NHD measures it
    assert pruned(at(hnd, 4096, level=1), hnd_points, rec) == {("TORCH_SDPA", "cudnn")}


def _both(p: PlanItem, fi: dict[str, float], **other: dict[str, float]) -> list[MeasurementRecord]:
    """Records of FlashInfer's tactics ``fi`` and other backends' at ``p``; a point with its own list of backends
    (a bisection point's contenders) times only those, as the tuner does."""
    recs = timed(p, **fi)
    for backend, latency in other.items():
        recs += timed(p, backend, **latency)
    keep = set(p.backends or ())
    return [r for r in recs if not keep or f"{r.backend}:{r.tactic}" in keep or r.backend in keep]


def test_a_tactic_crossover_of_a_backend_that_wins_elsewhere_is_located_too(monkeypatch) -> None:  # noqa: ANN001
    """The Triton kernel wins a 128-token chunk on every prefix of the segment, but FlashInfer, which wins longer
    chunks (so selection may route prefill to it and dispatch its own tactics), switches from fa3 to fa2-tc along
    it: that crossover is located within BISECT_FACTOR as well, each point measuring FlashInfer's tactics there and
    the neighbours' winner (else the next round would see a crossover with a point that never timed it), never
    every candidate, and not fa2 (never near). Llama-2-7B (H100, 2026-11-28) had fa2-tc dispatched where it took
    14 % longer than fa3, its crossover never bisected because the overall winner did not change. An experiment
    (``TACTIC_CROSSOVERS``), off by default: without it no point is added on that line."""
    from hwtune.tuner import schedule

    def fi(p: PlanItem) -> dict[str, float]:
        prefix = p.workload.context_len - p.workload.query_len
        return {"fa3": 10 + prefix / 100, "fa2-tc": 20 + prefix / 200, "fa2": 60 + prefix / 50}

    def records(p: PlanItem) -> list[MeasurementRecord]:  # Triton ahead on 128-token chunks, behind on long ones
        ahead = 0.9 if p.workload.query_len == 128 else 2.0
        return _both(p, fi(p), HWTUNE_TRITON_ATTN={"tuned": ahead * min(fi(p).values())})

    items = [prefill(128, 0), prefill(128, 32768), prefill(2048, 0)]
    recs = [r for p in items for r in records(p)]
    assert all(i.workload.query_len != 128 for i in bisections(items, recs))  # off: the chunk axis only
    monkeypatch.setattr(schedule, "TACTIC_CROSSOVERS", True)
    for _ in range(10):
        new = bisections(items, recs)
        if not new:
            break
        items += new
        recs += [r for p in new for r in records(p)]
    prefixes = sorted(i.workload.context_len - 128 for i in items if i.workload.query_len == 128)
    best = {x: min(fi(prefill(128, x)), key=fi(prefill(128, x)).get) for x in prefixes}
    crossing = [(a, b) for a, b in zip(prefixes, prefixes[1:]) if best[a] != best[b]]
    assert len(crossing) == 1 and crossing[0][0] <= 2000 <= crossing[0][1]
    assert crossing[0][1] < BISECT_FACTOR * max(crossing[0][0], 1)
    added = [i for i in items if i.level and i.workload.query_len == 128]
    wide = {"HWTUNE_TRITON_ATTN:tuned", "FLASHINFER:fa3", "FLASHINFER:fa2-tc", "FLASHINFER:fa2"}  # measured at both
    assert added and all(i.contenders and i.backends is not None for i in added)
    assert {frozenset(i.backends) for i in added} <= {
        frozenset(wide),
        frozenset(wide - {"FLASHINFER:fa2"}),
    }
    assert any("FLASHINFER:fa2" in i.backends for i in added)  # wide: every tactic measured at both neighbours
    assert any("FLASHINFER:fa2" not in i.backends for i in added)  # close: the contenders
    assert len(added) <= 5


def test_tactic_crossovers_of_a_backend_that_wins_nowhere_or_of_covered_tactics_add_nothing(monkeypatch) -> None:  # noqa: ANN001
    """TORCH_SDPA's tactics cross over, but it wins no point: selection will not route a phase to it. The Triton
    kernel's auto and tuned cross by noise, but tuned covers auto (selection keeps tuned where both were measured),
    so that is no choice to locate, with tactic crossovers bisected or not. A tactic measured at one neighbour only
    is no crossover of that backend's tactics either."""
    from hwtune.tuner import schedule

    lo, hi = prefill(128, 0), prefill(128, 32768)
    covered = _both(lo, {"fa3": 10.0}, HWTUNE_TRITON_ATTN={"auto": 12.0, "tuned": 9.0}) + _both(
        hi, {"fa3": 100.0}, HWTUNE_TRITON_ATTN={"auto": 80.0, "tuned": 81.0}
    )
    assert bisections([lo, hi], covered) == []  # the default
    monkeypatch.setattr(schedule, "TACTIC_CROSSOVERS", True)
    assert bisections([lo, hi], covered) == []
    sdpa = _both(lo, {"fa3": 10.0}, TORCH_SDPA={"flash": 30.0, "cudnn": 60.0}) + _both(
        hi, {"fa3": 100.0}, TORCH_SDPA={"flash": 900.0, "cudnn": 400.0}
    )
    assert bisections([lo, hi], sdpa) == []
    long = prefill(2048, 0)  # FlashInfer wins here, so its tactics are routable
    one_side = _both(lo, {"fa3": 10.0, "fa2-tc": 20.0}, HWTUNE_TRITON_ATTN={"tuned": 5.0}) + _both(
        hi, {"fa2-tc": 50.0}, HWTUNE_TRITON_ATTN={"tuned": 40.0}
    )
    one_side += _both(long, {"fa3": 30.0}, HWTUNE_TRITON_ATTN={"tuned": 60.0})
    assert all(i.workload.query_len != 128 for i in bisections([lo, hi, long], one_side))


def test_a_backend_that_wins_one_phase_has_its_tactic_crossovers_located_in_the_other(monkeypatch) -> None:  # noqa: ANN001
    """FlashInfer wins prefill and no decode point, but an engine that runs one backend for both phases would run its
    decode tactics: their crossover (xqa to fa2 along the context) is bisected, measuring them and the winner."""
    from hwtune.tuner import schedule

    monkeypatch.setattr(schedule, "TACTIC_CROSSOVERS", True)
    lo, hi, pre = decode(1, 512), decode(1, 32768), prefill(2048, 0)
    rec = _both(lo, {"xqa": 10.0, "fa2": 14.0}, HWTUNE_TRITON_ATTN={"tuned": 8.0})
    rec += _both(hi, {"xqa": 90.0, "fa2": 60.0}, HWTUNE_TRITON_ATTN={"tuned": 50.0})
    rec += _both(pre, {"fa3": 30.0}, HWTUNE_TRITON_ATTN={"tuned": 60.0})
    [new] = bisections([lo, hi, pre], rec)
    assert new.workload.phase == "decode" and new.contenders
    assert set(new.backends) == {"HWTUNE_TRITON_ATTN:tuned", "FLASHINFER:xqa", "FLASHINFER:fa2"}


def test_a_point_whose_contenders_its_neighbours_do_not_measure_is_not_added() -> None:
    """Items planned for one backend (FLASHMLA at its own block size) between neighbours where other backends,
    timed by another run of the store, cross: the contenders are none of the items' backends, so nothing is added
    (an empty list once read as "no list", which measured every backend)."""
    lo, hi = decode(1, 2048), decode(1, 2048 * WIDE_FACTOR // 2)
    lo, hi = (PlanItem(i.workload, 0, ("FLASHMLA",), contenders=True) for i in (lo, hi))
    rec = timed(lo, xqa=10.0, fa2=12.0) + timed(hi, xqa=30.0, fa2=25.0)
    assert bisections([lo, hi], rec) == []
    rec += timed(lo, "FLASHMLA", default=11.0) + timed(hi, "FLASHMLA", default=26.0)
    [new] = bisections([lo, hi], rec)  # FLASHMLA a contender at both ends: measured, and only it
    assert new.backends == ("FLASHMLA:default",) and narrowed(new, None) == ("FLASHMLA:default",)

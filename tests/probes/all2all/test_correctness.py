"""The checker itself: a perfect exchange passes, and each kind of corruption is caught (no spawning)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hwtune.probes.all2all.candidates.base import Dispatched, LocalBatch
from hwtune.probes.all2all.correctness import (
    Sources,
    Verdict,
    build_sources,
    identity_expert,
    verify_combine,
    verify_dispatch,
)
from hwtune.probes.all2all.payload import dequantize
from tests.probes.all2all.conftest import spec

S = spec(ep=2, experts=8, topk=3, hidden=128, quant="fp8")
T = 6


def _perfect(sources: Sources, rank: int) -> Dispatched:
    """What a correct all-gather candidate delivers to ``rank``."""
    parts = [torch.cat([b.payload.parts[i] for b in sources.batches]) for i in range(2)]
    ids = torch.cat([b.topk_ids for b in sources.batches]).long()
    lo = rank * 4
    ids = torch.where((ids >= lo) & (ids < lo + 4), ids, torch.full_like(ids, -1))
    idx = torch.arange(2 * T)
    return Dispatched(
        payload=sources.batches[0].payload.with_parts(parts),
        expert_ids=ids,
        weights=torch.cat([b.topk_weights for b in sources.batches]),
        src_rank=idx // T,
        src_token=idx % T,
    )


def _combine(sources: Sources, rank: int) -> torch.Tensor:
    """The sum of both ranks' identity-expert outputs for ``rank``'s tokens."""
    total = torch.zeros(T, S.hidden_size)
    for r in range(2):
        out = identity_expert(_perfect(sources, r)).float()
        total += out[rank * T : (rank + 1) * T]
    return total.to(torch.bfloat16)


@pytest.fixture(scope="module")
def sources() -> Sources:
    return build_sources(S, T, "uniform", seed=5, device=torch.device("cpu"))


def _verdict(d: Dispatched, sources: Sources, rank: int = 0) -> Verdict:
    v = Verdict(rank=rank)
    verify_dispatch(d, sources, S, rank, v)
    return v


def test_perfect_exchange_passes(sources: Sources) -> None:
    for rank in range(2):
        v = _verdict(_perfect(sources, rank), sources, rank)
        assert v.passed, v.reasons
        verify_combine(_combine(sources, rank), sources.batches[rank], S, v)
        assert v.passed, v.reasons
        assert v.figures["missing_pairs"] == 0 and v.figures["max_abs_err"] < 0.1


def test_missing_duplicate_and_foreign_pairs_fail(sources: Sources) -> None:
    d = _perfect(sources, 0)
    dropped = dataclasses.replace(d, expert_ids=d.expert_ids.clone())
    dropped.expert_ids[dropped.expert_ids >= 0] = -1  # nothing arrives
    assert "missing" in " ".join(_verdict(dropped, sources).reasons)

    dup = dataclasses.replace(
        d,
        expert_ids=torch.cat([d.expert_ids, d.expert_ids[:1]]),
        weights=torch.cat([d.weights, d.weights[:1]]),
        src_rank=torch.cat([d.src_rank, d.src_rank[:1]]),
        src_token=torch.cat([d.src_token, d.src_token[:1]]),
        payload=d.payload.with_parts([torch.cat([p, p[:1]]) for p in d.payload.parts]),
    )
    v = _verdict(dup, sources)
    assert not v.passed and (v.figures["duplicate_pairs"] > 0 or v.figures["unexpected_pairs"] > 0)

    foreign = dataclasses.replace(d, expert_ids=torch.where(d.expert_ids >= 0, d.expert_ids + 4, d.expert_ids))
    assert any("live on other ranks" in r for r in _verdict(foreign, sources).reasons)


def test_changed_weight_bytes_and_origin_fail(sources: Sources) -> None:
    d = _perfect(sources, 1)
    w = d.weights.clone()
    w[d.expert_ids >= 0] += 1e-3
    assert any("weights changed" in r for r in _verdict(dataclasses.replace(d, weights=w), sources, 1).reasons)

    q = d.payload.parts[0].view(torch.uint8).clone()
    q[3, 7] ^= 1
    bad = dataclasses.replace(d, payload=d.payload.with_parts([q.view(torch.float8_e4m3fn), d.payload.parts[1]]))
    v = _verdict(bad, sources, 1)
    assert v.figures["content_mismatch_rows"] == 1 and not v.passed

    wrong_src = dataclasses.replace(d, src_token=(d.src_token + 1) % T)
    assert not _verdict(wrong_src, sources, 1).passed
    out_of_range = dataclasses.replace(d, src_rank=d.src_rank + 5)
    assert any("does not exist" in r for r in _verdict(out_of_range, sources, 1).reasons)
    assert not _verdict(dataclasses.replace(d, src_rank=None), sources, 1).passed


def test_combine_check_catches_a_missing_expert_and_nans(sources: Sources) -> None:
    batch: LocalBatch = sources.batches[0]
    good = _combine(sources, 0)
    v = Verdict(0)
    verify_combine(good, batch, S, v)
    assert v.passed
    # drop the smallest single expert contribution of one token: still beyond tolerance
    w = batch.topk_weights
    missing = good.float().clone()
    x = dequantize(batch.payload)
    missing[2] -= x[2] * w[2].min()
    v = Verdict(0)
    verify_combine(missing.to(torch.bfloat16), batch, S, v)
    assert not v.passed and v.figures["mismatched_elements"] > 0
    nan = good.clone()
    nan[0, 0] = float("nan")
    v = Verdict(0)
    verify_combine(nan, batch, S, v)
    assert not v.passed and v.figures["mismatched_elements"] >= 1
    v = Verdict(0)
    verify_combine(good[:-1], batch, S, v)
    assert "shape" in v.reasons[0]


def test_identity_expert_ignores_padding_garbage(sources: Sources) -> None:
    d = _perfect(sources, 0)
    parts = [p.clone() for p in d.payload.parts]
    parts[1][0] = float("nan")
    d = dataclasses.replace(d, payload=d.payload.with_parts(parts), valid=torch.arange(d.num_rows) != 0)
    out = identity_expert(d)
    assert torch.isfinite(out.float()).all() and out[0].abs().sum() == 0

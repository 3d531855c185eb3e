"""Inputs: routing is deterministic and skews as declared; payloads round-trip and pack as FlashInfer's."""

from __future__ import annotations

import pytest
import torch

from hwtune.probes.all2all import payload as P
from hwtune.probes.all2all.routing import (
    make_hidden,
    make_routing,
    owner_rank,
    receive_load,
    remote_token_targets,
)


def test_routing_is_deterministic_per_seed_and_rank() -> None:
    a = make_routing(64, 16, 4, "uniform", seed=3, rank=1)
    b = make_routing(64, 16, 4, "uniform", seed=3, rank=1)
    c = make_routing(64, 16, 4, "uniform", seed=3, rank=2)
    assert torch.equal(a.topk_ids, b.topk_ids) and torch.equal(a.topk_weights, b.topk_weights)
    assert not torch.equal(a.topk_ids, c.topk_ids)
    assert a.topk_ids.dtype == torch.int32 and a.topk_weights.dtype == torch.float32
    assert all(len(set(row)) == 4 for row in a.topk_ids.tolist()), "experts of a token are distinct"
    assert 0.5 <= float(a.topk_weights.min()) and float(a.topk_weights.max()) < 1.0
    assert torch.equal(make_hidden(4, 8, seed=3, rank=1), make_hidden(4, 8, seed=3, rank=1))


def test_skewed_routing_overloads_rank_zero() -> None:
    ids = {k: [make_routing(512, 32, 4, k, seed=0, rank=r).topk_ids for r in range(4)] for k in ("uniform", "skewed")}
    uniform, skewed = receive_load(ids["uniform"], 32, 4), receive_load(ids["skewed"], 32, 4)
    assert sum(uniform) == sum(skewed) == 4 * 512 * 4
    assert max(uniform) / min(uniform) < 1.2
    assert skewed[0] > 2 * sum(skewed) / 4 and skewed[0] == max(skewed)


def test_owner_and_remote_targets() -> None:
    ids = torch.tensor([[0, 7], [4, 5], [1, 2]], dtype=torch.int32)
    assert owner_rank(ids.long(), 8, 2).tolist() == [[0, 1], [1, 1], [0, 0]]
    # rank 0 sends token 0 to rank 1 once and token 1 to rank 1 once (two experts there: one copy)
    assert remote_token_targets(ids, 8, 2, rank=0) == 2
    with pytest.raises(ValueError, match="unknown routing"):
        make_routing(4, 8, 2, "zipf", seed=0, rank=0)


def test_e2m1_codes_pack_low_nibble_first() -> None:
    vals = torch.tensor([[0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -6.0, 2.6, 7.0]])
    codes = P.e2m1_encode(vals)
    assert codes.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7, 9, 15, 5, 7]]
    packed = P.pack_nibbles(codes)
    assert packed[0, 0].item() == 0 | (1 << 4) and packed[0, 4].item() == 9 | (15 << 4)
    assert torch.equal(P.unpack_nibbles(packed), codes)
    assert P.e2m1_decode(codes).tolist()[0][:10] == [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -6]


@pytest.mark.parametrize("kind,rel", [("bf16", 0.0), ("fp8", 0.07), ("nvfp4", 0.35)])
def test_quantise_round_trip_and_layout(kind: str, rel: float) -> None:
    x = make_hidden(8, 512, seed=0, rank=0)
    gs = P.nvfp4_global_scale(float(x.float().abs().max())) if kind == "nvfp4" else None
    p = P.quantize(x, kind, gs)
    assert [t.dtype for t in p.parts] == P.part_dtypes(kind)
    assert [t.shape[1] for t in p.parts] == P.part_widths(kind, 512)
    assert p.bytes_per_token() == P.bytes_per_token(kind, 512)
    err = (P.dequantize(p) - x.float()).abs()
    # error within each format's step: relative to the block maximum (fp8: 2^-3 step near the top)
    assert float(err.max()) <= rel * float(x.float().abs().max()) + 1e-6
    if kind == "fp8":
        assert p.parts[1].shape == (8, 4) and torch.allclose(p.parts[1], x.float().view(8, 4, 128).abs().amax(2) / 448)


def test_payload_shape_errors_are_clear() -> None:
    x = torch.zeros(2, 200, dtype=torch.bfloat16)
    with pytest.raises(P.PayloadShapeError, match="multiple of 128"):
        P.quantize(x, "fp8")
    with pytest.raises(P.PayloadShapeError, match="multiple of 16"):
        P.quantize(torch.zeros(2, 24, dtype=torch.bfloat16), "nvfp4", 1.0)
    with pytest.raises(ValueError, match="global_scale"):
        P.quantize(torch.zeros(2, 32, dtype=torch.bfloat16), "nvfp4")


def test_pack_rows_round_trip_mixed_dtypes() -> None:
    parts = [
        torch.randn(5, 3).to(torch.float8_e4m3fn),
        torch.arange(10, dtype=torch.int32).view(5, 2),
        torch.randn(5, 4, dtype=torch.bfloat16),
    ]
    rows = P.pack_rows(parts)
    assert rows.shape == (5, 3 + 8 + 8) and rows.dtype == torch.uint8
    back = P.unpack_rows(rows, [p.dtype for p in parts], [3, 2, 4])
    assert all(torch.equal(P.as_bytes(a), P.as_bytes(b)) for a, b in zip(parts, back))
    with pytest.raises(ValueError, match="row holds"):
        P.unpack_rows(rows, [torch.int32], [1])

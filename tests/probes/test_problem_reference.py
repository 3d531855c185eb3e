"""Problem builder, float32 reference, LSE merge, correctness gate and timing statistics, on CPU."""

import math

import pytest
import torch

from hwtune.core.records import LatencyStats
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.probes.attention.correctness import compare, tolerances
from hwtune.probes.attention.problem import POISON, build_problem, split_halves, varied_lengths
from hwtune.probes.attention.reference import merge_by_lse, reference_attention
from hwtune.probes.timing import median_ci_rel

SPEC = AttentionSpec(8, 2, 32, dtype="float32", block_size=16)


def sdpa_ref(p, r):
    k, v = p.gather_kv(r)
    q = p.q[p.query_slice(r)].float()
    m, n = q.shape[0], k.shape[0]
    mask = torch.arange(n)[None, :] <= (n - m + torch.arange(m))[:, None]
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], attn_mask=mask, enable_gqa=True
    )
    return o[0].transpose(0, 1)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize(
    "phase, kw", [("decode", {}), ("prefill", {"query_len": 20}), ("mixed", {"query_len": 20, "num_prefill": 1})]
)
def test_reference_matches_sdpa_on_gathered_kv(layout: str, phase: str, kw: dict) -> None:
    w = AttentionWorkload(SPEC, phase, batch=3, context_len=50, **kw)
    p = build_problem(w, "cpu", seed=3, layout=layout)
    out, lse = reference_attention(p)
    for r in range(p.batch):
        torch.testing.assert_close(out[p.query_slice(r)], sdpa_ref(p, r), rtol=1e-5, atol=1e-5)
    assert torch.isfinite(lse).all()


def test_pages_are_shuffled_and_unowned_slots_poisoned() -> None:
    w = AttentionWorkload(SPEC, "decode", batch=4, context_len=37)
    p = build_problem(w, "cpu", seed=1)
    first_pages = p.block_table[:, 0].tolist()
    assert first_pages != sorted(first_pages) or p.block_table[0, 1] != p.block_table[0, 0] + 1
    # the tail of every request's last page is poisoned
    last = p.block_table[0, 2].item()
    assert (p.kv_cache[last, 0, 37 - 32 :] == POISON).all()
    assert (p.kv_cache[last, 0, : 37 - 32].abs() < 100).all()


def test_fp8_cache_dequantises_with_scales() -> None:
    spec = AttentionSpec(8, 2, 32, kv_cache_dtype="fp8", block_size=16)
    p = build_problem(AttentionWorkload(spec, "decode", batch=2, context_len=40), "cpu", seed=0)
    assert p.is_fp8 and 0 < p.k_scale < 1
    k, _ = p.gather_kv(0)
    assert k.abs().max() <= 448 * p.k_scale * 1.001


def test_second_batch_in_place_keeps_buffers() -> None:
    w = AttentionWorkload(SPEC, "decode", batch=3, context_len=60)
    a = build_problem(w, "cpu", seed=0)
    q_ptr, kv_ptr, bt_ptr = a.q.data_ptr(), a.kv_cache.data_ptr(), a.block_table.data_ptr()
    ref_a = reference_attention(a)[0].clone()
    b = build_problem(varied_lengths(w, 1), "cpu", seed=1, like=a)
    assert (b.q.data_ptr(), b.kv_cache.data_ptr(), b.block_table.data_ptr()) == (q_ptr, kv_ptr, bt_ptr)
    assert b.seq_lens_list != a.seq_lens_list
    again = build_problem(w, "cpu", seed=0, like=a)
    torch.testing.assert_close(reference_attention(again)[0], ref_a)


def test_split_halves_merge_to_the_whole() -> None:
    w = AttentionWorkload(SPEC, "decode", batch=3, context_len=70)
    p = build_problem(w, "cpu", seed=2)
    full = reference_attention(p)
    a, b = split_halves(p)
    merged = merge_by_lse(*reference_attention(a), *reference_attention(b))
    torch.testing.assert_close(merged[0], full[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(merged[1], full[1], rtol=1e-5, atol=1e-5)


def test_sliding_window_and_soft_cap_change_the_reference() -> None:
    base = AttentionWorkload(SPEC, "decode", batch=2, context_len=64)
    plain = reference_attention(build_problem(base, "cpu", seed=4))[0]
    for spec in (
        AttentionSpec(8, 2, 32, dtype="float32", sliding_window=16),
        AttentionSpec(8, 2, 32, dtype="float32", logits_soft_cap=0.5),
    ):
        other = reference_attention(build_problem(AttentionWorkload(spec, "decode", 2, 64), "cpu", seed=4))[0]
        assert (other - plain).abs().max() > 1e-3


def test_correctness_gate() -> None:
    ref = torch.randn(100, 4, 16)
    rel, _ = tolerances("bfloat16", "auto")
    assert compare(ref + 1e-4 * torch.randn_like(ref), ref, rel_tol=rel).ok
    nan = ref.clone()
    nan[3, 1, 2] = math.nan
    v = compare(nan, ref, rel_tol=rel)
    assert not v.ok and v.figures["unwritten"] == 1
    one_row = ref.clone()
    one_row[7, 2] *= -1
    v = compare(one_row, ref, rel_tol=0.3)  # passes overall at a loose tolerance, not per row
    assert not v.ok and any("row 7 head 2" in p for p in v.problems)
    v = compare(ref, ref, rel_tol=rel, lse=torch.zeros(100, 4), ref_lse=torch.full((100, 4), 0.2), lse_tol=0.03)
    assert not v.ok and "LSE differs" in v.problems[0]


def test_latency_stats_and_median_ci() -> None:
    s = LatencyStats.from_samples([10.0, 11.0, 9.0, 10.5, 10.2, 9.8, 10.1, 10.0, 9.9, 10.3])
    assert s.p10_us <= s.median_us <= s.p90_us and s.n == 10 and 9.5 < s.median_us < 10.5
    tight = median_ci_rel([100.0 + 0.01 * (i % 7) for i in range(200)])
    loose = median_ci_rel([100.0 * (1 + (i % 5)) for i in range(30)])
    assert tight < 0.01 < loose
    with pytest.raises(ValueError):
        LatencyStats(median_us=float("nan"), p10_us=1, p90_us=2, mean_us=1, n=3, spread=0.1)

"""The MLA problem (latent cache, absorbed queries) and its float32 reference, on CPU: the reference is ordinary
multi-head attention over the up-projected latent and must agree with the absorbed computation, the scale is the
model's, and the gate's latent comparison catches the mistakes an MLA kernel can make."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from hwtune.core.model_config import attention_spec, load_model_config
from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.probes.attention.candidates.mla_torch import TorchMlaRunner
from hwtune.probes.attention.correctness import compare_latent, tolerances
from hwtune.probes.attention.mla import MlaProblem, mla_softmax_scale
from hwtune.probes.attention.problem import POISON, build_problem, second_batch_lengths, split_halves
from hwtune.probes.attention.reference import merge_by_lse, reference_attention

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
SMALL = AttentionSpec(
    8, 1, 80, dtype="float32", block_size=16, use_mla=True, kv_lora_rank=64, qk_rope_head_dim=16,
    qk_nope_head_dim=32, v_head_dim=24,
)  # fmt: skip


def _w(spec: AttentionSpec = SMALL, phase: str = "decode", **kw) -> AttentionWorkload:  # noqa: ANN003
    kw.setdefault("context_lens", (50, 17, 33))
    return AttentionWorkload(spec, phase, len(kw["context_lens"]), max(kw["context_lens"]), **kw)


def _absorbed(p: MlaProblem) -> tuple[torch.Tensor, torch.Tensor]:
    """Latent attention as an absorbed kernel computes it, in float64: q = [q_nope W_UK^T, q_pe] against the
    latent rows, output p @ ckv, then projected by W_UV."""
    d = p.dims
    q = torch.cat([torch.einsum("thc,hlc->thl", p.q_nope.double(), p.w_uk.double()), p.q_pe.double()], -1)
    out = torch.empty(p.num_tokens, p.spec.num_heads, d.lora, dtype=torch.float64)
    lse = torch.empty(p.num_tokens, p.spec.num_heads, dtype=torch.float64)
    for r in range(p.batch):
        lat = p.gather_latent(r).double()
        sl = p.query_slice(r)
        s = torch.einsum("mhl,nl->hmn", q[sl], lat) * p.softmax_scale
        m, n = s.shape[1], s.shape[2]
        s = s.masked_fill(torch.arange(n)[None, :] > torch.arange(n - m, n)[:, None], -math.inf)
        lse[sl] = torch.logsumexp(s, -1).T
        out[sl] = torch.einsum("hmn,nl->mhl", torch.softmax(s, -1), lat[:, : d.lora])
    return p.project(out.float()).double(), lse


@pytest.mark.parametrize("query_len", [1, 3])
def test_reference_is_the_absorbed_computation_unabsorbed(query_len: int) -> None:
    p = build_problem(_w(query_len=query_len), "cpu", seed=2)
    ref_out, ref_lse = reference_attention(p)
    out, lse = _absorbed(p)
    assert ref_out.shape == (p.num_tokens, 8, 24)  # v_head_dim, not the latent width
    torch.testing.assert_close(ref_out.double(), out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ref_lse.double(), lse, rtol=1e-5, atol=1e-5)


def test_scale_is_the_models_query_key_width() -> None:
    spec = attention_spec(load_model_config(MODELS / "deepseek-v3.json"), 8)
    assert spec.num_heads == 16 and spec.head_size == 576
    assert mla_softmax_scale(spec) == pytest.approx(1 / math.sqrt(128 + 64))
    p = build_problem(AttentionWorkload(spec, "decode", 2, 40), "cpu")
    assert isinstance(p, MlaProblem) and p.softmax_scale == pytest.approx(1 / math.sqrt(192))
    assert p.q.shape == (2, 16, 576) and p.kv_cache.shape[1:] == (16, 576) and p.q.dtype == torch.bfloat16


def test_latent_cache_pages_are_shuffled_and_unowned_slots_poisoned() -> None:
    p = build_problem(_w(context_lens=(37, 37, 37, 37)), "cpu", seed=1)
    assert p.block_table[:, 0].tolist() != sorted(p.block_table[:, 0].tolist())
    last = p.block_table[0, 2].item()
    assert (p.kv_cache[last, 37 - 32 :] == POISON).all() and (p.kv_cache[last, : 37 - 32].abs() < 100).all()
    with pytest.raises(TypeError, match="one latent cache"):
        p.k_cache()


def test_fp8_latent_dequantises_with_one_scale() -> None:
    spec = dataclasses.replace(SMALL, dtype="bfloat16", kv_cache_dtype="fp8")
    p = build_problem(_w(spec), "cpu")
    assert p.is_fp8 and p.k_scale == p.v_scale == p.kv_scale and 0 < p.kv_scale < 1
    assert p.gather_latent(0).abs().max() <= 448 * p.kv_scale * 1.001
    assert tolerances(spec.dtype, spec.kv_cache_dtype)[0] == 5e-2


def test_second_batch_is_written_into_the_same_buffers_with_the_same_weights() -> None:
    w = _w()
    a = build_problem(w, "cpu", seed=0)
    addresses = [t.data_ptr() for t in (a.q, a.kv_cache, a.block_table, a.seq_lens, a.query_start_loc)]
    w_uk = a.w_uk.clone()
    b = build_problem(w, "cpu", seed=1, like=a, lengths=second_batch_lengths(w, 1))
    assert [t.data_ptr() for t in (b.q, b.kv_cache, b.block_table, b.seq_lens, b.query_start_loc)] == addresses
    assert torch.equal(b.w_uk, w_uk) and b.seq_lens_list != a.seq_lens_list


@pytest.mark.parametrize("query_len", [1, 3])
def test_dcp_halves_merge_to_the_whole(query_len: int) -> None:
    p = build_problem(_w(context_lens=(70, 40, 100), query_len=query_len), "cpu", seed=4)
    first, second = split_halves(p)
    assert isinstance(first, MlaProblem) and first.causal == (query_len == 1)
    parts = []
    for half in (first, second):
        runner = TorchMlaRunner()
        runner.prepare(half)
        runner.run()
        parts.append((runner.out.clone(), runner.lse.clone()))
    out, lse = merge_by_lse(*parts[0], *parts[1])
    ref_out, ref_lse = reference_attention(p)
    v = compare_latent(out, ref_out, project=p.project, rel_tol=1e-4, lse=lse, ref_lse=ref_lse, lse_tol=1e-4)
    assert v.ok, v.problems


def _run(p: MlaProblem) -> tuple[torch.Tensor, torch.Tensor]:
    runner = TorchMlaRunner()
    runner.prepare(p)
    runner.run()
    return runner.out, runner.lse


def _gate(p: MlaProblem, out: torch.Tensor, lse: torch.Tensor):  # noqa: ANN202 - Verdict
    ref_out, ref_lse = reference_attention(p)
    return compare_latent(out, ref_out, project=p.project, rel_tol=2e-2, lse=lse, ref_lse=ref_lse, lse_tol=3e-2)


def _swap_ckv_kpe(p: MlaProblem) -> MlaProblem:
    """The cache as a kernel would read it that takes kpe first: the same rows, the parts in the other order."""
    d = p.dims
    return dataclasses.replace(p, kv_cache=torch.cat([p.kv_cache[..., d.lora :], p.kv_cache[..., : d.lora]], -1))


@pytest.mark.parametrize(
    "mistake",
    ["none", "latent width in the scale", "ckv and kpe swapped", "rope part ignored", "one page skipped"],
)
def test_the_gate_catches_mla_mistakes(mistake: str) -> None:
    spec = dataclasses.replace(SMALL, dtype="bfloat16")
    p = build_problem(_w(spec, query_len=2), "cpu", seed=5)
    wrong = p
    if mistake == "latent width in the scale":
        wrong = dataclasses.replace(p, softmax_scale=1 / math.sqrt(p.dims.latent))
    elif mistake == "ckv and kpe swapped":
        wrong = _swap_ckv_kpe(p)
    elif mistake == "rope part ignored":
        q = p.q.clone()
        q[..., p.dims.lora :] = 0
        wrong = dataclasses.replace(p, q=q)
    elif mistake == "one page skipped":
        table = p.block_table.clone()
        table[0, 1] = table[0, 0]
        wrong = dataclasses.replace(p, block_table=table)
    out, lse = _run(wrong)
    v = _gate(p, out, lse)
    assert v.ok == (mistake == "none"), (mistake, v.figures)


def test_unwritten_latent_elements_are_counted_on_the_latent() -> None:
    p = build_problem(_w(dataclasses.replace(SMALL, dtype="bfloat16")), "cpu")
    out, lse = _run(p)
    out = out.clone()
    out[0, 0, 3] = math.nan
    v = _gate(p, out, lse)
    assert not v.ok and v.figures["unwritten"] == 1
    assert "1 of" in v.problems[0] and "latent output elements were never written" in v.problems[0]


def test_torch_mla_runs_long_queries_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long prefill's scores are made a chunk of query rows at a time (bounded memory): the same answer."""
    from hwtune.probes.attention.candidates import mla_torch

    p = build_problem(_w(phase="prefill", query_len=12, context_lens=(40, 12)), "cpu", seed=6)
    whole = [t.clone() for t in _run(p)]
    monkeypatch.setattr(mla_torch, "_CHUNK_ELEMENTS", 1)  # one query row per chunk
    chunked = _run(p)
    torch.testing.assert_close(chunked[0], whole[0])
    torch.testing.assert_close(chunked[1], whole[1])
    assert _gate(p, *chunked).ok

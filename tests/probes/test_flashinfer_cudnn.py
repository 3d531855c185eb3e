"""FLASHINFER's cudnn tactic on the CPU, with a stand-in for ``flashinfer.cudnn`` (FlashInfer needs a GPU).

The runner calls ``cudnn_batch_prefill_with_kv_cache`` itself, because FlashInfer 0.6.18's prefill wrapper hands
cuDNN a ``[tokens, heads]`` LSE where it requires ``[batch, max_query_len, heads]`` (every shape errored on an
H100). The stand-in checks the arguments as FlashInfer's function does (LSE shape, lengths as ``[batch, 1, 1, 1]``,
element offsets) and attends in float32 over the paged cache; the runner's output and the LSE it gathers from the
padded one must then equal the shared reference on a ragged batch. The availability check is tested too: without the
cuDNN frontend, FlashInfer's fallback cubins are SM 10.x only and fetched at first use.
"""

from __future__ import annotations

import math
import sys
import types

import pytest
import torch

from hwtune.core.types import AttentionSpec, AttentionWorkload
from hwtune.probes.attention.candidates import flashinfer as fi_candidate
from hwtune.probes.attention.problem import build_problem
from hwtune.probes.attention.reference import reference_attention

SPEC = AttentionSpec(num_heads=8, num_kv_heads=2, head_size=128, dtype="float32", kv_layout="NHD", block_size=16)
RAGGED = AttentionWorkload(SPEC, "prefill", 3, 100, query_len=24, context_lens=(100, 24, 61))
LENGTHS = ([5, 24, 17], [100, 24, 61])  # ragged chunks (LSE padding rows) on prefixes of 95, 0 and 44


def _fake_cudnn_prefill(q, k_cache, v_cache, scale, workspace, *, max_token_per_sequence, max_sequence_kv,
                        actual_seq_lens_q, actual_seq_lens_kv, block_tables, causal, return_lse,
                        batch_offsets_q, batch_offsets_o, out, lse):  # fmt: skip
    """Float32 paged attention with FlashInfer's argument checks; the query rows are end-aligned (causal)."""
    b, heads, dim = actual_seq_lens_q.shape[0], q.shape[1], q.shape[2]
    assert actual_seq_lens_q.shape == (b, 1, 1, 1) and actual_seq_lens_kv.shape == (b, 1, 1, 1)
    assert lse.shape == (b, max_token_per_sequence, heads), "lse must have shape (num_sequences, max_token, h_qo)"
    assert return_lse and causal
    kv_heads, page = k_cache.shape[1], k_cache.shape[2]  # FlashInfer's docstring: [pages, kv_heads, page, dim]
    # cuDNN 9.19's paged load (its error on the H100, 2026-11-25): "block table size must equal ceil(s_kv/block_size)"
    assert block_tables.shape[1] == math.ceil(max_sequence_kv / page), "block table size must equal ceil(s_kv/page)"
    assert int(actual_seq_lens_kv.max()) <= max_sequence_kv
    for r in range(b):
        m, n = int(actual_seq_lens_q[r]), int(actual_seq_lens_kv[r])
        start = int(batch_offsets_q[r]) // (heads * dim)
        assert int(batch_offsets_o[r]) == int(batch_offsets_q[r])
        pages = block_tables[r, : math.ceil(n / page)].long()
        k, v = (
            c[pages].transpose(1, 2).reshape(-1, kv_heads, dim)[:n].float().repeat_interleave(heads // kv_heads, 1)
            for c in (k_cache, v_cache)
        )
        s = torch.einsum("qhd,khd->hqk", q[start : start + m].float(), k) * scale
        visible = torch.arange(n)[None, :] <= (n - m + torch.arange(m))[:, None]
        s = s.masked_fill(~visible, float("-inf"))
        out[start : start + m] = torch.einsum("hqk,khd->qhd", s.softmax(-1), v).to(out.dtype)
        lse[r, :m] = s.logsumexp(-1).T
        lse[r, m:] = float("nan")  # padding rows: a runner must not read them


@pytest.fixture
def fake_flashinfer(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """``flashinfer``, ``flashinfer.decode``, ``flashinfer.cudnn`` and ``flashinfer.cudnn.prefill`` stand-ins."""
    root = types.ModuleType("flashinfer")
    cudnn = types.ModuleType("flashinfer.cudnn")
    cudnn_prefill = types.ModuleType("flashinfer.cudnn.prefill")
    cudnn.cudnn_batch_prefill_with_kv_cache = _fake_cudnn_prefill
    cudnn_prefill.CUDNN_AVAILABLE = True
    root.decode, root.cudnn = types.ModuleType("flashinfer.decode"), cudnn
    modules = {"flashinfer": root, "flashinfer.decode": root.decode, "flashinfer.cudnn": cudnn}
    modules["flashinfer.cudnn.prefill"] = cudnn_prefill
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return types.SimpleNamespace(prefill=cudnn_prefill)


@pytest.mark.usefixtures("fake_flashinfer")
def test_cudnn_runner_gathers_the_padded_lse_per_token() -> None:
    problem = build_problem(RAGGED, "cpu", seed=3, layout="NHD", lengths=LENGTHS)
    runner = fi_candidate.FlashInferRunner(RAGGED, "cudnn")
    runner.prepare(problem)
    runner.run()
    ref_out, ref_lse = reference_attention(problem)
    torch.testing.assert_close(runner.out.float(), ref_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(runner.lse_natural(), ref_lse, atol=1e-4, rtol=1e-4)


@pytest.mark.usefixtures("fake_flashinfer")
def test_cudnn_runs_a_shorter_batch_planned_into_the_first_batchs_table() -> None:
    """The gate's batch B keeps batch A's block table (wider than B's longest request needs); cuDNN declined every
    such batch on the H100 until the runner passed the table's capacity as max_sequence_kv."""
    first = build_problem(RAGGED, "cpu", seed=3, layout="NHD", lengths=LENGTHS)
    second = build_problem(RAGGED, "cpu", seed=4, like=first, lengths=([5, 24, 17], [40, 24, 61]))
    assert first.block_table.shape[1] > math.ceil(second.max_seq_len / SPEC.block_size)
    runner = fi_candidate.FlashInferRunner(RAGGED, "cudnn")
    runner.prepare(first)
    runner.prepare(second)
    runner.run()
    ref_out, ref_lse = reference_attention(second)
    torch.testing.assert_close(runner.out.float(), ref_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(runner.lse_natural(), ref_lse, atol=1e-4, rtol=1e-4)


def test_cudnn_needs_the_frontend_off_blackwell(fake_flashinfer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    assert fi_candidate.cudnn_unavailable(cubin_fallback=True) is None  # the frontend is there
    fake_flashinfer.prefill.CUDNN_AVAILABLE = False
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    reason = fi_candidate.cudnn_unavailable(cubin_fallback=True)
    assert reason is not None and "nvidia-cudnn-frontend" in reason and "SM 10.x" in reason
    assert "nvidia-cudnn-frontend" in (fi_candidate.cudnn_unavailable(cubin_fallback=False) or "")


def test_cudnn_cubin_fallback_on_blackwell_needs_the_cubin(fake_flashinfer, monkeypatch, tmp_path) -> None:  # noqa: ANN001
    fake_flashinfer.prefill.CUDNN_AVAILABLE = False
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 0))
    artifacts, env = types.ModuleType("flashinfer.artifacts"), types.ModuleType("flashinfer.jit.env")
    artifacts.ArtifactPath = types.SimpleNamespace(CUDNN_SDPA="abc/fmha/cudnn/")
    env.FLASHINFER_CUBIN_DIR = tmp_path
    monkeypatch.setitem(sys.modules, "flashinfer.artifacts", artifacts)
    monkeypatch.setitem(sys.modules, "flashinfer.jit", types.ModuleType("flashinfer.jit"))
    monkeypatch.setitem(sys.modules, "flashinfer.jit.env", env)
    reason = fi_candidate.cudnn_unavailable(cubin_fallback=True)
    assert reason is not None and "flashinfer-cubin" in reason
    cubin = tmp_path / "abc/fmha/cudnn/cudnn_sm100_fprop_sdpa_prefill_d128_bf16.cubin"
    cubin.parent.mkdir(parents=True)
    cubin.write_bytes(b"\0")
    assert fi_candidate.cudnn_unavailable(cubin_fallback=True) is None
